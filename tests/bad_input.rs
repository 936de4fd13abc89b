//! Every row of docs/ERRORS.md, checked: each malformed config, bad command line, bad tier
//! folder and unsupported operation gets the message (and exit code) or errno the table
//! says. The row ids ("C01", "L03", "T02", "O05") appear in this file as string literals;
//! `every_row_of_errors_md_is_tested` fails when the table and this file disagree.
mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn tierfs(args: &[&str]) -> Output {
    Command::new(tierfs_bin()).args(args).output().unwrap()
}

/// Asserts `o` exited with `code` and that its output has every needle; `id` is the row.
#[track_caller]
fn expect(id: &str, what: &str, o: &Output, code: i32, needles: &[&str]) {
    let t = text(o);
    eprintln!(
        "{id} `{what}` -> exit {:?}:\n{}",
        o.status.code(),
        t.trim_end()
    );
    assert_eq!(
        o.status.code(),
        Some(code),
        "{id}: `{what}` exit code:\n{t}"
    );
    for n in needles {
        assert!(t.contains(n), "{id}: `{what}` lacks {n:?}:\n{t}");
    }
    assert!(
        !t.contains("panicked"),
        "{id}: `{what}` panicked instead of saying what is wrong:\n{t}"
    );
}

/// A temp dir with two existing tier folders `a` and `b` and a mountpoint `mnt`.
struct Dir {
    d: tempfile::TempDir,
}

impl Dir {
    fn new() -> Dir {
        let d = tempfile::Builder::new()
            .prefix("tierfs-bad-")
            .tempdir_in(std::env::var_os("TIERFS_TEST_DIR").unwrap_or_else(|| "/tmp".into()))
            .unwrap();
        for s in ["a", "b", "mnt"] {
            std::fs::create_dir(d.path().join(s)).unwrap();
        }
        Dir { d }
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.d.path().join(rel)
    }
    fn s(&self, rel: &str) -> String {
        self.p(rel).to_str().unwrap().to_string()
    }
    /// `[[tier]]` sections for (name, folder) with a stated bandwidth (no probe).
    fn tiers(&self, list: &[(&str, &str)]) -> String {
        list.iter()
            .map(|(n, rel)| {
                format!(
                    "[[tier]]\nname = \"{n}\"\npath = \"{}\"\nwrite_bandwidth = \"1GB/s\"\n",
                    self.s(rel)
                )
            })
            .collect()
    }
    fn two(&self) -> String {
        self.tiers(&[("a", "a"), ("b", "b")])
    }
    fn write(&self, name: &str, toml: &str) -> String {
        let p = self.p(name);
        std::fs::write(&p, toml).unwrap();
        p.to_str().unwrap().to_string()
    }
}

/// A config row: `check-config` and `mount` both exit 2 with every needle (the file's name
/// first), and nothing is mounted.
#[track_caller]
fn config_row(id: &str, toml: &str, needles: &[&str]) {
    config_row_env(id, toml, &[], needles)
}

