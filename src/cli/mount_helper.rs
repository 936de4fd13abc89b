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
//! existing file (or the word `tierfs`: no file, the options name the tiers) where a command
//! name would be. Either way the options become a plain `tierfs mount` ([`MountOptions`]),
//! which returns once the mount answers, as mount(8) expects of a helper.
//!
//! `tierfs mount -o` takes the same options, read by the same [`apply`]: one grammar for
//! the command line and fstab. Each option is a flag of `tierfs mount`, one that changes
//! nothing for a tierfs mount (both in [`OPTIONS`]), a config key with its value (the
//! config's own table, [`crate::config::OPTION_KEYS`]), or refused with the list of
//! accepted ones: a mount silently weaker than its fstab line (`ro` mounted read-write)
//! must not happen.

use crate::config::{Override, OPTION_KEYS};
use crate::daemon::MountOptions;
use crate::error::failure::Failure;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The name mount(8) runs the helper by (a symlink to the tierfs binary).
pub const HELPER_NAME: &str = "mount.fuse.tierfs";

/// The file system type to give mount(8) and fstab.
pub const FS_TYPE: &str = "fuse.tierfs";

/// The source of an fstab line or a `mount -t fuse.tierfs` with no config file: the
/// options name the tiers (`tier.NAME.path=DIR`).
pub const NO_CONFIG: &str = "tierfs";

/// What one `-o` option does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// A flag of `tierfs mount` (`force` is `--force`).
    Flag,
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
        "force",
        Treatment::Flag,
        "clear a dead mount left at the mountpoint (--force)",
    ),
    (
        "reprobe",
        Treatment::Flag,
        "measure the tiers' bandwidth again (--reprobe)",
    ),
    (
        "nonempty",
        Treatment::Flag,
        "mount over a mountpoint that is not empty, hiding its files (--nonempty)",
    ),
    (
        "break_lock",
        Treatment::Flag,
        "take over tier locks of a daemon on another host that is surely gone (--break-lock)",
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

/// How to treat an option of [`OPTIONS`] (`name` or `name=value`); None: not one of them.
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

/// One `-o` argument split at its commas; a value in double quotes may hold commas
/// (`tier.pfs.path="/lus/a,b"`), as libmount passes it. The quotes go.
pub fn split_options(arg: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    for c in arg.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            c => out.last_mut().expect("never empty").push(c),
        }
    }
    out.retain(|o| !o.is_empty());
    out
}

/// The helper's command line, as mount(8) or mount.fuse3 gives it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HelperArgs {
    /// The config file; `None` for the source [`NO_CONFIG`].
    pub config: Option<PathBuf>,
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
/// as `tierfs CONFIG MOUNTPOINT ...` (mount.fuse3), where CONFIG is an existing file (or
/// [`NO_CONFIG`]) and not a command name.
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
            !s.starts_with('-')
                && !commands.contains(&s.as_ref())
                && (Path::new(first).is_file() || s == NO_CONFIG)
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
             `CONFIG MOUNTPOINT {FS_TYPE} OPTIONS 0 0`; CONFIG `{NO_CONFIG}` for none, the \
             tiers given as options tier.NAME.path=DIR)"
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
                h.options.extend(split_options(o));
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
            // A file of that name wins: it is what mount(8) was pointed at.
            let none = config == NO_CONFIG && !Path::new(&config).is_file();
            h.config = (!none).then(|| config.into());
            h.mountpoint = mountpoint.into();
            Ok(h)
        }
        Err(_) => Err(usage()),
    }
}

