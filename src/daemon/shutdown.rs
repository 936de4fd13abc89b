//! Leaving: the signals that tell the daemon to stop, its own unmount on them, and what it
//! does once the session has ended (write-back, scratch removal, the lost report).
//!
//! The daemon leaves on SIGTERM/SIGINT/SIGHUP (it unmounts itself) or when the mount goes
//! away (`umount`, `fusermount3 -u`, `tierfs unmount`). Writes are on the tiers when they
//! are acknowledged, so either way of leaving keeps every tier consistent. A batch system
//! ends a job with TERM to every process of it and then KILL, and allows no new job steps
//! by then, so the daemon must clean up after itself on TERM: it unmounts (waiting a little
//! while the job's other processes still hold files open, then detaching), and in scratch
//! mode discards the data and removes the tier folders and the mountpoint.

use super::lost::write_lost_report;
use super::scratch::remove_scratch;
use super::unmount::unmount_path;
use crate::config::MountConfig;
use crate::error::failure::Failure;
use crate::vfs::TierFs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a daemon told to stop keeps retrying a busy unmount before it detaches the
/// mount: long enough for a job's processes to die of the same signal, well inside the
/// time a batch system allows between TERM and KILL (Slurm's KillWait, 30 s by default).
const BUSY_UNMOUNT_WAIT: Duration = Duration::from_secs(10);

/// Set by a signal, and at the end for the helper threads.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub(super) fn install_signal_handlers() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: on_signal is async-signal-safe (it only stores to an atomic).
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// Whether the daemon was told to stop (or is leaving): the helper threads' exit test.
pub(super) fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Tells the helper threads to leave (the session has ended).
pub(super) fn stop_helpers() {
    STOP.store(true, Ordering::SeqCst);
}

/// Waits until the session ends; on a signal, unmounts `mountpoint` (the resolved form
/// of `given`, the path as the user gave it), detaching it if it stays busy.
pub(super) fn wait_for_end(session: &crate::fuse::Session, given: &Path, mountpoint: &Path) {
    let mut asked_at: Option<Instant> = None;
    let mut detached = false;
    loop {
        if session.finished() {
            log::info!("{} was unmounted", given.display());
            break;
        }
        if stopping() && !detached {
            let first = asked_at.is_none();
            let since = *asked_at.get_or_insert_with(Instant::now);
            if first {
                log::info!("signal received: unmounting {}", mountpoint.display());
            }
            detached = unmount_on_signal(session, mountpoint, since);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One try at the unmount a signal asked for; whether the mount is detached now.
fn unmount_on_signal(session: &crate::fuse::Session, mountpoint: &Path, since: Instant) -> bool {
    // The job's other processes get the same signal and may still hold files open
    // for a moment: keep asking, then detach (the kernel ends the session once the
    // last file is closed, and the daemon serves them until then).
    let lazy = since.elapsed() >= BUSY_UNMOUNT_WAIT;
    let detached = match unmount_path(mountpoint, lazy) {
        Ok(()) => true,
        Err(e) if e.errno == Some(libc::EBUSY) && !lazy => false,
        // Already gone (unmounted by someone else meanwhile): the session ends.
        Err(e) if e.errno == Some(libc::EINVAL) => true,
        Err(e) => {
            log::warn!(
                "cannot unmount {}: {}; detaching it",
                mountpoint.display(),
                e.message
            );
            if let Err(e) = session.unmount() {
                log::warn!("unmount: {e}");
            }
            true
        }
    };
    if lazy && detached {
        log::warn!(
            "{} was still busy after {} s: detached it; the daemon serves the files \
             still open until they are closed",
            mountpoint.display(),
            BUSY_UNMOUNT_WAIT.as_secs()
        );
    }
    detached
}

/// After the session: writes back what is cached, leaves the shared tiers, removes a
/// scratch mount's data, lets go of the tier locks, and fails naming the files whose data
/// could not be written back (also in the lost report for `tierfs unmount`).
pub(super) fn finish(
    fs: &TierFs,
    config: &MountConfig,
    mountpoint: &Path,
    lost_report: &Path,
) -> Result<(), Failure> {
    // The estimator leaves with the session.
    STOP.store(true, Ordering::SeqCst);
    let lost = fs.shutdown();
    fs.leave_shared();
    if config.mount.scratch {
        remove_scratch(fs, mountpoint);
    }
    // Other threads still hold the filesystem while the process exits, so the tiers would
    // never be dropped: let go of the locks (their records go with them) here.
    for t in fs.tiers() {
        t.release_lock();
    }
    if !lost.is_empty() {
        if let Err(e) = write_lost_report(lost_report, &lost) {
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
