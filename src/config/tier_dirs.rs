//! The disk-touching checks of a validated configuration, run just before mounting (and by
//! `tierfs check-config` without creating anything): every tier folder exists or can be
//! created, is a writable directory, and no two tiers, nor a tier and the mountpoint, share
//! or nest one folder once symlinks are resolved.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::tiers::TierConfig;
use super::{ConfigError, MountConfig};

impl MountConfig {
    /// Checks every tier folder exists (or creates it where `create = true`), is a directory
    /// and is writable.
    ///
    /// Only the last path component is ever created: a missing parent usually means the
    /// parallel file system is not mounted on this node, and creating the tree would quietly
    /// put the "PFS" tier on the root disk. Once all folders exist they are resolved through
    /// symlinks and checked again for two tiers sharing (or nesting) one folder.
    pub fn prepare_tier_dirs(&self) -> Result<(), ConfigError> {
        self.prepare_tier_dirs_degraded(false).map(|_| ())
    }

    /// [`Self::prepare_tier_dirs`], but with `degraded` a tier other than the first whose
    /// folder fails the checks is left out instead: returns those tiers' indexes, each with
    /// why. The first tier must pass (it holds symlinks, special files and the default log).
    pub fn prepare_tier_dirs_degraded(
        &self,
        degraded: bool,
    ) -> Result<Vec<(usize, String)>, ConfigError> {
        let mut missing = Vec::new();
        let mut resolved = Vec::with_capacity(self.tiers.len());
        for (i, t) in self.tiers.iter().enumerate() {
            match self.tier_dir(t, true).map_err(|m| self.tier_problem(t, &m)) {
                Ok(real) => resolved.push(real),
                Err(ConfigError::Invalid(msg)) if degraded && i > 0 => {
                    missing.push((i, msg));
                    // An empty path overlaps nothing in the check below.
                    resolved.push(PathBuf::new());
                }
                Err(ConfigError::Invalid(msg)) if degraded => {
                    return Err(ConfigError::Invalid(format!(
                        "{msg}\n(degraded mounts may leave out any tier but the first, which \
                         holds symlinks, special files and the default log)"
                    )))
                }
                Err(e) => return Err(e),
            }
        }
        match self.overlaps(&resolved).into_iter().next() {
            Some(p) => Err(ConfigError::Invalid(p)),
            None => Ok(missing),
        }
    }

    /// What [`MountConfig::prepare_tier_dirs`] would refuse, without creating anything:
    /// every problem, one message each, in the same words (for `tierfs check-config`).
    pub fn check_tier_dirs(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut resolved = Vec::with_capacity(self.tiers.len());
        for t in &self.tiers {
            match self.tier_dir(t, false) {
                Ok(real) => resolved.push(real),
                Err(m) => {
                    problems.push(self.tier_problem(t, &m).to_string());
                    // Keep the indexes lined up for the overlap check; an unknown folder
                    // overlaps nothing.
                    resolved.push(PathBuf::new());
                }
            }
        }
        problems.extend(self.overlaps(&resolved));
        problems
    }

    /// Why mounting at `mountpoint` would put the mount and a tier folder inside one
    /// another (every path resolved through symlinks): a tier inside the mountpoint, the
    /// mountpoint a tier's folder, or the mountpoint inside a tier's folder. The daemon
    /// would then reach its tier through its own mount (and hang there, with every caller
    /// stuck in D state until the FUSE connection is aborted), or walk into the mount while
    /// scanning the tier. One message per tier concerned; tiers not there yet are skipped.
    pub fn mountpoint_overlaps(&self, mountpoint: &Path) -> Vec<String> {
        let Some(mp) = resolve_lenient(mountpoint) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for t in &self.tiers {
            let Some(dir) = resolve_lenient(&t.path) else {
                continue;
            };
            let why = if dir == mp {
                format!(
                    "its folder {} is the mountpoint {}; mount on an empty folder outside \
                     every tier folder",
                    t.path.display(),
                    mountpoint.display()
                )
            } else if dir.starts_with(&mp) {
                format!(
                    "its folder {} is inside the mountpoint {} (the daemon would reach the tier \
                     through its own mount and hang); put the mountpoint and the tier folders \
                     side by side",
                    t.path.display(),
                    mountpoint.display()
                )
            } else if mp.starts_with(&dir) {
                format!(
                    "the mountpoint {} is inside its folder {} (the daemon would walk into its \
                     own mount and hang); choose a mountpoint outside every tier folder",
                    mountpoint.display(),
                    t.path.display()
                )
            } else {
                continue;
            };
            out.push(self.tier_problem(t, &why).to_string());
        }
        out
    }

