//! Mounting and unmounting: the daemon's life from `tierfs mount` to its exit.
//!
//! `tierfs mount` without `--foreground` re-runs itself as a detached child with a pipe; the
//! child probes, opens and locks the tiers, mounts, checks that the mount answers, and only
//! then writes `OK` on the pipe. The parent relays the child's progress and exits 0 only
//! after `OK`, so a script can use the mount on the next line; any failure before that is
//! printed by the parent with the child's own message and exit code.
//!
//! The daemon leaves on SIGTERM/SIGINT/SIGHUP (it unmounts itself) or when the mount goes
//! away (`umount`, `fusermount3 -u`, `tierfs unmount`). Writes are on the tiers when they
//! are acknowledged, so either way of leaving keeps every tier consistent. A batch system
//! ends a job with TERM to every process of it and then KILL, and allows no new job steps
//! by then, so the daemon must clean up after itself on TERM: it unmounts (waiting a little
//! while the job's other processes still hold files open, then detaching), and in scratch
//! mode (`[mount] scratch`) discards the data and removes the tier folders and the
//! mountpoint. A daemon that was killed leaves its scratch folders behind, marked as such in
//! their lock records; the next mount on that host that finds them next to its own tier
//! folders removes them ([`sweep_stale_scratch`]).
//!
//! Mounts are found in /proc/self/mountinfo, never by stat: root cannot stat into an
//! ordinary user's FUSE mount (EACCES), and a dead one answers ENOTCONN, but both are listed
//! there, so `tierfs unmount` run by root (a Slurm epilog) finds and unmounts either.

use crate::config::MountConfig;
use crate::fs::TierFs;
use crate::probe::{self, ProbeOptions};
use crate::tier::{BandwidthSource, LockRequest, Tier};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The environment variable that hands the readiness pipe to the child.
const READY_FD_ENV: &str = "TIERFS_READY_FD";

/// In the first tier's `.tierfs-meta/`: written by a daemon whose unmount could not put
/// every byte on the tiers (first line `pid N`, then one line per file), so that `tierfs
/// unmount`, which waits for that daemon to exit, can say what was lost and fail. Empty
/// otherwise.
pub const LOST_REPORT: &str = "unmount-lost";

/// Space kept for the [`LOST_REPORT`] from the mount on: data is lost at unmount mostly
/// because the tiers are full, and then the report must still fit.
const LOST_REPORT_ROOM: usize = 64 << 10;

/// Where a daemon on tiers whose first folder is `first_tier` writes its [`LOST_REPORT`].
pub fn lost_report_path(first_tier: &Path) -> PathBuf {
    first_tier.join(crate::tier::META_DIR).join(LOST_REPORT)
}

/// Empties the report of an earlier daemon and allocates room for this one's.
fn prepare_lost_report(path: &Path) {
    let r = std::fs::File::create(path).and_then(|f| {
        crate::sys::fallocate(
            std::os::fd::AsFd::as_fd(&f),
            libc::FALLOC_FL_KEEP_SIZE,
            0,
            LOST_REPORT_ROOM as u64,
        )
    });
    if let Err(e) = r {
        log::warn!("cannot prepare {}: {e}", path.display());
    }
}

/// Writes the report into the room [`prepare_lost_report`] allocated (cut to fit it).
fn write_lost_report(path: &Path, lost: &[String]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut text = format!("pid {}\n", std::process::id());
    for (i, l) in lost.iter().enumerate() {
        if text.len() + l.len() + 64 > LOST_REPORT_ROOM {
            text.push_str(&format!("... and {} more (see the log)\n", lost.len() - i));
            break;
        }
        text.push_str(l);
        text.push('\n');
    }
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    f.write_all_at(text.as_bytes(), 0)?;
    f.sync_all()
}

