//! Coordination of a tier that the nodes of a job share (a parallel file system): each
//! daemon's share of it follows the job's global view, not only its own measurements.
//!
//! Why: every node of a job probes and measures the shared tier as if it had it alone, so
//! with N nodes each one puts N times too many bytes there and every step waits for the
//! shared tier (issue #17). The daemons meet through the shared tier itself, with no
//! service to run: a ledger folder on it (`[[tier]] shared_ledger`, per job
//! `shared_job`) holds one small file per node, replaced atomically (written under a
//! temporary name, then renamed over) about once a second. docs/SHARED-TIER.md describes
//! the protocol and its failure cases.
//!
//! This module owns the ledger: the entry format, publishing one's own entry, reading the
//! others' with staleness judged on the *reader's* monotonic clock, the per-job probe
//! election, and the pure share computation ([`capacity`], [`allotment`]). The filesystem
//! core only asks [`SharedTier::tick`] once a second for the bandwidth this node may count
//! on, and uses it in Eq. 1 in place of the tier's own estimate when it is lower.

use crate::tier::{MIN_SAMPLE_BUSY_NS, MIN_SAMPLE_BYTES};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// Whether `s` may name a node or a job (it becomes part of a file name).
pub use crate::config::is_valid_id as is_valid_name;

/// Version of the entry format; entries of another version are ignored with a warning.
pub const FORMAT: u32 = 1;
/// An entry whose sequence number has not changed for this long (on the reader's
/// monotonic clock) is stale: its node is dead, hung or cut off, and its share goes back
/// to the others. Ten publishing periods: a node that misses a few (a slow metadata server)
/// is not dropped, and a killed node's share returns well within 30 s.
pub const STALE_AFTER: Duration = Duration::from_secs(10);
/// How long a node that lost the probe election waits for the winner's figure before it
/// probes the tier itself.
pub const PROBE_WAIT: Duration = Duration::from_secs(120);
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
/// Each second the published demand moves this fraction of the way to the latest period's
/// own figure (a period of `dt` seconds moves it `1 - (1 - this)^dt` of the way): about
/// five seconds of memory, so a node's phase within its step (waiting on the
/// shared tier, moving little) does not read as the node going idle, while a node that
/// stops or starts is seen within seconds.
pub const DEMAND_SMOOTHING: f64 = 0.2;
/// A published demand below this many bytes a second is published as 0 (idle).
pub const MIN_DEMAND_BPS: f64 = 1.0;
/// Test hook: seconds added to this daemon's wall clock where it writes one (the entry's
/// `wall_ms` and the file's mtime), so a test shows that readers never use them.
pub const CLOCK_OFFSET_ENV: &str = "TIERFS_TEST_CLOCK_OFFSET";

/// One node's entry in the ledger, as written. Fields a later tierfs adds are ignored and
/// missing ones take their defaults, so an entry of the same `format` from another version
/// is read (daemons from before `busy_rate_bps` refuse entries that carry it: the nodes of
/// a job should run one tierfs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub format: u32,
    pub node: String,
    /// Incremented at every publish: the only liveness signal readers use.
    pub seq: u64,
    /// Bytes/s this node moved to and from the shared tier over the last period.
    pub rate_bps: f64,
    /// The same bytes over the time this node had requests in flight on the tier: what it
    /// got while it was using the tier, whatever the share of the period it was idle. A
    /// saturated tier's capacity is the sum of these (not of `rate_bps`, which falls with
    /// the node's own share and would shrink the capacity with it). 0 when unknown.
    #[serde(default)]
    pub busy_rate_bps: f64,
    /// Bytes/s this node moved through all its tiers over the last period: how much work it
    /// has, which is what the shared tier is split by.
    pub demand_bps: f64,
    /// This node saw the tier queue (latency per byte up, throughput not; see
    /// [`crate::tier::Queueing`]).
    pub saturated: bool,
    /// The writer's wall clock, milliseconds since the epoch: for people reading the
    /// ledger, never used by tierfs (clocks of different nodes disagree).
    pub wall_ms: u64,
}

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

/// A ledger entry's file name for node `node`.
fn entry_name(node: &str) -> String {
    format!("node-{node}.json")
}

