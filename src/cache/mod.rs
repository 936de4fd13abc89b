//! The host-memory tier: which files are held in memory, their blocks, the memory budget,
//! and the choice of what to keep.
//!
//! A file is cached whole or not at all: DeepSpeed reads and writes its swap files whole,
//! and whole-file residency lets one rule keep the cache coherent: while a file is cached,
//! every byte of it goes through its blocks here (the filesystem core routes reads and
//! writes of a cached file to [`Entry`], never to the tier behind it, and never opens it in
//! kernel passthrough). Its memory is reserved whole at admission, so the budget is a hard
//! bound; blocks are filled lazily, by the reader's own requests or by prefetch.
//!
//! What to keep is decided by rank: how many reads away the file's next use is, from the
//! directory's learned order ([`order`]); the file with the largest rank goes first. With
//! `policy = "lru"` the rank is the time since last use instead (for comparison). A file
//! whose next use is unknown is only admitted into free memory, so the first pass fills the
//! cache with the head of the cycle and later passes keep it.
//!
//! The budget is the configured size, lowered while the job needs the memory: the pressure
//! watch ([`memory`]) sets it, and the core writes back and evicts down to it.
//!
//! The I/O itself (filling blocks, writing dirty ones back, evicting, which needs the file's
//! lock) belongs to the core, `crate::data::cached`; this module owns the bookkeeping.

pub mod entry;
pub mod memory;
pub mod order;

use crate::config::{CacheConfig, CachePolicy};
use crate::control::OrderHint;
pub use entry::{Counters, Entry, Slot, SpacePromise, Totals, BLOCK, RESERVE_ALIGN};
use order::{DirOrder, OrderView};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// A cached file: its node, by which the core reaches the file's state (never kept alive
/// by the cache: a file forgotten by the core leaves it), and its entry.
#[derive(Debug)]
struct Resident<N> {
    node: Weak<N>,
    entry: Arc<Entry>,
}

#[derive(Debug)]
struct Inner<N> {
    files: HashMap<u64, Resident<N>>,
    used: u64,
}

/// A file that may be evicted to make room: its node (to take its lock) and entry.
pub struct Victim<N> {
    pub node: Arc<N>,
    pub entry: Arc<Entry>,
}

/// What the background writer should do next.
#[derive(Debug, Default)]
struct WbRequest {
    /// Write back dirty files ranked above this (memory is needed for a file ranked
    /// this), `bytes` of them; `None` when nothing is asked.
    above_rank: Option<u64>,
    /// The memory those admissions lacked, summed since the writer last looked: the writer
    /// stops once it has written back this much, so one refused admission does not cost
    /// every dirty file a write.
    bytes: u64,
    /// Write back everything (control `flush`, unmount).
    all: bool,
}

/// The cache of one mount. Files are keyed by inode; `N` is the core's node of a file
/// (`crate::inodes::file::FileNode`), which the cache only hands back, for the core to take
/// the file's lock: the cache's books do not depend on what a node holds.
#[derive(Debug)]
pub struct Cache<N> {
    pub cfg: CacheConfig,
    /// Where `cfg.size` comes from, in words ([`memory::Plan::from`]).
    pub size_from: String,
    /// The memory limit the pressure watch follows (none: no watch).
    pub watch: Option<memory::Limit>,
    /// Bytes the cache may hold now: `cfg.size`, lower while the watch says the job needs
    /// the memory.
    budget: AtomicU64,
    inner: Mutex<Inner<N>>,
    orders: Mutex<HashMap<u64, DirOrder>>,
    pub counters: Counters,
    seq: AtomicU64,
    wb: Mutex<WbRequest>,
    wb_cv: Condvar,
    pub stop: AtomicBool,
    /// (inode, asked for by a `prefetch` command rather than predicted)
    prefetch_tx: crossbeam_channel::Sender<(u64, bool)>,
    pub prefetch_rx: crossbeam_channel::Receiver<(u64, bool)>,
    /// Files queued for prefetch and not yet taken, so a file is queued once.
    queued: Mutex<std::collections::HashSet<u64>>,
}

