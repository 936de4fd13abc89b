//! The background fork: `tierfs mount` without `--foreground` re-runs itself as a detached
//! child with a pipe, and returns only once the child says on it that the mount answers.
//!
//! The child probes, opens and locks the tiers, mounts, checks that the mount answers, and
//! only then writes `OK` on the pipe. The parent relays the child's progress (`MSG` lines)
//! and exits 0 only after `OK`, so a script can use the mount on the next line; any failure
//! before that (`ERR CODE MESSAGE`) is printed by the parent with the child's own message
//! and exit code.

use super::fresh::Before;
use super::options::MountOptions;
use crate::config::MountConfig;
use crate::error::failure::Failure;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The environment variable that hands the readiness pipe to the child.
const READY_FD_ENV: &str = "TIERFS_READY_FD";

/// Whether this process is the daemon a [`spawn_background`] started.
pub(super) fn is_background_child() -> bool {
    std::env::var_os(READY_FD_ENV).is_some()
}

/// Starts the daemon as a detached child and waits until it has mounted; `before`: what the
/// tier folders held before this mount (the child removes what was new if it fails).
pub(super) fn spawn_background(
    opts: &MountOptions,
    config: &MountConfig,
    before: &Before,
) -> Result<(), Failure> {
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
    let mut cmd = daemon_command(exe, opts);
    let child_fd = write_end.as_raw_fd();
    let (before_env, before_val) = before.env();
    cmd.env(READY_FD_ENV, child_fd.to_string())
        .env(before_env, before_val)
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
    wait_until_ready(read_end, &mut child, opts, &log)
}

/// The same `tierfs mount` again, to run as the daemon (it stays in the foreground).
fn daemon_command(exe: PathBuf, opts: &MountOptions) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg("mount");
    if let Some(c) = &opts.config {
        cmd.arg("--config").arg(c);
    }
    for o in &opts.overrides {
        cmd.arg("-o").arg(o.as_option());
    }
    cmd.arg(&opts.mountpoint);
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
    if opts.nonempty {
        cmd.arg("--nonempty");
    }
    cmd
}

/// Relays the child's lines until it says the mount answers, or fails, or exits.
fn wait_until_ready(
    read_end: OwnedFd,
    child: &mut std::process::Child,
    opts: &MountOptions,
    log: &std::path::Path,
) -> Result<(), Failure> {
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
pub(super) struct Ready(Option<std::fs::File>);

impl Ready {
    pub(super) fn from_env() -> Ready {
        let fd = std::env::var(READY_FD_ENV)
            .ok()
            .and_then(|v| v.parse::<i32>().ok());
        std::env::remove_var(READY_FD_ENV);
        // SAFETY: the parent passed this descriptor to us for exactly this use and nothing
        // else in this process owns it.
        Ready(fd.map(|fd| unsafe { std::fs::File::from_raw_fd(fd) }))
    }
    pub(super) fn say(&mut self, line: &str) {
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
    /// Tells the parent the mount answers, and lets go of the pipe.
    pub(super) fn ok(&mut self) {
        self.say("OK");
        self.0 = None;
    }
    pub(super) fn fail(&mut self, f: &Failure) {
        self.say(&format!(
            "ERR {} {}",
            f.code,
            f.message.replace('\n', "\\n")
        ));
    }
}
