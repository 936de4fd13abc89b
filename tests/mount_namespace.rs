//! Namespace and metadata semantics through a real mount: directories, renames across
//! tiers, unlink of open files, truncate/O_TRUNC/O_APPEND/fallocate, attributes, symlinks,
//! xattrs, statfs, copy tools, and what survives a remount (hard links: `mount_links.rs`).
mod common;
use common::*;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn err_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    errno(&r.expect_err("the call should fail"))
}

fn write_file(p: &Path, data: &[u8]) {
    write_ds(p, data, 2, libc::O_TRUNC);
}

#[test]
fn mkdir_rmdir_and_notempty() {
    require!(fuse());
    let s = Setup::two("whole-file");
    let m = s.mount();
    fs::create_dir_all(m.path("a/b/c")).unwrap();
    for i in 0..2 {
        assert!(
            s.backing(i, "a/b/c").is_dir(),
            "folders are mirrored on tier {i}"
        );
    }
    assert_eq!(err_of(fs::create_dir(m.path("a"))), libc::EEXIST);
    fs::write(m.path("a/b/f"), b"x").unwrap();
    assert_eq!(err_of(fs::remove_dir(m.path("a"))), libc::ENOTEMPTY);
    assert_eq!(err_of(fs::remove_dir(m.path("a/b"))), libc::ENOTEMPTY);
    assert_eq!(err_of(fs::remove_dir(m.path("a/b/f"))), libc::ENOTDIR);
    assert_eq!(err_of(fs::remove_file(m.path("a/b/c"))), libc::EISDIR);
    assert_eq!(err_of(fs::remove_dir(m.path("nope"))), libc::ENOENT);
    assert_eq!(err_of(fs::create_dir(m.path("nope/x"))), libc::ENOENT);
    fs::remove_dir(m.path("a/b/c")).unwrap();
    fs::remove_file(m.path("a/b/f")).unwrap();
    fs::remove_dir(m.path("a/b")).unwrap();
    fs::remove_dir(m.path("a")).unwrap();
    assert!(!m.path("a").exists());
    for i in 0..2 {
        assert!(!s.backing(i, "a").exists(), "tier {i} still has a/");
    }
    // Mode of a new folder follows mkdir's mode and the umask.
    fs::create_dir(m.path("d")).unwrap();
    fs::set_permissions(m.path("d"), fs::Permissions::from_mode(0o710)).unwrap();
    assert_eq!(fs::metadata(m.path("d")).unwrap().mode() & 0o777, 0o710);
    // The stats folder cannot be made, removed or renamed.
    assert_eq!(err_of(fs::create_dir(m.path(".tierfs"))), libc::EEXIST);
    assert!(fs::remove_dir(m.path(".tierfs")).is_err());
    assert!(fs::rename(m.path(".tierfs"), m.path("x")).is_err());
    assert_no_stale(&m);
    m.unmount();
}

/// Creates `dir/prefixN` files (1 MiB each) until one sits on each tier; returns the
/// names of one file on tier 0 and one on tier 1.
fn files_on_both_tiers(s: &Setup, m: &Mount<'_>, dir: &str, prefix: &str) -> (String, String) {
    let (mut on0, mut on1) = (None, None);
    for i in 0..16 {
        let rel = if dir.is_empty() {
            format!("{prefix}{i}")
        } else {
            format!("{dir}/{prefix}{i}")
        };
        write_file(&m.path(&rel), &pattern(MIB, i + 7));
        match s.tiers_holding(&rel).as_slice() {
            [0] if on0.is_none() => on0 = Some(rel),
            [1] if on1.is_none() => on1 = Some(rel),
            _ => {}
        }
        if on0.is_some() && on1.is_some() {
            break;
        }
    }
    (
        on0.expect("a file on tier 0"),
        on1.expect("a file on tier 1"),
    )
}

