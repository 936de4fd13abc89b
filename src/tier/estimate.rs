//! A tier's bandwidth as the daemon sees it: busy time, the online estimates from its own
//! traffic, and whether it queues. Pure bookkeeping on counters; [`super::Tier`] samples it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Wall time during which at least one request of a kind was in flight.
#[derive(Debug, Default)]
pub struct Busy {
    in_flight: AtomicU64,
    /// Nanoseconds since [`epoch`] when the current busy period began.
    since: AtomicU64,
    total: AtomicU64,
    /// The latest end noted: a period closes there, not at the end of whichever request
    /// happens to be noted last (ends are noted after the fact, with their batch).
    last_end: AtomicU64,
}

static EPOCH_AT: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

pub(super) fn epoch_ns() -> u64 {
    EPOCH_AT
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// [`epoch_ns`] of the instant `t` (0 before the epoch).
pub(crate) fn epoch_ns_of(t: std::time::Instant) -> u64 {
    epoch_ns();
    let e = *EPOCH_AT.get().expect("set by epoch_ns");
    t.saturating_duration_since(e).as_nanos() as u64
}

/// Whether the [`epoch_ns`] time `t` (0 = never) is less than `ns` ago.
pub(super) fn within(t: u64, ns: u64) -> bool {
    t != 0 && epoch_ns().saturating_sub(t) < ns
}

impl Busy {
    pub(crate) fn begin(&self) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.since.store(epoch_ns(), Ordering::Release);
        }
    }
    #[cfg(test)]
    pub(crate) fn end(&self) {
        self.end_at(epoch_ns());
    }
    /// The end of a request that completed at [`epoch_ns`] time `t`, noted after
    /// the fact (with the rest of its batch). The period closes at the latest end noted,
    /// so a request of another thread that began and ended meanwhile still counts; one
    /// that began after `t` while this one was not yet noted makes the gap count as busy
    /// (an over-count bounded by how late the note is), against counting the whole
    /// batch's wait as this tier's.
    pub(crate) fn end_at(&self, t: u64) {
        self.last_end.fetch_max(t, Ordering::AcqRel);
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let since = self.since.load(Ordering::Acquire);
            let end = self.last_end.load(Ordering::Acquire);
            self.total
                .fetch_add(end.saturating_sub(since), Ordering::Relaxed);
        }
    }
    /// Busy time measured elsewhere (a program's direct I/O, reported when it closes the
    /// file), added as it is.
    pub(crate) fn add_ns(&self, ns: u64) {
        self.total.fetch_add(ns, Ordering::Relaxed);
    }
    /// Busy nanoseconds so far, the current busy period included.
    pub fn total_ns(&self) -> u64 {
        let t = self.total.load(Ordering::Relaxed);
        if self.in_flight.load(Ordering::Acquire) > 0 {
            t + epoch_ns().saturating_sub(self.since.load(Ordering::Acquire))
        } else {
            t
        }
    }
}

/// Busy time with the part its requests' threads spent waiting for a core taken out.
///
/// A request's wall time is the tier's work plus the time its thread, runnable, waited for
/// a core (the I/O done, the completion not yet handled). On a node whose cores the
/// optimizer or other daemons take, that wait is the machine's load, not the tier's: left
/// in, every tier reads slower and queueing, and a shared tier's job capacity falls with
/// the load, pausing the tier for nothing. Busy time is a union over concurrent requests,
/// so the wait cannot be subtracted request by request; each period's busy time is scaled
/// by the share of its completed requests' time that was not spent waiting.
#[derive(Debug, Default)]
pub struct NetBusy {
    state: parking_lot::Mutex<NetState>,
}

#[derive(Debug, Default)]
struct NetState {
    /// The running totals at the last call: busy, net latency, core wait (ns).
    busy: u64,
    lat: u64,
    wait: u64,
    /// Net busy nanoseconds so far.
    net: u64,
}

/// At most this share of a period's busy time is taken out: a tier whose requests did
/// nothing but wait still moved its bytes in some time.
pub const MAX_CORE_WAIT_SHARE: f64 = 0.9;

impl NetBusy {
    /// Advances from the running totals, `busy` (a [`Busy`] clock), `lat` (completed
    /// requests' latency without core waits) and `wait` (their core waits), and returns the
    /// net busy nanoseconds so far. Each instance keeps its own period, so each reader of
    /// a tier's busy time has its own.
    pub fn advance(&self, busy: u64, lat: u64, wait: u64) -> u64 {
        let mut s = self.state.lock();
        let db = busy.saturating_sub(s.busy);
        let dl = lat.saturating_sub(s.lat);
        let dw = wait.saturating_sub(s.wait);
        let waited = if dl + dw == 0 {
            0.0
        } else {
            (dw as f64 / (dl + dw) as f64).min(MAX_CORE_WAIT_SHARE)
        };
        s.net += (db as f64 * (1.0 - waited)) as u64;
        (s.busy, s.lat, s.wait) = (busy, lat, wait);
        s.net
    }
}

