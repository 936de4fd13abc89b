//! The old path of [`crate::tierio::sched`], kept for code not yet moved to the new one;
//! remove when nothing uses it.

pub use crate::tierio::sched::*;