    fn tier_problem(&self, t: &TierConfig, msg: &str) -> ConfigError {
        ConfigError::Invalid(format!(
            "{}: tier '{}': {msg}",
            self.source.display(),
            t.name
        ))
    }

    /// Checks one tier folder and returns it resolved through symlinks. With `create`, a
    /// missing last component is created (where `create = true`); without, it is only
    /// checked that it could be.
    fn tier_dir(&self, t: &TierConfig, create: bool) -> Result<PathBuf, String> {
        let dir = &t.path;
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "{} exists but is not a directory; point `path` at a folder",
                    dir.display()
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let parent = dir.parent().unwrap_or(Path::new("/"));
                if !parent.is_dir() {
                    return Err(format!(
                        "the parent folder {} of {} does not exist (is its file system \
                         mounted on this node?); tierfs creates only the last component \
                         of a tier path, even with `create = true`: create the parent \
                         first or fix `path`",
                        parent.display(),
                        dir.display()
                    ));
                }
                if !t.create {
                    return Err(format!(
                        "folder {} does not exist; create it or set `create = true`",
                        dir.display()
                    ));
                }
                if !create {
                    // Would be created: the parent must take a new folder.
                    check_writable(parent).map_err(|e| {
                        format!(
                            "cannot create {}: its parent folder {} is not writable by this \
                             user: {e}",
                            dir.display(),
                            parent.display()
                        )
                    })?;
                    let real_parent = std::fs::canonicalize(parent)
                        .map_err(|e| format!("cannot resolve {}: {e}", parent.display()))?;
                    return Ok(match dir.file_name() {
                        Some(n) => real_parent.join(n),
                        None => real_parent,
                    });
                }
                match std::fs::create_dir(dir) {
                    Ok(()) => {}
                    // Another tierfs on the same node may have just made it.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
                    // The same words as check-config's check above.
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS)
                        ) =>
                    {
                        return Err(format!(
                            "cannot create {}: its parent folder {} is not writable by this \
                             user: {e}",
                            dir.display(),
                            parent.display()
                        ))
                    }
                    Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
                }
            }
            Err(e) => {
                let hint = match e.kind() {
                    io::ErrorKind::PermissionDenied => super::access::unsearchable_hint(dir),
                    _ => None,
                };
                return Err(format!(
                    "cannot inspect {}: {e}{}",
                    dir.display(),
                    hint.unwrap_or_default()
                ));
            }
        }
        if let Err(e) = check_writable(dir) {
            return Err(format!(
                "folder {} is not writable and searchable by this user: {e}; fix its \
                 permissions (e.g. `chmod u+wx`) or choose another folder",
                dir.display()
            ));
        }
        std::fs::canonicalize(dir).map_err(|e| format!("cannot resolve {}: {e}", dir.display()))
    }

    /// Tiers whose resolved folders are the same or nested (empty paths are skipped).
    fn overlaps(&self, resolved: &[PathBuf]) -> Vec<String> {
        let mut out = Vec::new();
        for (i, a) in resolved.iter().enumerate() {
            for (j, b) in resolved.iter().enumerate().skip(i + 1) {
                if a.as_os_str().is_empty() || b.as_os_str().is_empty() {
                    continue;
                }
                if a.starts_with(b) || b.starts_with(a) {
                    out.push(
                        self.tier_problem(
                            &self.tiers[j],
                            &format!(
                                "{} resolves to {}, which is the same as or nested with tier \
                                 '{}' ({}); tier folders must be separate, so check the \
                                 symlinks on these paths",
                                self.tiers[j].path.display(),
                                b.display(),
                                self.tiers[i].name,
                                a.display()
                            ),
                        )
                        .to_string(),
                    );
                }
            }
        }
        out
    }
}

/// `p` resolved through symlinks; where it does not exist (yet), its parent resolved and
/// its name; `None` when neither can be.
fn resolve_lenient(p: &Path) -> Option<PathBuf> {
    if let Ok(c) = std::fs::canonicalize(p) {
        return Some(c);
    }
    let parent = std::fs::canonicalize(p.parent()?).ok()?;
    Some(parent.join(p.file_name()?))
}

/// `access(dir, W_OK | X_OK)`: can this process create files in `dir`?
fn check_writable(dir: &Path) -> io::Result<()> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call; access(2) only
    // reads it.
    let rc = unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
