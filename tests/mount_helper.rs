//! The mount helper as mount(8) uses it: the binary called as `mount.fuse.tierfs CONFIG
//! MOUNTPOINT -o OPTIONS` (by a symlink, as /sbin/mount.fuse.tierfs would be), as `tierfs
//! CONFIG MOUNTPOINT -o OPTIONS` (what fuse3's mount.fuse runs), and through mount(8) itself:
//! `mount -t fuse.tierfs` and an fstab line (`mount -T FSTAB`), by both helper routes.
//! Each mount is checked in /proc/self/mountinfo (type fuse.tierfs, allow_other when asked)
//! and by writing and reading a file through it. An fstab line may also name no config file
//! (the source `tierfs`) and give the tiers as options.
mod common;
use common::*;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The mountinfo line of the mount at `mp`, if there is one.
fn mountinfo(mp: &Path) -> Option<String> {
    let mp = std::fs::canonicalize(mp).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .find(|l| l.split(' ').nth(4) == Some(mp.to_str().unwrap()))
        .map(str::to_string)
}

/// A symlink named `mount.fuse.tierfs` to the binary under test, as an admin installs it.
fn helper_link(s: &Setup) -> PathBuf {
    let bin = s.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("mount.fuse.tierfs");
    if !link.exists() {
        std::os::unix::fs::symlink(tierfs_bin(), &link).unwrap();
        std::os::unix::fs::symlink(tierfs_bin(), bin.join("tierfs")).unwrap();
    }
    link
}

/// Checks the mount at `s`'s mountpoint is tierfs's, with allow_other as asked, and that a
/// file goes through it.
fn check_mount(m: &Mount, allow_other: bool, name: &str) {
    let line = mountinfo(&m.root()).expect("nothing mounted at the mountpoint");
    let (_, fs) = line.split_once(" - ").unwrap();
    // Type and source as mount(8) and an fstab line name them (mount -a compares sources).
    let cfg = m.setup.config_path();
    assert!(
        fs.starts_with(&format!("fuse.tierfs {} ", cfg.display())),
        "{line}"
    );
    assert_eq!(fs.contains("allow_other"), allow_other, "{line}");
    let data = pattern(3 << 20, name.len() as u64);
    std::fs::write(m.path(name), &data).unwrap();
    assert!(std::fs::read(m.path(name)).unwrap() == data);
    assert!(!m.setup.tiers_holding(name).is_empty());
}

/// Waits until the daemon of a mount removed with plain umount has exited (so its tier
/// locks are free for the next mount).
fn wait_daemon_gone(pid: u32) {
    assert!(
        wait_for(30, || !Path::new(&format!("/proc/{pid}")).exists()),
        "daemon {pid} still runs 30 s after umount"
    );
}

