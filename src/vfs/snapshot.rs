//! What the `.tierfs/` files show, gathered from the running filesystem: the counters of
//! every tier, the cache, the CPU ledger and the FUSE connection into a
//! [`crate::stats::Snapshot`], and the bytes of each virtual file. The snapshot's types and
//! their text renderings live in [`crate::stats`], which knows nothing of the core.

use crate::inodes::tree::NodeData;
use crate::inodes::types::{Virtual, ROOT_INO};
use crate::layout::FileLayout;
use crate::stats::{
    escape_path, files_table, per_gb, tiers_table, CacheStats, ClassCpu, CpuStats, FileStats,
    FuseStats, RelayoutStats, SharedStats, Snapshot, TierStats,
};
use crate::tier::Tier;
use crate::vfs::state::TierFs;
use std::sync::atomic::Ordering;

/// How much a snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Counters only: the tiers table and the metrics.
    Counters,
    /// Counters and the per-file list: `stats.json` and the files view.
    Files,
}

/// Takes a consistent-enough snapshot of the counters, and of the tree's files when
/// `detail` asks for them (walking every file under the tree lock is for the views that
/// list them).
pub fn snapshot(fs: &TierFs, detail: Detail) -> Snapshot {
    // Passthrough's bytes up to now, not only up to the estimator's last tick.
    crate::tier::app::sample_passthrough(fs.tiers());
    let shares = fs.placer().shares();
    let tiers: Vec<TierStats> = fs
        .tiers()
        .iter()
        .map(|t| tier_stats(fs, t, &shares))
        .collect();
    let (files, file_count) = match detail {
        Detail::Counters => (Vec::new(), file_count(fs)),
        Detail::Files => {
            let files = file_stats(fs);
            let n = files.len() as u64;
            (files, n)
        }
    };
    let cpu = cpu_stats(fs, &tiers);
    Snapshot {
        format: 1,
        pid: std::process::id(),
        uptime_s: fs
            .started()
            .elapsed()
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
        layout: match fs.layout_kind() {
            crate::config::Layout::WholeFile => "whole-file".into(),
            crate::config::Layout::Stripe => "stripe".into(),
        },
        passthrough: fs.passthrough_enabled(),
        held_bytes: crate::vfs::handles::held_for_placement(fs),
        tiers,
        files,
        file_count,
        cache: fs.cache().map(|c| {
            let t = c.counters.totals();
            CacheStats {
                size: c.cfg.size,
                size_from: c.size_from.clone(),
                budget: c.budget(),
                used: c.used(),
                dirty: t.dirty_bytes,
                hit_bytes: t.hit_bytes,
                miss_bytes: t.miss_bytes,
                absorbed_bytes: t.absorbed_bytes,
                writeback_bytes: t.writeback_bytes,
                prefetch_bytes: t.prefetch_bytes,
                prefetch_used_bytes: t.prefetch_used_bytes,
                prefetch_wasted_bytes: t.prefetch_wasted_bytes,
                evictions: t.evictions,
            }
        }),
        bounce_bytes: crate::tierio::bounce_bytes(),
        cpu,
        fuse: {
            let r = fs.requests();
            let (ring, dev) = r.by_transport();
            FuseStats {
                transport: r.transport().to_string(),
                requests_ring: ring,
                requests_dev: dev,
                requests: r
                    .nonzero()
                    .into_iter()
                    .map(|(op, n)| (crate::stats::reqstats::op_name(op).to_string(), n))
                    .collect(),
            }
        },
        relayout: {
            let r = fs.relayout_counters();
            let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            RelayoutStats {
                migrations_started: g(&r.migrations_started),
                migrations_committed: g(&r.migrations_committed),
                migrations_dropped: g(&r.migrations_dropped),
                migration_copied_bytes: g(&r.migration_copied_bytes),
                migration_rewritten_bytes: g(&r.migration_rewritten_bytes),
                eager_moves: g(&r.eager_moves),
                eager_copied_bytes: g(&r.eager_copied_bytes),
            }
        },
        request_panics: fs.request_panics(),
        failed_inodes: fs.failed_inodes(),
    }
}

