//! The only way to a tier: every byte the daemon reads from or writes to a tier's pieces
//! goes through [`Io::submit`] with its [`Class`].
//!
//! A submission does three things, once, for every kind of I/O: admission (a slot in each
//! tier's priority queue, [`sched`]; the queues are this module's own, [`Queues`]), the
//! engine batch ([`engine`]: psync or io_uring), and the accounting (the tier's traffic and
//! busy-time counters, and its errors: reads and writes alike,
//! [`crate::tier::Tier::note_error`] judging its health). What arrives here:
//!
//! | class | from |
//! |---|---|
//! | [`Class::DemandRead`], [`Class::DemandWrite`] | FUSE reads and writes, whole-file and striped, and the cache fills they cause |
//! | [`Class::Prefetch`] | the cache loading predicted files |
//! | [`Class::WriteBack`] | the cache writing dirty blocks back |
//! | [`Class::Migration`] | copies of a file's bytes to a new layout, one batch per chunk |
//! | [`Class::Probe`] | recovery probes of idle tiers ([`recovery`]) |
//!
//! The compiler holds everyone to it: a [`Piece`]'s reads and writes are visible only in
//! this module. The CPU ledger ([`crate::stats::ledger`]) stays with the work that spends it: a
//! class of work there (a migration) includes CPU and bytes that never reach a tier.

mod account;
pub mod engine;
pub mod piece;
pub mod recovery;
pub mod sched;

pub use engine::{choose, Engine, IoUring, Op, Psync};
pub use piece::{bounce_bytes, AlignedBuf, Piece, ALIGN};
pub use sched::{Class, QueueStats, Queues, TierQueue};

use crate::tier::Tier;
use account::InFlight;
use std::io;

/// Submissions over a set of tiers on one engine, admitted by their queues (cheap: three
/// references).
#[derive(Clone, Copy)]
pub struct Io<'a> {
    engine: &'a dyn Engine,
    tiers: &'a [Tier],
    queues: &'a Queues,
}

/// A stable id of a piece for the queue's `exclusive` mode (one file at a time).
fn piece_id(p: &Piece) -> u64 {
    p as *const Piece as u64
}

impl<'a> Io<'a> {
    /// `queues` has a queue for each of `tiers` ([`Queues::for_tiers`]).
    pub fn new(engine: &'a dyn Engine, tiers: &'a [Tier], queues: &'a Queues) -> Io<'a> {
        Io {
            engine,
            tiers,
            queues,
        }
    }

    /// The tiers submissions go to, by index.
    pub fn tiers(&self) -> &'a [Tier] {
        self.tiers
    }

    /// Runs backing requests (`ops[i]` on tier `at[i]`) as one engine batch of `class`.
    /// It takes one admission slot per tier involved, in tier order (so two batches never
    /// wait on each other crosswise), and counts as one request against each tier's bound;
    /// each request is counted in its tier's traffic, and each failure as its tier's error.
    /// Results are in the order of `ops`, as [`Engine::run`] gives them.
    pub fn submit(&self, class: Class, at: &[usize], ops: &mut [Op<'_>]) -> Vec<io::Result<usize>> {
        assert_eq!(at.len(), ops.len(), "one tier per op");
        let mut held: Vec<(usize, u64)> = at
            .iter()
            .zip(ops.iter())
            .map(|(t, op)| (*t, piece_id(op.piece())))
            .collect();
        held.sort_by_key(|h| h.0);
        held.dedup_by_key(|h| h.0);
        let _slots: Vec<_> = held
            .iter()
            .map(|(t, id)| self.queues.get(*t).acquire(class, *id))
            .collect();
        if self.engine.sequential() && ops.len() > 1 {
            // One after another: each is counted from its own start.
            return (0..ops.len())
                .flat_map(|i| self.run_counted(class, &at[i..=i], &mut ops[i..=i]))
                .collect();
        }
        self.run_counted(class, at, ops)
    }

    /// Runs `ops` as one engine batch and counts each on its tier: in flight from the
    /// batch's start to its own completion.
    fn run_counted(
        &self,
        class: Class,
        at: &[usize],
        ops: &mut [Op<'_>],
    ) -> Vec<io::Result<usize>> {
        let ios: Vec<Option<InFlight>> = at
            .iter()
            .zip(ops.iter())
            .map(|(t, op)| InFlight::start(&self.tiers[*t], class, op.is_write()))
            .collect();
        // The engine runs the whole batch on this thread: its wait for a core is shared
        // among the requests by how long each was in flight (none read for a probe,
        // which counts nothing).
        let counted = ios.iter().any(Option::is_some);
        let delay0 = counted.then(crate::sys::thread_run_delay_ns).flatten();
        let start = std::time::Instant::now();
        // Each request's own completion matters only where the batch spans tiers: a
        // tier's requests together keep it busy until the last of them is done, which is
        // the batch's end, and waiting for each completion costs a wake-up apiece.
        let timed = if at.iter().any(|t| *t != at[0]) {
            self.engine.run_timed(class, ops)
        } else {
            let r = self.engine.run(class, ops);
            let end = std::time::Instant::now();
            r.into_iter().map(|r| (r, end)).collect()
        };
        let core_wait = delay0
            .and_then(|d0| Some(crate::sys::thread_run_delay_ns()?.saturating_sub(d0)))
            .unwrap_or(0);
        let took = |at: std::time::Instant| at.saturating_duration_since(start).as_nanos();
        let longest = timed
            .iter()
            .map(|(_, at)| took(*at))
            .max()
            .unwrap_or(0)
            .max(1);
        let mut results = Vec::with_capacity(timed.len());
        for ((io, (r, done_at)), (t, op)) in
            ios.into_iter().zip(timed).zip(at.iter().zip(ops.iter()))
        {
            let done = r.as_ref().ok().map(|n| *n as u64);
            if let Some(io) = io {
                let share = (core_wait as u128 * took(done_at) / longest) as u64;
                io.finish(done, share, done_at);
            }
            if let Err(e) = &r {
                self.failed(*t, class, op.is_write(), e);
            }
            results.push(r);
        }
        results
    }

    /// One read of `piece` on tier `tier` into `buf` at `off`: the bytes read, fewer only
    /// at the piece's end.
    pub fn read(
        &self,
        class: Class,
        tier: usize,
        piece: &Piece,
        buf: &mut [u8],
        off: u64,
    ) -> io::Result<usize> {
        let mut ops = [Op::Read { piece, buf, off }];
        let [r] = <[_; 1]>::try_from(self.submit(class, &[tier], &mut ops)).expect("one op");
        r
    }

    /// One write of all of `buf` to `piece` on tier `tier` at `off`, or its error.
    pub fn write(
        &self,
        class: Class,
        tier: usize,
        piece: &Piece,
        buf: &[u8],
        off: u64,
    ) -> io::Result<()> {
        let mut ops = [Op::Write { piece, buf, off }];
        let [r] = <[_; 1]>::try_from(self.submit(class, &[tier], &mut ops)).expect("one op");
        r.map(|_| ())
    }

    /// Counts a failed request on its tier: the data read or write errors (a probe is no
    /// data I/O), and the error itself, which judges the tier's health.
    fn failed(&self, tier: usize, class: Class, write: bool, e: &io::Error) {
        let t = &self.tiers[tier];
        if class != Class::Probe {
            let c = if write {
                &t.counters.write_errors
            } else {
                &t.counters.read_errors
            };
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        t.note_error(e);
    }
}

#[cfg(test)]
mod tests;