/// A failure with the process exit code it should give: 2 for what the user must fix in
/// the command line or config, 1 for everything that went wrong at run time.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub fn usage(m: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: m.into(),
        }
    }
    pub fn runtime(m: impl Into<String>) -> Failure {
        Failure {
            code: 1,
            message: m.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Options of `tierfs mount`.
#[derive(Debug, Clone)]
pub struct MountOptions {
    pub config: PathBuf,
    pub mountpoint: PathBuf,
    pub foreground: bool,
    pub force: bool,
    pub reprobe: bool,
    /// Mount without tiers whose folders are missing (also `[mount] degraded`).
    pub degraded: bool,
    /// Take over tier locks held by a daemon on another host (`--break-lock`).
    pub break_lock: bool,
    /// `--scratch` / `--no-scratch`: overrides `[mount] scratch`.
    pub scratch: Option<bool>,
    /// Let other users in (also `[mount] allow_other`); the mount helper's `-o allow_other`.
    pub allow_other: bool,
}

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
        crate::cli::read_snapshot(path, stats_dir)
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

/// Why asking the kernel to unmount failed: the errno where known, and what was said.
#[derive(Debug)]
pub struct UnmountError {
    pub errno: Option<i32>,
    pub message: String,
}

/// Asks the kernel to unmount `path`: umount2 as root, `fusermount3 -u` (`-uz` for a lazy
/// detach) as a user, who may only unmount their own mounts.
pub fn unmount_path(path: &Path, lazy: bool) -> Result<(), UnmountError> {
    if crate::sys::euid() == 0 {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
            UnmountError {
                errno: Some(libc::EINVAL),
                message: "the path holds a NUL byte".into(),
            }
        })?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: c is a valid NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        return Err(UnmountError {
            errno: e.raw_os_error(),
            message: e.to_string(),
        });
    }
    let out = Command::new("fusermount3")
        .arg(if lazy { "-uz" } else { "-u" })
        .arg(path)
        .output()
        .map_err(|e| UnmountError {
            errno: None,
            message: format!("cannot run fusermount3: {e} (apt-get install fuse3)"),
        })?;
    if out.status.success() {
        return Ok(());
    }
    let message = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let errno = if message.contains("busy") {
        Some(libc::EBUSY)
    } else if message.contains("not found") || message.contains("not mounted") {
        Some(libc::EINVAL)
    } else {
        None
    };
    Err(UnmountError { errno, message })
}

/// Detaches a dead mount: fusermount3 for users, umount2(MNT_DETACH) as root.
pub fn clear_dead_mount(mp: &Path) -> Result<(), Failure> {
    if crate::sys::euid() == 0 {
        let c = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes())
            .map_err(|_| Failure::usage("bad mountpoint"))?;
        // SAFETY: c is a valid NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
            return Ok(());
        }
    }
    let st = Command::new("fusermount3").arg("-uz").arg(mp).status();
    match st {
        Ok(s) if s.success() => Ok(()),
        _ => Err(Failure::runtime(format!("could not clear the dead mount at {}; run `fusermount3 -uz {}` (or `umount -l` as root)", mp.display(), mp.display()))),
    }
}

fn check_mountpoint(opts: &MountOptions) -> Result<(), Failure> {
    let mp = &opts.mountpoint;
    match mountpoint_state(mp) {
        MountpointState::Usable => Ok(()),
        MountpointState::Missing => Err(Failure::usage(format!("mountpoint {} does not exist; create it with `mkdir -p {}`", mp.display(), mp.display()))),
        MountpointState::NotADirectory => Err(Failure::usage(format!("mountpoint {} is not a directory", mp.display()))),
        MountpointState::Mounted => Err(Failure::runtime(format!(
            "{} is already a mount point; unmount it first (`tierfs unmount {}`)",
            mp.display(),
            mp.display()
        ))),
        MountpointState::Dead if opts.force => {
            eprintln!("tierfs: clearing the dead mount at {} (--force)", mp.display());
            clear_dead_mount(mp)
        }
        MountpointState::Dead => Err(Failure::runtime(format!(
            "{} holds a dead tierfs mount (its daemon is gone); clear it with `fusermount3 -uz {}` (or `umount -l {}` as root), or rerun with --force",
            mp.display(),
            mp.display(),
            mp.display()
        ))),
    }
}

/// `tierfs mount`.
pub fn mount(opts: &MountOptions) -> Result<(), Failure> {
    let mut config = MountConfig::load(&opts.config).map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(scratch) = opts.scratch {
        config.mount.scratch = scratch;
    }
    config.mount.allow_other |= opts.allow_other;
    config
        .prepare_tier_dirs_degraded(opts.degraded || config.mount.degraded)
        .map_err(|e| Failure::usage(e.to_string()))?;
    check_mountpoint(opts)?;
    let overlaps = config.mountpoint_overlaps(&opts.mountpoint);
    if !overlaps.is_empty() {
        return Err(Failure::usage(overlaps.join("\n")));
    }
    if opts.foreground || std::env::var_os(READY_FD_ENV).is_some() {
        run_daemon(opts, &config)
    } else {
        spawn_background(opts, &config)
    }
}

