//! Per-request panic containment (`TierFs::contain`): a request whose handler panics is
//! answered EIO, logged with its operation and inode, counted in
//! `tierfs_request_panics_total`; its inode answers EIO to every request until the next
//! mount, and everything else keeps being served. The panic is injected with the debug-build
//! control command `debug-panic PATH` (the tests' builds are debug builds), which makes the
//! next request on PATH panic inside its handler.
mod common;
use common::*;
use std::ffi::OsStr;
use std::os::unix::fs::{FileExt, MetadataExt};
use tierfs::error::Error;
use tierfs::vfs::{Ctx, TierFs, ROOT_INO};

/// The core alone: a panicking handler becomes EIO, the inode fails, others are untouched,
/// and a failed inode's handlers are not run at all.
#[test]
fn core_contains_a_panicking_handler() {
    let d = tempfile::tempdir().unwrap();
    let text = format!(
        "[[tier]]\nname = \"a\"\npath = \"{}/a\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n",
        d.path().display()
    );
    let config = tierfs::config::MountConfig::parse(&text, std::path::Path::new("c.toml")).unwrap();
    config.prepare_tier_dirs().unwrap();
    let tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
    let fs = TierFs::new(&config, tiers).unwrap();
    let ctx = Ctx { uid: 0, gid: 0 };
    let (a, fh, _) = fs
        .create(ROOT_INO, OsStr::new("a"), 0o600, libc::O_RDWR, ctx)
        .unwrap();
    fs.write(fh, 0, b"hello").unwrap();
    let (b, _, _) = fs
        .create(ROOT_INO, OsStr::new("b"), 0o600, libc::O_RDWR, ctx)
        .unwrap();

    let r: Result<(), Error> = fs.contain("write", a.ino, || panic!("a bug"));
    let e = r.unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert!(fs.is_failed(a.ino));
    assert_eq!((fs.request_panics(), fs.failed_inodes()), (1, 1));
    // Not run again: EIO at once, no second panic.
    let mut ran = false;
    let r = fs.contain("getattr", a.ino, || {
        ran = true;
        fs.getattr(a.ino)
    });
    assert_eq!(r.unwrap_err().errno(), libc::EIO);
    assert!(!ran, "a failed inode's handler ran");
    assert_eq!(fs.request_panics(), 1);
    // Other inodes are served.
    assert_eq!(
        fs.contain("getattr", b.ino, || fs.getattr(b.ino))
            .unwrap()
            .ino,
        b.ino
    );
    assert!(!fs.is_failed(b.ino) && !fs.is_failed(ROOT_INO));
    // The injected panic (debug builds) goes through the same path.
    fs.control(b"debug-panic b\n").unwrap();
    let r = fs.contain("getattr", b.ino, || fs.getattr(b.ino));
    assert_eq!(r.unwrap_err().errno(), libc::EIO);
    assert_eq!((fs.request_panics(), fs.failed_inodes()), (2, 2));
    assert!(fs
        .contain("getattr", ROOT_INO, || fs.getattr(ROOT_INO))
        .is_ok());
}

fn metric(m: &Mount<'_>, name: &str) -> u64 {
    let text = std::fs::read_to_string(m.path(".tierfs/metrics")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} is not in .tierfs/metrics:\n{text}"))
        .parse()
        .unwrap()
}

#[track_caller]
fn assert_eio<T: std::fmt::Debug>(r: std::io::Result<T>, what: &str) {
    match r {
        Err(e) => assert_eq!(errno(&e), libc::EIO, "{what}: {e}"),
        Ok(v) => panic!("{what}: want EIO, got {v:?}"),
    }
}

/// Through a mount: the reader of the file gets EIO, the counter and the log say so, every
/// later request on that file gets EIO without another panic, the rest of the mount works,
/// and after a remount the file is back with its bytes.
#[test]
fn a_panic_in_a_request_fails_that_file_until_remount() {
    require!(fuse());
    let mut s = Setup::two("whole-file");
    // Every read reaches the daemon (no kernel passthrough, O_DIRECT below).
    s.extra = "passthrough = \"off\"\n".into();
    let m = s.mount();
    let victim = pattern(3 * MIB, 1);
    let other = pattern(2 * MIB, 2);
    std::fs::write(m.path("victim"), &victim).unwrap();
    std::fs::write(m.path("other"), &other).unwrap();
    let ino = std::fs::metadata(m.path("victim")).unwrap().ino();
    let f = open_flags(&m.path("victim"), libc::O_RDONLY | libc::O_DIRECT, 0).unwrap();
    assert_eq!(metric(&m, "tierfs_request_panics_total"), 0);

    std::fs::write(m.path(".tierfs/control"), "debug-panic victim\n").unwrap();
    let mut buf = tierfs::tierio::AlignedBuf::zeroed(MIB);
    assert_eio(f.read_at(&mut buf, 0), "the read that panicked");
    assert_eq!(metric(&m, "tierfs_request_panics_total"), 1);
    assert_eq!(metric(&m, "tierfs_failed_inodes"), 1);
    let log = std::fs::read_to_string(s.log_path()).unwrap();
    assert!(
        log.contains(&format!(
            "request READ on inode {ino} panicked: injected by debug-panic"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!("inode {ino} failed (a panic in READ)")),
        "{log}"
    );

    // Every request on it answers EIO now; none panics again.
    assert_eio(f.read_at(&mut buf, 0), "a second read");
    assert_eio(std::fs::File::open(m.path("victim")), "open");
    assert_eio(std::fs::write(m.path("victim"), b"x"), "open for writing");
    assert_eio(get_xattr(&m.path("victim"), "user.x"), "getxattr");
    // Attributes and entries the kernel cached (1 s) run out; then stat asks the daemon.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    assert_eio(std::fs::metadata(m.path("victim")), "stat");
    assert_eq!(metric(&m, "tierfs_request_panics_total"), 1);

    // The daemon keeps serving everything else.
    assert_eq!(std::fs::read(m.path("other")).unwrap(), other);
    let fresh = pattern(MIB + 7, 3);
    std::fs::write(m.path("fresh"), &fresh).unwrap();
    assert_eq!(std::fs::read(m.path("fresh")).unwrap(), fresh);
    std::fs::rename(m.path("other"), m.path("other2")).unwrap();
    assert_eq!(std::fs::read(m.path("other2")).unwrap(), other);
    let st = m.stats_json();
    assert_eq!(st["request_panics"], 1, "{st}");
    assert_eq!(st["failed_inodes"], 1, "{st}");
    drop(f);
    m.unmount();

    // The next mount rebuilds it from the tiers: the file is whole again.
    let m = s.mount();
    assert_eq!(std::fs::read(m.path("victim")).unwrap(), victim);
    assert_eq!(metric(&m, "tierfs_request_panics_total"), 0);
    m.unmount();
}
