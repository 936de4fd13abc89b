//! What programs moved at the mount, counted per tier whichever path served them: the
//! FUSE reads and writes the daemon answered (from the tier or from staging memory), what
//! programs under `tierfs run` reported of the direct path, and kernel passthrough.
//!
//! The tier counters ([`super::TierCounters`]) say what reached a tier folder, which is
//! not what a program did: a write held in staging memory reaches the tier seconds later
//! or never (a file deleted first), a read served from memory never does, and passthrough
//! never passes the daemon at all. A user asks "where do my bytes go, and how fast": these
//! counters answer it at the mount, per tier the bytes belong to (a striped request is
//! split by the file's stripes).
//!
//! Passthrough is the one path the daemon cannot count: the kernel reads and writes the
//! tier file itself and tells the daemon nothing (no request reaches it, and the kernel
//! keeps no per-file byte counts it could read). What does count those bytes is the tier's
//! block device. So [`sample_passthrough`] looks at every tier's device about once a
//! second (the daemon's estimator tick) and at every stats snapshot, and takes the bytes
//! the device moved since its last look, less what the daemon and the direct path moved on
//! the tiers of that device meanwhile, as passthrough's, for a tier that had passthrough
//! files open in that time. It counts nothing for a tier without a block device (NFS,
//! Lustre) or with no passthrough file open; the device's other users in that second are
//! counted too. When tiers share one device and more than one of them had passthrough
//! files open, the bytes cannot be split between them: they go to the first such tier's
//! `unsplit` counters and the views say so.

use super::Tier;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// One tier's share of what programs moved at the mount.
#[derive(Debug, Default)]
pub struct AppCounters {
    /// FUSE READ and WRITE requests the daemon answered for files with a piece on this
    /// tier (a request spanning tiers counts once on each, with its share of the bytes),
    /// and the time the daemon took for them, summed.
    pub fuse_read_bytes: AtomicU64,
    pub fuse_written_bytes: AtomicU64,
    pub fuse_reads: AtomicU64,
    pub fuse_writes: AtomicU64,
    pub fuse_read_ns: AtomicU64,
    pub fuse_write_ns: AtomicU64,
    /// Of the FUSE bytes, those staging memory served: read hits, and writes it took in.
    pub memory_read_bytes: AtomicU64,
    pub memory_written_bytes: AtomicU64,
    /// The direct path as programs reported it: bytes, requests and their summed latency.
    pub direct_read_bytes: AtomicU64,
    pub direct_written_bytes: AtomicU64,
    pub direct_reads: AtomicU64,
    pub direct_writes: AtomicU64,
    pub direct_read_ns: AtomicU64,
    pub direct_write_ns: AtomicU64,
    /// Kernel passthrough, from the block device ([`sample_passthrough`]).
    pub passthrough_read_bytes: AtomicU64,
    pub passthrough_written_bytes: AtomicU64,
    /// Passthrough bytes of this tier and others on the same device, which could not be
    /// split between them.
    pub unsplit_read_bytes: AtomicU64,
    pub unsplit_written_bytes: AtomicU64,
    /// What [`sample_passthrough`] saw last time.
    seen: parking_lot::Mutex<Seen>,
}

/// A tier's figures at [`sample_passthrough`]'s last look.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    device: (u64, u64),
    tier: (u64, u64),
    pt_open: u64,
    pt_opens: u64,
}

impl AppCounters {
    /// Counts a FUSE request the daemon answered: `bytes` of it on this tier, `memory` of
    /// those from staging memory, `ns` the request's time.
    pub fn fuse(&self, write: bool, bytes: u64, memory: u64, ns: u64) {
        let (b, n, t, m) = if write {
            (
                &self.fuse_written_bytes,
                &self.fuse_writes,
                &self.fuse_write_ns,
                &self.memory_written_bytes,
            )
        } else {
            (
                &self.fuse_read_bytes,
                &self.fuse_reads,
                &self.fuse_read_ns,
                &self.memory_read_bytes,
            )
        };
        b.fetch_add(bytes, Ordering::Relaxed);
        n.fetch_add(1, Ordering::Relaxed);
        t.fetch_add(ns, Ordering::Relaxed);
        m.fetch_add(memory, Ordering::Relaxed);
    }

