//! Which of the program's descriptors are direct, what each stands for, and which
//! descriptors are the library's own.
//!
//! A direct open ([`Direct`]) is shared by every descriptor number the program made of it
//! (dup, dup2, dup3, `F_DUPFD`, inherited over fork): it ends, closing its lease and its
//! private piece descriptors and reporting what it moved, when the last of them is closed.
//! The library's own descriptors (leases, stripe pieces, its sockets) are *guarded*: a
//! program that closes them by number (a loop over all descriptors, `close_range`) leaves
//! them open, and one that `dup2`s onto one moves it out of the way first, so nothing the
//! program does ends a lease early or makes the library close a number reused since.
//!
//! The table is consulted by every wrapped call; with no direct open and no socket it costs
//! one atomic load. Its lock is a spin lock held only to read or change the table, with no
//! call into the library inside, and taken across `fork` so the child never inherits it
//! held ([`at_fork`]).

use crate::stats;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use tierfs_wire::stripe::StripeMap;

/// How a direct open's bytes are reached.
#[derive(Debug)]
pub enum Shape {
    /// The program's descriptors are the piece's own; `lease` holds the FUSE descriptor.
    Whole { lease: AtomicI32 },
    /// The program's descriptors stay FUSE ones (the lease); the library reads and writes
    /// the pieces through its own descriptors, `fds[i]` for the tier `pieces[i].tier`.
    Stripe { map: StripeMap, fds: Vec<AtomicI32> },
}

/// One granted open.
#[derive(Debug)]
pub struct Direct {
    /// The mount's device (where the report goes).
    pub dev: u64,
    pub ino: u64,
    pub shape: Shape,
    /// Per piece, what it moved.
    pub pieces: Vec<stats::Piece>,
}

impl Direct {
    /// The index in `pieces` of tier `t`.
    pub fn piece_of(&self, t: usize) -> Option<usize> {
        self.pieces.iter().position(|p| p.tier as usize == t)
    }

    /// The library's own descriptors of this open.
    fn own(&self) -> Vec<i32> {
        match &self.shape {
            Shape::Whole { lease } => vec![lease.load(Ordering::Acquire)],
            Shape::Stripe { fds, .. } => fds.iter().map(|f| f.load(Ordering::Acquire)).collect(),
        }
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        let report = tierfs_wire::Report {
            ino: self.ino,
            tiers: self
                .pieces
                .iter()
                .filter(|p| p.moved())
                .map(|p| p.io())
                .collect(),
        };
        let own = self.own();
        with(|t| {
            for fd in &own {
                t.private.remove(fd);
            }
        });
        for fd in own {
            // SAFETY: the library's own descriptor, closed once, here.
            unsafe { crate::real::close(fd) };
        }
        if !report.tiers.is_empty() {
            crate::client::report(self.dev, report);
        }
    }
}

/// A spin lock whose holder never calls into the library.
pub struct Spin {
    held: AtomicBool,
}

impl Default for Spin {
    fn default() -> Self {
        Spin::new()
    }
}

impl Spin {
    pub const fn new() -> Spin {
        Spin {
            held: AtomicBool::new(false),
        }
    }
    pub fn lock(&self) {
        while self
            .held
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }
    pub fn unlock(&self) {
        self.held.store(false, Ordering::Release);
    }
}

/// What one of the library's own descriptors is.
enum Private {
    Lease(Weak<Direct>),
    /// Piece `i` of a striped open.
    Piece(Weak<Direct>, usize),
    /// A connection to a daemon (the client's).
    Socket,
}

#[derive(Default)]
struct Inner {
    /// Indexed by descriptor number.
    slots: Vec<Option<Arc<Direct>>>,
    /// How many of `slots` hold an open.
    live: usize,
    private: HashMap<i32, Private>,
}

impl Inner {
    fn take_slot(&mut self, i: usize) -> Option<Arc<Direct>> {
        let d = self.slots.get_mut(i)?.take();
        self.live -= usize::from(d.is_some());
        d
    }
}

struct Table {
    lock: Spin,
    inner: std::cell::UnsafeCell<Option<Inner>>,
}

// SAFETY: `inner` is only touched with `lock` held.
unsafe impl Sync for Table {}

