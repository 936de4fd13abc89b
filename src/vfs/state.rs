//! The filesystem's state: every part the namespace, the data path and the background
//! threads share, the one way from it to the tiers' bytes ([`io`]), and the parts of it
//! the data path is handed (`TierFs::parts`). Building it and
//! shutting it down are [`crate::vfs::lifecycle`]'s.

use crate::config::Layout;
use crate::data::{Parts, RelayoutCounters};
use crate::policy::placement::Placer;
use crate::tier::Tier;

use crate::inodes::contain::Containment;
use crate::inodes::tree::Tree;
use crate::inodes::types::Handle;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::SystemTime;

/// The filesystem core.
#[derive(Debug)]
pub struct TierFs {
    pub(crate) tiers: Vec<Tier>,
    pub(crate) placer: Placer,
    pub(crate) layout: Layout,
    pub(crate) stripe_unit: u64,
    pub(crate) tree: RwLock<Tree>,
    pub(crate) handles: Mutex<HashMap<u64, Handle>>,
    pub(crate) next_fh: AtomicU64,
    pub(crate) stats_dir: OsString,
    pub(crate) config_text: String,
    pub(crate) started: SystemTime,
    pub(crate) euid: u32,
    pub(crate) xattr_warned: AtomicBool,
    /// Kernel passthrough may be offered (config allows it and the kernel has not refused).
    pub(crate) passthrough: AtomicBool,
    pub(crate) passthrough_mode: crate::config::Passthrough,
    /// Which opens of programs under `tierfs run` may get the pieces' own descriptors.
    pub(crate) direct_mode: crate::config::Direct,
    /// `[placement] adapt`: shares follow the online estimates.
    pub(crate) adapt: bool,
    /// `placement.min_share` (with `adapt`).
    pub(crate) min_share: f64,
    /// Conflict copies renamed aside by the running scan: (new relative path, tier).
    pub(crate) aside: Mutex<Vec<(PathBuf, usize)>>,
    /// `[cache]`: the host-memory tier.
    pub(crate) cache: Option<Arc<crate::cache::Cache<crate::inodes::file::FileNode>>>,
    /// Where the cache's size comes from, or why there is none (`.tierfs/cache`).
    pub(crate) staging_from: String,
    /// How batches of backing requests are issued (`[mount] engine`).
    pub(crate) engine: Box<dyn crate::tierio::Engine>,
    /// Each tier's admission queue, which [`io`] takes its slots from.
    pub(crate) queues: crate::tierio::Queues,
    /// FUSE threads (each holds a 1 MiB read buffer: part of the memory bound).
    pub(crate) threads: usize,
    /// Bytes moved by re-layouts (`stats.json`).
    pub(crate) relayout: RelayoutCounters,
    /// What the kernel asked of us, counted by the FUSE layer (`stats.json`).
    pub(crate) requests: Arc<crate::stats::reqstats::RequestStats>,
    /// The daemon's CPU per class of work and the bytes it moved (`stats.json` `cpu`).
    pub(crate) ledger: crate::stats::ledger::CpuLedger,
    /// What [`TierFs::shutdown`] could not put on the tiers, once it has run.
    pub(crate) shut: Mutex<Option<Vec<String>>>,
    /// `[mount] scratch`: the data is thrown away at unmount, so [`TierFs::shutdown`]
    /// writes nothing back.
    pub(crate) scratch: bool,
    /// Inodes failed by a panic in a request, and the panic count (`contain`).
    pub(crate) contain: Containment,
    /// Per tier: its coordination with the job's other nodes (`shared_ledger`), if shared.
    pub(crate) shared: Vec<Option<crate::coord::SharedTier>>,
}

/// The way to the tiers: every backing read and write goes through it with its class.
pub(crate) fn io(fs: &TierFs) -> crate::tierio::Io<'_> {
    crate::tierio::Io::new(&*fs.engine, &fs.tiers, &fs.queues)
}

impl TierFs {
    /// What the data path is handed ([`Parts`]): the one place it is made from this state.
    pub(crate) fn parts(&self) -> Parts<'_> {
        Parts {
            tiers: &self.tiers,
            io: io(self),
            cache: &self.cache,
            placer: &self.placer,
            tree: &self.tree,
            contain: &self.contain,
            relayout: &self.relayout,
            ledger: &self.ledger,
            passthrough: &self.passthrough,
            passthrough_mode: self.passthrough_mode,
            layout: self.layout,
            stripe_unit: self.stripe_unit,
            adapt: self.adapt,
            min_share: self.min_share,
            scratch: self.scratch,
        }
    }
}

pub(crate) fn set_engine(fs: &mut TierFs, engine: Box<dyn crate::tierio::Engine>) {
    fs.engine = engine;
}
