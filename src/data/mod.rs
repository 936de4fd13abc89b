//! The data path: an open file's state ([`file`]) and every way its bytes are read and
//! written: plain or striped ([`path`]), through host memory ([`cached`], with the
//! background threads in [`prefetch`]), or while moving to a new layout ([`migrate`]).

pub mod cached;
pub mod file;
pub mod io;
pub mod migrate;
pub mod moves;
pub mod path;
pub mod prefetch;
pub mod writeback;