/// [`config_row`] with tierfs run with extra environment variables (`${NAME}` rows).
#[track_caller]
fn config_row_env(id: &str, toml: &str, env: &[(&str, &str)], needles: &[&str]) {
    let tierfs = |args: &[&str]| -> Output {
        Command::new(tierfs_bin())
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let d = Dir::new();
    let toml = toml.replace("@DIR@", d.d.path().to_str().unwrap());
    let cfg = d.write("bad.toml", &toml);
    let mut all = vec![cfg.as_str()];
    all.extend_from_slice(needles);
    expect(
        id,
        "check-config",
        &tierfs(&["check-config", &cfg]),
        2,
        &all,
    );
    let mnt = d.s("mnt");
    expect(
        id,
        "mount",
        &tierfs(&["mount", "--config", &cfg, &mnt]),
        2,
        &all,
    );
    assert!(!tierfs::daemon::is_mountpoint(&d.p("mnt")), "{id}: mounted");
}

const T: &str = "[[tier]]\nname = \"a\"\npath = \"@DIR@/a\"\n";

#[test]
fn config_rows() {
    config_row(
        "C01",
        "[[tier]]\nname = \"a\"\npath = /a\n",
        &[":3:8:", "path = /a"],
    );
    config_row(
        "C02",
        &format!("{T}speed = \"2GB/s\"\n"),
        &[":4:1:", "unknown field `speed`", "write_bandwidth"],
    );
    config_row(
        "C03",
        "[tier]\nname = \"a\"\npath = \"/a\"\n",
        &["`[[tier]]` section, with double brackets"],
    );
    config_row(
        "C04",
        "[placement]\nlayout = \"stripe\"\n",
        &["tier: no [[tier]] sections; add at least one"],
    );
    config_row(
        "C05",
        "[[tier]]\nname = \"my tier\"\npath = \"@DIR@/a\"\n",
        &["tier[0].name: \"my tier\" is not a valid tier name; use 1 to 32"],
    );
    config_row(
        "C06",
        &format!("{T}[[tier]]\nname = \"a\"\npath = \"@DIR@/b\"\n"),
        &["tier[1].name: \"a\" is already the name of tier[0]"],
    );
    config_row(
        "C07",
        "[[tier]]\nname = \"a\"\npath = \"rel/dir\"\n",
        &["tier[0].path: \"rel/dir\" is not absolute"],
    );
    config_row(
        "C08",
        "[[tier]]\nname = \"a\"\npath = \"/x/../etc\"\n",
        &["tier[0].path: \"/x/../etc\" contains \"..\""],
    );
    config_row(
        "C09",
        "[[tier]]\nname = \"a\"\npath = \"/\"\n",
        &["tier[0].path: the root folder cannot be a tier"],
    );
    // Any variable of the environment expands (${SLURM_JOB_ID}, ${TMPDIR}, ...); one that
    // is not set is named, with the key.
    assert!(std::env::var_os("TIERFS_UNSET_PROJECT").is_none());
    config_row(
        "C10",
        "[[tier]]\nname = \"a\"\npath = \"/lus/${TIERFS_UNSET_PROJECT}/t\"\n",
        &[
            "tier[0].path: \"/lus/${TIERFS_UNSET_PROJECT}/t\" uses ${TIERFS_UNSET_PROJECT}, \
             which is not set in the environment; set it",
        ],
    );
    config_row_env(
        "C42",
        "[[tier]]\nname = \"a\"\npath = \"@DIR@/a\"\n[mount]\nlog_file = \"${TIERFS_EMPTY}/log\"\n",
        &[("TIERFS_EMPTY", "")],
        &["mount.log_file: \"${TIERFS_EMPTY}/log\" uses ${TIERFS_EMPTY}, which is set but empty"],
    );
    config_row(
        "C43",
        "[[tier]]\nname = \"a\"\npath = \"/lus/${SLURM-JOB}/t\"\n",
        &[
            "tier[0].path:",
            "${SLURM-JOB}, which is not a variable name",
        ],
    );
    config_row(
        "C11",
        "[[tier]]\nname = \"a\"\npath = \"/lus/${USER/t\"\n",
        &["tier[0].path:", "without a closing"],
    );
    config_row(
        "C12",
        &format!("{T}[[tier]]\nname = \"b\"\npath = \"@DIR@//a/\"\n"),
        &["tier[1].path:", "is also the path of tier[0] ('a')"],
    );
    config_row(
        "C13",
        &format!("{T}[[tier]]\nname = \"b\"\npath = \"@DIR@/a/b\"\n"),
        &["tier[1].path:", "is inside tier[0]'s folder"],
    );
    config_row(
        "C14",
        &format!("{T}write_bandwidth = \"2GB\"\n"),
        &["tier[0].write_bandwidth: bad bandwidth \"2GB\": it does not end in \"/s\""],
    );
    config_row(
        "C15",
        &format!("{T}read_bandwidth = \"0GB/s\"\n"),
        &["tier[0].read_bandwidth: bad bandwidth \"0GB/s\": it must be greater than zero"],
    );
    config_row(
        "C16",
        &format!("{T}write_bandwidth = \"2Gb/s\"\n"),
        &["tier[0].write_bandwidth:", "bits"],
    );
    config_row(
        "C17",
        &format!("{T}write_bandwidth = \"-1GB/s\"\n"),
        &[
            "tier[0].write_bandwidth:",
            "negative values are not allowed",
        ],
    );
    config_row(
        "C18",
        &format!("{T}capacity = \"lots\"\n"),
        &["tier[0].capacity: bad size \"lots\": it does not start with a number"],
    );
    config_row(
        "C19",
        &format!("{T}capacity = \"0\"\n"),
        &["tier[0].capacity: must be greater than zero"],
    );
    config_row(
        "C20",
        &format!("{T}capacity = \"0.1KiB\"\n"),
        &["tier[0].capacity:", "not a whole number of bytes"],
    );
    config_row(
        "C21",
        &format!("{T}capacity = \"20000000T\"\n"),
        &["tier[0].capacity:", "too large"],
    );
    config_row(
        "C22",
        &format!("{T}max_in_flight = 0\n"),
        &["tier[0].max_in_flight: 0 is out of range; use 1 to 1024"],
    );
    config_row(
        "C23",
        &format!("{T}[placement]\nlayout = \"raid0\"\n"),
        &["placement.layout: \"raid0\" is not a layout"],
    );
    config_row(
        "C24",
        &format!("{T}[placement]\nstripe_unit = \"1000\"\n"),
        &["placement.stripe_unit: \"1000\" (1000 bytes) must be a multiple of 4096"],
    );
    config_row(
        "C25",
        &format!("{T}[mount]\nstats_dir = \"a/b\"\n"),
        &["mount.stats_dir: \"a/b\" must be a single folder name"],
    );
    config_row(
        "C26",
        &format!("{T}[mount]\nthreads = 0\n"),
        &["mount.threads: 0 is out of range; use 1 to 256"],
    );
    config_row(
        "C27",
        &format!("{T}[mount]\nlog_file = \"tierfs.log\"\n"),
        &["mount.log_file: \"tierfs.log\" is not absolute"],
    );
    config_row(
        "C28",
        &format!("{T}[mount]\npassthrough = \"yes\"\n"),
        &["mount.passthrough: \"yes\" is not one of \"auto\", \"direct\", \"off\""],
    );
    config_row(
        "C29",
        &format!("{T}create = \"yes\"\n"),
        &[":4:10:", "invalid type: string \"yes\", expected a boolean"],
    );
    let cache = |body: &str| format!("{T}[cache]\n{body}\n");
    config_row(
        "C34",
        &cache(""),
        &["cache.size: missing; say how much host memory"],
    );
    config_row(
        "C35",
        &cache("size = \"1MiB\""),
        &["cache.size: 1048576 bytes is too small; use at least 16MiB"],
    );
    config_row(
        "C36",
        &cache("size = \"1GiB\"\npolicy = \"mru\""),
        &["cache.policy: \"mru\" is not one of \"learned\", \"lru\""],
    );
    config_row(
        "C37",
        &cache("size = \"1GiB\"\nprefetch = 65"),
        &["cache.prefetch: 65 is out of range; use 0 (off) to 64 files"],
    );
    config_row(
        "C38",
        &cache("size = \"1GiB\"\nwriteback_delay = -1.0"),
        &["cache.writeback_delay: -1 is out of range; use 0 to 3600 seconds"],
    );
    config_row(
        "C39",
        &cache("size = \"1GiB\"\nmax_file = \"2GiB\""),
        &[
            "cache.max_file:",
            "must be above zero and at most cache.size",
        ],
    );
    config_row(
        "C40",
        &format!("{T}[mount]\nengine = \"aio\"\n"),
        &["mount.engine: \"aio\" is not one of \"io_uring\", \"psync\""],
    );
    config_row(
        "C41",
        &format!("{T}[placement]\nmin_share = 0.7\n"),
        &["placement.min_share: 0.7 is out of range; use 0 (never pause a slow tier) to 0.5"],
    );
    // Several problems: all reported at once.
    config_row(
        "C30",
        "[[tier]]\nname = \"a b\"\npath = \"rel\"\n[mount]\nthreads = 0\n",
        &["tier[0].name:", "tier[0].path:", "mount.threads:"],
    );
}

#[test]
fn config_file_rows() {
    let d = Dir::new();
    let mnt = d.s("mnt");
    let missing = d.s("nope.toml");
    for args in [
        vec!["check-config", missing.as_str()],
        vec!["mount", "--config", &missing, &mnt],
    ] {
        expect(
            "C31",
            &args.join(" "),
            &tierfs(&args),
            2,
            &[&missing, "No such file or directory"],
        );
    }
    let dir = d.s("a");
    expect(
        "C32",
        "check-config DIR",
        &tierfs(&["check-config", &dir]),
        2,
        &[&dir, "Is a directory"],
    );
    let bin = d.p("latin1.toml");
    std::fs::write(&bin, b"[[tier]]\nname = \"caf\xe9\"\n").unwrap();
    expect(
        "C33",
        "check-config latin1.toml",
        &tierfs(&["check-config", bin.to_str().unwrap()]),
        2,
        &[bin.to_str().unwrap(), "not UTF-8"],
    );
}

// ---------------------------------------------------------------------------------------
// Tier folders: checked by check-config and by mount before anything is mounted.

/// A tier-folder row: `check-config` and `mount` both exit 2 with every needle.
#[track_caller]
fn tier_row(id: &str, d: &Dir, toml: &str, needles: &[&str]) {
    let cfg = d.write(&format!("{id}.toml"), toml);
    expect(
        id,
        "check-config",
        &tierfs(&["check-config", &cfg]),
        2,
        needles,
    );
    let mnt = d.s("mnt");
    expect(
        id,
        "mount",
        &tierfs(&["mount", "--config", &cfg, &mnt]),
        2,
        needles,
    );
    assert!(!tierfs::daemon::is_mountpoint(&d.p("mnt")), "{id}: mounted");
}

#[test]
fn tier_folder_rows() {
    let d = Dir::new();
    let gone = d.s("gone");
    tier_row(
        "T01",
        &d,
        &d.tiers(&[("a", "gone")]),
        &[&format!(
            "tier 'a': folder {gone} does not exist; create it or set `create = true`"
        )],
    );
    assert!(!d.p("gone").exists());
    let orphan = d.s("no-parent/t");
    tier_row(
        "T02",
        &d,
        &format!("{}create = true\n", d.tiers(&[("a", "no-parent/t")])),
        &[
            &format!(
                "tier 'a': the parent folder {} of {orphan}",
                d.s("no-parent")
            ),
            "creates only the last component",
        ],
    );
    assert!(!d.p("no-parent").exists());
    std::fs::write(d.p("file"), b"").unwrap();
    tier_row(
        "T03",
        &d,
        &d.tiers(&[("a", "file")]),
        &[&format!(
            "tier 'a': {} exists but is not a directory",
            d.s("file")
        )],
    );
    std::os::unix::fs::symlink(d.p("a"), d.p("link-to-a")).unwrap();
    tier_row(
        "T05",
        &d,
        &d.tiers(&[("a", "a"), ("b", "link-to-a")]),
        &[
            "tier 'b':",
            &format!(
                "resolves to {}",
                std::fs::canonicalize(d.p("a")).unwrap().display()
            ),
            "same as or nested with tier 'a'",
        ],
    );
    // A good config says what it would do, and creates nothing.
    let cfg = d.write(
        "good.toml",
        &format!("{}create = true\n", d.tiers(&[("a", "a"), ("n", "new")])),
    );
    let o = tierfs(&["check-config", &cfg]);
    expect("good", "check-config", &o, 0, &["will be created", "ok"]);
    assert!(!d.p("new").exists());
}

/// A mountpoint row: `check-config FILE MNT` and `mount --config FILE MNT` both exit 2
/// with every needle, and nothing is mounted (issue #21 bug 6: such a mount hung).
#[track_caller]
fn mountpoint_row(id: &str, d: &Dir, toml: &str, mnt: &Path, needles: &[&str]) {
    let cfg = d.write(&format!("{id}.toml"), toml);
    let m = mnt.to_str().unwrap();
    expect(
        id,
        "check-config",
        &tierfs(&["check-config", &cfg, m]),
        2,
        needles,
    );
    expect(
        id,
        "mount",
        &tierfs(&["mount", "--config", &cfg, m]),
        2,
        needles,
    );
    assert!(!tierfs::daemon::is_mountpoint(mnt), "{id}: mounted");
}

/// Issue #21 bug 6: a mountpoint and a tier folder inside one another made the daemon go
/// through its own mount to reach the tier: the first `cp` hung in D state (a tier inside
/// the mountpoint), the mount command hung (mounting on a tier folder), `ls` hung (a
/// mountpoint inside a tier's `data/`). `check-config` and `mount` accepted all three.
#[test]
fn bug_mountpoint_overlapping_a_tier_is_accepted() {
    let d = Dir::new();
    std::fs::create_dir(d.p("mnt/a")).unwrap();
    let mnt = d.p("mnt");
    mountpoint_row(
        "T08",
        &d,
        &d.tiers(&[("a", "mnt/a"), ("b", "b")]),
        &mnt,
        &[&format!(
            "tier 'a': its folder {} is inside the mountpoint {}",
            d.s("mnt/a"),
            mnt.display()
        )],
    );
    std::os::unix::fs::symlink(d.p("a"), d.p("link-to-a")).unwrap();
    mountpoint_row(
        "T09",
        &d,
        &d.two(),
        &d.p("link-to-a"),
        &[&format!(
            "tier 'a': its folder {} is the mountpoint {}",
            d.s("a"),
            d.s("link-to-a")
        )],
    );
    std::fs::create_dir_all(d.p("b/data/mnt")).unwrap();
    mountpoint_row(
        "T10",
        &d,
        &d.two(),
        &d.p("b/data/mnt"),
        &[&format!(
            "tier 'b': the mountpoint {} is inside its folder {}",
            d.s("b/data/mnt"),
            d.s("b")
        )],
    );
    // Side by side is fine.
    let cfg = d.write("good.toml", &d.two());
    let o = tierfs(&["check-config", &cfg, &d.s("mnt")]);
    expect("good", "check-config with a mountpoint", &o, 0, &["ok"]);
}

/// Runs `f` with a folder that this process cannot write: a read-only tmpfs as root, a
/// 0555 folder otherwise. Returns false (after saying why) where neither can be had.
fn with_read_only_dir(d: &Dir, f: impl FnOnce(&Path)) -> bool {
    let ro = d.p("ro");
    std::fs::create_dir(&ro).unwrap();
    if is_root() {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=1m", "tierfs-ro"])
            .arg(&ro)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIP: cannot mount a read-only tmpfs here");
            return false;
        }
        f(&ro);
        let _ = Command::new("umount").arg(&ro).status();
    } else {
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        f(&ro);
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    true
}

#[test]
fn unwritable_tier_row() {
    let d = Dir::new();
    with_read_only_dir(&d, |ro| {
        let ro_s = ro.to_str().unwrap().to_string();
        tier_row(
            "T04",
            &d,
            &d.tiers(&[("a", "ro")]),
            &[&format!(
                "tier 'a': folder {ro_s} is not writable and searchable by this user"
            )],
        );
        // A folder to be created in it: the parent refuses.
        tier_row(
            "T04",
            &d,
            &format!("{}create = true\n", d.tiers(&[("a", "ro/t")])),
            &["tier 'a':", &format!("{ro_s}/t"), &ro_s],
        );
    });
}

/// Stripes need user xattrs on every tier; a ramfs tier (no user xattrs) is refused with
/// advice. Needs root (to mount ramfs) and FUSE (the check is made by the daemon).
#[test]
fn tier_without_user_xattrs_row() {
    if !fuse_available() {
        return;
    }
    if !is_root() {
        eprintln!("SKIP: T06 needs root to mount a ramfs tier");
        return;
    }
    let d = Dir::new();
    let ok = Command::new("mount")
        .args(["-t", "ramfs", "tierfs-ramfs"])
        .arg(d.p("b"))
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIP: cannot mount a ramfs here");
        return;
    }
    let cfg = d.write(
        "T06.toml",
        &format!("{}[placement]\nlayout = \"stripe\"\n", d.two()),
    );
    let o = tierfs(&["mount", "--config", &cfg, &d.s("mnt")]);
    let mounted = tierfs::daemon::is_mountpoint(&d.p("mnt"));
    if mounted {
        let _ = tierfs(&["unmount", &d.s("mnt")]);
    }
    let _ = Command::new("umount").arg(d.p("b")).status();
    expect(
        "T06",
        "mount",
        &o,
        2,
        &[
            "tier 'b'",
            "does not store user xattrs",
            "layout = \"whole-file\"",
        ],
    );
    assert!(!mounted);
}

