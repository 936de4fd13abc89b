//! Watching a mount over time: rates from counter deltas (`tierfs stat --watch` draws them:
//! [`crate::client::watch`]) and recordings of `stats.json` samples (`tierfs record`, read
//! back by `tierfs plot`).
//!
//! Rates use the daemon's own clock (`uptime_s` in the same snapshot as the counters), so a
//! slow `stats.json` read does not skew them. A remount (another pid, or an uptime that went
//! down) restarts every counter at 0: the interval's delta is then the new value itself. MB
//! is 10^6 bytes, as everywhere in tierfs.

use crate::stats::Snapshot;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};

/// `cur - prev` for a counter, or `cur` when the counter restarted.
pub fn counter_delta(prev: u64, cur: u64, restarted: bool) -> u64 {
    if restarted || cur < prev {
        cur
    } else {
        cur - prev
    }
}

/// Seconds between two snapshots and whether the daemon restarted in between. The
/// daemon's uptime difference when it is usable, else `wall_s` (the caller's clock).
pub fn interval(
    prev_pid: u32,
    prev_up: f64,
    cur_pid: u32,
    cur_up: f64,
    wall_s: f64,
) -> (f64, bool) {
    let restarted = prev_pid != cur_pid || cur_up < prev_up;
    let dt = if restarted {
        // Since the new daemon started, but never more than the wall time that passed.
        if cur_up > 0.0 && cur_up < wall_s {
            cur_up
        } else {
            wall_s
        }
    } else if cur_up > prev_up {
        cur_up - prev_up
    } else {
        wall_s
    };
    (dt.max(1e-6), restarted)
}

/// One tier's counters at one moment: what a recording keeps of `stats.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TierSample {
    pub name: String,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub reads: u64,
    pub writes: u64,
    pub in_flight: u64,
    pub queue_waiting: u64,
    pub errors: u64,
    pub share: f64,
    pub used: u64,
    pub free: u64,
    pub healthy: bool,
    pub passthrough_open: u64,
    pub passthrough_opens: u64,
    pub device_read: Option<u64>,
    pub device_written: Option<u64>,
    /// Rates over the interval since the previous sample (None in the first), MB/s.
    pub read_mbps: Option<f64>,
    pub write_mbps: Option<f64>,
    pub device_read_mbps: Option<f64>,
    pub device_write_mbps: Option<f64>,
    /// The online estimates (bytes/s; None until measured) and the pause, so a recording
    /// shows why the shares moved.
    #[serde(default)]
    pub est_read_bps: Option<f64>,
    #[serde(default)]
    pub est_write_bps: Option<f64>,
    #[serde(default)]
    pub paused: bool,
    /// The tier queues ([`crate::tier::Queueing`]); for a shared tier, the live nodes and
    /// this node's part of it (bytes/s) in the job's ledger.
    #[serde(default)]
    pub saturated: bool,
    #[serde(default)]
    pub shared_live: Option<u64>,
    #[serde(default)]
    pub shared_allot_bps: Option<f64>,
    /// Seconds the daemon's threads waited for a core on this tier's requests, so far: a
    /// recording shows when the machine's load, not the tier, held the requests up.
    #[serde(default)]
    pub core_wait_s: f64,
    /// The time the tier's reads and writes took, summed (ns): with their counts, the
    /// await of `tierfs stat --watch`.
    #[serde(default)]
    pub read_ns: u64,
    #[serde(default)]
    pub write_ns: u64,
    /// What programs moved for files on the tier, by path ([`crate::stats::app`]).
    #[serde(default)]
    pub app: crate::stats::app::AppStats,
    /// The tier's block device, `MAJ:MIN`.
    #[serde(default)]
    pub device: Option<String>,
    /// What its operator set (`tierfs ctl`): None while it is as at mount (active, weight 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<crate::stats::control::TierControl>,
}