static TABLE: Table = Table {
    lock: Spin::new(),
    inner: std::cell::UnsafeCell::new(None),
};
/// Descriptors the table holds, program and private: 0 lets every wrapped call skip it.
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// The process the table belongs to (set again in a forked child). A `vfork` child (as
/// `posix_spawn` and Python's subprocess make) shares the parent's memory until it execs,
/// with descriptors of its own: it must not change the parent's table, so for it the
/// library stands aside.
static OWNER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn pid() -> u32 {
    // SAFETY: getpid(2) has no failure mode.
    unsafe { libc::getpid() as u32 }
}

fn with<R>(f: impl FnOnce(&mut Inner) -> R) -> R {
    TABLE.lock.lock();
    // SAFETY: the lock is held; no call into the library happens inside `f`.
    let inner = unsafe { &mut *TABLE.inner.get() }.get_or_insert_with(Inner::default);
    let r = f(inner);
    COUNT.store(inner.live + inner.private.len(), Ordering::Release);
    TABLE.lock.unlock();
    r
}

fn busy() -> bool {
    COUNT.load(Ordering::Acquire) > 0 && OWNER.load(Ordering::Acquire) == pid()
}

/// The direct open behind `fd`, if any.
pub fn get(fd: i32) -> Option<Arc<Direct>> {
    if !busy() || fd < 0 {
        return None;
    }
    with(|t| t.slots.get(fd as usize).cloned().flatten())
}

/// Whether any descriptor is direct (or the library's).
pub fn any() -> bool {
    busy()
}

/// Records the program's new direct open at `fd`, and the library's own descriptors of it.
pub fn install(fd: i32, d: Arc<Direct>) {
    at_fork();
    if OWNER.load(Ordering::Acquire) != pid() && COUNT.load(Ordering::Acquire) > 0 {
        // A vfork child: the table is its parent's (the descriptors close at its exec).
        return;
    }
    OWNER.store(pid(), Ordering::Release);
    let own = d.own();
    let weak = Arc::downgrade(&d);
    let old = with(|t| {
        for (i, o) in own.iter().enumerate() {
            let p = match d.shape {
                Shape::Whole { .. } => Private::Lease(weak.clone()),
                Shape::Stripe { .. } => Private::Piece(weak.clone(), i),
            };
            t.private.insert(*o, p);
        }
        set_locked(t, fd, d)
    });
    drop(old);
}

fn set_locked(t: &mut Inner, fd: i32, d: Arc<Direct>) -> Option<Arc<Direct>> {
    let i = fd as usize;
    if t.slots.len() <= i {
        t.slots.resize(i + 1, None);
    }
    let old = t.slots[i].replace(d);
    t.live += usize::from(old.is_none());
    old
}

/// Records `fd` as another number of `d`; returns what was there (to drop outside).
pub fn set(fd: i32, d: Arc<Direct>) -> Option<Arc<Direct>> {
    with(|t| set_locked(t, fd, d))
}

/// Forgets `fd`; returns its direct open (to drop outside the lock).
pub fn take(fd: i32) -> Option<Arc<Direct>> {
    if !busy() || fd < 0 {
        return None;
    }
    with(|t| t.take_slot(fd as usize))
}

/// Whether `fd` is one of the library's own descriptors.
pub fn is_private(fd: i32) -> bool {
    busy() && with(|t| t.private.contains_key(&fd))
}

/// Guards a socket of the client's.
pub fn add_socket(fd: i32) {
    at_fork();
    if OWNER.load(Ordering::Acquire) != pid() && COUNT.load(Ordering::Acquire) > 0 {
        return;
    }
    OWNER.store(pid(), Ordering::Release);
    with(|t| t.private.insert(fd, Private::Socket));
}

/// Stops guarding a socket (about to be closed).
pub fn remove_socket(fd: i32) {
    with(|t| t.private.remove(&fd));
}

/// Forgets the descriptors in `first..=last`; returns their direct opens.
pub fn take_range(first: u32, last: u32) -> Vec<Arc<Direct>> {
    if !busy() {
        return Vec::new();
    }
    with(|t| {
        let end = (last as usize).saturating_add(1).min(t.slots.len());
        let start = (first as usize).min(end);
        (start..end).filter_map(|i| t.take_slot(i)).collect()
    })
}

