//! `tierfs ds-config`: DeepSpeed's NVMe-offload and `aio` settings chosen for a mount.
//!
//! The numbers come from what the mount reports (`stats.json`: tiers, their bandwidth,
//! health, admission-queue limits, layout, passthrough; `config`: the FUSE worker threads)
//! and the ranks per node. The rule, in short: keep about 8 direct 1 MiB requests in flight
//! on every tier (the depth `tierfs probe` measured the bandwidths at), and keep every
//! request the ranks can have in flight together below the mount's FUSE threads, with a
//! reserve for metadata, so no request waits for a thread. Each chosen value comes with a
//! sentence saying why ([`Choice::notes`]); the CLI prints the JSON to stdout and the notes
//! to stderr, so redirecting stdout gives a clean JSON file.

use crate::stats::Snapshot;
use serde::Serialize;
use std::path::Path;

/// `mount.threads` when the config file does not say.
pub const DEFAULT_THREADS: usize = 64;
/// Requests in flight per tier that reach its measured bandwidth: `tierfs probe` measures
/// with 1 MiB O_DIRECT at queue depth 8, and 8 is DeepSpeed's default `queue_depth`.
pub const DEPTH_PER_TIER: usize = 8;
/// DeepSpeed's aio block size we ask for: the FUSE request size tierfs negotiates.
pub const BLOCK_SIZE: u64 = 1 << 20;
/// Elements per optimizer subgroup we suggest (`sub_group_size`).
pub const SUB_GROUP_SIZE: u64 = 100_000_000;
/// Elements of the parameter swap buffers (DeepSpeed's default `buffer_size`).
pub const PARAM_BUFFER_SIZE: u64 = 100_000_000;
/// Elements of parameters kept in CPU memory (DeepSpeed's default `max_in_cpu`).
pub const MAX_IN_CPU: u64 = 1_000_000_000;
/// Buffers Adam needs for one subgroup swap: fp32 master weights, exp_avg, exp_avg_sq and
/// the gradient.
pub const ADAM_BUFFERS: usize = 4;

/// What `ds-config` needs to know about a mount.
#[derive(Debug, Clone)]
pub struct MountFacts {
    /// Absolute mountpoint: becomes `nvme_path`.
    pub mountpoint: String,
    pub layout: String,
    /// Passthrough offered now (stats.json).
    pub passthrough: bool,
    /// `mount.passthrough` of the config ("auto", "direct", "off"), if known.
    pub passthrough_mode: Option<String>,
    /// FUSE worker threads of the daemon (`mount.threads`).
    pub threads: usize,
    pub tiers: Vec<TierFacts>,
    /// The mount's staging memory: bytes and where the size comes from (stats.json
    /// `cache`); `None` without one.
    pub staging: Option<(u64, String)>,
    /// What the host and the job let the ranks pin ([`crate::client::dsmemory`]); empty when not
    /// looked at.
    pub memory: crate::client::dsmemory::JobMemory,
}

/// One tier, as far as the choice goes.
#[derive(Debug, Clone)]
pub struct TierFacts {
    pub name: String,
    pub read_bps: f64,
    pub write_bps: f64,
    pub healthy: bool,
    /// The tier's admission-queue limit (requests in flight at most); 0 when unknown.
    pub queue_limit: usize,
    /// The daemon's online estimates from its own traffic, where it has them.
    pub est_read_bps: Option<f64>,
    pub est_write_bps: Option<f64>,
}

impl MountFacts {
    /// From a `stats.json` snapshot and the daemon's `.tierfs/config` text.
    pub fn from_snapshot(mountpoint: &Path, s: &Snapshot, config_text: &str) -> MountFacts {
        MountFacts {
            mountpoint: mountpoint.display().to_string(),
            layout: s.layout.clone(),
            passthrough: s.passthrough,
            passthrough_mode: mount_setting(config_text, "passthrough"),
            threads: threads_from_config(config_text).unwrap_or(DEFAULT_THREADS),
            tiers: s
                .tiers
                .iter()
                .map(|t| TierFacts {
                    name: t.name.clone(),
                    read_bps: t.read_bps,
                    write_bps: t.write_bps,
                    healthy: t.healthy,
                    queue_limit: t.queue.limit,
                    est_read_bps: t.est_read_bps,
                    est_write_bps: t.est_write_bps,
                })
                .collect(),
            staging: s.cache.as_ref().map(|c| (c.size, c.size_from.clone())),
            memory: Default::default(),
        }
    }
}

