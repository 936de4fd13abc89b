//! The data path: every way an open file's bytes (its state is
//! [`crate::inodes::file`]'s) are read and written below a handle: through the layout's
//! extents ([`io`]), through host memory ([`cached`], written back by [`writeback`], with
//! the background threads in [`prefetch`]), or while moving to a new layout ([`migrate`],
//! over the steps in [`moves`]; a file with one name keeps its old pieces by [`keep`], one
//! with several names also in [`linked`]); and which opens the kernel serves itself
//! ([`passthrough`]). Nothing here takes the tree lock to copy data.
//!
//! Every function here is handed what it works on, `Parts` or a part of it (the tiers'
//! [`crate::tierio::Io`] for [`io`]), never the whole file system: what a function may
//! touch is in its signature, and nothing here reaches back up into the operations
//! (`vfs`).

pub mod cached;
pub mod io;
pub mod keep;
pub mod linked;
pub mod migrate;
pub mod moves;
pub mod passthrough;
pub mod prefetch;
pub mod writeback;

use crate::cache::Cache;
use crate::config::{Layout, Passthrough};
use crate::inodes::contain::Containment;
use crate::inodes::file::FileNode;
use crate::inodes::tree::Tree;
use crate::policy::placement::Placer;
use crate::stats::ledger::CpuLedger;
use crate::tier::Tier;
use crate::tierio::Io;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// What the data path is handed: the parts of a mount it reads and changes, and the few
/// settings it follows. No handle table, no namespace operations, no control file: those
/// stay above, in `vfs`, which builds this from its state in one place
/// (`vfs::state`). Cheap to make (references and copied settings), so each operation
/// makes its own.
#[derive(Clone, Copy)]
pub(crate) struct Parts<'a> {
    pub(crate) tiers: &'a [Tier],
    /// The one way to the tiers' bytes: every backing read and write goes through it with
    /// its class.
    pub(crate) io: Io<'a>,
    /// `[cache]`: the host-memory tier.
    pub(crate) cache: &'a Option<Arc<Cache<FileNode>>>,
    pub(crate) placer: &'a Placer,
    /// The inode tree: a move takes its lock for the switch (tree before file, always),
    /// and the prefetcher to find a file by inode.
    pub(crate) tree: &'a RwLock<Tree>,
    /// The inodes failed by a panic or a torn move: never moved, written back only if sound.
    pub(crate) contain: &'a Containment,
    pub(crate) relayout: &'a RelayoutCounters,
    /// The daemon's CPU per class of work and the bytes it moved.
    pub(crate) ledger: &'a CpuLedger,
    /// Kernel passthrough may be offered (config allows it and the kernel has not refused).
    pub(crate) passthrough: &'a AtomicBool,
    pub(crate) passthrough_mode: Passthrough,
    /// `[placement] layout`, and the stripe unit a whole file spreads with when it moves.
    pub(crate) layout: Layout,
    pub(crate) stripe_unit: u64,
    /// `[placement] adapt` (layouts follow the online estimates) and its `min_share`.
    pub(crate) adapt: bool,
    pub(crate) min_share: f64,
    /// `[mount] scratch`: nothing is written back at unmount.
    pub(crate) scratch: bool,
}

/// Bytes moved by re-layouts since mount (`stats.json`, `relayout`).
#[derive(Debug, Default)]
pub struct RelayoutCounters {
    /// Lazy moves begun, switched over, and dropped (file unlinked, or taken over by an
    /// eager move).
    pub migrations_started: AtomicU64,
    pub migrations_committed: AtomicU64,
    pub migrations_dropped: AtomicU64,
    /// Old bytes a lazy move copied (partial first writes of a block, and the blocks never
    /// rewritten, at commit) ...
    pub migration_copied_bytes: AtomicU64,
    /// ... and old bytes it did not have to copy, because a write replaced the whole block.
    pub migration_rewritten_bytes: AtomicU64,
    /// Eager moves (full or failed tier, cached files) and the bytes they copied.
    pub eager_moves: AtomicU64,
    pub eager_copied_bytes: AtomicU64,
}