fn spawn_background(opts: &MountOptions, config: &MountConfig) -> Result<(), Failure> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Failure::runtime(format!(
            "pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: pipe2 just returned these two descriptors, which nothing else owns.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let exe = std::env::current_exe()
        .map_err(|e| Failure::runtime(format!("cannot find the tierfs executable: {e}")))?;
    let log = default_log_path(config);
    if config.mount.log_file.is_none() {
        // The first tier's meta folder, which a tier mounted for the first time lacks.
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Failure::runtime(format!("cannot create {}: {e}", dir.display())))?;
        }
    }
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| Failure::runtime(format!("cannot open log file {}: {e}", log.display())))?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg("--config")
        .arg(&opts.config)
        .arg(&opts.mountpoint);
    if opts.reprobe {
        cmd.arg("--reprobe");
    }
    if opts.degraded {
        cmd.arg("--degraded");
    }
    if opts.break_lock {
        cmd.arg("--break-lock");
    }
    match opts.scratch {
        Some(true) => {
            cmd.arg("--scratch");
        }
        Some(false) => {
            cmd.arg("--no-scratch");
        }
        None => {}
    }
    if opts.allow_other {
        cmd.arg("--allow-other");
    }
    let child_fd = write_end.as_raw_fd();
    cmd.env(READY_FD_ENV, child_fd.to_string())
        .env("TIERFS_LOG_FILE", &log)
        .stdin(Stdio::null())
        .stdout(
            log_file
                .try_clone()
                .map_err(|e| Failure::runtime(e.to_string()))?,
        )
        .stderr(log_file);
    // SAFETY: between fork and exec the closure only calls async-signal-safe functions
    // (setsid, fcntl) on a descriptor that stays open in the child.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            libc::setsid();
            let flags = libc::fcntl(child_fd, libc::F_GETFD);
            libc::fcntl(child_fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::runtime(format!("cannot start the daemon: {e}")))?;
    drop(write_end);
    let reader = BufReader::new(std::fs::File::from(read_end));
    for line in reader.lines() {
        let Ok(line) = line else { break };
        if line == "OK" {
            eprintln!(
                "tierfs: mounted {} (daemon pid {}, log {})",
                opts.mountpoint.display(),
                child.id(),
                log.display()
            );
            return Ok(());
        } else if let Some(rest) = line.strip_prefix("ERR ") {
            let (code, msg) = rest.split_once(' ').unwrap_or(("1", rest));
            let _ = child.wait();
            return Err(Failure {
                code: code.parse().unwrap_or(1),
                message: msg.replace("\\n", "\n"),
            });
        } else if let Some(msg) = line.strip_prefix("MSG ") {
            eprintln!("tierfs: {msg}");
        }
    }
    let status = child.wait().ok();
    Err(Failure::runtime(format!(
        "the daemon exited before the mount was ready ({}); see {}",
        status.map(|s| s.to_string()).unwrap_or_default(),
        log.display()
    )))
}

/// The mount's source in /proc/self/mountinfo: the config file, as an fstab line names it,
/// so `mount -a` sees the line is mounted. A path that mount options cannot carry (a comma,
/// white space) is shown as plain "tierfs".
fn mount_source(config: &Path) -> String {
    let abs = std::path::absolute(config).unwrap_or_else(|_| config.to_path_buf());
    match abs.to_str() {
        Some(s) if !s.contains(|c: char| c == ',' || c == '\\' || c.is_whitespace()) => {
            s.to_string()
        }
        _ => "tierfs".to_string(),
    }
}

/// Where a background daemon logs when the config names no file.
pub fn default_log_path(config: &MountConfig) -> PathBuf {
    config.mount.log_file.clone().unwrap_or_else(|| {
        config.tiers[0]
            .path
            .join(crate::tier::META_DIR)
            .join("daemon.log")
    })
}

/// Talks to the parent waiting in [`spawn_background`], if there is one.
struct Ready(Option<std::fs::File>);

