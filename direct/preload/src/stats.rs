//! What a direct descriptor moves, per piece: bytes, requests, and busy time (wall time with
//! at least one of its requests in flight), sent to the daemon when the descriptor is
//! closed ([`tierfs_wire::Report`]) so its counters and estimates see the direct path.

use std::sync::atomic::{AtomicU64, Ordering};

/// Nanoseconds on the monotonic clock.
pub fn now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) into a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// One direction (reads or writes) of one piece.
#[derive(Debug, Default)]
pub struct Dir {
    bytes: AtomicU64,
    requests: AtomicU64,
    in_flight: AtomicU64,
    since: AtomicU64,
    busy: AtomicU64,
}

impl Dir {
    /// A request starts at `t`.
    pub fn begin(&self, t: u64) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.since.store(t, Ordering::Release);
        }
    }

    /// A request that began ends at `t`, having moved `bytes` (0 for a failure).
    pub fn end(&self, bytes: u64, t: u64) {
        if bytes > 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
            self.requests.fetch_add(1, Ordering::Relaxed);
        }
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let since = self.since.load(Ordering::Acquire);
            self.busy
                .fetch_add(t.saturating_sub(since), Ordering::Relaxed);
        }
    }
}

/// One piece of a direct file.
#[derive(Debug, Default)]
pub struct Piece {
    pub tier: u8,
    pub read: Dir,
    pub write: Dir,
}

impl Piece {
    pub fn new(tier: u8) -> Piece {
        Piece {
            tier,
            ..Piece::default()
        }
    }

    pub fn dir(&self, write: bool) -> &Dir {
        if write {
            &self.write
        } else {
            &self.read
        }
    }

    /// What it moved, for the report (requests still in flight are not counted yet).
    pub fn io(&self) -> tierfs_wire::TierIo {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        tierfs_wire::TierIo {
            tier: self.tier,
            read_bytes: g(&self.read.bytes),
            write_bytes: g(&self.write.bytes),
            reads: g(&self.read.requests),
            writes: g(&self.write.requests),
            read_busy_ns: g(&self.read.busy),
            write_busy_ns: g(&self.write.busy),
        }
    }

    /// Whether it moved anything.
    pub fn moved(&self) -> bool {
        let io = self.io();
        io.reads + io.writes > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_is_the_union_of_overlapping_requests() {
        let p = Piece::new(1);
        let d = p.dir(true);
        d.begin(100);
        d.begin(150);
        d.end(4096, 300);
        d.end(4096, 400);
        d.begin(1000);
        d.end(0, 1100); // failed: busy, but no bytes nor request
        let io = p.io();
        assert_eq!(io.write_busy_ns, 300 + 100);
        assert_eq!((io.write_bytes, io.writes, io.reads), (8192, 2, 0));
        assert!(p.moved());
        assert!(!Piece::new(0).moved());
    }
}
