//! `.tierfs/metrics`: the stats in the Prometheus text exposition format (version 0.0.4),
//! the format node_exporter's textfile collector reads.
//!
//! Every metric is defined once, in [`ALL`] (name, type, help); the names are stable and
//! documented in `docs/METRICS.md` (a test checks that the two agree). Per-tier metrics carry a
//! `tier="NAME"` label. Counters end in `_total`, sizes are `_bytes`, rates
//! `_bytes_per_second`. Families with no sample on this mount (a capacity nobody set, device
//! counters on a tier without a block device) are left out rather than printed empty.

use crate::stats::{Snapshot, TierStats};
use std::fmt::Write;

/// Prometheus metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// One metric family.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

const fn counter(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        kind: Kind::Counter,
        help,
    }
}

const fn gauge(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        kind: Kind::Gauge,
        help,
    }
}

// Daemon-level.
pub const INFO: Metric = gauge(
    "tierfs_info",
    "Always 1; labels carry the tierfs version and the placement layout.",
);
pub const UPTIME: Metric = gauge("tierfs_uptime_seconds", "Seconds since the daemon mounted.");
pub const FILES: Metric = gauge("tierfs_files", "Regular files in the mount.");
pub const PASSTHROUGH_ENABLED: Metric = gauge(
    "tierfs_passthrough_enabled",
    "1 while kernel passthrough is offered for whole files, else 0.",
);
pub const REQUEST_PANICS: Metric = counter(
    "tierfs_request_panics_total",
    "Requests whose handler panicked since mount; each was answered EIO and its inode failed.",
);
pub const FAILED_INODES: Metric = gauge(
    "tierfs_failed_inodes",
    "Inodes that answer EIO until the next mount, after a request on them panicked.",
);

// Per tier.
pub const TIER_READ_BYTES: Metric = counter(
    "tierfs_tier_read_bytes_total",
    "Bytes the daemon read from the tier since mount (passthrough I/O is not included).",
);
pub const TIER_WRITTEN_BYTES: Metric = counter(
    "tierfs_tier_written_bytes_total",
    "Bytes the daemon wrote to the tier since mount (passthrough I/O is not included).",
);
pub const TIER_READ_REQUESTS: Metric = counter(
    "tierfs_tier_read_requests_total",
    "Backing read requests the daemon issued to the tier since mount.",
);
pub const TIER_WRITE_REQUESTS: Metric = counter(
    "tierfs_tier_write_requests_total",
    "Backing write requests the daemon issued to the tier since mount.",
);
pub const TIER_ERRORS: Metric = counter(
    "tierfs_tier_errors_total",
    "Backing operations on the tier that failed since mount.",
);
pub const TIER_IN_FLIGHT: Metric = gauge(
    "tierfs_tier_requests_in_flight",
    "Backing requests on the tier in progress now.",
);
pub const TIER_FILES: Metric = gauge("tierfs_tier_files", "Files with a piece on the tier.");
pub const TIER_USED: Metric = gauge(
    "tierfs_tier_used_bytes",
    "Logical bytes of file pieces held on the tier.",
);
pub const TIER_FREE: Metric = gauge(
    "tierfs_tier_free_bytes",
    "Bytes the tier can still take (free space less the reserve, within its capacity).",
);
pub const TIER_CAPACITY: Metric = gauge(
    "tierfs_tier_capacity_bytes",
    "The configured capacity cap of the tier (only tiers that set one).",
);
pub const TIER_READ_BANDWIDTH: Metric = gauge(
    "tierfs_tier_read_bandwidth_bytes_per_second",
    "Read bandwidth from the config or the probe (source=\"config\" or \"probe\").",
);
pub const TIER_WRITE_BANDWIDTH: Metric = gauge(
    "tierfs_tier_write_bandwidth_bytes_per_second",
    "Write bandwidth from the config or the probe (source=\"config\" or \"probe\").",
);
pub const TIER_EST_READ_BANDWIDTH: Metric = gauge(
    "tierfs_tier_estimated_read_bandwidth_bytes_per_second",
    "Online estimate of the tier's read bandwidth from the daemon's own traffic (bytes per busy second); absent until enough traffic was seen.",
);
pub const TIER_EST_WRITE_BANDWIDTH: Metric = gauge(
    "tierfs_tier_estimated_write_bandwidth_bytes_per_second",
    "Online estimate of the tier's write bandwidth from the daemon's own traffic (bytes per busy second); absent until enough traffic was seen.",
);
pub const TIER_SHARE: Metric = gauge(
    "tierfs_tier_share_ratio",
    "The tier's current Eq. 1 share of new bytes, 0 to 1.",
);
pub const TIER_PAUSED: Metric = gauge(
    "tierfs_tier_paused",
    "1 while adapt gives the tier no new data because it measured too slow next to the fastest tier (placement.min_share).",
);
pub const TIER_SATURATED: Metric = gauge(
    "tierfs_tier_saturated",
    "1 while the tier queues: its latency per byte rose to twice its best or more while its throughput did not grow.",
);
pub const TIER_CORE_WAIT: Metric = counter(
    "tierfs_tier_core_wait_seconds_total",
    "Seconds the daemon's threads waited for a core while their requests to the tier ran (CPU starvation; the bandwidth estimates leave it out of the tier's busy time).",
);
pub const TIER_SHARED_LIVE_NODES: Metric = gauge(
    "tierfs_tier_shared_live_nodes",
    "For a tier the job's nodes share (shared_ledger): the live nodes in its ledger, this one included; absent otherwise or while the ledger cannot be written.",
);
pub const TIER_SHARED_ALLOT_BANDWIDTH: Metric = gauge(
    "tierfs_tier_shared_allot_bytes_per_second",
    "For a shared tier: this node's part of the tier's estimated capacity (bytes/s), from the job's ledger; absent otherwise or while the ledger cannot be written.",
);
pub const TIER_HEALTHY: Metric = gauge(
    "tierfs_tier_healthy",
    "1 while the tier takes new data, 0 after it failed (EIO, EROFS).",
);
pub const TIER_DIRECT_IO: Metric = gauge(
    "tierfs_tier_direct_io",
    "1 when the tier's filesystem accepts O_DIRECT, 0 when tierfs falls back to buffered I/O.",
);
pub const TIER_PASSTHROUGH_OPEN: Metric = gauge(
    "tierfs_tier_passthrough_open_handles",
    "Kernel passthrough handles open on the tier now.",
);
pub const TIER_PASSTHROUGH_OPENS: Metric = counter(
    "tierfs_tier_passthrough_opens_total",
    "Files opened in kernel passthrough on the tier since mount.",
);
pub const TIER_DEVICE_READ: Metric = counter(
    "tierfs_tier_device_read_bytes_total",
    "Bytes read from the tier's block device since mount, by anyone, passthrough included (tiers with a block device only).",
);
pub const TIER_DEVICE_WRITTEN: Metric = counter(
    "tierfs_tier_device_written_bytes_total",
    "Bytes written to the tier's block device since mount, by anyone, passthrough included (tiers with a block device only).",
);
pub const TIER_APP_READ_BYTES: Metric = counter(
    "tierfs_tier_app_read_bytes_total",
    "Bytes programs read at the mount from files on the tier since mount, by the path that served them (path=daemon|memory|direct|passthrough; passthrough from the tier's block device).",
);
pub const TIER_APP_WRITTEN_BYTES: Metric = counter(
    "tierfs_tier_app_written_bytes_total",
    "Bytes programs wrote at the mount to files on the tier since mount, by the path that took them (path=daemon|memory|direct|passthrough; memory: held in staging memory first).",
);
pub const TIER_QUEUE_LIMIT: Metric = gauge(
    "tierfs_tier_queue_limit",
    "Requests the tier's admission queue lets in flight at once.",
);
pub const TIER_QUEUE_WAITING: Metric = gauge(
    "tierfs_tier_queue_waiting",
    "Requests waiting now for a slot in the tier's admission queue.",
);
pub const TIER_QUEUE_WAITED: Metric = counter(
    "tierfs_tier_queue_waited_total",
    "Requests that had to wait for a slot in the tier's admission queue since mount.",
);
pub const TIER_QUEUE_GRANTED: Metric = counter(
    "tierfs_tier_queue_granted_total",
    "Requests the tier's admission queue granted since mount, by priority class.",
);

