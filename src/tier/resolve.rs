//! What the tiers hold at one path, resolved into what a mount shows there: the one set of
//! rules that the mount-time scan (`vfs::scan`), `tierfs fsck` and `tierfs export`
//! (`ondisk`) all act on, so the three never disagree about a file.
//!
//! The rules, in the order they apply:
//! - A name that is a folder on any tier is a folder; a file or other entry of that name on
//!   another tier is set aside. Otherwise a name that is a file on any tier is a file (other
//!   entries set aside); otherwise the entry on the first tier holding it stays and the
//!   duplicates are set aside. Set aside means renamed `NAME.tierfs-conflict-TIER`: kept,
//!   visible, never deleted.
//! - A file's layout is in each piece's layout xattr (its label). A piece with no label (or
//!   an empty one) is a whole file on the tier it sits on; so is one whose label does not
//!   parse. The first piece, in tier order, whose label is a stripe layout makes the file
//!   striped: a piece belongs to it when it sits on a tier of the pattern and carries the
//!   same layout and file id; every other piece is set aside.
//! - An *empty* piece with no label, on a tier of the pattern, is adopted: the file's label
//!   is written on it and it belongs. Creation labels each piece before the file takes any
//!   data, so such a piece is one a crash left mid-creation (or an older tierfs recreated);
//!   it holds no bytes, so claiming it loses nothing, while setting it aside would leave an
//!   empty conflict copy in the user's folder. A piece with bytes and no label is never
//!   adopted (its bytes may be anyone's): it is set aside and kept.
//! - A tier of the pattern with no belonging piece is missing: its stripes read as zeros.
//! - Whole copies on several tiers (an interrupted move or cross-tier rename) resolve to
//!   the newest (the last of equal mtimes in tier order); an older copy with the same bytes
//!   is removed, a different one set aside.
//! - Hard links, once every name is resolved ([`plan_links`]): names of files (or
//!   symlinks, special files) whose entries are the same backing inodes, `(device, inode)`
//!   on each tier, are one file with several names; a striped file's names also carry one
//!   file id, as the inodes are the same. A name whose backing inodes are a *strict
//!   subset* of another name's is the trace of a link or an unlink that a crash cut short
//!   between the tiers (both go one tier at a time): it is removed, which loses nothing,
//!   since each of its backing inodes lives on under the other name. Such a name is never
//!   given a recreated empty piece (that would make it a different file). Names that share
//!   some backing inodes but neither holds all of the other's are left as they are and
//!   reported: no tierfs operation leaves them.
//!
//! [`plan_name`], [`plan_file`] and [`plan_links`] are pure: what was found goes in, a plan
//! comes out, and the callers carry it out (the scan at once, fsck as repairs it lists,
//! export by copying). [`read_piece`], [`files_equal`] and [`backing_ids`] are the reads
//! the plans need.

use crate::layout::{decode_id, FileLayout, StripeMap, LAYOUT_XATTR};
use crate::tier::beneath::Beneath;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What an entry found on a tier counts as when a name is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Dir,
    File,
    /// A symlink or a special file.
    Other,
}

/// What one name resolves to, over the tiers that have an entry of that name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Winner<K> {
    /// A folder: the tiers on which it is one.
    Dir(Vec<usize>),
    /// A file: the tiers holding a piece of it (see [`plan_file`]).
    File(Vec<usize>),
    /// A symlink or special file, kept on `tier` (they live on the first tier: one found
    /// elsewhere moves there).
    Other(usize, K),
}

/// A name's plan: what it is, and the entries to set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePlan<K> {
    pub winner: Winner<K>,
    /// Entries of another class than the winner's (or duplicates of an `Other`), in tier
    /// order.
    pub aside: Vec<(usize, K)>,
}

/// Resolves one name found as `on` (tier, kind), in tier order and not empty; `class`
/// says how each kind counts.
pub fn plan_name<K: Copy>(on: &[(usize, K)], class: impl Fn(K) -> Class) -> NamePlan<K> {
    let of = |c: Class| -> Vec<usize> {
        on.iter()
            .filter(|(_, k)| class(*k) == c)
            .map(|(t, _)| *t)
            .collect()
    };
    let others = |c: Class| -> Vec<(usize, K)> {
        on.iter().copied().filter(|(_, k)| class(*k) != c).collect()
    };
    let dirs = of(Class::Dir);
    if !dirs.is_empty() {
        return NamePlan {
            winner: Winner::Dir(dirs),
            aside: others(Class::Dir),
        };
    }
    let files = of(Class::File);
    if !files.is_empty() {
        return NamePlan {
            winner: Winner::File(files),
            aside: others(Class::File),
        };
    }
    let (t, k) = on[0];
    NamePlan {
        winner: Winner::Other(t, k),
        aside: on[1..].to_vec(),
    }
}

