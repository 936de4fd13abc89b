//! `tierfs ctl MOUNTPOINT COMMAND...`: one command to a running mount through its
//! `.tierfs/control`, and the daemon's reply.
//!
//! The control file's protocol (docs/CONFIG.md, "Live control"): the file is opened
//! read-write, the command written in one `write`, and the reply read back through the
//! same handle: `ok ...` lines, or `error: ...` while the write failed with an errno. The
//! reply goes to stdout; a refusal to stderr, with exit status 2 for a command the daemon
//! could not parse (EINVAL) and 1 for any other refusal, as for every tierfs command.

use crate::error::failure::Failure;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// Runs `tierfs ctl`.
pub fn run(
    mountpoint: &Path,
    command: &[String],
    wait: bool,
    stats_dir: &str,
) -> Result<(), Failure> {
    // Checked before the command is sent: a refused usage must not have taken effect.
    let waits_for = match command {
        [word, tier] if word == "drain" => Some(tier),
        _ if wait => return Err(Failure::usage("--wait goes with `drain TIER` only")),
        _ => None,
    };
    let line = command.join(" ");
    let reply = send(mountpoint, stats_dir, &line)?;
    print!("{reply}");
    let _ = std::io::stdout().flush();
    match waits_for {
        Some(tier) if wait => wait_drained(mountpoint, stats_dir, tier),
        _ => Ok(()),
    }
}

/// Writes `text` to the mount's control file and returns the daemon's reply; a refusal
/// is a [`Failure`] with the daemon's reason.
pub fn send(mountpoint: &Path, stats_dir: &str, text: &str) -> Result<String, Failure> {
    let path = mountpoint.join(stats_dir).join("control");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => {
                    "only the mount's owner (and root) may use its control file".to_string()
                }
                _ => format!("is {} a tierfs mount?", mountpoint.display()),
            };
            Failure::runtime(format!("{}: {e} ({hint})", path.display()))
        })?;
    let mut text = text.to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    // One write: the daemon takes each write as one request, refused or run whole.
    let wrote = f.write(text.as_bytes());
    let mut reply = String::new();
    let read = f.read_to_string(&mut reply);
    match wrote {
        Ok(n) if n == text.len() => Ok(reply),
        Ok(n) => Err(Failure::runtime(format!(
            "{}: the daemon took {n} of {} bytes of the command",
            path.display(),
            text.len()
        ))),
        Err(e) => {
            let reason = reply
                .trim_end()
                .strip_prefix("error: ")
                .map(str::to_string)
                .filter(|_| read.is_ok())
                // A daemon from before the replies: the errno is all there is.
                .unwrap_or_else(|| format!("refused: {e}"));
            let message = format!("{reason} ({})", errno_name(&e));
            Err(match e.raw_os_error() {
                Some(libc::EINVAL) => Failure::usage(message),
                _ => Failure::runtime(message),
            })
        }
    }
}

/// The errno's symbolic name for the messages (`EBUSY`), or the error's text.
fn errno_name(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(libc::ENOENT) => "ENOENT".into(),
        Some(libc::EBUSY) => "EBUSY".into(),
        Some(libc::ENOSPC) => "ENOSPC".into(),
        Some(libc::EACCES) => "EACCES".into(),
        Some(libc::EIO) => "EIO".into(),
        _ => e.to_string(),
    }
}

/// `--wait` after `drain TIER`: the tier's files and bytes left, on stderr every second,
/// until it holds none; a failure if the drain stops first (the tier resumed or paused).
fn wait_drained(mountpoint: &Path, stats_dir: &str, tier: &str) -> Result<(), Failure> {
    let mut last = String::new();
    loop {
        let snap = crate::client::read_snapshot(mountpoint, stats_dir)?;
        let t = snap
            .tiers
            .iter()
            .find(|t| t.name == tier)
            .ok_or_else(|| Failure::runtime(format!("the mount has no tier '{tier}' now")))?;
        let d = t.drain.clone().unwrap_or_default();
        let now = format!(
            "tier '{tier}' {}: {} files ({}) left, {} files ({}) moved{}",
            t.control,
            t.files,
            crate::units::fmt_bytes(t.used),
            d.moved_files,
            crate::units::fmt_bytes(d.moved_bytes),
            match (&d.last_error, d.failures) {
                (Some(e), n) if n > 0 => format!(", {n} moves failed (last: {e}), retrying"),
                _ => String::new(),
            }
        );
        if now != last {
            eprintln!("{now}");
            last = now;
        }
        match t.control.as_str() {
            "drained" => return Ok(()),
            "draining" => std::thread::sleep(Duration::from_secs(1)),
            other => {
                return Err(Failure::runtime(format!(
                    "the drain of tier '{tier}' stopped: the tier is {other} now"
                )))
            }
        }
    }
}
