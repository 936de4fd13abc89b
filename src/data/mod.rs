//! The data path: every way an open file's bytes (its state is
//! [`crate::inodes::file`]'s) are read and written: a handle's read or write ([`path`]) through the layout's extents ([`io`]),
//! through host memory ([`cached`], written back by [`writeback`], with the background
//! threads in [`prefetch`]), or while moving to a new layout ([`migrate`], over the steps
//! in [`moves`]; a file with one name keeps its old pieces by [`keep`], one with several names also in [`linked`]). Nothing here takes the tree lock to copy data.

pub mod cached;
pub mod io;
pub mod keep;
pub mod linked;
pub mod migrate;
pub mod moves;
pub mod path;
pub mod prefetch;
pub mod writeback;
