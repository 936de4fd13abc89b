//! How much pinned host memory `tierfs ds-config` may suggest: the smallest of what the
//! host and the job allow, shared by the ranks of the node.
//!
//! DeepSpeed's swap buffers are page-locked (`pin_memory`): the kernel cannot reclaim or
//! swap them, so buffers sized without looking at the node push the job into the OOM
//! killer, or the node into swapping everything else. What bounds them, the smallest wins:
//! - the host's memory (`MemTotal`), and what is available now (`MemAvailable`, plus what
//!   this mount's staging memory holds, which it gives back when the job needs it);
//! - the caller's memory cgroup (v2 `memory.max`, v1 `memory.limit_in_bytes`, walked up to
//!   the root: a batch system limits the job's cgroup, not the step's), read as the mount's
//!   staging memory reads it ([`crate::cache::memory::Limit`]);
//! - Slurm's allocation on this node: `SLURM_MEM_PER_NODE`, else `SLURM_MEM_PER_GPU` times
//!   `SLURM_GPUS_ON_NODE`, else `SLURM_MEM_PER_CPU` times `SLURM_CPUS_ON_NODE` (megabytes,
//!   as Slurm counts them: MiB).
//!
//! All ranks' pinned buffers together are kept under [`PINNED_SHARE`] of that: the rest
//! is for what DeepSpeed also keeps in host memory (the CPU-resident parameters, the
//! optimizer's working set, the Python processes) and for the mount's staging memory.
//! What gives way first is `sub_group_size` (it sizes the optimizer's buffers, the bulk of
//! them), down to [`MIN_SUB_GROUP_SIZE`]; past that `pin_memory` goes off.

use crate::cache::memory::{Limit, Source};
use crate::units::fmt_bytes;

/// All ranks' pinned buffers together stay under this share of the smallest memory bound.
pub const PINNED_SHARE: f64 = 0.25;
/// `sub_group_size` is not lowered below this (elements; 40 MB fp32 swap files): smaller
/// subgroups cost more files and requests per step than they save.
pub const MIN_SUB_GROUP_SIZE: u64 = 10_000_000;
/// Lowered `sub_group_size`s are whole multiples of this.
const SUB_GROUP_STEP: u64 = 1_000_000;

/// The bounds found, each with what it is, in words.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobMemory {
    pub bounds: Vec<(u64, String)>,
}

impl JobMemory {
    /// From this process's `/proc` files and environment; `staged` is what the mount's
    /// staging memory holds now (counted as available: it gives it back).
    pub fn detect(staged: u64) -> JobMemory {
        JobMemory::from_sources(
            &std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
            &std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
            &std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
            |k| std::env::var(k).ok(),
            staged,
        )
    }

    /// From the texts of `/proc/meminfo`, `/proc/self/cgroup`, `/proc/self/mountinfo`
    /// (whose cgroup mounts name the folders read) and an environment.
    pub fn from_sources(
        meminfo: &str,
        cgroups: &str,
        mountinfo: &str,
        env: impl Fn(&str) -> Option<String>,
        staged: u64,
    ) -> JobMemory {
        let mut bounds = Vec::new();
        if let Some((total, available)) = crate::cache::memory::parse_meminfo(meminfo) {
            bounds.push((
                total,
                format!("the host's memory (MemTotal {})", fmt_bytes(total)),
            ));
            let now = available.saturating_add(staged).min(total);
            bounds.push((
                now,
                format!(
                    "the host's available memory (MemAvailable {}{})",
                    fmt_bytes(available),
                    if staged > 0 {
                        format!(" + {} this mount's staging memory holds", fmt_bytes(staged))
                    } else {
                        String::new()
                    }
                ),
            ));
        }
        if let Some(l) = Limit::detect_from(meminfo, cgroups, mountinfo) {
            if !matches!(l.source, Source::Host) {
                bounds.push((l.bytes, l.describe()));
            }
        }
        bounds.extend(slurm(&env));
        JobMemory { bounds }
    }

    /// The smallest bound, `None` when nothing could be read.
    pub fn smallest(&self) -> Option<&(u64, String)> {
        self.bounds.iter().min_by_key(|b| b.0)
    }
}

