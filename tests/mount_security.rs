//! Who may do what through a mount, and that nothing reaches outside the tier folders.
//!
//! - A mount is private to its owner: without `allow_other` another user (root included)
//!   gets EACCES, whether root or an ordinary user (through fusermount3) mounted it.
//! - With `allow_other` (tierfs always mounts with `default_permissions`) modes and owners
//!   are enforced for other users: a 0600 file of another user gives EACCES, chmod/chown of
//!   another user's file EPERM, and a new file belongs to its creator, on the tier too.
//! - The `.tierfs/` files cannot be written, removed or renamed, by anyone.
//! - Symlinks: operations through tierfs on a symlink name change the link, never its
//!   target; a symlink planted in a tier folder (for a file's piece, or for a folder) is not
//!   followed by the daemon; `..` and `/` in names never reach the core's tier paths.
//!
//! Runs as root (CI) and acts as the user `tierfs-test` (see .ci/run) with setpriv/runuser;
//! skip (`require!`) where /dev/fuse, root, the user or fusermount3 is missing.
mod common;
use common::*;
use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const USER: &str = "tierfs-test";

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// What acting as the test user needs: FUSE, root, the user, and setpriv or runuser.
fn as_test_user() -> Result<(), String> {
    fuse()?;
    root(&format!(
        "the security tests run as root, acting as user {USER}"
    ))?;
    user(USER)?;
    if which("setpriv").is_none() && which("runuser").is_none() {
        return Err("neither setpriv nor runuser is installed (util-linux)".into());
    }
    Ok(())
}

/// The test user's (uid, gid); call after `require!(as_test_user())`.
fn test_user() -> (u32, u32) {
    user_ids(USER).expect("the test user")
}

/// `cmd` as the user must fail with `why` ("Permission denied" = EACCES, "Operation not
/// permitted" = EPERM) in its message.
#[track_caller]
fn user_fails(what: &str, cmd: &str, why: &str) {
    let o = as_user(USER, cmd);
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains(why),
        "{what}: `{cmd}` as {USER} should fail with {why:?}, got {}:\n{t}",
        o.status
    );
}

