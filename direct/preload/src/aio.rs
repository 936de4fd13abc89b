//! libaio on direct descriptors: DeepSpeed's swap I/O is `io_submit` of `io_prep_pread`/
//! `io_prep_pwrite` iocbs, reaped with `io_pgetevents` (fio uses `io_getevents`).
//!
//! - A whole file's descriptor is the piece's own, so the kernel does its iocbs as they
//!   are; the library only times them for the report.
//! - A striped file's descriptor is FUSE's: each read or write iocb on it is replaced by
//!   one iocb per extent, on the pieces' descriptors ([`split`]), and the events of those
//!   parts are gathered into the one event the program expects, for its own iocb and
//!   `data`, once every part is done: the bytes of all parts, or the first failing part's
//!   error ([`Reaper`]). A program asking for `min_nr` events gets that many of its own.
//!   An iocb the library cannot keep exact (vectored, or notifying an eventfd, which parts
//!   would signal too often) stays on FUSE.
//!
//! The calls are the kernel's own (`io_submit(2)`, `io_pgetevents(2)`), with libaio's
//! convention of returning `-errno`; libaio's functions are thin wrappers of them.

use crate::fdtable::{Direct, Shape, Spin};
use crate::stats::now_ns;
use std::collections::HashMap;
use std::sync::Arc;
use tierfs_wire::stripe::StripeMap;

/// The kernel's `struct iocb` (and libaio's, which matches it).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Iocb {
    pub data: u64,
    pub key: u32,
    pub rw_flags: u32,
    pub opcode: u16,
    pub reqprio: i16,
    pub fildes: u32,
    pub buf: u64,
    pub nbytes: u64,
    pub offset: i64,
    pub reserved2: u64,
    pub flags: u32,
    pub resfd: u32,
}
const _: () = assert!(std::mem::size_of::<Iocb>() == 64);

/// The kernel's `struct io_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Event {
    pub data: u64,
    pub obj: u64,
    pub res: i64,
    pub res2: i64,
}
const _: () = assert!(std::mem::size_of::<Event>() == 32);

pub const PREAD: u16 = 0;
pub const PWRITE: u16 = 1;
/// `IOCB_FLAG_RESFD`: the completion is also signalled on the eventfd `resfd`.
pub const FLAG_RESFD: u32 = 1;

/// The parts of one program iocb on a striped file: its extents as iocbs on the pieces.
/// `pieces[i]` is the descriptor of `tiers[i]`.
pub fn split(
    orig: &Iocb,
    map: &StripeMap,
    tiers: &[u8],
    fds: &[i32],
) -> Option<Vec<(Iocb, usize)>> {
    if !matches!(orig.opcode, PREAD | PWRITE) || orig.flags & FLAG_RESFD != 0 || orig.offset < 0 {
        return None;
    }
    let mut out = Vec::new();
    for e in map.extents(orig.offset as u64, orig.nbytes as usize) {
        let i = tiers.iter().position(|t| *t as usize == e.tier)?;
        out.push((
            Iocb {
                data: 0,
                fildes: fds[i] as u32,
                buf: orig.buf + e.buf as u64,
                nbytes: e.len as u64,
                offset: e.local as i64,
                ..*orig
            },
            i,
        ));
    }
    Some(out)
}

/// A program iocb split into parts, until its last part completes.
struct Pending {
    orig: Iocb,
    orig_addr: u64,
    left: usize,
    done: i64,
    err: i64,
    /// The parts, where the kernel was given them (a Vec's buffer stays put when the Vec
    /// moves, and this one never grows): kept until the last completes, so no other part
    /// takes an address while one of these is in flight.
    _parts: Vec<Iocb>,
}

/// What an iocb the library watches is.
enum Watched {
    /// A part of the split iocb `pending` (the number it is kept under), on piece `piece`
    /// of `direct`.
    Part {
        pending: u64,
        direct: Arc<Direct>,
        piece: usize,
        write: bool,
        start: u64,
    },
    /// A whole file's own iocb, timed for the report.
    Whole {
        direct: Arc<Direct>,
        write: bool,
        start: u64,
    },
}

