//! Who holds a tier folder: the lock that keeps a second daemon, or `fsck`, off a tier a
//! daemon is using.
//!
//! Tiers live on node-local disks and on parallel file systems, and `flock` means different
//! things there: on a local disk and on a Lustre client mounted `flock` it excludes every
//! process that uses the folder; with `localflock` it excludes only the processes of one node;
//! with `noflock` it fails (ENOSYS). So the lock does not rest on `flock` alone. It has two
//! parts in the tier's `.tierfs-meta/`:
//!
//! - the **record** (`lock`): a small text file naming the holder (host, pid, boot id and
//!   the process's start time, what it is, its mountpoint, whether it is scratch). It exists
//!   exactly while the tier is held. It is published with `link(2)` from a complete
//!   temporary file, which fails if a record exists, atomically on every file system that
//!   matters here (Lustre, NFS, GPFS, local ones), so two hosts cannot both take a free tier
//!   and nobody ever reads a half-written record;
//! - the **node lock** (`node-lock`): an `flock` held for as long as the record, which
//!   serialises the processes of one node, so that judging a record stale and replacing it
//!   is one step for them. Where the tier's file system refuses `flock`, the node lock is a
//!   file in `/dev/shm` (else `/tmp`) named after the tier folder's device and inode.
//!
//! A record of this host whose process is gone (no such pid, another start time, another
//! boot) is stale: it is taken over, with a warning in the log. A record of another host
//! cannot be checked from here, so it is refused, naming the host and pid, unless the user
//! says `--break-lock` (after making sure that host's daemon is gone). A record from before
//! this format (`pid N`) is stale when that pid is not running.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The record, in a tier's `.tierfs-meta/`.
pub const RECORD: &str = "lock";
/// The node lock (an `flock`ed, always empty file) next to it.
pub const NODE_LOCK: &str = "node-lock";
/// First line of a record.
const MAGIC: &str = "tierfs tier lock v1";

/// A lock holder, as its record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Host name (`gethostname`); empty in a record of the old format.
    pub host: String,
    pub pid: u32,
    /// `/proc/sys/kernel/random/boot_id` when the lock was taken; empty if unknown.
    pub boot: String,
    /// The process's start time (clock ticks after boot, `/proc/PID/stat` field 22); 0 if
    /// unknown. With the boot id it tells a live holder from a reused pid.
    pub start: u64,
    /// What holds it: "mount" or "fsck".
    pub what: String,
    pub mountpoint: Option<PathBuf>,
    /// The holder is a scratch mount: what it leaves behind when killed is to be removed.
    pub scratch: bool,
}

impl Holder {
    /// This process, as it records itself.
    pub fn me(what: &str, mountpoint: Option<&Path>, scratch: bool) -> Holder {
        let pid = std::process::id();
        Holder {
            host: this_host(),
            pid,
            boot: boot_id(),
            start: start_time(pid).unwrap_or(0),
            what: what.to_string(),
            mountpoint: mountpoint.map(Path::to_path_buf),
            scratch,
        }
    }