/// How many files [`TierFs::file_list`] would list, counted under the tree lock without
/// building their paths or taking their locks (a file that is moving holds its own for
/// seconds).
fn file_count(fs: &TierFs) -> u64 {
    let tree = fs.tree.read();
    let mut n = 0;
    let mut stack = vec![ROOT_INO];
    while let Some(ino) = stack.pop() {
        if let Ok(children) = tree.children(ino) {
            for (name, c) in children {
                match tree.nodes.get(c).filter(|n| n.is_primary(ino, name)) {
                    Some(node) if matches!(node.data, NodeData::Dir { .. }) => stack.push(*c),
                    Some(node) if matches!(node.data, NodeData::File(_)) => n += 1,
                    _ => {}
                }
            }
        }
    }
    n
}

fn cpu_stats(fs: &TierFs, tiers: &[TierStats]) -> CpuStats {
    use crate::stats::ledger::{process_cpu_ns, CLASSES};
    let total_s = process_cpu_ns() as f64 / 1e9;
    let mut classes = std::collections::BTreeMap::new();
    let (mut bytes, mut claimed) = (0u64, 0f64);
    for c in CLASSES {
        let (ns, b) = fs.ledger().get(c);
        let cpu_s = ns as f64 / 1e9;
        bytes += b;
        claimed += cpu_s;
        classes.insert(
            c.name().to_string(),
            ClassCpu {
                cpu_s,
                bytes: b,
                s_per_gb: per_gb(cpu_s, b),
            },
        );
    }
    let device_bytes = tiers
        .iter()
        .map(|t| Some(t.device_read? + t.device_written?))
        .sum::<Option<u64>>();
    // Bytes programs moved on the direct path cost the daemon (almost) nothing, and count:
    // the figure is the daemon's CPU per byte the programs moved.
    let direct: u64 = tiers.iter().map(|t| t.direct_bytes).sum();
    let bytes = bytes + direct;
    CpuStats {
        total_s,
        bytes,
        s_per_gb: per_gb(total_s, bytes),
        classes,
        other_s: (total_s - claimed).max(0.0),
        device_bytes,
    }
}

/// Whether the user `uid` may see the names of the mount's files in the `.tierfs/` views:
/// the mount's owner and root. With `allow_other` anyone may open the views, and a file's
/// name, size and tier in a folder only its owner may search is not theirs to read; the
/// views that exist to list files (`files`, `cache`) are the owner's alone (mode 0400),
/// `stats.json` shows others its counters without the list.
pub fn shows_names_to(fs: &TierFs, uid: u32) -> bool {
    uid == 0 || uid == fs.euid
}

/// The bytes of one virtual file; `names`: the per-file list too ([`shows_names_to`]).
pub fn render(fs: &TierFs, v: Virtual, names: bool) -> Vec<u8> {
    let detail = if names {
        Detail::Files
    } else {
        Detail::Counters
    };
    match v {
        Virtual::Dir => Vec::new(),
        Virtual::Config => fs.config_text().as_bytes().to_vec(),
        Virtual::StatsJson => {
            let mut s = serde_json::to_string_pretty(&snapshot(fs, detail)).unwrap_or_default();
            s.push('\n');
            s.into_bytes()
        }
        Virtual::Tiers => tiers_table(&snapshot(fs, Detail::Counters)).into_bytes(),
        Virtual::Files => files_table(&snapshot(fs, detail)).into_bytes(),
        Virtual::Metrics => {
            crate::stats::metrics::render(&snapshot(fs, Detail::Counters)).into_bytes()
        }
        Virtual::Cache => {
            let mut view = fs.cache_view();
            if !names {
                view.files.clear();
                view.orders.clear();
            }
            let mut s = serde_json::to_string_pretty(&view).unwrap_or_default();
            s.push('\n');
            s.into_bytes()
        }
        Virtual::Control => Vec::new(),
    }
}

