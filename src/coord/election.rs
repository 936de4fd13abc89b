//! One bandwidth probe per job ([`shared_probe`]): the node that wins an election in the
//! ledger folder probes the shared tier and leaves the figure there for the others.
//!
//! Apart from the periods' entries (`ledger.rs`) because it runs once, before the mount,
//! from the daemon's tier setup, and shares only the folder and its atomic replace.

use super::ledger::replace_file;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a node that lost the probe election waits for the winner's figure before it
/// probes the tier itself.
pub const PROBE_WAIT: Duration = Duration::from_secs(120);

/// The probe figure cached for the job, (read, write) bytes/s.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ProbeRecord {
    read_bps: f64,
    write_bps: f64,
    node: String,
}

/// How [`shared_probe`] got its figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// Another node's figure, from the ledger.
    Cached,
    /// This node won the election, probed, and cached the figure for the others.
    Elected,
}

/// Why [`shared_probe`] has no figure.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SharedProbeError {
    /// This node was elected and its own probe failed: probing again would fail the same.
    #[error("{0}")]
    Probe(String),
    /// The ledger gave no figure (unwritable, another node's probe failed or never
    /// finished): the caller probes on its own.
    #[error("{0}")]
    Ledger(String),
}

/// One bandwidth probe per job: the node that creates `probe.elect` in `dir` with
/// `O_EXCL` runs `probe` and caches the figure in `probe.json` (replaced atomically); the
/// others wait up to `wait` for it, or until the winner writes `probe.failed` (its probe
/// failed: they need not wait it out). Probing the shared tier from every node at once would
/// measure 1/N of it each and load it N times. A figure that cannot be cached is still
/// returned (with a warning).
pub fn shared_probe(
    dir: &Path,
    node: &str,
    wait: Duration,
    probe: impl FnOnce() -> Result<(f64, f64), String>,
) -> Result<((f64, f64), ProbeOutcome), SharedProbeError> {
    use SharedProbeError::Ledger;
    let cache = dir.join("probe.json");
    let read_cache = || -> Option<(f64, f64)> {
        let r: ProbeRecord = serde_json::from_slice(&std::fs::read(&cache).ok()?).ok()?;
        (r.read_bps > 0.0 && r.write_bps > 0.0).then_some((r.read_bps, r.write_bps))
    };
    if let Some(f) = read_cache() {
        return Ok((f, ProbeOutcome::Cached));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| Ledger(format!("cannot create {}: {e}", dir.display())))?;
    let elect = dir.join("probe.elect");
    let failed = dir.join("probe.failed");
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&elect)
    {
        Ok(mut f) => {
            let _ = writeln!(f, "node {node} pid {}", std::process::id());
            let (r, w) = probe().map_err(|e| {
                // The others stop waiting at once and try on their own.
                let _ = replace_file(&failed, format!("node {node}: {e}\n").as_bytes(), None);
                SharedProbeError::Probe(e)
            })?;
            let rec = ProbeRecord {
                read_bps: r,
                write_bps: w,
                node: node.to_string(),
            };
            let written = serde_json::to_vec(&rec)
                .map_err(std::io::Error::other)
                .and_then(|text| replace_file(&cache, &text, None));
            if let Err(e) = written {
                log::warn!(
                    "cannot cache the probe in {} ({e}): the job's other nodes will probe on \
                     their own after {} s",
                    cache.display(),
                    wait.as_secs()
                );
            }
            Ok(((r, w), ProbeOutcome::Elected))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let deadline = Instant::now() + wait;
            loop {
                if let Some(f) = read_cache() {
                    return Ok((f, ProbeOutcome::Cached));
                }
                if let Ok(why) = std::fs::read_to_string(&failed) {
                    return Err(Ledger(format!(
                        "the probe elected in {} failed ({})",
                        elect.display(),
                        why.trim()
                    )));
                }
                if Instant::now() >= deadline {
                    let who = std::fs::read_to_string(&elect).unwrap_or_default();
                    return Err(Ledger(format!(
                        "{} ({}) was elected to probe but left no figure in {} within {} s",
                        elect.display(),
                        who.trim(),
                        cache.display(),
                        wait.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Err(e) => Err(Ledger(format!("cannot create {}: {e}", elect.display()))),
    }
}
