//! A tier missing at mount time (the PFS not mounted on this node: the tier folder's parent
//! is gone). Without `--degraded` the mount is refused with the reason; with it (or
//! `[mount] degraded = true`) tierfs mounts without the tier: listing and stat work, files
//! with pieces on it answer EIO, new data goes to the other tier, the stats show the tier
//! as missing and the log warns. Once the tier is back, a normal mount sees every byte.
//! Needs /dev/fuse; says SKIP otherwise.
mod common;
use common::*;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn fast(&self) -> PathBuf {
        self.dir.path().join("nvme/tier")
    }
    /// The slow tier sits in its own "file system" folder, `pfs/`, which the test
    /// takes away (renames) to make the tier missing.
    fn pfs(&self) -> PathBuf {
        self.dir.path().join("pfs")
    }
    fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }
    fn log(&self) -> PathBuf {
        self.dir.path().join("daemon.log")
    }
    fn config(&self, degraded: bool) -> PathBuf {
        let p = self.dir.path().join(format!("c-{degraded}.toml"));
        std::fs::write(
            &p,
            format!(
                "[[tier]]\nname = \"fast\"\npath = \"{}\"\ncreate = true\nwrite_bandwidth = \"2GB/s\"\n\
                 [[tier]]\nname = \"slow\"\npath = \"{}/tier\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
                 [placement]\nlayout = \"stripe\"\nstripe_unit = \"1MiB\"\n\
                 [mount]\nlog_file = \"{}\"\n{}[cache]\nsize = \"off\"\n",
                self.fast().display(),
                self.pfs().display(),
                self.log().display(),
                if degraded { "degraded = true\n" } else { "" }
            ),
        )
        .unwrap();
        p
    }
    fn mount(&self, config: &Path, extra: &[&str]) -> Output {
        Command::new(tierfs_bin())
            .arg("mount")
            .args(extra)
            .arg("--config")
            .arg(config)
            .arg(self.mnt())
            .output()
            .unwrap()
    }
    fn unmount(&self) {
        let out = Command::new(tierfs_bin())
            .arg("unmount")
            .arg(self.mnt())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fn stats(&self) -> serde_json::Value {
        serde_json::from_str(
            &std::fs::read_to_string(self.mnt().join(".tierfs/stats.json")).unwrap(),
        )
        .unwrap()
    }
}

/// Unmounts on drop (also when an assertion fails).
struct Guard(PathBuf);

