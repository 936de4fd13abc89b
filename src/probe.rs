//! Measures a directory's sequential read and write bandwidth the way DeepSpeed uses it.
//!
//! (Contract stub: the measurement is being written; the types are final.)

use std::path::Path;
use std::time::Duration;

/// What a probe measured.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ProbeResult {
    /// Bytes per second, sequential reads.
    pub read_bps: f64,
    /// Bytes per second, sequential writes.
    pub write_bps: f64,
    /// Whether O_DIRECT was accepted; false means buffered I/O + fsync was measured.
    pub direct_io: bool,
    /// Unix seconds when it was measured.
    pub measured_at: u64,
    /// Bytes moved in each direction.
    pub bytes: u64,
}

/// How hard to probe.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Bytes of the test file.
    pub file_size: u64,
    /// Minimum time per direction; the probe repeats passes until this much time has gone.
    pub min_time: Duration,
    /// Requests in flight.
    pub queue_depth: usize,
    /// Request size.
    pub block_size: usize,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            file_size: 1 << 30,
            min_time: Duration::from_secs(3),
            queue_depth: 8,
            block_size: 1 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("probe of {dir}: {msg}")]
    Io { dir: String, msg: String },
}

/// Measures `dir`. Writes and removes a temporary file in it.
pub fn probe_dir(dir: &Path, opts: &ProbeOptions) -> Result<ProbeResult, ProbeError> {
    let _ = (dir, opts);
    Err(ProbeError::Io { dir: dir.display().to_string(), msg: "unimplemented".into() })
}

/// Returns the cached result in `cache_file` if there is one, else probes `dir` and caches.
pub fn probe_cached(
    dir: &Path,
    cache_file: &Path,
    fresh: bool,
    opts: &ProbeOptions,
) -> Result<ProbeResult, ProbeError> {
    let _ = (cache_file, fresh);
    probe_dir(dir, opts)
}

/// A human table: one row per (name, path, result).
pub fn render_table(rows: &[(String, String, ProbeResult)]) -> String {
    let _ = rows;
    String::new()
}
