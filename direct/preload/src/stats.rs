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
    lat: AtomicU64,
    in_flight: AtomicU64,
    since: AtomicU64,
    /// Closed busy periods (start, end), at most [`tierfs_wire::MAX_PERIODS`].
    periods: std::sync::Mutex<Vec<(u64, u64)>>,
}

/// Adds the period `p` to `v`, merging the two closest neighbours when `v` is full (the
/// gap between them then counts as busy: an over-count bounded by the smallest gap).
fn push_period(v: &mut Vec<(u64, u64)>, p: (u64, u64)) {
    v.push(p);
    v.sort_unstable();
    if v.len() <= tierfs_wire::MAX_PERIODS {
        return;
    }
    let i = (0..v.len() - 1)
        .min_by_key(|i| v[i + 1].0.saturating_sub(v[*i].1))
        .expect("two or more");
    v[i].1 = v[i].1.max(v[i + 1].1);
    v.remove(i + 1);
}

impl Dir {
    /// A request starts at `t`.
    pub fn begin(&self, t: u64) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.since.store(t, Ordering::Release);
        }
    }

    /// A request that began at `start` ends at `t`, having moved `bytes` (0 for a failure).
    pub fn end(&self, bytes: u64, start: u64, t: u64) {
        if bytes > 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
            self.requests.fetch_add(1, Ordering::Relaxed);
            self.lat
                .fetch_add(t.saturating_sub(start), Ordering::Relaxed);
        }
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let since = self.since.load(Ordering::Acquire);
            let mut v = match self.periods.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            push_period(&mut v, (since, t.max(since)));
        }
    }

    fn periods(&self) -> Vec<(u64, u64)> {
        match self.periods.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
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
            read_lat_ns: g(&self.read.lat),
            write_lat_ns: g(&self.write.lat),
            read_busy: self.read.periods(),
            write_busy: self.write.periods(),
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
        d.end(4096, 100, 300);
        d.end(4096, 150, 400);
        d.begin(1000);
        d.end(0, 1000, 1100); // failed: busy, but no bytes nor request
        let io = p.io();
        assert_eq!(io.write_busy, vec![(100, 400), (1000, 1100)]);
        assert_eq!(io.write_lat_ns, 200 + 250);
        assert_eq!((io.write_bytes, io.writes, io.reads), (8192, 2, 0));
        assert!(p.moved());
        assert!(!Piece::new(0).moved());
    }

    #[test]
    fn periods_beyond_the_limit_merge_the_closest() {
        let mut v = Vec::new();
        for i in 0..tierfs_wire::MAX_PERIODS as u64 + 1 {
            // Gaps of 100, but 10 between the 5th and 6th.
            let start = if i > 5 { i * 200 - 90 } else { i * 200 };
            push_period(&mut v, (start, start + 100));
        }
        assert_eq!(v.len(), tierfs_wire::MAX_PERIODS);
        assert!(v.contains(&(1000, 1210)), "{v:?}");
    }
}
