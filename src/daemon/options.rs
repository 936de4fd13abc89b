//! What `tierfs mount` asks for.

use std::path::PathBuf;

/// Options of `tierfs mount`.
#[derive(Debug, Clone)]
pub struct MountOptions {
    pub config: PathBuf,
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
    /// Let other users in (also `[mount] allow_other`); the mount helper's `-o allow_other`.
    pub allow_other: bool,
    /// Mount over a mountpoint that is not empty, hiding what it holds (`--nonempty`).
    pub nonempty: bool,
}
