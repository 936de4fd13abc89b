//! Per-tier admission: a bounded number of requests in flight on each tier, across all
//! ranks and processes of the node, granted in priority order with a bound on waiting.
//!
//! Every backing request takes a [`Slot`] from its tier's [`TierQueue`] first (through
//! [`super::Io::submit`], the only caller in the daemon); the queues of a mount's tiers are
//! a [`Queues`], built from each tier's bound. Classes are served in order —
//! demand reads, demand writes, prefetch, write-back, migration copies, recovery probes —
//! so background work does not delay what a caller waits for. The bound keeps a slow tier
//! from collecting more requests than it can serve (each would hold a FUSE thread), and
//! with `exclusive` a tier serves one file at a time, the MLP-Offload paper's node-local
//! concurrency control, as an option to measure.
//!
//! **Starvation bound.** Strict priority alone lets steady demand starve a write-back or a
//! migration forever (and with it the memory the cache holds dirty, or a file's move off a
//! full tier). So while requests of a class wait, every grant to a more urgent class counts
//! against it; after [`STARVE_LIMIT`] such grants the class is *due* and the next slot goes
//! to it, whatever waits above it (the most urgent due class first). A waiting class is
//! therefore served at least once every `STARVE_LIMIT + 1` grants, plus one grant for each
//! more urgent class due at the same time: background work gets at least about 1/17 of a
//! saturated tier, and all of an idle one.

use crate::tier::Tier;
use parking_lot::{Condvar, Mutex};

/// Priority classes, most urgent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    DemandRead = 0,
    DemandWrite = 1,
    Prefetch = 2,
    WriteBack = 3,
    /// Copies of a file's bytes to a new layout (a re-layout, a move off a full tier).
    Migration = 4,
    /// A recovery probe's small write and read-back on an idle tier.
    Probe = 5,
}

const CLASSES: usize = 6;

/// Grants to more urgent classes a waiting class lets pass before it is served.
pub const STARVE_LIMIT: u32 = 16;

#[derive(Debug, Default)]
struct State {
    in_flight: usize,
    waiting: [usize; CLASSES],
    /// With `exclusive`: the file that holds the tier, and its requests in flight.
    owner: Option<u64>,
    granted: [u64; CLASSES],
    waited: u64,
    /// Per class: grants to more urgent classes since it was last served, counted while
    /// it has requests waiting.
    passed: [u32; CLASSES],
}

impl State {
    /// The class owed the next slot: the most urgent one waiting that has let
    /// [`STARVE_LIMIT`] grants pass.
    fn due(&self) -> Option<usize> {
        (0..CLASSES).find(|c| self.waiting[*c] > 0 && self.passed[*c] >= STARVE_LIMIT)
    }

    fn grant(&mut self, class: Class) {
        let c = class as usize;
        self.in_flight += 1;
        self.granted[c] += 1;
        self.passed[c] = 0;
        for lower in c + 1..CLASSES {
            if self.waiting[lower] > 0 {
                self.passed[lower] += 1;
            }
        }
    }
}

/// One tier's admission queue.
#[derive(Debug)]
pub struct TierQueue {
    limit: usize,
    exclusive: bool,
    state: Mutex<State>,
    cv: Condvar,
}

/// Counters of a queue, for the stats.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct QueueStats {
    pub limit: usize,
    pub in_flight: usize,
    pub waiting: usize,
    /// Requests granted per class since mount.
    pub granted: [u64; CLASSES],
    /// Requests that had to wait for a slot.
    pub waited: u64,
}

/// The right to have one request in flight on a tier; released on drop.
#[must_use]
pub struct Slot<'a> {
    q: &'a TierQueue,
}

impl TierQueue {
    /// `limit` requests in flight at most (at least 1); `exclusive`: one file at a time.
    pub fn new(limit: usize, exclusive: bool) -> TierQueue {
        TierQueue {
            limit: limit.max(1),
            exclusive,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        }
    }

    fn may_go(&self, s: &State, class: Class, file: u64) -> bool {
        let turn = match s.due() {
            Some(d) => d == class as usize,
            None => s.waiting[..class as usize].iter().all(|w| *w == 0),
        };
        s.in_flight < self.limit && turn && (!self.exclusive || s.owner.is_none_or(|o| o == file))
    }