#[test]
fn rename_files_and_folders_across_tiers() {
    require!(fuse());
    let s = Setup::two("whole-file");
    let m = s.mount();
    fs::create_dir_all(m.path("d1")).unwrap();
    fs::create_dir_all(m.path("d2")).unwrap();

    // Within a folder.
    write_file(&m.path("d1/a"), &pattern(3 * MIB + 17, 1));
    fs::rename(m.path("d1/a"), m.path("d1/b")).unwrap();
    assert!(!m.path("d1/a").exists());
    assert_eq!(fs::read(m.path("d1/b")).unwrap(), pattern(3 * MIB + 17, 1));
    // Across folders.
    fs::rename(m.path("d1/b"), m.path("d2/c")).unwrap();
    assert_eq!(fs::read(m.path("d2/c")).unwrap(), pattern(3 * MIB + 17, 1));
    assert!(!listed(&m.path("d1"), "b"));
    assert_no_stale(&m);

    // Over an existing file on the other tier, both ways.
    let (on0, on1) = files_on_both_tiers(&s, &m, "d1", "x");
    let src_data = fs::read(m.path(&on0)).unwrap();
    fs::rename(m.path(&on0), m.path(&on1)).unwrap();
    assert_eq!(fs::read(m.path(&on1)).unwrap(), src_data);
    assert_eq!(
        s.tiers_holding(&on1),
        vec![0],
        "the target's old piece on tier 1 is gone"
    );
    assert!(s.tiers_holding(&on0).is_empty());
    assert_no_stale(&m);
    let (on0, on1) = files_on_both_tiers(&s, &m, "d2", "y");
    let src_data = fs::read(m.path(&on1)).unwrap();
    fs::rename(m.path(&on1), m.path(&on0)).unwrap();
    assert_eq!(fs::read(m.path(&on0)).unwrap(), src_data);
    assert_eq!(s.tiers_holding(&on0), vec![1]);
    assert_no_stale(&m);
    // Over an existing file in another folder, while the target is open: the open handle
    // keeps reading the old data.
    let victim = on0.clone();
    let mut held = fs::File::open(m.path(&victim)).unwrap();
    write_file(&m.path("d1/new"), &pattern(2 * MIB, 99));
    fs::rename(m.path("d1/new"), m.path(&victim)).unwrap();
    let mut old = Vec::new();
    held.read_to_end(&mut old).unwrap();
    assert_eq!(old, src_data);
    drop(held);
    assert_eq!(fs::read(m.path(&victim)).unwrap(), pattern(2 * MIB, 99));

    // A folder holding files on both tiers, renamed and moved into another folder.
    fs::create_dir_all(m.path("dir/sub")).unwrap();
    let (f0, f1) = files_on_both_tiers(&s, &m, "dir/sub", "z");
    let (d0, d1) = (
        fs::read(m.path(&f0)).unwrap(),
        fs::read(m.path(&f1)).unwrap(),
    );
    fs::rename(m.path("dir"), m.path("d2/moved")).unwrap();
    assert!(!m.path("dir").exists());
    let n0 = f0.replacen("dir/", "d2/moved/", 1);
    let n1 = f1.replacen("dir/", "d2/moved/", 1);
    assert_eq!(fs::read(m.path(&n0)).unwrap(), d0);
    assert_eq!(fs::read(m.path(&n1)).unwrap(), d1);
    assert_eq!(s.tiers_holding(&n0), vec![0]);
    assert_eq!(s.tiers_holding(&n1), vec![1]);
    for i in 0..2 {
        assert!(!s.backing(i, "dir").exists(), "tier {i} still has dir/");
        assert!(s.backing(i, "d2/moved/sub").is_dir());
    }
    assert_no_stale(&m);

    // Folder rules.
    fs::create_dir(m.path("empty")).unwrap();
    fs::create_dir(m.path("full")).unwrap();
    fs::write(m.path("full/f"), b"1").unwrap();
    fs::write(m.path("plain"), b"2").unwrap();
    assert_eq!(
        err_of(fs::rename(m.path("empty"), m.path("full"))),
        libc::ENOTEMPTY
    );
    assert_eq!(
        err_of(fs::rename(m.path("plain"), m.path("empty"))),
        libc::EISDIR
    );
    assert_eq!(
        err_of(fs::rename(m.path("empty"), m.path("plain"))),
        libc::ENOTDIR
    );
    assert_eq!(
        err_of(fs::rename(m.path("d2"), m.path("d2/moved/inside"))),
        libc::EINVAL
    );
    fs::rename(m.path("full"), m.path("empty")).unwrap();
    assert_eq!(fs::read(m.path("empty/f")).unwrap(), b"1");
    assert_eq!(
        err_of(rename2(
            &m.path("plain"),
            &m.path("empty/f"),
            libc::RENAME_NOREPLACE
        )),
        libc::EEXIST
    );
    assert_eq!(fs::read(m.path("empty/f")).unwrap(), b"1");
    assert_no_stale(&m);
    m.unmount();
}

/// Files keep their layout across a remount with another layout; a striped file renamed
/// over a whole file (and the other way) leaves no piece behind on any tier.
#[test]
fn rename_between_layouts_after_remount() {
    require!(fuse());
    let mut s = Setup::two("whole-file");
    let (w0, w1) = {
        let m = s.mount();
        let r = files_on_both_tiers(&s, &m, "", "w");
        m.unmount();
        r
    };
    s.layout = "stripe".into();
    let m = s.mount();
    assert_eq!(m.file_entry(&w0).unwrap()["layout"], "whole-file");
    write_file(&m.path("s1"), &pattern(5 * MIB, 11));
    write_file(&m.path("s2"), &pattern(4 * MIB + 5, 12));
    assert_eq!(s.tiers_holding("s1"), vec![0, 1]);
    fs::rename(m.path("s1"), m.path(&w1)).unwrap();
    assert_eq!(fs::read(m.path(&w1)).unwrap(), pattern(5 * MIB, 11));
    assert_eq!(s.tiers_holding(&w1), vec![0, 1]);
    let w0_data = fs::read(m.path(&w0)).unwrap();
    fs::rename(m.path(&w0), m.path("s2")).unwrap();
    assert_eq!(fs::read(m.path("s2")).unwrap(), w0_data);
    assert_eq!(s.tiers_holding("s2"), vec![0]);
    assert_eq!(m.file_entry("s2").unwrap()["layout"], "whole-file");
    assert_no_stale(&m);
    m.unmount();
}

/// Bytes of unlinked-but-referenced pieces waiting in the tiers' limbo folders.
fn limbo_bytes(s: &Setup) -> u64 {
    (0..s.tiers.len())
        .map(|i| {
            std::fs::read_dir(s.tier_path(i).join(".tierfs-meta/limbo"))
                .map(|rd| {
                    rd.flatten()
                        .filter_map(|e| e.metadata().ok())
                        .map(|m| m.len())
                        .sum::<u64>()
                })
                .unwrap_or(0)
        })
        .sum()
}

#[test]
fn unlink_while_open_keeps_data_until_close() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let data = pattern(6 * MIB + 4096, 3);
        write_file(&m.path("f"), &data);
        let before = settled_used(&m).iter().sum::<u64>();
        let f = open_flags(&m.path("f"), libc::O_RDWR | libc::O_DIRECT, 0).unwrap();
        fs::remove_file(m.path("f")).unwrap();
        assert_eq!(err_of(fs::metadata(m.path("f"))), libc::ENOENT);
        assert!(
            s.tiers_holding("f").is_empty(),
            "{layout}: backing name still there"
        );
        // Still readable (and writable) through the open descriptor.
        assert_eq!(f.metadata().unwrap().len(), data.len() as u64);
        let mut back = tierfs::tierio::AlignedBuf::zeroed(data.len());
        assert_eq!(pread_upto(&f, &mut back, 0).unwrap(), data.len());
        assert!(back[..] == data[..], "{layout}: data through the open fd");
        pwrite_exact(&f, &aligned(&pattern(MIB, 4)), 0).unwrap();
        assert_eq!(pread_upto(&f, &mut back[..MIB], 0).unwrap(), MIB);
        assert!(back[..MIB] == pattern(MIB, 4)[..]);
        assert_eq!(
            settled_used(&m).iter().sum::<u64>(),
            before - data.len() as u64
        );
        // The unlinked file's pieces wait in the tiers' limbo folders while it is open (the
        // kernel may still stat or open the inode), and go once it is closed and forgotten.
        assert!(
            limbo_bytes(&s) > 0,
            "{layout}: the unlinked pieces should wait in limbo while open"
        );
        drop(f);
        // Release and forget reach the daemon asynchronously after close.
        assert!(
            wait_for(20, || limbo_bytes(&s) == 0),
            "{layout}: unlinked pieces still in limbo after close: space not released"
        );
        assert_eq!(s.backing_bytes(0) + s.backing_bytes(1), 0);
        assert_no_stale(&m);
        m.unmount();
    }
}