// ---------------------------------------------------------------------------------------
// The command line.

#[test]
fn command_line_rows() {
    let d = Dir::new();
    let cfg = d.write("good.toml", &d.two());
    expect(
        "L01",
        "tierfs",
        &tierfs(&[]),
        2,
        &["Usage: tierfs <COMMAND>"],
    );
    expect(
        "L02",
        "tierfs mnt",
        &tierfs(&["mnt"]),
        2,
        &["unrecognized subcommand 'mnt'"],
    );
    expect(
        "L03",
        "mount MNT",
        &tierfs(&["mount", &d.s("mnt")]),
        2,
        &[
            "the following required arguments were not provided",
            "--config <CONFIG>",
        ],
    );
    let nodir = d.s("no-such-dir");
    expect(
        "L04",
        "mount --config good.toml NODIR",
        &tierfs(&["mount", "--config", &cfg, &nodir]),
        2,
        &[&format!(
            "mountpoint {nodir} does not exist; create it with `mkdir -p {nodir}`"
        )],
    );
    std::fs::write(d.p("plain"), b"").unwrap();
    expect(
        "L05",
        "mount --config good.toml FILE",
        &tierfs(&["mount", "--config", &cfg, &d.s("plain")]),
        2,
        &[&format!("mountpoint {} is not a directory", d.s("plain"))],
    );
    expect(
        "L07",
        "unmount DIR",
        &tierfs(&["unmount", &d.s("mnt")]),
        2,
        &[&d.s("mnt"), "not a mount point"],
    );
    // Another file system's mount point is refused before anything is unmounted: a tmpfs of
    // our own where we may mount one, else /proc (which must stay mounted either way).
    let tmpfs = is_root()
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(d.p("mnt"))
            .status()
            .is_ok_and(|s| s.success());
    let (other, kind) = if tmpfs {
        (d.s("mnt"), "tmpfs")
    } else {
        ("/proc".to_string(), "proc")
    };
    expect(
        "L18",
        "unmount of another file system",
        &tierfs(&["unmount", &other]),
        2,
        &[&format!(
            "{other} is a {kind} mount, not tierfs; unmount it with umount"
        )],
    );
    assert!(
        tierfs::daemon::is_mountpoint(Path::new(&other)),
        "L18: {other} was unmounted"
    );
    if tmpfs {
        assert!(Command::new("umount")
            .arg(d.p("mnt"))
            .status()
            .unwrap()
            .success());
    }
    expect(
        "L08",
        "stat DIR",
        &tierfs(&["stat", &d.s("mnt")]),
        1,
        &[&format!("(is {} a tierfs mount?)", d.s("mnt"))],
    );
    expect(
        "L09",
        "probe",
        &tierfs(&["probe"]),
        2,
        &["give directories to probe, or --config FILE"],
    );
    expect(
        "L10",
        "probe --size lots DIR",
        &tierfs(&["probe", "--size", "lots", &d.s("a")]),
        2,
        &["--size: bad size \"lots\""],
    );
    expect(
        "L11",
        "probe FILE",
        &tierfs(&["probe", &d.s("plain")]),
        2,
        &[&format!("{} is not a directory", d.s("plain"))],
    );
    expect(
        "L12",
        "stat --watch 0",
        &tierfs(&["stat", &d.s("mnt"), "--watch", "0"]),
        2,
        &["\"0\" is not a number of seconds above 0"],
    );
    expect(
        "L13",
        "ds-config --ranks 0",
        &tierfs(&["ds-config", &d.s("mnt"), "--ranks", "0"]),
        2,
        &["invalid value '0' for '--ranks <N>'"],
    );
    std::fs::write(d.p("notes.txt"), b"hello\n").unwrap();
    expect(
        "L14",
        "plot notes.txt",
        &tierfs(&["plot", &d.s("notes.txt"), "--out", &d.s("x.png")]),
        2,
        &[&d.s("notes.txt")],
    );
    assert!(!d.p("x.png").exists());
    expect(
        "L15",
        "export --config good.toml TIER",
        &tierfs(&["export", "--config", &cfg, &d.s("a")]),
        2,
        &["overlap; export to a folder outside every tier"],
    );
    std::fs::create_dir(d.p("full")).unwrap();
    std::fs::write(d.p("full/x"), b"").unwrap();
    expect(
        "L17",
        "export --config good.toml NONEMPTY",
        &tierfs(&["export", "--config", &cfg, &d.s("full")]),
        2,
        &[&format!("{} is not empty", d.s("full")), "--force"],
    );
}