/// One piece of a file as found on a tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub tier: usize,
    /// The layout xattr's text; `None` when the piece has none (or an empty one).
    pub label: Option<String>,
    pub len: u64,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, i64),
}

/// Reads the piece at `path` on tier `tier` (whose calls `on` makes). A piece that cannot
/// be stat-ed, or whose label cannot be read for any reason but its absence, is an error:
/// taken for an unlabelled or empty piece, a stripe piece would be served as a whole file
/// (a torn file, with no error) or set aside, and a whole copy judged older than it is.
pub fn read_piece(on: Beneath<'_>, path: &Path, tier: usize) -> io::Result<Found> {
    let m = on.stat(path)?;
    Ok(Found {
        tier,
        label: read_label(on, path)?,
        len: m.len(),
        mtime: (m.mtime(), m.mtime_nsec()),
    })
}

/// The layout xattr of the piece at `path`, if it has a non-empty one; `Ok(None)` also
/// where the tier's file system keeps no xattrs.
pub fn read_label(on: Beneath<'_>, path: &Path) -> io::Result<Option<String>> {
    match on.getxattr(path, OsStr::new(LAYOUT_XATTR)) {
        Ok(v) => Ok((!v.is_empty()).then(|| String::from_utf8_lossy(&v).into_owned())),
        Err(e) if no_label(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a getxattr error says only that the label is not there.
fn no_label(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENODATA) | Some(libc::ENOTSUP) | Some(libc::ENOSYS)
    )
}

/// Reads every piece of the file at `rel`, the tier's calls and path given by `at`; the
/// first piece that cannot be read is named with its error.
pub fn read_pieces<'a>(
    on: &[usize],
    at: impl Fn(usize) -> (Beneath<'a>, std::path::PathBuf),
) -> Result<Vec<Found>, (usize, io::Error)> {
    on.iter()
        .map(|&t| {
            let (b, p) = at(t);
            read_piece(b, &p, t).map_err(|e| (t, e))
        })
        .collect()
}

/// A piece's label, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutRead {
    /// No label (or an empty one, or no xattrs on that filesystem): a whole file on its tier.
    Absent,
    Valid(FileLayout),
    /// The raw value and why it does not parse.
    Bad(String, String),
}

impl LayoutRead {
    pub fn of(label: Option<&str>, ntiers: usize) -> LayoutRead {
        match label {
            None => LayoutRead::Absent,
            Some(s) => match FileLayout::decode(s, ntiers) {
                Ok(l) => LayoutRead::Valid(l),
                Err(e) => LayoutRead::Bad(s.to_string(), e),
            },
        }
    }
}

/// The label of the piece at `path`, as read.
pub fn read_layout(on: Beneath<'_>, path: &Path, ntiers: usize) -> LayoutRead {
    match read_label(on, path) {
        Ok(l) => LayoutRead::of(l.as_deref(), ntiers),
        Err(e) => LayoutRead::Bad(String::new(), format!("its label cannot be read: {e}")),
    }
}

/// What a piece that does not belong to a striped file has instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stray {
    /// No label: a whole file (with bytes, or on a tier outside the pattern).
    Unlabelled,
    /// The file's layout but another file id (`None`: no id).
    OtherId(Option<u64>),
    /// Another valid layout (its encoding).
    OtherLayout(String),
    /// A label that does not parse (the raw value).
    Unusable(String),
    /// The file's layout and id, on a tier the pattern does not name.
    OffPattern,
}

/// Why a piece is set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Aside {
    /// It does not belong to the striped file.
    NotOfStripe(Stray),
    /// An older whole copy (`len` bytes) whose bytes differ from the kept one.
    OlderCopy { len: u64 },
}