/// The online bandwidth estimate of one direction: an exponentially weighted mean of
/// bytes / busy time over sampling intervals that saw enough traffic to mean something.
#[derive(Debug, Default)]
pub struct Estimate {
    /// f64 bits; 0 = no estimate yet.
    bps: AtomicU64,
    last_bytes: AtomicU64,
    last_busy: AtomicU64,
}

/// An interval must have moved this much, busy this long, to update an estimate.
pub const MIN_SAMPLE_BYTES: u64 = 16 << 20;
pub const MIN_SAMPLE_BUSY_NS: u64 = 50_000_000;
/// ... or have been busy this long: a tier that stalls (completes little or nothing while
/// requests wait on it) must pull its estimate down, not freeze it.
pub const STALL_BUSY_NS: u64 = 1_000_000_000;
/// Weight of the newest sample when it is above the estimate...
pub const EWMA_ALPHA: f64 = 0.3;
/// ... and when it is below: a tier that slows down is believed sooner than one that
/// speeds up, because every step waits for its slowest tier (overrating a tier costs the
/// whole step; underrating it costs only what it could have added).
pub const EWMA_ALPHA_DOWN: f64 = 0.5;

fn ewma(old: Option<f64>, sample: f64) -> f64 {
    match old {
        Some(old) if sample < old => old + EWMA_ALPHA_DOWN * (sample - old),
        Some(old) => old + EWMA_ALPHA * (sample - old),
        None => sample,
    }
}

impl Estimate {
    /// Folds one measured bandwidth (bytes/s) into the estimate.
    pub fn observe(&self, sample: f64) -> f64 {
        let new = ewma(self.get(), sample);
        self.bps.store(new.to_bits(), Ordering::Relaxed);
        new
    }

    pub fn get(&self) -> Option<f64> {
        let v = f64::from_bits(self.bps.load(Ordering::Relaxed));
        (v > 0.0).then_some(v)
    }

    /// Takes a sample from the running totals; returns the new estimate if it changed.
    pub fn sample(&self, bytes: u64, busy_ns: u64) -> Option<f64> {
        let db = bytes.saturating_sub(self.last_bytes.load(Ordering::Relaxed));
        let dt = busy_ns.saturating_sub(self.last_busy.load(Ordering::Relaxed));
        if dt < MIN_SAMPLE_BUSY_NS || (db < MIN_SAMPLE_BYTES && dt < STALL_BUSY_NS) {
            return None;
        }
        self.last_bytes.store(bytes, Ordering::Relaxed);
        self.last_busy.store(busy_ns, Ordering::Relaxed);
        let sample = db as f64 / (dt as f64 / 1e9);
        let new = ewma(self.get(), sample);
        self.bps.store(new.to_bits(), Ordering::Relaxed);
        Some(new)
    }
}

/// Queueing seen from one node: a tier whose latency per byte rises while the throughput it
/// delivers does not is saturated, whoever else loads it. The busy-time estimates cannot
/// tell: a queue keeps the tier busy, and a writer from outside the job shows up only as
/// longer requests. Little's law in one line: with the tier able to serve more, deeper
/// queues bring more throughput at the same latency; saturated, they bring only latency.
///
/// The reference is the period with the lowest latency per byte seen (and its throughput);
/// a period is saturated when its latency per byte is at least [`QUEUE_LATENCY`] times that
/// while its throughput is at most [`QUEUE_THROUGHPUT`] times the reference's.
#[derive(Debug, Default)]
pub struct Queueing {
    state: parking_lot::Mutex<QueueState>,
}

#[derive(Debug, Default)]
struct QueueState {
    /// Counters at the last period: (nanoseconds of request latency, bytes, requests, when).
    last: Option<(u64, u64, u64, std::time::Instant)>,
    /// (latency ns per byte, throughput bytes/s) of the least queued period so far.
    reference: Option<(f64, f64)>,
    saturated: bool,
}

/// Latency per byte against the reference that counts as queueing ...
pub const QUEUE_LATENCY: f64 = 2.0;
/// ... while the throughput has not grown beyond this multiple of the reference's.
pub const QUEUE_THROUGHPUT: f64 = 1.25;
/// A period must have completed this many requests and bytes to be judged.
pub const QUEUE_MIN_REQUESTS: u64 = 8;
pub const QUEUE_MIN_BYTES: u64 = 4 << 20;

