//! `tierfs tune`: a measured sweep of DeepSpeed's own I/O pattern through a mount, and the
//! `aio` section it should use, as DeepSpeed's `ds_nvme_tune` does for a raw drive.
//!
//! What one point measures, for a block size, queue depth and thread count (DeepSpeed's
//! `block_size`, `queue_depth`, `intra_op_parallelism`): each of `--ranks` workers writes
//! whole files of `--size` the way DeepSpeed's swapper writes a tensor (`open` with
//! `O_WRONLY|O_CREAT|O_DIRECT`, mode 0600, no `O_TRUNC`; the file cut into one contiguous
//! slice per thread; each thread's slice in `block_size` requests on its own AIO context,
//! [`aio`]; `close`), one file after another until the point's time is up, then reads every
//! file back the same way (`O_RDONLY|O_DIRECT`). The files are named `*.tensor.swp`, so the
//! mount treats them as DeepSpeed's swap files (kernel passthrough under `passthrough =
//! "auto"`). GB/s is bytes over the wall time of the phase, 10^9 bytes, as DeepSpeed's
//! `ds_io` reports it. Nothing is computed from a formula: every figure is a measurement
//! of this run, and the share staging memory served is read from the mount's counters.
//!
//! The choice: the point with the most read plus write GB/s (`ds_nvme_tune`'s rule), then
//! the one of the points within [`CLOSE_ENOUGH`] of it that keeps the fewest bytes in
//! flight: a queue the tiers do not need only takes FUSE threads from the other ranks.
//!
//! The grid: `--quick` a few points around DeepSpeed's defaults, the default one spanning
//! 128K..8M x 4..128 x 1..8 sparsely, `--full` every power of two in those ranges; the
//! time, `--budget`, is shared out over the points (at least one file per point).

pub mod aio;
pub mod point;
pub mod report;

use crate::error::failure::Failure;
use crate::units::fmt_size_exact;
use std::path::Path;
use std::sync::atomic::Ordering;

/// A point within this fraction of the fastest counts as as fast (measurement noise).
pub const CLOSE_ENOUGH: f64 = 0.03;
/// The largest queue depth and thread count a point may ask for.
pub const MAX_QUEUE_DEPTH: usize = 1024;
pub const MAX_THREADS: usize = 64;

/// Which grid, before `--block-sizes`, `--queue-depths` or `--threads` replace a part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grid {
    Quick,
    Default,
    Full,
}

impl Grid {
    /// (block sizes, queue depths, threads, seconds for the whole sweep).
    pub fn values(self) -> (Vec<u64>, Vec<usize>, Vec<usize>, f64) {
        const K: u64 = 1 << 10;
        const M: u64 = 1 << 20;
        match self {
            Grid::Quick => (vec![M, 4 * M], vec![8, 32], vec![1, 4], 20.0),
            Grid::Default => (
                vec![128 * K, 512 * K, M, 2 * M, 8 * M],
                vec![4, 8, 32, 128],
                vec![1, 2, 4, 8],
                90.0,
            ),
            Grid::Full => (
                vec![128 * K, 256 * K, 512 * K, M, 2 * M, 4 * M, 8 * M],
                vec![4, 8, 16, 32, 64, 128],
                vec![1, 2, 4, 8],
                300.0,
            ),
        }
    }
}

/// A validated sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub block_sizes: Vec<u64>,
    pub queue_depths: Vec<usize>,
    pub threads: Vec<usize>,
    /// Bytes of each file (one DeepSpeed request: a tensor).
    pub file_size: u64,
    /// Workers at once, each like one rank with its own files.
    pub ranks: usize,
    /// Seconds for the whole sweep.
    pub budget_s: f64,
    pub single_submit: bool,
    pub overlap_events: bool,
    /// Measure with pread/pwrite threads even where kernel AIO works.
    pub psync: bool,
}

/// One point of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub block_size: u64,
    pub queue_depth: usize,
    pub threads: usize,
}

impl Point {
    /// Bytes this point keeps in flight per rank at most (what the choice keeps low).
    pub fn in_flight(&self) -> u64 {
        self.block_size * (self.queue_depth * self.threads) as u64
    }
}