/// One thing to do about a file's pieces, or to know about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The label does not parse: the piece is taken for a whole file on its tier.
    Unusable {
        tier: usize,
        raw: String,
        why: String,
    },
    /// A whole file's label names another tier than the one the piece sits on (the file
    /// is where it sits; only the label is wrong).
    WrongTier { tier: usize, says: usize },
    /// An empty, unlabelled piece on a tier of the pattern: write the file's label on it.
    Adopt { tier: usize },
    /// Rename the piece aside (kept, visible).
    SetAside { tier: usize, why: Aside },
    /// An older whole copy with the bytes of the kept one: remove it.
    RemoveCopy { tier: usize },
    /// A tier of the pattern without a piece (none found, or the one found set aside): its
    /// stripes read as zeros; an empty labelled piece takes its place.
    Missing { tier: usize },
    /// A belonging piece longer than its share of the file's size (a bug; nothing done).
    TooLong { tier: usize, len: u64, share: u64 },
}

/// A file's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePlan {
    pub layout: FileLayout,
    /// A striped file's id (`layout::new_file_id`), which all its pieces carry.
    pub id: Option<u64>,
    /// The label an adopted or recreated piece gets: that of the first striped piece (id
    /// included). Empty for a whole file.
    pub label: String,
    /// Logical size, from the belonging pieces.
    pub size: u64,
    /// Tiers whose piece belongs to the file (adopted ones included), in tier order.
    pub pieces: Vec<usize>,
    /// In order: unusable labels, then (whole) wrong tiers, then each other piece's fate in
    /// tier order, then (striped) missing pieces and over-long pieces.
    pub steps: Vec<Step>,
}

/// Resolves a file from its pieces `found` (in tier order, not empty; `None` when empty).
/// `same(a, b)` says whether the whole copies on tiers `a` and `b` hold the same bytes; it
/// is asked only for copies of equal length.
pub fn plan_file(
    found: &[Found],
    ntiers: usize,
    mut same: impl FnMut(usize, usize) -> bool,
) -> Option<FilePlan> {
    let reads: Vec<LayoutRead> = found
        .iter()
        .map(|f| LayoutRead::of(f.label.as_deref(), ntiers))
        .collect();
    let mut steps: Vec<Step> = found
        .iter()
        .zip(&reads)
        .filter_map(|(f, r)| match r {
            LayoutRead::Bad(raw, why) => Some(Step::Unusable {
                tier: f.tier,
                raw: raw.clone(),
                why: why.clone(),
            }),
            _ => None,
        })
        .collect();
    let first_stripe = reads.iter().zip(found).find_map(|(r, f)| match r {
        LayoutRead::Valid(FileLayout::Stripe(m)) => Some((m, f)),
        _ => None,
    });
    if let Some((m, f)) = first_stripe {
        let label = f.label.clone().unwrap_or_default();
        return Some(plan_stripe(found, &reads, m, label, steps));
    }
    for (f, r) in found.iter().zip(&reads) {
        if let LayoutRead::Valid(FileLayout::Whole { tier }) = r {
            if *tier != f.tier {
                steps.push(Step::WrongTier {
                    tier: f.tier,
                    says: *tier,
                });
            }
        }
    }
    let keep = found.iter().max_by_key(|f| f.mtime)?;
    for f in found.iter().filter(|f| f.tier != keep.tier) {
        steps.push(if f.len == keep.len && same(f.tier, keep.tier) {
            Step::RemoveCopy { tier: f.tier }
        } else {
            Step::SetAside {
                tier: f.tier,
                why: Aside::OlderCopy { len: f.len },
            }
        });
    }
    Some(FilePlan {
        layout: FileLayout::Whole { tier: keep.tier },
        id: None,
        label: String::new(),
        size: keep.len,
        pieces: vec![keep.tier],
        steps,
    })
}