#[track_caller]
fn user_ok(what: &str, cmd: &str) -> String {
    let o = as_user(USER, cmd);
    assert!(
        o.status.success(),
        "{what}: `{cmd}` as {USER} failed:\n{}",
        text(&o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Unmounts (as root, lazily) whatever is still mounted at a path when dropped.
struct Unmounter(PathBuf);

impl Drop for Unmounter {
    fn drop(&mut self) {
        if tierfs::daemon::is_mountpoint(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// A root mount without allow_other: the user cannot even look.
#[test]
fn root_mount_is_private_by_default() {
    require!(as_test_user());
    let s = Setup::two("whole-file");
    let m = s.mount();
    std::fs::write(m.path("f"), b"root's").unwrap();
    std::fs::set_permissions(m.path("f"), std::fs::Permissions::from_mode(0o644)).unwrap();
    // The temp dir is 0700; let the user reach the mountpoint.
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mp = q(&m.root());
    user_ok(
        "the mountpoint's parent is searchable",
        &format!("test -d {}", q(s.dir.path())),
    );
    for (what, cmd) in [
        ("stat", format!("stat {mp}")),
        ("ls", format!("ls {mp}")),
        ("read a 0644 file", format!("cat {mp}/f")),
        ("create", format!("echo x > {mp}/new")),
        ("stats", format!("cat {mp}/.tierfs/stats.json")),
    ] {
        user_fails(what, &cmd, "Permission denied");
    }
    assert!(!m.path("new").exists());
    m.unmount();
}

/// A user's own mount (through fusermount3) without allow_other: root gets EACCES too.
#[test]
fn user_mount_is_private_to_its_owner() {
    require!(as_test_user());
    let (uid, gid) = test_user();
    require!(tool("fusermount3", "apt-get install fuse3"));
    let s = Setup::two("whole-file");
    s.write_config();
    let bin = s.dir.path().join("tierfs");
    std::fs::copy(tierfs_bin(), &bin).unwrap();
    sh(&format!("chown -R {uid}:{gid} {}", q(s.dir.path())));
    let mp = s.mountpoint();
    let _guard = Unmounter(mp.clone());
    user_ok(
        "mount",
        &format!(
            "{} mount --config {} {}",
            q(&bin),
            q(&s.config_path()),
            q(&mp)
        ),
    );
    let mpq = q(&mp);
    user_ok(
        "write",
        &format!("echo mine > {mpq}/f && chmod 644 {mpq}/f"),
    );
    // Root is another user here.
    for (what, r) in [
        ("stat", std::fs::metadata(mp.join("f")).map(|_| ())),
        ("read", std::fs::read(mp.join("f")).map(|_| ())),
        ("readdir", std::fs::read_dir(&mp).map(|_| ())),
        ("create", std::fs::write(mp.join("root-was-here"), b"x")),
    ] {
        let e = r.expect_err(what);
        assert_eq!(
            errno(&e),
            libc::EACCES,
            "root's {what} of a user's mount: {e}"
        );
    }
    user_ok("unmount", &format!("{} unmount {mpq}", q(&bin)));
    assert!(!tierfs::daemon::is_mountpoint(&mp));
    assert!(s.tiers_holding("root-was-here").is_empty());
}

/// Issue 38, point 5: on a root mount with `allow_other`, `.tierfs/files` and `stats.json`
/// were 0444 and listed a file in a 0700 folder (name, size, layout, tier) to any user. The
/// views that list files are now the owner's (0400), `stats.json` shows others only its
/// counters, and the counters (`tiers`, `metrics`) stay public.
#[test]
fn names_in_the_stats_views_do_not_leak_to_other_users() {
    require!(as_test_user());
    let mut s = Setup::two("whole-file");
    s.extra = "allow_other = true\n".into();
    let m = s.mount();
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(m.path("private")).unwrap();
    std::fs::set_permissions(m.path("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(m.path("private/topsecret-plan.txt"), b"plan").unwrap();
    let st = q(&m.root().join(".tierfs"));
    user_fails(
        "ls of the 0700 folder",
        &format!("ls {}", q(&m.path("private"))),
        "Permission denied",
    );
    for view in ["files", "cache"] {
        user_fails(view, &format!("cat {st}/{view}"), "Permission denied");
    }
    let json = user_ok("stats.json", &format!("cat {st}/stats.json"));
    assert!(
        !json.contains("topsecret"),
        "stats.json names the file to others:\n{json}"
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["file_count"], 1, "the counters are there: {json}");
    for view in ["tiers", "metrics"] {
        let out = user_ok(view, &format!("cat {st}/{view}"));
        assert!(!out.contains("topsecret"), "{view}:\n{out}");
    }
    // The owner (root here) sees every name.
    assert!(std::fs::read_to_string(m.root().join(".tierfs/files"))
        .unwrap()
        .contains("topsecret"));
    assert!(m.stats_json().to_string().contains("topsecret"));
    m.unmount();
}

/// allow_other + default_permissions: permission bits and ownership hold for other users.
#[test]
fn allow_other_enforces_modes_and_owners() {
    require!(as_test_user());
    let (uid, gid) = test_user();
    for layout in ["whole-file", "stripe"] {
        let mut s = Setup::two(layout);
        s.extra = "allow_other = true\n".into();
        // `extra` lands after [mount]'s log_file line.
        let m = s.mount();
        std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mp = q(&m.root());
        std::fs::write(m.path("secret"), b"root only").unwrap();
        std::fs::set_permissions(m.path("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(m.path("public"), b"everyone reads").unwrap();
        std::fs::set_permissions(m.path("public"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::create_dir(m.path("home")).unwrap();
        std::os::unix::fs::chown(m.path("home"), Some(uid), Some(gid)).unwrap();

        assert_eq!(
            user_ok("read 0644", &format!("cat {mp}/public")),
            "everyone reads"
        );
        user_fails(
            "read 0600 of root",
            &format!("cat {mp}/secret"),
            "Permission denied",
        );
        user_fails(
            "write 0644 of root",
            &format!("echo x >> {mp}/public"),
            "Permission denied",
        );
        user_fails(
            "truncate of root's file",
            &format!("truncate -s 0 {mp}/public"),
            "Permission denied",
        );
        user_fails(
            "chmod of root's file",
            &format!("chmod 666 {mp}/public"),
            "Operation not permitted",
        );
        user_fails(
            "chown of root's file",
            &format!("chown {uid} {mp}/public"),
            "Operation not permitted",
        );
        user_fails(
            "utimes of root's file",
            &format!("touch -h -d 2001-01-01 {mp}/public"),
            "Operation not permitted",
        );
        user_fails(
            "unlink in root's folder",
            &format!("rm -f {mp}/public"),
            "Permission denied",
        );
        user_fails(
            "rename in root's folder",
            &format!("mv {mp}/public {mp}/home/p"),
            "Permission denied",
        );
        user_fails(
            "create in root's folder",
            &format!("echo x > {mp}/mine"),
            "Permission denied",
        );
        assert_eq!(std::fs::read(m.path("public")).unwrap(), b"everyone reads");
        assert_eq!(std::fs::read(m.path("secret")).unwrap(), b"root only");
        let md = std::fs::metadata(m.path("public")).unwrap();
        assert_eq!((md.mode() & 0o7777, md.uid()), (0o644, 0));

        // The stats files: read, never written.
        user_ok(
            "read stats",
            &format!("cat {mp}/.tierfs/stats.json > /dev/null"),
        );
        user_fails(
            "write stats",
            &format!("echo x > {mp}/.tierfs/stats.json"),
            "Permission denied",
        );
        user_fails(
            "create in .tierfs",
            &format!("echo x > {mp}/.tierfs/new"),
            "Permission denied",
        );
        user_fails(
            "unlink stats",
            &format!("rm -f {mp}/.tierfs/stats.json"),
            "Permission denied",
        );

        // The user's own file in its folder: theirs, on every tier holding it.
        user_ok(
            "own file",
            &format!("echo mine > {mp}/home/f && chmod 600 {mp}/home/f && cat {mp}/home/f"),
        );
        let md = std::fs::metadata(m.path("home/f")).unwrap();
        assert_eq!((md.uid(), md.gid(), md.mode() & 0o777), (uid, gid, 0o600));
        settle(&m);
        let on = s.tiers_holding("home/f");
        assert!(!on.is_empty());
        for t in on {
            let b = std::fs::metadata(s.backing(t, "home/f")).unwrap();
            assert_eq!((b.uid(), b.gid()), (uid, gid), "home/f on tier {t}");
        }
        user_fails(
            "give a file to root",
            &format!("chown 0 {mp}/home/f"),
            "Operation not permitted",
        );
        // Root may, as on any file system.
        std::os::unix::fs::chown(m.path("home/f"), Some(0), Some(0)).unwrap();
        user_fails(
            "read own file now root's",
            &format!("cat {mp}/home/f"),
            "Permission denied",
        );
        m.unmount();
    }
}

// ---------------------------------------------------------------------------------------
// Nothing reaches outside the tiers.

/// A file outside every tier that must stay as it is: (path, bytes, mode, uid, mtime).
struct Victim {
    dir: PathBuf,
    file: PathBuf,
}

impl Victim {
    fn new(s: &Setup) -> Victim {
        let dir = s.dir.path().join("victim");
        std::fs::create_dir(&dir).unwrap();
        let file = dir.join("target");
        std::fs::write(&file, b"do not touch").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        set_times(&file, (1_000_000_000, 0), (1_000_000_000, 0)).unwrap();
        Victim { dir, file }
    }

    #[track_caller]
    fn untouched(&self, after: &str) {
        let md = std::fs::symlink_metadata(&self.file).unwrap();
        assert_eq!(
            std::fs::read(&self.file).unwrap(),
            b"do not touch",
            "{after}: bytes"
        );
        assert_eq!(md.mode() & 0o7777, 0o640, "{after}: mode");
        assert_eq!((md.uid(), md.gid()), (0, 0), "{after}: owner");
        assert_eq!(md.mtime(), 1_000_000_000, "{after}: mtime");
        assert!(
            list_xattr(&self.file).unwrap().is_empty(),
            "{after}: xattrs"
        );
        let names: Vec<_> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            [OsStr::new("target")],
            "{after}: the folder's entries"
        );
    }
}

/// lchown(2).
fn lchown(p: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid))
}

#[test]
fn operations_on_a_symlink_name_never_touch_its_target() {
    require!(fuse());
    require!(root("a root daemon is the one that must not follow"));
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let v = Victim::new(&s);
        let m = s.mount();
        let ln = m.path("ln");
        std::os::unix::fs::symlink(&v.file, &ln).unwrap();
        let dln = m.path("dln");
        std::os::unix::fs::symlink(&v.dir, &dln).unwrap();
        // Operations that act on the link itself.
        lchown(&ln, 1234, 1234).unwrap();
        assert_eq!(std::fs::symlink_metadata(&ln).unwrap().uid(), 1234);
        set_times(&ln, (5, 0), (5, 0)).unwrap();
        assert_eq!(std::fs::symlink_metadata(&ln).unwrap().mtime(), 5);
        let e = {
            let c = std::ffi::CString::new(ln.to_str().unwrap()).unwrap();
            // SAFETY: valid NUL-terminated strings and a one-byte buffer.
            let r = unsafe {
                libc::lsetxattr(c.as_ptr(), c"user.x".as_ptr(), c"1".as_ptr().cast(), 1, 0)
            };
            assert_ne!(r, 0, "lsetxattr on a symlink");
            errno(&std::io::Error::last_os_error())
        };
        assert_eq!(e, libc::EPERM);
        let e = open_flags(&ln, libc::O_RDWR | libc::O_NOFOLLOW, 0).unwrap_err();
        assert_eq!(errno(&e), libc::ELOOP, "O_NOFOLLOW open of a symlink");
        assert_eq!(std::fs::read_link(&ln).unwrap(), v.file);
        std::fs::rename(&ln, m.path("ln2")).unwrap();
        std::fs::rename(&dln, m.path("dln2")).unwrap();
        // Creating over the link's name: O_EXCL fails without following it.
        let e = open_flags(
            &m.path("ln2"),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )
        .unwrap_err();
        assert_eq!(errno(&e), libc::EEXIST);
        // A folder symlink is not a folder of the mount.
        let e = std::fs::remove_dir(m.path("dln2")).unwrap_err();
        assert_eq!(errno(&e), libc::ENOTDIR);
        std::fs::remove_file(m.path("ln2")).unwrap();
        std::fs::remove_file(m.path("dln2")).unwrap();
        v.untouched(&format!("{layout}: symlink operations"));
        // And the tiers hold only what the mount shows.
        assert_no_stale(&m);
        m.unmount();
        v.untouched(&format!("{layout}: after unmount"));
    }
}

/// Replaces the backing object at `p` with a symlink to `to` (as someone with write access
/// to a tier folder might).
fn plant(p: &Path, to: &Path) {
    let md = std::fs::symlink_metadata(p).unwrap();
    if md.is_dir() {
        std::fs::rename(p, p.with_extension("moved")).unwrap();
    } else {
        std::fs::remove_file(p).unwrap();
    }
    std::os::unix::fs::symlink(to, p).unwrap();
}

/// A piece, or a folder, swapped for a symlink in a tier while mounted: the daemon refuses
/// to follow it (ELOOP or another error) and never changes what it points to.
#[test]
fn symlinks_planted_in_a_tier_are_not_followed() {
    require!(fuse());
    require!(root("a root daemon is the one that must not follow"));
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let v = Victim::new(&s);
        let m = s.mount();
        // A file whose piece(s) are swapped for symlinks to the victim.
        std::fs::write(m.path("f"), pattern(3 * MIB, 1)).unwrap();
        settle(&m);
        let on = s.tiers_holding("f");
        assert!(!on.is_empty());
        for t in &on {
            plant(&s.backing(*t, "f"), &v.file);
        }
        // The kernel may still have the old piece's attributes cached; opening asks the
        // daemon, which opens the backing path anew.
        let _ = std::fs::OpenOptions::new().write(true).open(m.path("f"));
        let _ = std::fs::OpenOptions::new().read(true).open(m.path("f"));
        let _ = std::fs::set_permissions(m.path("f"), std::fs::Permissions::from_mode(0o666));
        let _ = std::os::unix::fs::chown(m.path("f"), Some(4321), Some(4321));
        let _ = set_times(&m.path("f"), (7, 0), (7, 0));
        let _ = set_xattr(&m.path("f"), "user.x", b"1");
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .open(m.path("f"))
            .and_then(|f| f.set_len(1));
        let _ = std::fs::File::options()
            .write(true)
            .truncate(true)
            .open(m.path("f"));
        v.untouched(&format!("{layout}: a planted piece symlink"));
        // A folder swapped for a symlink to the victim folder on every tier but the first
        // (stripe files put a piece on each; whole files go where placement says).
        std::fs::create_dir(m.path("d")).unwrap();
        for t in 1..s.tiers.len() {
            plant(&s.backing(t, "d"), &v.dir);
        }
        for i in 0..4 {
            let _ = std::fs::write(m.path(&format!("d/new{i}")), pattern(2 * MIB, i));
        }
        let _ = std::fs::create_dir(m.path("d/sub"));
        let _ = std::os::unix::fs::symlink("x", m.path("d/ln"));
        let _ = std::fs::set_permissions(m.path("d"), std::fs::Permissions::from_mode(0o777));
        let _ = std::os::unix::fs::chown(m.path("d"), Some(4321), Some(4321));
        let _ = std::fs::rename(m.path("d/new0"), m.path("d/renamed"));
        let _ = std::fs::remove_file(m.path("d/renamed"));
        v.untouched(&format!("{layout}: a planted folder symlink"));
        let vd = std::fs::metadata(&v.dir).unwrap();
        assert_ne!(vd.uid(), 4321, "{layout}: the victim folder's owner");
        assert_ne!(
            vd.mode() & 0o777,
            0o777,
            "{layout}: the victim folder's mode"
        );
        m.unmount();
        v.untouched(&format!("{layout}: after unmount"));
    }
}

/// The core refuses `..`, `.`, `/` and empty names in every naming call (the kernel never
/// sends them, but nothing else stands between such a name and `<tier>/data/<name>`).
#[test]
fn dot_dot_and_slash_names_are_refused_by_the_core() {
    use tierfs::vfs::{Ctx, TierFs, ROOT_INO};
    let s = Setup::two("stripe");
    let cfg_path = s.write_config();
    let config = tierfs::config::MountConfig::load(&cfg_path).unwrap();
    config.prepare_tier_dirs().unwrap();
    let tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
    let fs = TierFs::new(&config, tiers).unwrap();
    let ctx = Ctx { uid: 0, gid: 0 };
    let (a, fh, _) = fs
        .create(ROOT_INO, OsStr::new("f"), 0o644, libc::O_RDWR, ctx)
        .unwrap();
    fs.release(fh).unwrap();
    let d = fs.mkdir(ROOT_INO, OsStr::new("d"), 0o755, ctx).unwrap();
    let outside = s.dir.path().join("escaped");
    for bad in [
        "..",
        ".",
        "",
        "../escaped",
        "a/b",
        "../../escaped",
        "/escaped",
    ] {
        let n = OsStr::new(bad);
        let errs = [
            fs.create(d.ino, n, 0o644, libc::O_RDWR, ctx)
                .map(|_| ())
                .err(),
            fs.mkdir(d.ino, n, 0o755, ctx).map(|_| ()).err(),
            fs.symlink(d.ino, n, Path::new("/etc"), ctx)
                .map(|_| ())
                .err(),
            fs.mknod(d.ino, n, libc::S_IFIFO | 0o644, 0, ctx)
                .map(|_| ())
                .err(),
            fs.rename(ROOT_INO, OsStr::new("f"), d.ino, n, 0).err(),
        ];
        for (i, e) in errs.iter().enumerate() {
            let e = e
                .as_ref()
                .unwrap_or_else(|| panic!("call {i} accepted the name {bad:?}"));
            assert!(
                [libc::EINVAL, libc::EEXIST, libc::ENOENT].contains(&e.errno()),
                "call {i} with {bad:?}: {e}"
            );
        }
        assert!(fs.unlink(d.ino, n).is_err(), "unlink {bad:?}");
        assert!(fs.rmdir(d.ino, n).is_err(), "rmdir {bad:?}");
        assert!(
            fs.rename(d.ino, n, ROOT_INO, OsStr::new("g"), 0).is_err(),
            "rename from {bad:?}"
        );
        if let Ok(l) = fs.lookup(d.ino, n) {
            panic!("lookup {bad:?} found inode {}", l.ino);
        }
    }
    assert!(!outside.exists(), "something was made outside the tiers");
    for t in 0..2 {
        assert!(!s.tier_path(t).join("escaped").exists());
        assert!(!s.tier_path(t).join("data/escaped").exists());
    }
    // The file is still where it was.
    assert!(fs
        .lookup(ROOT_INO, OsStr::new("f"))
        .is_ok_and(|x| x.ino == a.ino));
    fs.shutdown();
}
