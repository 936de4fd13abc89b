//! One shared tier as a daemon runs it ([`SharedTier`]): each period its running
//! [`Counters`] become this node's entry (rates, busy rate, a smoothed demand), which is
//! published; the others' entries are read back and turned into the node's [`Plan`].
//!
//! It owns what a node keeps between periods (the sequence number, whom it has seen live,
//! the capacity in use and the recent estimates a fall must hold for, the warnings given)
//! behind one lock, and the last plan behind another, so the stats and the estimator never
//! wait on a period's ledger I/O.

use super::ledger::{entry_name, read_entries, replace_file, wall_now, Entry, Listing, FORMAT};
use super::plan::{allotment, capacity, held_capacity, Liveness, Plan, FALL_HOLD};
use crate::tier::{MIN_SAMPLE_BUSY_NS, MIN_SAMPLE_BYTES};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

/// Each second the published demand moves this fraction of the way to the latest period's
/// own figure (a period of `dt` seconds moves it `1 - (1 - this)^dt` of the way): about
/// five seconds of memory, so a node's phase within its step (waiting on the
/// shared tier, moving little) does not read as the node going idle, while a node that
/// stops or starts is seen within seconds.
pub const DEMAND_SMOOTHING: f64 = 0.2;
/// A published demand below this many bytes a second is published as 0 (idle).
pub const MIN_DEMAND_BPS: f64 = 1.0;

/// A node's running totals that one period's entry is the difference of.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    /// Bytes moved to and from the shared tier.
    pub tier_bytes: u64,
    /// Nanoseconds with at least one request in flight on the shared tier (reads' and
    /// writes' busy time added: an upper bound of the union, so busy rates err low).
    pub tier_busy_ns: u64,
    /// Bytes moved through all tiers.
    pub all_bytes: u64,
}

/// What a daemon keeps between periods for one shared tier.
#[derive(Debug)]
struct State {
    seq: u64,
    liveness: Liveness,
    capacity: Option<f64>,
    /// The last raw capacity estimates of saturated periods in a row (at most [`FALL_HOLD`],
    /// newest last; [`held_capacity`]): cleared by a period that is not saturated.
    recent: Vec<f64>,
    /// Counters at the last period, and when.
    last: Option<(Instant, Counters)>,
    /// The ledger could not be written (warned once); the node runs on its own estimates.
    unwritable: bool,
    /// Files already warned about, with the reason (a file is warned again if it changes
    /// from one fault to another).
    warned: HashMap<String, String>,
    plan: Option<Plan>,
    /// The demand published, smoothed ([`DEMAND_SMOOTHING`]); `None` before a first period.
    demand: Option<f64>,
    /// [`SharedTier::leave`] ran: no more entries (a period racing the unmount must not
    /// write the file back).
    left: bool,
}

impl State {
    /// The capacity after a period with the `live` entries ([`capacity`]); only falls
    /// measured under saturation are held ([`held_capacity`]): unsaturated, a fall is the
    /// glide back to the probe from above, which the hold would slow threefold.
    fn next_capacity(&mut self, probed: f64, live: &[Entry]) -> f64 {
        let prior = self.capacity.unwrap_or(probed);
        let raw = capacity(prior, probed, live);
        let cap = if live.iter().any(|e| e.saturated) {
            if self.recent.len() == FALL_HOLD {
                self.recent.remove(0);
            }
            self.recent.push(raw);
            held_capacity(prior, &self.recent)
        } else {
            self.recent.clear();
            raw
        };
        self.capacity = Some(cap);
        cap
    }
}

/// One shared tier's coordination, as a daemon runs it.
#[derive(Debug)]
pub struct SharedTier {
    pub dir: PathBuf,
    pub node: String,
    /// The tier's probed or stated effective bandwidth, bytes/s: the capacity before any
    /// node saw it saturate.
    probed_bps: f64,
    state: parking_lot::Mutex<State>,
    /// The last plan, apart from `state`: the stats and the estimator read it without
    /// waiting for a period's ledger I/O on a PFS that may be slow to answer.
    plan: parking_lot::Mutex<Option<Plan>>,
}

impl SharedTier {
    pub fn new(dir: PathBuf, node: &str, probed_bps: f64) -> SharedTier {
        SharedTier {
            dir,
            node: node.to_string(),
            probed_bps,
            state: parking_lot::Mutex::new(State {
                seq: 0,
                liveness: Liveness::default(),
                capacity: None,
                recent: Vec::with_capacity(FALL_HOLD + 1),
                last: None,
                unwritable: false,
                warned: HashMap::new(),
                plan: None,
                demand: None,
                left: false,
            }),
            plan: parking_lot::Mutex::new(None),
        }
    }

    /// The last plan, `None` while the node runs on its own estimates.
    pub fn plan(&self) -> Option<Plan> {
        *self.plan.lock()
    }

