//! The daemon's statistics: the counters it keeps of its own work, and every format a
//! snapshot of them is shown in.
//!
//! - Counters: [`ledger`], the CPU-seconds spent per class of work next to the bytes it
//!   moved; [`reqstats`], the requests the kernel sent, per FUSE opcode and transport.
//! - Formats: this file, the `/proc`-like files under the mount's stats folder (`.tierfs/`
//!   by default); [`metrics`], the same as Prometheus text; [`prom`], that text labelled
//!   per mount and written for node_exporter's textfile collector (by `tierfs stat
//!   --prom` and the daemon alike); [`app`] and [`control`], the programs' view and the
//!   operator's state as the tables show them.
//!
//! Each file is rendered whole when it is opened, so one `cat` sees one consistent
//! snapshot; later reads of the same handle see the same bytes. `stats.json` holds
//! everything the text files show, for tools (`tierfs stat` reads it).
//!
//! Why the counters live here, with their formats, and not with the code that bumps them
//! (the data path, the FUSE workers): that way neither side knows the other, and nothing
//! in this folder reaches the core; it stands on the tiers' own counters and nothing
//! higher.

pub mod app;
pub mod control;
pub mod ledger;
pub mod metrics;
pub mod prom;
pub mod reqstats;

use crate::units::{fmt_bytes, fmt_rate};
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// One tier's figures in `stats.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TierStats {
    pub name: String,
    pub path: String,
    /// Bandwidth used for placement, bytes/s.
    pub read_bps: f64,
    pub write_bps: f64,
    /// "config" or "probe".
    pub bandwidth_source: String,
    pub direct_io: bool,
    /// Eq. 1 share of new bytes, 0..1.
    pub share: f64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub reads: u64,
    pub writes: u64,
    pub in_flight: u64,
    pub errors: u64,
    pub files: u64,
    /// Logical bytes held.
    pub used: u64,
    /// Bytes it can still take (free space less reserve, within capacity).
    pub free: u64,
    pub capacity: Option<u64>,
    /// Healthy: takes new data. False after EIO/EROFS.
    pub healthy: bool,
    /// "ok", "failed" (EIO/EROFS seen) or "missing" (not there at a degraded mount).
    #[serde(default)]
    pub state: String,
    /// Of `errors`, the failed data reads and writes.
    #[serde(default)]
    pub read_errors: u64,
    #[serde(default)]
    pub write_errors: u64,
    /// The last backing error on the tier.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Recovery probes run since mount (small measurements of a tier whose share was cut
    /// while it saw no traffic).
    #[serde(default)]
    pub probes: u64,
    /// With `adapt`: measured too slow next to the fastest tier (`placement.min_share`), so
    /// it gets no new data until it measures faster.
    #[serde(default)]
    pub paused: bool,
    /// Kernel passthrough handles open now / opened since mount. Their bytes bypass the
    /// daemon and appear only in the device counters.
    pub passthrough_open: u64,
    pub passthrough_opens: u64,
    /// Direct-path leases (programs under `tierfs run` holding the pieces' own
    /// descriptors) out now / granted since mount, and the bytes those programs reported
    /// (also in `bytes_read`/`bytes_written`).
    #[serde(default)]
    pub direct_open: u64,
    #[serde(default)]
    pub direct_opens: u64,
    #[serde(default)]
    pub direct_bytes: u64,
    /// Bytes read/written on the tier's block device since mount, by anyone (None without
    /// a block device, e.g. NFS or Lustre).
    pub device_read: Option<u64>,
    pub device_written: Option<u64>,
    /// The tier's admission queue: bound, waiting now, and requests that had to wait.
    #[serde(default)]
    pub queue: crate::tierio::QueueStats,
    /// Online estimates from the daemon's own traffic (bytes per busy second), bytes/s;
    /// None until enough traffic was seen. Passthrough I/O is not in them.
    #[serde(default)]
    pub est_read_bps: Option<f64>,
    #[serde(default)]
    pub est_write_bps: Option<f64>,
    /// The tier queues: its latency per byte rose while its throughput did not
    /// ([`crate::tier::Queueing`]).
    #[serde(default)]
    pub saturated: bool,
    /// Seconds the daemon's threads waited for a core while their requests to this tier
    /// ran: CPU starvation, which the estimates leave out of the tier's busy time.
    #[serde(default)]
    pub core_wait_s: f64,
    /// The time its completed reads and writes took, summed, nanoseconds (core waits
    /// included): with `reads`/`writes`, their average (await).
    #[serde(default)]
    pub read_ns: u64,
    #[serde(default)]
    pub write_ns: u64,
    /// A tier the job's nodes share (`shared_ledger`): this node's view of the ledger.
    #[serde(default)]
    pub shared: Option<SharedStats>,
    /// What programs read and wrote at the mount for files with a piece here, whichever
    /// path served them (the counters above are what reached the tier folder).
    #[serde(default)]
    pub app: app::AppStats,
    /// The tier's block device (`MAJ:MIN`); tiers with the same one share it. None without
    /// a block device.
    #[serde(default)]
    pub device: Option<String>,
    /// What its operator set through `.tierfs/control` (`tierfs ctl`): "active" (at
    /// mount), "paused", "draining" or "drained"; its weight in Eq. 1 (1 at mount); and a
    /// drain's progress since the last `drain` (None before any).
    #[serde(default = "active")]
    pub control: String,
    #[serde(default = "one")]
    pub weight: f64,
    #[serde(default)]
    pub drain: Option<DrainStats>,
}

