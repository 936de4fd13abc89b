//! The mount configuration: a TOML file parsed into raw serde structs, then validated into
//! [`MountConfig`], the only form the rest of tierfs sees.
//!
//! Two stages, as in ripgrep's low-level/high-level arguments: the `Raw*` structs mirror the
//! file exactly (`deny_unknown_fields`, so a misspelt key is an error rather than a silently
//! ignored default) and keep sizes and bandwidths as the strings the user wrote; validation
//! then turns them into numbers, expands `${NAME}` in paths, fills in the
//! defaults and checks everything it can without touching the disk. Every problem found is
//! reported at once, one line each, naming the file, the key (`tier[1].write_bandwidth`) and
//! the fix. [`MountConfig::prepare_tier_dirs`] is the separate, disk-touching step run just
//! before mounting.
//!
//! The file format:
//!
//! ```toml
//! [[tier]]                            # one or more, fastest first is customary
//! name = "nvme"                       # [A-Za-z0-9_.-]{1,32}, unique
//! path = "/local/scratch/tierfs"      # absolute; ${NAME} expands (any environment variable)
//! create = true                       # default false: create the last path component
//! write_bandwidth = "2GB/s"           # default: probed at mount
//! read_bandwidth = "3GB/s"            # default: probed at mount
//! capacity = "800GiB"                 # default: the device's free space
//! shared_ledger = "/lus/proj/ledger"  # a tier the job's nodes share: where they meet
//! shared_job = "${SLURM_JOB_ID}"      # with shared_ledger: the job, same on every node
//! shared_node = "${HOSTNAME}"         # this node's name in the ledger (the default)
//!
//! [placement]
//! layout = "whole-file"               # or "stripe"
//! stripe_unit = "1MiB"                # multiple of 4096, 64KiB..=1GiB
//! adapt = true                        # follow online estimates (default: only if all probed)
//! min_share = 0.10                    # with adapt: pause a tier worth less than this (0..=0.5)
//!
//! [mount]
//! stats_dir = ".tierfs"               # virtual folder at the mount root
//! allow_other = false
//! log_file = "/tmp/tierfs-${USER}.log"
//! threads = 64                        # 1..=256
//! passthrough = "auto"                # "auto" | "direct" | "off": kernel passthrough for whole files
//! direct = "auto"                     # "auto" | "off": tier files' own descriptors for programs under `tierfs run`
//! degraded = false                    # mount without a tier whose folder is missing or unusable
//! transport = "auto"                  # "auto" | "uring" | "dev": FUSE over io_uring or /dev/fuse
//! scratch = false                     # unmount discards the data and removes the tier folders
//!
//! [metrics]
//! textfile = "/var/lib/node_exporter/tierfs-${USER}.prom"  # the daemon writes .tierfs/metrics there
//! textfile_interval = 5               # seconds between writes (0.5..=3600)
//! ```
//!
//! Every key can also be given as a mount option (`tierfs mount -o mount.threads=32`, an
//! fstab line), on top of the file or without one: see `overrides`.

//!
//! The submodules follow the file: `raw` is the file as written; `tiers`, `placement`,
//! `mount`, `cache` and `metrics` validate one section each into its part of the plan;
//! `overrides` applies mount options to the raw file; `access` explains a folder or file
//! this user may not read; `vars` expands
//! `${NAME}`; `problems` gathers what is wrong; `effective` writes the plan back as TOML;
//! `tier_dirs` holds the checks that touch the disk. Every public item is re-exported here,
//! so the rest of tierfs names it `crate::config::X`.

use std::path::{Path, PathBuf};

mod access;
mod cache;
mod effective;
mod metrics;
mod mount;
mod overrides;
mod placement;
mod problems;
mod raw;
mod tier_dirs;
mod tiers;
mod vars;