// What the tier's operator set (`tierfs ctl`).
pub const TIER_CONTROL_STATE: Metric = gauge(
    "tierfs_tier_control_state",
    "1 for the state the tier's operator set through tierfs ctl (state=active|paused|draining|drained), 0 for the others.",
);
pub const TIER_WEIGHT: Metric = gauge(
    "tierfs_tier_weight",
    "The tier's weight in Eq. 1, set through tierfs ctl (1 at mount, 0 for no share of new data).",
);
pub const TIER_DRAIN_LEFT_FILES: Metric = gauge(
    "tierfs_tier_drain_left_files",
    "For a tier draining or drained: files it still holds, to be moved off.",
);
pub const TIER_DRAIN_LEFT_BYTES: Metric = gauge(
    "tierfs_tier_drain_left_bytes",
    "For a tier draining or drained: bytes it still holds, to be moved off.",
);
pub const TIER_DRAIN_MOVED_FILES: Metric = counter(
    "tierfs_tier_drain_moved_files_total",
    "Files moved off the tier since its last drain began.",
);
pub const TIER_DRAIN_MOVED_BYTES: Metric = counter(
    "tierfs_tier_drain_moved_bytes_total",
    "Bytes moved off the tier since its last drain began.",
);
pub const TIER_DRAIN_FAILURES: Metric = counter(
    "tierfs_tier_drain_failures_total",
    "Moves off the tier that failed since its last drain began (each is tried again).",
);

/// Names of the admission queue's priority classes, in the order of
/// `QueueStats::granted` (the `class` label of [`TIER_QUEUE_GRANTED`]).
pub const QUEUE_CLASSES: [&str; 6] = [
    "demand_read",
    "demand_write",
    "prefetch",
    "write_back",
    "migration",
    "probe",
];