fn active() -> String {
    "active".into()
}

fn one() -> f64 {
    1.0
}

/// A drain's progress (`drain TIER`): what is left is the tier's own `files` and `used`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DrainStats {
    /// Files and bytes moved off the tier since the drain began.
    pub moved_files: u64,
    pub moved_bytes: u64,
    /// Moves that failed (each is tried again), and the last one's file and error.
    pub failures: u64,
    pub last_error: Option<String>,
}

/// A shared tier's coordination, as `stats.json` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SharedStats {
    pub ledger: String,
    pub node: String,
    /// False while the ledger cannot be written (the node runs on its own estimates).
    pub coordinated: bool,
    /// Live nodes (this one included), the tier's estimated capacity and this node's part
    /// of it, bytes/s; zero while not coordinated.
    pub live_nodes: usize,
    pub capacity_bps: f64,
    pub allot_bps: f64,
}

/// A path as the stats files show it: one line, one way to read it back. A file name
/// may hold any byte but `/` and NUL, so bytes that are not UTF-8, control characters
/// (a newline would split a line of `.tierfs/files`) and the backslash itself are written
/// `\xNN` (and `\\`); everything else as it is. Two different names never look the
/// same (U+FFFD replacement would make them).
pub fn escape_path(p: &Path) -> String {
    let mut out = String::new();
    for chunk in p.as_os_str().as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else if c.is_control() {
                let mut b = [0u8; 4];
                for x in c.encode_utf8(&mut b).bytes() {
                    let _ = write!(out, "\\x{x:02x}");
                }
            } else {
                out.push(c);
            }
        }
        for x in chunk.invalid() {
            let _ = write!(out, "\\x{x:02x}");
        }
    }
    out
}

/// One file in `stats.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileStats {
    /// Escaped with [`escape_path`].
    pub path: String,
    pub size: u64,
    /// "whole-file" or "stripe".
    pub layout: String,
    /// Tier names holding pieces.
    pub tiers: Vec<String>,
}

/// Re-layouts since mount (`relayout` in `stats.json`): lazy moves of rewritten files
/// (migrations) and eager ones (full or failed tier, cached files).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RelayoutStats {
    pub migrations_started: u64,
    pub migrations_committed: u64,
    /// Dropped: the file was unlinked, or an eager move took the migration over.
    pub migrations_dropped: u64,
    /// Old bytes a migration copied (partial first writes of a block, and blocks never
    /// rewritten, copied at the switch) ...
    pub migration_copied_bytes: u64,
    /// ... and old bytes it never had to read, because the rewrite replaced their block.
    pub migration_rewritten_bytes: u64,
    pub eager_moves: u64,
    pub eager_copied_bytes: u64,
}

/// The whole of `stats.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    pub format: u32,
    pub pid: u32,
    pub uptime_s: f64,
    pub layout: String,
    /// Whether kernel passthrough is offered for whole files now.
    pub passthrough: bool,
    /// Bytes of the slower tiers' files that whole-file placement counts staging memory to
    /// hold (`placement::shares_with_held`); 0 where it counts none.
    #[serde(default)]
    pub held_bytes: u64,
    pub tiers: Vec<TierStats>,
    pub files: Vec<FileStats>,
    /// How many files the mount holds: the length of `files` where it is listed, counted
    /// without listing them for the views that need only the number (`tiers`, metrics).
    #[serde(default)]
    pub file_count: u64,
    /// The host-memory cache's totals (None without a cache; details in `.tierfs/cache`).
    #[serde(default)]
    pub cache: Option<CacheStats>,
    #[serde(default)]
    pub relayout: RelayoutStats,
    /// Requests whose handler panicked since mount (each answered EIO; `vfs::contain`).
    #[serde(default)]
    pub request_panics: u64,
    /// Inodes that answer EIO until the next mount after such a panic.
    #[serde(default)]
    pub failed_inodes: u64,
    /// What the kernel asked of the daemon.
    #[serde(default)]
    pub fuse: FuseStats,
    /// Bytes copied through a bounce buffer for direct I/O on a tier because the memory was
    /// not page-aligned (0 when the transport delivers aligned payloads).
    #[serde(default)]
    pub bounce_bytes: u64,
    /// The daemon's CPU and the bytes it moved.
    #[serde(default)]
    pub cpu: CpuStats,
}

