//! One storage tier: its folder, the lock that makes it ours, its bandwidth and its counters.
//!
//! A tier folder holds two things: `data/`, the mirrored directory tree with each file's
//! piece at the file's own path, and `.tierfs-meta/`, our private state (the lock file, the
//! format marker, the probe cache). Keeping user data under `data/` means no user name can
//! collide with our own files.

use crate::error::{Error, Result};
use crate::sys;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::lock::{Holder, TakenOver, TierLock};

/// How a daemon takes a tier's lock ([`crate::lock`]).
#[derive(Debug, Clone, Default)]
pub struct LockRequest {
    /// Recorded in the lock, so another mount can say where the tier is mounted.
    pub mountpoint: Option<PathBuf>,
    /// Recorded in the lock: what a killed scratch daemon leaves is removed by the next
    /// mount on its host.
    pub scratch: bool,
    /// Take over another host's lock (`tierfs mount --break-lock`).
    pub break_lock: bool,
}

/// The folder inside a tier that mirrors the mounted tree.
pub const DATA_DIR: &str = "data";
/// The folder inside a tier for tierfs's own files.
pub const META_DIR: &str = ".tierfs-meta";
/// Inside META_DIR: pieces of files that were unlinked or renamed over while the kernel
/// still referenced them, kept until it forgets them (POSIX: a removed file lives on while
/// referenced). Emptied at every mount, since no reference survives one.
pub const LIMBO_DIR: &str = "limbo";
/// Free space a tier keeps back before it stops taking new files: a full backing filesystem
/// misbehaves (ext4 reserves, Lustre grants), and the pieces already there must still grow.
pub const FREE_RESERVE: u64 = 64 << 20;

/// Requests in flight per tier when nothing else says (`open_tiers` sets the real bound).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 32;

/// Counters of one tier, updated lock-free on the data path.
#[derive(Debug, Default)]
pub struct TierCounters {
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub in_flight: AtomicU64,
    /// Backing operations that failed, all kinds together ...
    pub errors: AtomicU64,
    /// ... and of those, the data reads and data writes.
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
    /// Files that have a piece on this tier.
    pub files: AtomicU64,
    /// Logical bytes of pieces on this tier (what `capacity` limits).
    pub used: AtomicU64,
    /// Free space promised to cached data that is still only in memory (see
    /// [`Tier::try_reserve`]).
    pub reserved: AtomicU64,
    /// Nanoseconds spent in backing reads and writes (busy time, for bandwidth).
    pub read_ns: AtomicU64,
    pub write_ns: AtomicU64,
    /// Kernel passthrough handles open now, and opened since mount. Their I/O never reaches
    /// the daemon, so it shows in the device counters, not in the byte counters above.
    pub pt_open: AtomicU64,
    pub pt_opens_total: AtomicU64,
    /// Time with at least one read (write) in flight: bytes over busy time is what the tier
    /// delivers to us, with idle time left out.
    pub read_busy: Busy,
    pub write_busy: Busy,
}

/// Wall time during which at least one request of a kind was in flight.
#[derive(Debug, Default)]
pub struct Busy {
    in_flight: AtomicU64,
    /// Nanoseconds since [`epoch`] when the current busy period began.
    since: AtomicU64,
    total: AtomicU64,
}

fn epoch_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// Whether the [`epoch_ns`] time `t` (0 = never) is less than `ns` ago.
fn within(t: u64, ns: u64) -> bool {
    t != 0 && epoch_ns().saturating_sub(t) < ns
}

impl Busy {
    fn begin(&self) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.since.store(epoch_ns(), Ordering::Release);
        }
    }
    fn end(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let since = self.since.load(Ordering::Acquire);
            self.total
                .fetch_add(epoch_ns().saturating_sub(since), Ordering::Relaxed);
        }
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

/// Recovery probes: a tier whose share was cut and that has had no sample of its own
/// traffic for [`PROBE_IDLE_NS`] is measured with a small O_DIRECT write and read-back of
/// [`PROBE_BYTES`] in its `.tierfs-meta` folder, at most every [`PROBE_EVERY_NS`], so an
/// idle tier whose bandwidth came back regains its share.
pub const PROBE_BYTES: usize = 8 << 20;
pub const PROBE_EVERY_NS: u64 = 5_000_000_000;
pub const PROBE_IDLE_NS: u64 = 3_000_000_000;

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

