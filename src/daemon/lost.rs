//! The lost report: how a daemon whose unmount could not write every byte back tells the
//! `tierfs unmount` waiting for it which files lost data.
//!
//! The daemon's exit code goes nowhere when the kernel ended the session (a plain umount),
//! so the report is a file in the first tier's meta folder, with room for it reserved at
//! mount time: data is lost at unmount mostly because the tiers are full.

use std::path::{Path, PathBuf};

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
pub(super) fn prepare_lost_report(path: &Path) {
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
pub(super) fn write_lost_report(path: &Path, lost: &[String]) -> std::io::Result<()> {
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

/// The files the report at `path` lists, if daemon `pid` wrote it (an earlier daemon's
/// report, or an empty one, says nothing about this one).
pub(super) fn read_lost_report(path: &Path, pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    if lines.next() != Some(format!("pid {pid}").as_str()) {
        return None;
    }
    Some(
        lines
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
    )
}
