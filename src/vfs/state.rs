//! The filesystem's state: every part the namespace, the data path and the background
//! threads share, its construction over opened tiers, and the shutdown that puts what is
//! held in memory back on the tiers.

use crate::adapt;
use crate::config::{Layout, MountConfig};
use crate::data::migrate::RelayoutCounters;
use crate::data::{cached, migrate};
use crate::error::Result;
use crate::placement::{self, Placer};
use crate::sys::{self};
use crate::tier::Tier;
use crate::vfs::handles::Handle;
use crate::vfs::tree::{Node, NodeData, Tree};
use crate::vfs::types::*;
use crate::vfs::{contain, namespace, scan};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// `[placement] adapt`: shares follow the online estimates.
    pub(crate) adapt: bool,
    /// `placement.min_share` (with `adapt`).
    pub(crate) min_share: f64,
    /// Conflict copies renamed aside by the running scan: (new relative path, tier).
    pub(crate) aside: Mutex<Vec<(PathBuf, usize)>>,
    /// `[cache]`: the host-memory tier.
    pub(crate) cache: Option<Arc<crate::cache::Cache>>,
    /// Where the cache's size comes from, or why there is none (`.tierfs/cache`).
    pub(crate) staging_from: String,
    /// How batches of backing requests are issued (`[mount] engine`).
    pub(crate) engine: Box<dyn crate::tierio::Engine>,
    /// FUSE threads (each holds a 1 MiB read buffer: part of the memory bound).
    pub(crate) threads: usize,
    /// Bytes moved by re-layouts (`stats.json`).
    pub(crate) relayout: RelayoutCounters,
    /// What the kernel asked of us, counted by the FUSE layer (`stats.json`).
    pub(crate) requests: Arc<crate::reqstats::RequestStats>,
    /// The daemon's CPU per class of work and the bytes it moved (`stats.json` `cpu`).
    pub(crate) ledger: crate::ledger::CpuLedger,
    /// What [`TierFs::shutdown`] could not put on the tiers, once it has run.
    pub(crate) shut: Mutex<Option<Vec<String>>>,
    /// `[mount] scratch`: the data is thrown away at unmount, so [`TierFs::shutdown`]
    /// writes nothing back.
    pub(crate) scratch: bool,
    /// Inodes failed by a panic in a request, and the panic count (`contain`).
    pub(crate) contain: contain::Containment,
    /// Per tier: its coordination with the job's other nodes (`shared_ledger`), if shared.
    pub(crate) shared: Vec<Option<crate::coord::SharedTier>>,
}

pub(crate) fn new(config: &MountConfig, tiers: Vec<Tier>) -> Result<TierFs> {
    with_staging(
        config,
        tiers,
        crate::cache::memory::Plan::stated(&config.cache),
    )
}

pub(crate) fn with_staging(
    config: &MountConfig,
    tiers: Vec<Tier>,
    staging: crate::cache::memory::Plan,
) -> Result<TierFs> {
    let bws: Vec<f64> = tiers
        .iter()
        .map(|t| placement::effective_bandwidth(t.read_bps, t.write_bps))
        .collect();
    let mut nodes = HashMap::new();
    nodes.insert(
        ROOT_INO,
        Node {
            parent: ROOT_INO,
            name: OsString::new(),
            data: NodeData::Dir {
                children: BTreeMap::new(),
            },
            nlookup: 1,
            linked: true,
            removed_attr: None,
            limbo: false,
            degraded_new: false,
        },
    );
    let fs = TierFs {
        placer: Placer::new(if config.placement.adapt {
            adapt::paused_shares(&tiers, &bws, config.placement.min_share)
        } else {
            placement::shares(&bws)
        }),
        tiers,
        layout: config.placement.layout,
        stripe_unit: config.placement.stripe_unit,
        tree: RwLock::new(Tree {
            nodes,
            next_ino: FIRST_INO,
        }),
        handles: Mutex::new(HashMap::new()),
        next_fh: AtomicU64::new(1),
        stats_dir: OsString::from(&config.mount.stats_dir),
        config_text: config.to_toml(),
        started: SystemTime::now(),
        euid: sys::euid(),
        xattr_warned: AtomicBool::new(false),
        passthrough: AtomicBool::new(config.mount.passthrough != crate::config::Passthrough::Off),
        passthrough_mode: config.mount.passthrough,
        aside: Mutex::new(Vec::new()),
        adapt: config.placement.adapt,
        min_share: config.placement.min_share,
        cache: staging.cache.map(|c| {
            Arc::new(crate::cache::Cache::planned(
                c,
                staging.from.clone(),
                staging.limit,
            ))
        }),
        staging_from: staging.from,
        threads: config.mount.threads,
        engine: crate::tierio::choose(config.mount.engine),
        relayout: RelayoutCounters::default(),
        requests: Arc::default(),
        ledger: crate::ledger::CpuLedger::default(),
        shut: Mutex::new(None),
        scratch: config.mount.scratch,
        contain: contain::Containment::default(),
        shared: Vec::new(),
    };
    let shared = config
        .tiers
        .iter()
        .zip(&fs.tiers)
        .map(|(c, t)| {
            let sh = c.shared.as_ref().filter(|_| !t.missing)?;
            Some(crate::coord::SharedTier::new(
                crate::coord::ledger_dir(&sh.ledger, &sh.job, &t.name),
                &sh.node,
                placement::effective_bandwidth(t.read_bps, t.write_bps),
            ))
        })
        .collect();
    let fs = TierFs { shared, ..fs };
    scan::scan(&fs)?;
    Ok(fs)
}

/// The way to the tiers: every backing read and write goes through it with its class.
pub(crate) fn io(fs: &TierFs) -> crate::tierio::Io<'_> {
    crate::tierio::Io::new(&*fs.engine, &fs.tiers)
}

pub(crate) fn set_engine(fs: &mut TierFs, engine: Box<dyn crate::tierio::Engine>) {
    fs.engine = engine;
}

pub(crate) fn shutdown(fs: &TierFs) -> Vec<String> {
    let mut shut = fs.shut.lock();
    if let Some(lost) = &*shut {
        return lost.clone();
    }
    if fs.scratch {
        // The daemon removes the tier folders next: writing dirty blocks back, finishing
        // re-layouts or syncing pieces would only delay that.
        cached::stop_cache(fs);
        *shut = Some(Vec::new());
        return Vec::new();
    }
    let mut lost = Vec::new();
    for (ino, dirty, e) in cached::write_back_all(fs) {
        lost.push(format!(
            "{}: {dirty} bytes written to it were only in memory and could not be \
             written back: {e}",
            namespace::describe(fs, ino)
        ));
    }
    cached::stop_cache(fs);
    let tree = fs.tree.read();
    for (ino, n) in &tree.nodes {
        if contain::is_failed(fs, *ino) {
            // Its state is not trusted: the next mount rebuilds it from the tiers.
            continue;
        }
        if let NodeData::File(f) = &n.data {
            let mut st = f.state.write();
            if st.migration.is_some() && !f.gone.load(Ordering::Relaxed) {
                if let Err(e) = migrate::commit_migration_locked(fs, &tree, *ino, f, &mut st) {
                    lost.push(format!(
                        "{}: the writes since it was opened were being moved to a new \
                         layout, which could not finish: {e}",
                        namespace::describe_in(&tree, *ino)
                    ));
                }
            }
            for p in st.pieces.iter().flatten() {
                let _ = p.file().sync_data();
            }
        }
    }
    drop(tree);
    for l in &lost {
        log::error!("unmount: LOST: {l}");
    }
    *shut = Some(lost.clone());
    lost
}
