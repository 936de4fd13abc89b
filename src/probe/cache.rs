//! The probe cache: one tier's last result as a JSON file (by default in the tier's
//! `.tierfs-meta/`), read instead of measuring again, and written (atomically, beside it)
//! only when the machine was not short of cores while the probe ran.
//!
//! Apart from the measurement (the parent module) because it is a different question:
//! whether to trust a stored figure, not how to get one. A cache that cannot be read or
//! does not parse is never an error: the tier is measured again.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{probe_dir, ProbeError, ProbeOptions, ProbeResult, TempFile};
use crate::units::fmt_rate;

/// Returns the cached result in `cache_file` if there is one, else probes `dir` and caches.
///
/// With `fresh` the cache is not read. A cache file that cannot be read or parsed is ignored
/// (with a warning) and replaced. A result measured while the machine was short of cores
/// ([`CpuWait::busy`](super::CpuWait::busy)) is returned with a warning and not cached (an older cache stays). The new result is written to a temporary file beside
/// `cache_file` and renamed over it, creating the parent folder if needed; if that fails the
/// result is still returned, with a warning.
pub fn probe_cached(
    dir: &Path,
    cache_file: &Path,
    fresh: bool,
    opts: &ProbeOptions,
) -> Result<ProbeResult, ProbeError> {
    if !fresh {
        if let Some(r) = read_cache(cache_file) {
            return Ok(r);
        }
    }
    let r = probe_dir(dir, opts)?;
    if let Some(w) = r.cpu_wait.filter(|w| w.exceeds(opts.cpu_wait_limit)) {
        log::warn!(
            "probe of {}: tasks waited for a core {:.0} % of the probe's time, so its figures \
             (read {}, write {}) may measure the CPU rather than the tier: they are used now \
             but not cached, and the next mount probes again (`tierfs probe --fresh` on a \
             quiet node caches them; read_bandwidth/write_bandwidth in the config skip probing)",
            dir.display(),
            w.worst().unwrap_or(0.0) * 100.0,
            fmt_rate(r.read_bps),
            fmt_rate(r.write_bps),
        );
        return Ok(r);
    }
    if let Err(e) = write_cache(cache_file, &r) {
        log::warn!(
            "probe of {}: cannot write cache file {}: {e}",
            dir.display(),
            cache_file.display()
        );
    }
    Ok(r)
}

fn read_cache(cache_file: &Path) -> Option<ProbeResult> {
    let text = match std::fs::read(cache_file) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            log::warn!(
                "cannot read probe cache {}: {e}; probing again",
                cache_file.display()
            );
            return None;
        }
    };
    match serde_json::from_slice::<ProbeResult>(&text) {
        Ok(r) if valid_rate(r.read_bps) && valid_rate(r.write_bps) => Some(r),
        Ok(_) => {
            log::warn!(
                "probe cache {} holds a zero or invalid bandwidth; probing again",
                cache_file.display()
            );
            None
        }
        Err(e) => {
            log::warn!(
                "probe cache {} is not valid: {e}; probing again",
                cache_file.display()
            );
            None
        }
    }
}

pub(super) fn valid_rate(bps: f64) -> bool {
    bps.is_finite() && bps > 0.0
}

fn write_cache(cache_file: &Path, r: &ProbeResult) -> io::Result<()> {
    if let Some(parent) = cache_file.parent() {
        if !parent.as_os_str().is_empty() {
            std::fs::create_dir_all(parent)?;
        }
    }
    let mut tmp_name = cache_file
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "probe".into());
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = cache_file.with_file_name(tmp_name);
    let guard = TempFile(tmp.clone());
    let mut json = serde_json::to_vec_pretty(r).map_err(io::Error::other)?;
    json.push(b'\n');
    {
        let f = File::create(&tmp)?;
        f.write_all_at(&json, 0)?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, cache_file)?;
    std::mem::forget(guard);
    Ok(())
}
