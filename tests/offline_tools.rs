//! `tierfs fsck` and `tierfs export` on tiers written through a real mount: a clean tree
//! checks clean and exports byte for byte (data, holes, modes, times, symlinks, xattrs);
//! damage made by hand in the tier folders is reported, `--repair` fixes the safe part, and
//! a mount afterwards still presents every byte of the unharmed files. The `bug_*` tests
//! pin down core behaviour the offline tools brought to light.

mod common;

use common::*;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn fsck(s: &Setup, extra: &[&str]) -> Output {
    let cfg = s.write_config();
    let mut args = vec!["fsck", "--config", cfg.to_str().unwrap()];
    args.extend_from_slice(extra);
    s.tierfs(&args)
}

fn export(s: &Setup, dest: &Path, extra: &[&str]) -> Output {
    let cfg = s.write_config();
    let mut args = vec!["export", "--config", cfg.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push(dest.to_str().unwrap());
    s.tierfs(&args)
}

/// What the test wrote, to compare with what comes back.
struct Written {
    files: Vec<(String, Vec<u8>)>,
    links: Vec<(String, &'static str)>,
    modes: Vec<(String, u32)>,
    xattrs: Vec<(String, &'static str, Vec<u8>)>,
    mtimes: Vec<(String, (i64, i64))>,
}

/// Writes a tree under `top` of the mount: O_DIRECT and buffered files, holes, sizes set by
/// truncate up and down, an empty file, modes, xattrs on a file and a folder, symlinks
/// (relative, absolute and dangling), nested folders, and set times (folders last).
fn write_tree(m: &Mount<'_>, top: &str, seed: u64) -> Written {
    let p = |rel: &str| m.path(&format!("{top}/{rel}"));
    let r = |rel: &str| format!("{top}/{rel}");
    for d in ["", "a", "a/b", "a/b/c", "empty_dir"] {
        std::fs::create_dir(p(d)).unwrap();
    }
    let mut files = Vec::new();
    // O_DIRECT body from two threads plus a buffered odd tail, over several stripes.
    let big = pattern(3 * MIB + 512 * 1024 + 1234, seed);
    write_ds(&p("a/b/c/big"), &big, 2, 0);
    files.push((r("a/b/c/big"), big));
    let odd = pattern(2 * MIB + 777, seed + 1);
    std::fs::write(p("odd"), &odd).unwrap();
    files.push((r("odd"), odd));
    // Holes: bytes at 0 and past 5 MiB, nothing between.
    let mut holes = vec![0u8; 5 * MIB + 7 + 200];
    let f = std::fs::File::create(p("holes")).unwrap();
    let head = pattern(100, seed + 2);
    let tail = pattern(200, seed + 3);
    pwrite_exact(&f, &head, 0).unwrap();
    pwrite_exact(&f, &tail, 5 * MIB as u64 + 7).unwrap();
    holes[..100].copy_from_slice(&head);
    holes[5 * MIB + 7..].copy_from_slice(&tail);
    drop(f);
    files.push((r("holes"), holes));
    // Truncated up: the new length reads as zeros.
    let mut up = pattern(1000, seed + 4);
    let f = std::fs::File::create(p("trunc_up")).unwrap();
    pwrite_exact(&f, &up, 0).unwrap();
    f.set_len(3 * MIB as u64 + 5).unwrap();
    up.resize(3 * MIB + 5, 0);
    drop(f);
    files.push((r("trunc_up"), up));
    // Truncated down.
    let down = pattern(4 * MIB, seed + 5);
    std::fs::write(p("trunc_down"), &down).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(p("trunc_down"))
        .unwrap();
    f.set_len(MIB as u64 + MIB as u64 / 2).unwrap();
    drop(f);
    files.push((r("trunc_down"), down[..MIB + MIB / 2].to_vec()));
    std::fs::File::create(p("empty")).unwrap();
    files.push((r("empty"), Vec::new()));
    std::fs::write(p("a/ro"), b"read only").unwrap();
    std::fs::write(p("a/exec"), b"#!/bin/sh\necho hi\n").unwrap();
    files.push((r("a/ro"), b"read only".to_vec()));
    files.push((r("a/exec"), b"#!/bin/sh\necho hi\n".to_vec()));
    let modes = vec![(r("a/ro"), 0o444), (r("a/exec"), 0o755), (r("a/b"), 0o750)];
    for (rel, mode) in &modes {
        std::fs::set_permissions(m.path(rel), std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    let xattrs = vec![
        (r("a/b/c/big"), "user.tag", b"big file".to_vec()),
        (r("a/b/c/big"), "user.bin", vec![0, 1, 2, 255]),
        (r("a"), "user.dir", b"folder xattr".to_vec()),
    ];
    for (rel, name, v) in &xattrs {
        set_xattr(&m.path(rel), name, v).unwrap();
    }
    let links = vec![
        (r("link"), "a/b/c/big"),
        (r("dangling"), "/nonexistent/target"),
        (r("a/b/up"), "../../empty"),
    ];
    for (rel, target) in &links {
        std::os::unix::fs::symlink(target, m.path(rel)).unwrap();
    }
    let mtimes = vec![
        (r("odd"), (1_500_000_000, 123_456_789)),
        (r("holes"), (1_400_000_000, 1)),
        (r("link"), (1_300_000_000, 0)),
        (r("a/b/c"), (1_200_000_000, 42)),
        (r("a/b"), (1_200_000_001, 0)),
        (r("a"), (1_200_000_002, 0)),
    ];
    for (rel, t) in &mtimes {
        set_times(&m.path(rel), (1_700_000_000, 0), *t).unwrap();
    }
    Written {
        files,
        links,
        modes,
        xattrs,
        mtimes,
    }
}

/// Checks a tree (a mount or an export) against what was written.
fn check_written(root: &Path, w: &Written, what: &str) {
    for (rel, data) in &w.files {
        let got = std::fs::read(root.join(rel)).unwrap_or_else(|e| panic!("{what}: {rel}: {e}"));
        assert!(
            got == *data,
            "{what}: {rel}: {} bytes, want {}",
            got.len(),
            data.len()
        );
    }
    for (rel, target) in &w.links {
        let got = std::fs::read_link(root.join(rel)).unwrap();
        assert_eq!(got, Path::new(target), "{what}: symlink {rel}");
    }
    for (rel, mode) in &w.modes {
        let got = std::fs::symlink_metadata(root.join(rel)).unwrap().mode() & 0o7777;
        assert_eq!(got, *mode, "{what}: mode of {rel}");
    }
    for (rel, name, v) in &w.xattrs {
        assert_eq!(
            get_xattr(&root.join(rel), name).unwrap(),
            *v,
            "{what}: {name} of {rel}"
        );
        let names = list_xattr(&root.join(rel)).unwrap();
        assert!(
            names.iter().all(|n| !n.starts_with("user.tierfs.")),
            "{what}: {rel} shows {names:?}"
        );
    }
    for (rel, t) in &w.mtimes {
        let md = std::fs::symlink_metadata(root.join(rel)).unwrap();
        assert_eq!((md.mtime(), md.mtime_nsec()), *t, "{what}: mtime of {rel}");
    }
}

/// Two snapshots are the same node for node (data compared without printing it).
fn assert_same_tree(want: &[NodeSnap], got: &[NodeSnap], what: &str) {
    let names = |v: &[NodeSnap]| v.iter().map(|n| n.rel.clone()).collect::<Vec<PathBuf>>();
    assert_eq!(
        names(want),
        names(got),
        "{what}: the trees list other paths"
    );
    for (a, b) in want.iter().zip(got) {
        let r = a.rel.display();
        assert_eq!(a.kind, b.kind, "{what}: {r}: kind");
        assert_eq!(a.size, b.size, "{what}: {r}: size");
        assert!(a.data == b.data, "{what}: {r}: contents differ");
        assert_eq!(a.mode, b.mode, "{what}: {r}: mode");
        assert_eq!((a.uid, a.gid), (b.uid, b.gid), "{what}: {r}: owner");
        assert_eq!(a.mtime, b.mtime, "{what}: {r}: mtime");
        assert_eq!(a.xattrs, b.xattrs, "{what}: {r}: xattrs");
    }
}

#[test]
fn fsck_is_clean_and_export_reproduces_a_mounted_tree() {
    if !fuse_available() {
        return;
    }
    let mut s = Setup::two("stripe");
    let st = {
        let m = s.mount();
        let w = write_tree(&m, "st", 1);
        m.unmount();
        w
    };
    s.layout = "whole-file".into();
    let m = s.mount();
    let wh = write_tree(&m, "wh", 100);
    // Both layouts really are on the tiers: a striped file has a piece on each tier.
    assert_eq!(s.tiers_holding("st/a/b/c/big"), vec![0, 1]);
    assert_eq!(s.tiers_holding("wh/a/b/c/big").len(), 1);
    check_written(&m.root(), &st, "mount");
    check_written(&m.root(), &wh, "mount");
    let before = snapshot_tree(&m.root());

    // fsck refuses while a daemon holds the tiers; export works (it only reads).
    let o = fsck(&s, &[]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "fsck while mounted:\n{}",
        text(&o)
    );
    assert!(text(&o).contains("in use"), "{}", text(&o));
    let live = s.dir.path().join("live-export");
    let o = export(&s, &live, &[]);
    assert!(o.status.success(), "export while mounted:\n{}", text(&o));
    check_written(&live, &st, "export while mounted");
    check_written(&live, &wh, "export while mounted");
    m.unmount();

    let o = fsck(&s, &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "fsck of a clean tree:\n{}",
        text(&o)
    );
    assert!(text(&o).contains("clean"), "{}", text(&o));
    assert!(!text(&o).contains("PROBLEM"), "{}", text(&o));

    let dest = s.dir.path().join("export");
    let o = export(&s, &dest, &[]);
    assert!(o.status.success(), "export:\n{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(" files ("),
        "export prints counts:\n{}",
        text(&o)
    );
    check_written(&dest, &st, "export");
    check_written(&dest, &wh, "export");
    assert!(!dest.join(".tierfs").exists());
    assert_same_tree(&before, &snapshot_tree(&dest), "export vs mount");
    // Holes stay holes in the copy.
    let holes = std::fs::metadata(dest.join("st/holes")).unwrap();
    assert!(
        holes.blocks() * 512 < 2 * MIB as u64,
        "st/holes takes {} blocks in the export",
        holes.blocks()
    );

    // A non-empty DEST is refused without --force, rewritten with it.
    std::fs::write(dest.join("st/odd"), b"changed").unwrap();
    let o = export(&s, &dest, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--force"), "{}", text(&o));
    let o = export(&s, &dest, &["--force"]);
    assert!(o.status.success(), "export --force:\n{}", text(&o));
    assert_same_tree(&before, &snapshot_tree(&dest), "export --force vs mount");

    // The tiers were not touched: a mount still shows the same tree, and fsck stays clean.
    let m = s.mount();
    assert_same_tree(&before, &snapshot_tree(&m.root()), "mount after export");
    m.unmount();
    let o = fsck(&s, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn offline_tools_refuse_bad_usage() {
    let s = Setup::two("stripe");
    let bad = s.dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[tier]]\nname = \"gone\"\npath = \"/nonexistent-tierfs-test/tier\"\nread_bandwidth = \"1GB/s\"\n",
    )
    .unwrap();
    for args in [
        vec!["fsck", "--config", bad.to_str().unwrap()],
        vec!["export", "--config", bad.to_str().unwrap(), "/tmp/x"],
        vec!["fsck"],
        vec!["export", "--config", bad.to_str().unwrap()],
    ] {
        let o = s.tierfs(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}:\n{}", text(&o));
    }
    // Export into a tier folder is refused.
    let cfg = s.write_config();
    std::fs::create_dir_all(s.tier_path(0)).unwrap();
    std::fs::create_dir_all(s.tier_path(1)).unwrap();
    let inside = s.tier_path(1).join("copy");
    let o = s.tierfs(&[
        "export",
        "--config",
        cfg.to_str().unwrap(),
        inside.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // Fresh tiers are clean.
    let o = fsck(&s, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// The lines of `out` that mention all of `words`.
fn lines_with<'a>(out: &'a str, words: &[&str]) -> Vec<&'a str> {
    out.lines()
        .filter(|l| words.iter().all(|w| l.contains(w)))
        .collect()
}

#[test]
fn fsck_reports_damage_and_repair_keeps_every_unharmed_byte() {
    if !fuse_available() {
        return;
    }
    let mut s = Setup::two("stripe");
    let victim = pattern(3 * MIB + 100, 7);
    let keep1 = pattern(5 * MIB + 123, 8);
    let mut keep2 = vec![0u8; 4 * MIB + 10];
    keep2[..10].copy_from_slice(b"0123456789");
    keep2[4 * MIB..].copy_from_slice(b"abcdefghij");
    let nested = pattern(2 * MIB, 9);
    {
        let m = s.mount();
        std::fs::create_dir_all(m.path("s")).unwrap();
        std::fs::create_dir_all(m.path("d/e")).unwrap();
        std::fs::create_dir_all(m.path("m/n/o")).unwrap();
        write_ds(&m.path("s/victim"), &victim, 2, 0);
        std::fs::write(m.path("s/keep1"), &keep1).unwrap();
        let f = std::fs::File::create(m.path("s/keep2")).unwrap();
        f.write_at(&keep2[..10], 0).unwrap();
        f.write_at(&keep2[4 * MIB..], 4 * MIB as u64).unwrap();
        drop(f);
        std::fs::write(m.path("d/e/f"), &nested).unwrap();
        m.unmount();
    }
    s.layout = "whole-file".into();
    let dup = pattern(100 * 1024, 10);
    let w2 = pattern(300 * 1024, 11);
    {
        let m = s.mount();
        std::fs::write(m.path("dup"), &dup).unwrap();
        std::fs::write(m.path("d/w2"), &w2).unwrap();
        m.unmount();
    }
    assert_eq!(fsck(&s, &[]).status.code(), Some(0));

    // Damage by hand.
    assert_eq!(s.tiers_holding("s/victim"), vec![0, 1]);
    let layout = get_xattr(&s.backing(0, "s/victim"), "user.tierfs.layout").unwrap();
    std::fs::remove_file(s.backing(1, "s/victim")).unwrap();
    let tmp = s.backing(1, "d/.tierfs-tmp-4242");
    std::fs::write(&tmp, b"half a move").unwrap();
    std::fs::remove_dir(s.backing(1, "m/n/o")).unwrap();
    std::fs::remove_dir(s.backing(1, "m/n")).unwrap();
    let dup_tiers = s.tiers_holding("dup");
    assert_eq!(dup_tiers.len(), 1);
    let other = 1 - dup_tiers[0];
    let planted = b"an older copy with other bytes".to_vec();
    std::fs::write(s.backing(other, "dup"), &planted).unwrap();
    set_times(
        &s.backing(other, "dup"),
        (1_000_000_000, 0),
        (1_000_000_000, 0),
    )
    .unwrap();

    let o = fsck(&s, &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    for words in [
        &["PROBLEM", "/s/victim", "stripe piece missing", "'slow'"][..],
        &["PROBLEM", "/d/.tierfs-tmp-4242", "leftover temporary"],
        &["PROBLEM", "/m/n ", "folder missing", "'slow'"],
        &["PROBLEM", "/dup ", "older, different copy"],
    ] {
        assert_eq!(
            lines_with(&out, words).len(),
            1,
            "want one {words:?} line:\n{out}"
        );
    }
    assert_eq!(lines_with(&out, &["PROBLEM"]).len(), 4, "{out}");
    assert!(out.contains("4 problems"), "{out}");
    // Nothing changed without --repair.
    assert!(tmp.exists() && !s.backing(1, "s/victim").exists());

    let o = fsck(&s, &["--repair"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "problems were found:\n{out}");
    assert!(lines_with(&out, &["PROBLEM"]).is_empty(), "{out}");
    // m/n is made first, then m/n/o is found missing under it.
    assert_eq!(lines_with(&out, &["REPAIRED"]).len(), 5, "{out}");
    assert_eq!(lines_with(&out, &["REPAIRED", "/m/n/o "]).len(), 1, "{out}");
    let o = fsck(&s, &[]);
    assert_eq!(o.status.code(), Some(0), "after --repair:\n{}", text(&o));

    // What the repair did on the tiers.
    assert!(!tmp.exists());
    assert!(s.backing(1, "m/n/o").is_dir());
    let piece = s.backing(1, "s/victim");
    assert_eq!(std::fs::metadata(&piece).unwrap().len(), 0);
    assert_eq!(get_xattr(&piece, "user.tierfs.layout").unwrap(), layout);
    let conflict = format!("dup.tierfs-conflict-{}", s.tiers[other].name);
    assert_eq!(std::fs::read(s.backing(other, &conflict)).unwrap(), planted);

    // A mount shows every unharmed byte, the conflict aside, and the victim's surviving
    // stripes (the lost ones read as zeros, never other bytes).
    let m = s.mount();
    for (rel, data) in [
        ("s/keep1", &keep1),
        ("s/keep2", &keep2),
        ("d/e/f", &nested),
        ("dup", &dup),
        ("d/w2", &w2),
    ] {
        assert!(
            std::fs::read(m.path(rel)).unwrap() == *data,
            "{rel} after repair"
        );
    }
    assert_eq!(std::fs::read(m.path(&conflict)).unwrap(), planted);
    assert!(m.path("m/n/o").is_dir());
    let got = std::fs::read(m.path("s/victim")).unwrap();
    assert!(got.len() <= victim.len());
    let mut kept = 0;
    for (k, chunk) in got.chunks(MIB).enumerate() {
        let want = &victim[k * MIB..k * MIB + chunk.len()];
        if chunk == want {
            kept += 1;
        } else {
            assert!(
                chunk.iter().all(|b| *b == 0),
                "s/victim stripe {k}: neither its bytes nor zeros"
            );
        }
    }
    assert!(kept > 0, "no stripe of s/victim survived on the fast tier");
    assert_no_stale(&m);
    m.unmount();
    let o = fsck(&s, &[]);
    assert_eq!(o.status.code(), Some(0), "after a mount:\n{}", text(&o));
}

/// A stripe piece lost from a tier is recreated by the mount's scan without the layout
/// xattr; writes then land in it, and the next mount takes it for a stray whole file and
/// renames it aside: the file reads zeros where those bytes were written.
#[test]
fn bug_mount_recreates_a_missing_stripe_piece_without_its_layout() {
    if !fuse_available() {
        return;
    }
    let s = Setup::two("stripe");
    let data = pattern(3 * MIB, 21);
    {
        let m = s.mount();
        std::fs::write(m.path("s"), &data).unwrap();
        m.unmount();
    }
    assert_eq!(s.tiers_holding("s"), vec![0, 1]);
    std::fs::remove_file(s.backing(1, "s")).unwrap();
    {
        let m = s.mount();
        // Rewrite every byte through the mount: the file is whole again.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(m.path("s"))
            .unwrap();
        pwrite_exact(&f, &data, 0).unwrap();
        f.sync_all().unwrap();
        drop(f);
        assert!(std::fs::read(m.path("s")).unwrap() == data);
        m.unmount();
    }
    let m = s.mount();
    let got = std::fs::read(m.path("s")).unwrap();
    let listing: Vec<String> = std::fs::read_dir(m.root())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    m.unmount();
    assert!(
        got == data,
        "bytes written and fsynced through the mount are gone after a remount \
         (the recreated piece had no layout xattr; the folder now holds {listing:?})"
    );
}

/// The scan renames a conflicting copy to NAME.tierfs-conflict-TIER with rename(2), which
/// replaces an earlier conflict of the same name: the earlier bytes are deleted.
#[test]
fn bug_second_conflict_overwrites_the_first() {
    if !fuse_available() {
        return;
    }
    let s = Setup::two("whole-file");
    {
        let m = s.mount();
        std::fs::write(m.path("f"), b"current").unwrap();
        m.unmount();
    }
    let other = 1 - s.tiers_holding("f")[0];
    let mut found = Vec::new();
    for planted in [&b"older one"[..], b"older two"] {
        std::fs::write(s.backing(other, "f"), planted).unwrap();
        set_times(
            &s.backing(other, "f"),
            (1_000_000_000, 0),
            (1_000_000_000, 0),
        )
        .unwrap();
        let m = s.mount();
        assert_eq!(std::fs::read(m.path("f")).unwrap(), b"current");
        found = std::fs::read_dir(m.root())
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("f.tierfs-conflict")
            })
            .map(|e| std::fs::read(e.path()).unwrap())
            .collect();
        m.unmount();
    }
    for planted in [&b"older one"[..], b"older two"] {
        assert!(
            found.iter().any(|c| c == planted),
            "the conflicting copy {:?} was deleted; conflicts now hold {:?}",
            String::from_utf8_lossy(planted),
            found
                .iter()
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect::<Vec<_>>()
        );
    }
}

/// A user may create `.tierfs-tmp-NOTES` through the mount, but the next mount deletes it
/// as a leftover temporary.
#[test]
fn bug_user_file_named_like_a_temporary_is_deleted_at_remount() {
    if !fuse_available() {
        return;
    }
    let s = Setup::two("whole-file");
    {
        let m = s.mount();
        if std::fs::write(m.path(".tierfs-tmp-notes"), b"mine").is_err() {
            // Refusing the name is a fine answer too.
            m.unmount();
            return;
        }
        m.unmount();
    }
    let m = s.mount();
    let got = std::fs::read(m.path(".tierfs-tmp-notes"));
    m.unmount();
    assert_eq!(
        got.ok().as_deref(),
        Some(&b"mine"[..]),
        "a file created through the mount was deleted by the next mount"
    );
}

/// Issue #21 bug 1: a striped file whose pieces ended up at different paths on different
/// tiers (a rename that reached only some tiers: a crash between them, or a folder renamed
/// while a tier was missing) was two half-files, each reading zeros where the other held
/// the bytes; `tierfs fsck` said only "stripe piece missing" for each and `--repair` made
/// empty pieces, and a mount made them too, so the split was hidden for good. Now the
/// pieces carry the file's id: fsck names the split and `--repair` moves the pieces back
/// together (never deleting anything), and so does the mount's scan.
#[test]
fn bug_split_striped_file_is_reported_by_fsck_and_rejoined() {
    if !fuse_available() {
        return;
    }
    let s = Setup::two("stripe");
    let data = pattern(5_000_000, 7);
    {
        let m = s.mount();
        std::fs::create_dir(m.path("dir")).unwrap();
        std::fs::create_dir(m.path("dir2")).unwrap();
        std::fs::write(m.path("dir/c"), &data).unwrap();
        m.unmount();
    }
    assert_eq!(s.tiers_holding("dir/c"), vec![0, 1], "c is not striped");
    // The rename reached the first tier only.
    let split = || {
        std::fs::rename(s.backing(0, "dir/c"), s.backing(0, "dir2/c")).unwrap();
    };
    split();
    let o = fsck(&s, &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("/dir2/c") && t.contains("is at /dir/c") && t.contains("split"),
        "fsck does not name the split:\n{t}"
    );
    let o = fsck(&s, &["--repair"]);
    let t = text(&o);
    assert!(t.contains("moved it back"), "{t}");
    let o = fsck(&s, &[]);
    assert!(
        o.status.success(),
        "not clean after --repair:\n{}",
        text(&o)
    );
    assert_eq!(s.tiers_holding("dir2/c"), vec![0, 1]);
    assert!(s.tiers_holding("dir/c").is_empty());
    {
        let m = s.mount();
        assert!(
            std::fs::read(m.path("dir2/c")).unwrap() == data,
            "after --repair"
        );
        assert!(!m.path("dir/c").exists());
        m.unmount();
    }
    // Split again (the other way round), and mount without fsck: the scan rejoins it.
    std::fs::rename(s.backing(0, "dir2/c"), s.backing(0, "dir/c")).unwrap();
    {
        let m = s.mount();
        assert!(
            !m.path("dir2/c").exists(),
            "the second half is still listed"
        );
        assert!(
            std::fs::read(m.path("dir/c")).unwrap() == data,
            "after the scan"
        );
        m.unmount();
    }
    let log = std::fs::read_to_string(s.log_path()).unwrap();
    assert!(log.contains("moved back"), "{log}");
    let o = fsck(&s, &[]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Issue #21 bug 9: the older of two conflicting copies is set aside as
/// `NAME.tierfs-conflict-TIER`, which for a name over ~235 bytes is too long
/// (ENAMETOOLONG): the copy stayed in place, came back after the file was deleted through
/// the mount, and `fsck --repair` failed on it. Conflict names now always fit (a long name
/// is cut and given a hash), the same in the scan and in fsck.
#[test]
fn bug_conflict_copy_of_a_long_name_cannot_be_set_aside() {
    if !fuse_available() {
        return;
    }
    let s = Setup::two("whole-file");
    let name = "n".repeat(250);
    {
        let m = s.mount();
        std::fs::write(m.path(&name), b"current").unwrap();
        m.unmount();
    }
    let other = 1 - s.tiers_holding(&name)[0];
    let plant = |what: &[u8]| {
        std::fs::write(s.backing(other, &name), what).unwrap();
        set_times(
            &s.backing(other, &name),
            (1_000_000_000, 0),
            (1_000_000_000, 0),
        )
        .unwrap();
    };
    let conflicts = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&name[..100]) && n.contains(".tierfs-conflict-"))
            .map(|n| {
                assert!(n.len() <= 255, "{n}");
                let data = std::fs::read(dir.join(&n)).unwrap();
                (n, data)
            })
            .collect()
    };
    // The scan sets the older copy aside.
    plant(b"older");
    {
        let m = s.mount();
        assert_eq!(std::fs::read(m.path(&name)).unwrap(), b"current");
        let c = conflicts(&m.root());
        assert_eq!(c.len(), 1, "the older copy was not set aside: {c:?}");
        assert_eq!(c[0].1, b"older");
        // Deleted through the mount, the file stays deleted.
        std::fs::remove_file(m.path(&name)).unwrap();
        std::fs::remove_file(m.root().join(&c[0].0)).unwrap();
        m.unmount();
    }
    {
        let m = s.mount();
        assert!(!m.path(&name).exists(), "the deleted file came back");
        m.unmount();
    }
    // fsck --repair does the same.
    {
        let m = s.mount();
        std::fs::write(m.path(&name), b"current").unwrap();
        m.unmount();
    }
    let other = 1 - s.tiers_holding(&name)[0];
    std::fs::write(s.backing(other, &name), b"older, offline").unwrap();
    set_times(
        &s.backing(other, &name),
        (1_000_000_000, 0),
        (1_000_000_000, 0),
    )
    .unwrap();
    let o = fsck(&s, &["--repair"]);
    let t = text(&o);
    assert!(
        t.contains("REPAIRED") && !t.contains("repair failed"),
        "{t}"
    );
    let o = fsck(&s, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let c = conflicts(&s.tier_path(other).join("data"));
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].1, b"older, offline");
}
