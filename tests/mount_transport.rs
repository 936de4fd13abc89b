//! The FUSE transports, through real mounts:
//! - aligned `O_DIRECT` I/O reaches the tiers without a bounce copy (`bounce_bytes` 0): a
//!   WRITE's data is received page-aligned on both transports;
//! - `FUSE_HANDLE_KILLPRIV_V2`: an io_uring fio client's writes bring no GETXATTR requests,
//!   and set-user-ID/set-group-ID are still cleared as the kernel clears them (write,
//!   truncate, `O_TRUNC` open by a user without CAP_FSETID; set-group-ID only with group
//!   execute);
//! - the transport asked for (`TIERFS_TRANSPORT`, as CI runs the suite) is the one that
//!   carries the requests;
//! - a ring that cannot be set up (too few descriptors) falls back to /dev/fuse with a
//!   log line naming the reason, and fails the mount only when `transport = "uring"`.
//!
//! Runs as root with /dev/fuse (CI); the io_uring parts need the fuse module's
//! `enable_uring` (CI sets it) and print SKIP without it.
mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const MIB: usize = 1 << 20;

fn uring_enabled() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|s| s.trim() == "Y")
}

/// The transport the daemon should pick under this test run's environment.
fn expected_transport() -> &'static str {
    match std::env::var("TIERFS_TRANSPORT").as_deref() {
        Ok("uring") => "uring",
        Ok("dev") => "dev",
        _ if uring_enabled() => "uring",
        _ => "dev",
    }
}

#[test]
fn aligned_direct_io_is_never_bounced() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let mut s = Setup::two(layout);
        // Through the daemon: DeepSpeed's swap files would otherwise go to the kernel.
        s.extra = "passthrough = \"off\"\n".into();
        let m = s.mount();
        let st = m.stats_json();
        require!(
            st["tiers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t["direct_io"] == true),
            "{layout}: the test's tier folders do not take O_DIRECT"
        );
        let data = pattern(24 * MIB, 7);
        write_direct_threads(&m.path("swap.tensor.swp"), &data, 4, 0);
        assert!(
            read_direct_threads(&m.path("swap.tensor.swp"), 4) == data,
            "{layout}: data read back differs"
        );
        let st = m.stats_json();
        let written: u64 = st["tiers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["bytes_written"].as_u64().unwrap())
            .sum();
        assert!(written >= data.len() as u64, "{layout}: {st}");
        assert_eq!(
            st["bounce_bytes"], 0,
            "{layout}: aligned direct I/O was copied through a bounce buffer ({} transport)",
            st["fuse"]["transport"]
        );
        m.unmount();
    }
}

#[test]
fn the_asked_transport_carries_the_traffic() {
    require!(fuse());
    let want = expected_transport();
    let s = Setup::two("stripe");
    let m = s.mount();
    let data = pattern(8 * MIB, 3);
    write_direct_threads(&m.path("a"), &data, 2, 0);
    std::fs::create_dir(m.path("d")).unwrap();
    std::fs::rename(m.path("a"), m.path("d/b")).unwrap();
    assert!(std::fs::read(m.path("d/b")).unwrap() == data);
    let f = &m.stats_json()["fuse"];
    assert_eq!(f["transport"], want, "{f}");
    let (ring, dev) = (
        f["requests_ring"].as_u64().unwrap(),
        f["requests_dev"].as_u64().unwrap(),
    );
    for op in ["WRITE", "READ", "MKDIR", "RENAME", "LOOKUP"] {
        assert!(f["requests"][op].as_u64().unwrap_or(0) > 0, "no {op}: {f}");
    }
    if want == "uring" {
        // /dev/fuse carries only what came before every queue had an entry, forgets
        // and interrupts.
        assert!(ring > dev && ring >= 8, "the ring carried too little: {f}");
    } else {
        assert_eq!(ring, 0, "{f}");
        assert!(dev >= 8, "{f}");
    }
    m.unmount();
}