/// Where a tier's bandwidth figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BandwidthSource {
    Config,
    Probe,
}

/// An open, locked tier.
#[derive(Debug)]
pub struct Tier {
    pub index: usize,
    pub name: String,
    pub root: PathBuf,
    pub data: PathBuf,
    /// Where unlinked but still referenced pieces wait (see [`LIMBO_DIR`]).
    pub limbo: PathBuf,
    pub read_bps: f64,
    pub write_bps: f64,
    pub bandwidth_source: BandwidthSource,
    pub capacity: Option<u64>,
    /// The tier's filesystem accepts O_DIRECT.
    pub direct_io: bool,
    /// It also accepts O_DIRECT of 1 KiB-aligned lengths (DeepSpeed's tails), which 4Kn
    /// drives and Lustre refuse.
    pub small_direct_io: bool,
    /// The tier's filesystem stores user xattrs (stripe layouts record themselves there).
    pub user_xattrs: bool,
    /// False after the tier failed in a way that means it is broken (EIO, EROFS).
    healthy: std::sync::atomic::AtomicBool,
    /// The last backing error on this tier, for the stats.
    last_error: parking_lot::Mutex<Option<String>>,
    /// The block device under the tier (`/sys/dev/block/MAJ:MIN/stat`), if any, and its
    /// sector counters at mount: bytes moved by passthrough are counted from there.
    device_stat: Option<PathBuf>,
    device_base: (u64, u64),
    pub counters: TierCounters,
    /// Admission of requests to this tier (bounded, by priority class).
    pub queue: crate::sched::TierQueue,
    /// Online bandwidth estimates from the daemon's own traffic.
    pub est_read: Estimate,
    pub est_write: Estimate,
    /// Whether the tier queues (latency per byte up, throughput not).
    pub queueing: Queueing,
    /// Left out of a degraded mount (its folder was missing or unusable): nothing of it is
    /// opened, created or read.
    pub missing: bool,
    /// [`epoch_ns`] of the last estimate update from traffic, of the last probe start, and
    /// probes finished but not yet folded into the shares / run since mount.
    last_sample_ns: AtomicU64,
    last_probe_ns: AtomicU64,
    probe_running: std::sync::atomic::AtomicBool,
    probe_fresh: std::sync::atomic::AtomicBool,
    pub probes: AtomicU64,
    /// With `adapt`: too slow next to the fastest tier to be given work
    /// ([`crate::placement::shares_with_pause`]); only recovery probes reach it.
    paused: std::sync::atomic::AtomicBool,
    /// Held from open until the tier is dropped or [`Tier::release_lock`].
    lock: parking_lot::Mutex<Option<TierLock>>,
}

impl Tier {
    /// Opens the tier folder `root` (which must exist), takes its lock, and makes the
    /// `data/` and `.tierfs-meta/` folders.
    pub fn open(
        index: usize,
        name: &str,
        root: &Path,
        read_bps: f64,
        write_bps: f64,
        bandwidth_source: BandwidthSource,
        capacity: Option<u64>,
    ) -> Result<Tier> {
        let mut t = Tier::open_for(index, name, root, capacity, &LockRequest::default())?;
        t.read_bps = read_bps;
        t.write_bps = write_bps;
        t.bandwidth_source = bandwidth_source;
        Ok(t)
    }