/// The striped case of [`plan_file`]: `m` and `label` are those of the first piece with a
/// stripe layout.
fn plan_stripe(
    found: &[Found],
    reads: &[LayoutRead],
    m: &StripeMap,
    label: String,
    mut steps: Vec<Step>,
) -> FilePlan {
    let layout = FileLayout::Stripe(m.clone());
    let id = decode_id(&label);
    let mut pieces = Vec::new();
    let mut size = 0u64;
    for (f, r) in found.iter().zip(reads) {
        let on_pattern = m.tiers.contains(&f.tier);
        let piece_id = f.label.as_deref().and_then(decode_id);
        if on_pattern && matches!(r, LayoutRead::Valid(l) if *l == layout) && piece_id == id {
            pieces.push(f.tier);
            size = size.max(m.logical_end(f.tier, f.len));
            continue;
        }
        if on_pattern && *r == LayoutRead::Absent && f.len == 0 {
            steps.push(Step::Adopt { tier: f.tier });
            pieces.push(f.tier);
            continue;
        }
        let stray = match r {
            LayoutRead::Absent => Stray::Unlabelled,
            LayoutRead::Valid(l) if *l == layout && piece_id != id => Stray::OtherId(piece_id),
            LayoutRead::Valid(l) if *l == layout => Stray::OffPattern,
            LayoutRead::Valid(l) => Stray::OtherLayout(l.encode()),
            LayoutRead::Bad(raw, _) => Stray::Unusable(raw.clone()),
        };
        steps.push(Step::SetAside {
            tier: f.tier,
            why: Aside::NotOfStripe(stray),
        });
    }
    pieces.sort_unstable();
    for t in &m.tiers {
        if !pieces.contains(t) {
            steps.push(Step::Missing { tier: *t });
        }
    }
    for f in found {
        let share = m.piece_len(f.tier, size);
        if pieces.contains(&f.tier) && f.len > share {
            steps.push(Step::TooLong {
                tier: f.tier,
                len: f.len,
                share,
            });
        }
    }
    FilePlan {
        layout,
        id,
        label,
        size,
        pieces,
        steps,
    }
}

/// A backing entry's identity on its tier: (tier, device, inode).
pub type BackingId = (usize, u64, u64);

/// What the backing inodes of a set of names make of them ([`plan_links`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkPlan {
    /// Names that are one file, each group in the order the names were given (the first
    /// is the primary name); groups of two or more only.
    pub groups: Vec<Vec<usize>>,
    /// Partial names to remove: (name, a name holding all of its backing inodes and more).
    pub partial: Vec<(usize, usize)>,
    /// Pairs of names sharing some backing inodes, neither holding all of the other's.
    pub tangled: Vec<(usize, usize)>,
}

/// Applies the hard-link rule (module docs) to `names`, each the backing identities of
/// one name's entries (not empty). Only names whose entries have other links need be
/// given; the rest are files of their own anyway.
pub fn plan_links(names: &[Vec<BackingId>]) -> LinkPlan {
    use std::collections::{BTreeMap, BTreeSet};
    let sets: Vec<BTreeSet<BackingId>> =
        names.iter().map(|n| n.iter().copied().collect()).collect();
    let mut by_id: BTreeMap<BackingId, Vec<usize>> = BTreeMap::new();
    for (i, s) in sets.iter().enumerate() {
        for id in s {
            by_id.entry(*id).or_default().push(i);
        }
    }
    let mut plan = LinkPlan::default();
    let mut partial = vec![false; sets.len()];
    for (i, s) in sets.iter().enumerate() {
        let sharing: BTreeSet<usize> = s
            .iter()
            .flat_map(|id| by_id[id].iter().copied())
            .filter(|j| *j != i)
            .collect();
        for j in sharing {
            if s.is_subset(&sets[j]) && s.len() < sets[j].len() {
                if !partial[i] {
                    plan.partial.push((i, j));
                    partial[i] = true;
                }
            } else if !s.is_superset(&sets[j]) && i < j {
                plan.tangled.push((i, j));
            }
        }
    }
    let mut groups: BTreeMap<&BTreeSet<BackingId>, Vec<usize>> = BTreeMap::new();
    for (i, s) in sets.iter().enumerate().filter(|(i, _)| !partial[*i]) {
        groups.entry(s).or_default().push(i);
    }
    let mut groups: Vec<Vec<usize>> = groups.into_values().filter(|g| g.len() > 1).collect();
    groups.sort();
    plan.groups = groups;
    plan.tangled.retain(|(a, b)| !partial[*a] && !partial[*b]);
    plan
}

