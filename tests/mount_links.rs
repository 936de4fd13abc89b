//! Hard links through a real mount, both layouts: link counts, ctime, data shared between
//! the names, unlink and rename of one name, what a remount keeps, the rule for a link
//! cut short between the tiers, and the offline tools (fsck clean, export keeps links).
mod common;
use common::*;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

fn err_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    errno(&r.expect_err("the call should fail"))
}

fn ctime(p: &Path) -> (i64, i64) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.ctime(), m.ctime_nsec())
}

fn ino(p: &Path) -> u64 {
    fs::symlink_metadata(p).unwrap().ino()
}

fn nlink(p: &Path) -> u64 {
    fs::symlink_metadata(p).unwrap().nlink()
}

/// 3 MiB: with the 1 MiB stripe unit of the harness, a striped file has a piece on each
/// tier.
const SIZE: usize = 3 * MIB;

/// Tiers holding `rel`, and for each the backing inode (the names of one file must share
/// them).
fn backing_inodes(s: &Setup, rel: &str) -> Vec<(usize, u64)> {
    s.tiers_holding(rel)
        .into_iter()
        .map(|t| (t, ino(&s.backing(t, rel))))
        .collect()
}

#[test]
fn link_shares_data_and_counts_names() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let data = pattern(SIZE, 3);
        fs::write(m.path("f"), &data).unwrap();
        fs::create_dir(m.path("d")).unwrap();
        let before = (ctime(&m.path("f")), ctime(&m.path("d")));
        std::thread::sleep(Duration::from_millis(20));
        fs::hard_link(m.path("f"), m.path("d/g")).unwrap();
        // One inode, two names; the inode's ctime and the folder's times changed.
        assert_eq!(ino(&m.path("f")), ino(&m.path("d/g")), "{layout}");
        assert_eq!((nlink(&m.path("f")), nlink(&m.path("d/g"))), (2, 2));
        assert!(
            ctime(&m.path("f")) > before.0,
            "{layout}: link changes ctime"
        );
        assert!(ctime(&m.path("d")) > before.1, "{layout}: and the folder's");
        // On the tiers: every piece has the new name, a link of the same backing inode.
        let pieces = backing_inodes(&s, "f");
        if layout == "stripe" {
            assert_eq!(pieces.len(), 2, "{layout}: a piece on each tier");
        }
        assert_eq!(backing_inodes(&s, "d/g"), pieces, "{layout}");
        // Bytes written through one name are read through the other, open or not.
        let mut other = pattern(MIB, 9);
        let f = fs::OpenOptions::new()
            .write(true)
            .open(m.path("d/g"))
            .unwrap();
        pwrite_exact(&f, &other, MIB as u64).unwrap();
        let reader = fs::File::open(m.path("f")).unwrap();
        let mut buf = vec![0u8; MIB];
        pread_upto(&reader, &mut buf, MIB as u64).unwrap();
        assert_eq!(buf, other, "{layout}: a write through g is read through f");
        drop((f, reader));
        let mut want = data.clone();
        want[MIB..2 * MIB].swap_with_slice(&mut other);
        assert_eq!(fs::read(m.path("f")).unwrap(), want);
        // A chmod through one name shows in the other (one inode).
        fs::set_permissions(
            m.path("f"),
            std::os::unix::fs::PermissionsExt::from_mode(0o640),
        )
        .unwrap();
        assert_eq!(fs::metadata(m.path("d/g")).unwrap().mode() & 0o777, 0o640);
        // The errors of link(2).
        assert_eq!(
            err_of(fs::hard_link(m.path("f"), m.path("d/g"))),
            libc::EEXIST
        );
        assert_eq!(
            err_of(fs::hard_link(m.path("d"), m.path("d2"))),
            libc::EPERM
        );
        assert_eq!(
            err_of(fs::hard_link(m.path("nope"), m.path("x"))),
            libc::ENOENT
        );
        assert_eq!(
            err_of(fs::hard_link(m.path("f"), m.path("nope/x"))),
            libc::ENOENT
        );
        // Unlink of the primary name: the other keeps the file and its bytes; no piece of
        // the removed name is left on any tier.
        let before = ctime(&m.path("d/g"));
        std::thread::sleep(Duration::from_millis(20));
        fs::remove_file(m.path("f")).unwrap();
        assert_eq!(nlink(&m.path("d/g")), 1);
        assert!(
            ctime(&m.path("d/g")) > before,
            "{layout}: unlink changes ctime"
        );
        assert!(s.tiers_holding("f").is_empty(), "{layout}");
        assert_eq!(fs::read(m.path("d/g")).unwrap(), want);
        assert_no_stale(&m);
        m.unmount();
    }
}

