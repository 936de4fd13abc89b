//! Adaptivity on the core, without a mount: when the shares move (a tier slowed down), a
//! striped file opened for writing is re-laid out to follow them, with every byte it held.
use std::ffi::OsStr;
use std::path::Path;
use tierfs::config::MountConfig;
use tierfs::layout::FileLayout;
use tierfs::vfs::{Ctx, TierFs, ROOT_INO};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(41).wrapping_add(seed))
        .collect()
}

fn tier_split(layout: &FileLayout) -> Vec<f64> {
    match layout {
        FileLayout::Stripe(m) => (0..2)
            .map(|t| {
                m.pattern.iter().filter(|x| **x as usize == t).count() as f64
                    / m.pattern.len() as f64
            })
            .collect(),
        FileLayout::Whole { tier } => (0..2).map(|t| if t == *tier { 1.0 } else { 0.0 }).collect(),
    }
}

#[test]
fn striped_file_follows_new_shares_when_rewritten() {
    let d = tempfile::tempdir().unwrap();
    let text = format!(
        "[[tier]]\nname = \"fast\"\npath = \"{0}/a\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [[tier]]\nname = \"slow\"\npath = \"{0}/b\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [placement]\nlayout = \"stripe\"\nstripe_unit = \"64KiB\"\nadapt = true\n",
        d.path().display()
    );
    let config = MountConfig::parse(&text, Path::new("relayout.toml")).unwrap();
    config.prepare_tier_dirs().unwrap();
    let tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
    let fs = TierFs::new(&config, tiers).unwrap();
    let ctx = Ctx { uid: 0, gid: 0 };
    let data = pattern(3 << 20, 5);
    let (attr, fh, _) = fs
        .create(ROOT_INO, OsStr::new("f.swp"), 0o600, libc::O_WRONLY, ctx)
        .unwrap();
    fs.write(fh, 0, &data).unwrap();
    fs.release(fh).unwrap();
    let before = fs.file_list()[0].2.clone();
    assert!((tier_split(&before)[0] - 0.5).abs() < 0.02, "{before:?}");

    // The second tier slows to a tenth: its share drops, as the online estimator would set.
    fs.placer().set_shares(vec![10.0 / 11.0, 1.0 / 11.0]);
    // Opening for reading moves nothing.
    let (fh, _) = fs.open(attr.ino, libc::O_RDONLY).unwrap();
    fs.release(fh).unwrap();
    assert_eq!(fs.file_list()[0].2, before);
    // Opening for writing (DeepSpeed's rewrite, no O_TRUNC) re-lays it out as it is
    // rewritten: the switch comes when the writer closes.
    let (fh, _) = fs.open(attr.ino, libc::O_WRONLY).unwrap();
    fs.write(fh, 0, &data[..1 << 20]).unwrap();
    fs.release(fh).unwrap();
    let after = fs.file_list()[0].2.clone();
    let split = tier_split(&after);
    assert!(split[0] > 0.85, "{after:?}");
    // Every byte survived the move.
    let (fh, _) = fs.open(attr.ino, libc::O_RDONLY).unwrap();
    let mut got = Vec::new();
    let mut off = 0u64;
    while off < data.len() as u64 {
        let chunk = fs.read_with(fh, off, 1 << 20, |b| b.to_vec()).unwrap();
        off += chunk.len() as u64;
        got.extend(chunk);
    }
    fs.release(fh).unwrap();
    assert!(got == data, "bytes after the re-layout");
    // The backing pieces match the new layout: nothing left in the old proportions.
    let piece = |t: &str| {
        std::fs::metadata(d.path().join(t).join("data/f.swp"))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let (a, b) = (piece("a"), piece("b"));
    assert_eq!(a + b, data.len() as u64);
    assert!(
        a as f64 / data.len() as f64 > 0.85,
        "fast tier holds {a} of {}",
        data.len()
    );
}

/// A crash between creating a striped file's pieces leaves an empty piece without its
/// layout xattr: the next mount claims it for the file instead of setting it aside as a
/// conflict copy (found by the kill -9 test).
#[test]
fn empty_piece_of_an_interrupted_creation_is_adopted() {
    let d = tempfile::tempdir().unwrap();
    let text = format!(
        "[[tier]]\nname = \"fast\"\npath = \"{0}/a\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [[tier]]\nname = \"slow\"\npath = \"{0}/b\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [placement]\nlayout = \"stripe\"\nstripe_unit = \"64KiB\"\n",
        d.path().display()
    );
    let config = MountConfig::parse(&text, Path::new("adopt.toml")).unwrap();
    config.prepare_tier_dirs().unwrap();
    {
        let tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
        let fs = TierFs::new(&config, tiers).unwrap();
        let (_, fh, _) = fs
            .create(
                ROOT_INO,
                OsStr::new("f"),
                0o600,
                libc::O_WRONLY,
                Ctx { uid: 0, gid: 0 },
            )
            .unwrap();
        fs.release(fh).unwrap();
    }
    let piece = d.path().join("b/data/f");
    tierfs::sys::lremovexattr(&piece, OsStr::new(tierfs::layout::LAYOUT_XATTR)).unwrap();
    let tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
    let fs = TierFs::new(&config, tiers).unwrap();
    let files = fs.file_list();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(matches!(files[0].2, FileLayout::Stripe(_)), "{files:?}");
    assert!(tierfs::sys::lgetxattr(&piece, OsStr::new(tierfs::layout::LAYOUT_XATTR)).is_ok());
}