/// The backing identities of a name's entries at `path` on each of `tiers` (whose calls
/// `on(t)` makes), and whether any of them has another link (`st_nlink > 1`): only then
/// can the name share them. An entry that cannot be stat-ed is left out.
pub fn backing_ids<'a>(
    on: impl Fn(usize) -> (Beneath<'a>, std::path::PathBuf),
    tiers: &[usize],
) -> (Vec<BackingId>, bool) {
    let mut ids = Vec::new();
    let mut shared = false;
    for &t in tiers {
        let (b, p) = on(t);
        if let Ok(m) = b.stat(&p) {
            ids.push((t, m.dev(), m.ino()));
            shared |= m.nlink() > 1;
        }
    }
    (ids, shared)
}

/// Whether two files hold the same bytes (false on any read error).
pub fn files_equal(mut a: File, mut b: File) -> bool {
    const CHUNK: usize = 1 << 20;
    let mut ba = vec![0u8; CHUNK];
    let mut bb = vec![0u8; CHUNK];
    loop {
        let (Ok(na), Ok(nb)) = (fill(&mut a, &mut ba), fill(&mut b, &mut bb)) else {
            return false;
        };
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn fill(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read(&mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripe(pattern: Vec<u8>) -> FileLayout {
        FileLayout::Stripe(StripeMap::new(4096, pattern))
    }

    fn piece(tier: usize, label: Option<&str>, len: u64, mtime: i64) -> Found {
        Found {
            tier,
            label: label.map(str::to_string),
            len,
            mtime: (mtime, 0),
        }
    }

    fn never(_: usize, _: usize) -> bool {
        panic!("no copies to compare")
    }

    #[test]
    fn a_folder_wins_over_a_file_and_a_file_over_the_rest() {
        let c = |k: char| match k {
            'd' => Class::Dir,
            'f' => Class::File,
            _ => Class::Other,
        };
        let p = plan_name(&[(0, 'f'), (1, 'd'), (2, 'l')], c);
        assert_eq!(p.winner, Winner::Dir(vec![1]));
        assert_eq!(p.aside, vec![(0, 'f'), (2, 'l')]);
        let p = plan_name(&[(0, 'l'), (1, 'f'), (2, 'f')], c);
        assert_eq!(p.winner, Winner::File(vec![1, 2]));
        assert_eq!(p.aside, vec![(0, 'l')]);
        let p = plan_name(&[(1, 'l'), (2, 'p')], c);
        assert_eq!(p.winner, Winner::Other(1, 'l'));
        assert_eq!(p.aside, vec![(2, 'p')]);
    }

    #[test]
    fn whole_copies_keep_the_newest() {
        let found = [
            piece(0, None, 5, 10),
            piece(1, None, 5, 20),
            piece(2, None, 4, 5),
        ];
        let p = plan_file(&found, 3, |a, b| (a, b) == (0, 1)).unwrap();
        assert_eq!(p.layout, FileLayout::Whole { tier: 1 });
        assert_eq!((p.size, p.pieces.clone()), (5, vec![1]));
        assert_eq!(
            p.steps,
            vec![
                Step::RemoveCopy { tier: 0 },
                Step::SetAside {
                    tier: 2,
                    why: Aside::OlderCopy { len: 4 }
                }
            ]
        );
        // Equal times: the last in tier order, as `max_by_key` picks.
        let p = plan_file(&[piece(0, None, 1, 7), piece(1, None, 2, 7)], 2, |_, _| {
            false
        });
        assert_eq!(p.unwrap().layout, FileLayout::Whole { tier: 1 });
        assert_eq!(plan_file(&[], 2, never), None);
    }

    #[test]
    fn a_whole_label_naming_another_tier_is_noted() {
        let l = FileLayout::Whole { tier: 0 }.encode();
        let p = plan_file(&[piece(1, Some(&l), 3, 1)], 2, never).unwrap();
        assert_eq!(p.layout, FileLayout::Whole { tier: 1 });
        assert_eq!(p.steps, vec![Step::WrongTier { tier: 1, says: 0 }]);
    }

    #[test]
    fn an_unusable_label_makes_a_whole_file() {
        let p = plan_file(&[piece(0, Some("junk"), 3, 1)], 2, never).unwrap();
        assert_eq!(p.layout, FileLayout::Whole { tier: 0 });
        assert!(matches!(&p.steps[..], [Step::Unusable { tier: 0, raw, .. }] if raw == "junk"));
    }

    #[test]
    fn stripe_pieces_give_the_size_and_the_missing_ones() {
        let l = stripe(vec![0, 1, 2]);
        let label = l.encode_with_id(Some(0xab));
        let FileLayout::Stripe(m) = &l else { panic!() };
        let found = [
            piece(0, Some(&label), 8192, 1),
            piece(1, Some(&label), 100, 1),
        ];
        let p = plan_file(&found, 3, never).unwrap();
        assert_eq!(p.layout, l);
        assert_eq!((p.id, p.label.as_str()), (Some(0xab), label.as_str()));
        assert_eq!(p.size, m.logical_end(0, 8192).max(m.logical_end(1, 100)));
        assert_eq!(p.pieces, vec![0, 1]);
        assert_eq!(p.steps, vec![Step::Missing { tier: 2 }]);
    }

    /// The case fsck and the scan once described differently: an empty piece without a
    /// label on a tier of the pattern is adopted (nothing to lose, no conflict copy), one
    /// with bytes is set aside (never claimed), and one off the pattern is set aside.
    #[test]
    fn an_empty_unlabelled_piece_on_the_pattern_is_adopted() {
        let l = stripe(vec![0, 1]);
        let label = l.encode_with_id(Some(7));
        let p = plan_file(
            &[piece(0, Some(&label), 10, 1), piece(1, None, 0, 1)],
            3,
            never,
        );
        let p = p.unwrap();
        assert_eq!(p.pieces, vec![0, 1]);
        assert_eq!(p.steps, vec![Step::Adopt { tier: 1 }]);

        let p = plan_file(
            &[piece(0, Some(&label), 10, 1), piece(1, None, 3, 1)],
            3,
            never,
        );
        let p = p.unwrap();
        assert_eq!(p.pieces, vec![0]);
        let aside = Step::SetAside {
            tier: 1,
            why: Aside::NotOfStripe(Stray::Unlabelled),
        };
        assert_eq!(p.steps, vec![aside, Step::Missing { tier: 1 }]);

        let p = plan_file(
            &[piece(0, Some(&label), 10, 1), piece(2, None, 0, 1)],
            3,
            never,
        );
        let p = p.unwrap();
        assert_eq!(p.pieces, vec![0]);
        assert!(matches!(p.steps[0], Step::SetAside { tier: 2, .. }));
        assert_eq!(p.steps[1], Step::Missing { tier: 1 });
    }

    /// An empty label says nothing, like none: such a piece, empty, is adopted too.
    #[test]
    fn an_empty_label_is_no_label() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("piece");
        std::fs::write(&p, b"").unwrap();
        let on = Beneath::new(d.path());
        assert_eq!(read_label(on, &p).unwrap(), None);
        crate::testutil::require!(
            crate::sys::lsetxattr(&p, OsStr::new(LAYOUT_XATTR), b"", 0).is_ok(),
            "no user xattrs on the temp file system"
        );
        assert_eq!(read_label(on, &p).unwrap(), None);
        assert_eq!(read_layout(on, &p, 2), LayoutRead::Absent);
        let l = stripe(vec![0, 1]).encode();
        let found = [piece(0, Some(&l), 1, 1), read_piece(on, &p, 1).unwrap()];
        let plan = plan_file(&found, 2, never).unwrap();
        assert_eq!(plan.steps, vec![Step::Adopt { tier: 1 }]);
        crate::sys::lsetxattr(&p, OsStr::new(LAYOUT_XATTR), l.as_bytes(), 0).unwrap();
        assert_eq!(read_label(on, &p).unwrap().as_deref(), Some(l.as_str()));
    }

    #[test]
    fn pieces_of_other_files_are_set_aside() {
        let l = stripe(vec![0, 1, 2]);
        let mine = l.encode_with_id(Some(1));
        let theirs = l.encode_with_id(Some(2));
        let other = stripe(vec![1, 0]).encode();
        let found = [
            piece(0, Some(&mine), 10, 1),
            piece(1, Some(&theirs), 10, 1),
            piece(2, Some(&other), 10, 1),
            piece(3, Some("junk"), 10, 1),
        ];
        let p = plan_file(&found, 4, never).unwrap();
        assert_eq!(p.pieces, vec![0]);
        let aside = |tier, s| Step::SetAside {
            tier,
            why: Aside::NotOfStripe(s),
        };
        assert_eq!(
            p.steps,
            vec![
                Step::Unusable {
                    tier: 3,
                    raw: "junk".into(),
                    why: FileLayout::decode("junk", 4).unwrap_err()
                },
                aside(1, Stray::OtherId(Some(2))),
                aside(2, Stray::OtherLayout(other.clone())),
                aside(3, Stray::Unusable("junk".into())),
                Step::Missing { tier: 1 },
                Step::Missing { tier: 2 },
            ]
        );
        // The file's own label on a tier its pattern does not name.
        let found = [piece(0, Some(&mine), 10, 1), piece(3, Some(&mine), 0, 1)];
        let p = plan_file(&found, 4, never).unwrap();
        assert_eq!(p.steps[0], aside(3, Stray::OffPattern));
    }

    /// A piece short of its share (a hole at the file's end on that tier) is no problem;
    /// the size is the furthest logical end of any piece.
    #[test]
    fn the_size_is_the_furthest_piece_end() {
        let l = stripe(vec![0, 1]);
        let label = l.encode();
        let found = [
            piece(0, Some(&label), 100, 1),
            piece(1, Some(&label), 5000, 1),
        ];
        let p = plan_file(&found, 2, never).unwrap();
        // Piece 1's second stripe is the file's fourth: 3 * 4096 + 904.
        assert_eq!(p.size, 3 * 4096 + 904);
        assert!(p.steps.is_empty());
    }

    /// Names with the same backing inodes are one file; a name holding a strict subset
    /// of another's (a link or unlink cut short between tiers) is removed; names sharing
    /// some but not all are reported and left alone.
    #[test]
    fn hard_links_group_by_backing_inode_and_partial_names_go() {
        let full = vec![(0, 1, 10), (1, 2, 20)];
        let names = vec![
            full.clone(),                 // 0: a striped file
            vec![(0, 1, 99)],             // 1: a whole file of its own
            vec![(1, 2, 20), (0, 1, 10)], // 2: another name of 0 (order does not matter)
            vec![(0, 1, 10)],             // 3: a link of 0 cut short after the first tier
            vec![(0, 1, 99)],             // 4: another name of 1
            vec![(0, 1, 10), (1, 2, 21)], // 5: shares one inode with 0, not the other
        ];
        let p = plan_links(&names);
        assert_eq!(p.groups, vec![vec![0, 2], vec![1, 4]]);
        assert_eq!(p.partial, vec![(3, 0)]);
        assert_eq!(p.tangled, vec![(0, 5), (2, 5)]);
        // Alone, a subset name is a file: nothing to remove it for.
        assert_eq!(plan_links(&[vec![(0, 1, 10)]]), LinkPlan::default());
        // Two partial names of one file both go; the full one stays alone.
        let p = plan_links(&[full.clone(), vec![(0, 1, 10)], vec![(1, 2, 20)]]);
        assert!(p.groups.is_empty());
        assert_eq!(p.partial, vec![(1, 0), (2, 0)]);
    }

    #[test]
    fn backing_ids_see_links_on_the_tier() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::write(&a, b"x").unwrap();
        let on = |_t: usize| (Beneath::new(d.path()), a.clone());
        let (ids, shared) = backing_ids(on, &[0]);
        assert_eq!((ids.len(), shared), (1, false));
        std::fs::hard_link(&a, d.path().join("b")).unwrap();
        let on_b = |_t: usize| (Beneath::new(d.path()), d.path().join("b"));
        let (ids_b, shared) = backing_ids(on_b, &[0, 1]);
        assert!(shared);
        assert_eq!(ids_b[0].1, ids[0].1);
        assert_eq!(
            ids_b.iter().map(|i| i.2).collect::<Vec<_>>(),
            vec![ids[0].2; 2]
        );
        assert!(
            backing_ids(|_| (Beneath::new(d.path()), d.path().join("c")), &[0])
                .0
                .is_empty()
        );
    }

    #[test]
    fn files_equal_compares_bytes() {
        let d = tempfile::tempdir().unwrap();
        let w = |n: &str, b: &[u8]| {
            std::fs::write(d.path().join(n), b).unwrap();
            File::open(d.path().join(n)).unwrap()
        };
        let big: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
        assert!(files_equal(w("a", &big), w("b", &big)));
        assert!(!files_equal(w("c", &big), w("d", &big[1..])));
        assert!(files_equal(w("e", b""), w("f", b"")));
        assert!(!files_equal(w("g", b"x"), w("h", b"y")));
    }
}
