//! The daemon's CPU ledger: CPU-seconds spent per class of work next to the bytes that
//! work moved, so the cost of the daemon path is a number per GB (`stats.json` `cpu`, the
//! `tierfs_cpu_*` metrics, `tierfs stat`).
//!
//! Why it matters: every daemon CPU-second is taken from the cores the optimizer needs;
//! real DeepSpeed pays it in step time, a replay with no compute does not.
//!
//! How it is measured: each thread's own CPU clock (`CLOCK_THREAD_CPUTIME_ID`). A worker
//! loop charges each round to its class with a [`Meter`]; work of another class done
//! inside it (a write-back forced by fsync, a migration's copy) is measured around with
//! [`CpuLedger::charge`] and taken out of the loop's share, so nothing counts twice. What
//! no class claims (the estimator, probes, the stats files) is "other": the process total
//! minus the classes.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the CPU was spent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Serving FUSE requests (the bytes: READ and WRITE payloads).
    Demand = 0,
    /// Loading predicted files into the host-memory cache.
    Prefetch = 1,
    /// Writing the cache's dirty blocks to the tiers.
    WriteBack = 2,
    /// Copying a file to a new layout.
    Migration = 3,
}

pub const CLASSES: [Class; 4] = [
    Class::Demand,
    Class::Prefetch,
    Class::WriteBack,
    Class::Migration,
];

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Demand => "demand",
            Class::Prefetch => "prefetch",
            Class::WriteBack => "write-back",
            Class::Migration => "migration",
        }
    }
}

thread_local! {
    /// CPU of this thread already charged by [`CpuLedger::charge`] since the thread's
    /// [`Meter`] last ticked.
    static DIVERTED: Cell<u64> = const { Cell::new(0) };
}

/// This thread's CPU time in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The whole process's CPU time (user + system) in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes the struct we pass.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(r.ru_utime) + us(r.ru_stime)) * 1000
}

/// CPU nanoseconds and bytes per class.
#[derive(Debug, Default)]
pub struct CpuLedger {
    ns: [AtomicU64; 4],
    bytes: [AtomicU64; 4],
}

impl CpuLedger {
    /// Runs `f`, charging this thread's CPU during it to `class` (and not to whatever
    /// loop runs around it).
    pub fn charge<T>(&self, class: Class, f: impl FnOnce() -> T) -> T {
        let before = DIVERTED.with(|d| d.get());
        let t0 = thread_cpu_ns();
        let r = f();
        let spent = thread_cpu_ns().saturating_sub(t0);
        // Charges nested inside `f` already counted their part.
        let inner = DIVERTED.with(|d| d.get()).saturating_sub(before);
        self.ns[class as usize].fetch_add(spent.saturating_sub(inner), Ordering::Relaxed);
        DIVERTED.with(|d| d.set(before + spent));
        r
    }

    /// Counts `n` bytes moved by `class`.
    pub fn moved(&self, class: Class, n: u64) {
        self.bytes[class as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// `(cpu ns, bytes)` of a class.
    pub fn get(&self, class: Class) -> (u64, u64) {
        (
            self.ns[class as usize].load(Ordering::Relaxed),
            self.bytes[class as usize].load(Ordering::Relaxed),
        )
    }
}

/// Charges a worker loop's rounds to one class.
pub struct Meter {
    class: Class,
    last: u64,
}

impl Meter {
    pub fn new(class: Class) -> Meter {
        DIVERTED.with(|d| d.set(0));
        Meter {
            class,
            last: thread_cpu_ns(),
        }
    }

    /// Charges the CPU since the last tick, less what was charged elsewhere meanwhile.
    pub fn tick(&mut self, ledger: &CpuLedger) {
        let now = thread_cpu_ns();
        let diverted = DIVERTED.with(|d| d.replace(0));
        let spent = now.saturating_sub(self.last).saturating_sub(diverted);
        ledger.ns[self.class as usize].fetch_add(spent, Ordering::Relaxed);
        self.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burn(ms: u64) {
        let t = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() - t < ms * 1_000_000 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    }

    #[test]
    fn nested_charges_count_once_and_leave_the_loop_its_own_share() {
        let l = CpuLedger::default();
        let mut m = Meter::new(Class::Demand);
        burn(20);
        l.charge(Class::Migration, || {
            burn(20);
            l.charge(Class::WriteBack, || burn(20));
        });
        m.tick(&l);
        let ms = |c| l.get(c).0 / 1_000_000;
        // Each share is its own 20 ms (a little more for the clock reads).
        for c in [Class::Demand, Class::Migration, Class::WriteBack] {
            assert!((19..=40).contains(&ms(c)), "{}: {} ms", c.name(), ms(c));
        }
        assert_eq!(ms(Class::Prefetch), 0);
        l.moved(Class::Demand, 5);
        assert_eq!(l.get(Class::Demand).1, 5);
        assert!(process_cpu_ns() >= 60_000_000);
    }
}