/// The daemon's CPU ledger in `stats.json` ([`ledger`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CpuStats {
    /// The whole daemon's CPU (user + system) since it started, in seconds.
    pub total_s: f64,
    /// Bytes moved for programs: the sum over the classes, and what they moved on the
    /// direct path (`tierfs run`) past the daemon.
    pub bytes: u64,
    /// `total_s` per 10^9 `bytes` (0 before any byte).
    pub s_per_gb: f64,
    /// Per class: `demand` (FUSE requests; bytes: READ and WRITE payloads), `prefetch`,
    /// `write-back`, `migration`.
    pub classes: std::collections::BTreeMap<String, ClassCpu>,
    /// CPU no class claims (the estimator, probes, the stats files).
    pub other_s: f64,
    /// Bytes the tiers' devices moved since mount, all tiers (passthrough I/O, which the
    /// daemon never sees, is only here); absent where the devices cannot be read.
    pub device_bytes: Option<u64>,
}

/// One class of the CPU ledger.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClassCpu {
    pub cpu_s: f64,
    pub bytes: u64,
    pub s_per_gb: f64,
}

pub(crate) fn per_gb(s: f64, bytes: u64) -> f64 {
    if bytes == 0 {
        0.0
    } else {
        s / (bytes as f64 / 1e9)
    }
}

/// The FUSE connection in `stats.json`: the transport and the requests it carried (requests
/// served by kernel passthrough never reach the daemon and are not counted).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FuseStats {
    /// "uring" (FUSE over io_uring) or "dev" (/dev/fuse).
    pub transport: String,
    pub requests_ring: u64,
    pub requests_dev: u64,
    /// Requests by opcode name, those seen at least once.
    pub requests: std::collections::BTreeMap<String, u64>,
}

/// The cache's totals in `stats.json`, in bytes unless named otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheStats {
    pub size: u64,
    /// Where the size comes from (the config, or the memory limit and the rule).
    #[serde(default)]
    pub size_from: String,
    /// Bytes the cache may hold now: the size, lower while the job needs the memory.
    #[serde(default)]
    pub budget: u64,
    pub used: u64,
    pub dirty: u64,
    pub hit_bytes: u64,
    pub miss_bytes: u64,
    pub absorbed_bytes: u64,
    pub writeback_bytes: u64,
    pub prefetch_bytes: u64,
    pub prefetch_used_bytes: u64,
    pub prefetch_wasted_bytes: u64,
    pub evictions: u64,
}

/// The `tierfs stat` line saying how much staging memory placement counts on, if any.
fn held_line(s: &Snapshot) -> String {
    if s.held_bytes == 0 {
        return String::new();
    }
    format!(
        "placement counts {} of staging memory as holding the slower tiers' files\n",
        fmt_bytes(s.held_bytes)
    )
}