/// The value of `key = ...` in the `[mount]` section of the daemon's `.tierfs/config`
/// text, without quotes.
pub fn mount_setting(text: &str, key: &str) -> Option<String> {
    let mut in_mount = false;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            in_mount = line == "[mount]";
            continue;
        }
        if !in_mount {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            if k.trim() == key {
                return Some(v.trim().trim_matches('"').to_string());
            }
        }
    }
    None
}

/// `threads = N` of the `[mount]` section in the daemon's `.tierfs/config` text.
pub fn threads_from_config(text: &str) -> Option<usize> {
    mount_setting(text, "threads").and_then(|v| v.parse().ok())
}

/// The printed JSON: DeepSpeed config blocks, fields in the order DeepSpeed documents them.
#[derive(Debug, Clone, Serialize)]
pub struct DsConfig {
    pub zero_optimization: ZeroOptimization,
    pub aio: Aio,
}

#[derive(Debug, Clone, Serialize)]
pub struct ZeroOptimization {
    pub stage: u32,
    pub sub_group_size: u64,
    pub offload_param: OffloadParam,
    pub offload_optimizer: OffloadOptimizer,
}

#[derive(Debug, Clone, Serialize)]
pub struct OffloadParam {
    pub device: &'static str,
    pub nvme_path: String,
    pub pin_memory: bool,
    pub buffer_count: usize,
    pub buffer_size: u64,
    pub max_in_cpu: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct OffloadOptimizer {
    pub device: &'static str,
    pub nvme_path: String,
    pub pin_memory: bool,
    pub buffer_count: usize,
    pub pipeline_read: bool,
    pub pipeline_write: bool,
    pub fast_init: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Aio {
    pub block_size: u64,
    pub queue_depth: usize,
    pub intra_op_parallelism: usize,
    pub single_submit: bool,
    pub overlap_events: bool,
}

/// The chosen settings and why.
#[derive(Debug, Clone)]
pub struct Choice {
    /// `{"zero_optimization": {...}, "aio": {...}}` (keys sorted).
    pub json: serde_json::Value,
    /// The same, in DeepSpeed's documented key order: print this one.
    pub config: DsConfig,
    /// One line per decision, for stderr.
    pub notes: Vec<String>,
    pub ranks: usize,
    pub intra_op_parallelism: usize,
    pub queue_depth: usize,
    /// aio handles of one rank busy at once (2 with pipelined optimizer swaps: a read and
    /// a write).
    pub handles_per_rank: usize,
    /// ranks x handles x threads x queue depth: the most requests the ranks can have in
    /// flight on the mount at once.
    pub max_in_flight: usize,
    /// FUSE threads kept free for metadata and the stats files.
    pub reserve: usize,
    pub pipeline: bool,
    pub param_buffer_count: usize,
    pub optimizer_buffer_count: usize,
    /// `sub_group_size` and `pin_memory`, as the host's and the job's memory allow.
    pub sub_group_size: u64,
    pub pin_memory: bool,
}

fn mbs(bps: f64) -> String {
    format!("{:.0} MB/s", bps / 1e6)
}

/// FUSE threads kept free for metadata requests (lookups, opens, the stats files) while
/// data requests are in flight: an eighth, at least 4 (never all of them).
pub fn reserve_for(threads: usize) -> usize {
    (threads / 8).max(4).min(threads.saturating_sub(1))
}

/// Chooses the settings for `ranks` ranks on this node sharing the mount.
/// `ranks_from` says where the rank count came from (for the notes).
pub fn choose(m: &MountFacts, ranks: usize, ranks_from: &str) -> Choice {
    let ranks = ranks.max(1);
    let threads = m.threads.max(1);
    let mut notes = Vec::new();
    let tiers = usable_tiers(m, &mut notes);
    let n = tiers.len().max(1);
    notes.push(summary_note(m, &tiers, threads, ranks, ranks_from));
    if m.tiers.len() > tiers.len() {
        notes.push(format!(
            "tier(s) {} failed and take no new data; they are left out.",
            m.tiers
                .iter()
                .filter(|t| !t.healthy)
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let depth = Depth::choose(&tiers, threads, ranks);
    depth.explain(&tiers, threads, ranks, &mut notes);
    notes.push(passthrough_note(m));
    notes.push(staging_note(m));
    let buffers = Buffers::choose(n, depth.pipeline, ranks, &m.memory);
    buffers.explain(m, n, &mut notes);
    let config = ds_config(m, &depth, &buffers);
    let json = serde_json::to_value(&config).unwrap_or_default();
    Choice {
        json,
        config,
        notes,
        ranks,
        intra_op_parallelism: depth.intra,
        queue_depth: depth.qd,
        handles_per_rank: depth.handles,
        max_in_flight: depth.max_in_flight,
        reserve: depth.reserve,
        pipeline: depth.pipeline,
        param_buffer_count: buffers.param,
        optimizer_buffer_count: buffers.optimizer,
        sub_group_size: buffers.fit.sub_group_size,
        pin_memory: buffers.fit.pin_memory,
    }
}

/// The tiers that take data: the healthy ones, or all of them (with a warning) when none is.
fn usable_tiers<'a>(m: &'a MountFacts, notes: &mut Vec<String>) -> Vec<&'a TierFacts> {
    let healthy: Vec<&TierFacts> = m.tiers.iter().filter(|t| t.healthy).collect();
    if !healthy.is_empty() {
        return healthy;
    }
    notes.push(
        "WARNING: no tier is healthy (every one failed); remount before training. \
         Values below assume all tiers come back."
            .to_string(),
    );
    m.tiers.iter().collect()
}

/// The first note: what the choice starts from.
fn summary_note(
    m: &MountFacts,
    tiers: &[&TierFacts],
    threads: usize,
    ranks: usize,
    ranks_from: &str,
) -> String {
    let total_bw: f64 = tiers
        .iter()
        .map(|t| crate::policy::placement::effective_bandwidth(t.read_bps, t.write_bps))
        .sum();
    format!(
        "mount {}: {} tier(s) taking data ({}), about {} together; layout {}; \
         passthrough {}; {} FUSE threads; {} rank(s) per node ({}).",
        m.mountpoint,
        tiers.len().max(1),
        tiers
            .iter()
            .map(|t| {
                let est = match (t.est_read_bps, t.est_write_bps) {
                    (None, None) => String::new(),
                    (r, w) => format!(
                        " (measured in use: read {} write {})",
                        r.map(mbs).unwrap_or_else(|| "-".into()),
                        w.map(mbs).unwrap_or_else(|| "-".into())
                    ),
                };
                format!(
                    "{} read {} write {}{est}",
                    t.name,
                    mbs(t.read_bps),
                    mbs(t.write_bps)
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        mbs(total_bw),
        m.layout,
        if m.passthrough { "on" } else { "off" },
        threads,
        ranks,
        ranks_from
    )
}

/// How many aio requests the ranks keep in flight, and how each rank's share is cut into
/// threads and queue depth.
struct Depth {
    /// Pipelined optimizer swaps: the next subgroup is read while this one is updated and
    /// the previous one is still being written. With whole-file placement consecutive
    /// subgroups sit on different tiers, so that is what lets one rank use several tiers
    /// at once.
    pipeline: bool,
    /// aio handles of one rank busy at once.
    handles: usize,
    /// FUSE threads kept for metadata.
    reserve: usize,
    /// FUSE threads left for data.
    budget: usize,
    /// Requests each tier takes: [`DEPTH_PER_TIER`], fewer where its admission queue
    /// admits fewer.
    depth_per_tier: Vec<usize>,
    /// Their sum.
    needed: usize,
    /// Requests per handle that would keep every tier at its depth.
    per_handle_target: usize,
    /// What the threads allow of that.
    per_handle: usize,
    intra: usize,
    qd: usize,
    max_in_flight: usize,
}

impl Depth {
    fn choose(tiers: &[&TierFacts], threads: usize, ranks: usize) -> Depth {
        let pipeline = tiers.len().max(1) >= 2;
        let handles = if pipeline { 2 } else { 1 };
        let reserve = reserve_for(threads);
        let budget = threads.saturating_sub(reserve).max(1);
        let per_handle_budget = (budget / (ranks * handles)).max(1);
        let depth_per_tier: Vec<usize> = tiers
            .iter()
            .map(|t| {
                if t.queue_limit > 0 {
                    DEPTH_PER_TIER.min(t.queue_limit)
                } else {
                    DEPTH_PER_TIER
                }
            })
            .collect();
        let needed: usize = depth_per_tier.iter().sum();
        let per_handle_target = DEPTH_PER_TIER.max(needed.div_ceil(ranks));
        let per_handle = per_handle_target.min(per_handle_budget);
        let intra = if per_handle >= 2 * DEPTH_PER_TIER {
            let k = (per_handle / DEPTH_PER_TIER).min(4);
            1usize << (usize::BITS - 1 - k.leading_zeros())
        } else {
            1
        };
        let qd = (per_handle / intra).max(1);
        Depth {
            pipeline,
            handles,
            reserve,
            budget,
            depth_per_tier,
            needed,
            per_handle_target,
            per_handle,
            intra,
            qd,
            max_in_flight: ranks * handles * intra * qd,
        }
    }

    /// The notes on the `aio` block.
    fn explain(&self, tiers: &[&TierFacts], threads: usize, ranks: usize, notes: &mut Vec<String>) {
        let Depth {
            handles,
            reserve,
            budget,
            needed,
            intra,
            qd,
            max_in_flight,
            ..
        } = *self;
        let n = tiers.len().max(1);
        notes.push(format!(
            "aio.block_size = {BLOCK_SIZE}: tierfs negotiates 1 MiB FUSE requests; larger \
             blocks are split by the kernel anyway, smaller ones cost more requests per byte."
        ));
        notes.push(format!(
            "target: about {DEPTH_PER_TIER} direct 1 MiB requests in flight per tier (the depth \
             `tierfs probe` measures bandwidth at){}, so {needed} across the {n} tier(s); \
             {ranks} rank(s) x {handles} busy aio handle(s) x intra_op_parallelism x \
             queue_depth must reach that and stay below the {threads} FUSE threads less \
             {reserve} kept for metadata ({budget}).",
            if self.depth_per_tier.iter().any(|d| *d < DEPTH_PER_TIER) {
                ", fewer where a tier's admission queue admits fewer"
            } else {
                ""
            }
        ));
        notes.push(format!(
            "aio.queue_depth = {qd}, aio.intra_op_parallelism = {intra}: each rank keeps {} \
             request(s) in flight per handle; all ranks together at most {max_in_flight} \
             (< {threads} threads).{}",
            intra * qd,
            if intra > 1 {
                format!(
                    " The depth is spread over {intra} threads of queue depth {qd}: each \
                     thread has its own libaio context and its own part of the tensor, and the \
                     kernel runs an O_DIRECT write that extends a FUSE file synchronously, so \
                     on a freshly created swap file only separate threads overlap."
                )
            } else {
                " One thread per handle: a tensor lives in one file, and a deeper queue on it \
                 does what more threads would."
                    .to_string()
            }
        ));
        self.explain_limits(tiers, threads, ranks, notes);
        notes.push(
            "aio.single_submit = false: one io_submit call hands the kernel a whole batch of \
             requests, which keeps the queue full with fewer system calls."
                .to_string(),
        );
        notes.push(
            "aio.overlap_events = true: new requests are submitted as completions arrive \
             instead of after the whole batch, so the tiers never see the queue drain."
                .to_string(),
        );
    }

    /// Notes on what holds the depth below its target: the FUSE threads, a tier's
    /// admission queue.
    fn explain_limits(
        &self,
        tiers: &[&TierFacts],
        threads: usize,
        ranks: usize,
        notes: &mut Vec<String>,
    ) {
        let (handles, budget, target) = (self.handles, self.budget, self.per_handle_target);
        if self.per_handle < target {
            let want = (threads..=crate::config::MAX_THREADS)
                .filter(|t| t % 8 == 0)
                .find(|t| (t - reserve_for(*t)) / (ranks * handles) >= target)
                .unwrap_or(crate::config::MAX_THREADS);
            notes.push(format!(
                "the FUSE threads limit the depth: {ranks} rank(s) x {handles} handle(s) x \
                 {target} would be {} requests. For the full depth set `threads = {want}` in \
                 the config's [mount] section and remount.",
                ranks * handles * target
            ));
        }
        if ranks * handles > budget {
            notes.push(format!(
                "WARNING: {ranks} rank(s) x {handles} handle(s) exceed the {budget} threads \
                 free for data even at queue depth 1: raise `threads` in [mount] (at most {}).",
                crate::config::MAX_THREADS
            ));
        }
        if let Some(t) = tiers
            .iter()
            .zip(&self.depth_per_tier)
            .find(|(t, d)| t.queue_limit > 0 && **d < DEPTH_PER_TIER)
        {
            notes.push(format!(
                "tier {} admits only {} request(s) at once (its admission queue, \
                 `max_in_flight`); more wait in the daemon holding a FUSE thread each.",
                t.0.name, t.0.queue_limit
            ));
        }
    }
}

/// What passthrough means for the thread cap.
fn passthrough_note(m: &MountFacts) -> String {
    let mode = m.passthrough_mode.as_deref().unwrap_or("auto");
    if !m.passthrough {
        "passthrough is off (by the config, or the kernel or privileges do not allow it): \
             every request goes through a FUSE thread, so the thread cap above is the real \
             limit."
            .to_string()
    } else if mode == "direct" {
        "passthrough = \"direct\": whole files, O_DIRECT opens included, are read and \
             written by the kernel on the tier itself and take no FUSE thread, so the thread \
             cap above is a safe bound, not a tight one; striped files and files the daemon \
             serves still need it."
            .to_string()
    } else {
        format!(
            "passthrough = \"{mode}\": DeepSpeed's swap files (*.tensor.swp) that sit whole \
                 on one tier go to the kernel with their O_DIRECT opens and take no FUSE \
                 thread (with staging memory, only the fastest tier's: the others are staged \
                 through the daemon); striped files, staged files and other O_DIRECT opens \
                 take FUSE threads, and the cap above bounds those."
        )
    }
}

/// What the mount's staging memory does for the pinned buffers.
fn staging_note(m: &MountFacts) -> String {
    match &m.staging {
        Some((size, from)) => format!(
            "staging memory: the mount holds up to {} of host memory ({from}), reading the \
             next swap files ahead and writing behind; it gives memory back first when the \
             job runs short, so the pinned buffers below need no room set aside for it. A \
             staged file goes through the daemon, not kernel passthrough.",
            crate::units::fmt_bytes(*size)
        ),
        None => "staging memory: none (cache.size = \"off\", or a memory limit too small \
                 for it): every swap file goes to the tiers as it is written."
            .to_string(),
    }
}

/// The pinned swap buffers of the two offloads.
struct Buffers {
    /// `offload_param.buffer_count`.
    param: usize,
    /// `offload_optimizer.buffer_count`.
    optimizer: usize,
    pipeline: bool,
    /// `sub_group_size` and `pin_memory` for `ranks` ranks in the job's memory.
    fit: crate::client::dsmemory::Fit,
}

impl Buffers {
    /// For `n` tiers, with or without pipelined optimizer swaps, `ranks` ranks sharing
    /// `memory`.
    fn choose(
        n: usize,
        pipeline: bool,
        ranks: usize,
        memory: &crate::client::dsmemory::JobMemory,
    ) -> Buffers {
        let param = 5usize.max(2 * n + 1);
        let optimizer = if pipeline {
            3 * ADAM_BUFFERS
        } else {
            ADAM_BUFFERS
        };
        let param_bytes = param as u64 * PARAM_BUFFER_SIZE * 2;
        Buffers {
            param,
            optimizer,
            pipeline,
            fit: crate::client::dsmemory::fit(
                param_bytes,
                optimizer,
                SUB_GROUP_SIZE,
                ranks,
                memory,
            ),
        }
    }

    /// The notes on the offload blocks and `sub_group_size`.
    fn explain(&self, m: &MountFacts, n: usize, notes: &mut Vec<String>) {
        let (param_buffer_count, optimizer_buffer_count) = (self.param, self.optimizer);
        notes.push(format!(
            "offload_param.buffer_count = {param_buffer_count}: enough parameter buffers for \
             two prefetched parameter reads per tier plus the one in use{}; buffer_size = \
             {PARAM_BUFFER_SIZE} elements must be at least the largest parameter (e.g. the \
             embedding, vocab x hidden): raise it if DeepSpeed says a parameter does not fit. \
             Pinned host memory per rank: buffer_count x buffer_size x 2 bytes (bf16/fp16) = \
             {:.1} GB.",
            if param_buffer_count == 5 {
                " (DeepSpeed's default 5 already covers it)"
            } else {
                ""
            },
            (param_buffer_count as u64 * PARAM_BUFFER_SIZE * 2) as f64 / 1e9
        ));
        notes.push(format!(
            "offload_param.max_in_cpu = {MAX_IN_CPU} elements (DeepSpeed's default); {}",
            if self.fit.pin_memory {
                "pin_memory = true on both offloads: page-locked buffers copy to the GPU \
                 fastest and are page aligned, as O_DIRECT wants (set false if the node is \
                 short of host memory)."
            } else {
                "pin_memory = false on both offloads: the node's memory is too short to pin \
                 the buffers (see the pinned memory note)."
            }
        ));
        notes.push(if self.pipeline {
            format!(
                "offload_optimizer.pipeline_read = pipeline_write = true: the next subgroup's \
                 files are read and the previous one's written while this one is updated; \
                 with {n} tiers those files sit on different tiers, so the tiers work at the \
                 same time instead of one after another. buffer_count = \
                 {optimizer_buffer_count}: Adam swaps {ADAM_BUFFERS} tensors per subgroup \
                 (fp32 weights, exp_avg, exp_avg_sq, gradient), for three subgroups at once."
            )
        } else {
            format!(
                "offload_optimizer.pipeline_read = pipeline_write = false: with one tier there \
                 is no second tier to overlap with, and pipelining would triple the \
                 optimizer's pinned buffers. buffer_count = {optimizer_buffer_count}: Adam \
                 swaps {ADAM_BUFFERS} tensors per subgroup (fp32 weights, exp_avg, \
                 exp_avg_sq, gradient)."
            )
        });
        let sub_group_size = self.fit.sub_group_size;
        notes.push(format!(
            "zero_optimization.sub_group_size = {sub_group_size} elements: each subgroup \
             becomes its own swap files, {}. Pinned host memory of the optimizer buffers per \
             rank: buffer_count x sub_group_size x 4 bytes = {:.1} GB; lower sub_group_size \
             (or turn the pipelines off and use buffer_count {ADAM_BUFFERS}) if that does not \
             fit.",
            if m.layout == "stripe" {
                "and striping splits every file across the tiers whatever its size"
            } else {
                "and whole-file placement splits the state across tiers file by file, so many \
                 smaller subgroups follow the Eq. 1 shares more closely than a few large ones"
            },
            (optimizer_buffer_count as u64 * sub_group_size * 4) as f64 / 1e9
        ));
        notes.push(self.fit.note.clone());
        notes.push(format!(
            "nvme_path = {}: the tierfs mount, for both offloads; merge these blocks into your \
             DeepSpeed config (stage 3 is needed for offload_param).",
            m.mountpoint
        ));
    }
}

/// The DeepSpeed config blocks for the chosen depth and buffers.
fn ds_config(m: &MountFacts, depth: &Depth, buffers: &Buffers) -> DsConfig {
    DsConfig {
        zero_optimization: ZeroOptimization {
            stage: 3,
            sub_group_size: buffers.fit.sub_group_size,
            offload_param: OffloadParam {
                device: "nvme",
                nvme_path: m.mountpoint.clone(),
                pin_memory: buffers.fit.pin_memory,
                buffer_count: buffers.param,
                buffer_size: PARAM_BUFFER_SIZE,
                max_in_cpu: MAX_IN_CPU,
            },
            offload_optimizer: OffloadOptimizer {
                device: "nvme",
                nvme_path: m.mountpoint.clone(),
                pin_memory: buffers.fit.pin_memory,
                buffer_count: buffers.optimizer,
                pipeline_read: depth.pipeline,
                pipeline_write: depth.pipeline,
                fast_init: false,
            },
        },
        aio: Aio {
            block_size: BLOCK_SIZE,
            queue_depth: depth.qd,
            intra_op_parallelism: depth.intra,
            single_submit: false,
            overlap_events: true,
        },
    }
}

/// Ranks per node when `--ranks` is not given: the launcher's local size, else the GPUs
/// (`/dev/nvidiaN`), else 1. Returns the count and where it came from.
pub fn detect_ranks() -> (usize, String) {
    for var in [
        "LOCAL_WORLD_SIZE",
        "SLURM_NTASKS_PER_NODE",
        "PALS_LOCAL_SIZE",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
    ] {
        if let Ok(v) = std::env::var(var) {
            // SLURM_NTASKS_PER_NODE can read "4(x2)".
            let digits: String = v.chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(n) = digits.parse::<usize>() {
                if n > 0 {
                    return (n, format!("from ${var}; override with --ranks"));
                }
            }
        }
    }
    let gpus = std::fs::read_dir("/dev")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix("nvidia"))
                        .is_some_and(|r| !r.is_empty() && r.chars().all(|c| c.is_ascii_digit()))
                })
                .count()
        })
        .unwrap_or(0);
    if gpus > 0 {
        return (
            gpus,
            "one per GPU found in /dev; override with --ranks".into(),
        );
    }
    (
        1,
        "no launcher variables or GPUs found; give --ranks".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(tiers: &[(f64, bool)], threads: usize, passthrough: bool) -> MountFacts {
        MountFacts {
            mountpoint: "/local/tierfs".into(),
            layout: "whole-file".into(),
            passthrough,
            passthrough_mode: Some("direct".into()),
            threads,
            tiers: tiers
                .iter()
                .enumerate()
                .map(|(i, (bw, healthy))| TierFacts {
                    name: format!("t{i}"),
                    read_bps: *bw,
                    write_bps: *bw,
                    healthy: *healthy,
                    queue_limit: threads / tiers.len(),
                    est_read_bps: None,
                    est_write_bps: (i == 0).then_some(1.2e9),
                })
                .collect(),
            staging: None,
            memory: Default::default(),
        }
    }

    #[test]
    fn reads_threads_from_the_mount_section_only() {
        let text = "[[tier]]\nname = \"a\"\nthreads = 3\n\n[mount]\nstats_dir = \".tierfs\"\n\
                    threads = 96\npassthrough = \"auto\"\n";
        assert_eq!(threads_from_config(text), Some(96));
        assert_eq!(threads_from_config("[mount]\n# threads = 5\n"), None);
        assert_eq!(threads_from_config("[placement]\nthreads = 5\n"), None);
        assert_eq!(mount_setting(text, "passthrough").as_deref(), Some("auto"));
    }

    #[test]
    fn four_ranks_two_tiers_default_threads() {
        let c = choose(&facts(&[(2e9, true), (1e9, true)], 64, false), 4, "test");
        assert!(c.pipeline);
        assert!(
            c.notes[0].contains(
                "t0 read 2000 MB/s write 2000 MB/s (measured in use: read - write 1200 MB/s)"
            ),
            "{}",
            c.notes[0]
        );
        assert_eq!(c.handles_per_rank, 2);
        assert_eq!(c.reserve, 8);
        // 4 ranks x 2 handles x 8 = 64 would take every thread: depth 7.
        assert_eq!((c.intra_op_parallelism, c.queue_depth), (1, 7));
        assert_eq!(c.max_in_flight, 56);
        assert!(c.max_in_flight < 64);
        assert!(
            c.notes.iter().any(|n| n.contains("threads = 80")),
            "{:?}",
            c.notes
        );
        // ... and that advice is right.
        let c2 = choose(&facts(&[(2e9, true), (1e9, true)], 80, false), 4, "test");
        assert_eq!((c2.intra_op_parallelism, c2.queue_depth), (1, 8));
        assert!(c2.max_in_flight < 80);
        let a = &c.json["aio"];
        assert_eq!(a["block_size"], 1048576);
        assert_eq!(a["queue_depth"], 7);
        assert_eq!(a["single_submit"], false);
        assert_eq!(a["overlap_events"], true);
        let z = &c.json["zero_optimization"];
        assert_eq!(z["offload_param"]["device"], "nvme");
        assert_eq!(z["offload_param"]["nvme_path"], "/local/tierfs");
        assert_eq!(z["offload_optimizer"]["nvme_path"], "/local/tierfs");
        assert_eq!(z["offload_optimizer"]["buffer_count"], 12);
        assert_eq!(z["offload_optimizer"]["pipeline_read"], true);
    }

    #[test]
    fn one_rank_gets_depth_for_every_tier() {
        // 1 rank, 2 tiers: 16 requests needed per handle -> two threads of depth 8.
        let c = choose(&facts(&[(2e9, true), (1e9, true)], 64, false), 1, "test");
        assert_eq!((c.intra_op_parallelism, c.queue_depth), (2, 8));
        // 1 rank, 4 tiers: 32 needed, 56 / 2 handles = 28 allowed.
        let c = choose(
            &facts(
                &[(2e9, true), (2e9, true), (2e9, true), (1e9, true)],
                64,
                false,
            ),
            1,
            "test",
        );
        assert_eq!(c.intra_op_parallelism * c.queue_depth, 28);
        assert_eq!((c.intra_op_parallelism, c.queue_depth), (2, 14));
        assert!(c.max_in_flight < 64);
        assert_eq!(c.param_buffer_count, 9);
    }

    #[test]
    fn single_tier_turns_pipelining_off() {
        let c = choose(&facts(&[(3e9, true)], 64, false), 2, "test");
        assert!(!c.pipeline);
        assert_eq!(c.handles_per_rank, 1);
        assert_eq!(c.optimizer_buffer_count, 4);
        assert_eq!((c.intra_op_parallelism, c.queue_depth), (1, 8));
        assert_eq!(
            c.json["zero_optimization"]["offload_optimizer"]["pipeline_write"],
            false
        );
    }

    #[test]
    fn failed_tiers_are_left_out() {
        let c = choose(&facts(&[(2e9, true), (1e9, false)], 64, false), 1, "test");
        assert!(!c.pipeline, "one healthy tier left");
        assert!(c
            .notes
            .iter()
            .any(|n| n.contains("t1") && n.contains("failed")));
    }

    #[test]
    fn stays_below_threads_for_any_input() {
        for threads in [1, 2, 3, 8, 16, 64, 100, 256] {
            for ranks in 1..=16 {
                for n in 1..=4 {
                    let tiers: Vec<(f64, bool)> = (0..n).map(|_| (1e9, true)).collect();
                    let c = choose(&facts(&tiers, threads, true), ranks, "test");
                    assert!(c.queue_depth >= 1 && c.intra_op_parallelism >= 1);
                    let per = c.intra_op_parallelism * c.queue_depth;
                    if ranks * c.handles_per_rank < threads.saturating_sub(c.reserve) {
                        assert!(
                            c.max_in_flight < threads,
                            "threads {threads} ranks {ranks} tiers {n}: {}",
                            c.max_in_flight
                        );
                    } else {
                        assert_eq!(per, 1);
                    }
                }
            }
        }
    }

    #[test]
    fn passthrough_mode_is_explained() {
        let mut f = facts(&[(2e9, true), (1e9, true)], 64, true);
        let said = |f: &MountFacts, what: &str| {
            choose(f, 1, "test").notes.iter().any(|n| n.contains(what))
        };
        assert!(said(&f, "take no FUSE thread"));
        f.passthrough_mode = Some("auto".into());
        assert!(said(&f, "sit whole on one tier go to the kernel"));
        f.passthrough = false;
        assert!(said(&f, "passthrough is off"));
    }

    #[test]
    fn staging_memory_is_explained() {
        let mut f = facts(&[(2e9, true), (1e9, true)], 64, true);
        let said = |f: &MountFacts, what: &str| {
            choose(f, 1, "test").notes.iter().any(|n| n.contains(what))
        };
        assert!(said(&f, "staging memory: none"));
        f.staging = Some((
            256 << 20,
            "automatic: 1/8 of the memory cgroup v1 limit".into(),
        ));
        assert!(said(
            &f,
            "holds up to 256.0 MiB of host memory (automatic: 1/8"
        ));
    }

    #[test]
    fn small_queue_limits_are_reported() {
        let mut f = facts(&[(2e9, true), (1e9, true)], 64, false);
        f.tiers[1].queue_limit = 2;
        let c = choose(&f, 4, "test");
        assert!(c.notes.iter().any(|n| n.contains("admits only 2")));
    }

    #[test]
    fn pinned_buffers_follow_the_jobs_memory() {
        // A 32 GiB job and 4 ranks: the 5.8 GB per rank of the defaults would take 23 GB
        // of it, a quarter is 8.6 GB.
        let mut f = facts(&[(2e9, true), (1e9, true)], 64, false);
        f.memory = crate::client::dsmemory::JobMemory {
            bounds: vec![(32 << 30, "the cgroup v2 limit 32.0 GiB (/job)".into())],
        };
        let c = choose(&f, 4, "test");
        let z = &c.json["zero_optimization"];
        let sub = z["sub_group_size"].as_u64().unwrap();
        assert_eq!(sub, c.sub_group_size);
        assert!(sub < SUB_GROUP_SIZE, "{sub}");
        let per_rank = c.param_buffer_count as u64 * PARAM_BUFFER_SIZE * 2
            + c.optimizer_buffer_count as u64 * sub * 4;
        assert!(4 * per_rank <= (32u64 << 30) / 4, "{per_rank}");
        assert_eq!(z["offload_optimizer"]["pin_memory"], true);
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("Capped by the cgroup v2 limit 32.0 GiB")),
            "{:#?}",
            c.notes
        );
        assert!(
            c.notes
                .iter()
                .any(|n| n.starts_with(&format!("zero_optimization.sub_group_size = {sub} "))),
            "{:#?}",
            c.notes
        );
        // Too little for any pinned buffers: pin_memory goes off on both offloads.
        f.memory.bounds[0].0 = 2 << 30;
        let c = choose(&f, 4, "test");
        let z = &c.json["zero_optimization"];
        assert_eq!(z["offload_param"]["pin_memory"], false);
        assert_eq!(z["offload_optimizer"]["pin_memory"], false);
        assert!(!c.pin_memory);
    }
}