impl Plan {
    /// Checks what the command line gave; the message names the option and the fix.
    pub fn check(&self) -> Result<(), String> {
        if let Some(b) = self
            .block_sizes
            .iter()
            .find(|b| **b == 0 || **b % 4096 != 0)
        {
            return Err(format!(
                "--block-sizes: {b} bytes is not a multiple of 4 KiB; O_DIRECT requests are \
                 whole 4 KiB blocks, e.g. --block-sizes 128KiB,1MiB,8MiB"
            ));
        }
        if let Some(q) = self
            .queue_depths
            .iter()
            .find(|q| !(1..=MAX_QUEUE_DEPTH).contains(*q))
        {
            return Err(format!(
                "--queue-depths: {q} is out of range; use 1 to {MAX_QUEUE_DEPTH}"
            ));
        }
        if let Some(t) = self
            .threads
            .iter()
            .find(|t| !(1..=MAX_THREADS).contains(*t))
        {
            return Err(format!(
                "--threads: {t} is out of range; use 1 to {MAX_THREADS}"
            ));
        }
        for t in &self.threads {
            let unit = 4096 * *t as u64;
            if self.file_size == 0 || self.file_size % unit != 0 {
                return Err(format!(
                    "--size: {} cannot be cut into {t} slices of whole 4 KiB blocks (each \
                     thread reads and writes its own slice with O_DIRECT); use a multiple of \
                     {}, e.g. --size {}",
                    fmt_size_exact(self.file_size),
                    fmt_size_exact(unit),
                    fmt_size_exact(self.file_size.max(1).div_ceil(unit) * unit)
                ));
            }
        }
        if !(self.budget_s.is_finite() && self.budget_s > 0.0) {
            return Err("--budget must be a positive number of seconds".into());
        }
        if [
            &self.block_sizes.len(),
            &self.queue_depths.len(),
            &self.threads.len(),
        ]
        .iter()
        .any(|n| **n == 0)
        {
            return Err("the grid is empty: give at least one value of each list".into());
        }
        Ok(())
    }

    /// Every point, block size slowest, threads fastest.
    pub fn points(&self) -> Vec<Point> {
        let mut v = Vec::new();
        for &block_size in &self.block_sizes {
            for &queue_depth in &self.queue_depths {
                for &threads in &self.threads {
                    v.push(Point {
                        block_size,
                        queue_depth,
                        threads,
                    });
                }
            }
        }
        v
    }

    /// Seconds each direction of a point may write (or read) files for.
    pub fn seconds_per_phase(&self) -> f64 {
        self.budget_s / (2 * self.points().len().max(1)) as f64
    }
}

/// What a sweep found.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub engine: aio::Kind,
    /// Why the engine is not kernel AIO, if it is not.
    pub engine_note: Option<String>,
    pub rows: Vec<report::Row>,
    pub seconds_per_phase: f64,
    /// Files per rank a phase may write at most (the mount's free space).
    pub max_files: u64,
}

/// The staging-memory and total bytes programs moved, all tiers: (memory read, read,
/// memory written, written); `None` when the mount's counters cannot be read.
fn app_totals(mount: &Path, stats_dir: &str) -> Option<(u64, u64, u64, u64)> {
    let s = crate::client::read_snapshot(mount, stats_dir).ok()?;
    Some(s.tiers.iter().fold((0, 0, 0, 0), |t, x| {
        let a = &x.app;
        (
            t.0 + a.memory_read_bytes,
            t.1 + a.read_bytes,
            t.2 + a.memory_written_bytes,
            t.3 + a.written_bytes,
        )
    }))
}

/// The share of `(memory, all)` between two [`app_totals`].
fn share(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<f64> {
    let ((m0, t0), (m1, t1)) = (a?, b?);
    let (m, t) = (m1.saturating_sub(m0), t1.saturating_sub(t0));
    (t > 0).then(|| (m as f64 / t as f64).min(1.0))
}

/// Runs the sweep of `plan` in a folder of its own at the mount's root (removed at the end,
/// on an error and on SIGINT/SIGTERM); `progress` gets each row as it is measured.
pub fn sweep(
    mount: &Path,
    stats_dir: &str,
    plan: &Plan,
    mut progress: impl FnMut(&report::Row),
) -> Result<Sweep, Failure> {
    plan.check().map_err(Failure::usage)?;
    let snap = crate::client::read_snapshot(mount, stats_dir)?;
    let free: u64 = snap
        .tiers
        .iter()
        .filter(|t| t.healthy)
        .map(|t| t.free)
        .sum();
    let per_round = plan.ranks as u64 * plan.file_size;
    if per_round > free / 2 {
        return Err(Failure::runtime(format!(
            "{} has {} free; a point needs at least {} (--ranks {} x --size {}) and the sweep \
             keeps to half the free space: lower --size or --ranks, or free space",
            mount.display(),
            fmt_size_exact(free),
            fmt_size_exact(per_round),
            plan.ranks,
            fmt_size_exact(plan.file_size)
        )));
    }
    let max_files = (free / 2 / per_round).max(1);
    let (engine, engine_note) = aio::choose(plan.psync);
    let scratch = point::Scratch::create(mount).map_err(|e| {
        Failure::runtime(format!(
            "cannot create the sweep's folder in {}: {e}",
            mount.display()
        ))
    })?;
    point::catch_signals();
    let stop = point::stop_flag();
    let mut bufs: Vec<_> = (0..plan.ranks)
        .map(|r| point::buffer(plan.file_size, r))
        .collect();
    let secs = plan.seconds_per_phase();
    let io_err = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::Interrupted || stop.load(Ordering::Relaxed) {
            Failure {
                code: 130,
                message: format!(
                    "interrupted; the sweep's files ({}) are removed",
                    scratch.dir.display()
                ),
            }
        } else {
            Failure::runtime(format!("the sweep failed: {e}"))
        }
    };
    let mut rows = Vec::new();
    for p in plan.points() {
        let run = point::Run {
            dir: &scratch.dir,
            kind: engine,
            shape: point::Run::shape_of(&p, plan.single_submit, plan.overlap_events),
            threads: p.threads,
            file_size: plan.file_size,
            max_files,
        };
        let t0 = app_totals(mount, stats_dir);
        let (w, counts) = run.write(&mut bufs, secs).map_err(io_err)?;
        let t1 = app_totals(mount, stats_dir);
        let r = run.read(&mut bufs, &counts).map_err(io_err)?;
        let t2 = app_totals(mount, stats_dir);
        scratch.clear().map_err(|e| {
            Failure::runtime(format!(
                "removing the point's files in {}: {e}",
                scratch.dir.display()
            ))
        })?;
        let row = report::Row {
            block_size: p.block_size,
            queue_depth: p.queue_depth,
            intra_op_parallelism: p.threads,
            write_gbps: w.gbps(),
            read_gbps: r.gbps(),
            write_bytes: w.bytes,
            read_bytes: r.bytes,
            write_s: w.secs,
            read_s: r.secs,
            files: w.files,
            memory_read_share: share(t1.map(|t| (t.0, t.1)), t2.map(|t| (t.0, t.1))),
            memory_write_share: share(t0.map(|t| (t.2, t.3)), t1.map(|t| (t.2, t.3))),
        };
        progress(&row);
        rows.push(row);
        if stop.load(Ordering::Relaxed) {
            return Err(io_err(std::io::ErrorKind::Interrupted.into()));
        }
    }
    Ok(Sweep {
        engine,
        engine_note,
        rows,
        seconds_per_phase: secs,
        max_files,
    })
}