    /// Counts a direct-path report's bytes, requests and latencies for this tier.
    pub fn direct(&self, io: &tierfs_wire::TierIo) {
        let add = |a: &AtomicU64, v: u64| a.fetch_add(v, Ordering::Relaxed);
        add(&self.direct_read_bytes, io.read_bytes);
        add(&self.direct_written_bytes, io.write_bytes);
        add(&self.direct_reads, io.reads);
        add(&self.direct_writes, io.writes);
        add(&self.direct_read_ns, io.read_lat_ns);
        add(&self.direct_write_ns, io.write_lat_ns);
    }
}

thread_local! {
    /// Bytes of this thread's current request that staging memory served.
    static FROM_MEMORY: Cell<u64> = const { Cell::new(0) };
}

/// Notes that staging memory served `n` bytes of this thread's current request (a read
/// hit, or a write it took in).
pub fn served_from_memory(n: u64) {
    FROM_MEMORY.with(|c| c.set(c.get() + n));
}

/// The bytes [`served_from_memory`] noted on this thread since the last call, and starts
/// counting again.
pub fn take_from_memory() -> u64 {
    FROM_MEMORY.with(|c| c.replace(0))
}

/// Looks at the tiers' block devices and counts what passthrough moved since the last look
/// (see the module's documentation). Several callers at once are serialized.
pub fn sample_passthrough(tiers: &[Tier]) {
    static ONE_AT_A_TIME: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock();
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut looks = Vec::new();
    let mut of = Vec::new();
    for t in tiers.iter().filter(|t| !t.missing) {
        let (Some(dev), Some(id)) = (t.device_bytes(), t.device_id()) else {
            continue;
        };
        let c = &t.counters;
        let now = Seen {
            device: dev,
            tier: (load(&c.bytes_read), load(&c.bytes_written)),
            pt_open: load(&c.pt_open),
            pt_opens: load(&c.pt_opens_total),
        };
        let before = std::mem::replace(&mut *c.app.seen.lock(), now);
        let delta =
            |a: (u64, u64), b: (u64, u64)| (a.0.saturating_sub(b.0), a.1.saturating_sub(b.1));
        looks.push(Look {
            device: id.to_path_buf(),
            device_delta: delta(now.device, before.device),
            tier_delta: delta(now.tier, before.tier),
            active: now.pt_open > 0 || before.pt_open > 0 || now.pt_opens != before.pt_opens,
        });
        of.push(t);
    }
    for (i, to, (r, w)) in attribute(&looks) {
        let a = &of[i].counters.app;
        let (ar, aw) = match to {
            To::Passthrough => (&a.passthrough_read_bytes, &a.passthrough_written_bytes),
            To::Unsplit => (&a.unsplit_read_bytes, &a.unsplit_written_bytes),
        };
        ar.fetch_add(r, Ordering::Relaxed);
        aw.fetch_add(w, Ordering::Relaxed);
    }
}

/// One tier at a look: its device, what the device and the tier's own counters (the
/// daemon's and the direct path's bytes) moved since the last look, and whether it had
/// passthrough files open in that time.
#[derive(Debug, Clone)]
struct Look {
    device: std::path::PathBuf,
    device_delta: (u64, u64),
    tier_delta: (u64, u64),
    active: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Passthrough,
    Unsplit,
}