/// One period's judgement: `lat_per_byte` (ns/byte) and `tput` (bytes/s) against the
/// `reference`, which it updates when this period is less queued. Pure, for the tests.
pub fn judge_queueing(reference: &mut Option<(f64, f64)>, lat_per_byte: f64, tput: f64) -> bool {
    match *reference {
        Some((l, _)) if lat_per_byte >= l => {
            lat_per_byte >= QUEUE_LATENCY * l && tput <= QUEUE_THROUGHPUT * reference.unwrap().1
        }
        _ => {
            *reference = Some((lat_per_byte, tput));
            false
        }
    }
}

impl Queueing {
    /// Takes one period from the running totals (`lat_ns` summed over completed requests,
    /// `bytes`, `requests`) at `now`; returns whether the tier is saturated now. A period
    /// with too little traffic keeps the last judgement.
    pub fn sample(&self, lat_ns: u64, bytes: u64, requests: u64, now: std::time::Instant) -> bool {
        let mut st = self.state.lock();
        let Some((l0, b0, r0, t0)) = st.last else {
            st.last = Some((lat_ns, bytes, requests, now));
            return false;
        };
        let (dl, db, dr) = (
            lat_ns.saturating_sub(l0),
            bytes.saturating_sub(b0),
            requests.saturating_sub(r0),
        );
        if dr < QUEUE_MIN_REQUESTS || db < QUEUE_MIN_BYTES {
            if now.saturating_duration_since(t0) > std::time::Duration::from_secs(5) {
                // Quiet for a while: no queue of ours to judge, and no claim of one.
                st.last = Some((lat_ns, bytes, requests, now));
                st.saturated = false;
            }
            return st.saturated;
        }
        let dt = now.saturating_duration_since(t0).as_secs_f64().max(1e-3);
        st.last = Some((lat_ns, bytes, requests, now));
        let was = st.saturated;
        st.saturated = judge_queueing(&mut st.reference, dl as f64 / db as f64, db as f64 / dt);
        if st.saturated != was {
            log::debug!("queueing: saturated {}", st.saturated);
        }
        st.saturated
    }