    /// The record's text.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{MAGIC}\nhost {}\npid {}\nboot {}\nstart {}\nwhat {}\nscratch {}\n",
            self.host,
            self.pid,
            self.boot,
            self.start,
            self.what,
            if self.scratch { "yes" } else { "no" }
        );
        if let Some(m) = &self.mountpoint {
            // Last: the rest of the line is the path, whatever it holds.
            s.push_str(&format!("mountpoint {}\n", m.display()));
        }
        s
    }

    /// Reads a record; `None` when it is neither this format nor the old `pid N`.
    pub fn parse(text: &str) -> Option<Holder> {
        let mut lines = text.lines();
        let first = lines.next()?.trim();
        if let Some(pid) = first.strip_prefix("pid ") {
            // Before this format: "pid N" (fsck added " (tierfs fsck)").
            let pid = pid.split_whitespace().next()?.parse().ok()?;
            return Some(Holder {
                host: String::new(),
                pid,
                boot: String::new(),
                start: 0,
                what: "mount".into(),
                mountpoint: None,
                scratch: false,
            });
        }
        if first != MAGIC {
            return None;
        }
        let mut h = Holder {
            host: String::new(),
            pid: 0,
            boot: String::new(),
            start: 0,
            what: String::new(),
            mountpoint: None,
            scratch: false,
        };
        for l in lines {
            let (k, v) = l.split_once(' ').unwrap_or((l, ""));
            match k {
                "host" => h.host = v.to_string(),
                "pid" => h.pid = v.parse().ok()?,
                "boot" => h.boot = v.to_string(),
                "start" => h.start = v.parse().ok()?,
                "what" => h.what = v.to_string(),
                "scratch" => h.scratch = v == "yes",
                "mountpoint" => h.mountpoint = Some(PathBuf::from(v)),
                _ => {}
            }
        }
        (h.pid != 0 && !h.host.is_empty()).then_some(h)
    }

    /// Whether the record was written on this host (an old-format record counts as this
    /// host's: that format was only ever used with `flock`, which a live holder keeps).
    pub fn is_this_host(&self) -> bool {
        self.host.is_empty() || self.host == this_host()
    }

    /// For a record of this host: whether its process still runs (same boot, the pid
    /// exists, and it started when the record says).
    pub fn is_alive(&self) -> bool {
        if !self.boot.is_empty() && self.boot != boot_id() {
            return false;
        }
        match start_time(self.pid) {
            None => false,
            Some(t) => self.start == 0 || t == self.start,
        }
    }

    /// "pid N on host H, mounted at M" for messages.
    pub fn describe(&self) -> String {
        let mut s = if self.pid == 0 {
            "pid unknown".to_string()
        } else {
            format!("pid {}", self.pid)
        };
        if self.host.is_empty() || self.host == this_host() {
            s.push_str(" on this host");
        } else {
            s.push_str(&format!(" on host {}", self.host));
        }
        if let Some(m) = &self.mountpoint {
            s.push_str(&format!(", mounted at {}", m.display()));
        } else if self.what == "fsck" {
            s.push_str(", tierfs fsck");
        }
        s
    }
}

/// Why a tier could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// A live holder (this host), or one on another host that cannot be checked.
    #[error("tier folder {} is in use by another tierfs daemon ({}); {}", .root.display(), .holder.describe(), .hint)]
    Held {
        root: PathBuf,
        holder: Box<Holder>,
        hint: String,
    },
    #[error("{}: not a tierfs lock record; if no tierfs uses {}, remove the file or mount with --break-lock", .path.display(), .root.display())]
    Unreadable { path: PathBuf, root: PathBuf },
    #[error("{}: {source}", .path.display())]
    Io { path: PathBuf, source: io::Error },
}

impl LockError {
    fn io(path: &Path, source: io::Error) -> LockError {
        LockError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
    /// The errno-like kind, for callers that wrap this in an `io::Error`.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            LockError::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::WouldBlock,
        }
    }
}

/// A held tier lock; dropping it removes the record (if it is still ours) and then lets go
/// of the node lock.
#[derive(Debug)]
pub struct TierLock {
    _node: File,
    record: PathBuf,
    me: Holder,
}

/// What [`TierLock::acquire`] replaced, for the log.
#[derive(Debug, Clone)]
pub enum TakenOver {
    /// A record of this host whose process is gone.
    Stale(Holder),
    /// Another host's record, replaced because of `--break-lock`.
    Broken(Holder),
    /// A file that is no record, replaced because of `--break-lock`.
    Unreadable,
}

impl TierLock {
    /// Locks the tier whose `.tierfs-meta/` folder is `meta` for `me`. A free tier is
    /// simply taken; a stale record of this host is replaced; another host's record only
    /// with `break_lock`. `root` is the tier folder, for messages.
    pub fn acquire(
        root: &Path,
        meta: &Path,
        me: Holder,
        break_lock: bool,
    ) -> Result<(TierLock, Option<TakenOver>), LockError> {
        Self::acquire_with(root, meta, me, break_lock, true)
    }