/// Rows that need a live mount: a mounted mountpoint, tiers in use.
#[test]
fn command_line_rows_with_a_mount() {
    if !fuse_available() {
        return;
    }
    let s = Setup::two("whole-file");
    let m = s.mount();
    let other = Setup::two("whole-file");
    let cfg = other.write_config();
    let mp = s.mountpoint();
    expect(
        "L06",
        "mount on a mount",
        &tierfs(&[
            "mount",
            "--config",
            cfg.to_str().unwrap(),
            mp.to_str().unwrap(),
        ]),
        1,
        &[&format!(
            "{} is already a mount point; unmount it first",
            mp.display()
        )],
    );
    expect(
        "T07",
        "mount of tiers in use",
        &tierfs(&[
            "mount",
            "--config",
            s.config_path().to_str().unwrap(),
            other.mountpoint().to_str().unwrap(),
        ]),
        1,
        &[
            &format!(
                "is in use by another tierfs daemon (pid {} on this host, mounted at {})",
                m.daemon_pid(),
                mp.display()
            ),
            "unmount that mount first",
        ],
    );
    expect(
        "L16",
        "fsck of mounted tiers",
        &tierfs(&["fsck", "--config", s.config_path().to_str().unwrap()]),
        1,
        &["is in use by a tierfs daemon"],
    );
    m.unmount();

    // A tier whose lock file names a daemon on another host (a node of the cluster that
    // shares the file system): this host cannot tell whether it runs, so it is refused,
    // naming host and pid, unless --break-lock.
    let held = Setup::two("whole-file");
    let meta = held.tier_path(1).join(".tierfs-meta");
    std::fs::create_dir_all(&meta).unwrap();
    let record = "tierfs tier lock v1\nhost node0042\npid 4242\nboot b\nstart 1\nwhat mount\n\
                  scratch no\nmountpoint /local/tierfs\n";
    std::fs::write(meta.join("lock"), record).unwrap();
    let hcfg = held.write_config();
    let hmp = held.mountpoint();
    expect(
        "T11",
        "mount of a tier another host holds",
        &tierfs(&[
            "mount",
            "--config",
            hcfg.to_str().unwrap(),
            hmp.to_str().unwrap(),
        ]),
        1,
        &[
            &format!(
                "tier 'slow': lock {}/lock: tier folder {} is in use by another tierfs daemon \
                 (pid 4242 on host node0042, mounted at /local/tierfs); this host cannot check \
                 whether it still runs",
                meta.display(),
                held.tier_path(1).display()
            ),
            "mount with --break-lock",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(meta.join("lock")).unwrap(),
        record,
        "T11: a refused mount changes nobody's lock"
    );
    assert!(!tierfs::daemon::is_mountpoint(&hmp), "T11: mounted");
    let o = held.mount_output(&["--break-lock"]);
    assert!(o.status.success(), "T11: --break-lock: {}", text(&o));
    let broken = held.adopt();
    let log = std::fs::read_to_string(held.log_path()).unwrap_or_default();
    assert!(
        log.contains("broke the lock of pid 4242 on host node0042"),
        "T11: the log says whose lock was broken:\n{log}"
    );
    broken.unmount();
    assert!(
        !meta.join("lock").exists(),
        "T11: the lock is released at unmount"
    );
}

// ---------------------------------------------------------------------------------------
// Operations through a mount.

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => errno(&e),
    }
}