/// Every metric, in the order they are printed.
// Host-memory cache (only with a cache).
pub const CACHE_SIZE: Metric = gauge("tierfs_cache_size_bytes", "The cache's memory bound.");
pub const CACHE_BUDGET: Metric = gauge(
    "tierfs_cache_budget_bytes",
    "Memory the cache may hold now: its size, lower while the job needs the memory.",
);
pub const CACHE_USED: Metric = gauge(
    "tierfs_cache_used_bytes",
    "Memory held by cached files (whole files, in 1 MiB blocks).",
);
pub const CACHE_DIRTY: Metric = gauge(
    "tierfs_cache_dirty_bytes",
    "Cached bytes newer than their tier copy (1 MiB blocks).",
);
pub const CACHE_HIT: Metric = counter(
    "tierfs_cache_hit_bytes_total",
    "Bytes read from cached files that were served from memory.",
);
pub const CACHE_MISS: Metric = counter(
    "tierfs_cache_miss_bytes_total",
    "Bytes read from cached files that had to be read from a tier first.",
);
pub const CACHE_ABSORBED: Metric = counter(
    "tierfs_cache_absorbed_bytes_total",
    "Bytes written into cached files (in memory).",
);
pub const CACHE_WRITTEN_BACK: Metric = counter(
    "tierfs_cache_written_back_bytes_total",
    "Bytes the cache wrote back to the tiers.",
);
pub const CACHE_PREFETCHED: Metric = counter(
    "tierfs_cache_prefetched_bytes_total",
    "Bytes loaded into the cache ahead of the reader.",
);
pub const CACHE_PREFETCH_USED: Metric = counter(
    "tierfs_cache_prefetch_used_bytes_total",
    "Prefetched bytes that were then read.",
);
pub const CACHE_PREFETCH_WASTED: Metric = counter(
    "tierfs_cache_prefetch_wasted_bytes_total",
    "Prefetched bytes dropped before anyone read them.",
);
pub const CACHE_EVICTIONS: Metric = counter(
    "tierfs_cache_evictions_total",
    "Files dropped from the cache to make room.",
);

pub const CPU_SECONDS: Metric = counter(
    "tierfs_cpu_seconds_total",
    "Daemon CPU seconds by class of work (class=demand|prefetch|write-back|migration|other).",
);
pub const CPU_BYTES: Metric = counter(
    "tierfs_cpu_bytes_total",
    "Bytes moved through the daemon by class of work (the denominator of CPU per GB).",
);
pub const FUSE_REQUESTS: Metric = counter(
    "tierfs_fuse_requests_total",
    "FUSE requests served by the daemon by transport (transport=uring|dev).",
);

pub const ALL: &[Metric] = &[
    INFO,
    UPTIME,
    FILES,
    PASSTHROUGH_ENABLED,
    REQUEST_PANICS,
    FAILED_INODES,
    TIER_READ_BYTES,
    TIER_WRITTEN_BYTES,
    TIER_READ_REQUESTS,
    TIER_WRITE_REQUESTS,
    TIER_ERRORS,
    TIER_IN_FLIGHT,
    TIER_FILES,
    TIER_USED,
    TIER_FREE,
    TIER_CAPACITY,
    TIER_READ_BANDWIDTH,
    TIER_WRITE_BANDWIDTH,
    TIER_EST_READ_BANDWIDTH,
    TIER_EST_WRITE_BANDWIDTH,
    TIER_SHARE,
    TIER_PAUSED,
    TIER_SATURATED,
    TIER_CORE_WAIT,
    TIER_SHARED_LIVE_NODES,
    TIER_SHARED_ALLOT_BANDWIDTH,
    TIER_HEALTHY,
    TIER_DIRECT_IO,
    TIER_PASSTHROUGH_OPEN,
    TIER_PASSTHROUGH_OPENS,
    TIER_DEVICE_READ,
    TIER_DEVICE_WRITTEN,
    TIER_APP_READ_BYTES,
    TIER_APP_WRITTEN_BYTES,
    TIER_QUEUE_LIMIT,
    TIER_QUEUE_WAITING,
    TIER_QUEUE_WAITED,
    TIER_QUEUE_GRANTED,
    TIER_CONTROL_STATE,
    TIER_WEIGHT,
    TIER_DRAIN_LEFT_FILES,
    TIER_DRAIN_LEFT_BYTES,
    TIER_DRAIN_MOVED_FILES,
    TIER_DRAIN_MOVED_BYTES,
    TIER_DRAIN_FAILURES,
    CPU_SECONDS,
    CPU_BYTES,
    FUSE_REQUESTS,
    CACHE_SIZE,
    CACHE_BUDGET,
    CACHE_USED,
    CACHE_DIRTY,
    CACHE_HIT,
    CACHE_MISS,
    CACHE_ABSORBED,
    CACHE_WRITTEN_BACK,
    CACHE_PREFETCHED,
    CACHE_PREFETCH_USED,
    CACHE_PREFETCH_WASTED,
    CACHE_EVICTIONS,
];

/// A sample value.
#[derive(Debug, Clone, Copy)]
enum Value {
    Int(u64),
    Float(f64),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Value::Int(n) => write!(f, "{n}"),
            Value::Float(x) if x.is_nan() => f.write_str("NaN"),
            Value::Float(x) if x.is_infinite() => {
                f.write_str(if x > 0.0 { "+Inf" } else { "-Inf" })
            }
            Value::Float(x) => write!(f, "{x}"),
        }
    }
}

/// Escapes a label value: backslash, double quote and newline.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Escapes HELP text: backslash and newline.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

fn family(out: &mut String, m: &Metric, samples: &[(Vec<(&str, String)>, Value)]) {
    if samples.is_empty() {
        return;
    }
    let _ = writeln!(out, "# HELP {} {}", m.name, escape_help(m.help));
    let _ = writeln!(out, "# TYPE {} {}", m.name, m.kind.as_str());
    for (labels, v) in samples {
        out.push_str(m.name);
        if !labels.is_empty() {
            out.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{k}=\"{}\"", escape_label(val));
            }
            out.push('}');
        }
        let _ = writeln!(out, " {v}");
    }
}