    /// One period: publishes this node's entry (from its counters so far, `c`, and whether
    /// it sees the tier `saturated`), reads the others' and returns the new plan; `None`
    /// when the ledger cannot be written (one WARNING; it is tried again every period,
    /// silently, and joined once it works).
    pub fn tick(&self, now: Instant, c: Counters, saturated: bool) -> Option<Plan> {
        let mut st = self.state.lock();
        if st.left {
            return None;
        }
        let (rate, busy_rate, demand, dt) = match st.last {
            Some((t, last)) => {
                let dt = now.saturating_duration_since(t).as_secs_f64().max(1e-3);
                let moved = c.tier_bytes.saturating_sub(last.tier_bytes);
                let busy = c.tier_busy_ns.saturating_sub(last.tier_busy_ns);
                (
                    moved as f64 / dt,
                    // As for the tier's own estimate: a period that moved or was busy
                    // less says nothing about the tier (0: the rate counts instead).
                    if moved >= MIN_SAMPLE_BYTES && busy >= MIN_SAMPLE_BUSY_NS {
                        moved as f64 * 1e9 / busy as f64
                    } else {
                        0.0
                    },
                    c.all_bytes.saturating_sub(last.all_bytes) as f64 / dt,
                    dt,
                )
            }
            None => (0.0, 0.0, 0.0, 0.0),
        };
        let demand = match (st.last, st.demand) {
            (None, _) => 0.0,
            (Some(_), None) => demand,
            (Some(_), Some(d)) => {
                let step = 1.0 - (1.0 - DEMAND_SMOOTHING).powf(dt);
                d + step * (demand - d)
            }
        };
        // A smoothed figure only nears 0; a node gone idle must read as idle (a part of
        // C/n once it starts again), not as one doing a trickle (a part of nearly 0).
        let demand = if demand < MIN_DEMAND_BPS { 0.0 } else { demand };
        if st.last.is_some() {
            st.demand = Some(demand);
        }
        st.last = Some((now, c));
        st.seq += 1;
        let wall = wall_now();
        let me = Entry {
            format: FORMAT,
            node: self.node.clone(),
            seq: st.seq,
            rate_bps: rate,
            busy_rate_bps: busy_rate,
            demand_bps: demand,
            saturated,
            wall_ms: wall
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        };
        let published = std::fs::create_dir_all(&self.dir).and_then(|_| {
            let text = serde_json::to_vec(&me).map_err(std::io::Error::other)?;
            replace_file(&self.dir.join(entry_name(&self.node)), &text, Some(wall))
        });
        if let Err(e) = published {
            if !st.unwritable {
                log::warn!(
                    "shared tier ledger {} cannot be written ({e}): this node runs on its own \
                     estimates of the tier, not the job's",
                    self.dir.display()
                );
                st.unwritable = true;
            }
            st.plan = None;
            *self.plan.lock() = None;
            // Estimates from before the outage must not count towards a later fall.
            st.recent.clear();
            return None;
        }
        if st.unwritable {
            log::info!(
                "shared tier ledger {} is writable again: joining the job's view",
                self.dir.display()
            );
            st.unwritable = false;
        }
        let Listing { mut entries, bad } = read_entries(&self.dir).unwrap_or_else(|e| {
            log::warn!("cannot read the ledger {}: {e}", self.dir.display());
            Listing::default()
        });
        for (name, why) in bad {
            if st.warned.get(&name) != Some(&why) {
                log::warn!(
                    "ledger file {} ignored: {why}",
                    self.dir.join(&name).display()
                );
                st.warned.insert(name, why);
            }
        }
        // Our own entry is what we just wrote, whatever the folder shows.
        entries.retain(|e| e.node != self.node);
        entries.push(me);
        let live = st.liveness.live(now, entries);
        let cap = st.next_capacity(self.probed_bps, &live);
        let plan = Plan {
            live: live.len(),
            capacity_bps: cap,
            allot_bps: allotment(cap, &self.node, &live),
        };
        if st.plan.map(|p| p.live) != Some(plan.live) {
            log::info!(
                "shared tier ledger {}: {} live node(s); this node's part {:.0} MB/s of {:.0} MB/s",
                self.dir.display(),
                plan.live,
                plan.allot_bps / 1e6,
                plan.capacity_bps / 1e6
            );
        }
        st.plan = Some(plan);
        *self.plan.lock() = Some(plan);
        Some(plan)
    }

    /// Removes this node's entry (a clean unmount: the others need not wait for it to go
    /// stale).
    pub fn leave(&self) {
        // Under the state lock: a period running now finishes first, none runs after.
        let mut st = self.state.lock();
        st.left = true;
        let _ = std::fs::remove_file(self.dir.join(entry_name(&self.node)));
    }
}
