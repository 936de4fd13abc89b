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
//! are acknowledged, so either way of leaving keeps every tier consistent.

use crate::config::MountConfig;
use crate::fs::TierFs;
use crate::probe::{self, ProbeOptions};
use crate::tier::{BandwidthSource, Tier};
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
}

/// What a path is, as far as mounting on it goes.
#[derive(Debug, PartialEq, Eq)]
pub enum MountpointState {
    Usable,
    /// A FUSE mount whose daemon is gone (ENOTCONN, ECONNABORTED).
    Dead,
    Missing,
    NotADirectory,
    /// Something is already mounted there and answers.
    Mounted,
}

/// Whether an errno is what a FUSE mount whose daemon is gone answers: ENOTCONN once the
/// connection is down, ECONNABORTED to a request that was waiting when it went down (the
/// first stat right after the daemon was killed).
pub fn is_dead_mount_errno(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED))
}

/// Looks at a would-be mountpoint.
pub fn mountpoint_state(mp: &Path) -> MountpointState {
    match std::fs::metadata(mp) {
        Err(e) if is_dead_mount_errno(&e) => MountpointState::Dead,
        Err(_) => MountpointState::Missing,
        Ok(m) if !m.is_dir() => MountpointState::NotADirectory,
        Ok(_) => {
            if is_mountpoint(mp) {
                // stat can answer from the kernel's attribute cache for up to the attribute
                // TTL after a FUSE daemon died; statfs always asks the daemon.
                match crate::sys::statvfs(mp) {
                    Err(e) if is_dead_mount_errno(&e) => MountpointState::Dead,
                    _ => MountpointState::Mounted,
                }
            } else {
                MountpointState::Usable
            }
        }
    }
}

/// Whether `mp` is listed as a mount point in /proc/self/mountinfo.
pub fn is_mountpoint(mp: &Path) -> bool {
    let Ok(canon) = std::fs::canonicalize(mp).or_else(|_| Ok::<_, ()>(mp.to_path_buf())) else {
        return false;
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    info.lines().any(|l| {
        l.split(' ').nth(4).map(unescape_mount_path).as_deref()
            == Some(canon.as_os_str().to_string_lossy().as_ref())
    })
}

fn unescape_mount_path(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
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
    let config = MountConfig::load(&opts.config).map_err(|e| Failure::usage(e.to_string()))?;
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
    open_tiers_degraded(config, reprobe, &[], progress)
}

/// [`open_tiers`], leaving out the tiers in `missing` (index, why): they keep their place
/// as [`Tier::missing`] placeholders.
pub fn open_tiers_degraded(
    config: &MountConfig,
    reprobe: bool,
    missing: &[(usize, String)],
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
        let mut tier = Tier::open(
            i,
            &t.name,
            &t.path,
            0.0,
            0.0,
            BandwidthSource::Config,
            t.capacity,
        )
        .map_err(|e| Failure::runtime(e.to_string()))?;
        let (r, w, src) = match (t.read_bandwidth, t.write_bandwidth) {
            (Some(r), Some(w)) => (r, w, BandwidthSource::Config),
            (Some(r), None) => (r, r, BandwidthSource::Config),
            (None, Some(w)) => (w, w, BandwidthSource::Config),
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
        tier.queue = crate::sched::TierQueue::new(limit, config.mount.exclusive_tiers);
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
    let tiers = open_tiers_degraded(config, opts.reprobe, &missing, |m| {
        ready.say(&format!("MSG {m}"))
    })?;
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
    let fs = Arc::new(
        TierFs::new(config, tiers)
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
    // The cache's writer and prefetcher (none without a [cache] section).
    TierFs::start_cache_threads(&fs)
        .map_err(|e| Failure::runtime(format!("cannot start the cache threads: {e}")))?;
    ready.say("OK");
    ready.0 = None;
    loop {
        if STOP.load(Ordering::SeqCst) {
            log::info!("signal received: unmounting {}", opts.mountpoint.display());
            if let Err(e) = session.unmount() {
                log::warn!("unmount: {e}");
            }
            // Files still open keep being served; the connection ends with the last one.
            while !session.finished() {
                std::thread::sleep(Duration::from_millis(50));
            }
            break;
        }
        if session.finished() {
            log::info!("{} was unmounted", opts.mountpoint.display());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    session.join();
    let lost = fs.shutdown();
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

/// `tierfs unmount`: unmounts and waits until the daemon has exited.
pub fn unmount(mp: &Path, stats_dir: &str) -> Result<(), Failure> {
    match mountpoint_state(mp) {
        MountpointState::Dead => {
            clear_dead_mount(mp)?;
            eprintln!("tierfs: cleared the dead mount at {}", mp.display());
            return Ok(());
        }
        MountpointState::Mounted => {}
        _ => {
            return Err(Failure::usage(format!(
                "{} is not a mount point",
                mp.display()
            )))
        }
    }
    let snap = crate::cli::read_snapshot(mp, stats_dir).ok();
    let pid = snap.as_ref().map(|s| s.pid);
    let report = snap
        .as_ref()
        .and_then(|s| s.tiers.first())
        .map(|t| lost_report_path(Path::new(&t.path)));
    let ok = if crate::sys::euid() == 0 {
        let c = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes())
            .map_err(|_| Failure::usage("bad mountpoint"))?;
        // SAFETY: c is a valid NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), 0) == 0 }
    } else {
        false
    };
    if !ok {
        let out = Command::new("fusermount3").arg("-u").arg(mp).output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return Err(Failure::runtime(format!(
                    "cannot unmount {}: {} (is a process using it? see `fuser -vm {}`)",
                    mp.display(),
                    String::from_utf8_lossy(&o.stderr).trim(),
                    mp.display()
                )))
            }
            Err(e) => return Err(Failure::runtime(format!("cannot run fusermount3: {e}"))),
        }
    }
    if let Some(pid) = pid {
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
