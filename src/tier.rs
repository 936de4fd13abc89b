//! One storage tier: its folder, the lock that makes it ours, its bandwidth and its counters.
//!
//! A tier folder holds two things: `data/`, the mirrored directory tree with each file's
//! piece at the file's own path, and `.tierfs-meta/`, our private state (the lock file, the
//! format marker, the probe cache). Keeping user data under `data/` means no user name can
//! collide with our own files.

use crate::error::{Error, Result};
use crate::sys;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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
    pub errors: AtomicU64,
    /// Files that have a piece on this tier.
    pub files: AtomicU64,
    /// Logical bytes of pieces on this tier (what `capacity` limits).
    pub used: AtomicU64,
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
/// Weight of the newest sample.
pub const EWMA_ALPHA: f64 = 0.3;

impl Estimate {
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
        let new = match self.get() {
            Some(old) => old + EWMA_ALPHA * (sample - old),
            None => sample,
        };
        self.bps.store(new.to_bits(), Ordering::Relaxed);
        Some(new)
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
    _lock: File,
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
        let meta = root.join(META_DIR);
        let data = root.join(DATA_DIR);
        for d in [&meta, &data] {
            if let Err(e) = std::fs::create_dir(d) {
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(Error::tier(name, "mkdir", d, e));
                }
            }
        }
        let lock_path = meta.join("lock");
        let limbo = meta.join(LIMBO_DIR);
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| Error::tier(name, "open", &lock_path, e))?;
        if let Err(e) = sys::try_lock_exclusive(lock.as_fd()) {
            let holder = std::fs::read_to_string(&lock_path).unwrap_or_default();
            let holder = holder.trim();
            return Err(Error::tier(
                name,
                "lock",
                &lock_path,
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "tier folder {} is in use by another tierfs daemon ({}); unmount that mount first",
                        root.display(),
                        if holder.is_empty() { "pid unknown" } else { holder }
                    ),
                ),
            ));
        }
        let _ = lock.set_len(0);
        let _ = writeln!(lock, "pid {}", std::process::id());
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
            device_stat,
            device_base,
            counters: TierCounters::default(),
            queue: crate::sched::TierQueue::new(DEFAULT_MAX_IN_FLIGHT, false),
            est_read: Estimate::default(),
            est_write: Estimate::default(),
            _lock: lock,
        })
    }

    /// Whether the tier is usable for new data.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Records a failure; errors that mean the tier itself is broken mark it unhealthy.
    pub fn note_error(&self, e: &std::io::Error) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
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
        r.is_some() || w.is_some()
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

    /// ELOOP if a folder on the way from this tier's root to `p` is a symlink (planted in
    /// the tier folder by hand): the daemon never follows one out of the tier.
    pub fn beneath(&self, p: &Path) -> std::io::Result<()> {
        crate::sys::no_symlink_below(&self.root, p)
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
        sys::statvfs(&self.data).ok()
    }

    /// Bytes this tier can still take: the smaller of its filesystem's free space (less the
    /// reserve) and what is left of its configured capacity.
    pub fn room(&self) -> u64 {
        let fs_room = self
            .space()
            .map(|s| s.avail.saturating_sub(FREE_RESERVE))
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
    fn estimate_ignores_idle_time_and_small_samples() {
        let e = Estimate::default();
        assert_eq!(e.sample(1 << 20, 500_000_000), None, "too few bytes");
        // 100 MB moved in 0.1 s of busy time (however long the wall-clock interval was).
        let v = e.sample(100_000_000, 100_000_000).unwrap();
        assert!((v - 1e9).abs() < 1.0, "{v}");
        // Next interval half as fast: the mean moves by alpha toward it.
        let v = e.sample(200_000_000, 300_000_000).unwrap();
        assert!((v - (1e9 + EWMA_ALPHA * (0.5e9 - 1e9))).abs() < 1.0, "{v}");
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
        assert!(t.room() <= 1000);
        t.add_used(900);
        assert!(!t.has_room_for(200));
        t.add_used(-900);
        assert!(t.has_room_for(200) || t.room() < 200);
    }
}
