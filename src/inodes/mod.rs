//! The inode table and what it holds, below every operation on it: the tree of names and
//! nodes ([`tree`]), an open file's state ([`file`]), the core's vocabulary of inodes,
//! attributes and handles ([`types`]), where a file's pieces are on the tiers
//! ([`pieces`]), and the inodes a mount has failed ([`contain`]). The namespace
//! (`crate::vfs`) and the data path (`crate::data`) both work on these; nothing here does
//! I/O beyond naming a piece's path or a tier's error, and nothing here takes a lock of
//! its own accord: the tree's lock is held by whoever owns the [`tree::Tree`]
//! (`crate::vfs::TierFs`), and a file's by the operation on it.

pub mod contain;
pub mod file;
pub mod pieces;
pub mod tree;
pub mod types;