/// rename onto a name of a file with several names: that name goes (the file keeps the
/// others, its count one less and its ctime new); renaming one of its names moves only
/// that one; two names of one file rename to nothing.
#[test]
fn rename_of_and_onto_linked_names() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let (a, b) = (pattern(SIZE, 1), pattern(SIZE, 2));
        fs::write(m.path("x"), &a).unwrap();
        fs::hard_link(m.path("x"), m.path("y")).unwrap();
        fs::write(m.path("src"), &b).unwrap();
        let before = ctime(&m.path("x"));
        std::thread::sleep(Duration::from_millis(20));
        fs::rename(m.path("src"), m.path("y")).unwrap();
        assert_eq!(nlink(&m.path("x")), 1, "{layout}");
        assert!(ctime(&m.path("x")) > before, "{layout}: the target's ctime");
        assert_eq!(fs::read(m.path("y")).unwrap(), b);
        assert_eq!(fs::read(m.path("x")).unwrap(), a);
        assert_ne!(ino(&m.path("x")), ino(&m.path("y")));
        // Rename of a non-primary name of a linked file.
        fs::create_dir(m.path("d")).unwrap();
        fs::hard_link(m.path("x"), m.path("x2")).unwrap();
        fs::rename(m.path("x2"), m.path("d/x3")).unwrap();
        assert_eq!(ino(&m.path("d/x3")), ino(&m.path("x")));
        assert_eq!(nlink(&m.path("x")), 2);
        assert_eq!(backing_inodes(&s, "d/x3"), backing_inodes(&s, "x"));
        assert!(s.tiers_holding("x2").is_empty());
        // Rename of one name onto another of the same file does nothing.
        fs::rename(m.path("x"), m.path("d/x3")).unwrap();
        assert!(m.path("x").exists() && m.path("d/x3").exists());
        assert_eq!(nlink(&m.path("x")), 2);
        // Then the primary name is renamed; the other name still reads the bytes.
        fs::rename(m.path("x"), m.path("d/x4")).unwrap();
        assert_eq!(fs::read(m.path("d/x3")).unwrap(), a);
        assert_eq!(backing_inodes(&s, "d/x4"), backing_inodes(&s, "d/x3"));
        m.unmount();
    }
}

/// Symlinks and special files (first tier only) take links too.
#[test]
fn links_of_symlinks_and_fifos() {
    require!(fuse());
    let s = Setup::two("stripe");
    let m = s.mount();
    std::os::unix::fs::symlink("target", m.path("l")).unwrap();
    let c = std::ffi::CString::new(m.path("p").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (n, l) in [("l", "l2"), ("p", "p2")] {
        // linkat without AT_SYMLINK_FOLLOW: the symlink itself.
        let (a, b) = (
            std::ffi::CString::new(m.path(n).to_str().unwrap()).unwrap(),
            std::ffi::CString::new(m.path(l).to_str().unwrap()).unwrap(),
        );
        // SAFETY: valid paths.
        let r = unsafe { libc::linkat(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), 0) };
        assert_eq!(r, 0, "{n}: {}", std::io::Error::last_os_error());
        assert_eq!(ino(&m.path(n)), ino(&m.path(l)));
        assert_eq!(nlink(&m.path(l)), 2);
        assert_eq!(ino(&s.backing(0, n)), ino(&s.backing(0, l)));
    }
    assert_eq!(fs::read_link(m.path("l2")).unwrap(), Path::new("target"));
    fs::remove_file(m.path("l")).unwrap();
    assert_eq!(nlink(&m.path("l2")), 1);
    m.unmount();
}

/// A remount finds the names of one file by their backing inodes: one inode, its count.
#[test]
fn a_remount_keeps_the_links() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let data = pattern(SIZE, 5);
        fs::create_dir(m.path("d")).unwrap();
        fs::write(m.path("f"), &data).unwrap();
        fs::hard_link(m.path("f"), m.path("d/g")).unwrap();
        fs::hard_link(m.path("f"), m.path("h")).unwrap();
        m.unmount();
        let m = s.mount();
        assert_eq!(nlink(&m.path("f")), 3, "{layout}");
        assert_eq!(ino(&m.path("f")), ino(&m.path("d/g")), "{layout}");
        assert_eq!(ino(&m.path("f")), ino(&m.path("h")), "{layout}");
        assert_eq!(fs::read(m.path("d/g")).unwrap(), data);
        // The names still work as one file after the remount.
        fs::write(m.path("h"), b"new").unwrap();
        assert_eq!(fs::read(m.path("f")).unwrap(), b"new");
        fs::remove_file(m.path("f")).unwrap();
        assert_eq!(nlink(&m.path("h")), 2);
        let st = m.stats_json();
        assert_eq!(
            st["files"].as_array().unwrap().len(),
            1,
            "{layout}: one file"
        );
        m.unmount();
    }
}

