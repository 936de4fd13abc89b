//! What a batch job needs from a mount, without a batch system (tests/slurm_jobs.rs runs
//! the job templates under real Slurm):
//! - root unmounts an ordinary user's mount (a Slurm epilog runs as root): mounts are found
//!   in /proc/self/mountinfo, not by stat, which root cannot do on such a mount;
//! - SIGTERM makes the daemon unmount itself, waiting while a file is still open;
//! - scratch mode: unmount removes the tier folders and the mountpoint, and writes no dirty
//!   cache back;
//! - after a scratch daemon was killed, the next mount on the host removes what it left;
//! - a lock left by a killed daemon is taken over with a log line;
//! - `${NAME}` of the environment in tier paths (`${SLURM_JOB_ID}`).
//!
//! Needs /dev/fuse and root; the user tests also the user `tierfs-test`, fusermount3 and
//! setpriv. Where one is missing the test says SKIP, or fails with TIERFS_REQUIRE_ALL=1 (CI).
mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const USER: &str = "tierfs-test";

/// FUSE and root: these tests kill, signal and unmount other users' daemons.
fn root_with_fuse() -> Result<(), String> {
    fuse()?;
    root("ends other users' daemons and mounts")
}

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

fn alive(pid: u32) -> bool {
    tierfs::tier::lock::start_time(pid).is_some()
}

/// Waits up to 30 s for a process that is not our child to be gone.
fn wait_gone(pid: u32) -> bool {
    wait_for(30, || !alive(pid))
}

fn log_of(s: &Setup) -> String {
    std::fs::read_to_string(s.log_path()).unwrap_or_default()
}

/// A scratch setup: the two tier folders and the mountpoint, `scratch = true`.
fn scratch_setup() -> Setup {
    let mut s = Setup::two("stripe");
    s.extra = "scratch = true\n".into();
    s
}

