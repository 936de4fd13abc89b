//! Reading a running mount from outside: the files it serves under `MOUNTPOINT/.tierfs/`.
//!
//! `tierfs stat`, `record`, `ds-config` and the daemon's own checks of a mount (whose pid
//! holds it, whether it answers) all go through here, so a missing or foreign mount is
//! reported the same way everywhere.

use crate::failure::Failure;
use crate::stats::Snapshot;
use std::path::Path;

/// Reads one file of a mount's stats folder (`stats.json`, `metrics`, `config`, ...).
pub fn read_stats_file(mp: &Path, stats_dir: &str, name: &str) -> Result<String, Failure> {
    let path = mp.join(stats_dir).join(name);
    std::fs::read_to_string(&path).map_err(|e| {
        Failure::runtime(format!(
            "{}: {e} (is {} a tierfs mount?)",
            path.display(),
            mp.display()
        ))
    })
}

/// Reads a mount's `stats.json`.
pub fn read_snapshot(mp: &Path, stats_dir: &str) -> Result<Snapshot, Failure> {
    let s = read_stats_file(mp, stats_dir, "stats.json")?;
    serde_json::from_str(&s).map_err(|e| {
        let path = mp.join(stats_dir).join("stats.json");
        Failure::runtime(format!("{}: {e}", path.display()))
    })
}