    pub fn saturated(&self) -> bool {
        self.state.lock().saturated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queueing_is_latency_up_with_throughput_flat() {
        let mut r = None;
        // First period: the reference.
        assert!(!judge_queueing(&mut r, 10.0, 100.0));
        // Deeper queues that the tier serves: latency a bit up, throughput well up.
        assert!(!judge_queueing(&mut r, 15.0, 300.0));
        // Latency doubled, throughput the same: saturated (by us or anyone).
        assert!(judge_queueing(&mut r, 20.0, 110.0));
        // A writer from outside: latency up, our throughput down.
        assert!(judge_queueing(&mut r, 40.0, 50.0));
        // Latency doubled but throughput doubled too: a deeper queue that paid off.
        assert!(!judge_queueing(&mut r, 20.0, 200.0));
        // A faster period becomes the reference.
        assert!(!judge_queueing(&mut r, 5.0, 100.0));
        assert_eq!(r, Some((5.0, 100.0)));
        assert!(!judge_queueing(&mut r, 9.0, 100.0));
        assert!(judge_queueing(&mut r, 10.0, 100.0));
    }

    #[test]
    fn queueing_samples_periods_with_enough_traffic() {
        let q = Queueing::default();
        let t0 = std::time::Instant::now();
        let s = std::time::Duration::from_secs(1);
        let mib = 1u64 << 20;
        assert!(!q.sample(0, 0, 0, t0));
        // 64 MiB in 64 requests at 1 ms each, then the same bytes at 4 ms each.
        assert!(!q.sample(64_000_000, 64 * mib, 64, t0 + s));
        assert!(q.sample(64_000_000 + 256_000_000, 128 * mib, 128, t0 + 2 * s));
        // Too little traffic to judge: the judgement stands, until the tier is quiet 5 s.
        assert!(q.sample(330_000_000, 128 * mib + 1, 129, t0 + 3 * s));
        assert!(!q.sample(330_000_000, 128 * mib + 1, 129, t0 + 9 * s));
    }

    #[test]
    fn estimate_observe_is_an_ewma() {
        let e = Estimate::default();
        assert_eq!(e.observe(100.0), 100.0);
        assert_eq!(e.observe(200.0), 100.0 + EWMA_ALPHA * 100.0);
        // Down moves faster than up.
        assert_eq!(e.observe(30.0), 130.0 + EWMA_ALPHA_DOWN * (30.0 - 130.0));
    }

    #[test]
    fn estimate_ignores_idle_time_and_small_samples() {
        let e = Estimate::default();
        assert_eq!(e.sample(1 << 20, 500_000_000), None, "too few bytes");
        // 100 MB moved in 0.1 s of busy time (however long the wall-clock interval was).
        let v = e.sample(100_000_000, 100_000_000).unwrap();
        assert!((v - 1e9).abs() < 1.0, "{v}");
        // Next interval half as fast: the mean moves by the downward alpha toward it.
        let v = e.sample(200_000_000, 300_000_000).unwrap();
        assert!(
            (v - (1e9 + EWMA_ALPHA_DOWN * (0.5e9 - 1e9))).abs() < 1.0,
            "{v}"
        );
        // A stall: busy for 2 s with nothing completed still counts, and pulls it down.
        let stalled = e.sample(200_000_000, 2_300_000_000).unwrap();
        assert!(stalled < v * 0.75, "{stalled} vs {v}");
    }

    #[test]
    fn net_busy_takes_the_core_wait_share_out_of_each_period() {
        let n = NetBusy::default();
        // 1 s busy, requests spent 3 s at the tier and 1 s waiting for a core: 0.75 s.
        assert_eq!(
            n.advance(1_000_000_000, 3_000_000_000, 1_000_000_000),
            750_000_000
        );
        // A period with no wait counts whole.
        assert_eq!(
            n.advance(2_000_000_000, 4_000_000_000, 1_000_000_000),
            1_750_000_000
        );
        // Busy with nothing completed (a stall): whole, a stalled tier must read slow.
        assert_eq!(
            n.advance(3_000_000_000, 4_000_000_000, 1_000_000_000),
            2_750_000_000
        );
        // Nothing but waiting: at most MAX_CORE_WAIT_SHARE is taken out.
        let got = n.advance(4_000_000_000, 4_000_000_000, 2_000_000_000);
        assert_eq!(
            got,
            2_750_000_000 + ((1.0 - MAX_CORE_WAIT_SHARE) * 1e9) as u64
        );
        // Never backwards.
        assert_eq!(n.advance(4_000_000_000, 4_000_000_000, 2_000_000_000), got);
    }

    #[test]
    fn an_estimate_from_net_busy_time_does_not_read_core_waits_as_a_slow_tier() {
        // A tier that moves 400 MB/s while busy; its requests' threads wait as long again
        // for a core (wall busy time doubled by the load).
        let (plain, net) = (Estimate::default(), Estimate::default());
        let nb = NetBusy::default();
        let (mut busy, mut lat, mut wait, mut bytes) = (0u64, 0u64, 0u64, 0u64);
        for _ in 0..5 {
            bytes += 400_000_000;
            busy += 2_000_000_000;
            lat += 4_000_000_000; // e.g. 4 requests in flight, 1 s each at the tier ...
            wait += 4_000_000_000; // ... and 1 s each waiting for a core
            plain.sample(bytes, busy);
            net.sample(bytes, nb.advance(busy, lat, wait));
        }
        let (p, n) = (plain.get().unwrap(), net.get().unwrap());
        assert!((p - 200e6).abs() < 1.0, "wall busy time halves it: {p}");
        assert!((n - 400e6).abs() < 1.0, "net busy time keeps it: {n}");
    }

    /// Ends noted late and out of order (a batch's requests, noted when it returns): the
    /// period closes at the latest end, so another thread's request that began and ended
    /// meanwhile counts, and so does the later of two ends noted in the other order.
    #[test]
    fn a_busy_period_closes_at_its_latest_end_whatever_order_they_are_noted_in() {
        let b = Busy::default();
        b.begin();
        let t0 = b.since.load(Ordering::Relaxed);
        b.begin();
        std::thread::sleep(std::time::Duration::from_millis(30));
        b.end(); // another thread's request, ended now
        b.end_at(t0 + 1_000_000); // the batch's, completed 1 ms in, noted last
        assert!(b.total_ns() >= 30_000_000, "{}", b.total_ns());
        let c = Busy::default();
        c.begin();
        c.begin();
        let s = c.since.load(Ordering::Relaxed);
        c.end_at(s + 50_000_000);
        c.end_at(s + 10_000_000);
        assert_eq!(c.total_ns(), 50_000_000);
    }

    #[test]
    fn busy_time_is_the_union_of_requests() {
        let b = Busy::default();
        b.begin();
        b.begin();
        std::thread::sleep(std::time::Duration::from_millis(20));
        b.end();
        b.end();
        let t = b.total_ns();
        assert!(t >= 20_000_000, "{t}");
        assert!(t < 2_000_000_000, "{t}");
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(b.total_ns(), t, "idle time is not counted");
    }
}