/// Slurm's allocation on this node, from the job's environment.
fn slurm(env: &impl Fn(&str) -> Option<String>) -> Option<(u64, String)> {
    let num = |k: &str| -> Option<u64> {
        // Counts like SLURM_GPUS_ON_NODE are plain; tolerate "4(x2)" as Slurm prints
        // some per-node lists.
        let v = env(k)?;
        let digits: String = v
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse().ok().filter(|n| *n > 0)
    };
    const MB: u64 = 1 << 20;
    if let Some(mb) = num("SLURM_MEM_PER_NODE") {
        return Some((mb * MB, format!("Slurm's SLURM_MEM_PER_NODE={mb} (MB)")));
    }
    if let (Some(mb), Some(g)) = (num("SLURM_MEM_PER_GPU"), num("SLURM_GPUS_ON_NODE")) {
        return Some((
            mb * MB * g,
            format!("Slurm's SLURM_MEM_PER_GPU={mb} (MB) x SLURM_GPUS_ON_NODE={g}"),
        ));
    }
    if let (Some(mb), Some(c)) = (num("SLURM_MEM_PER_CPU"), num("SLURM_CPUS_ON_NODE")) {
        return Some((
            mb * MB * c,
            format!("Slurm's SLURM_MEM_PER_CPU={mb} (MB) x SLURM_CPUS_ON_NODE={c}"),
        ));
    }
    None
}

/// The pinned buffers chosen: `sub_group_size`, `pin_memory`, the bytes pinned per rank,
/// and what to say about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub sub_group_size: u64,
    pub pin_memory: bool,
    /// Bytes of buffers per rank (pinned when `pin_memory`).
    pub per_rank: u64,
    pub note: String,
}