fn per_tier(
    s: &Snapshot,
    f: impl Fn(&TierStats) -> Option<Value>,
) -> Vec<(Vec<(&str, String)>, Value)> {
    s.tiers
        .iter()
        .filter_map(|t| f(t).map(|v| (vec![("tier", t.name.clone())], v)))
        .collect()
}

/// Programs' bytes per tier and path ([`super::app::AppStats`]), the paths apart so they
/// sum to the total: the daemon's own (from the tier), staging memory's, the direct
/// path's, passthrough's.
fn app_paths(s: &Snapshot, written: bool) -> Vec<(Vec<(&str, String)>, Value)> {
    let mut out = Vec::new();
    for t in &s.tiers {
        let a = &t.app;
        let paths = if written {
            [
                (
                    "daemon",
                    a.fuse_written_bytes - a.memory_written_bytes.min(a.fuse_written_bytes),
                ),
                ("memory", a.memory_written_bytes),
                ("direct", a.direct_written_bytes),
                ("passthrough", a.passthrough_written_bytes),
            ]
        } else {
            [
                (
                    "daemon",
                    a.fuse_read_bytes - a.memory_read_bytes.min(a.fuse_read_bytes),
                ),
                ("memory", a.memory_read_bytes),
                ("direct", a.direct_read_bytes),
                ("passthrough", a.passthrough_read_bytes),
            ]
        };
        for (path, v) in paths {
            out.push((
                vec![("tier", t.name.clone()), ("path", path.to_string())],
                Value::Int(v),
            ));
        }
    }
    out
}

/// A shared tier's view of the job's ledger, while the node is coordinated.
fn shared(
    s: &Snapshot,
    f: impl Fn(&super::SharedStats) -> Value,
) -> Vec<(Vec<(&str, String)>, Value)> {
    per_tier(s, |t| t.shared.as_ref().filter(|x| x.coordinated).map(&f))
}

fn bandwidth(s: &Snapshot, f: impl Fn(&TierStats) -> f64) -> Vec<(Vec<(&str, String)>, Value)> {
    s.tiers
        .iter()
        .map(|t| {
            (
                vec![
                    ("tier", t.name.clone()),
                    ("source", t.bandwidth_source.clone()),
                ],
                Value::Float(f(t)),
            )
        })
        .collect()
}