/// The rank of a spare file: it gets only free memory (or that of files whose next use is
/// unknown) and is the first to go when a ranked file wants the memory. A gradient file on
/// the tier the kernel serves is spare: kept, it saves that tier a write and a read, but
/// at the daemon's CPU, where memory spent on the slower tiers' files saves their slower
/// reads (measured in docs/PERFORMANCE.md: with staging a sixteenth of a step's bytes,
/// gradients ranked first there made the step 7 % slower).
pub const SPARE_RANK: u64 = u64::MAX - 1;

/// Whether a name is one of DeepSpeed's gradient swap files.
pub fn is_gradient(name: &[u8]) -> bool {
    name.windows(b"_gradient_".len())
        .any(|w| w == b"_gradient_")
}

/// Bytes of budget a file of `size` bytes holds.
pub fn reserve_for(size: u64) -> u64 {
    size.div_ceil(RESERVE_ALIGN).max(1) * RESERVE_ALIGN
}

impl<N> Cache<N> {
    /// A cache of a size the config states, without a pressure watch.
    pub fn new(cfg: CacheConfig) -> Cache<N> {
        Cache::planned(cfg, "cache.size in the config".into(), None)
    }

    /// A cache sized by a [`memory::Plan`]: `from` says why, `watch` is the limit to follow.
    pub fn planned(cfg: CacheConfig, from: String, watch: Option<memory::Limit>) -> Cache<N> {
        let (prefetch_tx, prefetch_rx) = crossbeam_channel::unbounded();
        Cache {
            budget: AtomicU64::new(cfg.size),
            size_from: from,
            watch,
            cfg,
            inner: Mutex::new(Inner {
                files: HashMap::new(),
                used: 0,
            }),
            orders: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            seq: AtomicU64::new(1),
            wb: Mutex::new(WbRequest::default()),
            wb_cv: Condvar::new(),
            stop: AtomicBool::new(false),
            prefetch_tx,
            prefetch_rx,
            queued: Mutex::new(Default::default()),
        }
    }

    /// Records a read-open of `ino` in directory `dir` and returns the files to prefetch.
    pub fn access(&self, dir: u64, ino: u64, dup: bool) -> Vec<u64> {
        let mut orders = self.orders.lock();
        let o = orders.entry(dir).or_default();
        o.access(ino, dup);
        if self.cfg.policy == CachePolicy::Learned {
            o.predict(self.cfg.prefetch)
        } else {
            Vec::new()
        }
    }