/// One sample of a mount.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Unix time, seconds.
    pub time: f64,
    /// Seconds since the recording started.
    pub elapsed_s: f64,
    pub pid: u32,
    pub uptime_s: f64,
    pub layout: String,
    pub passthrough: bool,
    pub files: u64,
    pub tiers: Vec<TierSample>,
    /// Staging memory's totals (None without it).
    #[serde(default)]
    pub cache: Option<crate::stats::CacheStats>,
}

impl Sample {
    /// The counters of `s`, taken at `time` (unix) and `elapsed_s`; no rates.
    pub fn from_snapshot(s: &Snapshot, time: f64, elapsed_s: f64) -> Sample {
        Sample {
            time,
            elapsed_s,
            pid: s.pid,
            uptime_s: s.uptime_s,
            layout: s.layout.clone(),
            passthrough: s.passthrough,
            files: s.files.len() as u64,
            tiers: s
                .tiers
                .iter()
                .map(|t| TierSample {
                    name: t.name.clone(),
                    bytes_read: t.bytes_read,
                    bytes_written: t.bytes_written,
                    reads: t.reads,
                    writes: t.writes,
                    in_flight: t.in_flight,
                    queue_waiting: t.queue.waiting as u64,
                    errors: t.errors,
                    share: t.share,
                    used: t.used,
                    free: t.free,
                    healthy: t.healthy,
                    passthrough_open: t.passthrough_open,
                    passthrough_opens: t.passthrough_opens,
                    device_read: t.device_read,
                    device_written: t.device_written,
                    est_read_bps: t.est_read_bps,
                    est_write_bps: t.est_write_bps,
                    paused: t.paused,
                    saturated: t.saturated,
                    shared_live: t.shared.as_ref().map(|x| x.live_nodes as u64),
                    shared_allot_bps: t.shared.as_ref().map(|x| x.allot_bps),
                    core_wait_s: t.core_wait_s,
                    read_ns: t.read_ns,
                    write_ns: t.write_ns,
                    app: t.app.clone(),
                    device: t.device.clone(),
                    control: crate::stats::control::TierControl::of(t),
                    ..TierSample::default()
                })
                .collect(),
            cache: s.cache.clone(),
        }
    }
}

/// One tier's rates over an interval.
#[derive(Debug, Clone, PartialEq)]
pub struct TierRates {
    pub name: String,
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    /// Through the daemon, MB/s.
    pub read_mbps: f64,
    pub write_mbps: f64,
    /// On the tier's block device (passthrough included), MB/s; None without a device.
    pub device_read_mbps: Option<f64>,
    pub device_write_mbps: Option<f64>,
    pub errors: u64,
}

/// Rates of every tier between two samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    pub dt: f64,
    pub restarted: bool,
    pub tiers: Vec<TierRates>,
}

/// Rates from `prev` to `cur`; `wall_s` is the caller's measure of the time between them.
/// A tier missing from `prev` counts from 0.
pub fn rates(prev: &Sample, cur: &Sample, wall_s: f64) -> Rates {
    let (dt, restarted) = interval(prev.pid, prev.uptime_s, cur.pid, cur.uptime_s, wall_s);
    let tiers = cur
        .tiers
        .iter()
        .map(|t| {
            let zero = TierSample::default();
            let p = prev.tiers.iter().find(|p| p.name == t.name);
            let r = restarted || p.is_none();
            let p = p.unwrap_or(&zero);
            let per_s = |a: u64, b: u64| counter_delta(a, b, r) as f64 / dt;
            let dev = |a: Option<u64>, b: Option<u64>| match (a, b) {
                (Some(a), Some(b)) => Some(counter_delta(a, b, r) as f64 / dt / 1e6),
                (None, Some(b)) if r => Some(b as f64 / dt / 1e6),
                _ => None,
            };
            TierRates {
                name: t.name.clone(),
                reads_per_s: per_s(p.reads, t.reads),
                writes_per_s: per_s(p.writes, t.writes),
                read_mbps: per_s(p.bytes_read, t.bytes_read) / 1e6,
                write_mbps: per_s(p.bytes_written, t.bytes_written) / 1e6,
                device_read_mbps: dev(p.device_read, t.device_read),
                device_write_mbps: dev(p.device_written, t.device_written),
                errors: counter_delta(p.errors, t.errors, r),
            }
        })
        .collect();
    Rates {
        dt,
        restarted,
        tiers,
    }
}

