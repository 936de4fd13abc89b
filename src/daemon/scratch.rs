//! Scratch mounts (`[mount] scratch`): their data lives only as long as the mount, so the
//! daemon discards it and removes the tier folders it created and the mountpoint when it
//! leaves, and the next mount on the host clears what a killed scratch daemon left behind.
//! A scratch mount takes only tier folders that are new, empty or its own
//! ([`crate::tier::scratch`]), so what it removes is only ever what it made.
//!
//! A daemon that was killed leaves its scratch folders behind, marked as such in their lock
//! records; the next mount on that host that finds them next to its own tier folders
//! removes them ([`sweep_stale_scratch`]).

use super::mountinfo::{daemon_of, mount_at, Daemon};
use super::unmount::clear_dead_mount;
use crate::config::MountConfig;
use crate::error::failure::Failure;
use crate::tier::scratch::Plan as ScratchPlan;
use crate::vfs::TierFs;
use std::path::Path;

/// What a scratch mount of `config` would do with each tier folder, or why it must refuse
/// the folder (it holds what no scratch mount of ours made), in the words of the refusal.
pub fn scratch_plans(config: &MountConfig) -> Vec<Result<ScratchPlan, String>> {
    config
        .tiers
        .iter()
        .map(|t| {
            crate::tier::scratch::inspect(&t.path).map_err(|why| {
                format!(
                    "{}: tier '{}': {} cannot take scratch data: {why}. Scratch mode removes \
                 what it creates at unmount, so it takes a new or empty folder: point `path` \
                 at one (e.g. a folder named after ${{SLURM_JOB_ID}}), or mount without \
                 --scratch",
                    config.source.display(),
                    t.name,
                    t.path.display()
                )
            })
        })
        .collect()
}

/// Before a scratch mount creates anything: what it will do with each tier folder, or the
/// folders it must refuse, every one named.
pub(super) fn plan(config: &MountConfig) -> Result<Vec<ScratchPlan>, Failure> {
    let (plans, refused): (Vec<_>, Vec<_>) =
        scratch_plans(config).into_iter().partition(Result::is_ok);
    let plans: Vec<ScratchPlan> = plans.into_iter().filter_map(Result::ok).collect();
    let refused: Vec<String> = refused.into_iter().filter_map(Result::err).collect();
    if refused.is_empty() {
        Ok(plans)
    } else {
        Err(Failure::usage(refused.join("\n")))
    }
}

/// Once the tier folders exist: marks each new or empty one as this scratch mount's,
/// saying whether the mount made it (`plans` from [`plan`], taken before they were made).
pub(super) fn mark(config: &MountConfig, plans: &[ScratchPlan]) -> Result<(), Failure> {
    for (t, p) in config.tiers.iter().zip(plans) {
        let created = match p {
            ScratchPlan::Create if t.path.is_dir() => true,
            ScratchPlan::Empty => false,
            // Not made (a degraded mount's missing tier), or marked already.
            _ => continue,
        };
        crate::tier::scratch::mark(&t.path, created).map_err(|e| {
            Failure::runtime(format!(
                "tier '{}': cannot mark {} as scratch: {e}",
                t.name,
                t.path.display()
            ))
        })?;
    }
    Ok(())
}

/// A mount that keeps its data: any scratch marker on its tiers goes (a killed scratch
/// mount's data, taken over by this one, is kept from now on).
pub(super) fn unmark(tiers: &[crate::tier::Tier]) {
    for t in tiers.iter().filter(|t| !t.missing) {
        if let Err(e) = crate::tier::scratch::unmark(&t.root) {
            log::warn!("tier '{}': cannot remove its scratch marker: {e}", t.name);
        }
    }
}

/// Scratch mode, at the end: the data is discarded and each tier folder the mount created
/// removed (what is not tierfs's in one is kept, with a warning; a folder that was there
/// before is kept, empty), then the mountpoint if it is empty.
pub(super) fn remove_scratch(fs: &TierFs, mountpoint: &Path) {
    for t in fs.tiers().iter().filter(|t| !t.missing) {
        let created = crate::tier::scratch::marked(&t.root).unwrap_or(false);
        if let Err(e) = crate::tier::discard_contents(&t.root) {
            log::warn!(
                "scratch: cannot remove the data of tier '{}' in {}: {e}",
                t.name,
                t.root.display()
            );
        }
        t.release_lock();
        match crate::tier::remove_folder(&t.root, created) {
            Ok(()) if !created => log::info!(
                "scratch: emptied tier folder {} (kept: it was there before)",
                t.root.display()
            ),
            Ok(()) => log::info!("scratch: removed tier folder {}", t.root.display()),
            Err(e) => log::warn!("scratch: tier '{}': {e}", t.name),
        }
    }
    remove_empty_mountpoint(mountpoint);
}

