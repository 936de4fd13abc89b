//! The daemon itself: from a checked config to a mount that answers, its helper threads,
//! and the wait until it is unmounted or told to stop.
//!
//! Everything that can fail runs before the parent is told `OK` (see [`super::background`]),
//! so a failed mount is reported by `tierfs mount` with its own message and exit code.

use super::background::Ready;
use super::fresh::Before;
use super::lost::{lost_report_path, prepare_lost_report};
use super::mountinfo::resolve_outer;
use super::options::MountOptions;
use super::scratch::sweep_stale_scratch;
use super::shutdown::{self, install_signal_handlers};
use super::tiers::open_tiers_degraded;
use crate::config::{MountConfig, Transport};
use crate::error::failure::Failure;
use crate::tier::{LockRequest, Tier};
use crate::vfs::TierFs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs the daemon in this process until the mount is gone; a failure is also handed to
/// the parent waiting in the background fork, if there is one.
pub(super) fn run_daemon(
    opts: &MountOptions,
    config: &MountConfig,
    before: &Before,
) -> Result<(), Failure> {
    let mut ready = Ready::from_env();
    let r = serve(opts, config, before, &mut ready);
    if let Err(f) = &r {
        ready.fail(f);
        log::error!("{f}");
    }
    r
}

fn serve(
    opts: &MountOptions,
    config: &MountConfig,
    before: &Before,
    ready: &mut Ready,
) -> Result<(), Failure> {
    crate::logging::init(config.mount.log_file.as_deref());
    install_signal_handlers();
    raise_fd_limit();
    let missing = missing_tiers(opts, config, ready)?;
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
    // From here until the mount exists the tiers' locks are ours: a failure removes what
    // this mount made in the tier folders (`undo`) while they still are.
    check_tiers(config, &tiers, &mountpoint).map_err(|f| undo(f, config, before))?;
    super::tiers::record_identities(config, &tiers);
    if !config.mount.scratch {
        super::scratch::unmark(&tiers);
    }
    // A report of an earlier daemon on these tiers is stale now.
    let lost_report = lost_report_path(&tiers[0].root);
    prepare_lost_report(&lost_report);
    // Its failure drops the tiers, and their locks, with it: nothing is removed then.
    let fs = load_core(config, tiers)?;
    let session = transport(config)
        .and_then(|transport| {
            crate::fuse::Session::start(
                fs.clone(),
                &opts.mountpoint,
                &crate::fuse::SessionOptions {
                    source: mount_source(opts.config.as_deref()),
                    allow_other: config.mount.allow_other,
                    threads: config.mount.threads,
                    transport,
                },
            )
            .map_err(Failure::runtime)
        })
        .map_err(|f| undo(f, config, before))?;
    wait_until_answering(&opts.mountpoint, &config.mount.stats_dir)?;
    log::info!(
        "mounted {} (pid {})",
        opts.mountpoint.display(),
        std::process::id()
    );
    let drain = start_threads(&fs)?;
    let mut direct = start_direct(&fs, &opts.mountpoint, &session);
    let textfile = super::textfile::Writer::start(&fs, config, &opts.mountpoint)?;
    ready.ok();
    shutdown::wait_for_end(&session, &opts.mountpoint, &mountpoint);
    if let Some(d) = direct.as_mut() {
        d.stop();
    }
    session.join();
    if let Some(t) = textfile {
        t.stop();
    }
    // A drain may be in the middle of a move: it ends that move (it checks only between
    // files) before the write-back, the scratch removal and the tier locks' release.
    shutdown::stop_helpers();
    if drain.join().is_err() {
        log::error!("the drain thread panicked; its move, if any, is settled at the next mount");
    }
    shutdown::finish(&fs, config, &mountpoint, &lost_report)
}

/// Serves the direct path (`tierfs run`); with `direct = "off"` it answers every program
/// "no" (quietly: they stay on FUSE). A server that cannot start leaves programs on FUSE,
/// with a warning here and one in each program.
fn start_direct(
    fs: &Arc<TierFs>,
    mountpoint: &Path,
    session: &crate::fuse::Session,
) -> Option<crate::direct::Server> {
    match crate::direct::Server::start(fs.clone(), mountpoint, session.notifier()) {
        Ok(s) => Some(s),
        Err(e) => {
            log::warn!(
                "direct path unavailable ({e}): programs under `tierfs run` go through FUSE"
            );
            None
        }
    }
}

/// Prepares the tier folders; in degraded mode, the tiers left out (index, why), each
/// announced.
fn missing_tiers(
    opts: &MountOptions,
    config: &MountConfig,
    ready: &mut Ready,
) -> Result<Vec<(usize, String)>, Failure> {
    let degraded = opts.degraded || config.mount.degraded;
    let mut missing = config
        .prepare_tier_dirs_degraded(degraded)
        .map_err(|e| Failure::usage(e.to_string()))?;
    super::tiers::check_identities(config, &mut missing, degraded)?;
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
    Ok(missing)
}

/// Refuses tiers the layout cannot use, and logs what each tier is.
fn check_tiers(config: &MountConfig, tiers: &[Tier], mountpoint: &Path) -> Result<(), Failure> {
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
    Ok(())
}