    /// [`TierLock::acquire`]; without `tier_flock` the node lock is the shared-memory file
    /// even where the tier's file system has `flock` (tests of the `noflock` case).
    fn acquire_with(
        root: &Path,
        meta: &Path,
        me: Holder,
        break_lock: bool,
        tier_flock: bool,
    ) -> Result<(TierLock, Option<TakenOver>), LockError> {
        let record = meta.join(RECORD);
        let node = lock_node(root, meta, &record, tier_flock)?;
        let tmp = meta.join(format!(".{RECORD}.{}.{}", me.host, me.pid));
        write_file(&tmp, &me.to_text()).map_err(|e| LockError::io(&tmp, e))?;
        let r = publish(&tmp, &record, &me, root, break_lock);
        let _ = std::fs::remove_file(&tmp);
        let taken = r?;
        Ok((
            TierLock {
                _node: node,
                record,
                me,
            },
            taken,
        ))
    }

    pub fn holder(&self) -> &Holder {
        &self.me
    }
}

/// Takes the node lock of the tier whose `.tierfs-meta/` folder is `meta`; when a live
/// process holds it, the error names that process from its `record`.
fn lock_node(root: &Path, meta: &Path, record: &Path, tier_flock: bool) -> Result<File, LockError> {
    let node = node_lock(meta, tier_flock).map_err(|e| LockError::io(&meta.join(NODE_LOCK), e))?;
    if let Err(e) = crate::sys::try_lock_exclusive(node.as_fd()) {
        if e.kind() != io::ErrorKind::WouldBlock {
            return Err(LockError::io(&meta.join(NODE_LOCK), e));
        }
        // A live process of this node (or, where flock is cluster-wide, of any node)
        // holds it; the record says who.
        let holder = read(record).ok().flatten().unwrap_or(Holder {
            host: String::new(),
            pid: 0,
            boot: String::new(),
            start: 0,
            what: "mount".into(),
            mountpoint: None,
            scratch: false,
        });
        return Err(LockError::Held {
            root: root.to_path_buf(),
            holder: Box::new(holder),
            hint: "unmount that mount first".into(),
        });
    }
    Ok(node)
}

/// Puts the record written to `tmp` in place at `record`, with the node lock held: at once
/// where there is none, over a stale record of this host, and over any other only with
/// `break_lock`. Returns what it replaced.
fn publish(
    tmp: &Path,
    record: &Path,
    me: &Holder,
    root: &Path,
    break_lock: bool,
) -> Result<Option<TakenOver>, LockError> {
    if create_record(tmp, record, me)? {
        return Ok(None);
    }
    let old = match read(record) {
        Ok(Some(h)) => h,
        // Removed between our link and this read: the holder just let go.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return std::fs::hard_link(tmp, record)
                .map(|_| None)
                .map_err(|e| LockError::io(record, e))
        }
        Err(e) => return Err(LockError::io(record, e)),
        Ok(None) if break_lock => {
            replace(tmp, record)?;
            return Ok(Some(TakenOver::Unreadable));
        }
        Ok(None) => {
            return Err(LockError::Unreadable {
                path: record.to_path_buf(),
                root: root.to_path_buf(),
            })
        }
    };
    let taken = if old.is_this_host() {
        if old.is_alive() {
            return Err(LockError::Held {
                root: root.to_path_buf(),
                holder: Box::new(old),
                hint: "unmount that mount first".into(),
            });
        }
        TakenOver::Stale(old)
    } else if break_lock {
        TakenOver::Broken(old)
    } else {
        return Err(LockError::Held {
            root: root.to_path_buf(),
            hint: format!(
                "this host cannot check whether it still runs. If it does not (that \
                 node crashed or was rebooted, or its job was killed), mount with \
                 --break-lock; if it does, a second daemon would corrupt the tier: \
                 unmount it on {} first",
                old.host
            ),
            holder: Box::new(old),
        });
    };
    replace(tmp, record)?;
    Ok(Some(taken))
}

