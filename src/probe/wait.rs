//! How short of cores the machine was while a probe ran. A probe that waits for cores
//! measures the CPU, not the tier, so its figure is not cached (docs/PERFORMANCE.md, "Probes
//! taken while the CPU is busy": a RAM-backed tier's writes once read at a third of their cap
//! beside busy processes, and set every later mount's layout).

use std::time::Duration;

/// Time spent waiting for a core during a probe, as shares of the probe's timed passes.
///
/// A probe that waits for cores measures the CPU, not the tier: a tier backed by memory or
/// a fast device needs a core to move its bytes, and the probe's own threads need one to
/// submit the next request. Such a figure is used for the mount that measured it, but not
/// cached (see [`CpuWait::busy`]), so one busy moment does not set every later mount's
/// layout.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuWait {
    /// Share of the time in which some task on the machine was runnable but waiting for a
    /// core (PSI `some` of `/proc/pressure/cpu`); `None` where the kernel keeps no PSI.
    pub machine: Option<f64>,
    /// The probe threads' mean run delay (`/proc/thread-self/schedstat`) as a share of the
    /// time; `None` where the kernel keeps no schedstat.
    pub threads: Option<f64>,
}

/// Above this share of the probe's time spent waiting for a core, a probe's figures are
/// not cached. A quiet 2-core machine probing a RAM-backed tier stays near 3 %; two
/// spinning processes beside it give about 30 % and cost a fifth of the write figure.
pub const CPU_WAIT_LIMIT: f64 = 0.15;

impl CpuWait {
    /// Whether the probe waited for cores too long to be trusted beyond this mount.
    pub fn busy(&self) -> bool {
        self.exceeds(CPU_WAIT_LIMIT)
    }

    /// Whether either share passed `limit`.
    pub fn exceeds(&self, limit: f64) -> bool {
        self.worst().is_some_and(|w| w > limit)
    }

    /// The larger of the two shares that could be read.
    pub fn worst(&self) -> Option<f64> {
        match (self.machine, self.threads) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Waits for a core summed over a probe's timed passes.
#[derive(Default)]
pub(super) struct Waits {
    /// PSI `some` microseconds over the passes; `None` once any reading failed.
    machine_us: Option<u64>,
    machine_missing: bool,
    /// Per pass, the threads' summed run delay divided by the thread count, in ns.
    threads_ns: Option<f64>,
    threads_missing: bool,
}

impl Waits {
    pub(super) fn add_machine(&mut self, before: Option<u64>, after: Option<u64>) {
        match (before, after) {
            (Some(a), Some(b)) if !self.machine_missing => {
                *self.machine_us.get_or_insert(0) += b.saturating_sub(a)
            }
            _ => {
                self.machine_missing = true;
                self.machine_us = None;
            }
        }
    }

    pub(super) fn add_threads(&mut self, mean_ns: Option<f64>) {
        match mean_ns {
            Some(ns) if !self.threads_missing => *self.threads_ns.get_or_insert(0.0) += ns,
            _ => {
                self.threads_missing = true;
                self.threads_ns = None;
            }
        }
    }

    pub(super) fn shares(&self, timed: Duration) -> CpuWait {
        let t = timed.as_secs_f64().max(1e-9);
        CpuWait {
            machine: self.machine_us.map(|us| (us as f64 / 1e6 / t).min(1.0)),
            threads: self.threads_ns.map(|ns| (ns / 1e9 / t).min(1.0)),
        }
    }
}