/// fio with its io_uring engine (buffered and direct writes through io_uring submit
/// writes as the kernel's write_iter, where a filesystem without FUSE_HANDLE_KILLPRIV_V2
/// is asked for security.capability before every write).
#[test]
fn io_uring_writes_ask_no_getxattr() {
    require!(fuse());
    require!(tool("fio", "apt-get install fio"));
    let s = Setup::two("whole-file");
    let m = s.mount();
    for direct in [0, 1] {
        let out = Command::new("fio")
            .arg(format!("--name=killpriv{direct}"))
            .arg(format!("--directory={}", m.root().display()))
            .args([
                "--rw=write",
                "--bs=128k",
                "--size=16M",
                "--ioengine=io_uring",
            ])
            .arg(format!("--direct={direct}"))
            .args(["--iodepth=8", "--numjobs=2", "--output-format=terse"])
            .output()
            .expect("run fio");
        assert!(
            out.status.success(),
            "fio: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let f = &m.stats_json()["fuse"];
    let writes = f["requests"]["WRITE"].as_u64().unwrap_or(0);
    let getxattr = f["requests"]["GETXATTR"].as_u64().unwrap_or(0);
    assert!(writes >= 256, "{f}");
    assert!(
        getxattr * 16 <= writes,
        "{getxattr} GETXATTR requests for {writes} writes: the kernel asks for \
         security.capability per write (FUSE_HANDLE_KILLPRIV_V2 not in effect): {f}"
    );
    m.unmount();
}

#[test]
fn setuid_and_setgid_are_cleared_like_the_kernel_does() {
    const USER: &str = "tierfs-test";
    require!(fuse());
    require!(root("acts as a user on a root daemon's allow_other mount"));
    require!(user(USER));
    let mut s = Setup::two("whole-file");
    s.extra = "allow_other = true\n".into();
    let m = s.mount();
    std::fs::set_permissions(m.root(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // (file, mode, what the user does, mode after)
    let cases: [(&str, u32, &str, u32); 6] = [
        ("w-suid", 0o4777, "printf x >> w-suid", 0o777),
        ("w-sgid-x", 0o2777, "printf x >> w-sgid-x", 0o777),
        ("w-sgid-nox", 0o2767, "printf x >> w-sgid-nox", 0o2767),
        ("t-suid", 0o6777, "truncate -s 3 t-suid", 0o777),
        ("o-suid", 0o4777, "printf y > o-suid", 0o777),
        ("r-suid", 0o4777, "cat r-suid > /dev/null", 0o4777),
    ];
    for (name, mode, _, _) in &cases {
        let p = m.path(name);
        std::fs::write(&p, b"abc").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    for (name, mode, cmd, after) in &cases {
        let o = as_user(USER, &format!("cd {} && {cmd}", m.root().display()));
        assert!(
            o.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let got = std::fs::metadata(m.path(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(got, *after, "{name} ({mode:o}) after `{cmd}`: {got:o}");
        // The tier's copy agrees (what a remount would show).
        let on = s.tiers_holding(name)[0];
        let tier = std::fs::metadata(s.backing(on, name))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(tier, *after, "{name} on the tier: {tier:o}");
    }
    // Root keeps the bits (CAP_FSETID), as on any Linux filesystem.
    let p = m.path("root-suid");
    std::fs::write(&p, b"abc").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    use std::io::Write;
    (&f).write_all(b"more").unwrap();
    drop(f);
    assert_eq!(
        std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
        0o4755
    );
    m.unmount();
}

#[test]
fn a_ring_that_cannot_be_set_up_falls_back_or_fails_when_asked() {
    require!(fuse());
    require!(
        uring_enabled(),
        "FUSE over io_uring is off (/sys/module/fuse/parameters/enable_uring)"
    );
    require!(tool("prlimit", "util-linux"));
    let s = Setup::two("stripe");
    s.write_config();
    let mount = |transport: &str| {
        Command::new("prlimit")
            .arg("--nofile=200:200")
            .arg(tierfs_bin())
            .arg("mount")
            .arg("--config")
            .arg(s.config_path())
            .arg(s.mountpoint())
            .env("TIERFS_TRANSPORT", transport)
            .output()
            .expect("run tierfs mount")
    };
    // auto: /dev/fuse, with the reason in the log, and the mount works.
    let o = mount("auto");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = s.adopt();
    assert_eq!(m.stats_json()["fuse"]["transport"], "dev");
    let log = std::fs::read_to_string(s.log_path()).unwrap();
    assert!(
        log.contains("FUSE over io_uring is unavailable (too few file descriptors")
            && log.contains("ulimit -n"),
        "{log}"
    );
    let data = pattern(3 * MIB, 5);
    std::fs::write(m.path("f"), &data).unwrap();
    assert!(std::fs::read(m.path("f")).unwrap() == data);
    m.unmount();
    // uring: no mount, exit 1, the reason and the fix.
    let o = mount("uring");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("transport = \"uring\" was asked for")
            && err.contains("too few file descriptors")
            && err.contains("transport = \"auto\""),
        "{err}"
    );
    assert!(!tierfs::daemon::is_mountpoint(&s.mountpoint()));
}

/// A read-only open's close reaches the daemon only as RELEASE (`FOPEN_NOFLUSH`): the
/// daemon has nothing to do at a reader's close, and DeepSpeed closes a swap file after
/// every read. A writer's close still sends FLUSH (its size is settled there).
#[test]
fn a_readers_close_sends_no_flush() {
    require!(fuse());
    let s = Setup::two("stripe");
    let m = s.mount();
    std::fs::write(m.path("f"), pattern(MIB, 4)).unwrap();
    let flushes = |m: &Mount<'_>| {
        m.stats_json()["fuse"]["requests"]["FLUSH"]
            .as_u64()
            .unwrap_or(0)
    };
    let before = flushes(&m);
    for _ in 0..20 {
        assert_eq!(std::fs::read(m.path("f")).unwrap().len(), MIB);
    }
    assert_eq!(flushes(&m), before, "a reader's close sent FLUSH");
    std::fs::OpenOptions::new()
        .write(true)
        .open(m.path("f"))
        .unwrap();
    assert!(flushes(&m) > before, "a writer's close sent no FLUSH");
    m.unmount();
}