    /// [`Tier::open`] with the lock taken as `req` says (what the record names, and whether
    /// another host's lock may be broken); bandwidths start at zero.
    pub fn open_for(
        index: usize,
        name: &str,
        root: &Path,
        capacity: Option<u64>,
        req: &LockRequest,
    ) -> Result<Tier> {
        let (read_bps, write_bps, bandwidth_source) = (0.0, 0.0, BandwidthSource::Config);
        let meta = root.join(META_DIR);
        let data = root.join(DATA_DIR);
        for d in [&meta, &data] {
            if let Err(e) = std::fs::create_dir(d) {
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(Error::tier(name, "mkdir", d, e));
                }
            }
        }
        let limbo = meta.join(LIMBO_DIR);
        let me = Holder::me("mount", req.mountpoint.as_deref(), req.scratch);
        let lock = match TierLock::acquire(root, &meta, me, req.break_lock) {
            Ok((lock, taken)) => {
                match taken {
                    None => {}
                    Some(TakenOver::Stale(h)) => {
                        log::warn!(
                            "tier '{name}': took over the stale lock of a tierfs daemon that is \
                             gone ({}) in {}",
                            h.describe(),
                            root.display()
                        );
                        if h.scratch && req.scratch {
                            // That daemon was killed before it could throw its scratch data
                            // away; this mount would otherwise show it as if it were new.
                            log::warn!(
                                "tier '{name}': discarding the scratch data it left in {}",
                                data.display()
                            );
                            std::fs::remove_dir_all(&data)
                                .and_then(|_| std::fs::create_dir(&data))
                                .map_err(|e| Error::tier(name, "empty", &data, e))?;
                        }
                    }
                    Some(TakenOver::Broken(h)) => log::warn!(
                        "tier '{name}': broke the lock of {} in {} (--break-lock)",
                        h.describe(),
                        root.display()
                    ),
                    Some(TakenOver::Unreadable) => log::warn!(
                        "tier '{name}': replaced an unreadable lock record in {} \
                         (--break-lock)",
                        root.display()
                    ),
                }
                lock
            }
            Err(e) => {
                return Err(Error::tier(
                    name,
                    "lock",
                    meta.join(crate::lock::RECORD),
                    std::io::Error::new(e.kind(), e.to_string()),
                ))
            }
        };
        let format = meta.join("format");
        if !format.exists() {
            let text = format!(
                "tierfs tier format {}\nname {}\n",
                crate::layout::FORMAT_VERSION,
                name
            );
            std::fs::write(&format, text).map_err(|e| Error::tier(name, "write", &format, e))?;
        } else if let Ok(text) = std::fs::read_to_string(&format) {
            let v = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("tierfs tier format "))
                .and_then(|v| v.trim().parse::<u32>().ok());
            if v != Some(crate::layout::FORMAT_VERSION) {
                return Err(Error::tier(
                    name,
                    "check format of",
                    &format,
                    std::io::Error::other(format!(
                        "this tier was written by an incompatible tierfs (format {v:?}, this tierfs reads {})",
                        crate::layout::FORMAT_VERSION
                    )),
                ));
            }
        }
        // The lock is ours: what a previous daemon left in limbo is unreferenced now.
        if limbo.exists() {
            if let Err(e) = std::fs::remove_dir_all(&limbo) {
                log::warn!("tier '{name}': cannot empty {}: {e}", limbo.display());
            }
        }
        if let Err(e) = std::fs::create_dir(&limbo) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(Error::tier(name, "mkdir", &limbo, e));
            }
        }
        let direct_io = crate::io::dir_accepts_direct_io(&data);
        let user_xattrs = {
            let f = meta.join(format!(".xattr-check-{}", std::process::id()));
            let ok = std::fs::write(&f, b"").is_ok()
                && crate::sys::lsetxattr(&f, std::ffi::OsStr::new("user.tierfs.check"), b"1", 0)
                    .is_ok();
            let _ = std::fs::remove_file(&f);
            ok
        };
        let small_direct_io = direct_io && crate::io::dir_accepts_direct_io_of(&data, 1024);
        let device_stat = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(&data).ok().and_then(|m| {
                // SAFETY: major/minor are pure arithmetic on the device number.
                let (ma, mi) = (libc::major(m.dev()), libc::minor(m.dev()));
                let p = PathBuf::from(format!("/sys/dev/block/{ma}:{mi}/stat"));
                p.exists().then_some(p)
            })
        };
        let device_base = device_stat
            .as_deref()
            .and_then(read_device_bytes)
            .unwrap_or((0, 0));
        Ok(Tier {
            index,
            name: name.to_string(),
            root: root.to_path_buf(),
            data,
            limbo,
            read_bps,
            write_bps,
            bandwidth_source,
            capacity,
            direct_io,
            small_direct_io,
            user_xattrs,
            healthy: std::sync::atomic::AtomicBool::new(true),
            last_error: parking_lot::Mutex::new(None),
            device_stat,
            device_base,
            counters: TierCounters::default(),
            queue: crate::sched::TierQueue::new(DEFAULT_MAX_IN_FLIGHT, false),
            est_read: Estimate::default(),
            est_write: Estimate::default(),
            queueing: Queueing::default(),
            missing: false,
            last_sample_ns: AtomicU64::new(epoch_ns().max(1)),
            last_probe_ns: AtomicU64::new(0),
            probe_running: Default::default(),
            probe_fresh: Default::default(),
            probes: AtomicU64::new(0),
            paused: Default::default(),
            lock: parking_lot::Mutex::new(Some(lock)),
        })
    }

    /// A tier left out of a degraded mount: it keeps its place (stripe layouts name tiers
    /// by index) but is never touched; `why` is shown as its last error.
    pub fn missing(index: usize, name: &str, root: &Path, why: &str) -> Tier {
        Tier {
            index,
            name: name.to_string(),
            root: root.to_path_buf(),
            data: root.join(DATA_DIR),
            limbo: root.join(META_DIR).join(LIMBO_DIR),
            read_bps: 0.0,
            write_bps: 0.0,
            bandwidth_source: BandwidthSource::Config,
            capacity: Some(0),
            direct_io: false,
            small_direct_io: false,
            user_xattrs: true,
            healthy: std::sync::atomic::AtomicBool::new(false),
            last_error: parking_lot::Mutex::new(Some(why.to_string())),
            device_stat: None,
            device_base: (0, 0),
            counters: TierCounters::default(),
            queue: crate::sched::TierQueue::new(DEFAULT_MAX_IN_FLIGHT, false),
            est_read: Estimate::default(),
            est_write: Estimate::default(),
            queueing: Queueing::default(),
            missing: true,
            last_sample_ns: AtomicU64::new(0),
            last_probe_ns: AtomicU64::new(0),
            probe_running: Default::default(),
            probe_fresh: Default::default(),
            probes: AtomicU64::new(0),
            paused: Default::default(),
            lock: parking_lot::Mutex::new(None),
        }
    }

    /// Lets go of the tier's lock now, not when the tier is dropped: a daemon ending in
    /// scratch mode removes the tier folder, lock included, after this.
    pub fn release_lock(&self) {
        drop(self.lock.lock().take());
    }

    /// Whether the tier is usable for new data.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Whether placement gives the tier no new work now because it measured too slow.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    /// What the stats call the tier's state: "ok", "failed" (EIO/EROFS seen; no new data
    /// until remounted) or "missing" (left out of a degraded mount).
    pub fn state(&self) -> &'static str {
        if self.missing {
            "missing"
        } else if self.is_healthy() {
            "ok"
        } else {
            "failed"
        }
    }

    /// The last backing error seen on this tier.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    /// Records a failure; errors that mean the tier itself is broken mark it unhealthy.
    pub fn note_error(&self, e: &std::io::Error) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock() = Some(e.to_string());
        if matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EROFS))
            && self.healthy.swap(false, Ordering::Relaxed)
        {
            log::error!(
                "tier '{}' failed ({e}); it takes no new data until remounted",
                self.name
            );
        }
    }

    /// Bytes read and written on the tier's block device since mount (all processes, and
    /// the passthrough I/O the daemon never sees); `None` without a block device (NFS,
    /// Lustre).
    pub fn device_bytes(&self) -> Option<(u64, u64)> {
        let (r, w) = read_device_bytes(self.device_stat.as_deref()?)?;
        Some((
            r.saturating_sub(self.device_base.0),
            w.saturating_sub(self.device_base.1),
        ))
    }

    /// Samples the online estimates (called about once a second by the daemon); true when
    /// either changed.
    pub fn sample_bandwidth(&self) -> bool {
        let c = &self.counters;
        let r = self
            .est_read
            .sample(c.bytes_read.load(Ordering::Relaxed), c.read_busy.total_ns());
        let w = self.est_write.sample(
            c.bytes_written.load(Ordering::Relaxed),
            c.write_busy.total_ns(),
        );
        let was = self.queueing.saturated();
        let now = self.queueing.sample(
            c.read_ns.load(Ordering::Relaxed) + c.write_ns.load(Ordering::Relaxed),
            c.bytes_read.load(Ordering::Relaxed) + c.bytes_written.load(Ordering::Relaxed),
            c.reads.load(Ordering::Relaxed) + c.writes.load(Ordering::Relaxed),
            std::time::Instant::now(),
        );
        if now != was {
            if now {
                log::info!(
                    "tier '{}' queues: its latency per byte rose to {QUEUE_LATENCY}x or more                      while its throughput did not; it is saturated",
                    self.name
                );
            } else {
                log::info!("tier '{}' no longer queues", self.name);
            }
        }
        if r.is_some() || w.is_some() {
            self.last_sample_ns
                .store(epoch_ns().max(1), Ordering::Relaxed);
        }
        let probed = self.probe_fresh.swap(false, Ordering::AcqRel);
        r.is_some() || w.is_some() || probed
    }

    /// Claims a recovery probe if one is due: the tier's share was cut (`cut`), its own
    /// traffic gave no sample for [`PROBE_IDLE_NS`], none ran in the last
    /// [`PROBE_EVERY_NS`] and none is running. The caller then runs [`Tier::probe_now`]
    /// (on a thread of its own: a stalled tier must not stall the estimator).
    pub fn claim_probe(&self, cut: bool) -> bool {
        let now = epoch_ns();
        if !cut
            || self.missing
            || !self.is_healthy()
            || within(self.last_sample_ns.load(Ordering::Relaxed), PROBE_IDLE_NS)
            || within(self.last_probe_ns.load(Ordering::Relaxed), PROBE_EVERY_NS)
            || self.probe_running.swap(true, Ordering::AcqRel)
        {
            return false;
        }
        self.last_probe_ns.store(now.max(1), Ordering::Relaxed);
        true
    }

    /// Runs a claimed probe and folds its result into the estimates, capped at the
    /// configured or probed figure (a probe this small says whether the tier recovered,
    /// not how far beyond it could go); the next [`Tier::sample_bandwidth`] reports it.
    pub fn probe_now(&self) {
        match self.run_probe() {
            Ok((r, w)) => {
                let r = self.est_read.observe(r.min(self.read_bps.max(1.0)));
                let w = self.est_write.observe(w.min(self.write_bps.max(1.0)));
                self.probes.fetch_add(1, Ordering::Relaxed);
                log::info!(
                    "probe of idle tier '{}' ({} MiB written and read): estimates now read {:.0} MB/s, write {:.0} MB/s",
                    self.name,
                    PROBE_BYTES >> 20,
                    r / 1e6,
                    w / 1e6
                );
                self.probe_fresh.store(true, Ordering::Release);
            }
            Err(e) => {
                log::warn!("probe of tier '{}' failed: {e}", self.name);
                self.note_error(&e);
            }
        }
        self.probe_running.store(false, Ordering::Release);
    }

    /// Writes [`PROBE_BYTES`] to a probe file in `.tierfs-meta` and reads them back, 1 MiB
    /// O_DIRECT requests from 4 threads at once; (read, write) bytes/s.
    fn run_probe(&self) -> std::io::Result<(f64, f64)> {
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        const THREADS: usize = 4;
        let path = self.root.join(META_DIR).join("probe-live");
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(true).truncate(false);
        if self.direct_io {
            o.custom_flags(libc::O_DIRECT);
        }
        let f = o.open(&path)?;
        let chunk = PROBE_BYTES / THREADS;
        let run = |write: bool| -> std::io::Result<f64> {
            let start = std::time::Instant::now();
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..THREADS)
                    .map(|i| {
                        let f = &f;
                        s.spawn(move || -> std::io::Result<()> {
                            let mut buf = crate::io::AlignedBuf::zeroed(1 << 20);
                            buf.fill(0x5a);
                            let mut off = i * chunk;
                            while off < (i + 1) * chunk {
                                if write {
                                    f.write_all_at(&buf, off as u64)?;
                                } else {
                                    f.read_exact_at(&mut buf, off as u64)?;
                                }
                                off += buf.len();
                            }
                            Ok(())
                        })
                    })
                    .collect();
                handles.into_iter().try_for_each(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(std::io::Error::other("probe thread panicked")))
                })
            })?;
            Ok(PROBE_BYTES as f64 / start.elapsed().as_secs_f64().max(1e-6))
        };
        let w = run(true)?;
        let r = run(false)?;
        Ok((r, w))
    }

    /// The bandwidths placement should use now: the online estimate where there is one,
    /// bounded to [1/20, 2] x the configured or probed figure so a sample taken at a low
    /// queue depth cannot swing the shares beyond reason.
    pub fn current_bandwidth(&self) -> (f64, f64) {
        let pick = |est: Option<f64>, base: f64| match est {
            Some(e) if base > 0.0 => e.clamp(base / 20.0, base * 2.0),
            Some(e) => e,
            None => base,
        };
        (
            pick(self.est_read.get(), self.read_bps),
            pick(self.est_write.get(), self.write_bps),
        )
    }

    /// The probe cache file of a tier folder.
    pub fn probe_cache(root: &Path) -> PathBuf {
        root.join(META_DIR).join("probe.json")
    }

    /// Where the piece of unlinked-but-referenced inode `ino` waits on this tier.
    pub fn limbo_path(&self, ino: u64) -> PathBuf {
        self.limbo.join(ino.to_string())
    }

    /// Backing calls on paths of this tier ([`Tier::path`], [`Tier::limbo_path`]), made
    /// relative to its folder and never through a symlink in it (one planted in the tier
    /// folder by hand gives ELOOP).
    pub fn fs(&self) -> crate::beneath::Beneath<'_> {
        crate::beneath::Beneath::new(&self.root)
    }

    /// The backing path of a relative path in this tier.
    pub fn path(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.data.clone()
        } else {
            self.data.join(rel)
        }
    }

    /// The backing filesystem's space.
    pub fn space(&self) -> Option<sys::Space> {
        if self.missing {
            return None;
        }
        sys::statvfs(&self.data).ok()
    }

    /// Bytes this tier can still take: the smaller of its filesystem's free space (less the
    /// reserve and the space promised to cached data) and what is left of its configured
    /// capacity.
    pub fn room(&self) -> u64 {
        let fs_room = self
            .space()
            .map(|s| {
                s.avail
                    .saturating_sub(FREE_RESERVE)
                    .saturating_sub(self.counters.reserved.load(Ordering::Relaxed))
            })
            .unwrap_or(0);
        match self.capacity {
            Some(c) => fs_room.min(c.saturating_sub(self.counters.used.load(Ordering::Relaxed))),
            None => fs_room,
        }
    }

    /// Whether a new file of about `bytes` may be placed here.
    pub fn has_room_for(&self, bytes: u64) -> bool {
        self.room() > bytes
    }

    /// Promises `bytes` of free space to data the cache holds in memory for this tier, so
    /// that nothing else takes it before the write-back: false (nothing promised) when that
    /// would leave less than [`FREE_RESERVE`] free or take the tier past its `capacity`.
    /// Without the promise the cache took writes that no tier could hold at write-back.
    pub fn try_reserve(&self, bytes: u64) -> bool {
        if bytes == 0 {
            return true;
        }
        if !self.within_capacity(bytes) {
            return false;
        }
        let Some(free) = self.space().map(|s| s.avail.saturating_sub(FREE_RESERVE)) else {
            return false;
        };
        self.counters
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                (r + bytes <= free).then_some(r + bytes)
            })
            .is_ok()
    }

    /// Gives back space promised with [`Tier::try_reserve`].
    pub fn unreserve(&self, bytes: u64) {
        let _ = self
            .counters
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                Some(r.saturating_sub(bytes))
            });
    }

    /// Whether a piece written through (not cached) may grow by `bytes`: not past the
    /// tier's `capacity`, and not into free space promised to cached data. A write that may
    /// not is handled like one the tier refused with ENOSPC (the file moves), so `capacity`
    /// holds for files that grow after they were placed (DeepSpeed creates its files empty).
    pub fn may_grow(&self, bytes: u64) -> bool {
        if !self.within_capacity(bytes) {
            return false;
        }
        let r = self.counters.reserved.load(Ordering::Acquire);
        r == 0 || self.space().is_some_and(|s| s.avail >= r + bytes)
    }

    /// Whether `bytes` more keep the tier within its configured `capacity`.
    fn within_capacity(&self, bytes: u64) -> bool {
        self.capacity
            .is_none_or(|c| self.counters.used.load(Ordering::Relaxed) + bytes <= c)
    }

    pub fn add_used(&self, delta: i64) {
        if delta >= 0 {
            self.counters
                .used
                .fetch_add(delta as u64, Ordering::Relaxed);
        } else {
            let d = (-delta) as u64;
            let _ = self
                .counters
                .used
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                    Some(u.saturating_sub(d))
                });
        }
    }
}