/// The filesystem core over the opened tiers, with its staging memory.
fn load_core(config: &MountConfig, tiers: Vec<Tier>) -> Result<Arc<TierFs>, Failure> {
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
    Ok(Arc::new(
        TierFs::with_staging(config, tiers, staging)
            .map_err(|e| Failure::runtime(format!("cannot load the tiers: {e}")))?,
    ))
}

/// The FUSE transport: `TIERFS_TRANSPORT` overrides `[mount] transport` (the test suite
/// runs on both).
fn transport(config: &MountConfig) -> Result<Transport, Failure> {
    Ok(match std::env::var("TIERFS_TRANSPORT").as_deref() {
        Ok("auto") => Transport::Auto,
        Ok("uring") => Transport::Uring,
        Ok("dev") => Transport::Dev,
        Ok(other) => {
            return Err(Failure::usage(format!(
                "TIERFS_TRANSPORT={other:?} is not one of auto, uring, dev"
            )))
        }
        Err(_) => config.mount.transport,
    })
}

/// The mount must answer before we say it is ready.
fn wait_until_answering(mountpoint: &Path, stats_dir: &str) -> Result<(), Failure> {
    let probe_path = mountpoint.join(stats_dir).join("config");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match std::fs::metadata(&probe_path) {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(Failure::runtime(format!(
                    "the mount at {} does not answer: {e}",
                    mountpoint.display()
                )));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The threads beside the FUSE workers; each leaves once the daemon is told to stop.
/// Starts the helper threads; returns the drain thread, which the unmount waits for.
fn start_threads(fs: &Arc<TierFs>) -> Result<std::thread::JoinHandle<()>, Failure> {
    // The online bandwidth estimator: about once a second, fold the tiers' recent traffic
    // into their estimates and move the shares with them.
    {
        let fs = fs.clone();
        std::thread::Builder::new()
            .name("tierfs-estimator".into())
            .spawn(move || {
                while !shutdown::stopping() {
                    std::thread::sleep(Duration::from_secs(1));
                    fs.refresh_shares();
                    fs.probe_tiers();
                }
            })
            .map_err(|e| Failure::runtime(format!("cannot start the estimator thread: {e}")))?;
    }
    // Drains (`drain TIER` on .tierfs/control): idle until a tier drains; then its files
    // move, one after another. A pass that moved nothing but failed waits longer before
    // it tries again (a file held open past the daemon, no room yet).
    let drain = {
        let fs = fs.clone();
        std::thread::Builder::new()
            .name("tierfs-drain".into())
            .spawn(move || {
                while !shutdown::stopping() {
                    let step = fs.drain_step(&|| !shutdown::stopping());
                    let stuck = step.moved == 0 && step.failed > 0;
                    // In short naps, so an unmount does not wait out a long one.
                    for _ in 0..if stuck { 20 } else { 2 } {
                        if shutdown::stopping() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            })
            .map_err(|e| Failure::runtime(format!("cannot start the drain thread: {e}")))?
    };
    // The shared tiers' ledger (none without shared_ledger): a period about every second,
    // on its own thread since the ledger is on a PFS that may stall.
    if fs.tick_shared() {
        let fs = fs.clone();
        std::thread::Builder::new()
            .name("tierfs-ledger".into())
            .spawn(move || {
                while !shutdown::stopping() {
                    std::thread::sleep(Duration::from_secs(1));
                    fs.tick_shared();
                }
            })
            .map_err(|e| Failure::runtime(format!("cannot start the ledger thread: {e}")))?;
    }
    // The cache's writer and prefetcher (none without a [cache] section).
    TierFs::start_cache_threads(fs)
        .map_err(|e| Failure::runtime(format!("cannot start the cache threads: {e}")))?;
    Ok(drain)
}

/// A mount that failed before it existed: what it made in the tier folders goes (the
/// tiers' locks still held), and the message says so.
fn undo(f: Failure, config: &MountConfig, before: &Before) -> Failure {
    let removed = before.undo(config);
    if removed.is_empty() {
        return f;
    }
    let list: Vec<String> = removed.iter().map(|p| p.display().to_string()).collect();
    log::info!("removed what this mount had made: {}", list.join(", "));
    Failure {
        code: f.code,
        message: format!(
            "{}\nthe tier folders are left as they were before this mount (removed {})",
            f.message,
            list.join(", ")
        ),
    }
}

/// The mount's source in /proc/self/mountinfo: the config file, as an fstab line names it,
/// so `mount -a` sees the line is mounted; without one, "tierfs", the source such a line
/// gives ([`crate::cli::mount_helper::NO_CONFIG`]). A path that mount options cannot carry (a
/// comma, white space) is shown as plain "tierfs" too.
fn mount_source(config: Option<&Path>) -> String {
    let Some(config) = config else {
        return "tierfs".to_string();
    };
    let abs = std::path::absolute(config).unwrap_or_else(|_| config.to_path_buf());
    match abs.to_str() {
        Some(s) if !s.contains(|c: char| c == ',' || c == '\\' || c.is_whitespace()) => {
            s.to_string()
        }
        _ => "tierfs".to_string(),
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
