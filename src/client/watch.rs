//! The `tierfs stat --watch` screen: per interval, like `iostat -x`, first what programs
//! read and wrote at the mount per tier (whichever path served them), then what reached
//! the tier folders, then staging memory.
//!
//! Two views because they differ on purpose: a write staging memory takes in reaches the
//! tier seconds later (or never, for a file deleted first), a read it holds never does,
//! and kernel passthrough never passes the daemon. A user asks "where are my bytes going
//! and how fast", which only the programs' view answers; the tiers' view says whether the
//! tiers keep up. Rates come from two samples' counter deltas ([`crate::client::monitor`]); MB is
//! 10^6 bytes, request sizes are KiB (as `iostat`'s kB), await is milliseconds.

use crate::client::monitor::{counter_delta, interval, Sample, TierSample};
use crate::units::fmt_bytes;
use std::fmt::Write as _;

/// One tier's row in the programs' view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProgramRow {
    pub name: String,
    /// Requests per second (FUSE and the direct path; passthrough's are not seen).
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    /// All bytes, every path, MB/s.
    pub read_mbps: f64,
    pub write_mbps: f64,
    /// Average request size, KiB, and time, ms (None without requests).
    pub rareq_kib: Option<f64>,
    pub wareq_kib: Option<f64>,
    pub r_await_ms: Option<f64>,
    pub w_await_ms: Option<f64>,
    /// By path, reads and writes together, MB/s: staging memory, passthrough, direct path.
    pub memory_mbps: f64,
    pub passthrough_mbps: f64,
    pub direct_mbps: f64,
    /// Passthrough on a device shared with other tiers that could not be split, MB/s.
    pub unsplit_mbps: f64,
}

/// One tier's row in the tiers' view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TierRow {
    pub name: String,
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    pub read_mbps: f64,
    pub write_mbps: f64,
    pub rareq_kib: Option<f64>,
    pub wareq_kib: Option<f64>,
    pub r_await_ms: Option<f64>,
    pub w_await_ms: Option<f64>,
    pub errors: u64,
}

/// Staging memory over the interval (MB/s) and now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CacheRow {
    pub hit_mbps: f64,
    /// Of the reads staging memory saw, the share it served.
    pub hit_ratio: Option<f64>,
    pub taken_in_mbps: f64,
    pub written_back_mbps: f64,
    pub prefetch_mbps: f64,
    pub used: u64,
    pub dirty: u64,
    pub budget: u64,
    pub size: u64,
}

/// One interval of a mount, every figure the screen shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    pub dt: f64,
    pub restarted: bool,
    pub programs: Vec<ProgramRow>,
    pub tiers: Vec<TierRow>,
    pub cache: Option<CacheRow>,
    /// Per block device: its tiers and MB/s read and written by anyone.
    pub devices: Vec<(String, Vec<String>, f64, f64)>,
}

/// Average of `total` over `n` events, `None` without events.
fn per(total: u64, n: u64, scale: f64) -> Option<f64> {
    (n > 0).then(|| total as f64 / n as f64 / scale)
}

