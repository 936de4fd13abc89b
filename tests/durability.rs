//! What is durable when (issue 38, point 8), exactly as README's "Semantics and limits"
//! promises it, on the configs users get: the defaults (whole files, automatic staging
//! memory), stripes with staging memory, and no staging memory at all.
//!
//! - after `fsync` returns: every byte survives `kill -9` of the daemon;
//! - after `close`, then a clean unmount (`tierfs unmount`, `umount`): every byte;
//! - after `close` and a `flush` command (or `writeback_delay` seconds): survives `kill -9`;
//! - after `close` alone, `kill -9` of the daemon: with no staging memory every byte (it
//!   was on the tier's file system when `write` returned); with staging memory the file is
//!   as of its last write-back: here, new and never written back, empty. Never other bytes.
//!
//! README used to say "No acknowledged write is lost", while `echo data > f; kill -9`
//! then `mount --force` gave 0 bytes: a write is *acknowledged* durable by fsync.
mod common;
use common::*;
use std::io::Write;

fn kill9(pid: u32) {
    // SAFETY: kill(2) with a pid and a signal number; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    assert!(
        wait_for(20, || !std::path::Path::new(&format!("/proc/{pid}"))
            .exists()),
        "the daemon did not die"
    );
}

fn write_file(path: &std::path::Path, data: &[u8], fsync: bool) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(data).unwrap();
    if fsync {
        f.sync_all().unwrap();
    }
}

/// One config: (what, layout, staging memory on).
fn run(what: &str, layout: &str, staging: bool) {
    let mut s = Setup::two(layout);
    if staging {
        s.auto_staging = true;
    } else {
        s.extra = "[cache]\nsize = \"off\"\n".into();
    }
    let data = |seed: u64| pattern(3 * MIB + 777, seed);
    let m = s.mount();
    write_file(&m.path("fsynced"), &data(1), true);
    write_file(&m.path("closed"), &data(2), false);
    m.unmount();
    let m = s.mount();
    assert!(
        std::fs::read(m.path("closed")).unwrap() == data(2),
        "{what}: closed, then unmounted"
    );
    write_file(&m.path("flushed"), &data(3), false);
    std::fs::write(m.path(".tierfs/control"), b"flush\n").unwrap();
    write_file(&m.path("fsynced2"), &data(4), true);
    write_file(&m.path("unsynced"), &data(5), false);
    let pid = m.daemon_pid();
    m.disarm();
    kill9(pid);
    let o = s.mount_output(&["--force"]);
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let m = s.adopt();
    for (name, seed) in [
        ("fsynced", 1),
        ("closed", 2),
        ("flushed", 3),
        ("fsynced2", 4),
    ] {
        assert!(
            std::fs::read(m.path(name)).unwrap() == data(seed),
            "{what}: {name} lost bytes after kill -9"
        );
    }
    let unsynced = std::fs::read(m.path("unsynced")).unwrap();
    if staging {
        assert!(
            unsynced == data(5) || unsynced.is_empty(),
            "{what}: an unsynced file holds other bytes than it was given ({} bytes)",
            unsynced.len()
        );
    } else {
        assert!(
            unsynced == data(5),
            "{what}: no staging memory, yet lost a closed file"
        );
    }
    m.unmount();
}

#[test]
fn what_is_durable_when() {
    require!(fuse());
    run("defaults (whole files, staging memory)", "whole-file", true);
    run("stripes with staging memory", "stripe", true);
    run("no staging memory", "stripe", false);
}