    /// Notes a use of a cached file (for LRU).
    pub fn touch(&self, e: &Entry) {
        e.last_use
            .store(self.seq.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
    }

    pub fn hint(&self, dir: Option<u64>, hint: OrderHint) {
        let mut orders = self.orders.lock();
        match dir {
            Some(d) => orders.entry(d).or_default().set_hint(hint),
            None => orders.values_mut().for_each(|o| o.set_hint(hint)),
        }
    }

    pub fn mark_step(&self, dir: Option<u64>) {
        let mut orders = self.orders.lock();
        match dir {
            Some(d) => orders.entry(d).or_default().mark_step(),
            None => orders.values_mut().for_each(|o| o.mark_step()),
        }
    }

    /// How far away `ino`'s next use is (larger: keep it less). Unknown: `u64::MAX`.
    ///
    /// A gradient file ranks first: DeepSpeed writes it in the backward pass, reads it once
    /// in the optimizer step and rewrites it in the next backward pass, so keeping it saves
    /// a tier read and a tier write every step (it is never written back while it stays),
    /// where keeping another file saves only its read.
    fn rank_locked(
        &self,
        orders: &HashMap<u64, DirOrder>,
        dir: u64,
        ino: u64,
        gradient: bool,
        e: Option<&Entry>,
    ) -> u64 {
        if e.is_some_and(|e| e.spare) {
            return SPARE_RANK;
        }
        match self.cfg.policy {
            CachePolicy::Learned if gradient => 0,
            CachePolicy::Learned => orders
                .get(&dir)
                .and_then(|o| o.distance(ino))
                .unwrap_or(u64::MAX),
            CachePolicy::Lru => match e {
                Some(e) => self
                    .seq
                    .load(Ordering::Relaxed)
                    .saturating_sub(e.last_use.load(Ordering::Relaxed)),
                None => 0,
            },
        }
    }

    /// The rank of a file not cached yet, named `name`.
    pub fn rank_of(&self, dir: u64, ino: u64, name: &[u8]) -> u64 {
        let orders = self.orders.lock();
        self.rank_locked(&orders, dir, ino, is_gradient(name), None)
    }

    /// Takes `bytes` of the budget if they are free.
    pub fn try_reserve(&self, bytes: u64) -> bool {
        let mut inner = self.inner.lock();
        if inner.used + bytes <= self.budget() {
            inner.used += bytes;
            true
        } else {
            false
        }
    }

    /// Clean files ranked above `rank` (largest rank first) whose memory adds up to `need`,
    /// or `None` if there are not enough of them. Dirty files ranked above `rank` are asked
    /// to be written back, so a later try may succeed.
    pub fn victims(&self, need: u64, rank: u64, exclude: u64) -> Option<Vec<Victim<N>>> {
        let inner = self.inner.lock();
        let orders = self.orders.lock();
        let free = self.budget().saturating_sub(inner.used);
        let mut cands: Vec<(u64, &Resident<N>)> = inner
            .files
            .iter()
            .filter(|(ino, _)| **ino != exclude)
            .map(|(ino, r)| {
                let e = &r.entry;
                (
                    self.rank_locked(&orders, e.dir, *ino, e.gradient, Some(e)),
                    r,
                )
            })
            .filter(|(rk, _)| *rk > rank)
            .collect();
        cands.sort_by_key(|c| std::cmp::Reverse(c.0));
        let mut got = free;
        let mut out = Vec::new();
        let mut dirty_above = false;
        for (_, r) in cands {
            if got >= need {
                break;
            }
            if r.entry.dirty_blocks() > 0 {
                dirty_above = true;
                continue;
            }
            if let Some(node) = r.node.upgrade() {
                got += r.entry.reserved();
                out.push(Victim {
                    node,
                    entry: r.entry.clone(),
                });
            }
        }
        drop(orders);
        drop(inner);
        if got >= need {
            return Some(out);
        }
        if dirty_above {
            self.request_writeback(Some((rank, need - got)), false);
        }
        None
    }

    /// Adds a file of `size` bytes whose `reserve` bytes were taken with
    /// [`Cache::try_reserve`]; `spare`: ranked [`SPARE_RANK`] whatever its order says.
    #[allow(clippy::too_many_arguments)]
    pub fn insert(
        &self,
        ino: u64,
        dir: u64,
        name: &[u8],
        node: &Arc<N>,
        size: u64,
        reserve: u64,
        spare: bool,
    ) -> Arc<Entry> {
        let blocks = reserve.div_ceil(BLOCK);
        let entry = Arc::new(Entry {
            ino,
            dir,
            gradient: is_gradient(name),
            spare,
            slots: RwLock::new(
                (0..blocks)
                    .map(|_| Arc::new(Mutex::new(Slot::default())))
                    .collect(),
            ),
            reserved: AtomicU64::new(reserve),
            dirty_blocks: AtomicU64::new(0),
            dirty_since: Mutex::new(None),
            writeback: Mutex::new(()),
            last_use: AtomicU64::new(self.seq.fetch_add(1, Ordering::Relaxed)),
            last_error: Mutex::new(None),
            space: Mutex::new(SpacePromise {
                upto: size,
                per_tier: Vec::new(),
            }),
        });
        self.inner.lock().files.insert(
            ino,
            Resident {
                node: Arc::downgrade(node),
                entry: entry.clone(),
            },
        );
        self.counters.admissions.fetch_add(1, Ordering::Relaxed);
        entry
    }

    /// Grows a cached file's reservation to `reserve` bytes (the budget already taken).
    pub fn grow(&self, e: &Entry, reserve: u64) {
        let mut slots = e.slots.write();
        while (slots.len() as u64) < reserve.div_ceil(BLOCK) {
            slots.push(Arc::new(Mutex::new(Slot::default())));
        }
        e.reserved.store(reserve, Ordering::Relaxed);
    }

    /// Forgets a file and frees its memory. `evicted`: to make room (else dropped because
    /// the file changed shape or went away). Dirty bytes still in it are counted as
    /// discarded: only callers for whom that is right (the file was deleted) pass dirty
    /// entries.
    pub fn remove(&self, ino: u64, e: &Arc<Entry>, evicted: bool) {
        let mut inner = self.inner.lock();
        let same = inner
            .files
            .get(&ino)
            .is_some_and(|r| Arc::ptr_eq(&r.entry, e));
        if !same {
            return;
        }
        inner.files.remove(&ino);
        inner.used = inner.used.saturating_sub(e.reserved());
        drop(inner);
        let c = &self.counters;
        for s in e.all_slots() {
            let mut s = s.lock();
            if s.prefetched {
                c.prefetch_wasted_bytes
                    .fetch_add(s.len() as u64, Ordering::Relaxed);
            }
            if s.dirty {
                c.discarded_dirty_bytes
                    .fetch_add(s.len() as u64, Ordering::Relaxed);
                e.set_clean(&mut s, c);
            }
            s.buf = None;
            s.valid = false;
        }
        if evicted {
            c.evictions.fetch_add(1, Ordering::Relaxed);
            c.evicted_bytes.fetch_add(e.reserved(), Ordering::Relaxed);
        }
    }

    /// Every cached file with its node, for the writer and for views.
    pub fn residents(&self) -> Vec<(Arc<N>, Arc<Entry>)> {
        self.inner
            .lock()
            .files
            .values()
            .filter_map(|r| Some((r.node.upgrade()?, r.entry.clone())))
            .collect()
    }

    /// Budget held by the ranked (not spare) files that `counts` picks: the memory the
    /// cache has really admitted for them, read under its lock without collecting them.
    pub fn admitted_for(&self, counts: impl Fn(&N) -> bool) -> u64 {
        self.inner
            .lock()
            .files
            .values()
            .filter(|r| !r.entry.spare)
            .filter(|r| r.node.upgrade().is_some_and(|n| counts(&n)))
            .map(|r| r.entry.reserved())
            .sum()
    }

    pub fn rank_of_entry(&self, e: &Entry) -> u64 {
        let orders = self.orders.lock();
        self.rank_locked(&orders, e.dir, e.ino, e.gradient, Some(e))
    }

    pub fn used(&self) -> u64 {
        self.inner.lock().used
    }

    /// Bytes the cache may hold now (see [`Cache::set_budget`]).
    pub fn budget(&self) -> u64 {
        self.budget.load(Ordering::Relaxed)
    }

    /// Sets the budget, at most the configured size. A lower one takes no new files until
    /// the core has evicted down to it (`TierFs::shrink_cache`).
    pub fn set_budget(&self, bytes: u64) {
        let old = self
            .budget
            .swap(bytes.min(self.cfg.size), Ordering::Relaxed);
        if bytes < old {
            self.counters
                .pressure_shrinks
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Cached files, the ones to give up first (largest rank) first.
    pub fn residents_by_rank(&self) -> Vec<(Arc<N>, Arc<Entry>)> {
        let mut v: Vec<(u64, Arc<N>, Arc<Entry>)> = self
            .residents()
            .into_iter()
            .map(|(n, e)| (self.rank_of_entry(&e), n, e))
            .collect();
        v.sort_by_key(|w| std::cmp::Reverse(w.0));
        v.into_iter().map(|(_, n, e)| (n, e)).collect()
    }

    /// Queues a prefetch of `ino` (once while it waits); `asked`: by a control command.
    pub fn queue_prefetch(&self, ino: u64, asked: bool) {
        if self.queued.lock().insert(ino) {
            let _ = self.prefetch_tx.send((ino, asked));
        }
    }

    /// The prefetcher took `ino` off the queue.
    pub fn dequeued(&self, ino: u64) {
        self.queued.lock().remove(&ino);
    }

    /// Asks the writer for a write-back (see [`WbRequest`]).
    /// Asks the writer for `pressed`: (rank, bytes), write back `bytes` of dirty files
    /// ranked above `rank`; and with `all`, every dirty file.
    pub fn request_writeback(&self, pressed: Option<(u64, u64)>, all: bool) {
        let mut w = self.wb.lock();
        if let Some((r, bytes)) = pressed {
            w.above_rank = Some(w.above_rank.map_or(r, |o| o.min(r)));
            w.bytes = w.bytes.saturating_add(bytes);
        }
        w.all |= all;
        self.wb_cv.notify_all();
    }

    /// The writer waits here for a request or `timeout`; returns the pressed request
    /// ((rank, bytes), as [`Cache::request_writeback`]) and `all`.
    pub fn wait_writeback(&self, timeout: std::time::Duration) -> (Option<(u64, u64)>, bool) {
        let mut w = self.wb.lock();
        if w.above_rank.is_none() && !w.all && !self.stop.load(Ordering::Relaxed) {
            self.wb_cv.wait_for(&mut w, timeout);
        }
        let pressed = w
            .above_rank
            .take()
            .map(|r| (r, std::mem::take(&mut w.bytes)));
        let r = (pressed, w.all);
        w.all = false;
        r
    }

    pub fn wake_all(&self) {
        self.wb_cv.notify_all();
    }

    /// The learned order of every directory seen.
    pub fn orders(&self) -> Vec<(u64, OrderView)> {
        let mut v: Vec<(u64, OrderView)> = self
            .orders
            .lock()
            .iter()
            .map(|(d, o)| (*d, o.view()))
            .collect();
        v.sort_by_key(|(d, _)| *d);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inodes::file::FileNode;

    #[test]
    fn gradient_names() {
        assert!(is_gradient(b"0_999_gradient_0_1000.tensor.swp"));
        assert!(!is_gradient(b"exp_avg-0_999.tensor.swp"));
        assert_eq!(reserve_for(0), RESERVE_ALIGN);
        assert_eq!(reserve_for(BLOCK + 1), BLOCK + RESERVE_ALIGN);
    }

    #[test]
    fn a_spare_file_gives_way_to_any_ranked_one_and_takes_only_free_memory() {
        let c = Cache::<FileNode>::new(CacheConfig {
            size: 3 * BLOCK,
            policy: CachePolicy::Learned,
            prefetch: 0,
            writeback_delay: 0.0,
            max_file: BLOCK,
        });
        let node = Arc::new(FileNode::new(
            crate::layout::FileLayout::Whole { tier: 0 },
            BLOCK,
            1,
        ));
        let name = |i: u64| format!("{i}_gradient_0_9.tensor.swp");
        let mut held = Vec::new();
        for (ino, spare) in [(1, true), (2, false), (3, false)] {
            assert!(c.try_reserve(BLOCK));
            held.push(c.insert(
                ino,
                7,
                name(ino).as_bytes(),
                &node,
                node.size(),
                BLOCK,
                spare,
            ));
        }
        assert_eq!(c.rank_of_entry(&held[0]), SPARE_RANK);
        assert_eq!(c.rank_of_entry(&held[1]), 0, "a gradient file ranks first");
        // Memory is full: a file of any known rank takes the spare one's place...
        let v = c
            .victims(BLOCK, u64::MAX / 2, 0)
            .expect("the spare gives way");
        assert_eq!(v.iter().map(|v| v.entry.ino).collect::<Vec<_>>(), vec![1]);
        // ...and another spare file takes no ranked file's.
        assert!(c.victims(BLOCK, SPARE_RANK, 1).is_none());
    }
}