/// The families of what an operator set (`tierfs ctl`); empty for any other name. A
/// drain's only while the tier drains or has drained, so a mount nobody drained has none.
fn control<'a>(s: &'a Snapshot, name: &str) -> Vec<(Vec<(&'a str, String)>, Value)> {
    use crate::tier::admin::AdminState;
    let drain = |f: fn(&TierStats, &super::DrainStats) -> u64| {
        per_tier(s, |t| t.drain.as_ref().map(|d| Value::Int(f(t, d))))
    };
    match name {
        n if n == TIER_CONTROL_STATE.name => s
            .tiers
            .iter()
            .flat_map(|t| {
                AdminState::ALL.iter().map(|st| {
                    (
                        vec![("tier", t.name.clone()), ("state", st.name().to_string())],
                        flag(t.control == st.name()),
                    )
                })
            })
            .collect(),
        n if n == TIER_WEIGHT.name => per_tier(s, |t| Some(Value::Float(t.weight))),
        n if n == TIER_DRAIN_LEFT_FILES.name => drain(|t, _| t.files),
        n if n == TIER_DRAIN_LEFT_BYTES.name => drain(|t, _| t.used),
        n if n == TIER_DRAIN_MOVED_FILES.name => drain(|_, d| d.moved_files),
        n if n == TIER_DRAIN_MOVED_BYTES.name => drain(|_, d| d.moved_bytes),
        n if n == TIER_DRAIN_FAILURES.name => drain(|_, d| d.failures),
        _ => Vec::new(),
    }
}

fn flag(b: bool) -> Value {
    Value::Int(u64::from(b))
}

/// Renders the whole `metrics` file from a snapshot.
pub fn render(s: &Snapshot) -> String {
    use Value::{Float, Int};
    let mut out = String::new();
    for m in ALL {
        let samples = match m.name {
            n if n == INFO.name => vec![(
                vec![
                    ("version", env!("CARGO_PKG_VERSION").to_string()),
                    ("layout", s.layout.clone()),
                ],
                Int(1),
            )],
            n if n == UPTIME.name => vec![(vec![], Float(s.uptime_s))],
            n if n == FILES.name => vec![(vec![], Int(s.file_count.max(s.files.len() as u64)))],
            n if n == PASSTHROUGH_ENABLED.name => vec![(vec![], flag(s.passthrough))],
            n if n == REQUEST_PANICS.name => vec![(vec![], Int(s.request_panics))],
            n if n == FAILED_INODES.name => vec![(vec![], Int(s.failed_inodes))],
            n if n == TIER_READ_BYTES.name => per_tier(s, |t| Some(Int(t.bytes_read))),
            n if n == TIER_WRITTEN_BYTES.name => per_tier(s, |t| Some(Int(t.bytes_written))),
            n if n == TIER_READ_REQUESTS.name => per_tier(s, |t| Some(Int(t.reads))),
            n if n == TIER_WRITE_REQUESTS.name => per_tier(s, |t| Some(Int(t.writes))),
            n if n == TIER_ERRORS.name => per_tier(s, |t| Some(Int(t.errors))),
            n if n == TIER_IN_FLIGHT.name => per_tier(s, |t| Some(Int(t.in_flight))),
            n if n == TIER_FILES.name => per_tier(s, |t| Some(Int(t.files))),
            n if n == TIER_USED.name => per_tier(s, |t| Some(Int(t.used))),
            n if n == TIER_FREE.name => per_tier(s, |t| Some(Int(t.free))),
            n if n == TIER_CAPACITY.name => per_tier(s, |t| t.capacity.map(Int)),
            n if n == TIER_READ_BANDWIDTH.name => bandwidth(s, |t| t.read_bps),
            n if n == TIER_WRITE_BANDWIDTH.name => bandwidth(s, |t| t.write_bps),
            n if n == TIER_EST_READ_BANDWIDTH.name => per_tier(s, |t| t.est_read_bps.map(Float)),
            n if n == TIER_EST_WRITE_BANDWIDTH.name => per_tier(s, |t| t.est_write_bps.map(Float)),
            n if n == TIER_SHARE.name => per_tier(s, |t| Some(Float(t.share))),
            n if n == TIER_PAUSED.name => per_tier(s, |t| Some(flag(t.paused))),
            n if n == TIER_SATURATED.name => per_tier(s, |t| Some(flag(t.saturated))),
            n if n == TIER_CORE_WAIT.name => per_tier(s, |t| Some(Float(t.core_wait_s))),
            n if n == TIER_SHARED_LIVE_NODES.name => shared(s, |sh| Int(sh.live_nodes as u64)),
            n if n == TIER_SHARED_ALLOT_BANDWIDTH.name => shared(s, |sh| Float(sh.allot_bps)),
            n if n == TIER_HEALTHY.name => per_tier(s, |t| Some(flag(t.healthy))),
            n if n == TIER_DIRECT_IO.name => per_tier(s, |t| Some(flag(t.direct_io))),
            n if n == TIER_PASSTHROUGH_OPEN.name => per_tier(s, |t| Some(Int(t.passthrough_open))),
            n if n == TIER_PASSTHROUGH_OPENS.name => {
                per_tier(s, |t| Some(Int(t.passthrough_opens)))
            }
            n if n == TIER_DEVICE_READ.name => per_tier(s, |t| t.device_read.map(Int)),
            n if n == TIER_DEVICE_WRITTEN.name => per_tier(s, |t| t.device_written.map(Int)),
            n if n == TIER_APP_READ_BYTES.name => app_paths(s, false),
            n if n == TIER_APP_WRITTEN_BYTES.name => app_paths(s, true),
            n if n == TIER_QUEUE_LIMIT.name => per_tier(s, |t| Some(Int(t.queue.limit as u64))),
            n if n == TIER_QUEUE_WAITING.name => per_tier(s, |t| Some(Int(t.queue.waiting as u64))),
            n if n == TIER_QUEUE_WAITED.name => per_tier(s, |t| Some(Int(t.queue.waited))),
            n if n == TIER_QUEUE_GRANTED.name => s
                .tiers
                .iter()
                .flat_map(|t| {
                    QUEUE_CLASSES
                        .iter()
                        .zip(t.queue.granted.iter())
                        .map(|(c, g)| {
                            (
                                vec![("tier", t.name.clone()), ("class", c.to_string())],
                                Int(*g),
                            )
                        })
                })
                .collect(),
            n if n == CPU_SECONDS.name => s
                .cpu
                .classes
                .iter()
                .map(|(c, v)| (vec![("class", c.clone())], Float(v.cpu_s)))
                .chain(std::iter::once((
                    vec![("class", "other".to_string())],
                    Float(s.cpu.other_s),
                )))
                .collect(),
            n if n == CPU_BYTES.name => s
                .cpu
                .classes
                .iter()
                .map(|(c, v)| (vec![("class", c.clone())], Int(v.bytes)))
                .collect(),
            n if n == FUSE_REQUESTS.name => vec![
                (
                    vec![("transport", "uring".to_string())],
                    Int(s.fuse.requests_ring),
                ),
                (
                    vec![("transport", "dev".to_string())],
                    Int(s.fuse.requests_dev),
                ),
            ],
            n if n.starts_with("tierfs_cache_") => match &s.cache {
                None => Vec::new(),
                Some(c) => vec![(
                    vec![],
                    Int(match n {
                        _ if n == CACHE_SIZE.name => c.size,
                        _ if n == CACHE_BUDGET.name => c.budget,
                        _ if n == CACHE_USED.name => c.used,
                        _ if n == CACHE_DIRTY.name => c.dirty,
                        _ if n == CACHE_HIT.name => c.hit_bytes,
                        _ if n == CACHE_MISS.name => c.miss_bytes,
                        _ if n == CACHE_ABSORBED.name => c.absorbed_bytes,
                        _ if n == CACHE_WRITTEN_BACK.name => c.writeback_bytes,
                        _ if n == CACHE_PREFETCHED.name => c.prefetch_bytes,
                        _ if n == CACHE_PREFETCH_USED.name => c.prefetch_used_bytes,
                        _ if n == CACHE_PREFETCH_WASTED.name => c.prefetch_wasted_bytes,
                        _ => c.evictions,
                    }),
                )],
            },
            n => control(s, n),
        };
        family(&mut out, m, &samples);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::stats::{FileStats, Snapshot, TierStats};
    use std::collections::{HashMap, HashSet};

    /// A tier with zero counters. Built from JSON so that fields added to `TierStats`
    /// later (optional or defaulted) need no change here.
    pub(crate) fn tier(name: &str, bw: f64) -> TierStats {
        serde_json::from_value(serde_json::json!({
            "name": name,
            "path": format!("/t/{name}"),
            "read_bps": bw,
            "write_bps": bw,
            "bandwidth_source": "config",
            "direct_io": true,
            "share": 0.5,
            "bytes_read": 0,
            "bytes_written": 0,
            "reads": 0,
            "writes": 0,
            "in_flight": 0,
            "errors": 0,
            "files": 0,
            "used": 0,
            "free": 1u64 << 30,
            "capacity": null,
            "healthy": true,
            "passthrough_open": 0,
            "passthrough_opens": 0,
            "device_read": null,
            "device_written": null,
        }))
        .expect("a TierStats")
    }

    pub(crate) fn snap(tiers: Vec<TierStats>) -> Snapshot {
        Snapshot {
            format: 1,
            pid: 42,
            uptime_s: 12.5,
            layout: "whole-file".into(),
            passthrough: false,
            held_bytes: 0,
            cache: None,
            tiers,
            files: vec![FileStats {
                path: "/a".into(),
                size: 1,
                layout: "whole-file".into(),
                tiers: vec!["nvme".into()],
            }],
            file_count: 1,
            relayout: Default::default(),
            request_panics: 0,
            failed_inodes: 0,
            fuse: Default::default(),
            bounce_bytes: 0,
            cpu: Default::default(),
        }
    }

    fn is_name(s: &str, first: fn(char) -> bool) -> bool {
        let mut c = s.chars();
        c.next().is_some_and(first)
            && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
    }

    fn metric_name(s: &str) -> bool {
        is_name(s, |c| c.is_ascii_alphabetic() || c == '_' || c == ':')
    }

    fn label_name(s: &str) -> bool {
        is_name(s, |c| c.is_ascii_alphabetic() || c == '_') && !s.contains(':')
    }

    fn value(s: &str) -> bool {
        matches!(s, "NaN" | "+Inf" | "-Inf") || s.parse::<f64>().is_ok()
    }

    /// Parses `{a="x",b="y"}` at the start of `s`; returns the labels and the rest.
    type Labels = Vec<(String, String)>;

    fn labels(s: &str) -> Result<(Labels, &str), String> {
        let mut out = Vec::new();
        let mut rest = s.strip_prefix('{').ok_or("no {")?;
        loop {
            if let Some(r) = rest.strip_prefix('}') {
                return Ok((out, r));
            }
            let eq = rest.find('=').ok_or("label without =")?;
            let name = &rest[..eq];
            if !label_name(name) {
                return Err(format!("bad label name {name:?}"));
            }
            rest = rest[eq + 1..]
                .strip_prefix('"')
                .ok_or("label value not quoted")?;
            let mut val = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next() {
                    None => return Err("unterminated label value".into()),
                    Some((i, '"')) => break i,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, '\\')) => val.push('\\'),
                        Some((_, '"')) => val.push('"'),
                        Some((_, 'n')) => val.push('\n'),
                        other => return Err(format!("bad escape {other:?}")),
                    },
                    Some((_, '\n')) => return Err("raw newline in label value".into()),
                    Some((_, c)) => val.push(c),
                }
            };
            out.push((name.to_string(), val));
            rest = &rest[end + 1..];
            if let Some(r) = rest.strip_prefix(',') {
                rest = r;
            } else if !rest.starts_with('}') {
                return Err("expected , or } after a label".into());
            }
        }
    }

    /// A validator for the text exposition format as node_exporter's textfile collector
    /// needs it: HELP/TYPE before a family's samples, each family once and contiguous,
    /// well-formed names, labels and values, no duplicate series, no timestamps, counters
    /// named `_total`, a final newline. Returns the series as (name, labels) -> value.
    pub(crate) fn validate(text: &str) -> Result<HashMap<String, f64>, String> {
        if !text.is_empty() && !text.ends_with('\n') {
            return Err("does not end with a newline".into());
        }
        let mut typed: HashMap<String, String> = HashMap::new();
        let mut helped: HashSet<String> = HashSet::new();
        let mut finished: HashSet<String> = HashSet::new();
        let mut current: Option<String> = None;
        let mut series = HashMap::new();
        for (no, line) in text.lines().enumerate() {
            let err = |m: String| format!("line {}: {m}: {line:?}", no + 1);
            if line.is_empty() {
                continue;
            }
            if let Some(c) = line.strip_prefix('#') {
                let parts: Vec<&str> = c.trim_start().splitn(3, ' ').collect();
                match parts.as_slice() {
                    ["HELP", name, ..]
                        if !metric_name(name) || !helped.insert(name.to_string()) =>
                    {
                        return Err(err("bad or repeated HELP".into()));
                    }
                    ["TYPE", name, kind] => {
                        if !metric_name(name) {
                            return Err(err("bad TYPE name".into()));
                        }
                        if !["counter", "gauge", "histogram", "summary", "untyped"].contains(kind) {
                            return Err(err("unknown type".into()));
                        }
                        if typed.insert(name.to_string(), kind.to_string()).is_some()
                            || finished.contains(*name)
                            || current.as_deref() == Some(*name)
                        {
                            return Err(err("TYPE repeated or after samples".into()));
                        }
                    }
                    _ => {}
                }
                continue;
            }
            let name_end = line
                .find(['{', ' '])
                .ok_or_else(|| err("no value".into()))?;
            let name = &line[..name_end];
            if !metric_name(name) {
                return Err(err("bad metric name".into()));
            }
            let (lbls, rest) = if line[name_end..].starts_with('{') {
                labels(&line[name_end..]).map_err(err)?
            } else {
                (Vec::new(), &line[name_end..])
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.len() != 1 || !rest.starts_with(' ') {
                return Err(err("expected one value and no timestamp".into()));
            }
            if !value(fields[0]) {
                return Err(err("bad value".into()));
            }
            let kind = typed
                .get(name)
                .ok_or_else(|| err("sample before its TYPE".into()))?;
            if kind == "counter" && !name.ends_with("_total") {
                return Err(err("counter not named _total".into()));
            }
            if current.as_deref() != Some(name) {
                if finished.contains(name) {
                    return Err(err("family not contiguous".into()));
                }
                if let Some(c) = current.take() {
                    finished.insert(c);
                }
                current = Some(name.to_string());
            }
            let mut sorted = lbls.clone();
            sorted.sort();
            let key = format!(
                "{name}{{{}}}",
                sorted
                    .iter()
                    .map(|(k, v)| format!("{k}={v:?}"))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let v = match fields[0] {
                "NaN" => f64::NAN,
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                x => x.parse().unwrap(),
            };
            if series.insert(key, v).is_some() {
                return Err(err("duplicate series".into()));
            }
        }
        Ok(series)
    }

    #[test]
    fn cache_families_only_with_a_cache() {
        let mut s = snap(vec![tier("only", 1e9)]);
        assert!(!render(&s).contains("tierfs_cache_"));
        s.cache = Some(crate::stats::CacheStats {
            size: 1 << 30,
            size_from: "cache.size = \"1GiB\" in the config".into(),
            budget: 1 << 30,
            used: 2 << 20,
            dirty: 1 << 20,
            hit_bytes: 5,
            miss_bytes: 6,
            absorbed_bytes: 7,
            writeback_bytes: 8,
            prefetch_bytes: 9,
            prefetch_used_bytes: 10,
            prefetch_wasted_bytes: 11,
            evictions: 12,
        });
        let text = render(&s);
        for line in [
            "tierfs_cache_size_bytes 1073741824",
            "tierfs_cache_hit_bytes_total 5",
            "tierfs_cache_miss_bytes_total 6",
            "tierfs_cache_written_back_bytes_total 8",
            "tierfs_cache_prefetch_wasted_bytes_total 11",
            "tierfs_cache_evictions_total 12",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }

    #[test]
    fn names_are_stable_unique_and_follow_conventions() {
        let mut seen = HashSet::new();
        for m in ALL {
            assert!(m.name.starts_with("tierfs_"), "{}", m.name);
            assert!(metric_name(m.name), "{}", m.name);
            assert!(seen.insert(m.name), "duplicate {}", m.name);
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}",
                m.name
            );
            assert!(!m.help.is_empty());
        }
        // Stable names: renaming one breaks dashboards; change this list only on purpose.
        assert_eq!(TIER_READ_BYTES.name, "tierfs_tier_read_bytes_total");
        assert_eq!(TIER_WRITTEN_BYTES.name, "tierfs_tier_written_bytes_total");
        assert_eq!(TIER_IN_FLIGHT.name, "tierfs_tier_requests_in_flight");
        assert_eq!(UPTIME.name, "tierfs_uptime_seconds");
    }

    #[test]
    fn output_parses_as_exposition_format() {
        let mut a = tier("nvme", 2e9);
        a.bytes_read = 10 << 20;
        a.bytes_written = 30 << 20;
        a.reads = 10;
        a.writes = 30;
        a.in_flight = 3;
        a.share = 2.0 / 3.0;
        a.capacity = Some(100 << 30);
        a.device_read = Some(5 << 20);
        a.device_written = Some(7 << 20);
        a.passthrough_opens = 4;
        a.est_write_bps = Some(1.5e9);
        a.queue.limit = 32;
        a.queue.granted = [5, 6, 7, 8, 0, 0];
        a.queue.waited = 9;
        let mut b = tier("pfs", 1e9);
        b.bandwidth_source = "probe".into();
        b.healthy = false;
        b.errors = 2;
        b.share = 1.0 / 3.0;
        let text = render(&snap(vec![a, b]));
        let series = validate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let get = |k: &str| {
            *series
                .get(k)
                .unwrap_or_else(|| panic!("{k} missing:\n{text}"))
        };
        assert_eq!(
            get("tierfs_tier_read_bytes_total{tier=\"nvme\"}"),
            (10 << 20) as f64
        );
        assert_eq!(
            get("tierfs_tier_written_bytes_total{tier=\"nvme\"}"),
            (30 << 20) as f64
        );
        assert_eq!(get("tierfs_tier_requests_in_flight{tier=\"nvme\"}"), 3.0);
        assert_eq!(get("tierfs_tier_healthy{tier=\"pfs\"}"), 0.0);
        assert_eq!(get("tierfs_tier_errors_total{tier=\"pfs\"}"), 2.0);
        assert_eq!(
            get("tierfs_tier_read_bandwidth_bytes_per_second{source=\"probe\",tier=\"pfs\"}"),
            1e9
        );
        assert_eq!(
            get("tierfs_tier_capacity_bytes{tier=\"nvme\"}"),
            (100u64 << 30) as f64
        );
        assert!(!series.contains_key("tierfs_tier_capacity_bytes{tier=\"pfs\"}"));
        assert_eq!(
            get("tierfs_tier_device_read_bytes_total{tier=\"nvme\"}"),
            (5 << 20) as f64
        );
        assert!(!series.contains_key("tierfs_tier_device_read_bytes_total{tier=\"pfs\"}"));
        assert!((get("tierfs_tier_share_ratio{tier=\"nvme\"}") - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(
            get("tierfs_tier_estimated_write_bandwidth_bytes_per_second{tier=\"nvme\"}"),
            1.5e9
        );
        assert!(!series
            .contains_key("tierfs_tier_estimated_read_bandwidth_bytes_per_second{tier=\"nvme\"}"));
        assert_eq!(get("tierfs_tier_queue_limit{tier=\"nvme\"}"), 32.0);
        assert_eq!(get("tierfs_tier_queue_waited_total{tier=\"nvme\"}"), 9.0);
        assert_eq!(
            get("tierfs_tier_queue_granted_total{class=\"demand_write\",tier=\"nvme\"}"),
            6.0
        );
        assert_eq!(
            crate::tierio::QueueStats::default().granted.len(),
            QUEUE_CLASSES.len(),
            "the queue's classes changed: update QUEUE_CLASSES"
        );
        assert_eq!(get("tierfs_files{}"), 1.0);
        assert_eq!(get("tierfs_uptime_seconds{}"), 12.5);
        assert_eq!(get("tierfs_passthrough_enabled{}"), 0.0);
        assert_eq!(
            get(&format!(
                "tierfs_info{{layout=\"whole-file\",version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )),
            1.0
        );
        // Without device counters or capacities those families are absent, not empty.
        let text = render(&snap(vec![tier("only", 1e9)]));
        validate(&text).unwrap();
        assert!(!text.contains("tierfs_tier_device_read_bytes_total"));
        assert!(!text.contains("tierfs_tier_capacity_bytes"));
    }

    #[test]
    fn what_the_operator_set_is_in_the_metrics() {
        let get = |text: &str, series: &str| -> Option<f64> {
            let all = validate(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            all.get(series).copied()
        };
        let state = |tier: &str, st: &str| {
            format!("tierfs_tier_control_state{{state=\"{st}\",tier=\"{tier}\"}}")
        };
        // At mount: active, weight 1, no drain families at all.
        let text = render(&snap(vec![tier("fast", 1e9), tier("slow", 1e8)]));
        assert_eq!(get(&text, &state("slow", "active")), Some(1.0));
        assert_eq!(get(&text, &state("slow", "paused")), Some(0.0));
        assert_eq!(get(&text, "tierfs_tier_weight{tier=\"slow\"}"), Some(1.0));
        assert!(!text.contains("tierfs_tier_drain_"), "{text}");
        // One tier draining at weight 0.5: its state, weight and progress; the other's none.
        let mut slow = tier("slow", 1e8);
        slow.control = "draining".into();
        slow.weight = 0.5;
        slow.files = 3;
        slow.used = 300;
        slow.drain = Some(crate::stats::DrainStats {
            moved_files: 2,
            moved_bytes: 200,
            failures: 1,
            last_error: Some("x".into()),
        });
        let text = render(&snap(vec![tier("fast", 1e9), slow]));
        for st in ["active", "paused", "drained"] {
            assert_eq!(get(&text, &state("slow", st)), Some(0.0), "{st}");
        }
        assert_eq!(get(&text, &state("slow", "draining")), Some(1.0));
        assert_eq!(get(&text, &state("fast", "active")), Some(1.0));
        assert_eq!(get(&text, "tierfs_tier_weight{tier=\"slow\"}"), Some(0.5));
        for (name, v) in [
            ("tierfs_tier_drain_left_files", 3.0),
            ("tierfs_tier_drain_left_bytes", 300.0),
            ("tierfs_tier_drain_moved_files_total", 2.0),
            ("tierfs_tier_drain_moved_bytes_total", 200.0),
            ("tierfs_tier_drain_failures_total", 1.0),
        ] {
            assert_eq!(get(&text, &format!("{name}{{tier=\"slow\"}}")), Some(v));
            assert_eq!(get(&text, &format!("{name}{{tier=\"fast\"}}")), None);
        }
    }

    #[test]
    fn validator_rejects_malformed_text() {
        let ok = "# HELP a_total x\n# TYPE a_total counter\na_total{tier=\"x\"} 1\n";
        validate(ok).unwrap();
        for bad in [
            "a_total 1\n",                                              // no TYPE
            "# TYPE a counter\na 1\n",                                  // counter name
            "# TYPE a gauge\na{tier=\"x} 1\n",                          // quote
            "# TYPE a gauge\na{tier=\"x\"} one\n",                      // value
            "# TYPE a gauge\na 1 1700000000\n",                         // timestamp
            "# TYPE a gauge\na 1\na 2\n",                               // duplicate
            "# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x=\"1\"} 1\n", // split family
            "# TYPE a gauge\na 1",                                      // newline
            "# TYPE 1a gauge\n",                                        // name
            "# TYPE a gauge\na{1x=\"1\"} 1\n",                          // label name
        ] {
            assert!(validate(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut t = tier("x", 1.0);
        t.bandwidth_source = "we\"ird\\\n".into();
        let text = render(&snap(vec![t]));
        validate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    }

    #[test]
    fn every_metric_is_documented() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/METRICS.md"))
            .expect("docs/METRICS.md");
        for m in ALL {
            assert!(
                doc.contains(&format!("`{}`", m.name)),
                "docs/METRICS.md does not document {}",
                m.name
            );
        }
    }
}