/// Fills `cur`'s rate fields from `prev`.
pub fn fill_rates(prev: &Sample, cur: &mut Sample, wall_s: f64) {
    let r = rates(prev, cur, wall_s);
    for (t, rt) in cur.tiers.iter_mut().zip(r.tiers) {
        t.read_mbps = Some(rt.read_mbps);
        t.write_mbps = Some(rt.write_mbps);
        t.device_read_mbps = rt.device_read_mbps;
        t.device_write_mbps = rt.device_write_mbps;
    }
}

/// How a recording is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One JSON object per sample and line.
    Jsonl,
    /// One row per tier and sample, with a header.
    Csv,
}

impl Format {
    /// `.csv` means CSV; anything else JSON lines.
    pub fn for_path(p: &std::path::Path) -> Format {
        if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
            Format::Csv
        } else {
            Format::Jsonl
        }
    }
}

/// CSV columns, in order.
pub const CSV_COLUMNS: [&str; 34] = [
    "time",
    "elapsed_s",
    "pid",
    "uptime_s",
    "layout",
    "passthrough",
    "files",
    "tier",
    "bytes_read",
    "bytes_written",
    "reads",
    "writes",
    "in_flight",
    "queue_waiting",
    "errors",
    "share",
    "used",
    "free",
    "healthy",
    "passthrough_open",
    "passthrough_opens",
    "device_read",
    "device_written",
    "read_MBps",
    "write_MBps",
    "device_read_MBps",
    "device_write_MBps",
    "est_read_bps",
    "est_write_bps",
    "paused",
    "saturated",
    "shared_live",
    "shared_allot_bps",
    "core_wait_s",
];

fn csv_opt_u(v: Option<u64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn csv_opt_f(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.3}")).unwrap_or_default()
}

/// Writes a recording's header (CSV only).
pub fn write_header(w: &mut impl Write, f: Format) -> std::io::Result<()> {
    if f == Format::Csv {
        writeln!(w, "{}", CSV_COLUMNS.join(","))?;
    }
    Ok(())
}

/// Appends one sample.
pub fn write_sample(w: &mut impl Write, f: Format, s: &Sample) -> std::io::Result<()> {
    match f {
        Format::Jsonl => {
            serde_json::to_writer(&mut *w, s)?;
            writeln!(w)
        }
        Format::Csv => {
            for t in &s.tiers {
                let row = [
                    format!("{:.3}", s.time),
                    format!("{:.3}", s.elapsed_s),
                    s.pid.to_string(),
                    format!("{:.3}", s.uptime_s),
                    s.layout.clone(),
                    s.passthrough.to_string(),
                    s.files.to_string(),
                    t.name.clone(),
                    t.bytes_read.to_string(),
                    t.bytes_written.to_string(),
                    t.reads.to_string(),
                    t.writes.to_string(),
                    t.in_flight.to_string(),
                    t.queue_waiting.to_string(),
                    t.errors.to_string(),
                    format!("{:.6}", t.share),
                    t.used.to_string(),
                    t.free.to_string(),
                    t.healthy.to_string(),
                    t.passthrough_open.to_string(),
                    t.passthrough_opens.to_string(),
                    csv_opt_u(t.device_read),
                    csv_opt_u(t.device_written),
                    csv_opt_f(t.read_mbps),
                    csv_opt_f(t.write_mbps),
                    csv_opt_f(t.device_read_mbps),
                    csv_opt_f(t.device_write_mbps),
                    csv_opt_f(t.est_read_bps),
                    csv_opt_f(t.est_write_bps),
                    t.paused.to_string(),
                    t.saturated.to_string(),
                    csv_opt_u(t.shared_live),
                    csv_opt_f(t.shared_allot_bps),
                    format!("{:.3}", t.core_wait_s),
                ];
                writeln!(w, "{}", row.join(","))?;
            }
            Ok(())
        }
    }
}

