//! The mount helper: `mount -t fuse.tierfs CONFIG MOUNTPOINT -o OPTIONS` and fstab lines.
//!
//! util-linux mount(8) mounts a type it does not know by running a helper. For type
//! `fuse.tierfs` it looks in /sbin, /sbin/fs.d and /sbin/fs, in that order, for
//! `mount.fuse.tierfs`, and where that is missing for `mount.fuse` (the type without its
//! subtype; Debian's fuse3 package ships it as a link to mount.fuse3). It runs the helper as
//! `HELPER CONFIG MOUNTPOINT [-s] [-f] [-n] [-v] [-o OPTIONS] [-t fuse.tierfs]`, with the
//! fstab options minus the ones only mount(8) reads (x-*, comment=).
//! mount.fuse3 in turn runs `tierfs CONFIG MOUNTPOINT -o OPTIONS` through /bin/sh with the
//! caller's PATH, after dropping user, nouser, users, auto, noauto, _netdev and nofail and
//! adding dev and suid unless nodev and nosuid were given.
//!
//! So the tierfs binary is a helper in both forms: called by a name ending in
//! `mount.fuse.tierfs` (a symlink in /sbin), or as `tierfs CONFIG MOUNTPOINT ...` with an
//! existing file where a command name would be. Either way the options become a plain
//! `tierfs mount` ([`MountOptions`]), which returns once the mount answers, as mount(8)
//! expects of a helper. Each option is either tierfs's own, one that changes nothing for a
//! tierfs mount (said in [`OPTIONS`]), or refused with the list of accepted ones: a mount
//! silently weaker than its fstab line (`ro` mounted read-write) must not happen.

use crate::daemon::MountOptions;
use crate::failure::Failure;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The name mount(8) runs the helper by (a symlink to the tierfs binary).
pub const HELPER_NAME: &str = "mount.fuse.tierfs";

/// The file system type to give mount(8) and fstab.
pub const FS_TYPE: &str = "fuse.tierfs";

/// What one `-o` option does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// tierfs's own option (the same as a `tierfs mount` flag).
    Own,
    /// Accepted; a tierfs mount already behaves so, or only mount(8) and fstab read it.
    NoEffect,
    /// Accepted, but not applied: the helper says so on stderr.
    NotApplied,
    /// Refused (exit 1): mounting without it would break what the option promises.
    Refused,
}