#[test]
fn truncate_otrunc_append() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let p = m.path("t");
        let data = pattern(3 * MIB + 100, 8);
        write_file(&p, &data);
        // Down, through an open file.
        let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(MIB as u64 + 5).unwrap();
        drop(f);
        assert_eq!(fs::metadata(&p).unwrap().len(), MIB as u64 + 5);
        assert_eq!(fs::read(&p).unwrap(), &data[..MIB + 5]);
        // Up, by path (truncate(2)): zeros past the old end.
        let cp = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::truncate(cp.as_ptr(), (5 * MIB) as i64) }, 0);
        let back = fs::read(&p).unwrap();
        assert_eq!(back.len(), 5 * MIB);
        assert_eq!(&back[..MIB + 5], &data[..MIB + 5]);
        assert!(
            back[MIB + 5..].iter().all(|b| *b == 0),
            "{layout}: zeros after truncate up"
        );
        assert_eq!(s.backing_bytes(0) + s.backing_bytes(1), 5 * MIB as u64);
        assert_eq!(settled_used(&m).iter().sum::<u64>(), 5 * MIB as u64);
        // O_TRUNC empties it.
        let mut f = open_flags(&p, libc::O_WRONLY | libc::O_TRUNC, 0).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().len(), 0);
        f.write_all(b"hello ").unwrap();
        drop(f);
        assert_eq!(s.backing_bytes(0) + s.backing_bytes(1), 6);
        // O_APPEND from two handles, across a stripe boundary.
        let mut a = open_flags(&p, libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
        let mut b = open_flags(&p, libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
        a.write_all(b"world").unwrap();
        b.write_all(b", again").unwrap();
        let big = pattern(MIB + 3, 9);
        a.write_all(&big).unwrap();
        b.write_all(b"!").unwrap();
        drop((a, b));
        let mut want = b"hello world, again".to_vec();
        want.extend_from_slice(&big);
        want.push(b'!');
        assert_eq!(fs::read(&p).unwrap(), want, "{layout}: appended");
        assert_eq!(settled_used(&m).iter().sum::<u64>(), want.len() as u64);
        assert_eq!(s.backing_bytes(0) + s.backing_bytes(1), want.len() as u64);
        // Truncate to zero and grow again by writing past the end (a hole).
        fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(0)
            .unwrap();
        let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
        pwrite_exact(&f, b"end", 4 * MIB as u64).unwrap();
        drop(f);
        let back = fs::read(&p).unwrap();
        assert_eq!(back.len(), 4 * MIB + 3);
        assert!(back[..4 * MIB].iter().all(|b| *b == 0));
        assert_eq!(&back[4 * MIB..], b"end");
        assert_no_stale(&m);
        m.unmount();
    }
}

#[test]
fn fallocate_and_fsync() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let p = m.path("fa");
        let data = pattern(2 * MIB, 21);
        write_file(&p, &data);
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        // Mode 0 past the end extends the size.
        fallocate(&f, 0, 2 * MIB as u64, 3 * MIB as u64).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 5 * MIB as u64, "{layout}");
        assert_eq!(fs::metadata(&p).unwrap().len(), 5 * MIB as u64);
        // KEEP_SIZE does not.
        fallocate(
            &f,
            libc::FALLOC_FL_KEEP_SIZE,
            5 * MIB as u64,
            2 * MIB as u64,
        )
        .unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().len(),
            5 * MIB as u64,
            "{layout}: KEEP_SIZE"
        );
        // A punched hole reads as zeros; the rest is intact.
        fallocate(
            &f,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            512 * 1024,
            MIB as u64,
        )
        .unwrap();
        f.sync_all().unwrap();
        f.sync_data().unwrap();
        drop(f);
        let back = fs::read(&p).unwrap();
        assert_eq!(back.len(), 5 * MIB);
        assert_eq!(
            &back[..512 * 1024],
            &data[..512 * 1024],
            "{layout}: before the hole"
        );
        assert!(
            back[512 * 1024..1536 * 1024].iter().all(|b| *b == 0),
            "{layout}: hole"
        );
        assert_eq!(
            &back[1536 * 1024..2 * MIB],
            &data[1536 * 1024..],
            "{layout}: after"
        );
        assert!(
            back[2 * MIB..].iter().all(|b| *b == 0),
            "{layout}: allocated tail"
        );
        assert_eq!(settled_used(&m).iter().sum::<u64>(), 5 * MIB as u64);
        assert_eq!(s.backing_bytes(0) + s.backing_bytes(1), 5 * MIB as u64);
        // fsync of a folder.
        fs::File::open(m.root()).unwrap().sync_all().unwrap();
        // Unsupported modes are refused, not ignored.
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        let e = fallocate(&f, libc::FALLOC_FL_COLLAPSE_RANGE, 0, MIB as u64).unwrap_err();
        assert!(
            [libc::EOPNOTSUPP, libc::EINVAL].contains(&errno(&e)),
            "{layout}: collapse: {e}"
        );
        assert_eq!(fs::metadata(&p).unwrap().len(), 5 * MIB as u64);
        drop(f);
        m.unmount();
    }
}