/// Applies `-o` options (each one item, already split at commas) to a `tierfs mount`:
/// flags are set, config keys become overrides of the config, the rest is accepted or
/// refused as [`OPTIONS`] says. `sloppy` (mount -s) turns unknown options into notes.
/// Returns the notes to print; refuses everything wrong at once.
pub fn apply(m: &mut MountOptions, items: &[String], sloppy: bool) -> Result<Vec<String>, Failure> {
    let mut notes = Vec::new();
    let mut refused = Vec::new();
    let mut unknown = false;
    for o in items {
        match treatment(o) {
            Some((Treatment::Flag, _)) => match o.as_str() {
                "force" => m.force = true,
                "reprobe" => m.reprobe = true,
                "nonempty" => m.nonempty = true,
                "break_lock" => m.break_lock = true,
                _ => unreachable!("OPTIONS lists a flag that apply() does not map: {o}"),
            },
            Some((Treatment::NoEffect, _)) => {}
            Some((Treatment::NotApplied, why)) => {
                notes.push(format!("mount option {o} is not applied: {why}"))
            }
            Some((Treatment::Refused, why)) => refused.push(format!("{o}: {why}")),
            None => match crate::config::parse_option(o) {
                Ok(Some(ov)) => m.overrides.push(ov),
                Err(why) => refused.push(format!("{o}: {why}")),
                Ok(None) if sloppy => notes.push(format!("unknown mount option {o} ignored (-s)")),
                Ok(None) => {
                    unknown = true;
                    refused.push(format!("{o}: not a tierfs mount option"));
                }
            },
        }
    }
    if refused.is_empty() {
        return Ok(notes);
    }
    let mut msg = format!(
        "refused mount option{}: {}",
        if refused.len() > 1 { "s" } else { "" },
        refused.join("; ")
    );
    if unknown {
        msg.push('\n');
        msg.push_str(&accepted());
    }
    Err(Failure::usage(msg))
}

/// What `-o` takes, for the message that refuses an unknown option: the flags, every
/// config key by section, and a word on the generic ones.
pub fn accepted() -> String {
    let flags: Vec<&str> = OPTIONS
        .iter()
        .filter(|(_, t, _)| *t == Treatment::Flag)
        .map(|(n, _, _)| *n)
        .collect();
    let mut sections: Vec<(&str, Vec<&str>)> = Vec::new();
    for k in OPTION_KEYS {
        let (section, key) = k.name.split_once('.').unwrap_or(("", k.name));
        match sections.iter_mut().find(|(s, _)| *s == section) {
            Some((_, keys)) => keys.push(key),
            None => sections.push((section, vec![key])),
        }
    }
    let keys: Vec<String> = sections
        .iter()
        .map(|(s, keys)| {
            let s = if *s == "tier" { "tier.NAME" } else { s };
            format!("{s}.{{{}}}", keys.join(", "))
        })
        .collect();
    format!(
        "tierfs takes the flags {}; any config key as the config file names it, \
         section.key=VALUE, or key=VALUE alone where one section has it (threads=32, \
         allow_other; tier.NAME.path=DIR adds a tier): {}; and the generic options mount(8) \
         passes (rw, nosuid, nodev, noauto, _netdev, nofail, ...). See `man tierfs`, MOUNT \
         OPTIONS.",
        flags.join(", "),
        keys.join(", ")
    )
}

/// Refuses a `tierfs mount` that has neither a config file nor a tier.
pub fn check_source(m: &MountOptions) -> Result<(), Failure> {
    if m.config.is_some() || crate::config::names_a_tier(&m.overrides) {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "no config: give the config file (--config FILE), or the tiers as mount options \
         (-o tier.NAME.path=DIR,...; for mount(8) and fstab the source `{NO_CONFIG}`)"
    )))
}

/// What the helper will do: a `tierfs mount` and the notes it prints first.
#[derive(Debug)]
pub struct Plan {
    pub mount: MountOptions,
    pub notes: Vec<String>,
}