/// Every option the helper knows, what it does with it, and why. Anything else is refused.
pub const OPTIONS: &[(&str, Treatment, &str)] = &[
    (
        "allow_other",
        Treatment::Own,
        "let other users in (tierfs mount --allow-other)",
    ),
    (
        "degraded",
        Treatment::Own,
        "mount without a missing tier other than the first (--degraded)",
    ),
    (
        "force",
        Treatment::Own,
        "clear a dead mount left at the mountpoint (--force)",
    ),
    (
        "reprobe",
        Treatment::Own,
        "measure the tiers' bandwidth again (--reprobe)",
    ),
    (
        "nonempty",
        Treatment::Own,
        "mount over a mountpoint that is not empty, hiding its files (--nonempty)",
    ),
    ("rw", Treatment::NoEffect, "tierfs mounts are read-write"),
    ("defaults", Treatment::NoEffect, "fstab's placeholder"),
    ("auto", Treatment::NoEffect, "read by mount -a"),
    ("noauto", Treatment::NoEffect, "read by mount -a"),
    (
        "user",
        Treatment::NoEffect,
        "read by mount(8) (who may mount)",
    ),
    (
        "nouser",
        Treatment::NoEffect,
        "read by mount(8) (who may mount)",
    ),
    (
        "users",
        Treatment::NoEffect,
        "read by mount(8) (who may mount)",
    ),
    (
        "owner",
        Treatment::NoEffect,
        "read by mount(8) (who may mount)",
    ),
    (
        "group",
        Treatment::NoEffect,
        "read by mount(8) (who may mount)",
    ),
    (
        "_netdev",
        Treatment::NoEffect,
        "read by the init system (mount after the network)",
    ),
    (
        "nofail",
        Treatment::NoEffect,
        "read by mount -a and the init system",
    ),
    (
        "nosuid",
        Treatment::NoEffect,
        "tierfs mounts are always nosuid",
    ),
    (
        "nodev",
        Treatment::NoEffect,
        "tierfs mounts are always nodev",
    ),
    (
        "suid",
        Treatment::NoEffect,
        "added by mount.fuse3; tierfs mounts stay nosuid",
    ),
    (
        "dev",
        Treatment::NoEffect,
        "added by mount.fuse3; tierfs mounts stay nodev",
    ),
    ("exec", Treatment::NoEffect, "tierfs mounts allow exec"),
    ("async", Treatment::NoEffect, "the default"),
    (
        "default_permissions",
        Treatment::NoEffect,
        "tierfs always lets the kernel check permissions",
    ),
    (
        "atime",
        Treatment::NoEffect,
        "tierfs keeps the tiers' own access times",
    ),
    (
        "noatime",
        Treatment::NoEffect,
        "tierfs keeps the tiers' own access times",
    ),
    (
        "relatime",
        Treatment::NoEffect,
        "tierfs keeps the tiers' own access times",
    ),
    (
        "strictatime",
        Treatment::NoEffect,
        "tierfs keeps the tiers' own access times",
    ),
    (
        "nodiratime",
        Treatment::NoEffect,
        "tierfs keeps the tiers' own access times",
    ),
    (
        "diratime",
        Treatment::NoEffect,
        "tierfs keeps the tiers' own access times",
    ),
    (
        "lazytime",
        Treatment::NoEffect,
        "tierfs keeps the tiers' own access times",
    ),
    (
        "nolazytime",
        Treatment::NoEffect,
        "tierfs keeps the tiers' own access times",
    ),
    (
        "noexec",
        Treatment::NotApplied,
        "tierfs mounts allow exec; mount(8) adds noexec for `user` fstab lines",
    ),
    (
        "sync",
        Treatment::NotApplied,
        "writes reach the tiers when acknowledged, unless a [cache] holds them",
    ),
    (
        "dirsync",
        Treatment::NotApplied,
        "folder changes reach the tiers when acknowledged",
    ),
    (
        "ro",
        Treatment::Refused,
        "tierfs has no read-only mount; remove `ro` (or use `tierfs export` for a read-only copy)",
    ),
    (
        "allow_root",
        Treatment::Refused,
        "tierfs has no allow_root; use allow_other",
    ),
];

/// How to treat an option (`name` or `name=value`); None: unknown.
pub fn treatment(opt: &str) -> Option<(Treatment, &'static str)> {
    let name = opt.split_once('=').map_or(opt, |(n, _)| n);
    // Options mount(8) keeps to itself but that mount.fuse3 passes on, and the `user=NAME`
    // libmount adds for an fstab line with `user`.
    if name.starts_with("x-") || name == "comment" || name == "user" {
        return Some((Treatment::NoEffect, "read by mount(8) and the init system"));
    }
    if opt.contains('=') {
        return None;
    }
    OPTIONS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, t, why)| (*t, *why))
}

/// The helper's command line, as mount(8) or mount.fuse3 gives it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HelperArgs {
    pub config: PathBuf,
    pub mountpoint: PathBuf,
    /// The `-o` options, split at commas, in order (several `-o` add up).
    pub options: Vec<String>,
    /// `-s`: unknown options are ignored (with a note) instead of refused.
    pub sloppy: bool,
    /// `-f`: check everything, mount nothing.
    pub fake: bool,
    /// `-v`: say what the helper runs.
    pub verbose: bool,
}

