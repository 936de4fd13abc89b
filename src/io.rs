//! The old path of [`crate::tierio::piece`], kept for code not yet moved to the new one
//! (the integration tests name `tierfs::io::AlignedBuf`); remove when nothing uses it.

pub use crate::tierio::piece::{
    bounce_bytes, dir_accepts_direct_io, dir_accepts_direct_io_of, read_full, AlignedBuf, Piece,
    ALIGN,
};