/// The wall clock as this daemon writes it, [`CLOCK_OFFSET_ENV`] included.
fn wall_now() -> SystemTime {
    let off = std::env::var(CLOCK_OFFSET_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .unwrap_or(0.0);
    let now = SystemTime::now();
    if off >= 0.0 {
        now + Duration::from_secs_f64(off)
    } else {
        now.checked_sub(Duration::from_secs_f64(-off))
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }
}

/// Replaces `path` with `bytes` atomically: written to a temporary name in the same folder,
/// then renamed over, so a reader sees the old file or the new one, never a mix. `mtime`
/// sets the file's modification time (the writer's clock, as a PFS client would).
fn replace_file(path: &Path, bytes: &[u8], mtime: Option<SystemTime>) -> std::io::Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| std::io::Error::other("no file name"))?;
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        if let Some(t) = mtime {
            f.set_modified(t)?;
        }
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// What a ledger folder holds.
#[derive(Debug, Default)]
pub struct Listing {
    /// The valid entries, by node name.
    pub entries: Vec<Entry>,
    /// Files left out: (file name, why).
    pub bad: Vec<(String, String)>,
}

/// Reads the entries of a ledger folder: every `node-*.json`. A file that is not a valid
/// entry (torn by a client that does not rename atomically, garbage, another format, a name
/// that does not match its node) is left out and listed in `bad`; the caller warns once per
/// file.
pub fn read_entries(dir: &Path) -> std::io::Result<Listing> {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for d in std::fs::read_dir(dir)? {
        let d = d?;
        let name = d.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("node-") && name.ends_with(".json")) {
            continue;
        }
        let parsed = std::fs::read(d.path())
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<Entry>(&b).map_err(|e| e.to_string()))
            .and_then(|e| {
                if e.format != FORMAT {
                    Err(format!("format {} (this tierfs reads {FORMAT})", e.format))
                } else if entry_name(&e.node) != name {
                    Err(format!("it names node {:?}", e.node))
                } else if !e.rate_bps.is_finite() || !e.demand_bps.is_finite() {
                    Err("a rate that is not a number".into())
                } else {
                    Ok(e)
                }
            });
        match parsed {
            Ok(e) => ok.push(e),
            Err(why) => bad.push((name, why)),
        }
    }
    ok.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(Listing { entries: ok, bad })
}

/// The probe figure cached for the job, (read, write) bytes/s.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ProbeRecord {
    read_bps: f64,
    write_bps: f64,
    node: String,
}

/// How [`shared_probe`] got its figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// Another node's figure, from the ledger.
    Cached,
    /// This node won the election, probed, and cached the figure for the others.
    Elected,
}

/// Why [`shared_probe`] has no figure.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SharedProbeError {
    /// This node was elected and its own probe failed: probing again would fail the same.
    #[error("{0}")]
    Probe(String),
    /// The ledger gave no figure (unwritable, another node's probe failed or never
    /// finished): the caller probes on its own.
    #[error("{0}")]
    Ledger(String),
}