/// The figures between two samples; `wall_s` is the caller's measure of the time between
/// them. A tier missing from `prev` counts from 0.
pub fn view(prev: &Sample, cur: &Sample, wall_s: f64) -> View {
    let (dt, restarted) = interval(prev.pid, prev.uptime_s, cur.pid, cur.uptime_s, wall_s);
    let zero = TierSample::default();
    let mut programs = Vec::new();
    let mut tiers = Vec::new();
    let mut devices: Vec<(String, Vec<String>, f64, f64)> = Vec::new();
    for t in &cur.tiers {
        let p = prev.tiers.iter().find(|p| p.name == t.name);
        let r = restarted || p.is_none();
        let p = p.unwrap_or(&zero);
        let d = |a: u64, b: u64| counter_delta(a, b, r);
        let mbps = |bytes: u64| bytes as f64 / dt / 1e6;
        let (a, b) = (&p.app, &t.app);
        let reads = d(a.reads, b.reads);
        let writes = d(a.writes, b.writes);
        programs.push(ProgramRow {
            name: t.name.clone(),
            reads_per_s: reads as f64 / dt,
            writes_per_s: writes as f64 / dt,
            read_mbps: mbps(d(a.read_bytes, b.read_bytes)),
            write_mbps: mbps(d(a.written_bytes, b.written_bytes)),
            rareq_kib: per(
                d(a.counted_read_bytes(), b.counted_read_bytes()),
                reads,
                1024.0,
            ),
            wareq_kib: per(
                d(a.counted_written_bytes(), b.counted_written_bytes()),
                writes,
                1024.0,
            ),
            r_await_ms: per(d(a.read_ns, b.read_ns), reads, 1e6),
            w_await_ms: per(d(a.write_ns, b.write_ns), writes, 1e6),
            memory_mbps: mbps(
                d(a.memory_read_bytes, b.memory_read_bytes)
                    + d(a.memory_written_bytes, b.memory_written_bytes),
            ),
            passthrough_mbps: mbps(
                d(a.passthrough_read_bytes, b.passthrough_read_bytes)
                    + d(a.passthrough_written_bytes, b.passthrough_written_bytes),
            ),
            direct_mbps: mbps(
                d(a.direct_read_bytes, b.direct_read_bytes)
                    + d(a.direct_written_bytes, b.direct_written_bytes),
            ),
            unsplit_mbps: mbps(
                d(a.unsplit_read_bytes, b.unsplit_read_bytes)
                    + d(a.unsplit_written_bytes, b.unsplit_written_bytes),
            ),
        });
        let (reads, writes) = (d(p.reads, t.reads), d(p.writes, t.writes));
        let (rb, wb) = (
            d(p.bytes_read, t.bytes_read),
            d(p.bytes_written, t.bytes_written),
        );
        tiers.push(TierRow {
            name: t.name.clone(),
            reads_per_s: reads as f64 / dt,
            writes_per_s: writes as f64 / dt,
            read_mbps: mbps(rb),
            write_mbps: mbps(wb),
            rareq_kib: per(rb, reads, 1024.0),
            wareq_kib: per(wb, writes, 1024.0),
            r_await_ms: per(d(p.read_ns, t.read_ns), reads, 1e6),
            w_await_ms: per(d(p.write_ns, t.write_ns), writes, 1e6),
            errors: d(p.errors, t.errors),
        });
        if let (Some(dev), Some(dr), Some(dw)) = (&t.device, t.device_read, t.device_written) {
            match devices.iter_mut().find(|x| &x.0 == dev) {
                Some(x) => x.1.push(t.name.clone()),
                None => devices.push((
                    dev.clone(),
                    vec![t.name.clone()],
                    mbps(d(p.device_read.unwrap_or(0), dr)),
                    mbps(d(p.device_written.unwrap_or(0), dw)),
                )),
            }
        }
    }
    let cache = cur.cache.as_ref().map(|c| {
        let z = crate::stats::CacheStats {
            hit_bytes: 0,
            miss_bytes: 0,
            absorbed_bytes: 0,
            writeback_bytes: 0,
            prefetch_bytes: 0,
            ..c.clone()
        };
        let p = if restarted {
            &z
        } else {
            prev.cache.as_ref().unwrap_or(&z)
        };
        let d = |a: u64, b: u64| counter_delta(a, b, restarted);
        let hits = d(p.hit_bytes, c.hit_bytes);
        let misses = d(p.miss_bytes, c.miss_bytes);
        CacheRow {
            hit_mbps: hits as f64 / dt / 1e6,
            hit_ratio: (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
            taken_in_mbps: d(p.absorbed_bytes, c.absorbed_bytes) as f64 / dt / 1e6,
            written_back_mbps: d(p.writeback_bytes, c.writeback_bytes) as f64 / dt / 1e6,
            prefetch_mbps: d(p.prefetch_bytes, c.prefetch_bytes) as f64 / dt / 1e6,
            used: c.used,
            dirty: c.dirty,
            budget: c.budget,
            size: c.size,
        }
    });
    View {
        dt,
        restarted,
        programs,
        tiers,
        cache,
        devices,
    }
}

fn opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into())
}