#[test]
fn helper_mounts_with_the_options_mount_passes() {
    require!(fuse());
    let s = Setup::two("stripe");
    // The second tier's folder sits under a missing parent (a PFS not mounted): only
    // -o degraded lets the mount go ahead.
    let cfg = s.write_config();
    let missing = s.dir.path().join("pfs-not-mounted/tier");
    let text_cfg = s
        .config_text()
        .replace(s.tier_path(1).to_str().unwrap(), missing.to_str().unwrap());
    std::fs::write(&cfg, text_cfg).unwrap();
    let helper = helper_link(&s);
    // allow_other needs user_allow_other in /etc/fuse.conf for an ordinary user.
    let opts = if is_root() {
        "rw,nosuid,nodev,noexec,relatime,allow_other,degraded,_netdev,nofail"
    } else {
        "rw,nosuid,nodev,noexec,relatime,degraded,_netdev,nofail"
    };
    // Without degraded: refused, and mount(8) is told it was the mount that failed.
    let o = Command::new(&helper)
        .arg(&cfg)
        .arg(s.mountpoint())
        .args(["-o", "rw,nosuid,nodev"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("pfs-not-mounted"), "{}", text(&o));
    assert!(mountinfo(&s.mountpoint()).is_none());

    let o = Command::new(&helper)
        .arg(&cfg)
        .arg(s.mountpoint())
        .args(["-o", opts])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let m = s.adopt();
    let t = text(&o);
    assert!(
        t.contains("note: mount option noexec is not applied"),
        "{t}"
    );
    assert!(t.contains("WARNING: tier 'slow' is missing"), "{t}");
    let st = m.stats_json();
    assert_eq!(st["tiers"][1]["state"], "missing", "{st}");
    check_mount(&m, is_root(), "through-helper.bin");
    m.unmount();
}

#[test]
fn helper_refuses_what_it_cannot_honour_and_fakes_with_f() {
    let s = Setup::two("stripe");
    let cfg = s.write_config();
    let helper = helper_link(&s);
    for (opts, needle) in [
        ("rw,ro", "ro: tierfs has no read-only mount"),
        ("rw,bogus", "bogus: not a tierfs mount option"),
        ("allow_root", "use allow_other"),
    ] {
        let o = Command::new(&helper)
            .arg(&cfg)
            .arg(s.mountpoint())
            .args(["-o", opts])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{opts}: {}", text(&o));
        assert!(text(&o).contains(needle), "{opts}: {}", text(&o));
        // An unknown option gets the list of what the helper takes.
        assert_eq!(
            text(&o).contains("tierfs takes the flags force, reprobe, nonempty, break_lock"),
            opts == "rw,bogus",
            "{}",
            text(&o)
        );
        assert!(mountinfo(&s.mountpoint()).is_none(), "{opts} mounted");
    }
    // -f: the config is checked, nothing is mounted or created.
    let o = Command::new(&helper)
        .arg(&cfg)
        .arg(s.mountpoint())
        .args(["-f", "-o", "allow_other"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "tierfs mount --config {} -o mount.allow_other=true",
            cfg.display()
        )),
        "{}",
        text(&o)
    );
    assert!(mountinfo(&s.mountpoint()).is_none());
    assert!(!s.tier_path(0).exists(), "-f created a tier folder");
    // A config that is not one is a wrong invocation (1), naming the file.
    let bad = s.dir.path().join("bad.toml");
    std::fs::write(&bad, "[tier]\n").unwrap();
    let o = Command::new(&helper)
        .arg(&bad)
        .arg(s.mountpoint())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("bad.toml"), "{}", text(&o));
}