/// Reads a recording, JSON lines or CSV (told apart by the first character).
pub fn read_samples(r: impl BufRead) -> Result<Vec<Sample>, String> {
    let mut lines = r.lines().enumerate().peekable();
    let first = loop {
        match lines.peek() {
            None => return Ok(Vec::new()),
            Some((_, Ok(l))) if l.trim().is_empty() => {
                lines.next();
            }
            Some((_, Ok(l))) => break l.trim_start().chars().next(),
            Some((_, Err(e))) => return Err(e.to_string()),
        }
    };
    if first == Some('{') {
        read_jsonl(lines)
    } else {
        read_csv(lines)
    }
}

/// A JSON-lines recording, one [`Sample`] a line.
fn read_jsonl(
    lines: impl Iterator<Item = (usize, std::io::Result<String>)>,
) -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    for (no, line) in lines {
        let line = line.map_err(|e| e.to_string())?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Sample>(&line) {
            Ok(s) => out.push(s),
            // A recording stopped by Ctrl-C mid-line: keep what came before.
            Err(e) if e.is_eof() => break,
            Err(e) => return Err(format!("line {}: {e}", no + 1)),
        }
    }
    Ok(out)
}

/// A CSV recording: a header, then one row per tier and sample; the rows of one sample
/// share its time.
fn read_csv(
    mut lines: impl Iterator<Item = (usize, std::io::Result<String>)>,
) -> Result<Vec<Sample>, String> {
    let (_, header) = lines.next().ok_or("empty file")?;
    let header = header.map_err(|e| e.to_string())?;
    let cols: Vec<&str> = header.trim().split(',').collect();
    for need in ["elapsed_s", "tier", "bytes_read", "bytes_written"] {
        if !cols.contains(&need) {
            return Err(format!(
                "not a tierfs recording: the CSV header has no `{need}` column"
            ));
        }
    }
    let mut out: Vec<Sample> = Vec::new();
    for (no, line) in lines {
        let line = line.map_err(|e| e.to_string())?;
        if line.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != cols.len() {
            // A half-written last row.
            break;
        }
        let row = CsvRow {
            cols: &cols,
            cells,
            line: no + 1,
        };
        let elapsed_s = row.f("elapsed_s")?;
        let time = row.f("time")?;
        let tier = row.tier()?;
        match out.last_mut() {
            Some(s) if s.elapsed_s == elapsed_s && s.time == time => s.tiers.push(tier),
            _ => out.push(Sample {
                time,
                elapsed_s,
                pid: row.u("pid")? as u32,
                uptime_s: row.f("uptime_s")?,
                layout: row.get("layout").to_string(),
                passthrough: row.get("passthrough") == "true",
                files: row.u("files")?,
                tiers: vec![tier],
                cache: None,
            }),
        }
    }
    Ok(out)
}

/// One CSV row, its cells looked up by column name; an empty cell is 0 or `None`.
struct CsvRow<'a> {
    cols: &'a [&'a str],
    cells: Vec<&'a str>,
    /// 1-based, for messages.
    line: usize,
}