    /// Waits for a slot for a request of `class` on behalf of `file` (an inode number).
    pub fn acquire(&self, class: Class, file: u64) -> Slot<'_> {
        let mut s = self.state.lock();
        if !self.may_go(&s, class, file) {
            s.waited += 1;
            s.waiting[class as usize] += 1;
            while !self.may_go(&s, class, file) {
                self.cv.wait(&mut s);
            }
            s.waiting[class as usize] -= 1;
        }
        s.grant(class);
        if self.exclusive {
            s.owner = Some(file);
        }
        Slot { q: self }
    }

    pub fn stats(&self) -> QueueStats {
        let s = self.state.lock();
        QueueStats {
            limit: self.limit,
            in_flight: s.in_flight,
            waiting: s.waiting.iter().sum(),
            granted: s.granted,
            waited: s.waited,
        }
    }
}

/// The admission queues of a set of tiers, one per tier index: what [`super::Io`] takes
/// its slots from. The tier I/O owns them (a tier says only its bound), so a slot is taken
/// nowhere but in a submission.
#[derive(Debug)]
pub struct Queues(Vec<TierQueue>);

impl Queues {
    /// One queue for each of `tiers`, bounded as the tier says ([`Tier::max_in_flight`],
    /// [`Tier::exclusive`]).
    pub fn for_tiers(tiers: &[Tier]) -> Queues {
        Queues(
            tiers
                .iter()
                .map(|t| TierQueue::new(t.max_in_flight, t.exclusive))
                .collect(),
        )
    }

    /// Tier `tier`'s queue.
    pub fn get(&self, tier: usize) -> &TierQueue {
        &self.0[tier]
    }