/// Creates `record` as a hard link to `tmp`, or where the file system has no hard links
/// by an exclusive create (atomic too); `false` when a record is already there.
fn create_record(tmp: &Path, record: &Path, me: &Holder) -> Result<bool, LockError> {
    match std::fs::hard_link(tmp, record) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::EOPNOTSUPP | libc::EMLINK)
            ) =>
        {
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(record)
            {
                Ok(mut f) => {
                    f.write_all(me.to_text().as_bytes())
                        .and_then(|_| f.sync_all())
                        .map_err(|e| LockError::io(record, e))?;
                    Ok(true)
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(LockError::io(record, e)),
            }
        }
        Err(e) => Err(LockError::io(record, e)),
    }
}

impl Drop for TierLock {
    fn drop(&mut self) {
        // Only our own record: if someone broke the lock meanwhile, theirs stays.
        if let Ok(Some(h)) = read(&self.record) {
            if h.host == self.me.host && h.pid == self.me.pid && h.start == self.me.start {
                let _ = std::fs::remove_file(&self.record);
            }
        }
    }
}

/// The record in `meta`: `Ok(None)` when it exists but cannot be read as one.
pub fn read(record: &Path) -> io::Result<Option<Holder>> {
    let text = std::fs::read(record)?;
    Ok(Holder::parse(&String::from_utf8_lossy(&text)))
}

/// The holder of the tier whose `.tierfs-meta/` is `meta`, if a record is there.
pub fn holder_of(meta: &Path) -> Option<Holder> {
    read(&meta.join(RECORD)).ok().flatten()
}

fn replace(tmp: &Path, record: &Path) -> Result<(), LockError> {
    // rename replaces atomically; the temporary has the complete record.
    std::fs::rename(tmp, record).map_err(|e| LockError::io(record, e))
}

fn write_file(path: &Path, text: &str) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

