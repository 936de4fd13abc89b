//! The client side: reading a running mount from outside, through the files it serves
//! under `MOUNTPOINT/.tierfs/`, and what the commands make of them. Nothing here is on the
//! daemon's data path; the core never imports it (only the daemon's own checks of a mount,
//! whose pid holds it and whether it answers, read through [`read_snapshot`] as any client
//! does), so the views can change without touching the filesystem.
//!
//! - this file: one stats file or the `stats.json` snapshot, a missing or foreign mount
//!   reported the same way for `tierfs stat`, `record`, `ds-config`, `tune` and the daemon;
//! - [`dsconfig`] (with [`dsmemory`], the job's memory and what fits in it): `tierfs
//!   ds-config`'s DeepSpeed advice from a mount's facts;
//! - [`monitor`]: `tierfs record`'s samples (CSV or JSON lines) and their rates;
//! - [`watch`]: `tierfs stat --watch`'s live screen;
//! - [`plot`]: `tierfs plot`'s figures of a recording.
//!
//! `crate::stats::prom` stays at the root: the daemon's metrics textfile writes through it too.

pub mod dsconfig;
pub mod dsmemory;
pub mod monitor;
pub mod plot;
pub mod watch;

use crate::error::failure::Failure;
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