/// The screen for one interval.
pub fn render(mount: &str, when: &str, cur: &Sample, v: &View) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "tierfs {mount}  {when}  interval {:.2} s  layout {}  passthrough {}  files {}",
        v.dt,
        cur.layout,
        if cur.passthrough { "on" } else { "off" },
        cur.files
    );
    if v.restarted {
        let _ = writeln!(
            out,
            "(the daemon restarted: pid {}, counters since its start)",
            cur.pid
        );
    }
    render_programs(&mut out, v);
    render_tiers(&mut out, cur, v);
    for (dev, names, r, w) in &v.devices {
        let _ = writeln!(
            out,
            "device {dev} ({}): {r:.1} MB/s read, {w:.1} MB/s written, by anyone",
            names.join(", ")
        );
    }
    if let Some(c) = &v.cache {
        let _ = writeln!(
            out,
            "staging memory: read hits {:.1} MB/s ({} of its reads), writes taken in {:.1} MB/s, \
             written back {:.1} MB/s, prefetched {:.1} MB/s; holds {} of {} ({} dirty: not on a \
             tier yet)",
            c.hit_mbps,
            c.hit_ratio
                .map(|x| format!("{:.0}%", x * 100.0))
                .unwrap_or_else(|| "-".into()),
            c.taken_in_mbps,
            c.written_back_mbps,
            c.prefetch_mbps,
            fmt_bytes(c.used),
            fmt_bytes(c.budget.min(c.size).max(c.used)),
            fmt_bytes(c.dirty)
        );
    }
    for (t, s) in v.programs.iter().zip(&cur.tiers) {
        if t.unsplit_mbps > 0.0 {
            let _ = writeln!(
                out,
                "{}: {:.1} MB/s of passthrough on block device {} could not be split between \
                 the tiers on it (not in the rows above)",
                t.name,
                t.unsplit_mbps,
                s.device.as_deref().unwrap_or("?")
            );
        }
        if let Some(c) = s.control.as_ref().filter(|c| c.state != "active") {
            let _ = writeln!(out, "{}: {}", t.name, c.note(&t.name));
        }
        if s.passthrough_open > 0 && s.device.is_none() {
            let _ = writeln!(
                out,
                "{}: {} passthrough file(s) open on a tier without a block device: their bytes \
                 are not counted",
                t.name, s.passthrough_open
            );
        }
    }
    out
}

fn render_programs(out: &mut String, v: &View) {
    let _ = writeln!(
        out,
        "{:<10} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7} {:>8} {:>8} {:>8}",
        "PROGRAMS",
        "r/s",
        "w/s",
        "rMB/s",
        "wMB/s",
        "rareq-sz",
        "wareq-sz",
        "r_await",
        "w_await",
        "memMB/s",
        "ptMB/s",
        "dirMB/s"
    );
    let row = |out: &mut String, t: &ProgramRow| {
        let _ = writeln!(
            out,
            "{:<10} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>8} {:>8} {:>7} {:>7} {:>8.1} {:>8.1} {:>8.1}",
            t.name,
            t.reads_per_s,
            t.writes_per_s,
            t.read_mbps,
            t.write_mbps,
            opt(t.rareq_kib),
            opt(t.wareq_kib),
            opt(t.r_await_ms),
            opt(t.w_await_ms),
            t.memory_mbps,
            t.passthrough_mbps,
            t.direct_mbps
        );
    };
    for t in &v.programs {
        row(out, t);
    }
    if v.programs.len() > 1 {
        row(out, &program_total(&v.programs));
    }
}