    /// Tier `tier`'s queue counters, for the stats.
    pub fn stats(&self, tier: usize) -> QueueStats {
        self.0[tier].stats()
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut s = self.q.state.lock();
        s.in_flight -= 1;
        if s.in_flight == 0 {
            s.owner = None;
        }
        let anyone = s.waiting.iter().any(|w| *w > 0);
        drop(s);
        if anyone {
            self.q.cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    //! Every test runs under [`within`]: a scheduling bug (a lost wake-up, a slot never
    //! given back) fails the test after a few seconds instead of hanging the suite.
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Runs `f` on a thread of its own and fails if it has not finished in `secs` (a hung
    /// body is left behind; the test binary exits anyway). A panic in `f` is passed on.
    fn within(secs: u64, f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = std::sync::mpsc::channel();
        let body = std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        match rx.recv_timeout(Duration::from_secs(secs)) {
            Ok(()) => body.join().unwrap(),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                // `f` panicked before it could say it was done.
                if let Err(p) = body.join() {
                    std::panic::resume_unwind(p);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("did not finish in {secs} s: a request waits for a slot forever")
            }
        }
    }

    /// Waits until `cond` holds; panics with `what` after 5 s.
    fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let end = Instant::now() + Duration::from_secs(5);
        while !cond() {
            assert!(Instant::now() < end, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn within_fails_a_hang_instead_of_hanging() {
        let r = std::panic::catch_unwind(|| {
            within(1, || {
                let q = TierQueue::new(1, false);
                let _held = q.acquire(Class::DemandRead, 0);
                // Never granted: the only slot is held by this thread.
                let _never = q.acquire(Class::DemandRead, 1);
            })
        });
        let msg = r.expect_err("a hang must fail");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("did not finish in 1 s"), "{msg}");
    }

    #[test]
    fn never_more_than_limit_in_flight() {
        within(30, || {
            let q = Arc::new(TierQueue::new(3, false));
            let now = Arc::new(AtomicUsize::new(0));
            let peak = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..12)
                .map(|i| {
                    let (q, now, peak) = (q.clone(), now.clone(), peak.clone());
                    std::thread::spawn(move || {
                        for _ in 0..20 {
                            let _s = q.acquire(Class::DemandWrite, i);
                            let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(n, Ordering::SeqCst);
                            std::thread::yield_now();
                            now.fetch_sub(1, Ordering::SeqCst);
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert!(peak.load(Ordering::SeqCst) <= 3);
            assert_eq!(q.stats().granted[Class::DemandWrite as usize], 240);
            assert_eq!(q.stats().in_flight, 0);
        });
    }

    #[test]
    fn higher_class_goes_first() {
        within(30, || {
            let q = Arc::new(TierQueue::new(1, false));
            let order = Arc::new(Mutex::new(Vec::new()));
            let held = q.acquire(Class::DemandRead, 0);
            let spawn = |class: Class| {
                let (q, order) = (q.clone(), order.clone());
                std::thread::spawn(move || {
                    let _s = q.acquire(class, 1);
                    order.lock().push(class);
                })
            };
            let wb = spawn(Class::WriteBack);
            wait_until("the write-back waits", || q.stats().waiting >= 1);
            let rd = spawn(Class::DemandRead);
            wait_until("both wait", || q.stats().waiting >= 2);
            drop(held);
            wb.join().unwrap();
            rd.join().unwrap();
            assert_eq!(*order.lock(), vec![Class::DemandRead, Class::WriteBack]);
        });
    }

    /// Steady demand cannot starve background work: a write-back and a migration waiting
    /// behind more demand reads than [`STARVE_LIMIT`] are served after at most that many
    /// of them (the more urgent of the two first). Without the bound both go last.
    #[test]
    fn waiting_background_work_is_served_within_the_bound() {
        within(30, || {
            let q = Arc::new(TierQueue::new(1, false));
            let order = Arc::new(Mutex::new(Vec::new()));
            let held = q.acquire(Class::DemandRead, 0);
            let spawn = |class: Class| {
                let (q, order) = (q.clone(), order.clone());
                std::thread::spawn(move || {
                    let _s = q.acquire(class, 1);
                    order.lock().push(class);
                })
            };
            let mut threads = vec![spawn(Class::Migration)];
            wait_until("the migration waits", || q.stats().waiting >= 1);
            threads.push(spawn(Class::WriteBack));
            wait_until("the write-back waits", || q.stats().waiting >= 2);
            let demand = STARVE_LIMIT as usize + 10;
            for _ in 0..demand {
                threads.push(spawn(Class::DemandRead));
            }
            wait_until("all wait", || q.stats().waiting >= demand + 2);
            drop(held);
            for t in threads {
                t.join().unwrap();
            }
            let order = order.lock();
            let at = |c: Class| order.iter().position(|x| *x == c).unwrap();
            let limit = STARVE_LIMIT as usize;
            assert_eq!(at(Class::WriteBack), limit, "{order:?}");
            assert_eq!(at(Class::Migration), limit + 1, "{order:?}");
            assert_eq!(
                q.stats().granted[Class::DemandRead as usize],
                demand as u64 + 1
            );
        });
    }

    /// A class served through the bound starts counting anew: the next grants go by
    /// priority again until it has let another [`STARVE_LIMIT`] pass.
    #[test]
    fn the_bound_counts_from_the_last_grant() {
        let q = TierQueue::new(1, false);
        let mut s = q.state.lock();
        s.waiting[Class::Probe as usize] = 1;
        for _ in 0..STARVE_LIMIT {
            assert_eq!(s.due(), None);
            s.grant(Class::DemandWrite);
        }
        assert_eq!(s.due(), Some(Class::Probe as usize));
        s.grant(Class::Probe);
        assert_eq!(s.due(), None);
    }

    #[test]
    fn exclusive_serves_one_file_at_a_time() {
        within(30, || {
            let q = Arc::new(TierQueue::new(8, true));
            let a1 = q.acquire(Class::DemandWrite, 1);
            let a2 = q.acquire(Class::DemandWrite, 1);
            assert_eq!(q.stats().in_flight, 2);
            let h = {
                let q = q.clone();
                std::thread::spawn(move || {
                    let _b = q.acquire(Class::DemandWrite, 2);
                    q.stats().in_flight
                })
            };
            wait_until("file 2 waits", || q.stats().waiting >= 1);
            drop(a1);
            assert_eq!(
                q.stats().waiting,
                1,
                "file 2 waits while file 1 has I/O in flight"
            );
            drop(a2);
            assert_eq!(h.join().unwrap(), 1);
        });
    }
}
