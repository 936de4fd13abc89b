//! A request's share of its tier's counters: requests in flight, busy time, and on success
//! the bytes and the time it took, which the bandwidth estimates and the stats read.

use super::sched::Class;
use crate::tier::Tier;
use std::sync::atomic::Ordering;

/// Counts one backing request for the stats while it is in flight.
pub(super) struct InFlight<'a> {
    tier: &'a Tier,
    write: bool,
    start: std::time::Instant,
    /// When it completed, if noted ([`InFlight::finish`]); else when it is dropped.
    end: Option<std::time::Instant>,
}

impl<'a> InFlight<'a> {
    /// Starts counting a request of `class`; `None` for a recovery probe, which measures
    /// the tier itself: counted as traffic it would feed the estimates twice and reset the
    /// idle time that decides when the next probe runs.
    pub(super) fn start(tier: &'a Tier, class: Class, write: bool) -> Option<Self> {
        if class == Class::Probe {
            return None;
        }
        tier.counters.in_flight.fetch_add(1, Ordering::Relaxed);
        tier.counters.io_busy.begin();
        if write {
            tier.counters.write_busy.begin();
        } else {
            tier.counters.read_busy.begin();
        }
        Some(InFlight {
            tier,
            write,
            start: std::time::Instant::now(),
            end: None,
        })
    }

    /// Records the outcome: `done` is the bytes moved, `None` for a failure (counted by
    /// the caller with the tier's errors), `at` when it completed; `core_wait_ns`, how
    /// long the submitting thread waited for a core meanwhile, is split from its time.
    pub(super) fn finish(mut self, done: Option<u64>, core_wait_ns: u64, at: std::time::Instant) {
        self.end = Some(at);
        let Some(done) = done else { return };
        let c = &self.tier.counters;
        let ns = at.saturating_duration_since(self.start).as_nanos() as u64;
        let wait = core_wait_ns.min(ns);
        if self.write {
            c.writes.fetch_add(1, Ordering::Relaxed);
            c.bytes_written.fetch_add(done, Ordering::Relaxed);
            c.write_ns.fetch_add(ns - wait, Ordering::Relaxed);
            c.write_core_wait_ns.fetch_add(wait, Ordering::Relaxed);
        } else {
            c.reads.fetch_add(1, Ordering::Relaxed);
            c.bytes_read.fetch_add(done, Ordering::Relaxed);
            c.read_ns.fetch_add(ns - wait, Ordering::Relaxed);
            c.read_core_wait_ns.fetch_add(wait, Ordering::Relaxed);
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let c = &self.tier.counters;
        let t = crate::tier::epoch_ns_of(self.end.unwrap_or_else(std::time::Instant::now));
        if self.write {
            c.write_busy.end_at(t);
        } else {
            c.read_busy.end_at(t);
        }
        c.io_busy.end_at(t);
        c.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