impl Ready {
    fn from_env() -> Ready {
        let fd = std::env::var(READY_FD_ENV)
            .ok()
            .and_then(|v| v.parse::<i32>().ok());
        std::env::remove_var(READY_FD_ENV);
        // SAFETY: the parent passed this descriptor to us for exactly this use and nothing
        // else in this process owns it.
        Ready(fd.map(|fd| unsafe { std::fs::File::from_raw_fd(fd) }))
    }
    fn say(&mut self, line: &str) {
        match &mut self.0 {
            Some(f) => {
                let _ = writeln!(f, "{line}");
            }
            None => {
                if let Some(m) = line.strip_prefix("MSG ") {
                    eprintln!("tierfs: {m}");
                }
            }
        }
    }
    fn fail(&mut self, f: &Failure) {
        self.say(&format!(
            "ERR {} {}",
            f.code,
            f.message.replace('\n', "\\n")
        ));
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: on_signal is async-signal-safe (it only stores to an atomic).
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// Probes (where the config gives no bandwidth) and opens every tier, in config order.
pub fn open_tiers(
    config: &MountConfig,
    reprobe: bool,
    progress: impl FnMut(&str),
) -> Result<Vec<Tier>, Failure> {
    let req = LockRequest {
        scratch: config.mount.scratch,
        ..LockRequest::default()
    };
    open_tiers_degraded(config, reprobe, &[], &req, progress)
}

/// [`open_tiers`], leaving out the tiers in `missing` (index, why): they keep their place
/// as [`Tier::missing`] placeholders; the locks are taken as `lock` says.
pub fn open_tiers_degraded(
    config: &MountConfig,
    reprobe: bool,
    missing: &[(usize, String)],
    lock: &LockRequest,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Tier>, Failure> {
    let mut tiers = Vec::new();
    for (i, t) in config.tiers.iter().enumerate() {
        if let Some((_, why)) = missing.iter().find(|(m, _)| *m == i) {
            let mut tier = Tier::missing(i, &t.name, &t.path, why);
            // The stated figures, so the stats show what the tier would get; it is never
            // eligible while missing.
            tier.read_bps = t.read_bandwidth.or(t.write_bandwidth).unwrap_or(0.0);
            tier.write_bps = t.write_bandwidth.or(t.read_bandwidth).unwrap_or(0.0);
            tiers.push(tier);
            continue;
        }
        let mut tier = Tier::open_for(i, &t.name, &t.path, t.capacity, lock)
            .map_err(|e| Failure::runtime(e.to_string()))?;
        let (r, w, src) = match (t.read_bandwidth, t.write_bandwidth) {
            (Some(r), Some(w)) => (r, w, BandwidthSource::Config),
            (Some(r), None) => (r, r, BandwidthSource::Config),
            (None, Some(w)) => (w, w, BandwidthSource::Config),
            (None, None) if t.shared.is_some() => {
                let sh = t.shared.as_ref().expect("checked");
                let dir = crate::coord::ledger_dir(&sh.ledger, &sh.job, &t.name);
                progress(&format!(
                    "tier '{}' is shared by job {}: taking its bandwidth from {} (one node \
                     probes it for the job)",
                    t.name,
                    sh.job,
                    dir.display()
                ));
                let cache = Tier::probe_cache(&t.path);
                let local = || {
                    probe::probe_cached(&t.path.join(crate::tier::META_DIR), &cache, reprobe, &ProbeOptions::default())
                        .map(|p| (p.read_bps, p.write_bps))
                        .map_err(|e| format!("{e}\n(set read_bandwidth/write_bandwidth for tier '{}' in the config to skip probing)", t.name))
                };
                let (r, w) = match crate::coord::shared_probe(
                    &dir,
                    &sh.node,
                    crate::coord::PROBE_WAIT,
                    local,
                ) {
                    Ok(((r, w), how)) => {
                        log::info!(
                            "tier '{}': bandwidth {} ({:.0} MB/s read, {:.0} MB/s write)",
                            t.name,
                            match how {
                                crate::coord::ProbeOutcome::Cached => "from the job's ledger",
                                crate::coord::ProbeOutcome::Elected => {
                                    "probed by this node for the job"
                                }
                            },
                            r / 1e6,
                            w / 1e6
                        );
                        (r, w)
                    }
                    // This node's own probe failed: a second try would fail the same.
                    Err(crate::coord::SharedProbeError::Probe(e)) => {
                        return Err(Failure::runtime(e))
                    }
                    Err(crate::coord::SharedProbeError::Ledger(e)) => {
                        log::warn!(
                            "tier '{}': no bandwidth for the job from {}: {e}; probing it \
                             from this node",
                            t.name,
                            dir.display()
                        );
                        let c = Tier::probe_cache(&t.path);
                        let p = probe::probe_cached(&t.path.join(crate::tier::META_DIR), &c, reprobe, &ProbeOptions::default())
                            .map_err(|e| Failure::runtime(format!("{e}\n(set read_bandwidth/write_bandwidth for tier '{}' in the config to skip probing)", t.name)))?;
                        (p.read_bps, p.write_bps)
                    }
                };
                (r, w, BandwidthSource::Probe)
            }
            (None, None) => {
                let cache = Tier::probe_cache(&t.path);
                if reprobe || !cache.exists() {
                    progress(&format!(
                        "probing tier '{}' at {} (once; cached in {})",
                        t.name,
                        t.path.display(),
                        cache.display()
                    ));
                }
                let p = probe::probe_cached(&t.path.join(crate::tier::META_DIR), &cache, reprobe, &ProbeOptions::default())
                    .map_err(|e| Failure::runtime(format!("{e}\n(set read_bandwidth/write_bandwidth for tier '{}' in the config to skip probing)", t.name)))?;
                (p.read_bps, p.write_bps, BandwidthSource::Probe)
            }
        };
        tier.read_bps = r;
        tier.write_bps = w;
        tier.bandwidth_source = src;
        // By default each tier may hold an equal part of the FUSE threads, so a slow tier
        // can never block all of them while a fast one idles.
        let limit = t
            .max_in_flight
            .unwrap_or((config.mount.threads / config.tiers.len()).max(4));
        tier.queue = crate::tierio::TierQueue::new(limit, config.mount.exclusive_tiers);
        tiers.push(tier);
    }
    Ok(tiers)
}

fn run_daemon(opts: &MountOptions, config: &MountConfig) -> Result<(), Failure> {
    let mut ready = Ready::from_env();
    let r = serve(opts, config, &mut ready);
    if let Err(f) = &r {
        ready.fail(f);
        log::error!("{f}");
    }
    r
}

fn serve(opts: &MountOptions, config: &MountConfig, ready: &mut Ready) -> Result<(), Failure> {
    crate::cli::init_logging(config);
    install_signal_handlers();
    raise_fd_limit();
    let degraded = opts.degraded || config.mount.degraded;
    let missing = config
        .prepare_tier_dirs_degraded(degraded)
        .map_err(|e| Failure::usage(e.to_string()))?;
    for (i, why) in &missing {
        let msg = format!(
            "tier '{}' is missing, mounting degraded without it: files with pieces on it \
             answer EIO, whole files on it are not listed, new data goes to the other tiers \
             ({why})",
            config.tiers[*i].name
        );
        log::warn!("{msg}");
        ready.say(&format!("MSG WARNING: {msg}"));
    }
    let mountpoint = resolve_outer(&opts.mountpoint);
    sweep_stale_scratch(config, &missing, &mut |m| ready.say(&format!("MSG {m}")));
    let lock = LockRequest {
        mountpoint: Some(mountpoint.clone()),
        scratch: config.mount.scratch,
        break_lock: opts.break_lock,
    };
    let tiers = open_tiers_degraded(config, opts.reprobe, &missing, &lock, |m| {
        ready.say(&format!("MSG {m}"))
    })?;
    if config.mount.scratch {
        log::info!(
            "scratch mode: unmounting discards the data and removes the tier folders and {}",
            mountpoint.display()
        );
    }
    if config.placement.layout == crate::config::Layout::Stripe {
        if let Some(t) = tiers.iter().find(|t| !t.user_xattrs) {
            return Err(Failure::usage(format!(
                "tier '{}' ({}) does not store user xattrs, which layout = \"stripe\" needs to record each piece's layout; set layout = \"whole-file\" under [placement] in {}, or use a filesystem with user xattrs there",
                t.name,
                t.root.display(),
                config.source.display()
            )));
        }
    }
    for t in tiers.iter().filter(|t| !t.missing) {
        log::info!(
            "tier '{}' at {}: read {:.0} MB/s, write {:.0} MB/s ({:?}), O_DIRECT {}",
            t.name,
            t.root.display(),
            t.read_bps / 1e6,
            t.write_bps / 1e6,
            t.bandwidth_source,
            if t.direct_io { "yes" } else { "no (buffered)" }
        );
    }
    // A report of an earlier daemon on these tiers is stale now.
    let lost_report = lost_report_path(&tiers[0].root);
    prepare_lost_report(&lost_report);
    // Staging memory from what this process's job may use: sized here, in the daemon,
    // because the limit is that of the cgroup the daemon runs in.
    let staging =
        crate::cache::memory::Plan::new(&config.cache, crate::cache::memory::Limit::detect());
    match (&staging.cache, &staging.warning) {
        (_, Some(why)) => log::warn!("staging memory {why}"),
        (Some(c), None) => log::info!(
            "staging memory: {}, {}",
            crate::units::fmt_bytes(c.size),
            staging.from
        ),
        (None, None) => log::info!("staging memory {}", staging.from),
    }
    let fs = Arc::new(
        TierFs::with_staging(config, tiers, staging)
            .map_err(|e| Failure::runtime(format!("cannot load the tiers: {e}")))?,
    );
    // TIERFS_TRANSPORT overrides `[mount] transport` (the test suite runs on both).
    let transport = match std::env::var("TIERFS_TRANSPORT").as_deref() {
        Ok("auto") => crate::config::Transport::Auto,
        Ok("uring") => crate::config::Transport::Uring,
        Ok("dev") => crate::config::Transport::Dev,
        Ok(other) => {
            return Err(Failure::usage(format!(
                "TIERFS_TRANSPORT={other:?} is not one of auto, uring, dev"
            )))
        }
        Err(_) => config.mount.transport,
    };
    let session = crate::fuse::Session::start(
        fs.clone(),
        &opts.mountpoint,
        &crate::fuse::SessionOptions {
            source: mount_source(&config.source),
            allow_other: config.mount.allow_other,
            threads: config.mount.threads,
            transport,
        },
    )
    .map_err(Failure::runtime)?;
    // The mount must answer before we say it is ready.
    let probe_path = opts.mountpoint.join(&config.mount.stats_dir).join("config");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match std::fs::metadata(&probe_path) {
            Ok(_) => break,
            Err(e) if Instant::now() > deadline => {
                return Err(Failure::runtime(format!(
                    "the mount at {} does not answer: {e}",
                    opts.mountpoint.display()
                )));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    log::info!(
        "mounted {} (pid {})",
        opts.mountpoint.display(),
        std::process::id()
    );
    // The online bandwidth estimator: about once a second, fold the tiers' recent traffic
    // into their estimates and move the shares with them.
    {
        let fs = fs.clone();
        std::thread::Builder::new()
            .name("tierfs-estimator".into())
            .spawn(move || {
                while !STOP.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_secs(1));
                    fs.refresh_shares();
                    fs.probe_tiers();
                }
            })
            .map_err(|e| Failure::runtime(format!("cannot start the estimator thread: {e}")))?;
    }
    // The shared tiers' ledger (none without shared_ledger): a period about every second,
    // on its own thread since the ledger is on a PFS that may stall.
    if fs.tick_shared() {
        let fs = fs.clone();
        std::thread::Builder::new()
            .name("tierfs-ledger".into())
            .spawn(move || {
                while !STOP.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_secs(1));
                    fs.tick_shared();
                }
            })
            .map_err(|e| Failure::runtime(format!("cannot start the ledger thread: {e}")))?;
    }
    // The cache's writer and prefetcher (none without a [cache] section).
    TierFs::start_cache_threads(&fs)
        .map_err(|e| Failure::runtime(format!("cannot start the cache threads: {e}")))?;
    ready.say("OK");
    ready.0 = None;
    let mut asked_at: Option<Instant> = None;
    let mut detached = false;
    loop {
        if session.finished() {
            log::info!("{} was unmounted", opts.mountpoint.display());
            break;
        }
        if STOP.load(Ordering::SeqCst) && !detached {
            let first = asked_at.is_none();
            let since = *asked_at.get_or_insert_with(Instant::now);
            if first {
                log::info!("signal received: unmounting {}", mountpoint.display());
            }
            // The job's other processes get the same signal and may still hold files open
            // for a moment: keep asking, then detach (the kernel ends the session once the
            // last file is closed, and the daemon serves them until then).
            let lazy = since.elapsed() >= BUSY_UNMOUNT_WAIT;
            match unmount_path(&mountpoint, lazy) {
                Ok(()) => detached = true,
                Err(e) if e.errno == Some(libc::EBUSY) && !lazy => {}
                // Already gone (unmounted by someone else meanwhile): the session ends.
                Err(e) if e.errno == Some(libc::EINVAL) => detached = true,
                Err(e) => {
                    log::warn!(
                        "cannot unmount {}: {}; detaching it",
                        mountpoint.display(),
                        e.message
                    );
                    if let Err(e) = session.unmount() {
                        log::warn!("unmount: {e}");
                    }
                    detached = true;
                }
            }
            if lazy && detached {
                log::warn!(
                    "{} was still busy after {} s: detached it; the daemon serves the files \
                     still open until they are closed",
                    mountpoint.display(),
                    BUSY_UNMOUNT_WAIT.as_secs()
                );
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    session.join();
    // The estimator leaves with the session.
    STOP.store(true, Ordering::SeqCst);
    let lost = fs.shutdown();
    fs.leave_shared();
    if config.mount.scratch {
        remove_scratch(&fs, &mountpoint);
    }
    // Other threads still hold the filesystem while the process exits, so the tiers would
    // never be dropped: let go of the locks (their records go with them) here.
    for t in fs.tiers() {
        t.release_lock();
    }
    if !lost.is_empty() {
        if let Err(e) = write_lost_report(&lost_report, &lost) {
            log::error!("cannot write {}: {e}", lost_report.display());
        }
        return Err(Failure::runtime(format!(
            "unmounted, but {} file(s) lost data that could not be written back (listed in \
             {} and above)",
            lost.len(),
            lost_report.display()
        )));
    }
    log::info!("daemon exiting");
    Ok(())
}

/// How long a daemon told to stop keeps retrying a busy unmount before it detaches the
/// mount: long enough for a job's processes to die of the same signal, well inside the
/// time a batch system allows between TERM and KILL (Slurm's KillWait, 30 s by default).
const BUSY_UNMOUNT_WAIT: Duration = Duration::from_secs(10);

/// Scratch mode, at the end: the data is discarded and each tier folder removed (what is
/// not tierfs's in one is kept, with a warning), then the mountpoint if it is empty.
fn remove_scratch(fs: &TierFs, mountpoint: &Path) {
    for t in fs.tiers().iter().filter(|t| !t.missing) {
        if let Err(e) = crate::tier::discard_contents(&t.root) {
            log::warn!(
                "scratch: cannot remove the data of tier '{}' in {}: {e}",
                t.name,
                t.root.display()
            );
        }
        t.release_lock();
        match crate::tier::remove_folder(&t.root) {
            Ok(()) => log::info!("scratch: removed tier folder {}", t.root.display()),
            Err(e) => log::warn!("scratch: tier '{}': {e}", t.name),
        }
    }
    remove_empty_mountpoint(mountpoint);
}

/// Removes a mountpoint folder of a scratch mount that has gone, if nothing is in it and
/// nothing is mounted there.
fn remove_empty_mountpoint(mountpoint: &Path) {
    if mount_at(mountpoint).is_none() {
        match std::fs::remove_dir(mountpoint) {
            Ok(()) => log::info!("scratch: removed mountpoint {}", mountpoint.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => log::info!("scratch: kept mountpoint {}: {e}", mountpoint.display()),
        }
    }
}

/// Removes the scratch tier folders that a killed daemon of this host left beside this
/// config's tier folders (the folders in the same parents): their lock records say scratch,
/// this host, and a process that is gone. Their lock is taken first, under the node lock,
/// so a daemon still using one, or another mount sweeping at the same moment, is never in
/// the way. The dead mount such a daemon left is detached. Folders of other users, other
/// hosts or without a record are never touched. The config's own tier folders are handled
/// when they are opened ([`Tier::open_for`]).
pub fn sweep_stale_scratch(
    config: &MountConfig,
    missing: &[(usize, String)],
    say: &mut dyn FnMut(&str),
) {
    use crate::lock::{Holder, TakenOver, TierLock};
    use std::os::unix::fs::MetadataExt;
    let euid = crate::sys::euid();
    let mut parents: Vec<&Path> = config
        .tiers
        .iter()
        .enumerate()
        .filter(|(i, _)| !missing.iter().any(|(m, _)| m == i))
        .filter_map(|(_, t)| t.path.parent())
        .collect();
    parents.sort();
    parents.dedup();
    for parent in parents {
        let Ok(entries) = std::fs::read_dir(parent) else {
            continue;
        };
        for e in entries.flatten() {
            let dir = e.path();
            if config.tiers.iter().any(|t| t.path == dir) {
                continue;
            }
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() && m.uid() == euid => {}
                _ => continue,
            }
            let meta = dir.join(crate::tier::META_DIR);
            let Some(h) = crate::lock::holder_of(&meta) else {
                continue;
            };
            if !h.scratch || h.host.is_empty() || !h.is_this_host() || h.is_alive() {
                continue;
            }
            let me = Holder::me("cleanup", None, false);
            let Ok((lock, Some(TakenOver::Stale(h)))) = TierLock::acquire(&dir, &meta, me, false)
            else {
                continue;
            };
            if !h.scratch {
                continue;
            }
            if let Some(mp) = &h.mountpoint {
                if let Some(entry) = mount_at(mp) {
                    if entry.is_tierfs()
                        && daemon_of(mp, &entry, crate::config::DEFAULT_STATS_DIR) == Daemon::Dead
                    {
                        match clear_dead_mount(mp) {
                            Ok(()) => say(&format!(
                                "detached the dead mount at {} of a killed scratch daemon",
                                mp.display()
                            )),
                            Err(e) => say(&format!("{e}")),
                        }
                    }
                }
                remove_empty_mountpoint(mp);
            }
            let discarded = crate::tier::discard_contents(&dir);
            drop(lock);
            let msg = match discarded
                .map_err(|e| e.to_string())
                .and_then(|_| crate::tier::remove_folder(&dir))
            {
                Ok(()) => format!(
                    "removed the scratch tier folder {} left by a tierfs daemon that was \
                     killed ({})",
                    dir.display(),
                    h.describe()
                ),
                Err(e) => format!(
                    "cleaning up the scratch tier folder {} left by a killed tierfs daemon \
                     ({}): {e}",
                    dir.display(),
                    h.describe()
                ),
            };
            log::warn!("{msg}");
            say(&msg);
        }
    }
}

fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// `tierfs unmount`: unmounts and waits until the daemon has exited. Root may unmount any
/// user's tierfs mount (a batch system's epilog does).
pub fn unmount(mp: &Path, stats_dir: &str) -> Result<(), Failure> {
    let path = resolve_outer(mp);
    let Some(entry) = mount_at(&path) else {
        return Err(Failure::usage(format!(
            "{} is not a mount point",
            mp.display()
        )));
    };
    if !entry.is_tierfs() {
        return Err(Failure::usage(format!(
            "{} is a {} mount, not tierfs; unmount it with umount",
            mp.display(),
            entry.fstype
        )));
    }
    let pid = match daemon_of(&path, &entry, stats_dir) {
        Daemon::Dead => {
            clear_dead_mount(&path)?;
            eprintln!("tierfs: cleared the dead mount at {}", mp.display());
            return Ok(());
        }
        Daemon::Live(d) => d,
    };
    if let Err(e) = unmount_path(&path, false) {
        let hint = if e.errno == Some(libc::EBUSY) {
            format!(
                " (a process is using it: see `fuser -vm {}`; or detach it now and let it go \
                 when they are done: `umount -l` as root, `fusermount3 -uz`)",
                mp.display()
            )
        } else if e.errno == Some(libc::EPERM) || crate::sys::euid() != 0 {
            " (only its owner or root can unmount it)".to_string()
        } else {
            String::new()
        };
        return Err(Failure::runtime(format!(
            "cannot unmount {}: {}{hint}",
            mp.display(),
            e.message
        )));
    }
    let report = pid.as_ref().map(|(_, t)| lost_report_path(t));
    if let Some((pid, _)) = pid {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid) {
            if Instant::now() > deadline {
                return Err(Failure::runtime(format!(
                    "unmounted, but the daemon (pid {pid}) has not exited after 60 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The daemon says here what its unmount could not write back.
        if let Some(text) = report.and_then(|r| std::fs::read_to_string(r).ok()) {
            let mut lines = text.lines();
            if lines.next() == Some(format!("pid {pid}").as_str()) {
                let files: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
                return Err(Failure::runtime(format!(
                    "unmounted, but data was lost: the daemon could not write these back \
                     (see its log):\n  {}",
                    files.join("\n  ")
                )));
            }
        }
    }
    Ok(())
}

/// Whether `pid` has finished exiting (a zombie nobody reaps counts). The group leader
/// shows `Z` as soon as it exits, while the other threads may still be tearing down and
/// holding the tier locks, so it must also be the last task left.
fn is_zombie(pid: u32) -> bool {
    let leader_gone = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
                .unwrap_or(false)
        })
        .unwrap_or(true);
    leader_gone
        && std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.count() <= 1)
            .unwrap_or(true)
}