/// The programs' rows summed (averages weighted by requests).
fn program_total(rows: &[ProgramRow]) -> ProgramRow {
    let sum = |f: &dyn Fn(&ProgramRow) -> f64| rows.iter().map(f).sum::<f64>();
    let weighted = |avg: &dyn Fn(&ProgramRow) -> Option<f64>, n: &dyn Fn(&ProgramRow) -> f64| {
        let w = sum(n);
        (w > 0.0).then(|| {
            rows.iter()
                .map(|r| avg(r).unwrap_or(0.0) * n(r))
                .sum::<f64>()
                / w
        })
    };
    ProgramRow {
        name: "total".into(),
        reads_per_s: sum(&|r| r.reads_per_s),
        writes_per_s: sum(&|r| r.writes_per_s),
        read_mbps: sum(&|r| r.read_mbps),
        write_mbps: sum(&|r| r.write_mbps),
        rareq_kib: weighted(&|r| r.rareq_kib, &|r| r.reads_per_s),
        wareq_kib: weighted(&|r| r.wareq_kib, &|r| r.writes_per_s),
        r_await_ms: weighted(&|r| r.r_await_ms, &|r| r.reads_per_s),
        w_await_ms: weighted(&|r| r.w_await_ms, &|r| r.writes_per_s),
        memory_mbps: sum(&|r| r.memory_mbps),
        passthrough_mbps: sum(&|r| r.passthrough_mbps),
        direct_mbps: sum(&|r| r.direct_mbps),
        unsplit_mbps: sum(&|r| r.unsplit_mbps),
    }
}

fn render_tiers(out: &mut String, cur: &Sample, v: &View) {
    let _ = writeln!(
        out,
        "{:<10} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7} {:>5} {:>5} {:>4} {:>6} {:>4} {:>10} {:>10}  STATE",
        "TIERS",
        "r/s",
        "w/s",
        "rMB/s",
        "wMB/s",
        "rareq-sz",
        "wareq-sz",
        "r_await",
        "w_await",
        "INFL",
        "WAIT",
        "PT",
        "SHARE",
        "ERR",
        "USED",
        "FREE"
    );
    for (t, s) in v.tiers.iter().zip(&cur.tiers) {
        let _ = writeln!(
            out,
            "{:<10} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>8} {:>8} {:>7} {:>7} {:>5} {:>5} {:>4} {:>5.1}% {:>4} {:>10} {:>10}  {}",
            t.name,
            t.reads_per_s,
            t.writes_per_s,
            t.read_mbps,
            t.write_mbps,
            opt(t.rareq_kib),
            opt(t.wareq_kib),
            opt(t.r_await_ms),
            opt(t.w_await_ms),
            s.in_flight,
            s.queue_waiting,
            s.passthrough_open,
            s.share * 100.0,
            t.errors,
            fmt_bytes(s.used),
            fmt_bytes(s.free),
            state_word(s)
        );
    }
}

/// The STATE column: `FAILED` (EIO or EROFS seen), else what the operator set (`paused`,
/// `draining`, `drained`), else `slow` while `adapt` measured it too slow for new data,
/// else `ok`; then ` w=N` for a weight other than 1.
pub fn state_word(s: &TierSample) -> String {
    let c = s.control.as_ref();
    let word = match c.map(|c| c.state.as_str()) {
        _ if !s.healthy => "FAILED",
        Some(st @ ("paused" | "draining" | "drained")) => st,
        _ if s.paused => "slow",
        _ => "ok",
    };
    match c.filter(|c| c.weight != 1.0) {
        Some(c) => format!("{word} w={}", c.weight),
        None => word.to_string(),
    }
}

/// What `--help` says about the columns (kept here, beside the screen it explains).
pub const COLUMNS_HELP: &str = "\
With --watch, every SECS seconds (MB = 10^6 bytes, request sizes in KiB, times in ms):

PROGRAMS: what programs read and wrote at the mount, per tier the bytes belong to (a
striped file's request split by its stripes), whichever path served them:
  r/s w/s            requests per second (FUSE requests the daemon answered and the
                     direct path's; passthrough's are not seen one by one)
  rMB/s wMB/s        all bytes: through the daemon (staging memory included), the direct
                     path (tierfs run) and kernel passthrough
  rareq-sz wareq-sz  average request size of the requests counted in r/s w/s
  r_await w_await    their average time: from the daemon taking the request to its answer
                     (FUSE), or as the program timed it (direct path)
  memMB/s            of rMB/s + wMB/s, served by staging memory (read hits, writes taken in)
  ptMB/s             of rMB/s + wMB/s, kernel passthrough: the tier's block device's bytes
                     less the daemon's, while passthrough files were open (other users of
                     that device count too; nothing without a block device)
  dirMB/s            of rMB/s + wMB/s, the direct path (programs under tierfs run)