#[track_caller]
fn op_row(id: &str, what: &str, got: i32, want: &[i32]) {
    assert!(
        want.contains(&got),
        "{id}: {what}: errno {got} ({}), want one of {want:?}",
        std::io::Error::from_raw_os_error(got)
    );
}

fn mknod(p: &Path, mode: u32) -> i32 {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mknod(c.as_ptr(), mode, libc::makedev(1, 3)) } == 0 {
        0
    } else {
        errno(&std::io::Error::last_os_error())
    }
}

fn ioctl_getflags(f: &std::fs::File) -> i32 {
    use std::os::fd::AsRawFd;
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one long into `flags`.
    if unsafe { libc::ioctl(f.as_raw_fd(), 0x8008_6601u64 as _, &mut flags) } == 0 {
        0
    } else {
        errno(&std::io::Error::last_os_error())
    }
}

#[test]
fn operation_rows() {
    if !fuse_available() {
        return;
    }
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let f = m.path("f");
        std::fs::write(&f, pattern(5000, 1)).unwrap();
        op_row(
            "O01",
            "link",
            errno_of(std::fs::hard_link(&f, m.path("g"))),
            &[libc::EPERM],
        );
        if is_root() {
            op_row(
                "O02",
                "mknod chr",
                mknod(&m.path("c"), libc::S_IFCHR | 0o600),
                &[libc::EPERM],
            );
            op_row(
                "O02",
                "mknod blk",
                mknod(&m.path("b"), libc::S_IFBLK | 0o600),
                &[libc::EPERM],
            );
        }
        let h = open_flags(&f, libc::O_RDWR, 0).unwrap();
        for (mode, name) in [
            (libc::FALLOC_FL_ZERO_RANGE, "ZERO_RANGE"),
            (libc::FALLOC_FL_COLLAPSE_RANGE, "COLLAPSE_RANGE"),
            (libc::FALLOC_FL_INSERT_RANGE, "INSERT_RANGE"),
        ] {
            op_row(
                "O03",
                &format!("fallocate {name}"),
                errno_of(fallocate(&h, mode, 0, 4096)),
                &[libc::EOPNOTSUPP],
            );
        }
        op_row(
            "O04",
            "fallocate PUNCH_HOLE without KEEP_SIZE",
            errno_of(fallocate(&h, libc::FALLOC_FL_PUNCH_HOLE, 0, 4096)),
            &[libc::EOPNOTSUPP],
        );
        // What was refused changed nothing.
        assert_eq!(std::fs::read(&f).unwrap(), pattern(5000, 1));
        let stats = m.path(".tierfs/stats.json");
        for flags in [libc::O_WRONLY, libc::O_RDWR, libc::O_WRONLY | libc::O_TRUNC] {
            op_row(
                "O05",
                &format!("open .tierfs/stats.json flags {flags:#o}"),
                errno_of(open_flags(&stats, flags, 0)),
                &[libc::EACCES],
            );
        }
        op_row(
            "O06",
            "create in .tierfs",
            errno_of(std::fs::write(m.path(".tierfs/new"), b"x")),
            &[libc::EACCES],
        );
        op_row(
            "O06",
            "mkdir in .tierfs",
            errno_of(std::fs::create_dir(m.path(".tierfs/d"))),
            &[libc::EACCES],
        );
        op_row(
            "O07",
            "unlink .tierfs/stats.json",
            errno_of(std::fs::remove_file(&stats)),
            &[libc::EACCES],
        );
        op_row(
            "O07",
            "rename .tierfs/stats.json",
            errno_of(std::fs::rename(&stats, m.path("stolen"))),
            &[libc::EACCES],
        );
        op_row(
            "O07",
            "chmod .tierfs/stats.json",
            errno_of(std::fs::set_permissions(
                &stats,
                std::fs::Permissions::from_mode(0o666),
            )),
            &[libc::EACCES],
        );
        op_row(
            "O07",
            "rmdir .tierfs",
            errno_of(std::fs::remove_dir(m.path(".tierfs"))),
            &[libc::EACCES],
        );
        op_row(
            "O08",
            "setxattr on .tierfs/stats.json",
            errno_of(set_xattr(&stats, "user.x", b"1")),
            &[libc::EACCES],
        );
        op_row(
            "O08",
            "removexattr on .tierfs/stats.json",
            errno_of(remove_xattr(&stats, "user.x")),
            &[libc::EACCES],
        );
        op_row(
            "O09",
            "create .tierfs-tmp-x",
            errno_of(std::fs::write(m.path(".tierfs-tmp-x"), b"x")),
            &[libc::EPERM],
        );
        op_row(
            "O09",
            "mkdir .tierfs-tmp-d",
            errno_of(std::fs::create_dir(m.path(".tierfs-tmp-d"))),
            &[libc::EPERM],
        );
        op_row(
            "O10",
            "create a 256-byte name",
            errno_of(std::fs::write(m.path(&"n".repeat(256)), b"x")),
            &[libc::ENAMETOOLONG],
        );
        std::fs::write(m.path("g2"), b"g").unwrap();
        op_row(
            "O11",
            "renameat2 RENAME_EXCHANGE",
            errno_of(rename2(&f, &m.path("g2"), libc::RENAME_EXCHANGE)),
            &[libc::EINVAL],
        );
        op_row(
            "O11",
            "renameat2 RENAME_WHITEOUT",
            errno_of(rename2(&f, &m.path("g3"), libc::RENAME_WHITEOUT)),
            &[libc::EINVAL],
        );
        assert_eq!(std::fs::read(m.path("g2")).unwrap(), b"g");
        if is_root() {
            op_row(
                "O12",
                "setxattr trusted.x",
                errno_of(set_xattr(&f, "trusted.x", b"1")),
                &[libc::EOPNOTSUPP],
            );
        }
        op_row(
            "O13",
            "setxattr user.tierfs.layout",
            errno_of(set_xattr(&f, "user.tierfs.layout", b"evil")),
            &[libc::EPERM],
        );
        std::os::unix::fs::symlink("f", m.path("ln")).unwrap();
        let cp = std::ffi::CString::new(m.path("ln").to_str().unwrap()).unwrap();
        // SAFETY: valid NUL-terminated strings and a one-byte buffer.
        let r =
            unsafe { libc::lsetxattr(cp.as_ptr(), c"user.x".as_ptr(), c"1".as_ptr().cast(), 1, 0) };
        op_row(
            "O14",
            "lsetxattr user.x on a symlink",
            if r == 0 {
                0
            } else {
                errno(&std::io::Error::last_os_error())
            },
            &[libc::EPERM],
        );
        op_row(
            "O15",
            "ioctl FS_IOC_GETFLAGS",
            ioctl_getflags(&h),
            &[libc::ENOTTY],
        );
        op_row(
            "O16",
            "write through an O_RDONLY descriptor",
            errno_of(
                open_flags(&f, libc::O_RDONLY, 0)
                    .unwrap()
                    .write_at_all(b"x", 0),
            ),
            &[libc::EBADF],
        );
        let control = m.path(".tierfs/control");
        for bad in [
            "frobnicate\n",
            "step\norder sideways\n",
            "drop ../../etc/passwd\n",
        ] {
            op_row(
                "O17",
                "a bad control line",
                errno_of(std::fs::write(&control, bad)),
                &[libc::EINVAL],
            );
        }
        op_row(
            "O18",
            "a control path that does not exist",
            errno_of(std::fs::write(&control, "prefetch nothing-here\n")),
            &[libc::ENOENT],
        );
        op_row(
            "O19",
            "read .tierfs/control",
            errno_of(std::fs::read(&control)),
            &[libc::EACCES],
        );
        assert_eq!(std::fs::read(&f).unwrap(), pattern(5000, 1));
        drop(h);
        m.unmount();
    }
}