/// A comma-separated list of sizes (`128KiB,1MiB`).
pub fn parse_sizes(s: &str) -> Result<Vec<u64>, String> {
    s.split(',')
        .map(|x| crate::units::parse_size(x.trim()))
        .collect()
}

/// A comma-separated list of counts (`4,8,32`).
pub fn parse_counts(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| format!("{x:?} is not a whole number"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        let (block_sizes, queue_depths, threads, budget_s) = Grid::Default.values();
        Plan {
            block_sizes,
            queue_depths,
            threads,
            file_size: 128 << 20,
            ranks: 1,
            budget_s,
            single_submit: false,
            overlap_events: true,
            psync: false,
        }
    }

    #[test]
    fn grids_span_what_deepspeed_sweeps() {
        let p = plan();
        assert_eq!(p.check(), Ok(()));
        assert_eq!(p.points().len(), 80);
        assert_eq!(p.points()[0].block_size, 128 << 10);
        assert_eq!(p.points()[79].threads, 8);
        // 90 s over 80 points, both directions.
        assert!((p.seconds_per_phase() - 90.0 / 160.0).abs() < 1e-12);
        let (b, q, t, _) = Grid::Full.values();
        assert_eq!(b.len() * q.len() * t.len(), 168);
        let (b, q, t, s) = Grid::Quick.values();
        assert_eq!((b.len() * q.len() * t.len(), s), (8, 20.0));
        // DeepSpeed's defaults (1 MiB, 8, 1) are on every grid but the full one's threads.
        for g in [Grid::Quick, Grid::Default, Grid::Full] {
            let (b, q, _, _) = g.values();
            assert!(b.contains(&(1 << 20)) && q.contains(&8), "{g:?}");
        }
    }

    #[test]
    fn bad_values_name_the_option_and_the_fix() {
        let mut p = plan();
        p.block_sizes = vec![1000];
        assert!(p
            .check()
            .unwrap_err()
            .starts_with("--block-sizes: 1000 bytes"));
        let mut p = plan();
        p.file_size = 1 << 20;
        p.threads = vec![1, 3];
        let e = p.check().unwrap_err();
        assert!(e.contains("1MiB cannot be cut into 3 slices"), "{e}");
        assert!(
            e.contains("a multiple of 12KiB, e.g. --size 1032KiB"),
            "{e}"
        );
        let mut p = plan();
        p.queue_depths = vec![0];
        assert!(p.check().unwrap_err().starts_with("--queue-depths: 0"));
        let mut p = plan();
        p.threads = vec![65];
        assert!(p.check().unwrap_err().starts_with("--threads: 65"));
        let mut p = plan();
        p.budget_s = 0.0;
        assert!(p.check().is_err());
        assert_eq!(parse_sizes("128KiB, 1MiB"), Ok(vec![128 << 10, 1 << 20]));
        assert!(parse_counts("4,x").is_err());
    }

    #[test]
    fn in_flight_is_per_rank_bytes() {
        let p = Point {
            block_size: 1 << 20,
            queue_depth: 8,
            threads: 2,
        };
        assert_eq!(p.in_flight(), 16 << 20);
    }
}