impl CsvRow<'_> {
    fn get(&self, c: &str) -> &str {
        self.cols
            .iter()
            .position(|x| *x == c)
            .map(|i| self.cells[i])
            .unwrap_or("")
    }

    fn opt<T: std::str::FromStr>(&self, c: &str) -> Result<Option<T>, String> {
        let v = self.get(c);
        if v.is_empty() {
            Ok(None)
        } else {
            v.parse()
                .map(Some)
                .map_err(|_| format!("line {}: bad {c}", self.line))
        }
    }

    fn u(&self, c: &str) -> Result<u64, String> {
        Ok(self.opt(c)?.unwrap_or(0))
    }

    fn f(&self, c: &str) -> Result<f64, String> {
        Ok(self.opt(c)?.unwrap_or(0.0))
    }

    /// The row's tier columns.
    fn tier(&self) -> Result<TierSample, String> {
        Ok(TierSample {
            name: self.get("tier").to_string(),
            bytes_read: self.u("bytes_read")?,
            bytes_written: self.u("bytes_written")?,
            reads: self.u("reads")?,
            writes: self.u("writes")?,
            in_flight: self.u("in_flight")?,
            queue_waiting: self.u("queue_waiting")?,
            errors: self.u("errors")?,
            share: self.f("share")?,
            used: self.u("used")?,
            free: self.u("free")?,
            healthy: self.get("healthy") != "false",
            passthrough_open: self.u("passthrough_open")?,
            passthrough_opens: self.u("passthrough_opens")?,
            device_read: self.opt("device_read")?,
            device_written: self.opt("device_written")?,
            read_mbps: self.opt("read_MBps")?,
            write_mbps: self.opt("write_MBps")?,
            device_read_mbps: self.opt("device_read_MBps")?,
            device_write_mbps: self.opt("device_write_MBps")?,
            est_read_bps: self.opt("est_read_bps")?,
            est_write_bps: self.opt("est_write_bps")?,
            paused: self.get("paused") == "true",
            saturated: self.get("saturated") == "true",
            shared_live: self.opt("shared_live")?,
            shared_allot_bps: self.opt("shared_allot_bps")?,
            core_wait_s: self.opt("core_wait_s")?.unwrap_or(0.0),
            ..TierSample::default()
        })
    }
}