/// The library's own descriptors in `first..=last`: a `close_range` spares them.
pub fn private_in(first: u32, last: u32) -> Vec<i32> {
    if !busy() {
        return Vec::new();
    }
    with(|t| {
        let mut v: Vec<i32> = t
            .private
            .keys()
            .copied()
            .filter(|fd| *fd >= 0 && (first..=last).contains(&(*fd as u32)))
            .collect();
        v.sort();
        v
    })
}

/// Forgets every descriptor of the open `d` (it goes back to FUSE); returns them.
pub fn take_all_of(d: &Arc<Direct>) -> Vec<Arc<Direct>> {
    if !busy() {
        return Vec::new();
    }
    with(|t| {
        let mine: Vec<usize> = (0..t.slots.len())
            .filter(|i| t.slots[*i].as_ref().is_some_and(|x| Arc::ptr_eq(x, d)))
            .collect();
        mine.into_iter().filter_map(|i| t.take_slot(i)).collect()
    })
}

/// What [`moved`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Moved {
    /// `fd` is not the library's.
    No,
    Yes,
    /// A socket of the client's: the caller tells it ([`crate::client::moved`]) once the
    /// table's lock is free (the client takes its own lock first, then the table's).
    Socket,
}

/// If `fd` is one of the library's own descriptors, moves it to `to` (a free number the
/// caller made with `F_DUPFD`): the old number is then the program's.
pub fn moved(fd: i32, to: i32) -> Moved {
    with(|t| {
        let Some(p) = t.private.remove(&fd) else {
            return Moved::No;
        };
        match &p {
            Private::Lease(w) => {
                if let Some(d) = w.upgrade() {
                    if let Shape::Whole { lease } = &d.shape {
                        lease.store(to, Ordering::Release);
                    }
                }
            }
            Private::Piece(w, i) => {
                if let Some(d) = w.upgrade() {
                    if let Shape::Stripe { fds, .. } = &d.shape {
                        fds[*i].store(to, Ordering::Release);
                    }
                }
            }
            Private::Socket => {}
        }
        let socket = matches!(p, Private::Socket);
        t.private.insert(to, p);
        if socket {
            Moved::Socket
        } else {
            Moved::Yes
        }
    })
}

/// Takes the table's lock across `fork` (registered once): the child starts with it free
/// and the table as the parent had it (the descriptors are the child's copies).
fn at_fork() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    extern "C" fn prepare() {
        crate::client::lock_for_fork();
        crate::aio::REAPER.lock.lock();
        TABLE.lock.lock();
    }
    extern "C" fn after() {
        TABLE.lock.unlock();
        crate::aio::REAPER.lock.unlock();
        crate::client::unlock_after_fork();
    }
    extern "C" fn child() {
        // The child's copy of the table is its own (its descriptors are copies).
        OWNER.store(pid(), Ordering::Release);
        after();
    }
    // SAFETY: registers functions that take and release our own locks.
    unsafe { libc::pthread_atfork(Some(prepare), Some(after), Some(child)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripe() -> Arc<Direct> {
        Arc::new(Direct {
            dev: 0,
            ino: 1,
            shape: Shape::Stripe {
                map: StripeMap::new(4096, vec![0, 1]),
                fds: vec![AtomicI32::new(-5), AtomicI32::new(-6)],
            },
            pieces: vec![stats::Piece::new(0), stats::Piece::new(1)],
        })
    }

    #[test]
    fn descriptors_share_their_open_until_the_last_goes() {
        let d = stripe();
        install(900, d.clone());
        assert!(set(901, d.clone()).is_none());
        assert!(is_private(-5) && is_private(-6));
        drop(d);
        assert!(any());
        assert_eq!(get(900).map(|d| d.ino), Some(1));
        let a = take(900).unwrap();
        assert_eq!(Arc::strong_count(&a), 2, "901 still holds it");
        drop(a);
        assert_eq!(moved(-6, -7), Moved::Yes, "a piece moves");
        assert!(is_private(-7) && !is_private(-6));
        let gone = take_range(899, 905);
        assert_eq!(gone.len(), 1);
        drop(gone);
        assert!(get(901).is_none());
        assert!(
            !is_private(-5) && !is_private(-7),
            "the open's end drops its own"
        );
    }
}
