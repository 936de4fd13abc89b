//! What the job may use: the memory limit the daemon runs under, the staging memory sized
//! from it at mount, and the pressure watch that makes staging give memory back first.
//!
//! ## The limit
//! A batch system limits the job, not the step: Slurm puts the job's memory limit on the
//! job's cgroup and runs each step (the daemon is started by one) in a child cgroup with no
//! limit of its own. So the limit read here is the hierarchical one, the smallest on the way
//! from the daemon's cgroup to the root:
//! - cgroup v1 `memory` controller: `hierarchical_memory_limit` in the daemon's own
//!   `memory.stat` (the kernel's own minimum over the ancestors); the ancestor that sets it
//!   is found by walking `memory.limit_in_bytes` up, and its usage is what the watch reads.
//! - cgroup v2: `memory.max` walked up from the daemon's cgroup to the root ("max" is none).
//!
//! A hybrid host (v1 controllers with a v2 hierarchy beside them, as on this project's test
//! machine, where the v1 `memory` controller is the one that limits) has both: the smaller
//! wins. The v1 "unlimited" value (9223372036854771712, `PAGE_COUNTER_MAX` pages) and any
//! limit at or above the host's memory do not limit: then the host's `MemAvailable` at mount
//! is what the job may use.
//!
//! ## The sizing rule
//! Staging memory is 1/8 of the limit ([`AUTO_DIVISOR`]), at most 8 GiB ([`AUTO_CAP`]). The
//! mount happens before DeepSpeed allocates its pinned buffers, its CPU-resident parameters
//! and the Python process's own heap, which on a ZeRO-Infinity node take most of the job's
//! memory: taking an eighth leaves seven eighths to them. The cap: at real scale the swap
//! set is hundreds of times larger than any host memory, so staging helps by reading the
//! next files ahead and writing behind, which needs the few files in flight per rank
//! (hundreds of MiB each), not a share of the set; past a few GiB more memory buys little
//! and only takes from the job. Below [`MIN_CACHE`] after the fraction (a limit under 128
//! MiB) no staging is worth having: the mount goes on without it and says why.
//!
//! ## Shrinking under pressure
//! Every [`POLL`] the watch reads the limiting cgroup's usage less its inactive file pages
//! (page cache the kernel drops before it fails an allocation; what is left is roughly what
//! it cannot reclaim without swap) and keeps [`reserve_for`] of the limit (1/8, at most
//! 8 GiB) free of it: when the free part falls below that, staging's budget is lowered by
//! the shortfall and the core writes dirty files back and evicts until it holds no more
//! (within a second); when the job gives memory back the budget grows again, up to its
//! size. So staging is the first to give way, and what it holds never pushes the job into
//! the OOM killer.
//!
//! Why a poll and not the kernel's events (v1 `memory.pressure_level` through
//! `cgroup.event_control`, v2 PSI triggers in `memory.pressure`): v1's "low" level fires on
//! any reclaim, and a limited cgroup reclaims the tiers' own page cache all the time, so it
//! cannot tell routine reclaim from the job running out; "medium" and "critical" come when
//! reclaim is already failing, which without swap is moments before the OOM killer. PSI
//! measures time lost to stalls, which again comes only once the stalls happen, and the two
//! need two code paths with a thread blocked on each. Usage against the limit says how many
//! bytes are missing, before anything stalls, so the shrink can be sized; it is one code
//! path for v1, v2 and a host without a limit; and reading two small files five times a
//! second costs microseconds.

use crate::config::{CacheConfig, CacheSection, CacheSize, MIN_CACHE};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Staging takes this fraction (1/N) of the memory the job may use.
pub const AUTO_DIVISOR: u64 = 8;
/// Automatic staging memory is at most this.
pub const AUTO_CAP: u64 = 8 << 30;
/// The watch's reserve is at most this (see [`reserve_for`]).
pub const RESERVE_CAP: u64 = 8 << 30;
/// How often the watch reads the usage.
pub const POLL: Duration = Duration::from_millis(200);
/// The v1 controller's "no limit": `PAGE_COUNTER_MAX` pages of 4 KiB, as the kernel prints it.
pub const V1_UNLIMITED: u64 = 9_223_372_036_854_771_712;

/// Where a memory limit comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// cgroup v1 `memory` controller; the folder of the cgroup that sets the limit.
    CgroupV1(PathBuf),
    /// cgroup v2; the folder of the cgroup whose `memory.max` is the smallest.
    CgroupV2(PathBuf),
    /// No cgroup limits: the host's memory (`/proc/meminfo`).
    Host,
}