/// The iocbs in flight the library watches, by address (a program may reuse an iocb's
/// memory while the kernel still works on it, so a program iocb's address may stand for
/// several: they are kept in a list; the parts are the library's own, one each), and the
/// split ones by a number of their own.
#[derive(Default)]
pub struct Reaper {
    watched: HashMap<u64, Vec<Watched>>,
    pending: HashMap<u64, Pending>,
    next: u64,
    /// Events of split iocbs the library finished by hand, for the next reap of their
    /// context (its number).
    stash: Vec<(u64, Event)>,
}

impl Reaper {
    pub fn is_empty(&self) -> bool {
        self.watched.is_empty()
    }

    fn watch(&mut self, addr: u64, w: Watched) {
        self.watched.entry(addr).or_default().push(w);
    }

    fn unwatch(&mut self, addr: u64) -> Option<Watched> {
        let list = self.watched.get_mut(&addr)?;
        let w = list.remove(0);
        if list.is_empty() {
            self.watched.remove(&addr);
        }
        Some(w)
    }

    /// Registers the program iocb at `addr` (`orig`) on the direct open `d`; returns the
    /// iocbs to submit in its place (itself, or its parts).
    pub fn add(&mut self, addr: u64, orig: &Iocb, d: &Arc<Direct>) -> Vec<*mut Iocb> {
        let write = orig.opcode == PWRITE;
        let t = now_ns();
        match &d.shape {
            Shape::Whole { .. } if matches!(orig.opcode, PREAD | PWRITE) => {
                d.pieces[0].dir(write).begin(t);
                self.watch(
                    addr,
                    Watched::Whole {
                        direct: d.clone(),
                        write,
                        start: t,
                    },
                );
                vec![addr as *mut Iocb]
            }
            Shape::Stripe { map, fds } => {
                let tiers: Vec<u8> = d.pieces.iter().map(|p| p.tier).collect();
                let fds: Vec<i32> = fds
                    .iter()
                    .map(|f| f.load(std::sync::atomic::Ordering::Acquire))
                    .collect();
                let Some(parts) = split(orig, map, &tiers, &fds).filter(|p| !p.is_empty()) else {
                    return vec![addr as *mut Iocb];
                };
                let id = self.next;
                self.next += 1;
                let mut iocbs: Vec<Iocb> = parts.iter().map(|(i, _)| *i).collect();
                let mut out = Vec::with_capacity(parts.len());
                for (iocb, (_, piece)) in iocbs.iter_mut().zip(&parts) {
                    let p = iocb as *mut Iocb;
                    d.pieces[*piece].dir(write).begin(t);
                    self.watch(
                        p as u64,
                        Watched::Part {
                            pending: id,
                            direct: d.clone(),
                            piece: *piece,
                            write,
                            start: t,
                        },
                    );
                    out.push(p);
                }
                self.pending.insert(
                    id,
                    Pending {
                        orig: *orig,
                        orig_addr: addr,
                        left: iocbs.len(),
                        done: 0,
                        err: 0,
                        _parts: iocbs,
                    },
                );
                out
            }
            _ => vec![addr as *mut Iocb],
        }
    }

    /// Forgets what [`Reaper::add`] just registered for the program iocb at `addr`, which
    /// the kernel did not take: its parts `subs` (as `add` returned them), or itself.
    pub fn forget(&mut self, addr: u64, subs: &[*mut Iocb]) {
        let mut pending = None;
        for p in subs.iter().map(|p| *p as u64).filter(|p| *p != addr) {
            if let Some(w) = self.unwatch(p) {
                if let Watched::Part { pending: id, .. } = &w {
                    pending = Some(*id);
                }
                end_of(&w, 0);
            }
        }
        match pending {
            Some(id) => {
                self.pending.remove(&id);
            }
            None => {
                // The newest watch of that address is the one just added.
                if let Some(list) = self.watched.get_mut(&addr) {
                    if let Some(w) = list.pop() {
                        end_of(&w, 0);
                    }
                    if list.is_empty() {
                        self.watched.remove(&addr);
                    }
                }
            }
        }
    }

