//! The filesystem's life: building the state over opened tiers (rebuilding the tree from
//! them, [`crate::vfs::scan`]) and the shutdown that puts everything held in memory back on
//! the tiers.

use crate::config::MountConfig;
use crate::data::RelayoutCounters;
use crate::data::{cached, migrate, writeback};
use crate::error::{Error, Result};
use crate::inodes::contain::Containment;
use crate::inodes::tree::{Node, NodeData, Tree};
use crate::inodes::types::*;
use crate::policy::placement;
use crate::policy::placement::Placer;
use crate::sys;
use crate::tier::Tier;
use crate::vfs::adapt;
use crate::vfs::state::TierFs;
use crate::vfs::{namespace, scan};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

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
    nodes.insert(ROOT_INO, Node::root());
    let fs = TierFs {
        placer: Placer::new(if config.placement.adapt {
            adapt::paused_shares(&tiers, &bws, &bws, config.placement.min_share)
        } else {
            placement::shares(&bws)
        }),
        queues: crate::tierio::Queues::for_tiers(&tiers),
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
        direct_mode: config.mount.direct,
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
        ledger: crate::stats::ledger::CpuLedger::default(),
        shut: Mutex::new(None),
        scratch: config.mount.scratch,
        contain: Containment::default(),
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

pub(crate) fn shutdown(fs: &TierFs) -> Vec<String> {
    let mut shut = fs.shut.lock();
    if let Some(lost) = &*shut {
        return lost.clone();
    }
    if fs.scratch {
        // The daemon removes the tier folders next: writing dirty blocks back, finishing
        // re-layouts or syncing pieces would only delay that.
        cached::stop_cache(&fs.parts());
        *shut = Some(Vec::new());
        return Vec::new();
    }
    let mut lost = Vec::new();
    for (ino, dirty, e) in writeback::write_back_all(&fs.parts()) {
        let what = namespace::describe(fs, ino);
        lost.push(match e {
            // Not written back (`cached::write_back_locked`); a cached file's move the
            // failure cut short left nothing pending either: its copy was dropped.
            Error::Failed { .. } if fs.contain.is_journaled(ino) => format!(
                "{what}: failed in a move (see the log) while {dirty} bytes written to it were \
                 only in memory, not written over its pieces: the move's copy holds those \
                 written before it, which the next mount puts in place by the move's \
                 journal; any written after the failure are lost"
            ),
            Error::Failed { .. } => format!(
                "{what}: failed (see the log) while {dirty} bytes written to it were only \
                 in memory: those writes are lost, never written over its pieces; the next \
                 mount rebuilds it from the tiers as they are, and puts its old pieces back \
                 by a cut-short move's journal where the log names one"
            ),
            e => format!(
                "{what}: {dirty} bytes written to it were only in memory and could not be \
                 written back: {e}"
            ),
        });
    }
    cached::stop_cache(&fs.parts());
    let tree = fs.tree.read();
    for (ino, n) in &tree.nodes {
        if fs.contain.is_failed(*ino) {
            // Its state is not trusted: the next mount rebuilds it from the tiers as they
            // are. A move torn between its own renames with a journal
            // (`contain::mark_journaled`) is finished there from its temporaries, which
            // the journal names: its writes are kept. Others' pending writes are lost.
            if let NodeData::File(f) = &n.data {
                let st = f.state.read();
                let finishable = fs.contain.is_journaled(*ino)
                    && st
                        .migration
                        .as_ref()
                        .is_some_and(crate::data::moves::all_named);
                if finishable {
                    log::warn!(
                        "unmount: {} failed in its move, which the next mount finishes by its \
                         journal (see the log)",
                        namespace::describe_in(&tree, *ino)
                    );
                } else if st.migration.is_some() && !f.gone.load(Ordering::Relaxed) {
                    lost.push(format!(
                        "{}: failed while the writes since it was opened were being moved \
                         to a new layout (see the log): those writes are lost; the next \
                         mount puts its old pieces back by the move's journal where the log \
                         names one, else its pieces on the tiers may no longer be of one \
                         layout (served as old and new stripes mixed, or zeros): restore it \
                         from a copy",
                        namespace::describe_in(&tree, *ino)
                    ));
                }
                // A torn move's inode had its cached blocks written back through its
                // pieces (`contain::writes_back`): they must reach the disk as any other's.
                if fs.contain.writes_back(*ino) {
                    for p in st.pieces.iter().flatten() {
                        let _ = p.file().sync_data();
                    }
                }
            }
            continue;
        }
        if let NodeData::File(f) = &n.data {
            let mut st = f.state.write();
            if st.migration.is_some() && !f.gone.load(Ordering::Relaxed) {
                if let Err(e) =
                    migrate::commit_migration_locked(&fs.parts(), &tree, *ino, f, &mut st)
                {
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

/// Starts the cache's writer, prefetcher and (with a memory limit) pressure-watch threads,
/// each with its own reference to the filesystem; nothing without a cache.
pub(crate) fn start_cache_threads(
    fs: &Arc<TierFs>,
) -> std::io::Result<Vec<std::thread::JoinHandle<()>>> {
    let mut out = Vec::new();
    if fs.cache.is_none() {
        return Ok(out);
    }
    let f = fs.clone();
    out.push(
        std::thread::Builder::new()
            .name("tierfs-writeback".into())
            .spawn(move || f.writeback_loop())?,
    );
    let f = fs.clone();
    out.push(
        std::thread::Builder::new()
            .name("tierfs-prefetch".into())
            .spawn(move || f.prefetch_loop())?,
    );
    if fs.cache.as_ref().is_some_and(|c| c.watch.is_some()) {
        let f = fs.clone();
        out.push(
            std::thread::Builder::new()
                .name("tierfs-memwatch".into())
                .spawn(move || f.memory_watch_loop())?,
        );
    }
    Ok(out)
}
