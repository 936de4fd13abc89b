//! The direct path (`tierfs run`, issue 39) through real mounts: programs under the preload
//! library get the tier files' own descriptors for their `O_DIRECT` opens and DeepSpeed
//! swap files, whole and striped, and everything stays exact: fio's crc32c verify with
//! libaio and psync, DeepSpeed's stat-before-read, a model of file contents mixing direct
//! and FUSE access, dup/fork/exec/close-on-exec/close_range, another user's access, kill -9
//! of either side, and a daemon that survives garbage. The core's side of leases (moves
//! wait for them, staging memory lets go, sizes come from the pieces) is tests/core_direct.rs.
//! The programs are Python scripts (tests/direct/prog.py) and fio.
mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn prog() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/direct/prog.py")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `tierfs run -- ARGS`, its output, after checking it succeeded.
#[track_caller]
fn direct(args: &[&str]) -> String {
    let o = Command::new(tierfs_bin())
        .args(["run", "--"])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "tierfs run -- {args:?}:\n{}", text(&o));
    text(&o)
}

/// The same without the library.
#[track_caller]
fn plain(args: &[&str]) -> String {
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(o.status.success(), "{args:?}:\n{}", text(&o));
    text(&o)
}

/// Leases granted since mount and bytes programs moved past the daemon, all tiers.
fn direct_stats(m: &Mount<'_>) -> (u64, u64, u64) {
    let s = m.stats_json();
    let sum = |k: &str| {
        s["tiers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t[k].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    (sum("direct_opens"), sum("direct_bytes"), sum("direct_open"))
}

/// A two-tier setup with kernel passthrough off (as an ordinary user has it), so every
/// direct-eligible open goes to the direct path.
fn setup(layout: &str) -> Setup {
    let mut s = Setup::two(layout);
    s.extra = "passthrough = \"off\"\n".into();
    s
}

fn mp(m: &Mount<'_>, rel: &str) -> String {
    m.path(rel).to_str().unwrap().to_string()
}

#[test]
fn fio_verifies_through_the_library_on_both_layouts() {
    require!(fuse());
    require!(tool("fio", "apt-get install fio"));
    for layout in ["whole-file", "stripe"] {
        let s = setup(layout);
        let m = s.mount();
        std::fs::create_dir(m.path("fio")).unwrap();
        for (engine, rw) in [("libaio", "randwrite"), ("psync", "write")] {
            let out = direct(&[
                "fio",
                "--name=v",
                &format!("--directory={}", mp(&m, "fio")),
                &format!("--rw={rw}"),
                "--bs=1M",
                "--size=24M",
                "--numjobs=2",
                &format!("--ioengine={engine}"),
                "--iodepth=16",
                "--direct=1",
                "--verify=crc32c",
                "--verify_fatal=1",
                "--verify_state_save=0",
            ]);
            assert!(
                !out.contains("verify:") && !out.contains("WARNING"),
                "{layout} {engine}:\n{out}"
            );
        }
        let (leases, bytes, out) = direct_stats(&m);
        assert!(leases >= 4, "{layout}: {leases} leases");
        assert!(
            bytes >= (2 * 2 * 24) << 20,
            "{layout}: only {bytes} bytes went direct"
        );
        assert_eq!(
            out, 0,
            "{layout}: leases still out after the programs ended"
        );
        // What the programs wrote is what FUSE reads.
        let back = plain(&["sh", "-c", &format!("cat {}/fio/* | md5sum", q(&m.root()))]);
        let via = direct(&["sh", "-c", &format!("cat {}/fio/* | md5sum", q(&m.root()))]);
        assert_eq!(back, via);
        m.unmount();
    }
}

#[test]
fn deepspeeds_stat_before_read_sees_the_direct_writes() {
    require!(fuse());
    require!(tool("python3", "apt-get install python3"));
    for layout in ["whole-file", "stripe"] {
        let s = setup(layout);
        let m = s.mount();
        let dir = mp(&m, "zero_stage_3/rank0");
        let py = prog();
        assert!(direct(&["python3", py.to_str().unwrap(), "ds", &dir, "6"]).contains("ok"));
        // Read again through FUSE alone: the same bytes and sizes.
        assert!(plain(&["python3", py.to_str().unwrap(), "ds", &dir, "6"]).contains("ok"));
        let (leases, bytes, _) = direct_stats(&m);
        assert!(
            leases >= 12 && bytes > 0,
            "{layout}: {leases} leases, {bytes} bytes"
        );
        m.unmount();
    }
}

/// A model test: the same random reads, writes, truncates and fsyncs, through O_DIRECT
/// opens (direct) and buffered ones (FUSE) of the same files, several open at once, on the
/// mount under the library and on a plain folder: every read, every size and every file
/// at the end agree.
#[test]
fn file_contents_match_a_plain_folder_mixing_direct_and_fuse_access() {
    require!(fuse());
    require!(tool("python3", "apt-get install python3"));
    let seeds: u64 = std::env::var("TIERFS_DIRECT_MODEL_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    for layout in ["whole-file", "stripe"] {
        let s = setup(layout);
        let m = s.mount();
        let reference = tempfile::tempdir_in("/var/tmp").unwrap();
        let py = prog();
        for seed in 0..seeds {
            let dir = mp(&m, &format!("model{seed}"));
            let refdir = reference.path().join(format!("model{seed}"));
            let args = |d: &str| {
                vec![
                    "python3".to_string(),
                    py.display().to_string(),
                    "model".into(),
                    seed.to_string(),
                    "300".into(),
                    d.to_string(),
                ]
            };
            let a: Vec<String> = args(&dir);
            let b: Vec<String> = args(refdir.to_str().unwrap());
            let got = direct(&a.iter().map(String::as_str).collect::<Vec<_>>());
            let want = plain(&b.iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(
                got, want,
                "{layout}: seed {seed} differs from a plain folder"
            );
        }
        let (leases, _, out) = direct_stats(&m);
        assert!(leases > 0, "{layout}: nothing went direct");
        assert_eq!(out, 0);
        m.unmount();
        // And after a remount (sizes from the pieces).
        let m = s.mount();
        for seed in 0..seeds {
            for i in 0..3 {
                let a = m.path(&format!("model{seed}/m{i}"));
                let b = reference.path().join(format!("model{seed}/m{i}"));
                if b.exists() {
                    assert!(
                        std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
                        "{layout}: {a:?}"
                    );
                }
            }
        }
        m.unmount();
    }
}

#[test]
fn dup_fork_exec_cloexec_and_close_range_keep_leases_right() {
    require!(fuse());
    require!(tool("python3", "apt-get install python3"));
    for layout in ["whole-file", "stripe"] {
        let s = setup(layout);
        let m = s.mount();
        let f = mp(&m, "fds.tensor.swp");
        let out = direct(&["python3", prog().to_str().unwrap(), "fds", &f]);
        assert!(
            out.contains("ok") && !out.contains("WARNING"),
            "{layout}:\n{out}"
        );
        let (leases, _, left) = direct_stats(&m);
        assert!(leases >= 2, "{layout}: {leases}");
        assert!(
            wait_for(10, || direct_stats(&m).2 == 0),
            "{layout}: {left} leases still out after the program ended"
        );
        m.unmount();
    }
}

#[test]
fn another_user_gets_only_the_access_the_kernel_allowed() {
    require!(fuse());
    require!(root("acting as another user"));
    require!(user("tierfs-test"));
    let mut s = setup("whole-file");
    s.extra += "allow_other = true\n";
    let m = s.mount();
    std::fs::set_permissions(
        s.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let f = m.path("root.tensor.swp");
    std::fs::write(&f, vec![5u8; 8192]).unwrap();
    let cmd = format!(
        "{} run -- python3 {} access {}",
        q(&tierfs_bin()),
        q(&prog()),
        q(&f)
    );
    let o = as_user("tierfs-test", &cmd);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("read 4096"),
        "the user could not read a 0644 file: {t}"
    );
    assert!(
        t.contains("write refused 9"),
        "a read-only grant wrote (EBADF expected): {t}"
    );
    assert!(t.contains("open for writing refused 13"), "{t}");
    assert!(direct_stats(&m).0 >= 1, "the user's read did not go direct");
    assert_eq!(std::fs::read(&f).unwrap(), vec![5u8; 8192]);
    m.unmount();
}

/// kill -9 of the program holding a direct descriptor: the kernel ends its lease (the FUSE
/// release), and the size it wrote is the file's.
#[test]
fn killing_the_program_ends_its_lease() {
    require!(fuse());
    require!(tool("python3", "apt-get install python3"));
    for layout in ["whole-file", "stripe"] {
        let s = setup(layout);
        let m = s.mount();
        let f = mp(&m, "held.tensor.swp");
        let mut child = Command::new(tierfs_bin())
            .args(["run", "--", "python3"])
            .arg(prog())
            .args(["hold", &f, "60"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "READY");
        assert!(direct_stats(&m).2 > 0, "{layout}: the lease is not out");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            wait_for(10, || direct_stats(&m).2 == 0),
            "{layout}: the lease outlived kill -9"
        );
        assert_eq!(std::fs::metadata(&f).unwrap().len(), MIB as u64, "{layout}");
        assert_eq!(std::fs::read(&f).unwrap(), vec![1u8; MIB]);
        m.unmount();
    }
}

/// kill -9 of the daemon while a program holds direct descriptors: the program goes on
/// writing the tier files (it never needed the daemon for its bytes); `mount --force`
/// brings the mount back, with the sizes the pieces have and every fsync'd byte; while the
/// program still holds the pieces, the new daemon does not move them.
#[test]
fn killing_the_daemon_leaves_the_program_writing() {
    require!(fuse());
    require!(tool("python3", "apt-get install python3"));
    for layout in ["whole-file", "stripe"] {
        let s = setup(layout);
        let m = s.mount();
        let f = mp(&m, "survivor.tensor.swp");
        let mut child = Command::new(tierfs_bin())
            .args(["run", "--", "python3"])
            .arg(prog())
            .args(["hold", &f, "3"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "READY");
        let pid = m.daemon_pid();
        m.disarm();
        // SAFETY: kill(2) of the daemon's pid.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        line.clear();
        out.read_line(&mut line).unwrap();
        assert_eq!(
            line.trim(),
            "DONE",
            "{layout}: the program's direct writes failed"
        );
        let o = s.mount_output(&["--force"]);
        assert!(o.status.success(), "{}", text(&o));
        let m = s.adopt();
        assert_eq!(
            std::fs::metadata(&f).unwrap().len(),
            2 * MIB as u64,
            "{layout}"
        );
        let data = std::fs::read(&f).unwrap();
        assert!(
            data[..MIB] == vec![1u8; MIB][..] && data[MIB..] == vec![2u8; MIB][..],
            "{layout}"
        );
        assert!(child.wait().unwrap().success());
        m.unmount();
    }
}

/// The daemon trusts nothing a peer sends but the kernel's word: garbage, another version,
/// a request with descriptors, a guessed, another handle's or a spent token are refused
/// (descriptors closed) and the daemon goes on serving; an `O_PATH` descriptor gets no token.
#[test]
fn the_daemon_survives_garbage_and_refuses_what_is_not_its_own() {
    require!(fuse());
    let s = setup("whole-file");
    let m = s.mount();
    std::fs::write(m.path("f"), b"x").unwrap();
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(m.root()).unwrap().dev();
    let name = tierfs_wire::socket_name(libc::major(dev), libc::minor(dev));
    let conn = tierfs_wire::sock::connect(&name).unwrap();
    tierfs_wire::sock::set_timeout(conn, 5000).unwrap();
    let ask = |msg: &[u8], fds: &[i32]| -> Option<tierfs_wire::Reply> {
        tierfs_wire::sock::send(conn, msg, fds).unwrap();
        let mut buf = vec![0u8; 65536];
        let (n, got, _) = tierfs_wire::sock::recv(conn, &mut buf).ok()?;
        for fd in got {
            // SAFETY: descriptors we were handed.
            unsafe { libc::close(fd) };
        }
        tierfs_wire::Reply::decode(&buf[..n]).ok()
    };
    // The handle and token the daemon answers for a descriptor (the library's ioctl).
    let handle_of = |fd: i32| -> std::io::Result<(u64, u64)> {
        let mut out = [0u8; tierfs_wire::IOC_HANDLE_LEN];
        // SAFETY: the ioctl writes at most IOC_HANDLE_LEN bytes into `out`.
        let r = unsafe { libc::ioctl(fd, tierfs_wire::IOC_HANDLE as _, out.as_mut_ptr()) };
        let word = |i: usize| u64::from_le_bytes(out[i..i + 8].try_into().unwrap());
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok((word(0), word(16)))
        }
    };
    let open = |fh: u64, token: u64| {
        tierfs_wire::Request::Open {
            fh,
            token,
            flags: libc::O_RDONLY | libc::O_DIRECT,
        }
        .encode()
    };
    let refused = |r: Option<tierfs_wire::Reply>| matches!(r, Some(tierfs_wire::Reply::No { .. }));
    let granted = |r: Option<tierfs_wire::Reply>| matches!(r, Some(tierfs_wire::Reply::Grant(_)));
    assert!(refused(ask(b"garbage that is not a message", &[])));
    let mut other = open(1, 1);
    other[4] = 99;
    assert!(matches!(
        ask(&other, &[]),
        Some(tierfs_wire::Reply::No {
            why: tierfs_wire::NoReason::Version,
            ..
        })
    ));
    let path_only = open_flags(&m.path("f"), libc::O_PATH, 0).unwrap();
    assert!(
        handle_of(path_only.as_raw_fd()).is_err(),
        "an O_PATH descriptor got a token"
    );
    let real = open_flags(&m.path("f"), libc::O_RDONLY | libc::O_DIRECT, 0).unwrap();
    let second = open_flags(&m.path("f"), libc::O_RDONLY | libc::O_DIRECT, 0).unwrap();
    let (fh, token) = handle_of(real.as_raw_fd()).unwrap();
    let (fh2, token2) = handle_of(second.as_raw_fd()).unwrap();
    assert_ne!(fh, fh2);
    let elsewhere = std::fs::File::open("/proc/self/stat").unwrap();
    assert!(
        refused(ask(&open(fh, token), &[elsewhere.as_raw_fd()])),
        "a request with a descriptor"
    );
    // A token asked again replaces the one before.
    let (_, token) = handle_of(real.as_raw_fd()).unwrap();
    assert!(refused(ask(&open(fh, token ^ 2), &[])), "a guessed token");
    assert!(
        refused(ask(&open(fh, token2), &[])),
        "another handle's token"
    );
    // Still serving: the real requests are granted, once each.
    assert!(granted(ask(&open(fh, token), &[])));
    assert!(refused(ask(&open(fh, token), &[])), "a spent token");
    assert!(granted(ask(&open(fh2, token2), &[])));
    // SAFETY: our own socket.
    unsafe { libc::close(conn) };
    drop((real, second, path_only));
    m.unmount();
}

/// `direct = "off"` keeps programs on FUSE quietly; a program whose daemon cannot be reached
/// stays on FUSE with one WARNING; a program outside any mount is untouched.
#[test]
fn programs_fall_back_to_fuse_exactly_and_say_so_only_on_errors() {
    require!(fuse());
    require!(tool("python3", "apt-get install python3"));
    let mut s = setup("whole-file");
    s.extra += "direct = \"off\"\n";
    let m = s.mount();
    let dir = mp(&m, "off");
    let out = direct(&["python3", prog().to_str().unwrap(), "ds", &dir, "2"]);
    assert!(out.contains("ok") && !out.contains("WARNING"), "{out}");
    assert_eq!(direct_stats(&m).0, 0, "direct = \"off\" granted leases");
    m.unmount();
    // Outside every mount: nothing to say, nothing changed.
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = direct(&[
        "python3",
        prog().to_str().unwrap(),
        "ds",
        tmp.path().to_str().unwrap(),
        "2",
    ]);
    assert!(out.contains("ok") && !out.contains("WARNING"), "{out}");
}