    /// A part of the split iocb at `orig` was done by the library itself (the kernel took
    /// only some of the parts): counted as if its event had come.
    pub fn done_by_hand(&mut self, part: u64, res: i64) -> Option<Event> {
        self.take(Event {
            data: 0,
            obj: part,
            res,
            res2: 0,
        })
    }

    /// One event from the kernel: `Some` the event for the program (its own, or the one
    /// that completes a split iocb), `None` for a part of one still in flight.
    pub fn take(&mut self, ev: Event) -> Option<Event> {
        let Some(w) = self.unwatch(ev.obj) else {
            return Some(ev);
        };
        end_of(&w, ev.res);
        let Watched::Part { pending: orig, .. } = w else {
            return Some(ev);
        };
        let p = self.pending.get_mut(&orig)?;
        p.left -= 1;
        if ev.res < 0 {
            if p.err == 0 {
                p.err = ev.res;
            }
        } else {
            p.done += ev.res;
        }
        if p.left > 0 {
            return None;
        }
        let p = self.pending.remove(&orig)?;
        Some(Event {
            data: p.orig.data,
            obj: p.orig_addr,
            res: if p.err != 0 { p.err } else { p.done },
            res2: 0,
        })
    }
}

fn end_of(w: &Watched, res: i64) {
    let t = now_ns();
    let bytes = res.max(0) as u64;
    match w {
        Watched::Part {
            direct,
            piece,
            write,
            start,
            ..
        } => direct.pieces[*piece].dir(*write).end(bytes, *start, t),
        Watched::Whole {
            direct,
            write,
            start,
        } => direct.pieces[0].dir(*write).end(bytes, *start, t),
    }
}

/// The process's watched iocbs (all contexts together: iocb addresses are unique while in
/// flight).
pub struct Shared {
    pub lock: Spin,
    pub reaper: std::cell::UnsafeCell<Option<Reaper>>,
}

// SAFETY: `reaper` is only touched with `lock` held.
unsafe impl Sync for Shared {}

pub static REAPER: Shared = Shared {
    lock: Spin::new(),
    reaper: std::cell::UnsafeCell::new(None),
};

/// Keeps an event for the program's next reap of the context `ctx`.
pub fn stash(ctx: u64, ev: Event) {
    with(|r| r.stash.push((ctx, ev)));
}

/// Whether events wait for the program's next reap of `ctx`.
pub fn stashed(ctx: u64) -> bool {
    with(|r| r.stash.iter().any(|(c, _)| *c == ctx))
}

/// Moves the events waiting for `ctx` into `out`; returns how many.
pub fn unstash(ctx: u64, out: &mut [Event]) -> usize {
    with(|r| {
        let mut n = 0;
        r.stash.retain(|(c, e)| {
            if *c == ctx && n < out.len() {
                out[n] = *e;
                n += 1;
                false
            } else {
                true
            }
        });
        n
    })
}

