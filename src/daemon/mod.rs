//! Mounting and unmounting: the daemon's life from `tierfs mount` to its exit.
//!
//! [`mount`] checks the config and the mountpoint, then either serves in this process
//! (`--foreground`, or as the child of the background fork) or starts that child and waits
//! until the mount answers. The parts, each in its own module:
//! - `options`: what `tierfs mount` asks for ([`MountOptions`]);
//! - `background`: the detached child, the readiness pipe, the default log file;
//! - `tiers`: opening, locking and measuring the tiers ([`open_tiers`]);
//! - `serve`: from opened tiers to an answering mount and its helper threads;
//! - `shutdown`: signals, the daemon's own unmount, write-back and the lost report at exit;
//! - `scratch`: removing a scratch mount's data, also what a killed daemon left;
//! - `fresh`: what the tier folders held before, so a failed mount removes what it made;
//! - `mountinfo`: what is mounted where, and whether its daemon answers;
//! - `unmount`: asking the kernel to unmount, and `tierfs unmount` ([`unmount`]);
//! - `lost`: the report of data an unmount could not write back;
//! - `textfile`: the metrics file the daemon writes for node_exporter (`[metrics]`).

mod background;
mod fresh;
mod lost;
mod mountinfo;
mod options;
mod scratch;
mod serve;
mod shutdown;
mod textfile;
mod tiers;
mod unmount;

pub use crate::error::failure::Failure;
pub use background::default_log_path;
pub use lost::{lost_report_path, LOST_REPORT};
pub use mountinfo::{
    daemon_of, is_dead_mount_errno, is_mountpoint, mount_at, mountpoint_state, resolve_outer,
    Daemon, MountEntry, MountpointState,
};
pub use options::MountOptions;
pub use scratch::{scratch_plans, sweep_stale_scratch};
pub use tiers::{identity_problems, open_tiers, open_tiers_degraded};
pub use unmount::{clear_dead_mount, unmount, unmount_path, UnmountError};

use crate::config::MountConfig;

fn check_mountpoint(opts: &MountOptions) -> Result<(), Failure> {
    let mp = &opts.mountpoint;
    match mountpoint_state(mp) {
        MountpointState::Usable => Ok(()),
        MountpointState::Missing => Err(Failure::usage(format!("mountpoint {} does not exist; create it with `mkdir -p {}`", mp.display(), mp.display()))),
        MountpointState::NotADirectory => Err(Failure::usage(format!("mountpoint {} is not a directory", mp.display()))),
        MountpointState::Mounted => Err(Failure::runtime(format!(
            "{} is already a mount point; unmount it first (`tierfs unmount {}`)",
            mp.display(),
            mp.display()
        ))),
        MountpointState::Dead if opts.force => {
            eprintln!("tierfs: clearing the dead mount at {} (--force)", mp.display());
            clear_dead_mount(mp)
        }
        MountpointState::Dead => Err(Failure::runtime(format!(
            "{} holds a dead tierfs mount (its daemon is gone); clear it with `fusermount3 -uz {}` (or `umount -l {}` as root), or rerun with --force",
            mp.display(),
            mp.display(),
            mp.display()
        ))),
    }
}

/// Refuses a mountpoint that holds anything: mounting over it would hide its files from
/// every program until the mount goes, which looks like data loss.
fn refuse_nonempty(mp: &std::path::Path) -> Result<(), Failure> {
    let mut names: Vec<String> = match std::fs::read_dir(mp) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        // Unreadable to us: the kernel decides whether we may mount there.
        Err(_) => return Ok(()),
    };
    if names.is_empty() {
        return Ok(());
    }
    names.sort();
    let n = names.len();
    names.truncate(3);
    let more = if n > 3 {
        format!(" and {} more", n - 3)
    } else {
        String::new()
    };
    Err(Failure::usage(format!(
        "mountpoint {} is not empty (it holds {}{more}); mounting over it would hide them \
         until unmount: mount on an empty folder, or add --nonempty (-o nonempty) to mount \
         over it anyway",
        mp.display(),
        names.join(", ")
    )))
}

/// `tierfs mount`.
pub fn mount(opts: &MountOptions) -> Result<(), Failure> {
    let mut config = MountConfig::load_with(opts.config.as_deref(), &opts.overrides)
        .map_err(|e| Failure::usage(e.to_string()))?;
    // Before anything is created in the tier folders (by this command or, for the
    // background daemon, by the command that started it).
    let before = fresh::Before::inherited_or_survey(&config);
    // Before the tier folders are made: a refusal leaves nothing behind.
    textfile::check(&config, &opts.mountpoint)?;
    if let Some(scratch) = opts.scratch {
        config.mount.scratch = scratch;
    }
    config.mount.allow_other |= opts.allow_other;
    let degraded = opts.degraded || config.mount.degraded;
    let scratch = match config.mount.scratch {
        true => Some(scratch::plan(&config)?),
        false => None,
    };
    let mut missing = config
        .prepare_tier_dirs_degraded(degraded)
        .map_err(|e| Failure::usage(e.to_string()))?;
    // Refused here too, so the command reports it itself; the daemon announces what a
    // degraded mount leaves out.
    tiers::check_identities(&config, &mut missing, degraded)?;
    check_mountpoint(opts)?;
    let overlaps = config.mountpoint_overlaps(&opts.mountpoint);
    if !overlaps.is_empty() {
        return Err(Failure::usage(overlaps.join("\n")));
    }
    // After the overlaps: a tier folder inside the mountpoint is the sharper message.
    if !opts.nonempty && mountpoint_state(&opts.mountpoint) == MountpointState::Usable {
        refuse_nonempty(&opts.mountpoint)?;
    }
    if let Some(plans) = &scratch {
        scratch::mark(&config, plans)?;
    }
    if opts.foreground || background::is_background_child() {
        serve::run_daemon(opts, &config, &before)
    } else {
        background::spawn_background(opts, &config, &before)
    }
}