/// Opens the node lock of a tier: `meta/node-lock` where its file system supports `flock`,
/// else a file in `/dev/shm` or `/tmp` named after the tier's device and inode (the same
/// for every process of this node, so it serialises them all the same).
fn node_lock(meta: &Path, tier_flock: bool) -> io::Result<File> {
    let path = meta.join(NODE_LOCK);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&path)
        .or_else(|e| {
            // Another user's tier (fsck as root is fine; a user reading someone else's
            // tier only needs to read).
            if e.kind() == io::ErrorKind::PermissionDenied {
                File::open(&path)
            } else {
                Err(e)
            }
        })?;
    let probed = if tier_flock {
        probe_flock(&f)
    } else {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    };
    match probed {
        Ok(()) => Ok(f),
        Err(e) if flock_unsupported(&e) => {
            let m = std::fs::metadata(meta)?;
            let name = format!("tierfs-node-lock-{}-{}", m.dev(), m.ino());
            let dirs = [Path::new("/dev/shm"), Path::new("/tmp")];
            let mut last = e;
            for d in dirs {
                match open_shared(&d.join(&name)) {
                    Ok(f) => return Ok(f),
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
        Err(e) => Err(e),
    }
}

/// Whether `flock` works on `f` (taken and released at once; `WouldBlock` counts as
/// working: someone holds it).
fn probe_flock(f: &File) -> io::Result<()> {
    match crate::sys::try_lock_exclusive(f.as_fd()) {
        Ok(()) => {
            crate::sys::unlock(f.as_fd());
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// What a file system says when it has no `flock` (Lustre `noflock`: ENOSYS; some NFS
/// setups: ENOLCK).
fn flock_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL | libc::ENOLCK)
    )
}

/// Opens (or creates, readable by all) a node-lock file in a shared, sticky folder. Only
/// reading is needed to `flock`, and opening another user's file there with O_CREAT can be
/// refused (`fs.protected_regular`), so an existing file is opened read-only.
fn open_shared(path: &Path) -> io::Result<File> {
    loop {
        match File::open(path) {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(path)
        {
            Ok(f) => {
                // umask may have taken the read bit for others away.
                let _ = std::fs::set_permissions(
                    path,
                    std::os::unix::fs::PermissionsExt::from_mode(0o644),
                );
                return Ok(f);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// This host's name, as records use it.
pub fn this_host() -> String {
    crate::config::hostname().unwrap_or_default()
}

/// The kernel's boot id ("" where /proc does not say).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Start time of `pid` in clock ticks after boot (`/proc/PID/stat` field 22); `None` when
/// there is no such process (a zombie counts as gone: it holds nothing any more).
pub fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = s.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state).
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let m = d.path().join(".tierfs-meta");
        std::fs::create_dir(&m).unwrap();
        (d, m)
    }

    /// A process of this host that has exited (pid from a child we reaped).
    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    }

    #[test]
    fn record_round_trips() {
        let h = Holder::me("mount", Some(Path::new("/mnt/a b")), true);
        assert_eq!(Holder::parse(&h.to_text()), Some(h.clone()));
        assert!(h.is_this_host());
        assert!(h.is_alive());
        assert!(h.start > 0 && !h.boot.is_empty());
        let old = Holder::parse("pid 77 (tierfs fsck)\n").unwrap();
        assert_eq!((old.pid, old.host.as_str()), (77, ""));
        assert_eq!(Holder::parse("garbage"), None);
        assert_eq!(Holder::parse(""), None);
    }

    /// [`TierLock::acquire_with`] right after a release, retried for a while: a fork by
    /// another test of this process (Command::spawn) copies the node lock's descriptor into
    /// its child, which keeps the flock until it execs. A lock that stays held fails.
    fn acquire_after_release(
        d: &Path,
        m: &Path,
        break_lock: bool,
        tier_flock: bool,
    ) -> (TierLock, Option<TakenOver>) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match TierLock::acquire_with(
                d,
                m,
                Holder::me("mount", None, false),
                break_lock,
                tier_flock,
            ) {
                Err(LockError::Held { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(50))
                }
                r => return r.unwrap(),
            }
        }
    }

    #[test]
    fn a_free_tier_is_taken_and_released() {
        let (d, m) = meta();
        let me = Holder::me("mount", None, false);
        let (l, taken) = TierLock::acquire(d.path(), &m, me.clone(), false).unwrap();
        assert!(taken.is_none());
        assert_eq!(holder_of(&m), Some(me));
        drop(l);
        assert!(!m.join(RECORD).exists(), "the record goes with the lock");
        acquire_after_release(d.path(), &m, false, true);
    }

    #[test]
    fn a_live_holder_is_refused_even_without_flock_working() {
        let (d, m) = meta();
        let (_l, _) =
            TierLock::acquire(d.path(), &m, Holder::me("mount", None, false), false).unwrap();
        // Through the node lock ...
        let e = TierLock::acquire(d.path(), &m, Holder::me("mount", None, false), true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("in use by another tierfs daemon")
                && e.contains(&format!("pid {} on this host", std::process::id())),
            "{e}"
        );
        // ... and through the record alone (a live holder on this host is never stale).
        let (d2, m2) = meta();
        let live = Holder::me("mount", Some(Path::new("/mnt/x")), false);
        std::fs::write(m2.join(RECORD), live.to_text()).unwrap();
        let e = TierLock::acquire(d2.path(), &m2, Holder::me("mount", None, false), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("mounted at /mnt/x"), "{e}");
    }

    #[test]
    fn without_flock_on_the_tier_the_node_lock_is_in_shared_memory() {
        let (d, m) = meta();
        let me = || Holder::me("mount", None, false);
        let (l, _) = TierLock::acquire_with(d.path(), &m, me(), false, false).unwrap();
        // A second process of this node finds the same node lock held and is refused
        // before it looks at the record, even with --break-lock.
        let e = TierLock::acquire_with(d.path(), &m, me(), true, false).unwrap_err();
        assert!(matches!(e, LockError::Held { .. }), "{e}");
        drop(l);
        let (l, _) = acquire_after_release(d.path(), &m, false, false);
        drop(l);
        let md = std::fs::metadata(&m).unwrap();
        let name = format!("tierfs-node-lock-{}-{}", md.dev(), md.ino());
        let _ = std::fs::remove_file(Path::new("/dev/shm").join(&name));
        let _ = std::fs::remove_file(Path::new("/tmp").join(&name));
    }

    #[test]
    fn a_dead_holder_of_this_host_is_taken_over() {
        let (d, m) = meta();
        let mut dead = Holder::me("mount", Some(Path::new("/mnt/old")), true);
        dead.pid = dead_pid();
        std::fs::write(m.join(RECORD), dead.to_text()).unwrap();
        let me = Holder::me("mount", None, false);
        let (l, taken) = TierLock::acquire(d.path(), &m, me.clone(), false).unwrap();
        match taken {
            Some(TakenOver::Stale(h)) => assert_eq!(h, dead),
            other => panic!("{other:?}"),
        }
        assert_eq!(holder_of(&m), Some(me));
        drop(l);
        // A reused pid (same pid, other start time) and another boot are stale too.
        let mut reused = Holder::me("mount", None, false);
        reused.start += 1;
        std::fs::write(m.join(RECORD), reused.to_text()).unwrap();
        assert!(matches!(
            acquire_after_release(d.path(), &m, false, true).1,
            Some(TakenOver::Stale(_))
        ));
        let mut rebooted = Holder::me("mount", None, false);
        rebooted.boot = "another-boot".into();
        std::fs::write(m.join(RECORD), rebooted.to_text()).unwrap();
        assert!(matches!(
            acquire_after_release(d.path(), &m, false, true).1,
            Some(TakenOver::Stale(_))
        ));
        // The old format: stale when its pid is gone.
        std::fs::write(m.join(RECORD), format!("pid {}\n", dead_pid())).unwrap();
        assert!(matches!(
            acquire_after_release(d.path(), &m, false, true).1,
            Some(TakenOver::Stale(_))
        ));
    }

    #[test]
    fn another_hosts_lock_is_refused_unless_broken() {
        let (d, m) = meta();
        let mut other = Holder::me("mount", Some(Path::new("/local/tierfs")), false);
        other.host = "node0042".into();
        other.pid = 31337;
        std::fs::write(m.join(RECORD), other.to_text()).unwrap();
        let e = TierLock::acquire(d.path(), &m, Holder::me("mount", None, false), false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("pid 31337 on host node0042, mounted at /local/tierfs")
                && e.contains("--break-lock"),
            "{e}"
        );
        assert_eq!(
            holder_of(&m),
            Some(other.clone()),
            "refusing changes nothing"
        );
        let me = Holder::me("mount", None, false);
        let (_l, taken) = TierLock::acquire(d.path(), &m, me.clone(), true).unwrap();
        match taken {
            Some(TakenOver::Broken(h)) => assert_eq!(h, other),
            t => panic!("{t:?}"),
        }
        assert_eq!(holder_of(&m), Some(me));
    }

    #[test]
    fn an_unreadable_record_is_refused_unless_broken() {
        let (d, m) = meta();
        std::fs::write(m.join(RECORD), "what is this\n").unwrap();
        let e = TierLock::acquire(d.path(), &m, Holder::me("mount", None, false), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a tierfs lock record"), "{e}");
        acquire_after_release(d.path(), &m, true, true);
    }

    #[test]
    fn release_keeps_a_record_that_is_not_ours() {
        let (d, m) = meta();
        let (l, _) =
            TierLock::acquire(d.path(), &m, Holder::me("mount", None, false), false).unwrap();
        let mut other = Holder::me("mount", None, false);
        other.host = "elsewhere".into();
        std::fs::write(m.join(RECORD), other.to_text()).unwrap();
        drop(l);
        assert_eq!(holder_of(&m), Some(other));
    }
}
