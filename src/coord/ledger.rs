//! The ledger folder's format: one small file per node (`node-NODE.json`, an [`Entry`]),
//! each replaced atomically by its node about once a second and read by every other.
//!
//! This is what other nodes, and other versions of tierfs, read off the shared tier, so it
//! is kept apart from the policy computed from it (`plan.rs`): a change here is a change
//! of the protocol (docs/SHARED-TIER.md), one there is not. A file that is not a valid
//! entry is reported, never read; the writer's wall clock is written for people reading
//! the folder and never used by a reader.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Version of the entry format; entries of another version are ignored with a warning.
pub const FORMAT: u32 = 1;

/// Test hook: seconds added to this daemon's wall clock where it writes one (the entry's
/// `wall_ms` and the file's mtime), so a test shows that readers never use them.
pub const CLOCK_OFFSET_ENV: &str = "TIERFS_TEST_CLOCK_OFFSET";

/// One node's entry in the ledger, as written. Fields a later tierfs adds are ignored and
/// missing ones take their defaults, so an entry of the same `format` from another version
/// is read (daemons from before `busy_rate_bps` refuse entries that carry it: the nodes of
/// a job should run one tierfs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub format: u32,
    pub node: String,
    /// Incremented at every publish: the only liveness signal readers use.
    pub seq: u64,
    /// Bytes/s this node moved to and from the shared tier over the last period.
    pub rate_bps: f64,
    /// The same bytes over the time this node had requests in flight on the tier: what it
    /// got while it was using the tier, whatever the share of the period it was idle. A
    /// saturated tier's capacity is the sum of these (not of `rate_bps`, which falls with
    /// the node's own share and would shrink the capacity with it). 0 when unknown.
    #[serde(default)]
    pub busy_rate_bps: f64,
    /// Bytes/s this node moved through all its tiers over the last period: how much work it
    /// has, which is what the shared tier is split by.
    pub demand_bps: f64,
    /// This node saw the tier queue (latency per byte up, throughput not; see
    /// [`crate::tier::Queueing`]).
    pub saturated: bool,
    /// The writer's wall clock, milliseconds since the epoch: for people reading the
    /// ledger, never used by tierfs (clocks of different nodes disagree).
    pub wall_ms: u64,
}

/// The ledger folder of one job's shared tier: `<shared_ledger>/<job>/<tier name>/`.
pub fn ledger_dir(ledger: &Path, job: &str, tier: &str) -> PathBuf {
    ledger.join(job).join(tier)
}

/// A ledger entry's file name for node `node`.
pub(super) fn entry_name(node: &str) -> String {
    format!("node-{node}.json")
}

/// The wall clock as this daemon writes it, [`CLOCK_OFFSET_ENV`] included.
pub(super) fn wall_now() -> SystemTime {
    let off = std::env::var(CLOCK_OFFSET_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .unwrap_or(0.0);
    let now = SystemTime::now();
    if off >= 0.0 {
        now + Duration::from_secs_f64(off)
    } else {
        now.checked_sub(Duration::from_secs_f64(-off))
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }
}

/// Replaces `path` with `bytes` atomically: written to a temporary name in the same folder,
/// then renamed over, so a reader sees the old file or the new one, never a mix. `mtime`
/// sets the file's modification time (the writer's clock, as a PFS client would).
pub(super) fn replace_file(
    path: &Path,
    bytes: &[u8],
    mtime: Option<SystemTime>,
) -> std::io::Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| std::io::Error::other("no file name"))?;
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        if let Some(t) = mtime {
            f.set_modified(t)?;
        }
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// What a ledger folder holds.
#[derive(Debug, Default)]
pub struct Listing {
    /// The valid entries, by node name.
    pub entries: Vec<Entry>,
    /// Files left out: (file name, why).
    pub bad: Vec<(String, String)>,
}

/// Reads the entries of a ledger folder: every `node-*.json`. A file that is not a valid
/// entry (torn by a client that does not rename atomically, garbage, another format, a name
/// that does not match its node) is left out and listed in `bad`; the caller warns once per
/// file.
pub fn read_entries(dir: &Path) -> std::io::Result<Listing> {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for d in std::fs::read_dir(dir)? {
        let d = d?;
        let name = d.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("node-") && name.ends_with(".json")) {
            continue;
        }
        let parsed = std::fs::read(d.path())
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<Entry>(&b).map_err(|e| e.to_string()))
            .and_then(|e| {
                if e.format != FORMAT {
                    Err(format!("format {} (this tierfs reads {FORMAT})", e.format))
                } else if entry_name(&e.node) != name {
                    Err(format!("it names node {:?}", e.node))
                } else if !e.rate_bps.is_finite() || !e.demand_bps.is_finite() {
                    Err("a rate that is not a number".into())
                } else {
                    Ok(e)
                }
            });
        match parsed {
            Ok(e) => ok.push(e),
            Err(why) => bad.push((name, why)),
        }
    }
    ok.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(Listing { entries: ok, bad })
}