impl Drop for Guard {
    fn drop(&mut self) {
        if Command::new("mountpoint")
            .arg("-q")
            .arg(&self.0)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
        {
            let _ = Command::new(tierfs_bin())
                .arg("unmount")
                .arg(&self.0)
                .output();
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

fn assert_eio<T: std::fmt::Debug>(r: std::io::Result<T>, what: &str) {
    match r {
        Err(e) => assert_eq!(errno(&e), libc::EIO, "{what}: want EIO, got {e}"),
        Ok(v) => panic!("{what}: want EIO, got Ok({v:?})"),
    }
}

#[test]
fn degraded_mount_without_a_missing_tier() {
    require!(fuse());
    let env = Env {
        dir: tempfile::Builder::new()
            .prefix("tierfs-degraded-")
            .tempdir()
            .unwrap(),
    };
    std::fs::create_dir_all(env.dir.path().join("nvme")).unwrap();
    std::fs::create_dir_all(env.pfs()).unwrap();
    std::fs::create_dir_all(env.mnt()).unwrap();
    let _guard = Guard(env.mnt());

    // Files striped over both tiers, sized so that their last stripe is on the fast tier
    // (so the size stays exact while the slow one is gone).
    let pattern_ =
        tierfs::policy::placement::stripe_pattern(&[2.0 / 3.0, 1.0 / 3.0], &[true, true]);
    let last_fast = (0..pattern_.len())
        .rev()
        .find(|i| pattern_[*i] == 0)
        .unwrap();
    let first_slow = pattern_.iter().position(|t| *t == 1).unwrap();
    let size = (pattern_.len() + last_fast) * MIB + 5000;
    let out = env.mount(&env.config(false), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut content = Vec::new();
    std::fs::create_dir(env.mnt().join("d")).unwrap();
    for i in 0..2u64 {
        let d = pattern(size, i);
        write_ds(&env.mnt().join(format!("d/s{i}")), &d, 2, 0);
        content.push(d);
    }
    env.unmount();
    assert!(env.pfs().join("tier/data/d/s0").exists());

    // The PFS goes away.
    let away = env.dir.path().join("pfs.away");
    std::fs::rename(env.pfs(), &away).unwrap();

    // A plain mount is refused and says why and what to do.
    let out = env.mount(&env.config(false), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("tier 'slow'") && err.contains("does not exist"),
        "{err}"
    );

    // --degraded mounts without it, with a warning.
    let out = env.mount(&env.config(false), &["--degraded"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("WARNING") && err.contains("tier 'slow' is missing"),
        "{err}"
    );
    assert!(
        !env.pfs().exists(),
        "the degraded mount created the missing tier's folder"
    );

    // Listing and stat work; the data answers EIO, never zeros.
    let d = env.mnt().join("d");
    assert!(listed(&d, "s0") && listed(&d, "s1"));
    for i in 0..2 {
        let p = d.join(format!("s{i}"));
        assert_eq!(std::fs::metadata(&p).unwrap().len(), size as u64, "s{i}");
        assert_eio(std::fs::read(&p), &format!("read of s{i}"));
        let f = open_flags(&p, libc::O_RDONLY | libc::O_DIRECT, 0).unwrap();
        let mut buf = aligned(&vec![0u8; size.div_ceil(4096) * 4096]);
        assert_eio(f.read_at(&mut buf, 0), &format!("O_DIRECT read of s{i}"));
        // A write to a stripe on the missing tier. (A write spanning several stripes
        // that fails may have written those on the present tier, like any failed write.)
        let f = open_flags(&p, libc::O_WRONLY | libc::O_DIRECT, 0).unwrap();
        let data = aligned(&pattern(MIB, 9));
        let off = (first_slow * MIB) as u64;
        assert_eio(f.write_at(&data, off), &format!("O_DIRECT write of s{i}"));
    }
    assert_eio(
        std::fs::rename(d.join("s0"), d.join("s0.renamed")),
        "rename of s0",
    );
    assert!(listed(&d, "s0"));

    // New data goes to the fast tier.
    std::fs::create_dir(env.mnt().join("new")).unwrap();
    let fresh = pattern(5 * MIB + 100, 42);
    write_ds(&env.mnt().join("new/f"), &fresh, 2, 0);
    assert!(read_direct_threads(&env.mnt().join("new/f"), 2) == fresh);

    // The stats and the log say so.
    let st = env.stats();
    assert_eq!(st["tiers"][1]["state"], "missing", "{}", st["tiers"][1]);
    assert_eq!(st["tiers"][1]["healthy"], false);
    assert_eq!(st["tiers"][0]["state"], "ok");
    let f = st["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/new/f")
        .unwrap()
        .clone();
    assert_eq!(f["tiers"], serde_json::json!(["fast"]), "{f}");
    let tiers = std::fs::read_to_string(env.mnt().join(".tierfs/tiers")).unwrap();
    assert!(tiers.contains("MISSING"), "{tiers}");
    let log = std::fs::read_to_string(env.log()).unwrap();
    assert!(
        log.contains("WARN") && log.contains("tier 'slow' is missing"),
        "{log}"
    );
    env.unmount();

    // `[mount] degraded = true` does the same without the flag.
    let out = env.mount(&env.config(true), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(env.stats()["tiers"][1]["state"], "missing");
    assert!(std::fs::read_to_string(env.mnt().join(".tierfs/config"))
        .unwrap()
        .contains("degraded = true"));
    env.unmount();

    // The PFS is back: a normal mount has every byte, old and new.
    std::fs::rename(&away, env.pfs()).unwrap();
    let out = env.mount(&env.config(false), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (i, c) in content.iter().enumerate() {
        assert!(
            &read_direct_threads(&env.mnt().join(format!("d/s{i}")), 2) == c,
            "s{i} differs after the tier came back"
        );
    }
    assert!(read_direct_threads(&env.mnt().join("new/f"), 2) == fresh);
    assert_eq!(env.stats()["tiers"][1]["state"], "ok");
    env.unmount();
}

/// Issue #21 bug 1: in a degraded mount, renaming a folder that holds a striped file moved
/// its pieces on the present tiers only; with the tier back the file was two half-files
/// (`dir/c` and `dir2/c`), each reading zeros where the other held the bytes, and fsck said
/// clean. A rename that needs the missing tier must answer EIO, as the file case does.
#[test]
fn bug_folder_rename_in_a_degraded_mount_splits_striped_files() {
    require!(fuse());
    let env = Env {
        dir: tempfile::Builder::new()
            .prefix("tierfs-degraded-rename-")
            .tempdir()
            .unwrap(),
    };
    std::fs::create_dir_all(env.dir.path().join("nvme")).unwrap();
    std::fs::create_dir_all(env.pfs()).unwrap();
    std::fs::create_dir_all(env.mnt()).unwrap();
    let _guard = Guard(env.mnt());
    let out = env.mount(&env.config(false), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = pattern(5_000_000, 21);
    std::fs::create_dir(env.mnt().join("dir")).unwrap();
    std::fs::write(env.mnt().join("dir/c"), &data).unwrap();
    env.unmount();
    assert!(
        env.pfs().join("tier/data/dir/c").exists(),
        "c is not striped"
    );

    let away = env.dir.path().join("pfs.away");
    std::fs::rename(env.pfs(), &away).unwrap();
    let out = env.mount(&env.config(false), &["--degraded"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eio(
        std::fs::rename(env.mnt().join("dir/c"), env.mnt().join("dir/c2")),
        "rename of the striped file",
    );
    assert_eio(
        std::fs::rename(env.mnt().join("dir"), env.mnt().join("dir2")),
        "rename of the folder holding it",
    );
    // A folder renamed over an old (empty) one would remove the old one on the present
    // tiers only: refused too.
    std::fs::create_dir(env.mnt().join("fresh")).unwrap();
    std::fs::write(env.mnt().join("fresh/x"), b"made while degraded").unwrap();
    assert_eio(
        std::fs::rename(env.mnt().join("dir"), env.mnt().join("fresh2")),
        "rename of an old folder to a new name",
    );
    // A folder made while the tier is missing has no copy there: it may move.
    std::fs::rename(env.mnt().join("fresh"), env.mnt().join("fresh2")).unwrap();
    assert!(listed(&env.mnt(), "dir") && !listed(&env.mnt(), "dir2"));
    env.unmount();

    std::fs::rename(&away, env.pfs()).unwrap();
    let out = env.mount(&env.config(false), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !env.mnt().join("dir2").exists(),
        "the folder was split in two"
    );
    assert!(
        std::fs::read(env.mnt().join("dir/c")).unwrap() == data,
        "dir/c lost bytes"
    );
    assert_eq!(
        std::fs::read(env.mnt().join("fresh2/x")).unwrap(),
        b"made while degraded"
    );
    env.unmount();
    let o = Command::new(tierfs_bin())
        .args(["fsck", "--config"])
        .arg(env.config(false))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "fsck: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn new_env(prefix: &str) -> (Env, Guard) {
    let env = Env {
        dir: tempfile::Builder::new().prefix(prefix).tempdir().unwrap(),
    };
    std::fs::create_dir_all(env.dir.path().join("nvme")).unwrap();
    std::fs::create_dir_all(env.pfs()).unwrap();
    std::fs::create_dir_all(env.mnt()).unwrap();
    let guard = Guard(env.mnt());
    (env, guard)
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Issue 38, point 3: the PFS not mounted while its folder exists (here: an empty folder in
/// place of the slow tier's). The mount took it for a new tier and exited 0 saying nothing;
/// every stripe there read as zeros, and a file rewritten through that mount alternated new
/// and old pieces once the real folder was back. Now the mount is refused naming the folder
/// and the fix, `--degraded` leaves the tier out (EIO, never zeros) without writing into
/// the blank folder, and with the real folder back every byte is there.
#[test]
fn a_blank_folder_standing_in_for_a_tier_is_refused() {
    require!(fuse());
    let (env, _guard) = new_env("tierfs-blank-tier-");
    assert!(env.mount(&env.config(false), &[]).status.success());
    let mut content = Vec::new();
    for i in 0..3u64 {
        let d = pattern(5 * MIB + 3000, 30 + i);
        std::fs::write(env.mnt().join(format!("f{i}")), &d).unwrap();
        content.push(d);
    }
    env.unmount();
    let tier = env.pfs().join("tier");
    assert!(tier.join("data/f0").exists(), "f0 is not striped");
    let away = env.dir.path().join("tier.away");
    std::fs::rename(&tier, &away).unwrap();
    std::fs::create_dir(&tier).unwrap();

    let check = Command::new(tierfs_bin())
        .arg("check-config")
        .arg(env.config(false))
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(2), "{}", stderr_of(&check));
    assert!(
        stderr_of(&check).contains("is not a tierfs tier"),
        "{}",
        stderr_of(&check)
    );

    let out = env.mount(&env.config(false), &[]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for want in [
        "tier 'slow'",
        &format!("{} is not a tierfs tier", tier.display()),
        "is its file system mounted",
        "--degraded",
    ] {
        assert!(err.contains(want), "missing {want:?} in: {err}");
    }
    assert_eq!(
        std::fs::read_dir(&tier).unwrap().count(),
        0,
        "the blank folder was written"
    );

    let out = env.mount(&env.config(false), &["--degraded"]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("WARNING") && err.contains("tier 'slow'"),
        "{err}"
    );
    for i in 0..3 {
        assert_eio(
            std::fs::read(env.mnt().join(format!("f{i}"))),
            &format!("read of f{i}"),
        );
    }
    let fresh = pattern(3 * MIB, 77);
    std::fs::write(env.mnt().join("new"), &fresh).unwrap();
    env.unmount();
    assert_eq!(
        std::fs::read_dir(&tier).unwrap().count(),
        0,
        "the blank folder was written"
    );

    std::fs::remove_dir(&tier).unwrap();
    std::fs::rename(&away, &tier).unwrap();
    assert!(env.mount(&env.config(false), &[]).status.success());
    for (i, c) in content.iter().enumerate() {
        assert!(
            &std::fs::read(env.mnt().join(format!("f{i}"))).unwrap() == c,
            "f{i} differs with the tier back"
        );
    }
    assert!(std::fs::read(env.mnt().join("new")).unwrap() == fresh);
    env.unmount();
}

/// Issue 38, point 3: a tier folder of another tierfs (another pool), or this tierfs's
/// tiers with their paths swapped, are refused: their stripes would be read as this pool's.
#[test]
fn a_tier_of_another_tierfs_or_swapped_paths_are_refused() {
    require!(fuse());
    let (env, _guard) = new_env("tierfs-foreign-tier-");
    assert!(env.mount(&env.config(false), &[]).status.success());
    std::fs::write(env.mnt().join("a"), pattern(4 * MIB, 1)).unwrap();
    env.unmount();
    // Another pool: the same config shape over other folders.
    let other = env.dir.path().join("other");
    std::fs::create_dir_all(other.join("pfs")).unwrap();
    let text = std::fs::read_to_string(env.config(false)).unwrap();
    let mine = text
        .replace(
            &env.fast().display().to_string(),
            &other.join("fast").display().to_string(),
        )
        .replace(
            &env.pfs().display().to_string(),
            &other.join("pfs").display().to_string(),
        );
    let other_cfg = env.dir.path().join("other.toml");
    std::fs::write(&other_cfg, &mine).unwrap();
    assert!(env.mount(&other_cfg, &[]).status.success());
    env.unmount();
    // This config's slow tier pointed at the other pool's.
    let mixed = text.replace(
        &format!("{}/tier", env.pfs().display()),
        &other.join("pfs/tier").display().to_string(),
    );
    let mixed_cfg = env.dir.path().join("mixed.toml");
    std::fs::write(&mixed_cfg, mixed).unwrap();
    let out = env.mount(&mixed_cfg, &[]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("tier 'slow'") && err.contains("a tier of another tierfs"),
        "{err}"
    );
    // Swapped: the fast tier's path given to the slow tier and the other way round.
    let swapped = text
        .replace(&env.fast().display().to_string(), "@FAST@")
        .replace(
            &format!("{}/tier", env.pfs().display()),
            &env.fast().display().to_string(),
        )
        .replace("@FAST@", &format!("{}/tier", env.pfs().display()));
    let swapped_cfg = env.dir.path().join("swapped.toml");
    std::fs::write(&swapped_cfg, swapped).unwrap();
    let out = env.mount(&swapped_cfg, &[]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("swapped or out of order"), "{err}");
    // The right config still mounts, and the file is whole.
    assert!(env.mount(&env.config(false), &[]).status.success());
    assert!(std::fs::read(env.mnt().join("a")).unwrap() == pattern(4 * MIB, 1));
    env.unmount();
}