/// The memory the daemon's job may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// The limit in bytes (for [`Source::Host`], `MemTotal`).
    pub bytes: u64,
    /// For [`Source::Host`], `MemAvailable` at detection: what sizing starts from, since the
    /// host's other users hold the rest.
    pub available: u64,
    pub source: Source,
}

impl Limit {
    /// The limit of the calling process's cgroups, else the host's memory; `None` only when
    /// not even `/proc/meminfo` can be read.
    pub fn detect() -> Option<Limit> {
        Limit::detect_from(
            &std::fs::read_to_string("/proc/meminfo").ok()?,
            &std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
            &std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
        )
    }

    /// [`Limit::detect`] from the texts of `/proc/meminfo`, `/proc/self/cgroup` and
    /// `/proc/self/mountinfo` (whose cgroup mounts name the folders read), so tests can
    /// give their own.
    pub fn detect_from(meminfo: &str, cgroups: &str, mountinfo: &str) -> Option<Limit> {
        let (total, available) = parse_meminfo(meminfo)?;
        let mut best: Option<(u64, Source)> = None;
        let mut consider = |found: Option<(u64, Source)>| {
            if let Some((n, s)) = found {
                if n < total && best.as_ref().is_none_or(|(b, _)| n < *b) {
                    best = Some((n, s));
                }
            }
        };
        if let Some(dir) = cgroup_dir(cgroups, mountinfo, Hierarchy::V1Memory) {
            consider(v1_limit(&dir));
        }
        if let Some(dir) = cgroup_dir(cgroups, mountinfo, Hierarchy::V2) {
            consider(v2_limit(&dir));
        }
        Some(match best {
            Some((bytes, source)) => Limit {
                bytes,
                available: bytes,
                source,
            },
            None => Limit {
                bytes: total,
                available,
                source: Source::Host,
            },
        })
    }

    /// What automatic sizing starts from: the limit, or the host's available memory.
    pub fn base(&self) -> u64 {
        match self.source {
            Source::Host => self.available,
            _ => self.bytes,
        }
    }

    /// Memory in use now that the kernel could not drop to make room (the limiting cgroup's
    /// usage less its inactive file pages, or the host's `MemTotal - MemAvailable`);
    /// `None` when it cannot be read.
    pub fn in_use(&self) -> Option<u64> {
        match &self.source {
            Source::CgroupV1(dir) => {
                let usage = read_u64(&dir.join("memory.usage_in_bytes"))?;
                let stat = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
                let inactive = stat_value(&stat, "total_inactive_file").unwrap_or(0);
                Some(usage.saturating_sub(inactive))
            }
            Source::CgroupV2(dir) => {
                let usage = read_u64(&dir.join("memory.current"))?;
                let stat = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
                let inactive = stat_value(&stat, "inactive_file").unwrap_or(0);
                Some(usage.saturating_sub(inactive))
            }
            Source::Host => {
                let (total, available) = meminfo()?;
                Some(total.saturating_sub(available))
            }
        }
    }

    /// Where the limit comes from, for the log and `.tierfs/cache`.
    pub fn describe(&self) -> String {
        let b = crate::units::fmt_bytes;
        match &self.source {
            Source::CgroupV1(d) => format!(
                "the memory cgroup v1 limit {} ({})",
                b(self.bytes),
                d.display()
            ),
            Source::CgroupV2(d) => format!(
                "the memory cgroup v2 limit {} ({})",
                b(self.bytes),
                d.display()
            ),
            Source::Host => format!(
                "the host's available memory {} (no memory cgroup limit; {} in all)",
                b(self.available),
                b(self.bytes)
            ),
        }
    }
}

/// Automatic staging memory for a limit of `base` bytes ([`Limit::base`]): 1/8, at most
/// 8 GiB; `None` when that is under [`MIN_CACHE`].
pub fn auto_size(base: u64) -> Option<u64> {
    let n = (base / AUTO_DIVISOR).min(AUTO_CAP);
    // Whole cache blocks: the budget is taken in them.
    let n = n / super::BLOCK * super::BLOCK;
    (n >= MIN_CACHE).then_some(n)
}

/// Memory the watch keeps free of what the kernel cannot drop: 1/8 of the limit, at most
/// 8 GiB. A burst of allocation between two polls must fit in it.
pub fn reserve_for(limit: u64) -> u64 {
    (limit / 8).min(RESERVE_CAP)
}