pub use access::who as who_am_i;
pub use cache::{
    CacheConfig, CachePolicy, CacheSection, CacheSize, DEFAULT_PREFETCH, DEFAULT_WRITEBACK_DELAY,
    MIN_CACHE,
};
pub use metrics::{MetricsSection, DEFAULT_TEXTFILE_INTERVAL};
pub use mount::{
    Direct, EngineKind, MountSection, Passthrough, Transport, DEFAULT_STATS_DIR, DEFAULT_THREADS,
    MAX_THREADS,
};
pub use overrides::{
    names_a_tier, parse as parse_option, short_name, Key as OptionKey, Kind as OptionKind,
    Override, KEYS as OPTION_KEYS, NO_FILE,
};
pub use placement::{
    default_layout, default_layout_for, Layout, PlacementConfig, DEFAULT_LAYOUT, DEFAULT_MIN_SHARE,
    DEFAULT_STRIPE_UNIT, MAX_STRIPE_UNIT, MIN_STRIPE_UNIT, STRIPE_ALIGN,
};
pub use tiers::{is_valid_id, SharedConfig, TierConfig, MAX_TIER_NAME};
pub use vars::{expand_vars, home_dir, hostname, process_var, user_name};

use problems::Problems;
use raw::RawConfig;

/// Errors a user can cause with a config file. Each names the file, the key and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
}

/// A whole validated configuration.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MountConfig {
    /// The file it came from (for messages).
    pub source: PathBuf,
    pub tiers: Vec<TierConfig>,
    pub placement: PlacementConfig,
    pub mount: MountSection,
    /// `[cache]`: the host-memory tier (staging). No section is `size = "auto"`.
    pub cache: CacheSection,
    /// `[metrics]`: the metrics the daemon writes out itself.
    pub metrics: MetricsSection,
}

impl MountConfig {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<MountConfig, ConfigError> {
        Self::parse(&read_config_text(path)?, path)
    }

    /// Parses and validates config text; `source` is only used in messages. `${NAME}` in
    /// paths takes its value from this process ([`process_var`]).
    pub fn parse(text: &str, source: &Path) -> Result<MountConfig, ConfigError> {
        Self::parse_with_vars(text, source, &process_var)
    }

    /// [`MountConfig::parse`] with `${NAME}` looked up in `vars` instead of the process
    /// environment (`None`: not set), so that what a text means can be fixed (the fuzz
    /// target, tests).
    pub fn parse_with_vars(
        text: &str,
        source: &Path,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<MountConfig, ConfigError> {
        let file = source.display().to_string();
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| problems::toml_error(text, &file, &e))?;
        validate(raw, source, vars, Problems::new(file))
    }
}

/// A config file's text; a file that cannot be read or is not UTF-8 is named, with the fix.
fn read_config_text(path: &Path) -> Result<String, ConfigError> {
    let bytes = std::fs::read(path).map_err(|e| {
        ConfigError::Invalid(format!(
            "{}: {e}{}",
            path.display(),
            access::why_unreadable(path, &e)
        ))
    })?;
    String::from_utf8(bytes).map_err(|e| {
        let ok = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = ok.iter().filter(|b| **b == b'\n').count() + 1;
        ConfigError::Invalid(format!(
            "{}:{line}: not UTF-8 text (byte {} of the file); TOML config files must be \
             UTF-8",
            path.display(),
            ok.len() + 1
        ))
    })
}

/// The raw file validated into the plan, every problem gathered in `p`.
fn validate(
    raw: RawConfig,
    source: &Path,
    vars: &dyn Fn(&str) -> Option<String>,
    mut p: Problems,
) -> Result<MountConfig, ConfigError> {
    // Section by section in the order of their messages; the placement defaults depend
    // on the tiers and on `mount.passthrough`, so that section is put together last.
    let tiers = tiers::parse_tiers(&raw.tier, vars, &mut p);
    let layout = placement::parse_layout(raw.placement.layout.as_deref(), &mut p);
    let stripe_unit = placement::parse_stripe_unit(raw.placement.stripe_unit.as_ref(), &mut p);
    let mount = mount::parse_mount(&raw.mount, vars, &mut p);
    let cache = match &raw.cache {
        Some(c) => cache::parse_cache(c, &mut p).unwrap_or_default(),
        None => CacheSection::default(),
    };
    let min_share = placement::parse_min_share(raw.placement.min_share, &mut p);
    let metrics = metrics::parse_metrics(&raw.metrics, vars, &mut p);
    let placement = PlacementConfig {
        layout: layout.unwrap_or_else(|| default_layout(mount.passthrough)),
        stripe_unit,
        adapt: raw
            .placement
            .adapt
            .unwrap_or_else(|| placement::default_adapt(&tiers)),
        min_share,
    };
    p.into_result(MountConfig {
        source: source.to_path_buf(),
        tiers,
        placement,
        mount,
        cache,
        metrics,
    })
}