/// Whether this process was started as a mount helper: by the name mount(8) looks for, or
/// as `tierfs CONFIG MOUNTPOINT ...` (mount.fuse3), where CONFIG is an existing file and
/// not a command name.
pub fn is_helper_call(args: &[OsString], commands: &[&str]) -> bool {
    let by_name = args.first().is_some_and(|a0| {
        Path::new(a0)
            .file_name()
            .is_some_and(|n| n.to_string_lossy() == HELPER_NAME)
    });
    if by_name {
        return true;
    }
    match (args.get(1), args.get(2)) {
        (Some(first), Some(_)) => {
            let s = first.to_string_lossy();
            !s.starts_with('-') && !commands.contains(&s.as_ref()) && Path::new(first).is_file()
        }
        _ => false,
    }
}

/// Parses `CONFIG MOUNTPOINT [-s] [-f] [-n] [-v] [-o OPTS]... [-t TYPE]` (after `argv[0]`).
pub fn parse_args(args: &[OsString]) -> Result<HelperArgs, Failure> {
    let usage = || {
        Failure::usage(format!(
            "usage: {HELPER_NAME} CONFIG MOUNTPOINT [-o OPTIONS] (as mount(8) calls it: \
             `mount -t {FS_TYPE} CONFIG MOUNTPOINT -o OPTIONS`, or an fstab line \
             `CONFIG MOUNTPOINT {FS_TYPE} OPTIONS 0 0`)"
        ))
    };
    let mut positional = Vec::new();
    let mut h = HelperArgs::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-s") => h.sloppy = true,
            Some("-f") => h.fake = true,
            Some("-v") => h.verbose = true,
            // No mtab to keep: /etc/mtab is the kernel's list on current systems.
            Some("-n") => {}
            Some("-o") => {
                let o = it.next().ok_or_else(usage)?;
                let o = o.to_str().ok_or_else(|| {
                    Failure::usage(format!("-o {o:?}: mount options must be UTF-8 text"))
                })?;
                h.options.extend(
                    o.split(',')
                        .filter(|s| !s.is_empty())
                        .map(|s| s.to_string()),
                );
            }
            Some("-t") => {
                let t = it.next().ok_or_else(usage)?.to_string_lossy().into_owned();
                if t != FS_TYPE && t != "tierfs" {
                    return Err(Failure::usage(format!(
                        "-t {t}: this helper mounts type {FS_TYPE} only"
                    )));
                }
            }
            Some("-N") => {
                return Err(Failure::usage(
                    "-N (mounting in another mount namespace) is not supported; run mount \
                     inside that namespace (nsenter -m) instead",
                ))
            }
            Some(s) if s.starts_with('-') && s.len() > 1 => {
                return Err(Failure::usage(format!(
                    "unknown flag {s}; {}",
                    usage().message
                )))
            }
            _ => positional.push(a.clone()),
        }
    }
    match <[OsString; 2]>::try_from(positional) {
        Ok([config, mountpoint]) => {
            h.config = config.into();
            h.mountpoint = mountpoint.into();
            Ok(h)
        }
        Err(_) => Err(usage()),
    }
}

/// What the helper will do: a `tierfs mount` and the notes it prints first.
#[derive(Debug)]
pub struct Plan {
    pub mount: MountOptions,
    pub notes: Vec<String>,
}

/// Translates the options into a `tierfs mount`; refuses what cannot be honoured.
pub fn plan(h: &HelperArgs) -> Result<Plan, Failure> {
    let mut m = MountOptions {
        config: h.config.clone(),
        mountpoint: h.mountpoint.clone(),
        foreground: false,
        force: false,
        reprobe: false,
        degraded: false,
        allow_other: false,
        break_lock: false,
        scratch: None,
        nonempty: false,
    };
    let mut notes = Vec::new();
    let mut refused = Vec::new();
    for o in &h.options {
        match treatment(o) {
            Some((Treatment::Own, _)) => match o.as_str() {
                "allow_other" => m.allow_other = true,
                "degraded" => m.degraded = true,
                "force" => m.force = true,
                "reprobe" => m.reprobe = true,
                "nonempty" => m.nonempty = true,
                _ => unreachable!("OPTIONS lists an own option that plan() does not map: {o}"),
            },
            Some((Treatment::NoEffect, _)) => {}
            Some((Treatment::NotApplied, why)) => {
                notes.push(format!("mount option {o} is not applied: {why}"))
            }
            Some((Treatment::Refused, why)) => refused.push(format!("{o}: {why}")),
            None if h.sloppy => notes.push(format!("unknown mount option {o} ignored (-s)")),
            None => refused.push(format!("{o}: not a tierfs mount option")),
        }
    }
    if !refused.is_empty() {
        let own: Vec<&str> = OPTIONS
            .iter()
            .filter(|(_, t, _)| *t == Treatment::Own)
            .map(|(n, _, _)| *n)
            .collect();
        return Err(Failure::usage(format!(
            "refused mount option{}: {}\ntierfs takes {} (see `man tierfs`, MOUNT HELPER); \
             the generic ones mount(8) passes (rw, nosuid, nodev, noauto, _netdev, nofail, \
             ...) are accepted",
            if refused.len() > 1 { "s" } else { "" },
            refused.join("; "),
            own.join(", ")
        )));
    }
    Ok(Plan { mount: m, notes })
}

