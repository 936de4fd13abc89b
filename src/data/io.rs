//! A file's bytes through its layout: reading and writing the extents of a whole-file or
//! striped layout on its open pieces, each as one batch on the tiers ([`crate::tierio`]),
//! with a tier's error mapped to the file. The lowest part of the data path: it knows
//! pieces and layouts, not handles, the cache or migrations.

use crate::error::{Error, Result};
use crate::inodes::file::FileState;
use crate::inodes::pieces;
use crate::layout::FileLayout;
use crate::tierio::{Class, Io, Op, Piece};
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) fn read_pieces(
    io: Io<'_>,
    st: &FileState,
    off: u64,
    buf: &mut [u8],
    class: Class,
) -> Result<()> {
    read_layout(io, &st.layout, &st.pieces, off, buf, false, class)
}

/// Reads logical bytes through `layout` from `pieces`. A striped piece shorter than the
/// file is a hole; a whole piece may be short only with `holes` (a move's new pieces).
pub(crate) fn read_layout(
    io: Io<'_>,
    layout: &FileLayout,
    pieces: &[Option<Arc<Piece>>],
    off: u64,
    buf: &mut [u8],
    holes: bool,
    class: Class,
) -> Result<()> {
    match layout {
        FileLayout::Whole { tier } => {
            let piece = pieces::piece_in(io.tiers(), pieces, *tier, "read")?;
            let got = piece_read_as(io, *tier, piece, buf, off, class)?;
            if holes {
                buf[got..].fill(0);
            } else if got < buf.len() {
                return Err(Error::ShortRead {
                    tier: io.tiers()[*tier].name.clone(),
                    path: PathBuf::from("(open file)"),
                    offset: off,
                    got,
                    want: buf.len(),
                });
            }
        }
        FileLayout::Stripe(_) => read_extents_in(io, layout, pieces, off, buf, class)?,
    }
    Ok(())
}

/// Reads a range of a file from its pieces as one engine batch (every tier at once);
/// where a piece is shorter than the range, zeros (a hole, or a cached file's tail that
/// is only in memory yet).
pub(crate) fn read_extents(
    io: Io<'_>,
    st: &FileState,
    off: u64,
    buf: &mut [u8],
    class: Class,
) -> Result<()> {
    read_extents_in(io, &st.layout, &st.pieces, off, buf, class)
}

/// [`read_extents`] through `layout` from `pieces` (a move's new ones, say).
pub(crate) fn read_extents_in(
    io: Io<'_>,
    layout: &FileLayout,
    pieces: &[Option<Arc<Piece>>],
    off: u64,
    buf: &mut [u8],
    class: Class,
) -> Result<()> {
    let exts = layout.extents(off, buf.len());
    let mut tiers = Vec::with_capacity(exts.len());
    let mut ops = Vec::with_capacity(exts.len());
    let mut rest: &mut [u8] = buf;
    for ex in &exts {
        let (dst, tail) = std::mem::take(&mut rest).split_at_mut(ex.len);
        rest = tail;
        tiers.push(ex.tier);
        ops.push(Op::Read {
            piece: pieces::piece_in(io.tiers(), pieces, ex.tier, "read")?,
            buf: dst,
            off: ex.local,
        });
    }
    let results = run_batch(io, class, &tiers, &mut ops);
    for ((op, r), t) in ops.iter_mut().zip(results).zip(tiers) {
        // Counted on its tier by `tierio`.
        let got = r.map_err(|e| Error::tier(&io.tiers()[t].name, "read", "(open file)", e))?;
        if let Op::Read { buf, .. } = op {
            buf[got..].fill(0);
        }
    }
    Ok(())
}

/// Runs backing requests (`ops[i]` on tier `tiers[i]`) as one batch of `class`
/// ([`crate::tierio::Io::submit`]: admission, engine, accounting); the caller maps errors.
pub(crate) fn run_batch(
    io: Io<'_>,
    class: Class,
    tiers: &[usize],
    ops: &mut [Op<'_>],
) -> Vec<std::io::Result<usize>> {
    io.submit(class, tiers, ops)
}

/// Writes a range of a file to its pieces as one engine batch; the first failure with
/// its tier (for the rescue that moves the file).
pub(crate) fn write_extents(
    io: Io<'_>,
    st: &FileState,
    off: u64,
    data: &[u8],
    class: Class,
) -> std::result::Result<(), (usize, std::io::Error)> {
    let exts = st.layout.extents(off, data.len());
    let mut tiers = Vec::with_capacity(exts.len());
    let mut ops = Vec::with_capacity(exts.len());
    for ex in &exts {
        let piece = pieces::open_piece(io.tiers(), st, ex.tier, "write").map_err(|_| {
            (
                ex.tier,
                std::io::Error::other("the tier is missing (mounted degraded without it)"),
            )
        })?;
        tiers.push(ex.tier);
        ops.push(Op::Write {
            piece,
            buf: &data[ex.buf..ex.buf + ex.len],
            off: ex.local,
        });
    }
    let results = run_batch(io, class, &tiers, &mut ops);
    for (r, t) in results.into_iter().zip(tiers) {
        r.map_err(|e| (t, e))?;
    }
    Ok(())
}

pub(crate) fn piece_read_as(
    io: Io<'_>,
    tier: usize,
    piece: &Piece,
    buf: &mut [u8],
    off: u64,
    class: Class,
) -> Result<usize> {
    io.read(class, tier, piece, buf, off)
        .map_err(|e| Error::tier(&io.tiers()[tier].name, "read", "(open file)", e))
}

pub(crate) fn piece_write(
    io: Io<'_>,
    tier: usize,
    piece: &Piece,
    buf: &[u8],
    off: u64,
) -> std::io::Result<()> {
    io.write(Class::DemandWrite, tier, piece, buf, off)
}