/// One tier's row: its counters, estimates, queue and shared-tier view.
fn tier_stats(fs: &TierFs, t: &Tier, shares: &[f64]) -> TierStats {
    let c = &t.counters;
    TierStats {
        name: t.name.clone(),
        path: t.root.display().to_string(),
        read_bps: t.read_bps,
        write_bps: t.write_bps,
        bandwidth_source: format!("{:?}", t.bandwidth_source).to_lowercase(),
        direct_io: t.direct_io,
        share: shares[t.index],
        bytes_read: c.bytes_read.load(Ordering::Relaxed),
        bytes_written: c.bytes_written.load(Ordering::Relaxed),
        reads: c.reads.load(Ordering::Relaxed),
        writes: c.writes.load(Ordering::Relaxed),
        in_flight: c.in_flight.load(Ordering::Relaxed),
        errors: c.errors.load(Ordering::Relaxed),
        files: c.files.load(Ordering::Relaxed),
        used: c.used.load(Ordering::Relaxed),
        free: t.room(),
        capacity: t.capacity,
        healthy: t.is_healthy(),
        state: t.state().to_string(),
        read_errors: c.read_errors.load(Ordering::Relaxed),
        write_errors: c.write_errors.load(Ordering::Relaxed),
        last_error: t.last_error(),
        probes: t.probes.load(Ordering::Relaxed),
        paused: t.is_paused(),
        passthrough_open: c.pt_open.load(Ordering::Relaxed),
        direct_open: c.direct_open.load(Ordering::Relaxed),
        direct_opens: c.direct_opens_total.load(Ordering::Relaxed),
        direct_bytes: c.direct_bytes.load(Ordering::Relaxed),
        passthrough_opens: c.pt_opens_total.load(Ordering::Relaxed),
        device_read: t.device_bytes().map(|d| d.0),
        device_written: t.device_bytes().map(|d| d.1),
        queue: fs.queues.stats(t.index),
        est_read_bps: t.est_read.get(),
        est_write_bps: t.est_write.get(),
        saturated: t.queueing.saturated(),
        core_wait_s: t.core_wait_s(),
        read_ns: c.read_ns.load(Ordering::Relaxed) + c.read_core_wait_ns.load(Ordering::Relaxed),
        write_ns: c.write_ns.load(Ordering::Relaxed) + c.write_core_wait_ns.load(Ordering::Relaxed),
        app: app_stats(&c.app),
        device: t.device_id().and_then(|p| {
            // /sys/dev/block/MAJ:MIN/stat
            Some(p.parent()?.file_name()?.to_string_lossy().into_owned())
        }),
        control: t.admin.state().name().to_string(),
        weight: t.admin.weight(),
        drain: drain_stats(t),
        shared: fs.shared_tier(t.index).map(|sh| {
            let plan = sh.plan();
            let p = plan.unwrap_or_default();
            SharedStats {
                ledger: sh.dir.display().to_string(),
                node: sh.node.clone(),
                coordinated: plan.is_some(),
                live_nodes: p.live,
                capacity_bps: p.capacity_bps,
                allot_bps: p.allot_bps,
            }
        }),
    }
}

/// A drain's progress, once the tier has been drained (or is draining).
fn drain_stats(t: &Tier) -> Option<crate::stats::DrainStats> {
    use crate::tier::admin::AdminState;
    let a = &t.admin;
    matches!(a.state(), AdminState::Draining | AdminState::Drained).then(|| {
        crate::stats::DrainStats {
            moved_files: a.drained_files.load(Ordering::Relaxed),
            moved_bytes: a.drained_bytes.load(Ordering::Relaxed),
            failures: a.drain_failures.load(Ordering::Relaxed),
            last_error: a.drain_error.lock().clone(),
        }
    })
}

/// A tier's `app` object from its counters.
fn app_stats(a: &crate::tier::app::AppCounters) -> crate::stats::app::AppStats {
    let g = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
    crate::stats::app::AppStats::from_paths(
        (g(&a.fuse_read_bytes), g(&a.fuse_written_bytes)),
        (g(&a.fuse_reads), g(&a.fuse_writes)),
        (g(&a.fuse_read_ns), g(&a.fuse_write_ns)),
        (g(&a.memory_read_bytes), g(&a.memory_written_bytes)),
        (g(&a.direct_read_bytes), g(&a.direct_written_bytes)),
        (g(&a.direct_reads), g(&a.direct_writes)),
        (g(&a.direct_read_ns), g(&a.direct_write_ns)),
        (
            g(&a.passthrough_read_bytes),
            g(&a.passthrough_written_bytes),
        ),
        (g(&a.unsplit_read_bytes), g(&a.unsplit_written_bytes)),
    )
}

/// Every file's path, size, layout and tiers (the tree lock is held while it is walked).
fn file_stats(fs: &TierFs) -> Vec<FileStats> {
    let names: Vec<String> = fs.tiers().iter().map(|t| t.name.clone()).collect();
    fs.file_list()
        .into_iter()
        .map(|(path, size, layout)| FileStats {
            path: format!("/{}", escape_path(&path)),
            size,
            layout: match layout {
                FileLayout::Whole { .. } => "whole-file".into(),
                FileLayout::Stripe(_) => "stripe".into(),
            },
            tiers: layout.tiers().iter().map(|t| names[*t].clone()).collect(),
        })
        .collect()
}
