//! Offline tools over the tier folders, with no daemon and no FUSE: `tierfs fsck` checks
//! that the pieces on the tiers agree (and with `--repair` fixes what is safe to fix), and
//! `tierfs export` copies the whole tree out into an ordinary folder, reassembling striped
//! files, so no one's data depends on the daemon.
//!
//! Both resolve what they find with the rules a mount's scan uses, [`crate::tier::resolve`]: every
//! folder is mirrored on every tier, a file's pieces sit at its own path on the tiers of its
//! layout, symlinks and special files live on the first tier, and `.tierfs-tmp-*` names
//! are leftovers of an interrupted move. So what `export` writes is what a mount would
//! show, and `fsck --repair` leaves the tiers as the next mount would (pieces of one striped
//! file found at two paths are moved back together, by their file id), except that it
//! never deletes anything but a leftover temporary or a byte-identical duplicate, never
//! overwrites (a second conflict gets a new name), and the empty stripe pieces it makes
//! carry the file's layout xattr.
//!
//! Here: the tier folders of a config and one folder's listing over them. `issues` turns
//! the resolver's plans into the problems fsck lists, `fsck` checks and repairs, `export`
//! copies.

mod export;
mod fsck;
mod issues;
mod journals;

pub use self::export::{export, run_export, ExportReport};
pub use self::fsck::{fsck, lock_tiers, run_fsck, FsckReport, TierLocks};
pub use self::issues::{Action, FileView, Issue};
pub use crate::tier::resolve::LayoutRead;

use crate::config::MountConfig;
use crate::error::failure::Failure;
use crate::tier::beneath::Beneath;
use crate::tier::resolve::Class;
use crate::tier::DATA_DIR;
use crate::vfs::TMP_PREFIX;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One tier folder of a config, not opened by a daemon.
#[derive(Debug, Clone)]
pub struct TierDir {
    pub name: String,
    pub root: PathBuf,
    pub data: PathBuf,
}

impl TierDir {
    /// Calls on this tier's paths, relative to its folder and never through a symlink in
    /// it, at any depth (as the daemon's, see [`crate::tier::beneath`]).
    pub fn fs(&self) -> Beneath<'_> {
        Beneath::new(&self.root)
    }

    /// The backing path of mount-relative `rel` on this tier.
    pub fn path(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.data.clone()
        } else {
            self.data.join(rel)
        }
    }
}

/// The tier folders of a config; each must exist (a missing one is a config error: tierfs
/// never guesses where a tier went).
pub fn tier_dirs(cfg: &MountConfig) -> Result<Vec<TierDir>, Failure> {
    let mut out = Vec::new();
    for t in &cfg.tiers {
        match fs::metadata(&t.path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Failure::usage(format!(
                    "tier '{}': {} is not a directory",
                    t.name,
                    t.path.display()
                )))
            }
            Err(e) => {
                return Err(Failure::usage(format!(
                    "tier '{}': {}: {e} (is its file system mounted on this node?)",
                    t.name,
                    t.path.display()
                )))
            }
        }
        out.push(TierDir {
            name: t.name.clone(),
            root: t.path.clone(),
            data: t.path.join(DATA_DIR),
        });
    }
    // A blank folder standing in for a tier (a PFS not mounted) would read as a tier whose
    // pieces are all gone, and a repair would make them anew: refused as a mount refuses it.
    // A `.tierfs-meta/` that cannot be read is the journal checks' to name (it may hide one).
    let named: Vec<_> = cfg
        .tiers
        .iter()
        .map(|t| (t.name.as_str(), t.path.as_path()))
        .collect();
    let refused: Vec<String> = crate::tier::identity::check(&named, &[])
        .into_iter()
        .filter(|r| !r.unreadable)
        .map(|r| format!("tier '{}': {}", cfg.tiers[r.index].name, r.why))
        .collect();
    if !refused.is_empty() {
        return Err(Failure::usage(refused.join("\n")));
    }
    Ok(out)
}

/// What a backing directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntKind {
    Dir,
    File,
    Symlink,
    Fifo,
    Socket,
    Device,
}

