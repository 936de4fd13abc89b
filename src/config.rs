//! The mount configuration: a TOML file parsed into raw serde structs, then validated into
//! [`MountConfig`], the only form the rest of tierfs sees.
//!
//! (Contract stub: the parsing and validation are being written; the types are final.)

use std::path::{Path, PathBuf};

/// Errors a user can cause with a config file. Each names the file, the key and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
}

/// How a file's bytes are laid out over the tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Each file lives whole on one tier.
    WholeFile,
    /// Each file is cut into `stripe_unit` pieces spread by weighted round-robin.
    Stripe,
}

/// One validated `[[tier]]`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TierConfig {
    pub name: String,
    /// Absolute, with `${HOSTNAME}` and `${USER}` expanded.
    pub path: PathBuf,
    pub create: bool,
    /// Bytes per second; `None` means "probe it".
    pub read_bandwidth: Option<f64>,
    pub write_bandwidth: Option<f64>,
    /// Bytes; `None` means "the device's free space".
    pub capacity: Option<u64>,
}

/// The validated `[placement]` section.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlacementConfig {
    pub layout: Layout,
    pub stripe_unit: u64,
}

/// The validated `[mount]` section (all optional in the file).
#[derive(Debug, Clone, serde::Serialize)]
pub struct MountSection {
    /// Name of the virtual stats folder at the mount root. Default `.tierfs`.
    pub stats_dir: String,
    /// Let other users see the mount (needs `user_allow_other` in /etc/fuse.conf for non-root).
    pub allow_other: bool,
    /// Daemon log file; `None` means stderr (or `<first tier>/.tierfs-meta/daemon.log` when
    /// the daemon runs in the background).
    pub log_file: Option<PathBuf>,
    /// FUSE worker threads. Default: 8.
    pub threads: usize,
}

/// A whole validated configuration.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MountConfig {
    /// The file it came from (for messages).
    pub source: PathBuf,
    pub tiers: Vec<TierConfig>,
    pub placement: PlacementConfig,
    pub mount: MountSection,
}

impl MountConfig {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<MountConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Invalid(format!("{}: {e}", path.display())))?;
        Self::parse(&text, path)
    }

    /// Parses and validates config text; `source` is only used in messages.
    pub fn parse(text: &str, source: &Path) -> Result<MountConfig, ConfigError> {
        let _ = (text, source);
        Err(ConfigError::Invalid("unimplemented".into()))
    }

    /// The effective configuration as TOML (every default filled in), for `.tierfs/config`.
    pub fn to_toml(&self) -> String {
        String::new()
    }

    /// Checks every tier folder exists (or creates it where `create = true`), is a directory
    /// and is writable.
    pub fn prepare_tier_dirs(&self) -> Result<(), ConfigError> {
        Ok(())
    }
}