/// The `tiers` file (and the body of `tierfs stat`).
pub fn tiers_table(s: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:>10} {:>10} {:>6} {:>10} {:>11} {:>10} {:>12} {:>5} {:>6} {:>6} {:>10} {:>10}  PATH",
        "TIER",
        "READ_BW",
        "WRITE_BW",
        "SHARE",
        "APP_READ",
        "APP_WRITTEN",
        "TIER_READ",
        "TIER_WRITTEN",
        "INFL",
        "ERRORS",
        "FILES",
        "USED",
        "FREE"
    );
    let total_used: u64 = s.tiers.iter().map(|t| t.used).sum();
    for t in &s.tiers {
        let _ = writeln!(
            out,
            "{:<8} {:>10} {:>10} {:>5.1}% {:>10} {:>11} {:>10} {:>12} {:>5} {:>6} {:>6} {:>10} {:>10}  {}{}",
            t.name,
            fmt_rate(t.read_bps),
            fmt_rate(t.write_bps),
            t.share * 100.0,
            fmt_bytes(t.app.read_bytes),
            fmt_bytes(t.app.written_bytes),
            fmt_bytes(t.bytes_read),
            fmt_bytes(t.bytes_written),
            t.in_flight,
            t.errors,
            t.files,
            fmt_bytes(t.used),
            fmt_bytes(t.free),
            t.path,
            if t.direct_io { "" } else { " (buffered)" }
        );
    }
    for t in &s.tiers {
        if let Some(c) = control::TierControl::of(t) {
            let _ = writeln!(out, "  {}: {}", t.name, c.note(&t.name));
        }
        let notes = tier_notes(t);
        if !notes.is_empty() {
            let _ = writeln!(out, "  {}: {}", t.name, notes.join("; "));
        }
    }
    if s.cpu.bytes > 0 {
        let _ = writeln!(
            out,
            "daemon CPU: {:.2} s for {} moved ({:.3} s/GB; {}); transport {}",
            s.cpu.total_s,
            fmt_bytes(s.cpu.bytes),
            s.cpu.s_per_gb,
            s.cpu
                .classes
                .iter()
                .filter(|(_, c)| c.bytes > 0)
                .map(|(n, c)| format!("{n} {:.3} s/GB", c.s_per_gb))
                .collect::<Vec<_>>()
                .join(", "),
            if s.fuse.transport.is_empty() {
                "?"
            } else {
                &s.fuse.transport
            }
        );
    }
    let _ = writeln!(
        out,
        "layout {}; {} files, {} in all; bandwidth from {}",
        s.layout,
        s.file_count.max(s.files.len() as u64),
        fmt_bytes(total_used),
        s.tiers
            .iter()
            .map(|t| format!("{}={}", t.name, t.bandwidth_source))
            .collect::<Vec<_>>()
            .join(" ")
    );
    out.push_str(&held_line(s));
    out.push_str(&app::staging_line(s.cache.as_ref()));
    out
}

/// What is worth saying about a tier under the table, after what its operator set (a line
/// of its own): its health, a pause, passthrough and the direct path, its device's counters.
fn tier_notes(t: &TierStats) -> Vec<String> {
    let mut notes = Vec::new();
    if !t.healthy {
        notes.push(format!(
            "{}: takes no new data; {} read, {} write errors{}",
            t.state.to_uppercase(),
            t.read_errors,
            t.write_errors,
            t.last_error
                .as_deref()
                .map(|e| format!(", last: {e}"))
                .unwrap_or_default()
        ));
    }
    if t.paused {
        notes.push(format!(
            "PAUSED: too slow next to the fastest tier (placement.min_share); no new data, \
             {} recovery probes so far",
            t.probes
        ));
    }
    if t.passthrough_opens > 0 {
        notes.push(format!(
            "passthrough: {} open, {} since mount (their bytes bypass the daemon)",
            t.passthrough_open, t.passthrough_opens
        ));
    }
    if t.direct_opens > 0 {
        notes.push(format!(
            "direct path: {} lease(s) out, {} since mount, {} moved past the daemon",
            t.direct_open,
            t.direct_opens,
            fmt_bytes(t.direct_bytes)
        ));
    }
    if let (Some(r), Some(w)) = (t.device_read, t.device_written) {
        notes.push(format!(
            "device: {} read, {} written since mount",
            fmt_bytes(r),
            fmt_bytes(w)
        ));
    }
    notes.extend(app::paths_note(&t.app));
    notes
}

/// The `files` file: one line per file.
pub fn files_table(s: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>14}  {:<10}  {:<16}  PATH",
        "SIZE", "LAYOUT", "TIERS"
    );
    for f in &s.files {
        let _ = writeln!(
            out,
            "{:>14}  {:<10}  {:<16}  {}",
            f.size,
            f.layout,
            f.tiers.join(","),
            f.path
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn names_are_escaped_one_way() {
        let e = |b: &[u8]| escape_path(Path::new(OsStr::from_bytes(b)));
        assert_eq!(e(b"d/plain name.swp"), "d/plain name.swp");
        assert_eq!(e("été/日本".as_bytes()), "été/日本");
        assert_eq!(e(b"two\nlines\ttab\x7f"), "two\\x0alines\\x09tab\\x7f");
        assert_eq!(e(b"back\\slash"), "back\\\\slash");
        // Two names that lossy conversion shows alike (both as U+FFFD) stay apart.
        assert_eq!(e(b"bad\xff"), "bad\\xff");
        assert_eq!(e(b"bad\xfe"), "bad\\xfe");
        // A name spelling out an escape cannot pass for one.
        assert_ne!(e(b"bad\\xff"), e(b"bad\xff"));
        // C1 controls too.
        assert_eq!(e("a\u{85}b".as_bytes()), "a\\xc2\\x85b");
    }
}
