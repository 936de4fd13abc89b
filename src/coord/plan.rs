//! What the ledger's entries give: which nodes are live, judged on the reader's own
//! monotonic clock ([`Liveness`]), the tier's total capacity ([`capacity`],
//! [`held_capacity`]) and this node's part of it ([`allotment`]), together a [`Plan`].
//!
//! Pure, with no I/O and no clock of its own: the rules that decide how a shared tier is
//! split were tuned against the multi-node benches (docs/PERFORMANCE.md), and are tested
//! on made-up ledgers (`tests.rs`), apart from how the entries are written and read.

use super::ledger::Entry;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// An entry whose sequence number has not changed for this long (on the reader's
/// monotonic clock) is stale: its node is dead, hung or cut off, and its share goes back
/// to the others. Ten publishing periods: a node that misses a few (a slow metadata server)
/// is not dropped, and a killed node's share returns well within 30 s.
pub const STALE_AFTER: Duration = Duration::from_secs(10);

/// Unsaturated, the capacity estimate moves this fraction of the way back to the probed
/// figure each period, so a cut made while a foreign writer loaded the tier is undone once
/// it leaves (the nodes' own rates cannot show more than the shares they were given).
pub const RECOVER_RATE: f64 = 0.05;
/// A capacity estimate below the one in use, measured while the tier is saturated, counts
/// only once it has held for this many saturated periods in a row, and then the highest of
/// them: a disk-backed tier's write-back stall
/// reads as a second or two of saturation at a fraction of its speed, and a cut on that
/// re-laid out every file rewritten next, and back once the estimate recovered (40
/// re-layouts within 6 s at N = 2, docs/PERFORMANCE.md). A lasting fall (a foreign
/// writer) still counts within this many seconds; a rise counts at once.
pub const FALL_HOLD: usize = 3;
/// The capacity estimate never falls below this fraction of the probed figure (the same
/// bound as [`crate::tier::Tier::current_bandwidth`]).
pub const MIN_CAPACITY_FRACTION: f64 = 1.0 / 20.0;
/// ... and from above to this multiple of the probed figure: a busy rate is bytes counted
/// at completion over busy time counted as it passes, so a period can end a burst's
/// requests with little of their time in it; a capacity far above what the tier was ever
/// measured at would undo every cut until the next saturation.
pub const MAX_CAPACITY_FACTOR: f64 = 2.0;
/// A node whose demand is at least this fraction of the busiest live node's is a full
/// peer in the split ([`allotment`]).
pub const ACTIVE_FRACTION: f64 = 0.25;

/// What the global view gives this node.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Plan {
    /// Live nodes, this one included.
    pub live: usize,
    /// The tier's estimated total capacity, bytes/s.
    pub capacity_bps: f64,
    /// This node's part of it, bytes/s.
    pub allot_bps: f64,
}

/// The tier's total capacity from the live entries: while any node sees it saturated it is
/// what they get together while they use it (the sum of their busy rates); otherwise at
/// least what they moved together (the sum of their rates), and it recovers towards
/// `probed` at [`RECOVER_RATE`] per period. `prior` is the previous estimate (`probed` at
/// first). Bounded to [`MIN_CAPACITY_FRACTION`] x `probed` from below.
///
/// Why busy rates when saturated: a node's rate over the period falls with its share of the
/// tier and with its idle time between steps, so a capacity taken from those rates shrinks
/// the shares, which shrinks the rates, down to the bound (the collapse the first
/// two-node bench showed: a node's share at 0 % and the tier paused and resumed many times
/// a minute). A node's rate while it has requests in flight does not depend on how much it
/// sends; the job's steps keep its nodes busy at the same time, when the sum is the tier's.
pub fn capacity(prior: f64, probed: f64, live: &[Entry]) -> f64 {
    let most = probed * MAX_CAPACITY_FACTOR;
    // One entry's figure counts up to the bound (a garbage 1e308 from a buggy peer, too).
    let ok = |r: f64| {
        if r.is_finite() && r > 0.0 {
            r.min(most)
        } else {
            0.0
        }
    };
    let sum: f64 = live.iter().map(|e| ok(e.rate_bps)).sum();
    let est = if live.iter().any(|e| e.saturated) {
        live.iter()
            .map(|e| ok(e.busy_rate_bps).max(ok(e.rate_bps)))
            .sum()
    } else {
        // Back towards the probe, from below (a cut undone once the load left) and from
        // above (a high figure is believed only while the nodes keep moving that much).
        let back = prior + RECOVER_RATE * (probed - prior);
        back.max(sum)
    };
    est.clamp(
        probed * MIN_CAPACITY_FRACTION,
        most.max(probed * MIN_CAPACITY_FRACTION),
    )
}

