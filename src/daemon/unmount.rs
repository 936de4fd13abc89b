//! Unmounting: asking the kernel to let go of a mount, and `tierfs unmount`, which also
//! waits for the daemon to exit and reports what its unmount could not write back.

use super::lost::{lost_report_path, read_lost_report};
use super::mountinfo::{daemon_of, mount_at, resolve_outer, Daemon};
use crate::error::failure::Failure;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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
        if let Some(files) = report.and_then(|r| read_lost_report(&r, pid)) {
            return Err(Failure::runtime(format!(
                "unmounted, but data was lost: the daemon could not write these back \
                 (see its log):\n  {}",
                files.join("\n  ")
            )));
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