/// Scratch mode, part one (lock still held): removes the tier's data and everything of
/// tierfs's own in its `.tierfs-meta/` but the lock files.
pub fn discard_contents(root: &Path) -> std::io::Result<()> {
    remove_if_there(&root.join(DATA_DIR))?;
    let meta = root.join(META_DIR);
    let keep = [crate::lock::RECORD, crate::lock::NODE_LOCK];
    match std::fs::read_dir(&meta) {
        Ok(rd) => {
            for e in rd {
                let e = e?;
                if keep.iter().any(|k| e.file_name() == *k) {
                    continue;
                }
                remove_if_there(&e.path())?;
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Scratch mode, part two (lock released): removes `.tierfs-meta/` and the tier folder
/// itself. Anything in the folder that is not tierfs's (a user's file next to `data/`) is
/// kept, and with it the folder: the error lists it. A tier somebody locked meanwhile is
/// left alone.
pub fn remove_folder(root: &Path) -> std::result::Result<(), String> {
    let meta = root.join(META_DIR);
    if let Some(h) = crate::lock::holder_of(&meta) {
        return Err(format!(
            "kept {}: it was locked again meanwhile ({})",
            root.display(),
            h.describe()
        ));
    }
    remove_if_there(&meta).map_err(|e| format!("cannot remove {}: {e}", meta.display()))?;
    match std::fs::remove_dir(root) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {
            let mut names: Vec<String> = std::fs::read_dir(root)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            Err(format!(
                "kept {}: it holds files tierfs did not make ({}); remove them by hand",
                root.display(),
                names.join(", ")
            ))
        }
        Err(e) => Err(format!("cannot remove {}: {e}", root.display())),
    }
}

fn remove_if_there(p: &Path) -> std::io::Result<()> {
    let r = match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) => Err(e),
    };
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

fn read_device_bytes(stat: &Path) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(stat).ok()?;
    let f: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // Fields 3 and 7 (1-based) are sectors read and written, in 512-byte units.
    Some((f.get(2)? * 512, f.get(6)? * 512))
}

/// Counts one backing request for the stats while it is in flight.
pub struct InFlight<'a> {
    tier: &'a Tier,
    write: bool,
    bytes: u64,
    start: std::time::Instant,
}