impl EntKind {
    fn of(ft: fs::FileType) -> Option<EntKind> {
        use std::os::unix::fs::FileTypeExt;
        Some(if ft.is_dir() {
            EntKind::Dir
        } else if ft.is_file() {
            EntKind::File
        } else if ft.is_symlink() {
            EntKind::Symlink
        } else if ft.is_fifo() {
            EntKind::Fifo
        } else if ft.is_socket() {
            EntKind::Socket
        } else if ft.is_char_device() || ft.is_block_device() {
            EntKind::Device
        } else {
            return None;
        })
    }

    /// How the resolver counts it.
    fn class(self) -> Class {
        match self {
            EntKind::Dir => Class::Dir,
            EntKind::File => Class::File,
            _ => Class::Other,
        }
    }

    fn word(self) -> &'static str {
        match self {
            EntKind::Dir => "folder",
            EntKind::File => "file",
            EntKind::Symlink => "symlink",
            EntKind::Fifo => "FIFO",
            EntKind::Socket => "socket",
            EntKind::Device => "device node",
        }
    }
}

/// One folder's entries over all tiers.
#[derive(Debug, Default)]
struct Listing {
    /// name -> (tier, kind) for every tier that has it, in tier order.
    entries: BTreeMap<OsString, Vec<(usize, EntKind)>>,
    /// Names starting with [`TMP_PREFIX`], per tier.
    temps: Vec<(usize, OsString, EntKind)>,
    /// Tiers on which the folder does not exist.
    missing: Vec<usize>,
    /// Tiers whose folder could not be read.
    errors: Vec<(usize, PathBuf, io::Error)>,
}

fn list(tiers: &[TierDir], rel: &Path) -> Listing {
    let mut l = Listing::default();
    for (i, t) in tiers.iter().enumerate() {
        let dir = t.path(rel);
        let rd = match t.fs().read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                l.missing.push(i);
                continue;
            }
            Err(e) => {
                l.errors.push((i, dir, e));
                continue;
            }
        };
        for (name, ft) in rd {
            let Some(kind) = EntKind::of(ft) else {
                continue;
            };
            if name.as_bytes().starts_with(TMP_PREFIX.as_bytes()) {
                l.temps.push((i, name, kind));
            } else {
                l.entries.entry(name).or_default().push((i, kind));
            }
        }
    }
    l
}

/// Unit tests of `fsck` and `export` over small tier folders made by hand.
#[cfg(test)]
mod tests {
    use super::{export, fsck, lock_tiers, tier_dirs, FsckReport, TierDir};
    use crate::config::MountConfig;
    use crate::layout::{FileLayout, StripeMap, LAYOUT_XATTR};
    use crate::sys::{self, SetTime};
    use crate::tier::resolve::{read_layout, LayoutRead};
    use crate::tier::{DATA_DIR, META_DIR};
    use crate::vfs::TMP_PREFIX;
    use std::ffi::OsStr;
    use std::fs;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    fn setup(n: usize) -> (tempfile::TempDir, MountConfig, Vec<TierDir>) {
        let d = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for i in 0..n {
            let p = d.path().join(format!("t{i}"));
            fs::create_dir_all(p.join(DATA_DIR)).unwrap();
            fs::create_dir_all(p.join(META_DIR)).unwrap();
            text.push_str(&format!(
                "[[tier]]\nname = \"t{i}\"\npath = \"{}\"\nread_bandwidth = \"1GB/s\"\n",
                p.display()
            ));
        }
        let cfg = MountConfig::parse(&text, &d.path().join("c.toml")).unwrap();
        let tiers = tier_dirs(&cfg).unwrap();
        (d, cfg, tiers)
    }

    fn xattrs_work(dir: &Path) -> bool {
        let f = dir.join("probe");
        fs::write(&f, b"").unwrap();
        let ok = sys::lsetxattr(&f, OsStr::new("user.x"), b"1", 0).is_ok();
        fs::remove_file(&f).unwrap();
        ok
    }

