//! What `tierfs mount` asks for.

use crate::config::Override;
use std::path::PathBuf;

/// Options of `tierfs mount`.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// The config file; `None` when the mount options name the tiers.
    pub config: Option<PathBuf>,
    /// Config keys given as mount options (`-o mount.threads=32`), applied over the file.
    pub overrides: Vec<Override>,
    pub mountpoint: PathBuf,
    pub foreground: bool,
    pub force: bool,
    pub reprobe: bool,
    /// Mount without tiers whose folders are missing (also `[mount] degraded`).
    pub degraded: bool,
    /// Take over tier locks held by a daemon on another host (`--break-lock`).
    pub break_lock: bool,
    /// `--scratch` / `--no-scratch`: overrides `[mount] scratch`.
    pub scratch: Option<bool>,
    /// Let other users in (also `[mount] allow_other`, `-o allow_other`).
    pub allow_other: bool,
    /// Mount over a mountpoint that is not empty, hiding what it holds (`--nonempty`).
    pub nonempty: bool,
}

impl MountOptions {
    /// A plain mount of `config` (or none) at `mountpoint`: no flags, no overrides, in the
    /// background.
    pub fn new(config: Option<PathBuf>, mountpoint: PathBuf) -> MountOptions {
        MountOptions {
            config,
            overrides: Vec::new(),
            mountpoint,
            foreground: false,
            force: false,
            reprobe: false,
            degraded: false,
            break_lock: false,
            scratch: None,
            allow_other: false,
            nonempty: false,
        }
    }
}