impl<'a> InFlight<'a> {
    pub fn start(tier: &'a Tier, write: bool, bytes: u64) -> Self {
        tier.counters.in_flight.fetch_add(1, Ordering::Relaxed);
        if write {
            tier.counters.write_busy.begin();
        } else {
            tier.counters.read_busy.begin();
        }
        InFlight {
            tier,
            write,
            bytes,
            start: std::time::Instant::now(),
        }
    }

    /// Records the outcome; `done` is the bytes actually moved.
    pub fn finish(self, ok: bool, done: u64) {
        let c = &self.tier.counters;
        let ns = self.start.elapsed().as_nanos() as u64;
        if ok {
            if self.write {
                c.writes.fetch_add(1, Ordering::Relaxed);
                c.bytes_written.fetch_add(done, Ordering::Relaxed);
                c.write_ns.fetch_add(ns, Ordering::Relaxed);
            } else {
                c.reads.fetch_add(1, Ordering::Relaxed);
                c.bytes_read.fetch_add(done, Ordering::Relaxed);
                c.read_ns.fetch_add(ns, Ordering::Relaxed);
            }
        }
        // Failures are counted by `Tier::note_error`, which also judges the tier's health.
        let _ = self.bytes;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let c = &self.tier.counters;
        if self.write {
            c.write_busy.end();
        } else {
            c.read_busy.end();
        }
        c.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_open_of_a_tier_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let t = Tier::open(0, "a", d.path(), 1.0, 1.0, BandwidthSource::Config, None).unwrap();
        assert!(t.data.is_dir());
        let e = Tier::open(0, "a", d.path(), 1.0, 1.0, BandwidthSource::Config, None).unwrap_err();
        assert!(e.to_string().contains("in use by another tierfs"), "{e}");
        drop(t);
        Tier::open(0, "a", d.path(), 1.0, 1.0, BandwidthSource::Config, None).unwrap();
    }

