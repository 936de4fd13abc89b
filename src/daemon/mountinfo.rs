//! Finding mounts and their daemons: what is mounted where, and whether it answers.
//!
//! Mounts are found in /proc/self/mountinfo, never by stat: root cannot stat into an
//! ordinary user's FUSE mount (EACCES), and a dead one answers ENOTCONN, but both are listed
//! there, so `tierfs unmount` run by root (a Slurm epilog) finds and unmounts either.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What a path is, as far as mounting on it goes.
#[derive(Debug, PartialEq, Eq)]
pub enum MountpointState {
    Usable,
    /// A FUSE mount whose daemon is gone (ENOTCONN, ECONNABORTED, ECANCELED).
    Dead,
    Missing,
    NotADirectory,
    /// Something is already mounted there and answers.
    Mounted,
}

/// Whether an errno is what a FUSE mount whose daemon is gone answers: ENOTCONN once the
/// connection is down, ECONNABORTED to a request that was waiting when it went down (the
/// first stat right after the daemon was killed), ECANCELED to one the kernel had handed
/// to an io_uring ring entry of the dying daemon.
pub fn is_dead_mount_errno(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED)
    )
}

/// Looks at a would-be mountpoint. A mount there is found in /proc/self/mountinfo, so
/// another user's mount and a dead one are seen as what they are.
pub fn mountpoint_state(mp: &Path) -> MountpointState {
    let path = resolve_outer(mp);
    if let Some(entry) = mount_at(&path) {
        return if daemon_of(&path, &entry, crate::config::DEFAULT_STATS_DIR) == Daemon::Dead {
            MountpointState::Dead
        } else {
            MountpointState::Mounted
        };
    }
    match std::fs::metadata(&path) {
        Err(e) if is_dead_mount_errno(&e) => MountpointState::Dead,
        Err(_) => MountpointState::Missing,
        Ok(m) if !m.is_dir() => MountpointState::NotADirectory,
        Ok(_) => MountpointState::Usable,
    }
}

/// Whether `mp` is listed as a mount point in /proc/self/mountinfo.
pub fn is_mountpoint(mp: &Path) -> bool {
    mount_at(&resolve_outer(mp)).is_some()
}

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub mountpoint: PathBuf,
    /// `fuse.tierfs` for tierfs.
    pub fstype: String,
    pub source: String,
    /// The super block's options; a FUSE mount names its owner there (`user_id=N`).
    pub super_options: String,
}

impl MountEntry {
    /// Parses one mountinfo line: `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] -
    /// FSTYPE SOURCE SUPEROPTS`.
    pub fn parse(line: &str) -> Option<MountEntry> {
        let (left, right) = line.split_once(" - ")?;
        let mountpoint = left.split(' ').nth(4)?;
        let mut r = right.split(' ');
        Some(MountEntry {
            mountpoint: PathBuf::from(unescape_mount_path(mountpoint)),
            fstype: r.next()?.to_string(),
            source: unescape_mount_path(r.next()?),
            super_options: r.next().unwrap_or("").to_string(),
        })
    }

    pub fn is_tierfs(&self) -> bool {
        self.fstype == "fuse.tierfs" || (self.fstype.starts_with("fuse") && self.source == "tierfs")
    }

    /// The (uid, gid) a FUSE mount belongs to.
    pub fn fuse_owner(&self) -> Option<(u32, u32)> {
        let opt = |k: &str| {
            self.super_options
                .split(',')
                .find_map(|o| o.strip_prefix(k))
                .and_then(|v| v.parse().ok())
        };
        Some((opt("user_id=")?, opt("group_id=")?))
    }

    fn allow_other(&self) -> bool {
        self.super_options.split(',').any(|o| o == "allow_other")
    }
}

/// The mount at `path` (already resolved with [`resolve_outer`]): the last one listed
/// there, which is the one on top.
pub fn mount_at(path: &Path) -> Option<MountEntry> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .rev()
        .filter_map(MountEntry::parse)
        .find(|e| e.mountpoint == path)
}

/// `mp` made absolute with the symlinks of its parent folders resolved, without entering
/// `mp` itself: stat on another user's FUSE mount fails with EACCES (root included), and on
/// a dead one with ENOTCONN. A symlink as the last component is followed the same way.
pub fn resolve_outer(mp: &Path) -> PathBuf {
    let mut abs = std::path::absolute(mp).unwrap_or_else(|_| mp.to_path_buf());
    for _ in 0..40 {
        let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) else {
            return abs;
        };
        let parent = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
        let joined = parent.join(name);
        match std::fs::read_link(&joined) {
            Ok(target) => abs = parent.join(target),
            Err(_) => return joined,
        }
    }
    abs
}

/// What can be said about the daemon behind a tierfs mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Daemon {
    /// It answers; its pid and first tier's folder where the stats said.
    Live(Option<(u32, PathBuf)>),
    /// The mount answers ENOTCONN: the daemon is gone.
    Dead,
}

/// Asks the mount at `path` whether its daemon answers, and its pid. Root looking at an
/// ordinary user's mount (without `allow_other`) gets no answer from the daemon (statfs
/// even says all is well without asking it), so it asks as the mount's owner: `cat` of
/// the stats file under that uid and gid (a plain program, so it works from any binary
/// linking this library).
pub fn daemon_of(path: &Path, entry: &MountEntry, stats_dir: &str) -> Daemon {
    let as_owner = match entry.fuse_owner() {
        Some((uid, gid)) if crate::sys::euid() == 0 && uid != 0 && !entry.allow_other() => {
            Some((uid, gid))
        }
        _ => None,
    };
    let dead = |e: &str| {
        e.contains("not connected")
            || e.contains("connection abort")
            || e.contains("Operation canceled")
    };
    if let Some((uid, gid)) = as_owner {
        use std::os::unix::process::CommandExt;
        let out = Command::new("cat")
            .arg(path.join(stats_dir).join("stats.json"))
            .uid(uid)
            .gid(gid)
            .stdin(Stdio::null())
            .output();
        return match out {
            Ok(o) if o.status.success() => Daemon::Live(
                serde_json::from_slice::<crate::stats::Snapshot>(&o.stdout)
                    .ok()
                    .as_ref()
                    .and_then(pid_and_first_tier),
            ),
            Ok(o) if dead(&String::from_utf8_lossy(&o.stderr)) => Daemon::Dead,
            _ => Daemon::Live(None),
        };
    }
    // stat can answer from the kernel's attribute cache for up to the attribute TTL after
    // a FUSE daemon died; statfs always asks the daemon.
    if let Err(e) = crate::sys::statvfs(path) {
        if is_dead_mount_errno(&e) {
            return Daemon::Dead;
        }
    }
    Daemon::Live(
        crate::client::read_snapshot(path, stats_dir)
            .ok()
            .as_ref()
            .and_then(pid_and_first_tier),
    )
}

fn pid_and_first_tier(s: &crate::stats::Snapshot) -> Option<(u32, PathBuf)> {
    Some((s.pid, PathBuf::from(&s.tiers.first()?.path)))
}

fn unescape_mount_path(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}