/// Local wall-clock time as `HH:MM:SS`.
pub fn clock() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as libc::time_t)
        .unwrap_or(0);
    // SAFETY: tm is plain data that localtime_r fills; both pointers are valid for the call.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return String::new();
        }
        tm
    };
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn tier(name: &str, r: u64, w: u64) -> TierSample {
        TierSample {
            name: name.into(),
            bytes_read: r,
            bytes_written: w,
            reads: r >> 20,
            writes: w >> 20,
            share: 0.5,
            healthy: true,
            ..TierSample::default()
        }
    }

    pub(crate) fn sample(pid: u32, up: f64, tiers: Vec<TierSample>) -> Sample {
        Sample {
            time: 1_700_000_000.0 + up,
            elapsed_s: up,
            pid,
            uptime_s: up,
            layout: "whole-file".into(),
            passthrough: false,
            files: 3,
            tiers,
            cache: None,
        }
    }

    #[test]
    fn delta_math() {
        assert_eq!(counter_delta(10, 25, false), 15);
        assert_eq!(counter_delta(10, 25, true), 25);
        // A counter that went down restarted.
        assert_eq!(counter_delta(30, 5, false), 5);
        // Daemon clock preferred over the wall clock.
        assert_eq!(interval(1, 10.0, 1, 12.0, 2.5), (2.0, false));
        // Uptime did not move (same snapshot twice): the wall clock.
        assert_eq!(interval(1, 10.0, 1, 10.0, 0.5), (0.5, false));
        // Restarted: the new daemon's uptime when it is shorter than the wall time.
        assert_eq!(interval(1, 10.0, 2, 0.5, 2.0), (0.5, true));
        assert_eq!(interval(1, 10.0, 1, 3.0, 2.0), (2.0, true));
    }

    #[test]
    fn rates_from_two_samples() {
        let a = sample(7, 10.0, vec![tier("nvme", 100 << 20, 0), tier("pfs", 0, 0)]);
        let mut nv = tier("nvme", 300 << 20, 50_000_000);
        nv.device_read = Some(1_000_000);
        nv.errors = 2;
        let mut b = sample(7, 12.0, vec![nv, tier("pfs", 0, 10_000_000)]);
        b.tiers[0].device_written = Some(2_000_000);
        let mut pa = a.clone();
        pa.tiers[0].device_read = Some(0);
        pa.tiers[0].device_written = Some(0);
        let r = rates(&pa, &b, 99.0);
        assert_eq!(r.dt, 2.0);
        assert!(!r.restarted);
        let n = &r.tiers[0];
        assert!((n.read_mbps - (200u64 << 20) as f64 / 2.0 / 1e6).abs() < 1e-9);
        assert!((n.write_mbps - 25.0).abs() < 1e-9);
        assert_eq!(n.reads_per_s, 100.0);
        assert_eq!(n.device_read_mbps, Some(0.5));
        assert_eq!(n.device_write_mbps, Some(1.0));
        assert_eq!(n.errors, 2);
        assert_eq!(r.tiers[1].write_mbps, 5.0);
        assert_eq!(r.tiers[1].device_read_mbps, None);
        // Remounted in between: deltas are the new counters themselves.
        let c = sample(8, 1.0, vec![tier("nvme", 4_000_000, 0)]);
        let r = rates(&b, &c, 3.0);
        assert!(r.restarted);
        assert_eq!(r.dt, 1.0);
        assert_eq!(r.tiers[0].read_mbps, 4.0);
    }

    #[test]
    fn recordings_round_trip_in_both_formats() {
        let a = sample(7, 10.0, vec![tier("nvme", 0, 0), tier("pfs", 0, 0)]);
        let mut b = sample(
            7,
            11.0,
            vec![tier("nvme", 0, 4_000_000), tier("pfs", 5, 2_000_000)],
        );
        b.tiers[0].device_read = Some(77);
        fill_rates(&a, &mut b, 1.0);
        assert_eq!(b.tiers[0].write_mbps, Some(4.0));
        for f in [Format::Jsonl, Format::Csv] {
            let mut buf = Vec::new();
            write_header(&mut buf, f).unwrap();
            write_sample(&mut buf, f, &a).unwrap();
            write_sample(&mut buf, f, &b).unwrap();
            let back = read_samples(&buf[..]).unwrap();
            assert_eq!(back.len(), 2, "{f:?}");
            assert_eq!(back[0].tiers.len(), 2);
            assert_eq!(back[1].tiers[1].bytes_written, 2_000_000);
            assert_eq!(back[1].tiers[0].device_read, Some(77));
            assert_eq!(back[1].tiers[0].device_written, None);
            assert_eq!(back[1].tiers[0].write_mbps, Some(4.0));
            assert_eq!(back[0].tiers[0].write_mbps, None);
            assert_eq!(back[1].pid, 7);
            // A torn last line (Ctrl-C) is dropped, not an error.
            buf.extend_from_slice(if f == Format::Csv {
                b"1,2,3"
            } else {
                b"{\"time\": 1"
            });
            assert_eq!(read_samples(&buf[..]).unwrap().len(), 2, "{f:?}");
        }
        assert_eq!(Format::for_path("x.CSV".as_ref()), Format::Csv);
        assert_eq!(Format::for_path("x.jsonl".as_ref()), Format::Jsonl);
        assert!(read_samples(&b"a,b\n1,2\n"[..]).is_err());
    }

    #[test]
    fn sample_from_snapshot_keeps_counters() {
        let mut t = crate::stats::metrics::tests::tier("nvme", 1e9);
        t.bytes_written = 42;
        t.queue.waiting = 2;
        let s = crate::stats::metrics::tests::snap(vec![t]);
        let smp = Sample::from_snapshot(&s, 5.0, 0.0);
        assert_eq!(smp.tiers[0].bytes_written, 42);
        assert_eq!(smp.tiers[0].queue_waiting, 2);
        assert_eq!(smp.files, 1);
        assert_eq!(smp.pid, 42);
        assert_eq!(smp.tiers[0].control, None, "a tier as at mount");
        assert!(!clock().is_empty());
        // An operator's state is kept, and a JSON-lines recording keeps it.
        let mut t = crate::stats::metrics::tests::tier("nvme", 1e9);
        t.control = "draining".into();
        t.weight = 2.0;
        let smp = Sample::from_snapshot(&crate::stats::metrics::tests::snap(vec![t]), 5.0, 0.0);
        let c = smp.tiers[0].control.as_ref().expect("kept");
        assert_eq!((c.state.as_str(), c.weight), ("draining", 2.0));
        let mut buf = Vec::new();
        write_sample(&mut buf, Format::Jsonl, &smp).unwrap();
        assert_eq!(read_samples(&buf[..]).unwrap(), vec![smp]);
    }
}