#[test]
fn chmod_chown_utimens() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        fs::create_dir(m.path("d")).unwrap();
        write_file(&m.path("d/f"), &pattern(3 * MIB, 1));
        std::os::unix::fs::symlink("f", m.path("d/l")).unwrap();
        fs::set_permissions(m.path("d/f"), fs::Permissions::from_mode(0o640)).unwrap();
        fs::set_permissions(m.path("d"), fs::Permissions::from_mode(0o750)).unwrap();
        assert_eq!(fs::metadata(m.path("d/f")).unwrap().mode() & 0o7777, 0o640);
        assert_eq!(fs::metadata(m.path("d")).unwrap().mode() & 0o7777, 0o750);
        for t in s.tiers_holding("d/f") {
            let mode = fs::metadata(s.backing(t, "d/f")).unwrap().mode();
            assert_eq!(mode & 0o7777, 0o640, "{layout}: piece on tier {t}");
        }
        set_times(
            &m.path("d/f"),
            (1_000_000_000, 5),
            (1_500_000_000, 123_456_789),
        )
        .unwrap();
        let md = fs::metadata(m.path("d/f")).unwrap();
        assert_eq!((md.atime(), md.atime_nsec()), (1_000_000_000, 5));
        assert_eq!((md.mtime(), md.mtime_nsec()), (1_500_000_000, 123_456_789));
        set_times(&m.path("d"), (1_100_000_000, 0), (1_200_000_000, 0)).unwrap();
        assert_eq!(fs::metadata(m.path("d")).unwrap().mtime(), 1_200_000_000);
        if !have(is_root(), "chown needs root") {
            m.unmount();
            continue;
        }
        std::os::unix::fs::chown(m.path("d/f"), Some(1234), Some(5678)).unwrap();
        std::os::unix::fs::lchown(m.path("d/l"), Some(4321), Some(8765)).unwrap();
        std::os::unix::fs::chown(m.path("d"), Some(1234), None).unwrap();
        let md = fs::metadata(m.path("d/f")).unwrap();
        assert_eq!((md.uid(), md.gid()), (1234, 5678), "{layout}");
        let md = fs::symlink_metadata(m.path("d/l")).unwrap();
        assert_eq!((md.uid(), md.gid()), (4321, 8765), "{layout}: lchown");
        assert_eq!(fs::metadata(m.path("d")).unwrap().uid(), 1234);
        for t in s.tiers_holding("d/f") {
            let md = fs::metadata(s.backing(t, "d/f")).unwrap();
            assert_eq!(
                (md.uid(), md.gid()),
                (1234, 5678),
                "{layout}: piece on tier {t}"
            );
        }
        // Times survive the chown; data too.
        assert_eq!(fs::metadata(m.path("d/f")).unwrap().mtime(), 1_500_000_000);
        assert_eq!(fs::read(m.path("d/f")).unwrap(), pattern(3 * MIB, 1));
        m.unmount();
    }
}