    fn check(cfg: &MountConfig, tiers: &[TierDir], repair: bool) -> (FsckReport, String) {
        let mut out = Vec::new();
        let r = fsck(cfg, tiers, repair, &mut out).unwrap();
        (r, String::from_utf8(out).unwrap())
    }

    #[test]
    fn clean_tree_and_whole_file_duplicates() {
        let (_d, cfg, tiers) = setup(2);
        fs::create_dir(tiers[0].data.join("a")).unwrap();
        fs::create_dir(tiers[1].data.join("a")).unwrap();
        fs::write(tiers[0].data.join("a/f"), b"hello").unwrap();
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
        assert_eq!((r.folders, r.files, r.bytes), (1, 1, 5));
        // An identical copy and a different older one.
        fs::write(tiers[1].data.join("a/f"), b"hello").unwrap();
        fs::write(tiers[0].data.join("g"), b"new").unwrap();
        fs::write(tiers[1].data.join("g"), b"old!").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
        sys::lutimens(&tiers[1].data.join("g"), SetTime::At(old), SetTime::At(old)).unwrap();
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 2, "{out}");
        let (r, out) = check(&cfg, &tiers, true);
        assert_eq!(r.repaired(), r.problems(), "{out}");
        assert_eq!(
            fs::read(tiers[1].data.join("g.tierfs-conflict-t1")).unwrap(),
            b"old!"
        );
        assert_eq!(fs::read(tiers[0].data.join("g")).unwrap(), b"new");
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
    }

    #[test]
    fn stripe_pieces_are_checked_and_exported() {
        let (d, cfg, tiers) = setup(2);
        crate::testutil::require!(
            xattrs_work(&tiers[0].data),
            "no user xattrs on the temp file system"
        );
        let m = StripeMap::new(4096, vec![0, 1, 0]);
        let layout = FileLayout::Stripe(m.clone());
        let data: Vec<u8> = (0..20000u32).map(|i| (i % 251) as u8 + 1).collect();
        for (t, tier) in tiers.iter().enumerate() {
            let p = tier.data.join("s");
            let mut piece = vec![0u8; m.piece_len(t, data.len() as u64) as usize];
            for ex in m.extents(0, data.len()) {
                if ex.tier == t {
                    piece[ex.local as usize..ex.local as usize + ex.len]
                        .copy_from_slice(&data[ex.buf..ex.buf + ex.len]);
                }
            }
            fs::write(&p, &piece).unwrap();
            sys::lsetxattr(&p, OsStr::new(LAYOUT_XATTR), layout.encode().as_bytes(), 0).unwrap();
        }
        sys::lsetxattr(&tiers[0].data.join("s"), OsStr::new("user.k"), b"v", 0).unwrap();
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
        assert_eq!(r.bytes, data.len() as u64);
        let dest = d.path().join("out");
        fs::create_dir(&dest).unwrap();
        let rep = export(&cfg, &tiers, &dest, true);
        assert!(rep.errors.is_empty(), "{:?}", rep.errors);
        assert_eq!(fs::read(dest.join("s")).unwrap(), data);
        assert_eq!(
            sys::lgetxattr(&dest.join("s"), OsStr::new("user.k")).unwrap(),
            b"v"
        );
        assert!(sys::lgetxattr(&dest.join("s"), OsStr::new(LAYOUT_XATTR)).is_err());
        // A lost piece: reported, recreated empty with the layout.
        fs::remove_file(tiers[1].data.join("s")).unwrap();
        let (r, out) = check(&cfg, &tiers, true);
        assert_eq!((r.problems(), r.repaired()), (1, 1), "{out}");
        assert_eq!(
            read_layout(tiers[1].fs(), &tiers[1].data.join("s"), 2),
            LayoutRead::Valid(layout)
        );
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
    }

    #[test]
    fn temporaries_and_missing_folders() {
        let (_d, cfg, tiers) = setup(3);
        fs::create_dir_all(tiers[0].data.join("x/y")).unwrap();
        fs::create_dir_all(tiers[1].data.join("x")).unwrap();
        fs::write(tiers[2].data.join(format!("{TMP_PREFIX}77")), b"t").unwrap();
        let (r, out) = check(&cfg, &tiers, false);
        // x on t2, x/y on t1 (x/y on t2 is implied by x), the temporary.
        assert_eq!(r.problems(), 3, "{out}");
        let (r, out) = check(&cfg, &tiers, true);
        // With repair, x is made on t2 first, so x/y on t2 is found missing too.
        assert_eq!(r.repaired(), 4, "{out}");
        assert!(tiers[2].data.join("x/y").is_dir());
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
    }

    #[test]
    fn a_held_lock_is_refused() {
        let (_d, _cfg, tiers) = setup(2);
        let held = lock_tiers(&tiers).unwrap();
        assert!(lock_tiers(&tiers).is_err());
        drop(held);
        assert!(lock_tiers(&tiers).is_ok());
    }

    /// Hard links: names of one file are no problem (counted once) and export links them;
    /// a partial name (a link cut short between the tiers) is a problem on each of its
    /// entries, removed by `--repair` and not exported, as the mount's scan removes it.
    #[test]
    fn hard_links_are_kept_and_a_partial_name_is_removed() {
        let (d, cfg, tiers) = setup(2);
        crate::testutil::require!(
            xattrs_work(&tiers[0].data),
            "no user xattrs on the temp file system"
        );
        let layout = FileLayout::Stripe(StripeMap::new(4096, vec![0, 1]));
        let label = layout.encode_with_id(Some(0x51));
        for (t, tier) in tiers.iter().enumerate() {
            let p = tier.data.join("s");
            fs::write(&p, vec![t as u8 + 1; 4096]).unwrap();
            sys::lsetxattr(&p, OsStr::new(LAYOUT_XATTR), label.as_bytes(), 0).unwrap();
            fs::hard_link(&p, tier.data.join("l")).unwrap();
        }
        fs::hard_link(tiers[0].data.join("s"), tiers[0].data.join("p")).unwrap();
        fs::write(tiers[1].data.join("w"), b"whole").unwrap();
        fs::hard_link(tiers[1].data.join("w"), tiers[1].data.join("w2")).unwrap();
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 1, "{out}");
        assert!(out.contains("cut short"), "{out}");
        assert_eq!((r.files, r.links, r.bytes), (2, 2, 8192 + 5), "{out}");
        let dest = d.path().join("out");
        fs::create_dir(&dest).unwrap();
        let rep = export(&cfg, &tiers, &dest, true);
        assert!(rep.errors.is_empty(), "{:?}", rep.errors);
        assert_eq!((rep.files, rep.links), (2, 2));
        let ino = |n: &str| fs::metadata(dest.join(n)).unwrap().ino();
        assert_eq!(ino("s"), ino("l"));
        assert_eq!(ino("w"), ino("w2"));
        assert_ne!(ino("s"), ino("w"));
        assert_eq!(
            fs::read(dest.join("l")).unwrap(),
            [vec![1u8; 4096], vec![2u8; 4096]].concat()
        );
        assert!(!dest.join("p").exists());
        let (r, out) = check(&cfg, &tiers, true);
        assert_eq!((r.problems(), r.repaired()), (1, 1), "{out}");
        assert!(!tiers[0].data.join("p").exists());
        assert_eq!(fs::metadata(tiers[0].data.join("s")).unwrap().nlink(), 2);
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
    }

    /// A re-link journal set aside unfinished (`*.unfinished`) is never replayed: export
    /// still copies the file it names, but warns of it and reports it as possibly mixed
    /// (and an issue); one that does not parse is reported too.
    #[test]
    fn a_set_aside_journals_file_is_exported_and_reported_mixed() {
        let (d, cfg, tiers) = setup(2);
        fs::create_dir(tiers[0].data.join("a")).unwrap();
        fs::create_dir(tiers[1].data.join("a")).unwrap();
        fs::write(tiers[0].data.join("a/f"), b"hello").unwrap();
        let j = crate::relink::Journal {
            primary: "a/f".into(),
            names: vec!["g".into()],
            new: vec![(0, 10)],
            old: vec![(1, 11)],
            keeps: false,
            pending: vec![],
        };
        let meta = tiers[1].root.join(META_DIR);
        fs::write(meta.join("relink-7-ab.unfinished"), j.encode()).unwrap();
        fs::write(meta.join("relink-8-cd.unfinished"), "torn").unwrap();
        let dest = d.path().join("out");
        fs::create_dir(&dest).unwrap();
        let rep = export(&cfg, &tiers, &dest, true);
        assert!(rep.errors.is_empty(), "{:?}", rep.errors);
        assert_eq!(fs::read(dest.join("a/f")).unwrap(), b"hello");
        assert_eq!((rep.mixed.len(), rep.issues), (2, 2), "{:?}", rep.mixed);
        assert!(
            rep.mixed[0].starts_with("/a/f: its bytes may be mixed")
                && rep.mixed[0].contains("relink-7-ab.unfinished")
                && rep.mixed[1].contains("relink-8-cd.unfinished"),
            "{:?}",
            rep.mixed
        );
        // fsck lists the same journals, each a problem it leaves to the user.
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 2, "{out}");
        assert_eq!(out.matches("could not be finished").count(), 2, "{out}");
    }

    /// A tier whose `.tierfs-meta/` cannot be listed (here a symlink to itself: ELOOP; on
    /// a failing tier EIO or ESTALE): the journal of a move a crash cut short may be there,
    /// unseen, so export refuses, as it does while a journal is pending, and says why.
    ///
    /// Found (issue 38, point 4): the listing's error read as "no journal", and export
    /// copied the tiers as they were, a torn file's mix of stripes included, without a word.
    #[test]
    fn export_refuses_while_a_tiers_journals_cannot_be_listed() {
        let (d, _, tiers) = setup(2);
        fs::write(tiers[0].data.join("f"), b"hello").unwrap();
        let meta = tiers[1].root.join(META_DIR);
        fs::remove_dir(&meta).unwrap();
        std::os::unix::fs::symlink(META_DIR, &meta).unwrap();
        let config = d.path().join("c.toml");
        let text: String = tiers
            .iter()
            .map(|t| {
                format!(
                    "[[tier]]\nname = \"{}\"\npath = \"{}\"\n",
                    t.name,
                    t.root.display()
                )
            })
            .collect();
        fs::write(&config, text).unwrap();
        let dest = d.path().join("out");
        let e = super::run_export(&config, &dest, false).unwrap_err();
        assert!(
            e.message.contains("cannot list") && e.message.contains(".tierfs-meta"),
            "{e}"
        );
        assert!(!dest.join("f").exists(), "copied");
    }

    /// An empty stripe piece without its label (a creation cut short) is adopted, as the
    /// mount's scan adopts it: one problem, repaired by labelling it, no conflict copy.
    #[test]
    fn an_empty_unlabelled_stripe_piece_is_adopted() {
        let (_d, cfg, tiers) = setup(2);
        crate::testutil::require!(
            xattrs_work(&tiers[0].data),
            "no user xattrs on the temp file system"
        );
        let layout = FileLayout::Stripe(StripeMap::new(4096, vec![0, 1]));
        let label = layout.encode_with_id(Some(0x42));
        fs::write(tiers[0].data.join("s"), b"abc").unwrap();
        sys::lsetxattr(
            &tiers[0].data.join("s"),
            OsStr::new(LAYOUT_XATTR),
            label.as_bytes(),
            0,
        )
        .unwrap();
        fs::write(tiers[1].data.join("s"), b"").unwrap();
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 1, "{out}");
        assert!(out.contains("the mount adopts it"), "{out}");
        let (r, out) = check(&cfg, &tiers, true);
        assert_eq!(r.repaired(), 1, "{out}");
        assert_eq!(
            sys::lgetxattr(&tiers[1].data.join("s"), OsStr::new(LAYOUT_XATTR)).unwrap(),
            label.as_bytes()
        );
        assert_eq!(fs::read_dir(&tiers[1].data).unwrap().count(), 1);
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
    }
}