/// Fits the buffers of one rank (`param_bytes` for the parameters' buffers, which depend
/// on the largest parameter and are left alone; `optimizer_buffers` of `sub_group_size`
/// fp32 elements each) so that `ranks` of them stay under [`PINNED_SHARE`] of `memory`'s
/// smallest bound.
pub fn fit(
    param_bytes: u64,
    optimizer_buffers: usize,
    sub_group_size: u64,
    ranks: usize,
    memory: &JobMemory,
) -> Fit {
    let ranks = ranks.max(1) as u64;
    let opt = |sub: u64| optimizer_buffers as u64 * sub * 4;
    let want = param_bytes + opt(sub_group_size);
    let gb = |b: u64| format!("{:.1} GB", b as f64 / 1e9);
    let Some((limit, by)) = memory.smallest() else {
        return Fit {
            sub_group_size,
            pin_memory: true,
            per_rank: want,
            note: format!(
                "pinned memory: {} per rank, {} for {ranks} rank(s); the host's and the job's \
                 memory could not be read (/proc/meminfo), so nothing was checked against it.",
                gb(want),
                gb(want * ranks)
            ),
        };
    };
    let budget = (*limit as f64 * PINNED_SHARE) as u64;
    let per_rank_budget = budget / ranks;
    let seen = memory
        .bounds
        .iter()
        .map(|b| b.1.clone())
        .collect::<Vec<_>>()
        .join("; ");
    let head = format!(
        "pinned memory: all ranks' buffers together are kept under {:.0}% of the smallest \
         memory bound found ({seen}); that is {by}: {} for {ranks} rank(s), {} each.",
        PINNED_SHARE * 100.0,
        gb(budget),
        gb(per_rank_budget)
    );
    if want <= per_rank_budget {
        return Fit {
            sub_group_size,
            pin_memory: true,
            per_rank: want,
            note: format!(
                "{head} The buffers below take {} per rank ({} in all): they fit.",
                gb(want),
                gb(want * ranks)
            ),
        };
    }
    let room = per_rank_budget.saturating_sub(param_bytes);
    let sub = (room / (4 * optimizer_buffers.max(1) as u64)) / SUB_GROUP_STEP * SUB_GROUP_STEP;
    if sub >= MIN_SUB_GROUP_SIZE {
        return Fit {
            sub_group_size: sub,
            pin_memory: true,
            per_rank: param_bytes + opt(sub),
            note: format!(
                "{head} Capped by {by}: sub_group_size lowered from {sub_group_size} to {sub} \
                 elements, so the buffers take {} per rank instead of {}.",
                gb(param_bytes + opt(sub)),
                gb(want)
            ),
        };
    }
    let sub = MIN_SUB_GROUP_SIZE.min(sub_group_size);
    Fit {
        sub_group_size: sub,
        pin_memory: false,
        per_rank: param_bytes + opt(sub),
        note: format!(
            "{head} Capped by {by}: even with sub_group_size {sub} (the least suggested) the \
             buffers would pin {} per rank, so pin_memory = false on both offloads: DeepSpeed \
             then copies through page-locked bounce buffers of its own, slower but not \
             pinned for the whole run. Give the job more memory, or fewer ranks per node, \
             to pin them.",
            gb(param_bytes + opt(sub))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn meminfo(total_gib: u64, avail_gib: u64) -> String {
        format!(
            "MemTotal: {} kB\nMemFree: 1 kB\nMemAvailable: {} kB\n",
            total_gib << 20,
            avail_gib << 20
        )
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_smallest_bound_wins_and_each_is_named() {
        // A host alone: MemAvailable (plus the staging memory) is the smaller.
        let m = JobMemory::from_sources(&meminfo(256, 200), "", "", no_env, 8 * GIB);
        assert_eq!(m.bounds.len(), 2);
        let s = m.smallest().unwrap();
        assert_eq!(s.0, 208 * GIB);
        assert!(s.1.contains("MemAvailable 200.0 GiB + 8.0 GiB"), "{}", s.1);
        // A cgroup v2 limit on the job, read from files a test gives.
        let d = tempfile::tempdir().unwrap();
        let job = d.path().join("job");
        let step = job.join("step");
        std::fs::create_dir_all(&step).unwrap();
        std::fs::write(job.join("memory.max"), format!("{}\n", 64 * GIB)).unwrap();
        std::fs::write(step.join("memory.max"), "max\n").unwrap();
        let mountinfo = format!(
            "30 20 0:26 / {} rw - cgroup2 cgroup2 rw\n",
            d.path().display()
        );
        let m =
            JobMemory::from_sources(&meminfo(256, 200), "0::/job/step\n", &mountinfo, no_env, 0);
        let s = m.smallest().unwrap();
        assert_eq!(s.0, 64 * GIB);
        assert!(s.1.contains("cgroup v2 limit 64.0 GiB"), "{}", s.1);
        // Slurm's allocation, smaller still.
        let env = |k: &str| match k {
            "SLURM_MEM_PER_GPU" => Some("8192".to_string()),
            "SLURM_GPUS_ON_NODE" => Some("4".to_string()),
            _ => None,
        };
        let m = JobMemory::from_sources(&meminfo(256, 200), "0::/job/step\n", &mountinfo, env, 0);
        let s = m.smallest().unwrap();
        assert_eq!(s.0, 32 * GIB);
        assert!(
            s.1.contains("SLURM_MEM_PER_GPU=8192 (MB) x SLURM_GPUS_ON_NODE=4"),
            "{}",
            s.1
        );
        // Per node beats per GPU.
        let env = |k: &str| (k == "SLURM_MEM_PER_NODE").then(|| "16000".to_string());
        assert_eq!(slurm(&env).unwrap().0, 16000 << 20);
        // Nothing readable: no bound.
        assert_eq!(
            JobMemory::from_sources("", "", "", no_env, 0).smallest(),
            None
        );
    }

    #[test]
    fn buffers_that_fit_are_left_alone() {
        let m = JobMemory::from_sources(&meminfo(512, 500), "", "", no_env, 0);
        // ds-config's two-tier default: 1 GB of parameter buffers, 12 x 1e8 fp32.
        let f = fit(1_000_000_000, 12, 100_000_000, 4, &m);
        assert_eq!((f.sub_group_size, f.pin_memory), (100_000_000, true));
        assert_eq!(f.per_rank, 5_800_000_000);
        assert!(f.note.contains("they fit"), "{}", f.note);
    }

    #[test]
    fn sub_group_size_gives_way_first_then_pinning() {
        // 32 GiB host, 4 ranks: 8 GiB for all, 2 GiB each; 1 GB of it the parameters'.
        let m = JobMemory::from_sources(&meminfo(32, 32), "", "", no_env, 0);
        let f = fit(1_000_000_000, 12, 100_000_000, 4, &m);
        assert!(f.pin_memory);
        let per_rank = (32 * GIB) / 4 / 4;
        assert!(f.per_rank <= per_rank, "{f:?}");
        assert_eq!(f.sub_group_size % SUB_GROUP_STEP, 0);
        assert!(f.sub_group_size >= MIN_SUB_GROUP_SIZE && f.sub_group_size < 100_000_000);
        // One step more would not fit.
        assert!(1_000_000_000 + 12 * (f.sub_group_size + SUB_GROUP_STEP) * 4 > per_rank);
        assert!(
            f.note
                .contains("Capped by the host's memory (MemTotal 32.0 GiB)"),
            "{}",
            f.note
        );
        assert!(
            f.note.contains("sub_group_size lowered from 100000000 to"),
            "{}",
            f.note
        );
        // 8 GiB and 8 ranks: not even the smallest subgroups fit; pinning goes off.
        let m = JobMemory::from_sources(&meminfo(8, 8), "", "", no_env, 0);
        let f = fit(1_000_000_000, 12, 100_000_000, 8, &m);
        assert_eq!(
            (f.sub_group_size, f.pin_memory),
            (MIN_SUB_GROUP_SIZE, false)
        );
        assert!(f.note.contains("pin_memory = false"), "{}", f.note);
        // Unknown memory: as asked, said so.
        let f = fit(1, 4, 100_000_000, 1, &JobMemory::default());
        assert!(
            f.pin_memory && f.note.contains("could not be read"),
            "{}",
            f.note
        );
    }
}