TIERS: what reached each tier folder (write-back of staging memory included):
  r/s w/s rMB/s wMB/s rareq-sz wareq-sz r_await w_await   the tier's own requests
  INFL WAIT          requests in flight, and waiting in the tier's admission queue
  PT                 passthrough files open; SHARE the Eq. 1 share; ERR errors
  STATE              ok; FAILED (EIO or EROFS: no new data); paused, draining, drained (set
                     by tierfs ctl; a line under the table says what a drain has left);
                     slow (adapt measured it too slow: no new data until it recovers);
                     w=N its weight in Eq. 1 when not 1 (tierfs ctl MOUNT weight TIER N)
device: each block device under the tiers, what it moved (anyone's bytes).
staging memory: read hits, writes taken in, written back and prefetched per second; what
it holds, and how much of that is dirty (written by programs, not on a tier yet).";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::monitor::tests::{sample, tier};

    fn app(t: &mut TierSample, read: u64, written: u64, reads: u64, writes: u64) {
        t.app.fuse_read_bytes = read;
        t.app.fuse_written_bytes = written;
        t.app.read_bytes = read;
        t.app.written_bytes = written;
        t.app.reads = reads;
        t.app.writes = writes;
    }

    #[test]
    fn programs_view_counts_what_the_tiers_did_not_see_yet() {
        let a = sample(7, 10.0, vec![tier("nvme", 0, 0), tier("pfs", 0, 0)]);
        // 64 MiB written into staging memory in 2 s; nothing reached the tiers.
        let mut nv = tier("nvme", 0, 0);
        app(&mut nv, 0, 64 << 20, 0, 64);
        nv.app.memory_written_bytes = 64 << 20;
        nv.app.write_ns = 64 * 2_000_000;
        let mut b = sample(7, 12.0, vec![nv, tier("pfs", 0, 0)]);
        b.cache = Some(crate::stats::CacheStats {
            size: 1 << 30,
            size_from: String::new(),
            budget: 1 << 30,
            used: 64 << 20,
            dirty: 64 << 20,
            hit_bytes: 0,
            miss_bytes: 0,
            absorbed_bytes: 64 << 20,
            writeback_bytes: 0,
            prefetch_bytes: 0,
            prefetch_used_bytes: 0,
            prefetch_wasted_bytes: 0,
            evictions: 0,
        });
        let v = view(&a, &b, 99.0);
        assert_eq!(v.dt, 2.0);
        let p = &v.programs[0];
        let mb = (64u64 << 20) as f64 / 2.0 / 1e6;
        assert!((p.write_mbps - mb).abs() < 1e-9);
        assert!((p.memory_mbps - mb).abs() < 1e-9);
        assert_eq!(p.writes_per_s, 32.0);
        assert_eq!(p.wareq_kib, Some(1024.0));
        assert_eq!(p.w_await_ms, Some(2.0));
        assert_eq!(p.rareq_kib, None, "no reads: no size");
        assert_eq!(v.tiers[0].write_mbps, 0.0);
        let c = v.cache.as_ref().unwrap();
        assert!((c.taken_in_mbps - mb).abs() < 1e-9);
        let s = render("/mnt", "12:00:00", &b, &v);
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[1].starts_with("PROGRAMS"), "{s}");
        assert!(
            lines[2].starts_with("nvme") && lines[2].contains("33.6"),
            "{s}"
        );
        assert!(
            lines[4].starts_with("total") && lines[4].contains("33.6"),
            "{s}"
        );
        assert!(lines[5].starts_with("TIERS"), "{s}");
        assert!(s.contains("64.0 MiB dirty"), "{s}");
    }

    #[test]
    fn passthrough_and_the_direct_path_are_in_the_totals() {
        let a = sample(7, 10.0, vec![tier("nvme", 0, 0)]);
        let mut nv = tier("nvme", 0, 0);
        nv.app.passthrough_written_bytes = 3_000_000;
        nv.app.direct_read_bytes = 1_000_000;
        nv.app.read_bytes = 1_000_000;
        nv.app.written_bytes = 3_000_000;
        nv.app.reads = 1;
        nv.app.read_ns = 4_000_000;
        nv.app.unsplit_written_bytes = 500_000;
        nv.device = Some("7:3".into());
        nv.device_read = Some(0);
        nv.device_written = Some(3_500_000);
        let b = sample(7, 11.0, vec![nv]);
        let v = view(&a, &b, 1.0);
        let p = &v.programs[0];
        assert_eq!((p.read_mbps, p.write_mbps), (1.0, 3.0));
        assert_eq!((p.passthrough_mbps, p.direct_mbps), (3.0, 1.0));
        // Passthrough's bytes are not in the request sizes.
        assert_eq!(p.rareq_kib, Some(1_000_000.0 / 1024.0));
        assert_eq!(p.wareq_kib, None);
        assert_eq!(p.r_await_ms, Some(4.0));
        assert_eq!(
            v.devices,
            vec![("7:3".into(), vec!["nvme".into()], 0.0, 3.5)]
        );
        let s = render("/mnt", "12:00:00", &b, &v);
        assert!(
            s.contains("0.5 MB/s of passthrough on block device 7:3"),
            "{s}"
        );
        assert!(s.contains("device 7:3 (nvme)"), "{s}");
    }

    #[test]
    fn the_state_column_tells_the_operator_from_adapt() {
        use crate::stats::control::TierControl;
        let ctl = |state: &str, weight: f64| {
            Some(TierControl {
                state: state.into(),
                weight,
                files: 2,
                used: 2 << 20,
                drain: None,
            })
        };
        let mut t = tier("slow", 0, 0);
        assert_eq!(state_word(&t), "ok");
        t.paused = true;
        assert_eq!(state_word(&t), "slow", "adapt's pause");
        t.control = ctl("paused", 1.0);
        assert_eq!(state_word(&t), "paused");
        t.paused = false;
        t.control = ctl("active", 2.5);
        assert_eq!(state_word(&t), "ok w=2.5");
        t.control = ctl("draining", 0.0);
        assert_eq!(state_word(&t), "draining w=0");
        t.healthy = false;
        assert_eq!(state_word(&t), "FAILED w=0");
        // The screen: the word in the row, a drain's progress under the table.
        t.healthy = true;
        let a = sample(7, 10.0, vec![tier("slow", 0, 0)]);
        let b = sample(7, 11.0, vec![t]);
        let s = render("/mnt", "x", &b, &view(&a, &b, 1.0));
        let row = s
            .lines()
            .find(|l| l.starts_with("slow ") && l.contains('%'));
        assert!(row.is_some_and(|r| r.ends_with("  draining w=0")), "{s}");
        assert!(
            s.contains("slow: DRAINING: 2 files (2.0 MiB) left to move; weight 0"),
            "{s}"
        );
        // Weighted but active: the row says it, no line under the table.
        let mut w = tier("slow", 0, 0);
        w.control = ctl("active", 2.0);
        let b = sample(7, 11.0, vec![w]);
        let s = render("/mnt", "x", &b, &view(&a, &b, 1.0));
        assert!(s.contains("  ok w=2\n"), "{s}");
        assert!(!s.contains("slow: "), "{s}");
    }

    #[test]
    fn a_restart_counts_from_zero() {
        let mut nv = tier("nvme", 0, 0);
        app(&mut nv, 0, 10_000_000, 0, 10);
        let a = sample(7, 10.0, vec![nv.clone()]);
        app(&mut nv, 0, 4_000_000, 0, 4);
        let b = sample(8, 1.0, vec![nv]);
        let v = view(&a, &b, 3.0);
        assert!(v.restarted);
        assert_eq!(v.programs[0].write_mbps, 4.0);
        assert!(render("/mnt", "x", &b, &v).contains("restarted"));
    }
}