/// Where each device's bytes beyond what its tiers' counters explain go: to the one tier
/// of the device with passthrough files open, to the first of several (as unsplit), or
/// nowhere when none had any (the device's other users). Returns (look index, where,
/// (read, written)).
fn attribute(looks: &[Look]) -> Vec<(usize, To, (u64, u64))> {
    let mut out = Vec::new();
    for (i, l) in looks.iter().enumerate() {
        if looks[..i].iter().any(|o| o.device == l.device) {
            continue; // counted with the first tier of its device
        }
        let group: Vec<(usize, &Look)> = looks
            .iter()
            .enumerate()
            .filter(|(_, o)| o.device == l.device)
            .collect();
        let active: Vec<usize> = group
            .iter()
            .filter(|(_, o)| o.active)
            .map(|g| g.0)
            .collect();
        let Some(&first) = active.first() else {
            continue;
        };
        let known = group.iter().fold((0u64, 0u64), |s, (_, o)| {
            (s.0 + o.tier_delta.0, s.1 + o.tier_delta.1)
        });
        let rest = (
            l.device_delta.0.saturating_sub(known.0),
            l.device_delta.1.saturating_sub(known.1),
        );
        let to = if active.len() == 1 {
            To::Passthrough
        } else {
            To::Unsplit
        };
        out.push((first, to, rest));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_bytes_are_per_thread_and_taken_once() {
        take_from_memory();
        served_from_memory(4096);
        served_from_memory(100);
        let other = std::thread::spawn(take_from_memory).join().unwrap();
        assert_eq!(other, 0, "another thread's requests are its own");
        assert_eq!(take_from_memory(), 4196);
        assert_eq!(take_from_memory(), 0);
    }

    #[test]
    fn fuse_requests_count_bytes_time_and_memory() {
        let a = AppCounters::default();
        a.fuse(true, 1 << 20, 1 << 20, 2_000_000);
        a.fuse(false, 4096, 0, 50_000);
        a.fuse(false, 4096, 4096, 10_000);
        let g = |x: &AtomicU64| x.load(Ordering::Relaxed);
        assert_eq!(g(&a.fuse_written_bytes), 1 << 20);
        assert_eq!(g(&a.memory_written_bytes), 1 << 20);
        assert_eq!((g(&a.fuse_writes), g(&a.fuse_write_ns)), (1, 2_000_000));
        assert_eq!((g(&a.fuse_reads), g(&a.fuse_read_bytes)), (2, 8192));
        assert_eq!(
            (g(&a.memory_read_bytes), g(&a.fuse_read_ns)),
            (4096, 60_000)
        );
    }

    fn look(dev: &str, device: (u64, u64), tier: (u64, u64), active: bool) -> Look {
        Look {
            device: dev.into(),
            device_delta: device,
            tier_delta: tier,
            active,
        }
    }

    #[test]
    fn device_bytes_go_to_the_tier_with_passthrough_open() {
        // Two tiers on their own devices: the daemon's bytes come off the device's, and
        // a tier with no passthrough open gets nothing (the device's other users).
        let looks = [
            look("/dev/a", (10, 100), (4, 30), true),
            look("/dev/b", (50, 50), (0, 0), false),
        ];
        assert_eq!(attribute(&looks), vec![(0, To::Passthrough, (6, 70))]);
        // More daemon bytes than the device saw (a buffered tier's writes still in the
        // page cache): nothing, not an underflow.
        let looks = [look("/dev/a", (10, 10), (40, 30), true)];
        assert_eq!(attribute(&looks), vec![(0, To::Passthrough, (0, 0))]);
    }

    #[test]
    fn a_shared_device_is_counted_once_and_split_only_when_it_can_be() {
        // One device under both tiers, passthrough on the second only: the device counted
        // once, both tiers' own bytes taken off, the rest the second tier's.
        let looks = [
            look("/dev/a", (100, 200), (10, 20), false),
            look("/dev/a", (100, 200), (5, 0), true),
        ];
        assert_eq!(attribute(&looks), vec![(1, To::Passthrough, (85, 180))]);
        // Both with passthrough: not split, kept on the first as unsplit.
        let looks = [
            look("/dev/a", (100, 200), (0, 0), true),
            look("/dev/b", (7, 7), (0, 0), false),
            look("/dev/a", (100, 200), (0, 0), true),
        ];
        assert_eq!(attribute(&looks), vec![(0, To::Unsplit, (100, 200))]);
    }
}