/// The capacity to use after a period, from the one in use (`prior`) and the latest raw
/// estimates ([`capacity`]), newest last: a rise at once, a fall once the last
/// [`FALL_HOLD`] estimates are all below `prior`, to the highest of them.
pub fn held_capacity(prior: f64, recent: &[f64]) -> f64 {
    let Some(&newest) = recent.last() else {
        return prior;
    };
    if newest >= prior {
        return newest;
    }
    if recent.len() < FALL_HOLD {
        return prior;
    }
    recent[recent.len() - FALL_HOLD..]
        .iter()
        .fold(newest, |a, &b| a.max(b))
        .min(prior)
}

/// This node's (`me`) part of `capacity`, split among the live entries by demand, with
/// every node whose demand is at least [`ACTIVE_FRACTION`] of the busiest one's counting
/// as a full peer: busy nodes split evenly, a node doing little gets in proportion to what
/// it does, an idle one leaves its part to the others. A node with no demand counts as one
/// of n equal peers (it gets that much once it starts, and corrects it a period later);
/// with no demand anywhere the split is even.
///
/// Why not in proportion to demand alone: a node's demand over a second swings with its
/// phase (a node waiting on the shared tier moves little), and a split that followed it
/// swung a node's part from 284 to 5 MB/s within seconds at N = 2, each swing re-laying
/// files out (docs/PERFORMANCE.md).
pub fn allotment(capacity: f64, me: &str, live: &[Entry]) -> f64 {
    let n = live.len().max(1) as f64;
    let demand = |e: &Entry| {
        if e.demand_bps.is_finite() && e.demand_bps > 0.0 {
            e.demand_bps
        } else {
            0.0
        }
    };
    let busiest = live.iter().map(demand).fold(0.0, f64::max);
    if busiest <= 0.0 {
        return capacity / n;
    }
    let full = ACTIVE_FRACTION * busiest;
    let weight = |e: &Entry| {
        let d = demand(e);
        if d >= full {
            1.0
        } else {
            d / full
        }
    };
    let total: f64 = live.iter().map(weight).sum();
    let mine = live
        .iter()
        .find(|e| e.node == me)
        .map(weight)
        .unwrap_or(0.0);
    if mine <= 0.0 {
        return capacity / n;
    }
    capacity * mine / total
}

/// The entries a reader counts as live, by sequence numbers it watched change on its own
/// monotonic clock. File times and the writers' clocks are never used: on a parallel file
/// system the mtime is set by the writing client, and clocks of different nodes skew.
#[derive(Debug, Default)]
pub struct Liveness {
    /// node -> (last sequence number seen, when this reader first saw it).
    seen: HashMap<String, (u64, Instant)>,
}

impl Liveness {
    /// Takes the entries just read at `now` and returns those whose sequence number changed
    /// less than [`STALE_AFTER`] ago. A node seen for the first time counts as live for
    /// that long (a file left by a node killed before this one started goes stale then).
    pub fn live(&mut self, now: Instant, entries: Vec<Entry>) -> Vec<Entry> {
        let names: HashSet<&str> = entries.iter().map(|e| e.node.as_str()).collect();
        self.seen.retain(|n, _| names.contains(n.as_str()));
        entries
            .into_iter()
            .filter(|e| {
                let s = self.seen.entry(e.node.clone()).or_insert((e.seq, now));
                if s.0 != e.seq {
                    *s = (e.seq, now);
                }
                now.saturating_duration_since(s.1) < STALE_AFTER
            })
            .collect()
    }
}