/// The `tierfs mount` command line a plan stands for (for `-v` and `-f`).
pub fn describe(m: &MountOptions) -> String {
    let mut s = String::from("tierfs mount");
    for (on, flag) in [
        (m.allow_other, " --allow-other"),
        (m.degraded, " --degraded"),
        (m.force, " --force"),
        (m.reprobe, " --reprobe"),
        (m.nonempty, " --nonempty"),
    ] {
        if on {
            s.push_str(flag);
        }
    }
    format!(
        "{s} --config {} {}",
        m.config.display(),
        m.mountpoint.display()
    )
}

/// Runs the helper; returns the exit status mount(8) expects of one: 0 mounted, 1 wrong
/// invocation or options, 32 the mount failed.
pub fn run(args: &[OsString]) -> i32 {
    let result = parse_args(args.get(1..).unwrap_or_default())
        .and_then(|h| plan(&h).map(|p| (h, p)))
        .and_then(|(h, p)| {
            for n in &p.notes {
                eprintln!("tierfs: note: {n}");
            }
            if h.verbose || h.fake {
                eprintln!("tierfs: {}", describe(&p.mount));
            }
            if h.fake {
                // -f: the checks `tierfs check-config` makes, and nothing mounted.
                let cfg = crate::config::MountConfig::load(&p.mount.config)
                    .map_err(|e| Failure::usage(e.to_string()))?;
                let problems = cfg.check_tier_dirs();
                return if problems.is_empty() {
                    Ok(())
                } else {
                    Err(Failure::usage(problems.join("\n")))
                };
            }
            crate::daemon::mount(&p.mount)
        });
    match result {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("tierfs: error: {}", f.message);
            if f.code == 2 {
                1
            } else {
                32
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_what_mount_8_passes() {
        let h = parse_args(&os(&[
            "/etc/tierfs.toml",
            "/local/tierfs",
            "-s",
            "-v",
            "-n",
            "-o",
            "rw,nosuid,nodev,allow_other",
            "-o",
            "degraded",
            "-t",
            "fuse.tierfs",
        ]))
        .unwrap();
        assert_eq!(h.config, Path::new("/etc/tierfs.toml"));
        assert_eq!(h.mountpoint, Path::new("/local/tierfs"));
        assert_eq!(
            h.options,
            ["rw", "nosuid", "nodev", "allow_other", "degraded"]
        );
        assert!(h.sloppy && h.verbose && !h.fake);
    }

    #[test]
    fn bad_invocations_say_how_to_call_it() {
        for bad in [
            &["/c"][..],
            &["/c", "/m", "/x"],
            &["/c", "/m", "-o"],
            &["/c", "/m", "-t", "fuse.sshfs"],
            &["/c", "/m", "-N", "/proc/1/ns/mnt"],
            &["/c", "/m", "--bogus"],
        ] {
            let e = parse_args(&os(bad)).unwrap_err();
            assert_eq!(e.code, 2, "{bad:?}");
            assert!(
                e.message.contains("usage:")
                    || e.message.contains("-t fuse.sshfs")
                    || e.message.contains("-N"),
                "{bad:?}: {}",
                e.message
            );
        }
    }

    fn plan_of(opts: &str) -> Result<Plan, Failure> {
        plan(&parse_args(&os(&["/c", "/m", "-o", opts])).unwrap())
    }

    #[test]
    fn own_options_become_mount_flags() {
        let p = plan_of("allow_other,degraded,force,reprobe").unwrap();
        assert!(p.mount.allow_other && p.mount.degraded && p.mount.force && p.mount.reprobe);
        assert!(!p.mount.foreground, "a helper must return once mounted");
        assert_eq!(
            describe(&p.mount),
            "tierfs mount --allow-other --degraded --force --reprobe --config /c /m"
        );
        let p = plan_of("rw").unwrap();
        assert!(!p.mount.allow_other && !p.mount.degraded);
    }

    #[test]
    fn generic_options_are_accepted_quietly() {
        // What libmount passes for `defaults,_netdev,nofail` and for a `user` line, and what
        // mount.fuse3 adds.
        let p = plan_of(
            "rw,defaults,nosuid,nodev,suid,dev,exec,auto,noauto,user,nouser,users,owner,\
             group,_netdev,nofail,relatime,noatime,x-systemd.automount,x-mount.mkdir,\
             comment=systemd.automount,user=alice,default_permissions,async",
        )
        .unwrap();
        assert!(p.notes.is_empty(), "{:?}", p.notes);
    }

    #[test]
    fn options_tierfs_cannot_apply_are_said_or_refused() {
        let p = plan_of("noexec,sync").unwrap();
        assert_eq!(p.notes.len(), 2, "{:?}", p.notes);
        assert!(p.notes[0].contains("noexec"));
        for (opts, needle) in [
            ("ro", "ro: tierfs has no read-only mount"),
            ("rw,bogus", "bogus: not a tierfs mount option"),
            ("allow_root", "use allow_other"),
            ("degraded=1", "degraded=1: not a tierfs mount option"),
        ] {
            let e = plan_of(opts).unwrap_err();
            assert_eq!(e.code, 2);
            assert!(e.message.contains(needle), "{opts}: {}", e.message);
            assert!(
                e.message
                    .contains("tierfs takes allow_other, degraded, force, reprobe"),
                "{}",
                e.message
            );
        }
        // -s (sloppy): unknown options become notes; refused ones stay refused.
        let p = plan(&parse_args(&os(&["/c", "/m", "-s", "-o", "bogus"])).unwrap()).unwrap();
        assert_eq!(p.notes, ["unknown mount option bogus ignored (-s)"]);
        assert!(plan(&parse_args(&os(&["/c", "/m", "-s", "-o", "ro"])).unwrap()).is_err());
    }

    #[test]
    fn helper_calls_are_recognised() {
        let cmds = ["mount", "stat"];
        let cfg = tempfile::NamedTempFile::new().unwrap();
        let cfg = cfg.path().to_str().unwrap();
        assert!(is_helper_call(
            &os(&["/sbin/mount.fuse.tierfs", "c", "m"]),
            &cmds
        ));
        assert!(is_helper_call(
            &os(&["tierfs", cfg, "/m", "-o", "rw"]),
            &cmds
        ));
        assert!(!is_helper_call(&os(&["tierfs", "mount", "/m"]), &cmds));
        assert!(!is_helper_call(&os(&["tierfs", "mnt", "/m"]), &cmds));
        assert!(!is_helper_call(&os(&["tierfs", "--help"]), &cmds));
        assert!(!is_helper_call(&os(&["tierfs", cfg]), &cmds));
    }

    #[test]
    fn every_listed_option_has_one_entry() {
        for (i, (n, _, why)) in OPTIONS.iter().enumerate() {
            assert!(!why.is_empty());
            assert!(
                OPTIONS[i + 1..].iter().all(|(m, _, _)| m != n),
                "{n} listed twice"
            );
        }
    }
}