    #[test]
    fn scratch_removal_keeps_what_tierfs_did_not_make() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("t");
        std::fs::create_dir(&root).unwrap();
        let req = LockRequest {
            scratch: true,
            ..Default::default()
        };
        let t = Tier::open_for(0, "t", &root, None, &req).unwrap();
        std::fs::create_dir_all(t.data.join("zero_stage_3/rank0")).unwrap();
        std::fs::write(t.data.join("zero_stage_3/rank0/x.swp"), b"x").unwrap();
        discard_contents(&root).unwrap();
        assert!(!t.data.exists());
        assert!(root.join(META_DIR).join(crate::lock::RECORD).exists());
        // Still locked: part two refuses.
        assert!(remove_folder(&root).unwrap_err().contains("locked again"));
        t.release_lock();
        remove_folder(&root).unwrap();
        assert!(!root.exists());

        // A user's own file next to data/ keeps the folder.
        std::fs::create_dir(&root).unwrap();
        let t = Tier::open_for(0, "t", &root, None, &req).unwrap();
        std::fs::write(root.join("notes.txt"), b"mine").unwrap();
        discard_contents(&root).unwrap();
        t.release_lock();
        let e = remove_folder(&root).unwrap_err();
        assert!(e.contains("notes.txt"), "{e}");
        assert_eq!(std::fs::read(root.join("notes.txt")).unwrap(), b"mine");
        assert!(!root.join(META_DIR).exists() && !root.join(DATA_DIR).exists());
    }

    #[test]
    fn a_stale_scratch_lock_takes_its_data_with_it() {
        let d = tempfile::tempdir().unwrap();
        let meta = d.path().join(META_DIR);
        std::fs::create_dir_all(d.path().join(DATA_DIR)).unwrap();
        std::fs::create_dir_all(&meta).unwrap();
        // A scratch daemon of this host that was killed: its record names a pid that is gone.
        let stale = || {
            let mut c = std::process::Command::new("true").spawn().unwrap();
            let mut h = Holder::me("mount", Some(Path::new("/mnt/old")), true);
            h.pid = c.id();
            c.wait().unwrap();
            std::fs::write(d.path().join(DATA_DIR).join("old.swp"), b"old").unwrap();
            std::fs::write(meta.join(crate::lock::RECORD), h.to_text()).unwrap();
        };
        stale();
        let kept = Tier::open_for(0, "t", d.path(), None, &LockRequest::default()).unwrap();
        assert!(
            kept.data.join("old.swp").exists(),
            "a mount without scratch keeps the data"
        );
        drop(kept);
        stale();
        let scratch = LockRequest {
            scratch: true,
            ..Default::default()
        };
        let t = Tier::open_for(0, "t", d.path(), None, &scratch).unwrap();
        assert!(t.data.is_dir());
        assert!(
            !t.data.join("old.swp").exists(),
            "a scratch mount discards it"
        );
    }

    #[test]
    fn probe_runs_only_when_cut_and_measures_the_tier() {
        let d = tempfile::tempdir().unwrap();
        let t = Tier::open(0, "t", d.path(), 1e9, 1e9, BandwidthSource::Config, None).unwrap();
        // A share that was not cut never probes; a fresh tier has just been "sampled".
        assert!(!t.claim_probe(false));
        assert!(!t.claim_probe(true));
        t.last_sample_ns.store(0, Ordering::Relaxed);
        assert!(t.claim_probe(true));
        // One at a time, and not again right away.
        assert!(!t.claim_probe(true));
        t.probe_now();
        assert!(!t.claim_probe(true));
        assert_eq!(t.probes.load(Ordering::Relaxed), 1);
        let (r, w) = (t.est_read.get().unwrap(), t.est_write.get().unwrap());
        assert!(r > 0.0 && r <= 1e9 && w > 0.0 && w <= 1e9, "{r} {w}");
        // The next sampling reports the probe once.
        assert!(t.sample_bandwidth());
        assert!(!t.sample_bandwidth());
        assert!(d.path().join(META_DIR).join("probe-live").exists());
    }

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

    #[test]
    fn capacity_limits_room() {
        let d = tempfile::tempdir().unwrap();
        let t = Tier::open(
            0,
            "a",
            d.path(),
            1.0,
            1.0,
            BandwidthSource::Config,
            Some(1000),
        )
        .unwrap();
        // The temp folder's file system has far more room than the cap, so the cap decides.
        let fs_room = t.space().unwrap().avail.saturating_sub(FREE_RESERVE);
        assert!(
            fs_room > 1000,
            "the temp file system is nearly full: {fs_room}"
        );
        assert_eq!(t.room(), 1000);
        t.add_used(900);
        assert_eq!(t.room(), 100);
        assert!(!t.has_room_for(200));
        // Growth of what is there is held to it too.
        assert!(t.may_grow(100) && !t.may_grow(101));
        assert!(!t.try_reserve(101));
        assert!(t.has_room_for(99));
        assert!(!t.has_room_for(100), "a file must fit with room to spare");
        t.add_used(200);
        assert_eq!(t.room(), 0, "over the cap: no room, no underflow");
        t.add_used(-5000);
        assert_eq!(
            t.room(),
            1000,
            "freed bytes come back, never below zero used"
        );
        assert!(t.has_room_for(200));
    }
}