#[test]
fn root_unmounts_an_ordinary_users_mount() {
    require!(root_with_fuse());
    require!(user(USER));
    require!(tool("fusermount3", "apt-get install fuse3"));
    let (uid, gid) = user_ids(USER).unwrap();
    let s = Setup::two("whole-file");
    s.write_config();
    let bin = s.dir.path().join("tierfs");
    std::fs::copy(tierfs_bin(), &bin).unwrap();
    sh(&format!("chown -R {uid}:{gid} {}", q(s.dir.path())));
    let mp = s.mountpoint();
    let mount_as_user = || {
        let o = as_user(
            USER,
            &format!(
                "{} mount --config {} {}",
                q(&bin),
                q(&s.config_path()),
                q(&mp)
            ),
        );
        assert!(
            o.status.success(),
            "mount as {USER}: {}\n{}",
            text(&o),
            log_of(&s)
        );
        let o = as_user(
            USER,
            &format!(
                "echo data > {m}/f && {b} stat --json {m}",
                m = q(&mp),
                b = q(&bin)
            ),
        );
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["pid"].as_u64().unwrap() as u32
    };

    // Root cannot even stat it: the mount belongs to the user and has no allow_other.
    let pid = mount_as_user();
    let e = std::fs::metadata(&mp).unwrap_err();
    assert_eq!(errno(&e), libc::EACCES, "{e}");
    let o = tierfs(&["unmount", mp.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "root's tierfs unmount of {USER}'s mount: {}",
        text(&o)
    );
    assert!(!tierfs::daemon::is_mountpoint(&mp));
    assert!(
        !alive(pid),
        "tierfs unmount returned before the user's daemon (pid {pid}) exited"
    );
    assert_eq!(
        std::fs::read(s.backing(0, "f"))
            .ok()
            .or_else(|| std::fs::read(s.backing(1, "f")).ok())
            .unwrap(),
        b"data\n"
    );

    // Its daemon killed, the user's mount is dead; root clears it the same way.
    let pid = mount_as_user();
    unsafe_kill(pid, libc::SIGKILL);
    assert!(wait_gone(pid));
    // Root sees it dead (asking as the owner: statfs answers root without the daemon), so
    // `mount --force` would clear it too.
    assert!(wait_for(30, || tierfs::daemon::mountpoint_state(&mp)
        == tierfs::daemon::MountpointState::Dead));
    let o = tierfs(&["unmount", mp.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("cleared the dead mount"), "{}", text(&o));
    assert!(!tierfs::daemon::is_mountpoint(&mp));
}

/// Unmounts what a failed test left mounted.
struct Unmounter(Vec<PathBuf>);

impl Drop for Unmounter {
    fn drop(&mut self) {
        for mp in &self.0 {
            if tierfs::daemon::is_mountpoint(mp) {
                let _ = tierfs(&["unmount", mp.to_str().unwrap()]);
            }
        }
    }
}

fn unsafe_kill(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid and a signal number has no memory effects.
    let r = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(r, 0, "kill {pid}: {}", std::io::Error::last_os_error());
}

/// SIGTERM (what a batch system sends at the end of a job): the daemon unmounts itself,
/// also when a file in the mount is still open at that moment (the job's processes get the
/// same signal and die a moment later), and exits.
#[test]
fn term_makes_the_daemon_unmount_itself_even_while_busy() {
    require!(root_with_fuse());
    let s = Setup::two("whole-file");
    let m = s.mount();
    std::fs::write(m.path("kept"), b"kept").unwrap();
    let pid = m.daemon_pid();
    let mp = s.mountpoint();
    // A process with a file open in the mount, for a little while after the signal.
    let mut holder = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 3<{}; sleep 2", q(&m.path("kept"))))
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    unsafe_kill(pid, libc::SIGTERM);
    let _ = holder.wait();
    assert!(
        wait_gone(pid),
        "the daemon did not exit after SIGTERM:\n{}",
        log_of(&s)
    );
    m.disarm();
    assert!(
        !tierfs::daemon::is_mountpoint(&mp),
        "the mount is still there after SIGTERM:\n{}",
        log_of(&s)
    );
    assert_eq!(
        std::fs::read(s.backing(0, "kept"))
            .ok()
            .or_else(|| std::fs::read(s.backing(1, "kept")).ok())
            .unwrap(),
        b"kept"
    );
    assert!(
        !s.tier_path(0).join(".tierfs-meta/lock").exists(),
        "the lock record is gone with the daemon"
    );
    let log = log_of(&s);
    assert!(log.contains("signal received: unmounting"), "{log}");
}

/// Scratch mode: SIGTERM or `tierfs unmount` leaves nothing: no mount, no tier folders, no
/// mountpoint; what the user put next to a tier's data/ is kept (and with it that folder).
#[test]
fn scratch_mode_removes_the_tier_folders_and_the_mountpoint() {
    require!(root_with_fuse());
    // Ended by SIGTERM, with the daemon in the foreground as a job step runs it.
    let s = scratch_setup();
    let cfg = s.write_config();
    let mp = s.mountpoint();
    let mut child = Command::new(tierfs_bin())
        .args(["mount", "--foreground", "--config"])
        .arg(&cfg)
        .arg(&mp)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for(20, || mp.join(".tierfs/stats.json").exists()),
        "no mount:\n{}",
        log_of(&s)
    );
    for i in 0..4u64 {
        std::fs::write(mp.join(format!("f{i}")), pattern(3 * MIB, i)).unwrap();
    }
    assert!(s.tier_path(1).join("data/f0").exists());
    unsafe_kill(child.id(), libc::SIGTERM);
    let st = child.wait().unwrap();
    assert!(st.success(), "{st}:\n{}", log_of(&s));
    for p in [s.tier_path(0), s.tier_path(1), mp.clone()] {
        assert!(
            !p.exists(),
            "{} is still there:\n{}",
            p.display(),
            log_of(&s)
        );
    }
    let log = log_of(&s);
    assert!(log.contains("scratch: removed tier folder"), "{log}");

    // Ended by `tierfs unmount`; a file of the user's own in a tier folder keeps that folder.
    let s = scratch_setup();
    let m = s.mount();
    std::fs::write(m.path("g"), pattern(MIB, 9)).unwrap();
    std::fs::write(s.tier_path(1).join("mine.txt"), b"mine").unwrap();
    m.unmount();
    assert!(!s.tier_path(0).exists());
    assert!(!s.mountpoint().exists());
    assert_eq!(
        std::fs::read(s.tier_path(1).join("mine.txt")).unwrap(),
        b"mine"
    );
    assert!(!s.tier_path(1).join("data").exists());
    assert!(!s.tier_path(1).join(".tierfs-meta").exists());
    let log = log_of(&s);
    assert!(
        log.contains("it holds files tierfs did not make (mine.txt)"),
        "{log}"
    );

    // --no-scratch keeps the data of a scratch config (a job that asked to keep it).
    let s = scratch_setup();
    let cfg = s.write_config();
    let o = tierfs(&[
        "mount",
        "--no-scratch",
        "--config",
        cfg.to_str().unwrap(),
        s.mountpoint().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let m = s.adopt();
    std::fs::write(m.path("h"), b"h").unwrap();
    m.unmount();
    assert!(s.tier_path(0).join(".tierfs-meta").is_dir());
    assert!(s.mountpoint().is_dir());
    assert!(s.backing(0, "h").exists() || s.backing(1, "h").exists());
}

/// Issue 38, point 2: `--scratch` removed a tier folder whole at unmount, with the files it
/// already held (`data/old.txt` of an earlier, kept mount). A scratch mount now refuses a
/// folder holding anything it did not create (check-config says so too), and keeps a
/// folder that was there before, emptied of what it made.
#[test]
fn scratch_mode_removes_only_what_it_created() {
    require!(root_with_fuse());
    // An earlier mount that kept its data.
    let s = Setup::two("stripe");
    let m = s.mount();
    std::fs::write(m.path("old.txt"), b"keep me").unwrap();
    m.unmount();
    let holder = (0..2)
        .find(|i| s.backing(*i, "old.txt").exists())
        .expect("old.txt on a tier");
    let cfg = s.write_config();
    let o = tierfs(&[
        "mount",
        "--scratch",
        "--config",
        cfg.to_str().unwrap(),
        s.mountpoint().to_str().unwrap(),
    ]);
    let err = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("data/old.txt") && err.contains("cannot take scratch data"),
        "{err}"
    );
    assert!(
        err.contains(&s.tier_path(holder).display().to_string()),
        "{err}"
    );
    assert!(
        !tierfs::daemon::is_mountpoint(&s.mountpoint()),
        "mounted anyway"
    );
    let mut scratch = s.config_text();
    scratch = scratch.replace("[mount]\n", "[mount]\nscratch = true\n");
    assert!(scratch.contains("scratch = true"), "{scratch}");
    let scfg = s.dir.path().join("scratch.toml");
    std::fs::write(&scfg, scratch).unwrap();
    let o = tierfs(&["check-config", scfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("data/old.txt"), "{}", text(&o));
    assert_eq!(
        std::fs::read(s.backing(holder, "old.txt")).unwrap(),
        b"keep me"
    );

    // Folders that were there before, empty: kept, empty, at unmount.
    let s = scratch_setup();
    for i in 0..2 {
        std::fs::create_dir(s.tier_path(i)).unwrap();
    }
    let o = tierfs(&["check-config", s.write_config().to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("the folder kept"), "{}", text(&o));
    let m = s.mount();
    std::fs::write(m.path("f"), pattern(3 * MIB, 4)).unwrap();
    m.unmount();
    for i in 0..2 {
        let left: Vec<_> = std::fs::read_dir(s.tier_path(i))
            .unwrap()
            .flatten()
            .collect();
        assert!(left.is_empty(), "tier {i}: {left:?}");
    }
    assert!(
        log_of(&s).contains("kept: it was there before"),
        "{}",
        log_of(&s)
    );
}

/// Scratch data is not written back at unmount: a dirty file in the host-memory cache
/// never reaches its tier. The piece's inode is kept alive by a hard link outside the tier
/// folder, so what was written to it can be read after the folder is gone; without scratch
/// the same steps show the write-back (the check can see one).
#[test]
fn scratch_unmount_writes_no_dirty_cache_back() {
    require!(root_with_fuse());
    let piece_after_unmount = |scratch: bool| -> u64 {
        let mut s = Setup::new(vec![TierSpec::new("only", "1GB/s")], "whole-file");
        s.extra = format!(
            "passthrough = \"off\"\nscratch = {scratch}\n[cache]\nsize = \"64MiB\"\nwriteback_delay = 3600\n"
        );
        let m = s.mount();
        std::fs::write(m.path("opt.swp"), pattern(4 * MIB, 3)).unwrap();
        let piece = s.backing(0, "opt.swp");
        let link = s.dir.path().join("piece-link");
        std::fs::hard_link(&piece, &link).unwrap();
        assert_eq!(
            std::fs::metadata(&link).unwrap().len(),
            0,
            "written back before unmount: the test cannot tell"
        );
        m.unmount();
        assert_eq!(s.tier_path(0).exists(), !scratch);
        std::fs::metadata(&link).unwrap().len()
    };
    assert_eq!(
        piece_after_unmount(false),
        4 * MIB as u64,
        "without scratch, unmount writes the cache back"
    );
    assert_eq!(
        piece_after_unmount(true),
        0,
        "scratch: unmount wrote dirty cache back"
    );
}

/// A scratch daemon killed with KILL (the OOM killer, a job past its kill wait) leaves its
/// tier folders and a dead mount. The next mount on the host whose tier folders sit beside
/// them removes them and detaches the mount, and says so; folders of a live scratch mount,
/// of a killed mount that was not scratch, and plain folders are left alone.
#[test]
fn the_next_mount_removes_what_a_killed_scratch_daemon_left() {
    require!(root_with_fuse());
    let base = tempfile::Builder::new()
        .prefix("tierfs-jobs-")
        .tempdir_in("/tmp")
        .unwrap();
    let nvme = base.path().join("nvme");
    let pfs = base.path().join("pfs");
    for d in [&nvme, &pfs] {
        std::fs::create_dir(d).unwrap();
    }
    // One config per job, as the job templates do: folders keyed on the job id.
    let job = |id: &str, scratch: bool| -> (PathBuf, PathBuf) {
        let cfg = base.path().join(format!("job{id}.toml"));
        let mp = base.path().join(format!("mnt-{id}"));
        std::fs::create_dir_all(&mp).unwrap();
        std::fs::write(
            &cfg,
            format!(
                "[[tier]]\nname = \"nvme\"\npath = \"{}/tierfs-${{JOB}}\"\ncreate = true\n\
                 write_bandwidth = \"1GB/s\"\n[[tier]]\nname = \"pfs\"\n\
                 path = \"{}/${{HOSTNAME}}-${{JOB}}\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
                 [mount]\nscratch = {scratch}\nlog_file = \"{}/job{id}.log\"\n\
                 [cache]\nsize = \"off\"\n",
                nvme.display(),
                pfs.display(),
                base.path().display()
            ),
        )
        .unwrap();
        (cfg, mp)
    };
    let mount = |id: &str, cfg: &Path, mp: &Path| -> Output {
        Command::new(tierfs_bin())
            .arg("mount")
            .arg("--config")
            .arg(cfg)
            .arg(mp)
            .env("JOB", id)
            .output()
            .unwrap()
    };
    let _cleanup = Unmounter(
        ["1", "2", "3", "4"]
            .iter()
            .map(|id| base.path().join(format!("mnt-{id}")))
            .collect(),
    );
    let host = tierfs::config::hostname().unwrap();
    let folders = |id: &str| {
        [
            nvme.join(format!("tierfs-{id}")),
            pfs.join(format!("{host}-{id}")),
        ]
    };
    let stats_pid = |mp: &Path| -> u32 {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(mp.join(".tierfs/stats.json")).unwrap()).unwrap();
        v["pid"].as_u64().unwrap() as u32
    };
    let kill9 = |mp: &Path| {
        let pid = stats_pid(mp);
        std::fs::write(mp.join("swap"), pattern(2 * MIB, 1)).unwrap();
        unsafe_kill(pid, libc::SIGKILL);
        // The group leader is a zombie before the other threads have closed /dev/fuse.
        assert!(wait_for(30, || tierfs::daemon::mountpoint_state(mp)
            == tierfs::daemon::MountpointState::Dead));
    };
    // Job 3 (scratch) runs throughout; job 1 (scratch) and job 2 (not scratch) are killed.
    let (c3, m3) = job("3", true);
    assert!(mount("3", &c3, &m3).status.success());
    std::fs::write(m3.join("live"), b"live").unwrap();
    let (c1, m1) = job("1", true);
    assert!(mount("1", &c1, &m1).status.success());
    let (c2, m2) = job("2", false);
    assert!(mount("2", &c2, &m2).status.success());
    kill9(&m1);
    kill9(&m2);
    let plain = nvme.join("tierfs-plain");
    std::fs::create_dir(&plain).unwrap();
    std::fs::write(plain.join("x"), b"x").unwrap();

    let (c4, m4) = job("4", true);
    let o = mount("4", &c4, &m4);
    assert!(o.status.success(), "{}", text(&o));
    let said = text(&o);
    for f in folders("1") {
        assert!(!f.exists(), "{} left behind:\n{said}", f.display());
        assert!(
            said.contains(&format!(
                "removed the scratch tier folder {} left by a tierfs daemon that was killed",
                f.display()
            )),
            "{said}"
        );
    }
    assert!(
        !tierfs::daemon::is_mountpoint(&m1),
        "the dead mount of job 1 is still there"
    );
    assert!(
        said.contains(&format!("detached the dead mount at {}", m1.display())),
        "{said}"
    );
    let log4 = std::fs::read_to_string(base.path().join("job4.log")).unwrap();
    assert!(log4.contains("removed the scratch tier folder"), "{log4}");
    for f in folders("2").iter().chain(&folders("3")) {
        assert!(f.join("data").is_dir(), "{} was touched", f.display());
    }
    assert_eq!(std::fs::read(m3.join("live")).unwrap(), b"live");
    assert_eq!(std::fs::read(plain.join("x")).unwrap(), b"x");

    // Job 2's own next mount takes its stale lock over and says so.
    let _ = Command::new(tierfs_bin())
        .args(["unmount"])
        .arg(&m2)
        .output();
    let o = mount("2", &c2, &m2);
    assert!(o.status.success(), "{}", text(&o));
    let log2 = std::fs::read_to_string(base.path().join("job2.log")).unwrap();
    assert!(
        log2.contains("took over the stale lock of a tierfs daemon that is gone (pid"),
        "{log2}"
    );
    assert!(std::fs::read(m2.join("swap")).unwrap() == pattern(2 * MIB, 1));
    for mp in [&m2, &m3, &m4] {
        let o = tierfs(&["unmount", mp.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o));
    }
    for f in folders("3").iter().chain(&folders("4")) {
        assert!(!f.exists(), "{}", f.display());
    }
}

/// `${SLURM_JOB_ID}` (any variable of the environment) in tier paths works in
/// `check-config` and `mount`.
#[test]
fn job_id_variables_in_paths_work_in_check_config_and_mount() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("job.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[tier]]\nname = \"nvme\"\npath = \"{0}/nvme-${{SLURM_JOB_ID}}\"\ncreate = true\n\
             write_bandwidth = \"1GB/s\"\n[mount]\nlog_file = \"{0}/${{SLURM_JOB_ID}}.log\"\n\
             [cache]\nsize = \"off\"\n",
            d.path().display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(tierfs_bin())
            .args(args)
            .env("SLURM_JOB_ID", "4711")
            .output()
            .unwrap()
    };
    let o = run(&["check-config", cfg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let want = d.path().join("nvme-4711");
    assert!(
        text(&o).contains(want.to_str().unwrap()),
        "check-config does not show the expanded path:\n{}",
        text(&o)
    );
    let o = Command::new(tierfs_bin())
        .args(["check-config", cfg.to_str().unwrap()])
        .env_remove("SLURM_JOB_ID")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("tier[0].path:")
            && text(&o).contains("${SLURM_JOB_ID}, which is not set"),
        "{}",
        text(&o)
    );
    require!(root_with_fuse());
    let mp = d.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let o = run(&[
        "mount",
        "--config",
        cfg.to_str().unwrap(),
        mp.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::write(mp.join("f"), b"job").unwrap();
    assert_eq!(std::fs::read(want.join("data/f")).unwrap(), b"job");
    assert!(d.path().join("4711.log").exists());
    let o = run(&["unmount", mp.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
}
