//! One cached file's blocks and their state (valid, dirty, prefetched), and the tier space
//! promised to its bytes that are only in memory. Kept apart from the cache's table so that
//! an open file's state can hold its entry without depending on the table.

use crate::tierio::AlignedBuf;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Cache block: the unit of filling, dirtiness and write-back.
pub const BLOCK: u64 = 1 << 20;

/// Granularity of a file's memory reservation (the last block is only as long as needed).
pub const RESERVE_ALIGN: u64 = 4096;

/// One block of a cached file.
#[derive(Default)]
pub struct Slot {
    /// Allocated when first filled or written: [`Entry::cap`] bytes, zero past the file's end.
    pub buf: Option<AlignedBuf>,
    /// Holds the file's current bytes (else they are on the tier).
    pub valid: bool,
    /// Newer than the tier.
    pub dirty: bool,
    /// Filled by prefetch and not read since.
    pub prefetched: bool,
}

impl Slot {
    /// Bytes allocated (0 before the first fill or write).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len())
    }

    /// Makes the buffer hold `cap` bytes (a grown last block keeps what it had).
    pub fn ensure(&mut self, cap: usize, counters: &Counters) {
        let old = self.len();
        if self.buf.is_some() && old >= cap {
            return;
        }
        let mut buf = AlignedBuf::zeroed(cap);
        if let Some(b) = &self.buf {
            buf[..old].copy_from_slice(b);
        }
        self.buf = Some(buf);
        if self.dirty {
            counters
                .dirty_bytes
                .fetch_add((cap - old) as u64, Ordering::Relaxed);
        }
    }
}

impl Slot {
    /// Takes `buf`, a whole block's new bytes, as this slot's memory, and leaves in `buf`
    /// the slot's old buffer when it has the same capacity (else a new zeroed one of
    /// `buf`'s length): a whole-block write of a FUSE transport's page-aligned request
    /// buffer then costs no copy, and the transport reads its next request into the old
    /// block's memory. The caller marks the slot dirty.
    pub fn adopt(&mut self, buf: &mut AlignedBuf, counters: &Counters) {
        let old = self.len();
        let spare = match self.buf.take() {
            Some(mut b) if b.capacity() == buf.capacity() => {
                b.resize(buf.len());
                b
            }
            _ => AlignedBuf::zeroed(buf.len()),
        };
        self.buf = Some(std::mem::replace(buf, spare));
        self.valid = true;
        if self.dirty && self.len() > old {
            counters
                .dirty_bytes
                .fetch_add((self.len() - old) as u64, Ordering::Relaxed);
        }
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("allocated", &self.buf.is_some())
            .field("valid", &self.valid)
            .field("dirty", &self.dirty)
            .field("prefetched", &self.prefetched)
            .finish()
    }
}

/// Tier space promised to a cached file's bytes that are only in memory (the core's
/// `reserve_space`): how far the promise goes, and how much of each tier it holds.
#[derive(Debug, Default)]
pub struct SpacePromise {
    /// The promise covers the file's growth up to this size (at admission, and after each
    /// write-back, the size its pieces on the tiers cover).
    pub upto: u64,
    /// Bytes promised, per tier index.
    pub per_tier: Vec<u64>,
}

/// A cached file.
#[derive(Debug)]
pub struct Entry {
    pub ino: u64,
    /// Directory whose order ranks it.
    pub dir: u64,
    /// A DeepSpeed gradient file: rewritten or deleted before it is read again, so it is
    /// written back only when memory is needed (or on fsync and unmount).
    pub gradient: bool,
    /// Held only in memory nothing else wants ([`crate::cache::SPARE_RANK`]): a gradient
    /// file on the tier the kernel serves, which would otherwise go there in passthrough.
    pub spare: bool,
    pub(super) slots: RwLock<Vec<Arc<Mutex<Slot>>>>,
    /// Bytes of the budget held (whole blocks).
    pub(super) reserved: AtomicU64,
    pub(super) dirty_blocks: AtomicU64,
    pub(super) dirty_since: Mutex<Option<Instant>>,
    /// Serializes write-backs of this file, so an older copy never lands after a newer one.
    pub writeback: Mutex<()>,
    pub(super) last_use: AtomicU64,
    pub last_error: Mutex<Option<String>>,
    /// Tier space held for its bytes not on the tiers yet.
    pub space: Mutex<SpacePromise>,
}

impl Entry {
    /// The slot of block `b`, if the file has one there.
    pub fn slot(&self, b: u64) -> Option<Arc<Mutex<Slot>>> {
        self.slots.read().get(b as usize).cloned()
    }

    pub fn blocks(&self) -> u64 {
        self.slots.read().len() as u64
    }

    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// When it was last opened, in the cache's own sequence (larger is later).
    pub fn last_use(&self) -> u64 {
        self.last_use.load(Ordering::Relaxed)
    }

    /// Bytes block `b` may hold: a whole block, less for the last one.
    pub fn cap(&self, b: u64) -> usize {
        self.reserved().saturating_sub(b * BLOCK).min(BLOCK) as usize
    }

    pub fn dirty_blocks(&self) -> u64 {
        self.dirty_blocks.load(Ordering::Acquire)
    }