/// Runs `f` on the reaper with its lock held (no call out from inside `f`).
pub fn with<R>(f: impl FnOnce(&mut Reaper) -> R) -> R {
    REAPER.lock.lock();
    // SAFETY: the lock is held.
    let r = f(unsafe { &mut *REAPER.reaper.get() }.get_or_insert_with(Reaper::default));
    REAPER.lock.unlock();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats;

    fn striped(unit: u64, pattern: Vec<u8>) -> Arc<Direct> {
        let mut tiers: Vec<u8> = pattern.clone();
        tiers.sort();
        tiers.dedup();
        Arc::new(Direct {
            dev: 0,
            ino: 5,
            pieces: tiers.iter().map(|t| stats::Piece::new(*t)).collect(),
            shape: Shape::Stripe {
                map: StripeMap::new(unit, pattern),
                fds: tiers
                    .iter()
                    .map(|t| std::sync::atomic::AtomicI32::new(-100 - *t as i32))
                    .collect(),
            },
        })
    }

    #[test]
    fn a_striped_iocb_completes_once_with_every_part() {
        let d = striped(4096, vec![0, 1, 0]);
        let orig = Iocb {
            data: 42,
            opcode: PWRITE,
            fildes: 7,
            buf: 0x10000,
            nbytes: 3 * 4096 + 100,
            offset: 4096,
            ..Default::default()
        };
        let mut r = Reaper::default();
        let parts = r.add(0xabc0, &orig, &d);
        assert_eq!(parts.len(), 4);
        // SAFETY: the parts are the reaper's boxed iocbs, alive until completion.
        let p: Vec<Iocb> = parts.iter().map(|p| unsafe { **p }).collect();
        assert_eq!(
            (p[0].fildes as i32, p[0].offset, p[0].buf),
            (-101, 0, 0x10000)
        );
        assert_eq!(
            (p[1].fildes as i32, p[1].offset, p[1].buf),
            (-100, 4096, 0x11000)
        );
        assert_eq!(p.iter().map(|x| x.nbytes).sum::<u64>(), orig.nbytes);
        assert!(p.iter().all(|x| x.data == 0 && x.opcode == PWRITE));
        let ev = |i: usize, res: i64| Event {
            data: 0,
            obj: parts[i] as u64,
            res,
            res2: 0,
        };
        assert_eq!(r.take(ev(2, 4096)), None);
        assert_eq!(r.take(ev(0, 4096)), None);
        assert_eq!(r.take(ev(3, 100)), None);
        let done = r.take(ev(1, 4096)).unwrap();
        assert_eq!(
            (done.data, done.obj, done.res),
            (42, 0xabc0, orig.nbytes as i64)
        );
        assert!(r.is_empty());
        // Someone else's event passes as it is.
        let other = Event {
            data: 1,
            obj: 0x999,
            res: 5,
            res2: 0,
        };
        assert_eq!(r.take(other), Some(other));
        assert!(d.pieces[1].moved());
    }

    #[test]
    fn a_failing_part_fails_the_iocb_with_its_error() {
        let d = striped(4096, vec![0, 1]);
        let orig = Iocb {
            opcode: PREAD,
            nbytes: 8192,
            ..Default::default()
        };
        let mut r = Reaper::default();
        let parts = r.add(0x100, &orig, &d);
        assert_eq!(parts.len(), 2);
        let e0 = Event {
            obj: parts[0] as u64,
            res: -(libc::EIO as i64),
            ..Default::default()
        };
        assert_eq!(r.take(e0), None);
        let last = r.done_by_hand(parts[1] as u64, 4096).unwrap();
        assert_eq!(last.res, -(libc::EIO as i64));
        // Not submitted at all: forgotten without an event.
        let parts = r.add(0x200, &orig, &d);
        assert_eq!(parts.len(), 2);
        r.forget(0x200, &parts);
        assert!(r.is_empty());
    }

    /// The replay (and some programs) reuse an iocb's memory for the next request while
    /// the kernel still works on the last: each completes once, as its own.
    #[test]
    fn an_iocb_address_reused_while_in_flight_completes_each_request() {
        let d = striped(4096, vec![0, 1]);
        let mut r = Reaper::default();
        let a = Iocb {
            data: 1,
            opcode: PWRITE,
            nbytes: 4096,
            offset: 0,
            ..Default::default()
        };
        let b = Iocb {
            data: 2,
            offset: 4096,
            ..a
        };
        let pa = r.add(0x500, &a, &d);
        let pb = r.add(0x500, &b, &d);
        assert_eq!((pa.len(), pb.len()), (1, 1));
        let ev = |p: *mut Iocb| Event {
            obj: p as u64,
            res: 4096,
            ..Default::default()
        };
        let eb = r.take(ev(pb[0])).unwrap();
        let ea = r.take(ev(pa[0])).unwrap();
        assert_eq!((eb.data, ea.data), (2, 1));
        assert!(r.is_empty());
    }

    #[test]
    fn iocbs_the_library_cannot_keep_exact_stay_as_they_are() {
        let d = striped(4096, vec![0, 1]);
        let mut r = Reaper::default();
        for orig in [
            Iocb {
                opcode: 7, // PREADV
                ..Default::default()
            },
            Iocb {
                opcode: PWRITE,
                flags: FLAG_RESFD,
                ..Default::default()
            },
        ] {
            assert_eq!(r.add(0x300, &orig, &d), vec![0x300 as *mut Iocb]);
        }
        assert!(r.is_empty());
    }
}
