//! The inode table and what it holds, below every operation on it: the tree of names and
//! nodes ([`tree`]), an open file's state ([`file`](mod@file)), the core's vocabulary of
//! inodes, attributes and handles ([`types`]), where a file's pieces are on the tiers
//! ([`pieces`]), and the inodes a mount has failed ([`contain`]). The namespace
//! (`crate::vfs`) and the data path (`crate::data`) both work on these. Nothing here reads
//! or writes a file's bytes, and nothing here takes the tree's lock: whoever owns the
//! `tree::Tree` (`crate::vfs::TierFs`) holds it.

pub mod contain;
pub mod file;
pub mod pieces;
pub mod tree;
pub mod types;