/// One bandwidth probe per job: the node that creates `probe.elect` in `dir` with
/// `O_EXCL` runs `probe` and caches the figure in `probe.json` (replaced atomically); the
/// others wait up to `wait` for it, or until the winner writes `probe.failed` (its probe
/// failed: they need not wait it out). Probing the shared tier from every node at once would
/// measure 1/N of it each and load it N times. A figure that cannot be cached is still
/// returned (with a warning).
pub fn shared_probe(
    dir: &Path,
    node: &str,
    wait: Duration,
    probe: impl FnOnce() -> Result<(f64, f64), String>,
) -> Result<((f64, f64), ProbeOutcome), SharedProbeError> {
    use SharedProbeError::Ledger;
    let cache = dir.join("probe.json");
    let read_cache = || -> Option<(f64, f64)> {
        let r: ProbeRecord = serde_json::from_slice(&std::fs::read(&cache).ok()?).ok()?;
        (r.read_bps > 0.0 && r.write_bps > 0.0).then_some((r.read_bps, r.write_bps))
    };
    if let Some(f) = read_cache() {
        return Ok((f, ProbeOutcome::Cached));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| Ledger(format!("cannot create {}: {e}", dir.display())))?;
    let elect = dir.join("probe.elect");
    let failed = dir.join("probe.failed");
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&elect)
    {
        Ok(mut f) => {
            let _ = writeln!(f, "node {node} pid {}", std::process::id());
            let (r, w) = probe().map_err(|e| {
                // The others stop waiting at once and try on their own.
                let _ = replace_file(&failed, format!("node {node}: {e}\n").as_bytes(), None);
                SharedProbeError::Probe(e)
            })?;
            let rec = ProbeRecord {
                read_bps: r,
                write_bps: w,
                node: node.to_string(),
            };
            let written = serde_json::to_vec(&rec)
                .map_err(std::io::Error::other)
                .and_then(|text| replace_file(&cache, &text, None));
            if let Err(e) = written {
                log::warn!(
                    "cannot cache the probe in {} ({e}): the job's other nodes will probe on \
                     their own after {} s",
                    cache.display(),
                    wait.as_secs()
                );
            }
            Ok(((r, w), ProbeOutcome::Elected))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let deadline = Instant::now() + wait;
            loop {
                if let Some(f) = read_cache() {
                    return Ok((f, ProbeOutcome::Cached));
                }
                if let Ok(why) = std::fs::read_to_string(&failed) {
                    return Err(Ledger(format!(
                        "the probe elected in {} failed ({})",
                        elect.display(),
                        why.trim()
                    )));
                }
                if Instant::now() >= deadline {
                    let who = std::fs::read_to_string(&elect).unwrap_or_default();
                    return Err(Ledger(format!(
                        "{} ({}) was elected to probe but left no figure in {} within {} s",
                        elect.display(),
                        who.trim(),
                        cache.display(),
                        wait.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Err(e) => Err(Ledger(format!("cannot create {}: {e}", elect.display()))),
    }
}

/// The ledger folder of one job's shared tier: `<shared_ledger>/<job>/<tier name>/`.
pub fn ledger_dir(ledger: &Path, job: &str, tier: &str) -> PathBuf {
    ledger.join(job).join(tier)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn e(node: &str, seq: u64, rate: f64, demand: f64, saturated: bool) -> Entry {
        Entry {
            format: FORMAT,
            node: node.into(),
            seq,
            rate_bps: rate,
            busy_rate_bps: 0.0,
            demand_bps: demand,
            saturated,
            wall_ms: 0,
        }
    }

    #[test]
    fn equal_nodes_split_the_tier_evenly() {
        let live = [
            e("a", 1, 100.0, 500.0, false),
            e("b", 1, 100.0, 500.0, false),
        ];
        let cap = capacity(400.0, 400.0, &live);
        assert_eq!(cap, 400.0);
        assert_eq!(allotment(cap, "a", &live), 200.0);
        assert_eq!(allotment(cap, "b", &live), 200.0);
        let four: Vec<Entry> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| e(n, 1, 0.0, 1.0, false))
            .collect();
        assert_eq!(allotment(400.0, "c", &four), 100.0);
    }

    #[test]
    fn demand_weights_the_split_and_an_idle_node_leaves_it_to_the_busy() {
        // Both busy, one three times more: still peers (a phase within a step, not a
        // node doing less work).
        let live = [e("a", 1, 0.0, 300.0, false), e("b", 1, 0.0, 100.0, false)];
        assert_eq!(allotment(400.0, "a", &live), 200.0);
        assert_eq!(allotment(400.0, "b", &live), 200.0);
        // One doing a tenth of the other's: in proportion to its weight, 0.4 of a peer.
        let live = [e("a", 1, 0.0, 300.0, false), e("b", 1, 0.0, 30.0, false)];
        assert!((allotment(400.0, "a", &live) - 400.0 / 1.4).abs() < 1e-9);
        assert!((allotment(400.0, "b", &live) - 400.0 * 0.4 / 1.4).abs() < 1e-9);
        // One node idle: the busy one gets the whole tier, as if it were alone.
        let live = [e("a", 1, 0.0, 300.0, false), e("b", 1, 0.0, 0.0, false)];
        assert_eq!(allotment(400.0, "a", &live), 400.0);
        // The idle one is told what an even split would give it.
        assert_eq!(allotment(400.0, "b", &live), 200.0);
        // Nobody busy: even.
        let live = [e("a", 1, 0.0, 0.0, false), e("b", 1, 0.0, 0.0, false)];
        assert_eq!(allotment(400.0, "a", &live), 200.0);
        // Alone.
        assert_eq!(allotment(400.0, "a", &live[..1]), 400.0);
    }

    /// Counters with no busy time: the rates alone.
    fn cn(tier_bytes: u64, all_bytes: u64) -> Counters {
        Counters {
            tier_bytes,
            tier_busy_ns: 0,
            all_bytes,
        }
    }

    #[test]
    fn a_saturated_capacity_is_what_the_nodes_get_while_busy_not_their_average() {
        // Two nodes on a 400 MB/s tier, each busy a quarter of the period and at 200 while
        // busy: their rates over the period are 50 each.
        let mut a = e("a", 1, 50.0, 1.0, true);
        let mut b = e("b", 1, 50.0, 1.0, true);
        a.busy_rate_bps = 200.0;
        b.busy_rate_bps = 200.0;
        let cap = capacity(400.0, 400.0, &[a.clone(), b.clone()]);
        assert_eq!(cap, 400.0);
        // A period later the shares were cut by the ledger and each node sends less: what
        // it gets while busy has not changed, nor does the capacity (by the rates it
        // would have fallen to 50, then further with every period).
        a.rate_bps = 10.0;
        b.rate_bps = 10.0;
        let mut c = cap;
        for _ in 0..10 {
            c = capacity(c, 400.0, &[a.clone(), b.clone()]);
        }
        assert_eq!(c, 400.0);
        // An entry with no busy time (an older daemon, or no traffic) counts its rate.
        let old = e("c", 1, 30.0, 1.0, true);
        assert_eq!(capacity(400.0, 400.0, &[a, old]), 230.0);
    }

    #[test]
    fn a_capacity_is_bounded_above_and_decays_to_the_probe() {
        // A period that ended a burst's requests with little of their busy time in it: a
        // busy rate of 8 GB/s on a 400 MB/s tier counts as twice the probe at most.
        let mut a = e("a", 1, 50.0, 1.0, true);
        a.busy_rate_bps = 8000.0;
        assert_eq!(capacity(400.0, 400.0, &[a]), 800.0);
        // Garbage from a buggy peer cannot make it infinite either.
        let mut g = e("g", 1, 1e308, 1.0, true);
        g.busy_rate_bps = 1e308;
        let cap = capacity(400.0, 400.0, &[g.clone(), g]);
        assert_eq!(cap, 800.0);
        // Unsaturated and quiet, a high figure goes back to the probe.
        let calm = [e("a", 2, 10.0, 1.0, false)];
        let mut c = cap;
        for _ in 0..200 {
            c = capacity(c, 400.0, &calm);
        }
        assert!((400.0..401.0).contains(&c), "{c}");
    }

    #[test]
    fn a_short_busy_period_publishes_no_busy_rate() {
        let d = tempfile::tempdir().unwrap();
        let a = SharedTier::new(ledger_dir(d.path(), "j", "pfs"), "a", 400.0);
        let t0 = Instant::now();
        a.tick(t0, Counters::default(), false).unwrap();
        // 16 MiB completed in a period with 2 ms of busy time: no figure of the tier.
        let c = Counters {
            tier_bytes: 16 << 20,
            tier_busy_ns: 2_000_000,
            all_bytes: 16 << 20,
        };
        a.tick(t0 + Duration::from_secs(1), c, true).unwrap();
        let got = read_entries(&a.dir).unwrap().entries;
        assert_eq!(got[0].busy_rate_bps, 0.0);
        assert_eq!(got[0].rate_bps, (16 << 20) as f64);
    }

    #[test]
    fn a_period_publishes_the_busy_rate() {
        let d = tempfile::tempdir().unwrap();
        let a = SharedTier::new(ledger_dir(d.path(), "j", "pfs"), "a", 400.0);
        let t0 = Instant::now();
        a.tick(t0, Counters::default(), false).unwrap();
        // 100 MB in a 2 s period, 0.5 s of it busy.
        let c = Counters {
            tier_bytes: 100_000_000,
            tier_busy_ns: 500_000_000,
            all_bytes: 300_000_000,
        };
        a.tick(t0 + Duration::from_secs(2), c, true).unwrap();
        let got = read_entries(&a.dir).unwrap().entries;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].rate_bps, 50e6);
        assert_eq!(got[0].busy_rate_bps, 200e6);
        assert_eq!(got[0].demand_bps, 150e6);
        // An entry without the field (as the first ledger format wrote) still parses.
        let text = br#"{"format":1,"node":"z","seq":3,"rate_bps":5.0,"demand_bps":1.0,"saturated":false,"wall_ms":0}"#;
        std::fs::write(a.dir.join("node-z.json"), text).unwrap();
        let got = read_entries(&a.dir).unwrap();
        assert!(got.bad.is_empty(), "{:?}", got.bad);
        assert!(got
            .entries
            .iter()
            .any(|e| e.node == "z" && e.busy_rate_bps == 0.0));
        // A field a later tierfs adds is ignored, not a reason to leave the node out.
        let text = br#"{"format":1,"node":"y","seq":3,"rate_bps":5.0,"demand_bps":1.0,"saturated":false,"wall_ms":0,"later":7}"#;
        std::fs::write(a.dir.join("node-y.json"), text).unwrap();
        let got = read_entries(&a.dir).unwrap();
        assert!(got.bad.is_empty(), "{:?}", got.bad);
        assert!(got.entries.iter().any(|e| e.node == "y"));
    }

    #[test]
    fn saturation_sets_the_capacity_to_what_the_nodes_get_together() {
        // Probed at 400; a foreign writer takes half: the nodes see queueing and move
        // 100 + 100.
        let live = [e("a", 1, 100.0, 1.0, true), e("b", 1, 100.0, 1.0, false)];
        let cap = capacity(400.0, 400.0, &live);
        assert_eq!(cap, 200.0);
        assert_eq!(allotment(cap, "a", &live), 100.0);
        // Unsaturated, it recovers towards the probe a step at a time, and never below the
        // nodes' own sum.
        let calm = [e("a", 2, 90.0, 1.0, false), e("b", 2, 90.0, 1.0, false)];
        let next = capacity(cap, 400.0, &calm);
        assert!(
            (next - (200.0 + RECOVER_RATE * 200.0)).abs() < 1e-9,
            "{next}"
        );
        let mut c = next;
        for _ in 0..200 {
            c = capacity(c, 400.0, &calm);
        }
        assert!(c > 399.0 && c <= 400.0, "{c}");
        // More than the probe said, unsaturated: the tier can do at least that.
        let fast = [e("a", 3, 300.0, 1.0, false), e("b", 3, 300.0, 1.0, false)];
        assert_eq!(capacity(400.0, 400.0, &fast), 600.0);
        // Saturated at next to nothing (a writer from outside the job): bounded below.
        let starved = [e("a", 4, 1.0, 1.0, true)];
        assert_eq!(
            capacity(400.0, 400.0, &starved),
            400.0 * MIN_CAPACITY_FRACTION
        );
    }

    #[test]
    fn staleness_is_the_readers_clock_and_sequence_numbers_only() {
        let mut l = Liveness::default();
        let t0 = Instant::now();
        // b's wall clock is an hour ahead and a's an hour behind: liveness does not care.
        let mut a = e("a", 1, 0.0, 0.0, false);
        a.wall_ms = 1_000;
        let mut b = e("b", 7, 0.0, 0.0, false);
        b.wall_ms = u64::MAX / 2;
        let names = |v: Vec<Entry>| v.into_iter().map(|e| e.node).collect::<Vec<_>>();
        assert_eq!(names(l.live(t0, vec![a.clone(), b.clone()])), ["a", "b"]);
        // a keeps publishing, b stops (killed).
        for s in 1..=9u64 {
            a.seq += 1;
            let now = t0 + Duration::from_secs(s);
            assert_eq!(names(l.live(now, vec![a.clone(), b.clone()])), ["a", "b"]);
        }
        a.seq += 1;
        let at = t0 + STALE_AFTER;
        assert_eq!(names(l.live(at, vec![a.clone(), b.clone()])), ["a"]);
        // b comes back (a restart may even start its sequence again): live at once.
        b.seq = 1;
        assert_eq!(
            names(l.live(at + Duration::from_secs(1), vec![a.clone(), b.clone()])),
            ["a", "b"]
        );
        // A file that vanished is forgotten; seen again, it gets a fresh STALE_AFTER.
        assert_eq!(names(l.live(at, vec![a.clone()])), ["a"]);
        let later = at + Duration::from_secs(30);
        assert_eq!(names(l.live(later, vec![b.clone()])), ["b"]);
        assert!(l.live(later + STALE_AFTER, vec![b]).is_empty());
    }

    #[test]
    fn garbage_and_torn_files_are_reported_not_read() {
        let d = tempfile::tempdir().unwrap();
        let good = e("a", 3, 1.0, 2.0, false);
        std::fs::write(
            d.path().join("node-a.json"),
            serde_json::to_vec(&good).unwrap(),
        )
        .unwrap();
        let text = serde_json::to_string(&e("b", 3, 1.0, 2.0, false)).unwrap();
        std::fs::write(d.path().join("node-b.json"), &text[..text.len() / 2]).unwrap();
        std::fs::write(d.path().join("node-c.json"), b"\x00\xffgarbage").unwrap();
        std::fs::write(
            d.path().join("node-d.json"),
            serde_json::to_vec(&good).unwrap(),
        )
        .unwrap();
        let mut future = e("f", 1, 1.0, 1.0, false);
        future.format = FORMAT + 1;
        std::fs::write(
            d.path().join("node-f.json"),
            serde_json::to_vec(&future).unwrap(),
        )
        .unwrap();
        std::fs::write(d.path().join("probe.json"), b"{}").unwrap();
        std::fs::write(d.path().join(".node-a.json.tmp-1"), b"{").unwrap();
        let Listing { entries, bad } = read_entries(d.path()).unwrap();
        assert_eq!(entries, vec![good]);
        let mut names: Vec<&str> = bad.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        assert_eq!(
            names,
            ["node-b.json", "node-c.json", "node-d.json", "node-f.json"]
        );
    }

    #[test]
    fn a_tick_publishes_and_reads_the_others() {
        let d = tempfile::tempdir().unwrap();
        let dir = ledger_dir(d.path(), "job1", "pfs");
        let a = SharedTier::new(dir.clone(), "a", 400.0);
        let b = SharedTier::new(dir.clone(), "b", 400.0);
        let t0 = Instant::now();
        let pa = a.tick(t0, cn(0, 0), false).unwrap();
        assert_eq!(pa.live, 1);
        assert_eq!(pa.allot_bps, 400.0);
        let pb = b.tick(t0, cn(0, 0), false).unwrap();
        assert_eq!((pb.live, pb.allot_bps), (2, 200.0));
        // Garbage beside them: ignored.
        std::fs::write(dir.join("node-zz.json"), b"not json").unwrap();
        let t1 = t0 + Duration::from_secs(1);
        // a moved 100 bytes in that second, b nothing: a has the demand, so the whole tier.
        let pa = a.tick(t1, cn(100, 100), false).unwrap();
        assert_eq!((pa.live, pa.allot_bps), (2, 400.0));
        let pb = b.tick(t1, cn(0, 0), false).unwrap();
        assert_eq!((pb.live, pb.allot_bps), (2, 200.0));
        // b stops publishing: after STALE_AFTER on a's clock, a has the tier again.
        let mut t = t1;
        let mut got = None;
        for _ in 0..15 {
            t += Duration::from_secs(1);
            let p = a.tick(t, cn(100, 100), false).unwrap();
            if p.live == 1 {
                got = Some((t - t1, p.allot_bps));
                break;
            }
        }
        let (after, allot) = got.expect("b never went stale");
        assert!(after <= STALE_AFTER + Duration::from_secs(1), "{after:?}");
        assert_eq!(allot, 400.0);
        a.leave();
        assert!(!dir.join("node-a.json").exists());
        assert_eq!(a.tick(t + Duration::from_secs(1), cn(0, 0), false), None);
        assert!(
            !dir.join("node-a.json").exists(),
            "a period after leave wrote it back"
        );
    }

    /// The published demand is smoothed: a second in which the node moved nothing (a phase
    /// of its step) takes it a fifth of the way down, and a node that stopped for good
    /// falls below a busy peer's quarter within seconds, leaving it the tier.
    #[test]
    fn the_published_demand_moves_a_fifth_of_the_way_each_second_and_reaches_idle() {
        let d = tempfile::tempdir().unwrap();
        let dir = ledger_dir(d.path(), "job1", "pfs");
        let a = SharedTier::new(dir.clone(), "a", 400.0);
        let published = || -> f64 {
            let Listing { entries, .. } = read_entries(&dir).unwrap();
            entries.iter().find(|e| e.node == "a").unwrap().demand_bps
        };
        let near = |x: f64, want: f64| (x - want).abs() < 1e-6 * want.max(1.0);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        a.tick(at(0), cn(0, 0), false).unwrap();
        assert_eq!(published(), 0.0);
        a.tick(at(1000), cn(100, 1000), false).unwrap();
        assert_eq!(published(), 1000.0, "the first figure is taken as it is");
        a.tick(at(2000), cn(100, 1000), false).unwrap();
        assert!(near(published(), 800.0), "{}", published());
        a.tick(at(3000), cn(100, 2000), false).unwrap();
        assert!(near(published(), 840.0), "{}", published());
        // The smoothing is per second, not per period: a two-second idle period moves the
        // figure as far as two one-second ones (1 - 0.8^2 of the way).
        a.tick(at(5000), cn(100, 2000), false).unwrap();
        assert!(near(published(), 840.0 * 0.64), "{}", published());
        // Idle from now on: below a quarter of 840 within seven seconds, and published as
        // exactly 0 (idle: a part of C/n once it starts again) within a minute, not as a
        // figure that only nears 0.
        let mut ms = 5000;
        while published() >= 0.25 * 840.0 {
            ms += 1000;
            a.tick(at(ms), cn(100, 2000), false).unwrap();
        }
        assert!(ms <= 10_000, "{ms}");
        while published() > 0.0 {
            ms += 1000;
            a.tick(at(ms), cn(100, 2000), false).unwrap();
        }
        assert!(ms <= 60_000, "{ms}");
        assert_eq!(published(), 0.0);
    }

    #[test]
    fn a_capacity_falls_only_after_holding_low_for_three_periods() {
        // A dip of two periods (a write-back stall) leaves the capacity as it was.
        assert_eq!(held_capacity(300.0, &[300.0, 50.0]), 300.0);
        assert_eq!(held_capacity(300.0, &[300.0, 50.0, 48.0]), 300.0);
        assert_eq!(held_capacity(300.0, &[50.0, 48.0, 300.0]), 300.0);
        // Three in a row: the highest of them.
        assert_eq!(held_capacity(300.0, &[150.0, 120.0, 140.0]), 150.0);
        // Fewer periods seen than the hold (just mounted): no fall yet.
        assert_eq!(held_capacity(300.0, &[100.0, 100.0]), 300.0);
        // A rise counts at once.
        assert_eq!(held_capacity(150.0, &[140.0, 120.0, 290.0]), 290.0);
        assert_eq!(held_capacity(150.0, &[]), 150.0);
    }

    /// Periods of a second each on node `a`'s tier, every one busy the whole second:
    /// `step(s, bytes, saturated)` ends the period at second `s` having moved `bytes`.
    fn busy_seconds(a: &SharedTier) -> impl FnMut(u64, u64, bool) -> Plan + '_ {
        let t0 = Instant::now();
        let mut c = cn(0, 0);
        a.tick(t0, c, false).unwrap();
        move |s, bytes, saturated| {
            c.tier_bytes += bytes;
            c.tier_busy_ns += 1_000_000_000;
            c.all_bytes += 4 * bytes;
            a.tick(t0 + Duration::from_secs(s), c, saturated).unwrap()
        }
    }

    #[test]
    fn a_two_second_stall_of_the_shared_tier_does_not_cut_the_shares() {
        let d = tempfile::tempdir().unwrap();
        let a = SharedTier::new(ledger_dir(d.path(), "job1", "pfs"), "a", 300e6);
        let mut step = busy_seconds(&a);
        assert_eq!(step(1, 300_000_000, true).capacity_bps, 300e6);
        // Two seconds saturated at 50 MB/s: held.
        assert_eq!(step(2, 50_000_000, true).capacity_bps, 300e6);
        assert_eq!(step(3, 50_000_000, true).capacity_bps, 300e6);
        assert_eq!(step(4, 300_000_000, true).capacity_bps, 300e6);
        // Three: it counts (the highest of the three).
        step(5, 60_000_000, true);
        step(6, 50_000_000, true);
        let p = step(7, 55_000_000, true);
        assert!((p.capacity_bps - 60e6).abs() < 1.0, "{}", p.capacity_bps);
    }

    #[test]
    fn only_saturated_falls_are_held() {
        let d = tempfile::tempdir().unwrap();
        let a = SharedTier::new(ledger_dir(d.path(), "job1", "pfs"), "a", 300e6);
        let mut periods = busy_seconds(&a);
        let mut step = |s, bytes, saturated| periods(s, bytes, saturated).capacity_bps;
        // Saturated at 500 MB/s: the capacity rises at once.
        assert_eq!(step(1, 500_000_000, true), 500e6);
        // Unsaturated and moving little, it glides back 5 % of the gap each period, not
        // held for three.
        let next = step(2, 10_000_000, false);
        assert!(
            (next - (500e6 - RECOVER_RATE * 200e6)).abs() < 1.0,
            "{next}"
        );
        // Two saturated low periods, a calm one, then two more: never three in a row.
        let held = step(3, 50_000_000, true);
        assert_eq!(step(4, 50_000_000, true), held);
        let calm = step(5, 10_000_000, false);
        assert!(calm < held);
        // The calm period cleared the window: two saturated low periods hold again.
        assert_eq!(step(6, 50_000_000, true), calm);
        assert_eq!(step(7, 50_000_000, true), calm);
        assert!((step(8, 60_000_000, true) - 60e6).abs() < 1.0);
    }

    #[test]
    fn an_unwritable_ledger_leaves_the_node_on_its_own_estimates() {
        let d = tempfile::tempdir().unwrap();
        // A file where the folder should be: unwritable for root too.
        std::fs::write(d.path().join("job1"), b"").unwrap();
        let a = SharedTier::new(ledger_dir(d.path(), "job1", "pfs"), "a", 400.0);
        assert_eq!(a.tick(Instant::now(), cn(0, 0), false), None);
        assert_eq!(a.plan(), None);
        // Fixed: it joins.
        std::fs::remove_file(d.path().join("job1")).unwrap();
        assert!(a.tick(Instant::now(), cn(0, 0), false).is_some());
    }

    #[test]
    fn one_probe_per_job() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("job").join("pfs");
        let runs = std::sync::atomic::AtomicUsize::new(0);
        let outcomes: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|i| {
                    let (dir, runs) = (&dir, &runs);
                    s.spawn(move || {
                        shared_probe(dir, &format!("n{i}"), Duration::from_secs(10), || {
                            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(300));
                            Ok((300.0, 200.0))
                        })
                        .unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(outcomes.iter().all(|(f, _)| *f == (300.0, 200.0)));
        assert_eq!(
            outcomes
                .iter()
                .filter(|(_, o)| *o == ProbeOutcome::Elected)
                .count(),
            1
        );
        // A winner that died before it wrote the figure: the others give up and say who.
        let d2 = tempfile::tempdir().unwrap();
        std::fs::write(d2.path().join("probe.elect"), b"node x pid 1\n").unwrap();
        let e = shared_probe(d2.path(), "y", Duration::from_millis(300), || {
            Ok((1.0, 1.0))
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("node x pid 1"), "{e}");
        // A winner whose probe fails says so, and the others stop waiting at once.
        let d3 = tempfile::tempdir().unwrap();
        let e = shared_probe(d3.path(), "w", Duration::from_secs(60), || {
            Err("no room".into())
        })
        .unwrap_err();
        assert_eq!(e, SharedProbeError::Probe("no room".into()));
        let t = Instant::now();
        let e = shared_probe(d3.path(), "y", Duration::from_secs(60), || Ok((1.0, 1.0)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("failed (node w: no room)"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn names_that_fit_in_a_file_name() {
        for ok in ["n1", "node-07.cluster", "123456", "a_b"] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(65)] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }
}