trait WriteAll {
    fn write_at_all(&self, buf: &[u8], off: u64) -> std::io::Result<()>;
}

impl WriteAll for std::fs::File {
    fn write_at_all(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, off)
    }
}

// ---------------------------------------------------------------------------------------

/// The ids in docs/ERRORS.md's tables and the ids this file checks are the same set.
#[test]
fn every_row_of_errors_md_is_tested() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/ERRORS.md")).unwrap();
    let src = std::fs::read_to_string(root.join("tests/bad_input.rs")).unwrap();
    let is_id = |s: &str| {
        s.len() == 3
            && matches!(s.as_bytes()[0], b'C' | b'L' | b'T' | b'O')
            && s[1..].bytes().all(|b| b.is_ascii_digit())
    };
    let mut in_doc: Vec<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(' ').next())
        .filter(|s| is_id(s))
        .map(String::from)
        .collect();
    in_doc.sort();
    let before = in_doc.len();
    in_doc.dedup();
    assert_eq!(
        before,
        in_doc.len(),
        "an id appears twice in docs/ERRORS.md"
    );
    let mut in_src: Vec<String> = src
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| is_id(s))
        .map(String::from)
        .collect();
    in_src.sort();
    in_src.dedup();
    assert_eq!(
        in_doc, in_src,
        "docs/ERRORS.md rows (left) and the rows tests/bad_input.rs checks (right) differ"
    );
}