#[test]
fn tierfs_config_mountpoint_form_mounts_as_mount_fuse_runs_it() {
    require!(fuse());
    let s = Setup::two("whole-file");
    let cfg = s.write_config();
    // What mount.fuse3 runs for `-o allow_other` (it adds dev and suid).
    let opts = if is_root() {
        "allow_other,dev,suid"
    } else {
        "dev,suid"
    };
    let o = Command::new(tierfs_bin())
        .arg(&cfg)
        .arg(s.mountpoint())
        .args(["-o", opts])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let m = s.adopt();
    check_mount(&m, is_root(), "form-b.bin");
    m.unmount();
    // A mistyped command is still a mistyped command, not a helper call.
    let o = Command::new(tierfs_bin())
        .args(["mnt", s.mountpoint().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("unrecognized subcommand 'mnt'"),
        "{}",
        text(&o)
    );
}

/// Holds a machine-wide lock while a test owns links in system folders that mount(8)
/// searches (other test runs on this machine may want them too), and removes the links it
/// made.
struct SystemLinks {
    _lock: std::fs::File,
    made: Vec<PathBuf>,
}

const SBIN_HELPER: &str = "/sbin/mount.fuse.tierfs";
/// mount(8) drops PATH before it runs a helper, so fuse3's mount.fuse finds `tierfs` only in
/// /bin/sh's default path.
const LOCAL_BIN: &str = "/usr/local/bin/tierfs";

impl SystemLinks {
    fn lock() -> SystemLinks {
        let f = std::fs::File::create(std::env::temp_dir().join("tierfs-test-sbin-helper.lock"))
            .unwrap();
        // SAFETY: flock on a descriptor we own; it blocks until the lock is ours.
        assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
        SystemLinks {
            _lock: f,
            made: Vec::new(),
        }
    }

    /// A leftover of an earlier test run (a link to some tierfs test binary).
    fn is_test_leftover(p: &Path) -> bool {
        std::fs::read_link(p)
            .map(|t| t.to_string_lossy().contains("/target/") && t.ends_with("tierfs"))
            .unwrap_or(false)
    }

    /// Links `p` to the binary under test; false (and nothing changed) where something
    /// else, e.g. an installed tierfs, is already there.
    fn install(&mut self, p: &str) -> bool {
        let p = Path::new(p);
        if std::fs::symlink_metadata(p).is_ok() {
            if !Self::is_test_leftover(p) {
                return false; // not a skip: the caller decides (require! or assert!)
            }
            std::fs::remove_file(p).unwrap();
        }
        std::os::unix::fs::symlink(tierfs_bin(), p).unwrap();
        self.made.push(p.to_path_buf());
        true
    }

    fn remove(&mut self, p: &str) {
        if let Some(i) = self.made.iter().position(|m| m == Path::new(p)) {
            let _ = std::fs::remove_file(self.made.remove(i));
        }
    }
}

impl Drop for SystemLinks {
    fn drop(&mut self) {
        for p in self.made.drain(..) {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn mount_8_and_fstab_mount_tierfs_by_both_helper_routes() {
    require!(fuse());
    require!(root(
        "mount -t fuse.tierfs through mount(8) needs /sbin and fstab"
    ));
    let s = Setup::two("stripe");
    let cfg = s.write_config();
    let mut links = SystemLinks::lock();
    assert!(
        links.install(SBIN_HELPER),
        "{SBIN_HELPER} exists and is not a test's link; this test needs the place for itself"
    );

    // 1. mount -t fuse.tierfs finds /sbin/mount.fuse.tierfs.
    let o = Command::new("mount")
        .args(["-t", "fuse.tierfs", "-o", "allow_other,nofail"])
        .arg(&cfg)
        .arg(s.mountpoint())
        .output()
        .unwrap();
    assert!(o.status.success(), "mount -t fuse.tierfs: {}", text(&o));
    let m = s.adopt();
    check_mount(&m, true, "mount8.bin");
    let pid = m.daemon_pid();
    m.disarm();
    // Plain umount(8) takes it down; the daemon leaves by itself.
    let o = Command::new("umount").arg(s.mountpoint()).output().unwrap();
    assert!(o.status.success(), "umount: {}", text(&o));
    wait_daemon_gone(pid);

    // 2. An fstab line (an fstab file of the test's own: mount -T), mounted by mount -a;
    //    a second mount -a sees it is mounted and leaves it alone.
    let fstab = s.dir.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# tierfs for DeepSpeed swap\n{} {} fuse.tierfs defaults,_netdev,nofail,x-systemd.requires=local-fs.target 0 0\n",
            cfg.display(),
            s.mountpoint().display()
        ),
    )
    .unwrap();
    for round in 0..2 {
        let o = Command::new("mount")
            .arg("-a")
            .arg("-T")
            .arg(&fstab)
            .output()
            .unwrap();
        assert!(o.status.success(), "mount -a (round {round}): {}", text(&o));
        assert!(!text(&o).contains("already"), "round {round}: {}", text(&o));
    }
    let m = s.adopt();
    check_mount(&m, false, "fstab.bin");
    // The file from the first mount is still there.
    assert_eq!(
        std::fs::metadata(m.path("mount8.bin")).unwrap().len(),
        3 << 20
    );
    m.unmount();

    // 3. Without /sbin/mount.fuse.tierfs, mount(8) runs fuse3's /sbin/mount.fuse, which runs
    //    `tierfs CONFIG MOUNTPOINT -o ...` from the PATH.
    links.remove(SBIN_HELPER);
    require!(
        Path::new("/sbin/mount.fuse").exists(),
        "the mount.fuse route needs fuse3's /sbin/mount.fuse (apt-get install fuse3)"
    );
    require!(
        links.install(LOCAL_BIN),
        "the mount.fuse route: {LOCAL_BIN} is an installed tierfs, not this build"
    );
    let o = Command::new("mount")
        .args(["-t", "fuse.tierfs", "-o", "allow_other"])
        .arg(&cfg)
        .arg(s.mountpoint())
        .output()
        .unwrap();
    assert!(o.status.success(), "mount via mount.fuse: {}", text(&o));
    let m = s.adopt();
    check_mount(&m, true, "mount-fuse3.bin");
    m.unmount();
}

/// Issue 42: an fstab line with no config file: the source `tierfs` and the tiers as options,
/// through the helper called directly (any user) and through mount(8) and `mount -a` (root),
/// which sees on its second run that the line is mounted.
#[test]
fn fstab_line_without_a_config_file() {
    require!(fuse());
    let s = Setup::two("whole-file");
    std::fs::create_dir_all(s.mountpoint()).unwrap();
    let opts = format!(
        "nofail,tier.fast.path={},tier.fast.create=true,tier.fast.write_bandwidth=2GB/s,\
         tier.slow.path={},tier.slow.create=true,tier.slow.write_bandwidth=1GB/s,\
         log_file={},threads=16",
        s.tier_path(0).display(),
        s.tier_path(1).display(),
        s.log_path().display()
    );
    let helper = helper_link(&s);
    let o = Command::new(&helper)
        .arg("tierfs")
        .arg(s.mountpoint())
        .args(["-o", &opts])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let m = s.adopt();
    let line = mountinfo(&m.root()).expect("nothing mounted");
    assert!(line.contains(" - fuse.tierfs tierfs "), "{line}");
    let cfg = std::fs::read_to_string(m.path(".tierfs/config")).unwrap();
    assert!(cfg.lines().any(|l| l == "threads = 16"), "{cfg}");
    std::fs::write(m.path("x.bin"), pattern(1 << 20, 2)).unwrap();
    assert_eq!(s.tiers_holding("x.bin").len(), 1);
    m.unmount();

    require!(root("mount -a with an fstab line needs root"));
    let mut links = SystemLinks::lock();
    assert!(
        links.install(SBIN_HELPER),
        "{SBIN_HELPER} exists and is not a test's link; this test needs the place for itself"
    );
    let fstab = s.dir.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "tierfs {} fuse.tierfs {opts} 0 0\n",
            s.mountpoint().display()
        ),
    )
    .unwrap();
    for round in 0..2 {
        let o = Command::new("mount")
            .arg("-a")
            .arg("-T")
            .arg(&fstab)
            .output()
            .unwrap();
        assert!(o.status.success(), "mount -a (round {round}): {}", text(&o));
        assert!(!text(&o).contains("already"), "round {round}: {}", text(&o));
    }
    let m = s.adopt();
    assert_eq!(
        std::fs::metadata(m.path("x.bin")).unwrap().len(),
        1 << 20,
        "the first mount's file"
    );
    m.unmount();
}

