//! One storage tier: its folder, the lock that makes it ours, its bandwidth and its counters.
//!
//! A tier folder holds two things: `data/`, the mirrored directory tree with each file's
//! piece at the file's own path, and `.tierfs-meta/`, our private state (the lock file, the
//! format marker, the probe cache). Keeping user data under `data/` means no user name can
//! collide with our own files.
//!
//! The parts, one concept a file:
//! - `folder.rs`: a folder taken at mount and given up; [`identity`]: which tierfs it
//!   belongs to; [`scratch`]: what a scratch mount may take and remove;
//! - [`lock`]: who holds it, the record and the node lock that keep a second daemon, or
//!   `fsck`, off a folder in use;
//! - [`beneath`]: every backing call on its paths, relative to the folder and never through
//!   a symlink in it;
//! - [`resolve`]: what the tiers hold at one path, the one set of rules that the mount-time
//!   scan, `fsck` and `export` act on;
//! - `estimate.rs`: its bandwidth as the daemon sees it; `union.rs`: busy periods programs
//!   reported; [`admin`]: what an operator set for it; [`app`]: what programs moved through it.
//!
//! `lock`, `beneath` and `resolve` sat at the root of `src/`. They live here because each is
//! about the tier folders and nothing above them (they import only `sys`, `config` and
//! `layout`): a daemon, `fsck` and `export` reach a tier only through them. In `ondisk/`,
//! beside the offline tools, they would close a cycle: `ondisk` uses `tier` and `vfs`, and
//! both use them.

use crate::error::{Error, Result};
use crate::sys;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use lock::TierLock;

pub mod admin;
pub mod app;
pub mod beneath;
mod estimate;
mod folder;
pub mod identity;
pub mod lock;
pub mod resolve;
pub mod scratch;
mod union;
pub(crate) use estimate::epoch_ns_of;
use estimate::{epoch_ns, within};
pub use estimate::{
    judge_queueing, Busy, Estimate, NetBusy, Queueing, EWMA_ALPHA, EWMA_ALPHA_DOWN,
    MIN_SAMPLE_BUSY_NS, MIN_SAMPLE_BYTES, QUEUE_LATENCY, QUEUE_MIN_BYTES, QUEUE_MIN_REQUESTS,
    QUEUE_THROUGHPUT, STALL_BUSY_NS,
};
pub use folder::{discard_contents, empty_limbo, remove_folder};

/// How a daemon takes a tier's lock ([`lock`]).
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
    /// Nanoseconds spent in completed backing reads and writes, less the time their
    /// threads waited for a core (the queueing detector's latency) ...
    pub read_ns: AtomicU64,
    pub write_ns: AtomicU64,
    /// ... and that wait ([`crate::sys::thread_run_delay_ns`]): the machine's load, which
    /// the estimates take out of the busy time ([`NetBusy`]).
    pub read_core_wait_ns: AtomicU64,
    pub write_core_wait_ns: AtomicU64,
    /// Kernel passthrough handles open now, and opened since mount. Their I/O never reaches
    /// the daemon, so it shows in the device counters, not in the byte counters above.
    pub pt_open: AtomicU64,
    pub pt_opens_total: AtomicU64,
    /// Bytes programs under `tierfs run` moved through the pieces' own descriptors (the
    /// direct path), as they reported them; also in `bytes_read`/`bytes_written`.
    pub direct_bytes: AtomicU64,
    /// Direct-path leases of files with a piece on this tier, out now and since mount.
    pub direct_open: AtomicU64,
    pub direct_opens_total: AtomicU64,
    /// Time with at least one read (write) in flight: bytes over busy time is what the tier
    /// delivers to us, with idle time left out.
    pub read_busy: Busy,
    pub write_busy: Busy,
    /// Time with any request in flight, read or write (the union of the two above): a
    /// shared tier's busy rate for the ledger, which overlapping reads and writes would
    /// halve if the two were added.
    pub io_busy: Busy,
    /// The busy periods programs under `tierfs run` reported (reads, writes, either),
    /// merged, so only time no other report covered is added to the busy times above.
    pub direct_read: union::Union,
    pub direct_write: union::Union,
    pub direct_io: union::Union,
    /// What programs moved at the mount for files with a piece here, whichever path served
    /// them (the counters above are what reached the tier folder).
    pub app: app::AppCounters,
}