#[test]
fn symlinks_and_readlink() {
    require!(fuse());
    let s = Setup::two("stripe");
    let m = s.mount();
    fs::create_dir(m.path("d")).unwrap();
    write_file(&m.path("d/target"), &pattern(2 * MIB + 1, 2));
    std::os::unix::fs::symlink("d/target", m.path("rel")).unwrap();
    std::os::unix::fs::symlink(m.path("d/target"), m.path("abs")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/x", m.path("dangling")).unwrap();
    assert_eq!(fs::read_link(m.path("rel")).unwrap(), Path::new("d/target"));
    assert_eq!(fs::read_link(m.path("abs")).unwrap(), m.path("d/target"));
    assert_eq!(
        fs::read_link(m.path("dangling")).unwrap(),
        Path::new("/nonexistent/x")
    );
    assert!(fs::symlink_metadata(m.path("rel"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read(m.path("rel")).unwrap(), pattern(2 * MIB + 1, 2));
    assert_eq!(fs::read(m.path("abs")).unwrap(), pattern(2 * MIB + 1, 2));
    assert_eq!(err_of(fs::read(m.path("dangling"))), libc::ENOENT);
    assert_eq!(err_of(fs::read_link(m.path("d/target"))), libc::EINVAL);
    assert_eq!(
        err_of(std::os::unix::fs::symlink("x", m.path("rel"))),
        libc::EEXIST
    );
    // Symlinks live on the first tier.
    assert!(fs::symlink_metadata(s.backing(0, "rel"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(fs::symlink_metadata(s.backing(1, "rel")).is_err());
    fs::rename(m.path("rel"), m.path("d/rel2")).unwrap();
    assert_eq!(
        fs::read_link(m.path("d/rel2")).unwrap(),
        Path::new("d/target")
    );
    fs::remove_file(m.path("d/rel2")).unwrap();
    assert!(fs::symlink_metadata(s.backing(0, "d/rel2")).is_err());
    assert_no_stale(&m);
    m.unmount();
}

#[test]
fn user_xattrs() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        fs::create_dir(m.path("d")).unwrap();
        write_file(&m.path("d/f"), &pattern(3 * MIB, 4));
        for p in [m.path("d/f"), m.path("d")] {
            assert!(
                list_xattr(&p).unwrap().is_empty(),
                "{layout}: {p:?} lists {:?}",
                list_xattr(&p)
            );
            set_xattr(&p, "user.one", b"1").unwrap();
            set_xattr(&p, "user.big", &pattern(3000, 1)).unwrap();
            set_xattr(&p, "user.empty", b"").unwrap();
            assert_eq!(get_xattr(&p, "user.one").unwrap(), b"1");
            assert_eq!(get_xattr(&p, "user.big").unwrap(), pattern(3000, 1));
            assert_eq!(get_xattr(&p, "user.empty").unwrap(), b"");
            let mut names = list_xattr(&p).unwrap();
            names.sort();
            assert_eq!(names, ["user.big", "user.empty", "user.one"], "{layout}");
            set_xattr(&p, "user.one", b"uno").unwrap();
            assert_eq!(get_xattr(&p, "user.one").unwrap(), b"uno");
            remove_xattr(&p, "user.one").unwrap();
            assert_eq!(err_of(get_xattr(&p, "user.one")), libc::ENODATA);
            assert_eq!(err_of(remove_xattr(&p, "user.one")), libc::ENODATA);
            assert_eq!(err_of(get_xattr(&p, "user.never")), libc::ENODATA);
            // tierfs's own layout xattr is neither visible nor settable.
            assert!(!list_xattr(&p)
                .unwrap()
                .iter()
                .any(|n| n.starts_with("user.tierfs")));
            assert_eq!(err_of(get_xattr(&p, "user.tierfs.layout")), libc::ENODATA);
            let e = set_xattr(
                &p,
                "user.tierfs.layout",
                b"tierfs-layout v1 whole-file tier=1",
            );
            assert!(e.is_err(), "{layout}: user.tierfs.layout was settable");
            assert!(remove_xattr(&p, "user.tierfs.layout").is_err());
        }
        // The layout is intact and data still reads.
        assert_eq!(fs::read(m.path("d/f")).unwrap(), pattern(3 * MIB, 4));
        assert_eq!(m.file_entry("d/f").unwrap()["layout"], layout);
        m.unmount();
        // And after a remount the layout and user xattrs are still right.
        let m = s.mount();
        assert_eq!(m.file_entry("d/f").unwrap()["layout"], layout);
        assert_eq!(
            get_xattr(&m.path("d/f"), "user.big").unwrap(),
            pattern(3000, 1)
        );
        assert_eq!(fs::read(m.path("d/f")).unwrap(), pattern(3 * MIB, 4));
        m.unmount();
    }
}

#[test]
fn statfs_is_the_sum_of_the_tiers() {
    require!(fuse());
    let s = Setup::new(
        vec![
            TierSpec::new("fast", "2GB/s").capacity("64MiB"),
            TierSpec::new("slow", "1GB/s"),
        ],
        "whole-file",
    );
    let m = s.mount();
    let (mb, mavail, mfr) = statvfs(&m.root());
    let (tb, tavail, tfr) = statvfs(&s.tier_path(1));
    let tier_total = tb * tfr;
    let want_blocks = (64 << 20) / 4096 + tier_total / 4096;
    assert_eq!(
        mb * mfr,
        want_blocks * 4096,
        "statfs total: 64 MiB capacity + the slow tier's filesystem"
    );
    // Free space moves with other tests writing to the same disk: compare loosely.
    let want_avail = (64u64 << 20) + tavail * tfr;
    let got_avail = mavail * mfr;
    assert!(
        got_avail.abs_diff(want_avail) < 1 << 30,
        "statfs avail {got_avail} vs tiers {want_avail}"
    );
    // df agrees.
    let out = sh(&format!("df -B1 --output=size {}", q(&m.root())));
    let size: u64 = out.lines().nth(1).unwrap().trim().parse().unwrap();
    assert_eq!(size, mb * mfr);
    // Two uncapped tiers on one filesystem count it twice: a plain sum.
    let s2 = Setup::two("stripe");
    let m2 = s2.mount();
    let (b2, _, f2) = statvfs(&m2.root());
    assert_eq!(b2 * f2, 2 * (tier_total / 4096) * 4096);
    m2.unmount();
    m.unmount();
}

/// A tree with the things copy tools care about.
fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
    fs::write(root.join("zero"), b"").unwrap();
    fs::write(root.join("one"), b"1").unwrap();
    fs::write(root.join("a/page"), pattern(4096, 1)).unwrap();
    fs::write(root.join("a/b/mib"), pattern(MIB + 123, 2)).unwrap();
    fs::write(root.join("a/b/c/big"), pattern(3 * MIB + 7, 3)).unwrap();
    for i in 0..20 {
        fs::write(
            root.join(format!("a/small{i}")),
            pattern(100 * i, 10 + i as u64),
        )
        .unwrap();
    }
    fs::write(root.join("a/b/run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(root.join("a/b/run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("b/mib", root.join("a/link")).unwrap();
}

#[test]
fn cp_tar_rsync_round_trip() {
    require!(fuse());
    let rsync = have(
        which("rsync").is_some(),
        "rsync is not installed; the rsync round trip is left out (apt-get install rsync)",
    );
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let src = s.dir.path().join("src");
        make_tree(&src);
        let out = s.dir.path().join("out");
        fs::create_dir(&out).unwrap();
        let (src_q, mnt, out_q) = (q(&src), q(&m.root()), q(&out));
        // cp -r in and out.
        sh(&format!(
            "cp -r {src_q} {mnt}/cp && diff -r {src_q} {mnt}/cp"
        ));
        sh(&format!(
            "cp -r {mnt}/cp {out_q}/cp && diff -r {src_q} {out_q}/cp"
        ));
        // tar in and out.
        sh(&format!(
            "mkdir {mnt}/tar && tar -C {src_q} -cf - . | tar -C {mnt}/tar -xf - && diff -r {src_q} {mnt}/tar"
        ));
        sh(&format!(
            "mkdir {out_q}/tar && tar -C {mnt}/tar -cf - . | tar -C {out_q}/tar -xf - && diff -r {src_q} {out_q}/tar"
        ));
        // A tar file written into the mount and listed back.
        sh(&format!(
            "tar -C {src_q} -cf {mnt}/tree.tar . && tar -tf {mnt}/tree.tar >/dev/null"
        ));
        if rsync {
            sh(&format!(
                "rsync -a {src_q}/ {mnt}/rsync/ && diff -r {src_q} {mnt}/rsync"
            ));
            sh(&format!(
                "rsync -a {mnt}/rsync/ {out_q}/rsync/ && diff -r {src_q} {out_q}/rsync"
            ));
            // A second rsync finds nothing to do and changes nothing.
            let o = sh(&format!("rsync -ai {src_q}/ {mnt}/rsync/"));
            assert!(o.trim().is_empty(), "{layout}: rsync found changes: {o}");
            // Modes and times survive rsync -a.
            let a = fs::metadata(src.join("a/b/run.sh")).unwrap();
            let b = fs::metadata(m.path("rsync/a/b/run.sh")).unwrap();
            assert_eq!(a.mode(), b.mode());
            assert_eq!(a.mtime(), b.mtime());
        }
        assert!(fs::symlink_metadata(m.path("cp/a/link"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            fs::metadata(m.path("tar/a/b/run.sh")).unwrap().mode() & 0o777,
            0o755
        );
        let used = settled_used(&m);
        let real: Vec<u64> = (0..2).map(|i| s.backing_bytes(i)).collect();
        assert_eq!(used, real, "{layout}");
        assert_no_stale(&m);
        m.unmount();
    }
}

/// Everything written survives unmount and remount with the same config: tree, sizes,
/// bytes (striped holes and truncated-up tails included), symlinks, modes, owners, times
/// and user xattrs; placement carries on afterwards.
fn remount_keeps_everything(layout: &str) {
    require!(fuse());
    let s = Setup::two(layout);
    let (before, files_before, used_before) = {
        let m = s.mount();
        fs::create_dir_all(m.path("a/b/c")).unwrap();
        fs::create_dir(m.path("empty")).unwrap();
        for i in 0..8u64 {
            write_file(
                &m.path(&format!("a/f{i}")),
                &pattern((i as usize + 1) * MIB + 4096, i),
            );
        }
        fs::write(m.path("a/b/zero"), b"").unwrap();
        fs::write(m.path("a/b/odd"), pattern(3 * MIB + 7, 40)).unwrap();
        // A hole: 1 MiB at 0 and 1 MiB at 9 MiB.
        let f = open_flags(
            &m.path("a/b/c/holey"),
            libc::O_WRONLY | libc::O_CREAT | libc::O_DIRECT,
            0o600,
        )
        .unwrap();
        pwrite_exact(&f, &aligned(&pattern(MIB, 41)), 0).unwrap();
        pwrite_exact(&f, &aligned(&pattern(MIB, 42)), 9 * MIB as u64).unwrap();
        drop(f);
        // Truncated up past its data.
        fs::write(m.path("a/b/c/grown"), pattern(MIB + MIB / 2, 43)).unwrap();
        fs::OpenOptions::new()
            .write(true)
            .open(m.path("a/b/c/grown"))
            .unwrap()
            .set_len(7 * MIB as u64 + 3)
            .unwrap();
        std::os::unix::fs::symlink("b/c/holey", m.path("a/link")).unwrap();
        std::os::unix::fs::symlink("/nowhere", m.path("dangling")).unwrap();
        fs::set_permissions(m.path("a/f1"), fs::Permissions::from_mode(0o640)).unwrap();
        fs::set_permissions(m.path("a/b"), fs::Permissions::from_mode(0o750)).unwrap();
        set_xattr(&m.path("a/f1"), "user.note", b"kept").unwrap();
        set_xattr(&m.path("a/b/c/holey"), "user.hole", b"yes").unwrap();
        set_xattr(&m.path("a"), "user.dir", b"d").unwrap();
        set_times(&m.path("a/f2"), (1_000_000_000, 0), (1_234_567_890, 42)).unwrap();
        if have(is_root(), "chown of a file across the remount needs root") {
            std::os::unix::fs::chown(m.path("a/f3"), Some(1000), Some(1000)).unwrap();
        }
        let holey = fs::read(m.path("a/b/c/holey")).unwrap();
        assert_eq!(holey.len(), 10 * MIB);
        assert!(holey[MIB..9 * MIB].iter().all(|b| *b == 0));
        let used = settled_used(&m);
        let st = m.stats_json();
        let r = (snapshot_tree(&m.root()), st["files"].clone(), used);
        assert_no_stale(&m);
        m.unmount();
        r
    };
    let m = s.mount();
    let after = snapshot_tree(&m.root());
    assert_eq!(before.len(), after.len(), "{layout}: number of entries");
    for (b, a) in before.iter().zip(&after) {
        assert!(
            b == a,
            "{layout}: {:?} changed across the remount:\nbefore {:?}\nafter  {:?}",
            b.rel,
            NodeSnap {
                data: b.data.iter().take(16).copied().collect(),
                ..b.clone()
            },
            NodeSnap {
                data: a.data.iter().take(16).copied().collect(),
                ..a.clone()
            }
        );
    }
    assert_eq!(
        m.stats_json()["files"],
        files_before,
        "{layout}: stats.json files"
    );
    assert_eq!(settled_used(&m), used_before, "{layout}: bytes per tier");
    let holey = m.file_entry("a/b/c/holey").unwrap();
    assert_eq!(holey["size"], 10 * MIB as u64);
    if layout == "stripe" {
        assert_eq!(holey["layout"], "stripe");
        assert_eq!(holey["tiers"].as_array().unwrap().len(), 2);
    }
    assert_eq!(
        m.file_entry("a/b/c/grown").unwrap()["size"],
        7 * MIB as u64 + 3
    );
    // A striped file's piece that ends in a hole is shorter on its tier than its share of
    // the file, which stats.json counts as used: drop that file before comparing bytes.
    fs::remove_file(m.path("a/b/c/holey")).unwrap();
    // The mount keeps working: write more, placement follows Eq. 1 overall.
    for i in 0..8u64 {
        write_file(
            &m.path(&format!("after{i}")),
            &pattern((8 - i as usize) * MIB + 4096, 90 + i),
        );
    }
    for i in 0..8u64 {
        assert!(
            read_direct_threads(&m.path(&format!("after{i}")), 2)
                == pattern((8 - i as usize) * MIB + 4096, 90 + i)
        );
    }
    assert_split(&m, 0.55..=0.78, layout);
    assert_no_stale(&m);
    m.unmount();
}

#[test]
fn remount_keeps_everything_whole_file() {
    remount_keeps_everything("whole-file");
}

#[test]
fn remount_keeps_everything_stripe() {
    remount_keeps_everything("stripe");
}

/// Issue #21 bug 5: a file's times are its primary piece's, and a write that touched only
/// stripes on other tiers changed neither mtime nor ctime (also after a remount), so
/// `rsync -a` left a stale backup. Now such a write stamps the primary piece.
#[test]
fn bug_stripe_write_to_a_non_first_tier_piece_leaves_mtime() {
    require!(fuse());
    let s = Setup::two("stripe");
    let pattern_ =
        tierfs::policy::placement::stripe_pattern(&[2.0 / 3.0, 1.0 / 3.0], &[true, true]);
    let slow = pattern_.iter().position(|t| *t != pattern_[0]).unwrap();
    let m = s.mount();
    let size = (slow + 2) * MIB;
    write_file(&m.path("rs"), &pattern(size, 5));
    const OLD: i64 = 1_000_000_000;
    set_times(&m.path("rs"), (OLD, 0), (OLD, 0)).unwrap();
    let ctime0 = fs::metadata(m.path("rs")).unwrap().ctime();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(m.path("rs"))
            .unwrap();
        pwrite_exact(&f, b"z", (slow * MIB + 10) as u64).unwrap();
    }
    let got = || fs::metadata(m.path("rs")).unwrap();
    assert!(
        wait_for(3, || got().mtime() >= before),
        "mtime after a write to stripe {slow}: {}",
        got().mtime()
    );
    assert!(got().ctime() > ctime0, "ctime {} unchanged", got().ctime());
    let mtime = got().mtime();
    m.unmount();
    let m = s.mount();
    assert_eq!(
        fs::metadata(m.path("rs")).unwrap().mtime(),
        mtime,
        "after a remount"
    );
    m.unmount();
}

/// Issue #21 bug 2: `st_blocks` was the first piece's alone, so `du` under-counted a
/// striped file (6 MiB showed 4096K) and GNU `tar --sparse` archived the bytes it took
/// for holes as zeros (a file held only in the host-memory cache had 0 blocks: tar then
/// stores no data at all). Now it is the sum over the pieces, and at least the size for
/// bytes held in memory.
#[test]
fn bug_st_blocks_counts_only_the_first_piece() {
    require!(fuse());
    for cache in [false, true] {
        let mut s = Setup::two("stripe");
        if cache {
            s.extra = "[cache]\nsize = \"64MiB\"\nwriteback_delay = 600.0\n".into();
        }
        let m = s.mount();
        let data = pattern(6 * MIB, 11);
        write_file(&m.path("r"), &data);
        let blocks = fs::metadata(m.path("r")).unwrap().blocks();
        assert!(
            blocks * 512 >= data.len() as u64,
            "cache {cache}: {blocks} blocks for {} bytes",
            data.len()
        );
        if !cache {
            let backing: u64 = s
                .tiers_holding("r")
                .iter()
                .map(|t| fs::metadata(s.backing(*t, "r")).unwrap().blocks())
                .sum();
            assert_eq!(blocks, backing, "the pieces' blocks, summed");
        }
        if which("tar").is_some() {
            let out = s.dir.path().join(format!("untar-{cache}"));
            fs::create_dir(&out).unwrap();
            let cmd = format!(
                "cd {} && tar --sparse -cf - r | tar -xf - -C {}",
                q(&m.root()),
                q(&out)
            );
            sh(&cmd);
            assert!(
                fs::read(out.join("r")).unwrap() == data,
                "cache {cache}: tar --sparse stored data as holes"
            );
        }
        m.unmount();
    }
}

/// Character and block devices: made on the first tier (root only, as the kernel wants
/// CAP_MKNOD), with the mode, owner and device number asked for, through a remount. The
/// mount is `nodev`, so opening one through it is refused by the kernel (EACCES) before
/// tierfs sees the open.
#[test]
fn device_nodes_keep_mode_and_rdev_across_a_remount() {
    use std::os::unix::fs::FileTypeExt;
    require!(fuse());
    require!(root("mknod of a device node needs CAP_MKNOD"));
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let nodes = [
            ("chr", libc::S_IFCHR | 0o640, libc::makedev(1, 3)),
            ("blk", libc::S_IFBLK | 0o600, libc::makedev(7, 200)),
            // A minor above 255 and a major above 255: the split encoding of both.
            ("wide", libc::S_IFCHR | 0o604, libc::makedev(300, 70_000)),
        ];
        for (name, mode, dev) in nodes {
            let c = std::ffi::CString::new(m.path(name).to_str().unwrap()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            let r = unsafe { libc::mknod(c.as_ptr(), mode, dev) };
            assert_eq!(
                r,
                0,
                "{layout}: mknod {name}: {}",
                std::io::Error::last_os_error()
            );
        }
        fs::create_dir(m.path("d")).unwrap();
        let c = std::ffi::CString::new(m.path("d/sub").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFBLK | 0o644, libc::makedev(8, 1)) };
        assert_eq!(r, 0, "{layout}: mknod d/sub");
        std::os::unix::fs::lchown(m.path("chr"), Some(1234), Some(5678)).unwrap();
        let check = |m: &Mount<'_>, when: &str| {
            for (name, mode, dev) in nodes {
                let md = fs::symlink_metadata(m.path(name)).unwrap();
                let ft = md.file_type();
                if mode & libc::S_IFMT == libc::S_IFCHR {
                    assert!(ft.is_char_device(), "{layout} {when}: {name} is {ft:?}");
                } else {
                    assert!(ft.is_block_device(), "{layout} {when}: {name} is {ft:?}");
                }
                assert_eq!(md.mode(), mode, "{layout} {when}: {name} mode");
                assert_eq!(md.rdev(), dev, "{layout} {when}: {name} rdev");
                // The node is on the first tier, the same node.
                let b = fs::symlink_metadata(s.backing(0, name)).unwrap();
                assert_eq!(
                    (b.mode(), b.rdev()),
                    (mode, dev),
                    "{layout} {when}: {name} on tier 0"
                );
                assert!(
                    !s.backing(1, name).exists(),
                    "{layout} {when}: {name} on tier 1"
                );
            }
            let md = fs::symlink_metadata(m.path("chr")).unwrap();
            assert_eq!((md.uid(), md.gid()), (1234, 5678), "{layout} {when}: owner");
            let md = fs::symlink_metadata(m.path("d/sub")).unwrap();
            assert!(md.file_type().is_block_device() && md.rdev() == libc::makedev(8, 1));
            // nodev: the kernel refuses the open itself.
            assert_eq!(
                err_of(fs::File::open(m.path("chr"))),
                libc::EACCES,
                "{layout} {when}"
            );
        };
        check(&m, "made");
        m.unmount();
        let m = s.mount();
        check(&m, "after a remount");
        fs::set_permissions(m.path("blk"), fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            fs::symlink_metadata(m.path("blk")).unwrap().mode(),
            libc::S_IFBLK | 0o644
        );
        fs::rename(m.path("blk"), m.path("d/blk2")).unwrap();
        assert_eq!(
            fs::symlink_metadata(m.path("d/blk2")).unwrap().rdev(),
            libc::makedev(7, 200)
        );
        for n in ["chr", "wide", "d/blk2", "d/sub"] {
            fs::remove_file(m.path(n)).unwrap();
            assert!(!s.backing(0, n).exists(), "{layout}: {n} left on tier 0");
        }
        assert_no_stale(&m);
        m.unmount();
    }
}

/// Folders of 100-byte names below `root` up to a path of exactly `total` bytes (the file
/// name takes the rest); returns the folder and the file name.
fn deep_path(root: &Path, total: usize) -> (std::path::PathBuf, String) {
    let mut dir = root.to_path_buf();
    let mut i = 0;
    while total - dir.as_os_str().len() > 1 + 100 + 1 + 100 {
        dir.push(format!("{i:03}{}", "d".repeat(97)));
        i += 1;
    }
    let name = "f".repeat(total - dir.as_os_str().len() - 1);
    assert_eq!(dir.join(&name).as_os_str().len(), total);
    (dir, name)
}

/// A path of PATH_MAX - 1 bytes through the mount (the longest the kernel takes) is longer
/// than PATH_MAX on the tiers (`<tier>/data/` is longer than the mountpoint): every call
/// reaches it relative to the tier folder, in steps. Created, written, read, renamed,
/// stat'ed, xattr'd, kept through a remount and unlinked, both layouts.
fn path_max_minus_one(layout: &str) {
    use tierfs::tier::beneath::Beneath;
    require!(fuse());
    let s = Setup::two(layout);
    let m = s.mount();
    let max = libc::PATH_MAX as usize - 1;
    let (dir, name) = deep_path(&m.root(), max);
    fs::create_dir_all(&dir).unwrap();
    let f = dir.join(&name);
    let rel = f.strip_prefix(m.root()).unwrap().to_path_buf();
    assert!(
        s.backing(0, rel.to_str().unwrap()).as_os_str().len() > max,
        "the backing path must be over the limit for the test to mean anything"
    );
    // Three stripes' worth: both tiers hold a piece of a striped file.
    let data = pattern(3 * MIB + 123, 7);
    write_file(&f, &data);
    assert_eq!(fs::read(&f).unwrap(), data, "{layout}: read back");
    let md = fs::metadata(&f).unwrap();
    assert_eq!(md.len(), data.len() as u64);
    let on_tier = |i: usize, p: &Path| {
        let t = s.tier_path(i);
        Beneath::new(&t).stat(&t.join("data").join(p)).ok()
    };
    let holding: Vec<usize> = (0..2).filter(|i| on_tier(*i, &rel).is_some()).collect();
    if layout == "stripe" {
        assert_eq!(
            holding,
            vec![0, 1],
            "a striped file has a piece on each tier"
        );
    } else {
        assert_eq!(holding.len(), 1, "a whole file sits on one tier");
    }
    fs::set_permissions(&f, fs::Permissions::from_mode(0o604)).unwrap();
    // SAFETY: geteuid cannot fail.
    let mut uid = unsafe { libc::geteuid() };
    if have(is_root(), "chown to another user needs root") {
        std::os::unix::fs::lchown(&f, Some(4321), None).unwrap();
        uid = 4321;
    }
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_234_567);
    fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let md = fs::metadata(&f).unwrap();
    assert_eq!(
        (md.mode() & 0o7777, md.uid(), md.mtime()),
        (0o604, uid, 1_234_567)
    );
    set_xattr(&f, "user.deep", b"value").unwrap();
    assert_eq!(get_xattr(&f, "user.deep").unwrap(), b"value");
    assert!(list_xattr(&f).unwrap().contains(&"user.deep".to_string()));
    // A rename to a name as long: the new path is PATH_MAX - 1 bytes too.
    let g = dir.join("g".repeat(name.len()));
    fs::rename(&f, &g).unwrap();
    assert_eq!(err_of(fs::metadata(&f)), libc::ENOENT);
    assert_eq!(fs::read(&g).unwrap(), data, "{layout}: after the rename");
    // A symlink and a folder at the bottom.
    let l = dir.join("l".repeat(name.len()));
    std::os::unix::fs::symlink("target", &l).unwrap();
    assert_eq!(fs::read_link(&l).unwrap(), Path::new("target"));
    m.unmount();

    // The offline tools reach the tiers the same way: fsck finds nothing wrong, export
    // (into a folder whose path is shorter than the mountpoint's) copies it whole.
    let cfg = s.config_path();
    let out = s.tierfs(&["fsck", "--config", cfg.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{layout}: fsck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let dest = s.dir.path().join("e");
    let out = s.tierfs(&[
        "export",
        "--config",
        cfg.to_str().unwrap(),
        dest.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{layout}: export: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exported = dest.join(g.strip_prefix(s.mountpoint()).unwrap());
    assert_eq!(fs::read(&exported).unwrap(), data, "{layout}: exported");
    let md = fs::metadata(&exported).unwrap();
    assert_eq!(
        (md.mode() & 0o7777, md.mtime()),
        (0o604, 1_234_567),
        "{layout}: exported"
    );
    assert_eq!(get_xattr(&exported, "user.deep").unwrap(), b"value");
    assert_eq!(
        fs::read_link(dest.join(l.strip_prefix(s.mountpoint()).unwrap())).unwrap(),
        Path::new("target")
    );

    let m = s.mount();
    assert_eq!(fs::read(&g).unwrap(), data, "{layout}: after a remount");
    let md = fs::metadata(&g).unwrap();
    assert_eq!(
        (md.mode() & 0o7777, md.uid(), md.mtime()),
        (0o604, uid, 1_234_567)
    );
    assert_eq!(get_xattr(&g, "user.deep").unwrap(), b"value");
    remove_xattr(&g, "user.deep").unwrap();
    assert!(get_xattr(&g, "user.deep").is_err());
    assert_eq!(fs::read_link(&l).unwrap(), Path::new("target"));
    fs::remove_file(&l).unwrap();
    // Truncate through a path (no open piece) and unlink.
    fs::File::options()
        .write(true)
        .open(&g)
        .unwrap()
        .set_len(10)
        .unwrap();
    assert_eq!(fs::read(&g).unwrap(), &data[..10]);
    fs::remove_file(&g).unwrap();
    let grel = g.strip_prefix(m.root()).unwrap();
    for i in 0..2 {
        assert!(
            on_tier(i, grel).is_none(),
            "{layout}: piece left on tier {i}"
        );
        let drel = dir.strip_prefix(m.root()).unwrap();
        assert!(
            on_tier(i, drel).unwrap().is_dir(),
            "{layout}: folders mirrored on tier {i}"
        );
    }
    // The whole chain comes down.
    let top = m.path("000");
    let first = fs::read_dir(m.root())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("000"))
        .unwrap_or(top);
    fs::remove_dir_all(&first).unwrap();
    assert!(!first.exists());
    assert_no_stale(&m);
    m.unmount();
}

#[test]
fn path_max_minus_one_whole_file() {
    path_max_minus_one("whole-file");
}

#[test]
fn path_max_minus_one_stripe() {
    path_max_minus_one("stripe");
}