/// Translates the options into a `tierfs mount`; refuses what cannot be honoured.
pub fn plan(h: &HelperArgs) -> Result<Plan, Failure> {
    let mut m = MountOptions::new(h.config.clone(), h.mountpoint.clone());
    let notes = apply(&mut m, &h.options, h.sloppy)?;
    check_source(&m)?;
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
        (m.break_lock, " --break-lock"),
    ] {
        if on {
            s.push_str(flag);
        }
    }
    if let Some(c) = &m.config {
        s.push_str(&format!(" --config {}", c.display()));
    }
    let opts: Vec<String> = m.overrides.iter().map(Override::as_option).collect();
    if !opts.is_empty() {
        s.push_str(&format!(" -o {}", opts.join(",")));
    }
    format!("{s} {}", m.mountpoint.display())
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
                let cfg = crate::config::MountConfig::load_with(
                    p.mount.config.as_deref(),
                    &p.mount.overrides,
                )
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
            "degraded,tier.pfs.path=\"/lus/a,b\"",
            "-t",
            "fuse.tierfs",
        ]))
        .unwrap();
        assert_eq!(h.config.as_deref(), Some(Path::new("/etc/tierfs.toml")));
        assert_eq!(h.mountpoint, Path::new("/local/tierfs"));
        assert_eq!(
            h.options,
            [
                "rw",
                "nosuid",
                "nodev",
                "allow_other",
                "degraded",
                "tier.pfs.path=/lus/a,b"
            ]
        );
        assert!(h.sloppy && h.verbose && !h.fake);
        // The source `tierfs`: no config file.
        let h = parse_args(&os(&["tierfs", "/m", "-o", "tier.a.path=/a"])).unwrap();
        assert_eq!(h.config, None);
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
    fn own_options_become_mount_flags_and_config_keys() {
        let p = plan_of("allow_other,degraded,force,reprobe,break_lock,threads=8").unwrap();
        assert!(p.mount.force && p.mount.reprobe && p.mount.break_lock);
        assert!(!p.mount.foreground, "a helper must return once mounted");
        assert_eq!(
            describe(&p.mount),
            "tierfs mount --force --reprobe --break-lock --config /c -o \
             mount.allow_other=true,mount.degraded=true,mount.threads=8 /m"
        );
        let p = plan_of("rw").unwrap();
        assert!(p.mount.overrides.is_empty() && !p.mount.force);
        // Neither a file nor a tier: nothing to mount.
        let h = parse_args(&os(&["tierfs", "/m", "-o", "threads=8"])).unwrap();
        let e = plan(&h).unwrap_err();
        assert!(
            e.message.contains("no config: give the config file"),
            "{}",
            e.message
        );
        let h = parse_args(&os(&["tierfs", "/m", "-o", "tier.a.path=/a"])).unwrap();
        assert_eq!(
            describe(&plan(&h).unwrap().mount),
            "tierfs mount -o tier.a.path=/a /m"
        );
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
        for (opts, needle, lists) in [
            ("ro", "ro: tierfs has no read-only mount", false),
            ("rw,bogus", "bogus: not a tierfs mount option", true),
            ("allow_root", "use allow_other", false),
            (
                "threads=x",
                "threads=x: mount.threads takes a whole number, e.g. threads=64",
                false,
            ),
            (
                "tier.a.speed=1",
                "tier.a.speed=1: not a tierfs mount option",
                true,
            ),
        ] {
            let e = plan_of(opts).unwrap_err();
            assert_eq!(e.code, 2);
            assert!(e.message.contains(needle), "{opts}: {}", e.message);
            // An unknown option gets the list of what is accepted.
            assert_eq!(
                e.message.contains(
                    "tierfs takes the flags force, reprobe, nonempty, break_lock; any config key"
                ),
                lists,
                "{}",
                e.message
            );
        }
        let e = plan_of("bogus").unwrap_err();
        for key in [
            "tier.NAME.{path, create,",
            "mount.{stats_dir, allow_other,",
            "metrics.{textfile",
        ] {
            assert!(e.message.contains(key), "{key}: {}", e.message);
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
        assert!(is_helper_call(
            &os(&["tierfs", "tierfs", "/m", "-o", "tier.a.path=/a"]),
            &cmds
        ));
    }

    #[test]
    fn every_listed_option_has_one_entry() {
        for (i, (n, _, why)) in OPTIONS.iter().enumerate() {
            assert!(!why.is_empty());
            assert!(
                OPTIONS[i + 1..].iter().all(|(m, _, _)| m != n),
                "{n} listed twice"
            );
            // No config key (by its short name) hides behind a mount(8) option.
            assert!(
                crate::config::parse_option(n).is_ok_and(|o| o.is_none()),
                "{n} is also a config key"
            );
        }
    }

    #[test]
    fn quoted_values_keep_their_commas() {
        assert_eq!(split_options("a,b=\"x,y\",,c"), ["a", "b=x,y", "c"]);
        assert_eq!(split_options(""), Vec::<String>::new());
    }
}