#[test]
fn version_names_the_commit_and_man_lists_every_command() {
    let o = Command::new(tierfs_bin())
        .arg("--version")
        .output()
        .unwrap();
    assert!(o.status.success());
    let v = String::from_utf8_lossy(&o.stdout);
    // Built from a git checkout (CI builds a fresh clone): the commit git has checked out.
    let head = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short=12",
            "HEAD",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(h) => assert!(
            v.starts_with(&format!("tierfs {} (commit {h}", env!("CARGO_PKG_VERSION"))),
            "{v} (HEAD {h})"
        ),
        None => assert!(v.contains("built without git"), "{v}"),
    }
    // The documented install: one page per command, each named in tierfs.1.
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("share/man/man1");
    let o = Command::new(tierfs_bin())
        .args(["man", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let main = std::fs::read_to_string(dir.join("tierfs.1"))
        .unwrap()
        .replace("\\-", "-");
    let help = Command::new(tierfs_bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 12, "{help}");
    for c in &commands {
        assert!(
            main.contains(&format!("tierfs-{c}(1)")),
            "tierfs.1 lacks {c}"
        );
        assert!(
            dir.join(format!("tierfs-{c}.1")).is_file(),
            "no page for {c}"
        );
    }
    // Without --dir the page goes to stdout, the same as the file.
    let o = Command::new(tierfs_bin()).arg("man").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).replace("\\-", "-"), main);
}