    /// Marks a slot dirty (its lock held by the caller, its buffer allocated).
    pub fn set_dirty(&self, s: &mut Slot, counters: &Counters) {
        if !s.dirty {
            s.dirty = true;
            if self.dirty_blocks.fetch_add(1, Ordering::AcqRel) == 0 {
                *self.dirty_since.lock() = Some(Instant::now());
            }
            counters
                .dirty_bytes
                .fetch_add(s.len() as u64, Ordering::Relaxed);
        }
    }

    /// Marks a slot clean after its bytes reached the tier (its lock held by the caller).
    pub fn set_clean(&self, s: &mut Slot, counters: &Counters) {
        if s.dirty {
            s.dirty = false;
            if self.dirty_blocks.fetch_sub(1, Ordering::AcqRel) == 1 {
                *self.dirty_since.lock() = None;
            }
            counters
                .dirty_bytes
                .fetch_sub(s.len() as u64, Ordering::Relaxed);
        }
    }

    /// Seconds since the oldest unwritten change.
    pub fn dirty_age(&self) -> Option<f64> {
        self.dirty_since.lock().map(|t| t.elapsed().as_secs_f64())
    }

    /// Every slot, for write-back and for the per-file view.
    pub fn all_slots(&self) -> Vec<Arc<Mutex<Slot>>> {
        self.slots.read().clone()
    }
}

/// Running totals, in bytes unless named otherwise.
#[derive(Debug, Default)]
pub struct Counters {
    pub hit_bytes: AtomicU64,
    pub miss_bytes: AtomicU64,
    pub absorbed_bytes: AtomicU64,
    /// Bytes taken into or sent out of cached blocks with no copy by the daemon: whole
    /// blocks written, and reads within one block, over /dev/fuse.
    pub zero_copy_bytes: AtomicU64,
    pub dirty_bytes: AtomicU64,
    pub writeback_bytes: AtomicU64,
    pub writeback_errors: AtomicU64,
    pub prefetch_files: AtomicU64,
    pub prefetch_bytes: AtomicU64,
    pub prefetch_used_bytes: AtomicU64,
    pub prefetch_wasted_bytes: AtomicU64,
    pub admissions: AtomicU64,
    pub refusals: AtomicU64,
    pub evictions: AtomicU64,
    pub evicted_bytes: AtomicU64,
    /// Dirty bytes dropped because their file was deleted first: writes that never had
    /// to reach a tier.
    pub discarded_dirty_bytes: AtomicU64,
    /// Times the pressure watch lowered the budget.
    pub pressure_shrinks: AtomicU64,
    /// Bytes of cached files evicted to get under a lowered budget.
    pub pressure_evicted_bytes: AtomicU64,
}

/// One reading of [`Counters`] as plain numbers, the one place they are loaded: the
/// `.tierfs/cache` view and `stats.json` are both built from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub hit_bytes: u64,
    pub miss_bytes: u64,
    pub absorbed_bytes: u64,
    pub zero_copy_bytes: u64,
    pub dirty_bytes: u64,
    pub writeback_bytes: u64,
    pub writeback_errors: u64,
    pub prefetch_files: u64,
    pub prefetch_bytes: u64,
    pub prefetch_used_bytes: u64,
    pub prefetch_wasted_bytes: u64,
    pub admissions: u64,
    pub refusals: u64,
    pub evictions: u64,
    pub evicted_bytes: u64,
    pub discarded_dirty_bytes: u64,
    pub pressure_shrinks: u64,
    pub pressure_evicted_bytes: u64,
}

impl Totals {
    /// Of the bytes read from cached files, the share served from memory (0 before any).
    pub fn hit_ratio(&self) -> f64 {
        let all = self.hit_bytes + self.miss_bytes;
        if all > 0 {
            self.hit_bytes as f64 / all as f64
        } else {
            0.0
        }
    }
}

impl Counters {
    /// The counters now (each loaded on its own: the totals are not one atomic cut).
    pub fn totals(&self) -> Totals {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Totals {
            hit_bytes: get(&self.hit_bytes),
            miss_bytes: get(&self.miss_bytes),
            absorbed_bytes: get(&self.absorbed_bytes),
            zero_copy_bytes: get(&self.zero_copy_bytes),
            dirty_bytes: get(&self.dirty_bytes),
            writeback_bytes: get(&self.writeback_bytes),
            writeback_errors: get(&self.writeback_errors),
            prefetch_files: get(&self.prefetch_files),
            prefetch_bytes: get(&self.prefetch_bytes),
            prefetch_used_bytes: get(&self.prefetch_used_bytes),
            prefetch_wasted_bytes: get(&self.prefetch_wasted_bytes),
            admissions: get(&self.admissions),
            refusals: get(&self.refusals),
            evictions: get(&self.evictions),
            evicted_bytes: get(&self.evicted_bytes),
            discarded_dirty_bytes: get(&self.discarded_dirty_bytes),
            pressure_shrinks: get(&self.pressure_shrinks),
            pressure_evicted_bytes: get(&self.pressure_evicted_bytes),
        }
    }
}