/// What the tests of every section parse.
#[cfg(test)]
mod testkit {
    use std::path::Path;

    use super::MountConfig;

    /// `text` parsed as `/etc/tierfs/test.toml`, the error as its message.
    pub(super) fn parse(text: &str) -> Result<MountConfig, String> {
        MountConfig::parse(text, Path::new("/etc/tierfs/test.toml")).map_err(|e| e.to_string())
    }

    /// Two tiers, the first with every key.
    pub(super) const TWO: &str = r#"
[[tier]]
name = "nvme"
path = "/local/scratch/tierfs"
create = true
write_bandwidth = "2GB/s"
read_bandwidth = "3GB/s"
capacity = "800GiB"
[[tier]]
name = "pfs"
path = "/lus/proj/tierfs/${HOSTNAME}"
"#;
}

#[cfg(test)]
mod tests {
    use super::testkit::{parse, TWO};
    use super::*;

    #[test]
    fn full_file_parses_with_defaults() {
        let c = parse(TWO).unwrap();
        assert_eq!(c.tiers.len(), 2);
        let nvme = &c.tiers[0];
        assert_eq!(nvme.name, "nvme");
        assert_eq!(nvme.path, Path::new("/local/scratch/tierfs"));
        assert!(nvme.create);
        assert_eq!(nvme.write_bandwidth, Some(2e9));
        assert_eq!(nvme.read_bandwidth, Some(3e9));
        assert_eq!(nvme.capacity, Some(800 << 30));
        let pfs = &c.tiers[1];
        assert_eq!(
            pfs.path,
            Path::new("/lus/proj/tierfs").join(hostname().unwrap())
        );
        assert!(!pfs.create);
        assert_eq!(
            (pfs.read_bandwidth, pfs.write_bandwidth, pfs.capacity),
            (None, None, None)
        );
        assert_eq!(c.placement.layout, default_layout(Passthrough::Auto));
        assert_eq!(c.placement.stripe_unit, 1 << 20);
        assert_eq!(c.mount.stats_dir, ".tierfs");
        assert!(!c.mount.allow_other);
        assert_eq!(c.mount.log_file, None);
        assert_eq!(c.mount.threads, DEFAULT_THREADS);
        assert_eq!(c.source, Path::new("/etc/tierfs/test.toml"));
    }

    #[test]
    fn sections_parse() {
        let c = parse(&format!(
            "{TWO}\n[placement]\nlayout = \"stripe\"\nstripe_unit = \"4MiB\"\n\
             [mount]\nstats_dir = \".stats\"\nallow_other = true\n\
             log_file = \"/tmp/tierfs-${{USER}}.log\"\nthreads = 32\n"
        ))
        .unwrap();
        assert_eq!(c.placement.layout, Layout::Stripe);
        assert_eq!(c.placement.stripe_unit, 4 << 20);
        assert_eq!(c.mount.stats_dir, ".stats");
        assert!(c.mount.allow_other);
        let log = format!("/tmp/tierfs-{}.log", user_name().unwrap());
        assert_eq!(c.mount.log_file, Some(PathBuf::from(log)));
        assert_eq!(c.mount.threads, 32);
    }

    #[test]
    fn all_problems_are_reported_at_once() {
        let err = parse(
            "[[tier]]\nname = 'a b'\npath = 'rel'\nwrite_bandwidth = '2GB'\n\
             [mount]\nthreads = 0\n",
        )
        .unwrap_err();
        for key in [
            "tier[0].name",
            "tier[0].path",
            "tier[0].write_bandwidth",
            "mount.threads",
        ] {
            assert!(
                err.contains(&format!("/etc/tierfs/test.toml: {key}: ")),
                "{key}: {err}"
            );
        }
        assert_eq!(err.lines().count(), 4, "{err}");
    }
}