/// The rule for a link (or unlink) cut short between the tiers: a name whose pieces are
/// some of another name's is removed at mount; its bytes live on under the other name.
#[test]
fn a_link_cut_short_between_tiers_is_removed_at_mount() {
    require!(fuse());
    let s = Setup::two("stripe");
    let m = s.mount();
    let data = pattern(SIZE, 8);
    fs::write(m.path("f"), &data).unwrap();
    m.unmount();
    assert_eq!(s.tiers_holding("f"), vec![0, 1]);
    // The first tier's link made, the second's not.
    fs::hard_link(s.backing(0, "f"), s.backing(0, "partial")).unwrap();
    // A whole link on both tiers, made by hand, is a second name.
    for t in 0..2 {
        fs::hard_link(s.backing(t, "f"), s.backing(t, "full")).unwrap();
    }
    let m = s.mount();
    assert!(!m.path("partial").exists(), "the partial name is removed");
    assert!(!s.backing(0, "partial").exists());
    assert!(
        !s.backing(1, "partial").exists(),
        "and no empty piece made for it"
    );
    assert_eq!(nlink(&m.path("f")), 2);
    assert_eq!(ino(&m.path("full")), ino(&m.path("f")));
    assert_eq!(fs::read(m.path("f")).unwrap(), data);
    let log = fs::read_to_string(s.log_path()).unwrap();
    assert!(log.contains("cut short"), "{log}");
    m.unmount();
}

/// fsck finds a linked file clean; export makes the names links in the copy.
#[test]
fn fsck_is_clean_and_export_keeps_links() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let data = pattern(SIZE, 4);
        fs::create_dir(m.path("d")).unwrap();
        fs::write(m.path("f"), &data).unwrap();
        fs::hard_link(m.path("f"), m.path("d/g")).unwrap();
        m.unmount();
        let cfg = s.write_config();
        let o = s.tierfs(&["fsck", "--config", cfg.to_str().unwrap()]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{layout}: {out}");
        assert!(
            out.contains("clean") && out.contains("1 files"),
            "{layout}: {out}"
        );
        assert!(out.contains("1 more names (hard links)"), "{layout}: {out}");
        let dest = s.dir.path().join("export");
        let o = s.tierfs(&[
            "export",
            "--config",
            cfg.to_str().unwrap(),
            dest.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{layout}: {o:?}");
        assert_eq!(ino(&dest.join("f")), ino(&dest.join("d/g")), "{layout}");
        assert_eq!(nlink(&dest.join("f")), 2);
        assert_eq!(fs::read(dest.join("d/g")).unwrap(), data);
    }
}

/// A file with several names moves off a full tier like a file with one (the ENOSPC
/// rescue): the write succeeds and every name follows it, still one file on the tiers,
/// and after a remount.
#[test]
fn a_linked_file_moves_off_a_full_tier_with_every_name() {
    require!(fuse());
    let s = Setup::new(
        vec![
            TierSpec::new("fast", "2GB/s").capacity("6MiB"),
            TierSpec::new("slow", "1GB/s"),
        ],
        "whole-file",
    );
    let m = s.mount();
    let mut on_fast = Vec::new();
    for i in 0..12 {
        let rel = format!("f{i}");
        fs::write(m.path(&rel), pattern(MIB / 4, i)).unwrap();
        if s.tiers_holding(&rel) == [0] {
            on_fast.push((rel, i));
        }
    }
    assert!(!on_fast.is_empty(), "a file on the capped tier");
    let (linked, seed) = &on_fast[0];
    fs::create_dir(m.path("d")).unwrap();
    fs::hard_link(m.path(linked), m.path("other")).unwrap();
    fs::hard_link(m.path(linked), m.path("d/third")).unwrap();
    let grow = pattern(8 * MIB, 77);
    let f = fs::OpenOptions::new()
        .append(true)
        .open(m.path(linked))
        .unwrap();
    std::io::Write::write_all(&mut &f, &grow).expect("the rescue moves a linked file too");
    drop(f);
    let mut want = pattern(MIB / 4, *seed);
    want.extend_from_slice(&grow);
    for name in [linked.as_str(), "other", "d/third"] {
        assert_eq!(ino(&m.path(name)), ino(&m.path(linked)), "{name}");
        assert_eq!(nlink(&m.path(name)), 3, "{name}");
        assert_eq!(
            s.tiers_holding(name),
            vec![1],
            "{name} did not follow the move"
        );
        assert_eq!(
            backing_inodes(&s, name),
            backing_inodes(&s, linked),
            "{name}"
        );
        assert!(fs::read(m.path(name)).unwrap() == want, "{name}: bytes");
    }
    m.unmount();
    let m = s.mount();
    assert_eq!(
        ino(&m.path("d/third")),
        ino(&m.path(linked)),
        "after a remount"
    );
    assert_eq!(nlink(&m.path("other")), 3);
    assert!(fs::read(m.path("other")).unwrap() == want);
    m.unmount();
}