/// The staging budget the watch sets, from the budget now (`cur`), the bytes staging holds
/// (`used`), its configured size (`cap`), the free part of the limit (`free`, limit less
/// [`Limit::in_use`]) and the [`reserve_for`] it keeps. Short of the reserve: lowered by
/// the shortfall (whole blocks). Free a quarter of the reserve beyond it: raised by the
/// excess, up to the size; in between it stays, so it does not swing with every poll.
pub fn next_budget(cur: u64, used: u64, cap: u64, free: u64, reserve: u64) -> u64 {
    let block = super::BLOCK;
    if free < reserve {
        let short = (reserve - free).div_ceil(block) * block;
        let to = used.saturating_sub(short) / block * block;
        cur.min(to)
    } else if free > reserve + reserve / 4 && cur < cap {
        let room = free - reserve - reserve / 4;
        cur.max(used.saturating_add(room) / block * block).min(cap)
    } else {
        cur
    }
}

/// The mount's staging memory: how large, and why.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The cache's settings; `None`: no staging.
    pub cache: Option<CacheConfig>,
    /// Where the size comes from, in words (the mount's log line, `.tierfs/cache`).
    pub from: String,
    /// Why there is no staging although the config asked for it automatically: the mount
    /// logs it as a warning.
    pub warning: Option<String>,
    /// The limit the pressure watch follows (with a cache and a limit found).
    pub limit: Option<Limit>,
}

impl Plan {
    /// Staging only where the config states a size, with no pressure watch: for a core
    /// built without the daemon (tests, offline tools), where an automatic size, which
    /// belongs to the mount's process and its cgroup, stays off.
    pub fn stated(section: &CacheSection) -> Plan {
        match section.size {
            CacheSize::Auto => Plan {
                cache: None,
                from: "off: cache.size = \"auto\" is sized by the mount".into(),
                warning: None,
                limit: None,
            },
            CacheSize::Off | CacheSize::Bytes(_) => Plan::new(section, None),
        }
    }