/// Recovery probes: a tier whose share was cut and that has had no sample of its own
/// traffic for [`PROBE_IDLE_NS`] is measured with a small O_DIRECT write and read-back of
/// [`PROBE_BYTES`] in its `.tierfs-meta` folder, at most every [`PROBE_EVERY_NS`], so an
/// idle tier whose bandwidth came back regains its share.
pub const PROBE_BYTES: usize = 8 << 20;
pub const PROBE_EVERY_NS: u64 = 5_000_000_000;
pub const PROBE_IDLE_NS: u64 = 3_000_000_000;

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
    /// The bound of the tier's admission queue, which the tier I/O (`tierio`) owns: requests
    /// in flight at most, and whether the tier serves one file at a time.
    pub max_in_flight: usize,
    pub exclusive: bool,
    /// Online bandwidth estimates from the daemon's own traffic.
    pub est_read: Estimate,
    pub est_write: Estimate,
    /// Whether the tier queues (latency per byte up, throughput not).
    pub queueing: Queueing,
    /// Busy time net of core waits, one period each for its readers: the two estimates
    /// and the shared-tier ledger ([`Tier::shared_busy_ns`]).
    net_read: NetBusy,
    net_write: NetBusy,
    net_shared: NetBusy,
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
    /// ([`crate::policy::placement::shares_with_pause`]); only recovery probes reach it.
    paused: std::sync::atomic::AtomicBool,
    /// What an operator set through `.tierfs/control`: paused, draining, a weight.
    pub admin: admin::TierAdmin,
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
        let lock = folder::take_lock(name, root, &meta, &data, req)?;
        folder::check_format(name, &meta)?;
        folder::make_limbo(name, &limbo)?;
        let caps = folder::Capabilities::of(&meta, &data);
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
            direct_io: caps.direct_io,
            small_direct_io: caps.small_direct_io,
            user_xattrs: caps.user_xattrs,
            healthy: std::sync::atomic::AtomicBool::new(true),
            last_error: parking_lot::Mutex::new(None),
            device_stat: caps.device_stat,
            device_base: caps.device_base,
            counters: TierCounters::default(),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            exclusive: false,
            est_read: Estimate::default(),
            est_write: Estimate::default(),
            queueing: Queueing::default(),
            net_read: NetBusy::default(),
            net_write: NetBusy::default(),
            net_shared: NetBusy::default(),
            missing: false,
            last_sample_ns: AtomicU64::new(epoch_ns().max(1)),
            last_probe_ns: AtomicU64::new(0),
            probe_running: Default::default(),
            probe_fresh: Default::default(),
            probes: AtomicU64::new(0),
            paused: Default::default(),
            admin: Default::default(),
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
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            exclusive: false,
            est_read: Estimate::default(),
            est_write: Estimate::default(),
            queueing: Queueing::default(),
            net_read: NetBusy::default(),
            net_write: NetBusy::default(),
            net_shared: NetBusy::default(),
            missing: true,
            last_sample_ns: AtomicU64::new(0),
            last_probe_ns: AtomicU64::new(0),
            probe_running: Default::default(),
            probe_fresh: Default::default(),
            probes: AtomicU64::new(0),
            paused: Default::default(),
            admin: Default::default(),
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

    /// Whether placement may put new data here: healthy, and neither paused nor drained
    /// by its operator (`.tierfs/control`). Files already here are read and written
    /// where they are either way.
    pub fn takes_new_data(&self) -> bool {
        self.is_healthy() && self.admin.state().takes_new_data()
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
        let (r, w) = folder::read_device_bytes(self.device_stat.as_deref()?)?;
        Some((
            r.saturating_sub(self.device_base.0),
            w.saturating_sub(self.device_base.1),
        ))
    }

    /// The block device's stat file (`/sys/dev/block/MAJ:MIN/stat`): tiers with the same
    /// one share a device. `None` without a block device.
    pub fn device_id(&self) -> Option<&Path> {
        self.device_stat.as_deref()
    }

    /// Samples the online estimates (called about once a second by the daemon); true when
    /// either changed.
    pub fn sample_bandwidth(&self) -> bool {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let read_busy = self.net_read.advance(
            c.read_busy.total_ns(),
            load(&c.read_ns),
            load(&c.read_core_wait_ns),
        );
        let write_busy = self.net_write.advance(
            c.write_busy.total_ns(),
            load(&c.write_ns),
            load(&c.write_core_wait_ns),
        );
        let r = self.est_read.sample(load(&c.bytes_read), read_busy);
        let w = self.est_write.sample(load(&c.bytes_written), write_busy);
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
                    "tier '{}' queues: its latency per byte rose to {QUEUE_LATENCY}x or more \
                     while its throughput did not; it is saturated",
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

    /// Nanoseconds with any request in flight, net of core waits ([`NetBusy`]): the busy
    /// time behind a shared tier's busy rate in the ledger. For one reader (the ledger's
    /// tick): each call closes a period.
    pub fn shared_busy_ns(&self) -> u64 {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        self.net_shared.advance(
            c.io_busy.total_ns(),
            load(&c.read_ns) + load(&c.write_ns),
            load(&c.read_core_wait_ns) + load(&c.write_core_wait_ns),
        )
    }

    /// Seconds completed requests' threads waited for a core, reads and writes.
    pub fn core_wait_s(&self) -> f64 {
        let c = &self.counters;
        (c.read_core_wait_ns.load(Ordering::Relaxed) + c.write_core_wait_ns.load(Ordering::Relaxed))
            as f64
            / 1e9
    }

    /// Claims a recovery probe if one is due: the tier's share was cut (`cut`), its own
    /// traffic gave no sample for [`PROBE_IDLE_NS`], none ran in the last
    /// [`PROBE_EVERY_NS`] and none is running. The caller then runs
    /// [`crate::tierio::recovery::probe`]
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

    /// Folds a claimed probe's result ([`crate::tierio::recovery::probe`]: read and write
    /// bytes/s) into the estimates, capped at the configured or probed figure (a probe this
    /// small says whether the tier recovered, not how far beyond it could go); the next
    /// [`Tier::sample_bandwidth`] reports it. A failed probe was counted as the tier's error
    /// where it failed.
    pub fn fold_probe(&self, result: std::io::Result<(f64, f64)>) {
        match result {
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
            Err(e) => log::warn!("probe of tier '{}' failed: {e}", self.name),
        }
        self.probe_running.store(false, Ordering::Release);
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
    pub fn fs(&self) -> beneath::Beneath<'_> {
        beneath::Beneath::new(&self.root)
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

#[cfg(test)]
mod tests;