/// Removes a mountpoint folder of a scratch mount that has gone, if nothing is in it and
/// nothing is mounted there.
fn remove_empty_mountpoint(mountpoint: &Path) {
    if mount_at(mountpoint).is_none() {
        match std::fs::remove_dir(mountpoint) {
            Ok(()) => log::info!("scratch: removed mountpoint {}", mountpoint.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => log::info!("scratch: kept mountpoint {}: {e}", mountpoint.display()),
        }
    }
}

/// Removes the scratch tier folders that a killed daemon of this host left beside this
/// config's tier folders (the folders in the same parents): their lock records say scratch,
/// this host, and a process that is gone, and their scratch marker is there (what an
/// older tierfs's scratch mount left, unmarked, is not known to be all scratch data). Their lock is taken first, under the node lock,
/// so a daemon still using one, or another mount sweeping at the same moment, is never in
/// the way. The dead mount such a daemon left is detached. Folders of other users, other
/// hosts or without a record are never touched. The config's own tier folders are handled
/// when they are opened ([`crate::tier::Tier::open_for`]).
pub fn sweep_stale_scratch(
    config: &MountConfig,
    missing: &[(usize, String)],
    say: &mut dyn FnMut(&str),
) {
    use crate::tier::lock::{Holder, TakenOver, TierLock};
    use std::os::unix::fs::MetadataExt;
    let euid = crate::sys::euid();
    let mut parents: Vec<&Path> = config
        .tiers
        .iter()
        .enumerate()
        .filter(|(i, _)| !missing.iter().any(|(m, _)| m == i))
        .filter_map(|(_, t)| t.path.parent())
        .collect();
    parents.sort();
    parents.dedup();
    for parent in parents {
        let Ok(entries) = std::fs::read_dir(parent) else {
            continue;
        };
        for e in entries.flatten() {
            let dir = e.path();
            if config.tiers.iter().any(|t| t.path == dir) {
                continue;
            }
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() && m.uid() == euid => {}
                _ => continue,
            }
            let meta = dir.join(crate::tier::META_DIR);
            let Some(h) = crate::tier::lock::holder_of(&meta) else {
                continue;
            };
            if !h.scratch || h.host.is_empty() || !h.is_this_host() || h.is_alive() {
                continue;
            }
            let Some(created) = crate::tier::scratch::marked(&dir) else {
                continue;
            };
            let me = Holder::me("cleanup", None, false);
            let Ok((lock, Some(TakenOver::Stale(h)))) = TierLock::acquire(&dir, &meta, me, false)
            else {
                continue;
            };
            if !h.scratch {
                continue;
            }
            if let Some(mp) = &h.mountpoint {
                if let Some(entry) = mount_at(mp) {
                    if entry.is_tierfs()
                        && daemon_of(mp, &entry, crate::config::DEFAULT_STATS_DIR) == Daemon::Dead
                    {
                        match clear_dead_mount(mp) {
                            Ok(()) => say(&format!(
                                "detached the dead mount at {} of a killed scratch daemon",
                                mp.display()
                            )),
                            Err(e) => say(&format!("{e}")),
                        }
                    }
                }
                remove_empty_mountpoint(mp);
            }
            let discarded = crate::tier::discard_contents(&dir);
            drop(lock);
            let msg = match discarded
                .map_err(|e| e.to_string())
                .and_then(|_| crate::tier::remove_folder(&dir, created))
            {
                Ok(()) => format!(
                    "{} the scratch tier folder {} left by a tierfs daemon that was \
                     killed ({})",
                    if created { "removed" } else { "emptied" },
                    dir.display(),
                    h.describe()
                ),
                Err(e) => format!(
                    "cleaning up the scratch tier folder {} left by a killed tierfs daemon \
                     ({}): {e}",
                    dir.display(),
                    h.describe()
                ),
            };
            log::warn!("{msg}");
            say(&msg);
        }
    }
}