    /// Staging for a `[cache]` section under `limit` (what [`Limit::detect`] found): a
    /// stated size as it is, `off` as none, `auto` by [`auto_size`].
    pub fn new(section: &CacheSection, limit: Option<Limit>) -> Plan {
        let b = crate::units::fmt_bytes;
        match section.size {
            CacheSize::Off => Plan {
                cache: None,
                from: "off: cache.size = \"off\" in the config".into(),
                warning: None,
                limit: None,
            },
            CacheSize::Bytes(n) => Plan {
                cache: Some(section.with_size(n)),
                from: format!(
                    "cache.size = {} in the config",
                    CacheSize::Bytes(n).to_toml_value()
                ),
                warning: None,
                limit,
            },
            CacheSize::Auto => {
                let Some(l) = limit else {
                    let why = "off: cannot read the memory limit (/proc/meminfo is unreadable), \
                               so no staging memory was taken; set cache.size to choose one";
                    return Plan {
                        cache: None,
                        from: why.into(),
                        warning: Some(why.into()),
                        limit: None,
                    };
                };
                match auto_size(l.base()) {
                    Some(n) => Plan {
                        cache: Some(section.with_size(n)),
                        from: format!(
                            "automatic: 1/{AUTO_DIVISOR} of {}{}",
                            l.describe(),
                            if n == AUTO_CAP {
                                format!(", capped at {}", b(AUTO_CAP))
                            } else {
                                String::new()
                            }
                        ),
                        warning: None,
                        limit: Some(l),
                    },
                    None => {
                        let why = format!(
                            "off: 1/{AUTO_DIVISOR} of {} is under the {} staging needs at \
                             least; mounting without staging memory, so it cannot push the \
                             job into the OOM killer (set cache.size to override)",
                            l.describe(),
                            b(MIN_CACHE)
                        );
                        Plan {
                            cache: None,
                            from: why.clone(),
                            warning: Some(why),
                            limit: None,
                        }
                    }
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hierarchy {
    V1Memory,
    V2,
}

/// The folder of the calling process's cgroup in `h`, from `/proc/self/cgroup` and
/// `/proc/self/mountinfo` (their texts).
fn cgroup_dir(cgroups: &str, mountinfo: &str, h: Hierarchy) -> Option<PathBuf> {
    let path = cgroups.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (id, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        let hit = match h {
            Hierarchy::V1Memory => ctrl.split(',').any(|c| c == "memory"),
            Hierarchy::V2 => id == "0" && ctrl.is_empty(),
        };
        hit.then_some(path)
    })?;
    let (root, mnt) = mountinfo.lines().find_map(|l| {
        // id parent major:minor root mountpoint options [optional...] - fstype source super
        let (left, right) = l.split_once(" - ")?;
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        let (fstype, superopts) = (*right.first()?, *right.get(2).unwrap_or(&""));
        let hit = match h {
            Hierarchy::V1Memory => {
                fstype == "cgroup" && superopts.split(',').any(|o| o == "memory")
            }
            Hierarchy::V2 => fstype == "cgroup2",
        };
        if !hit {
            return None;
        }
        Some((unescape(left.get(3)?)?, unescape(left.get(4)?)?))
    })?;
    // The mount may show a sub-tree of the hierarchy (a container): the cgroup's path is
    // relative to the hierarchy's root, so the mount's own root comes off first.
    let rel = Path::new(path)
        .strip_prefix(&root)
        .unwrap_or(Path::new(path).strip_prefix("/").unwrap_or(Path::new(path)));
    Some(Path::new(&mnt).join(rel))
}

/// Mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let o = std::str::from_utf8(&b[i + 1..i + 4]).ok()?;
            out.push(u8::from_str_radix(o, 8).ok()?);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The v1 hierarchical limit of the cgroup at `dir`, with the folder of the ancestor that
/// sets it (for its usage); `None` when unlimited or unreadable.
fn v1_limit(dir: &Path) -> Option<(u64, Source)> {
    let stat = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
    let limit = stat_value(&stat, "hierarchical_memory_limit").filter(|n| *n < V1_UNLIMITED)?;
    // The deepest folder on the way up whose own limit is that one; the cgroup itself if
    // the walk finds none (an ancestor outside the mount, in a container).
    let setter = ancestors(dir, "memory.limit_in_bytes")
        .into_iter()
        .find(|d| {
            read_to_string(&d.join("memory.limit_in_bytes")).and_then(|t| parse_v1_limit(&t))
                == Some(limit)
        })
        .unwrap_or_else(|| dir.to_path_buf());
    Some((limit, Source::CgroupV1(setter)))
}

/// The smallest v2 `memory.max` from the cgroup at `dir` up to the root, with its folder.
fn v2_limit(dir: &Path) -> Option<(u64, Source)> {
    ancestors(dir, "memory.max")
        .into_iter()
        .filter_map(|d| {
            let n = parse_v2_max(&read_to_string(&d.join("memory.max"))?)?;
            Some((n, d))
        })
        .min_by_key(|(n, _)| *n)
        .map(|(n, d)| (n, Source::CgroupV2(d)))
}

/// `dir` and its parents, as long as they have `file` (the hierarchy's root has none of the
/// limit files).
fn ancestors(dir: &Path, file: &str) -> Vec<PathBuf> {
    dir.ancestors()
        .take_while(|d| d.join(file).exists())
        .map(Path::to_path_buf)
        .collect()
}

/// A v1 `memory.limit_in_bytes` or `hierarchical_memory_limit`: `None` for no limit.
pub fn parse_v1_limit(text: &str) -> Option<u64> {
    let n: u64 = text.trim().parse().ok()?;
    // The kernel rounds whatever "unlimited" was written to whole pages of the largest
    // counter; anything that large limits nothing.
    (n < V1_UNLIMITED).then_some(n)
}

/// A v2 `memory.max`: `None` for "max".
pub fn parse_v2_max(text: &str) -> Option<u64> {
    match text.trim() {
        "max" => None,
        t => t.parse().ok(),
    }
}

/// The value of `key` in a `memory.stat` text.
pub fn stat_value(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`, in bytes.
fn meminfo() -> Option<(u64, u64)> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `MemTotal` and `MemAvailable` of a `/proc/meminfo` text, in bytes.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let kib = |key: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
    };
    Some((kib("MemTotal")? * 1024, kib("MemAvailable")? * 1024))
}

fn read_to_string(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

fn read_u64(p: &Path) -> Option<u64> {
    read_to_string(p)?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn v1_limits() {
        assert_eq!(parse_v1_limit("2147483648\n"), Some(2 * GIB));
        assert_eq!(parse_v1_limit("9223372036854771712\n"), None, "unlimited");
        assert_eq!(parse_v1_limit(""), None);
        assert_eq!(parse_v1_limit("-1"), None);
        let stat = "cache 3633152\nrss 1814528\nhierarchical_memory_limit 2147483648\n\
                    hierarchical_memsw_limit 9223372036854771712\ntotal_inactive_file 1691648\n";
        assert_eq!(stat_value(stat, "hierarchical_memory_limit"), Some(2 * GIB));
        assert_eq!(stat_value(stat, "total_inactive_file"), Some(1691648));
        assert_eq!(stat_value(stat, "inactive_file"), None, "whole keys only");
    }

    #[test]
    fn v2_limits() {
        assert_eq!(parse_v2_max("max\n"), None);
        assert_eq!(parse_v2_max("1073741824\n"), Some(GIB));
        assert_eq!(parse_v2_max("lots"), None);
    }

    #[test]
    fn meminfo_fields() {
        let t =
            "MemTotal:       24000000 kB\nMemFree:        100 kB\nMemAvailable:   18000000 kB\n";
        assert_eq!(
            parse_meminfo(t),
            Some((24_000_000 * 1024, 18_000_000 * 1024))
        );
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None, "no MemAvailable");
    }

    /// A v1 hierarchy in a temp folder: a job cgroup with a limit and a step below it
    /// without one (Slurm's shape), and the mountinfo and cgroup lines that lead there.
    #[test]
    fn finds_the_job_limit_above_the_step() {
        let d = tempfile::tempdir().unwrap();
        let mnt = d.path().join("memory");
        let job = mnt.join("slurm/uid_0/job_7");
        let step = job.join("step_0");
        std::fs::create_dir_all(&step).unwrap();
        // The hierarchy's root has no limit files (as in the kernel's).
        for (dir, limit) in [
            (mnt.join("slurm"), V1_UNLIMITED),
            (mnt.join("slurm/uid_0"), V1_UNLIMITED),
            (job.clone(), 2 * GIB),
            (step.clone(), V1_UNLIMITED),
        ] {
            std::fs::write(dir.join("memory.limit_in_bytes"), format!("{limit}\n")).unwrap();
        }
        std::fs::write(
            step.join("memory.stat"),
            format!("rss 1\nhierarchical_memory_limit {}\n", 2 * GIB),
        )
        .unwrap();
        let mountinfo = format!(
            "30 25 0:27 / /sys/fs/cgroup/cpu rw,relatime shared:8 - cgroup cgroup rw,cpu\n\
             33 25 0:30 / {} rw,relatime shared:11 - cgroup cgroup rw,memory\n\
             40 25 0:35 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
            mnt.display()
        );
        let cgroups = "4:memory:/slurm/uid_0/job_7/step_0\n1:cpu:/\n0::/\n";
        let dir = cgroup_dir(cgroups, &mountinfo, Hierarchy::V1Memory).unwrap();
        assert_eq!(dir, step);
        assert_eq!(
            v1_limit(&dir),
            Some((2 * GIB, Source::CgroupV1(job.clone())))
        );
        assert_eq!(
            cgroup_dir(cgroups, &mountinfo, Hierarchy::V2),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        // Unlimited all the way: no limit.
        std::fs::write(
            step.join("memory.stat"),
            format!("hierarchical_memory_limit {V1_UNLIMITED}\n"),
        )
        .unwrap();
        assert_eq!(v1_limit(&dir), None);
        // No memory.stat (controller gone, folder removed): no limit, no panic.
        assert_eq!(v1_limit(&d.path().join("nowhere")), None);
        // No memory controller mounted.
        assert_eq!(cgroup_dir(cgroups, "", Hierarchy::V1Memory), None);
    }

    #[test]
    fn v2_walks_up_to_the_smallest_max() {
        let d = tempfile::tempdir().unwrap();
        let job = d.path().join("job");
        let step = job.join("step");
        std::fs::create_dir_all(&step).unwrap();
        std::fs::write(job.join("memory.max"), "1073741824\n").unwrap();
        std::fs::write(step.join("memory.max"), "max\n").unwrap();
        assert_eq!(v2_limit(&step), Some((GIB, Source::CgroupV2(job.clone()))));
        std::fs::write(job.join("memory.max"), "max\n").unwrap();
        assert_eq!(v2_limit(&step), None, "max all the way up");
        assert_eq!(v2_limit(&d.path().join("gone")), None, "missing files");
        // A container's mount shows the hierarchy from its own cgroup down.
        let mountinfo = format!(
            "40 25 0:35 /kubepods/pod1 {} rw - cgroup2 cgroup2 rw\n",
            d.path().display()
        );
        assert_eq!(
            cgroup_dir("0::/kubepods/pod1/job/step\n", &mountinfo, Hierarchy::V2),
            Some(step.clone())
        );
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape("/a\\040b").as_deref(), Some("/a b"));
        assert_eq!(unescape("/plain").as_deref(), Some("/plain"));
    }

    #[test]
    fn sizing_rule() {
        assert_eq!(auto_size(2 * GIB), Some(256 * MIB));
        assert_eq!(auto_size(512 * GIB), Some(AUTO_CAP), "capped");
        assert_eq!(auto_size(128 * MIB), Some(MIN_CACHE));
        assert_eq!(auto_size(127 * MIB), None, "too small for any staging");
        assert_eq!(auto_size(0), None);
        // Whole blocks.
        assert_eq!(auto_size(2 * GIB + 12345).unwrap() % super::super::BLOCK, 0);
    }

    #[test]
    fn plans() {
        let v1 = |bytes| Limit {
            bytes,
            available: bytes,
            source: Source::CgroupV1("/sys/fs/cgroup/memory/job".into()),
        };
        let auto = CacheSection::default();
        let p = Plan::new(&auto, Some(v1(2 * GIB)));
        assert_eq!(p.cache.as_ref().map(|c| c.size), Some(256 * MIB));
        assert!(
            p.from.contains("1/8 of the memory cgroup v1 limit 2.0 GiB"),
            "{}",
            p.from
        );
        assert!(p.warning.is_none() && p.limit.is_some());
        let p = Plan::new(&auto, Some(v1(100 * MIB)));
        assert!(p.cache.is_none());
        assert!(p.warning.unwrap().contains("under the 16.0 MiB"));
        let host = Limit {
            bytes: 512 * GIB,
            available: 400 * GIB,
            source: Source::Host,
        };
        let p = Plan::new(&auto, Some(host));
        assert_eq!(p.cache.unwrap().size, AUTO_CAP);
        assert!(p.from.contains("capped at 8.0 GiB"), "{}", p.from);
        // A stated size wins over the limit, and the watch still follows the limit.
        let fixed = CacheSection {
            size: CacheSize::Bytes(GIB),
            ..CacheSection::default()
        };
        let p = Plan::new(&fixed, Some(v1(100 * MIB)));
        assert_eq!(p.cache.unwrap().size, GIB);
        assert!(p.warning.is_none() && p.limit.is_some());
        let off = CacheSection {
            size: CacheSize::Off,
            ..CacheSection::default()
        };
        let p = Plan::new(&off, Some(v1(2 * GIB)));
        assert!(p.cache.is_none() && p.warning.is_none());
        assert!(Plan::new(&auto, None).warning.is_some());
        // A core built without the mount: only a stated size, and no watch.
        assert!(Plan::stated(&auto).cache.is_none());
        let p = Plan::stated(&fixed);
        assert_eq!(p.cache.unwrap().size, GIB);
        assert!(p.limit.is_none());
    }

    #[test]
    fn budget_follows_the_free_memory() {
        let r = reserve_for(2 * GIB);
        assert_eq!(r, 256 * MIB);
        let cap = 256 * MIB;
        // Plenty free: stays at the size.
        assert_eq!(next_budget(cap, 100 * MIB, cap, GIB, r), cap);
        // 100 MiB short of the reserve: gives back 100 MiB of what it holds.
        assert_eq!(
            next_budget(cap, 200 * MIB, cap, r - 100 * MIB, r),
            100 * MIB
        );
        // Short by more than it holds: nothing.
        assert_eq!(next_budget(cap, 50 * MIB, cap, 0, r), 0);
        // Just above the reserve: no change either way (no swinging).
        assert_eq!(next_budget(64 * MIB, 64 * MIB, cap, r + r / 8, r), 64 * MIB);
        // Memory back: grows by what is free beyond the reserve and its margin, to the size.
        assert_eq!(
            next_budget(64 * MIB, 64 * MIB, cap, r + r / 4 + 32 * MIB, r),
            96 * MIB
        );
        assert_eq!(next_budget(64 * MIB, 64 * MIB, cap, 4 * GIB, r), cap);
        // A short reserve never raises it.
        assert!(next_budget(64 * MIB, 0, cap, r - 1, r) <= 64 * MIB);
    }
}
