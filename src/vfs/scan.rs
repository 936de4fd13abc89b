//! The mount-time scan: rebuilding the tree from what the tiers hold.
//!
//! The tiers are the only persistent copy of the namespace. A folder on any tier is a
//! folder (mirrored where missing); a file's pieces are recognised by their layout xattr; a
//! duplicate left by an interrupted move is resolved (an identical older copy removed, a
//! different one renamed `NAME.tierfs-conflict-TIER`, never deleted); our own temporaries
//! are removed. A striped file whose pieces sit at two paths (a rename that reached only
//! some tiers) is put back together by its file id before any missing piece is recreated.

use crate::data::file::FileNode;
use crate::error::{Error, Result};
use crate::layout::{FileLayout, LAYOUT_XATTR};
use crate::vfs::backing;
use crate::vfs::state::TierFs;
use crate::vfs::tree::{NodeData, Tree};
use crate::vfs::types::*;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) fn scan(fs: &TierFs) -> Result<()> {
    let mut tree = fs.tree.write();
    let mut stack = vec![(ROOT_INO, PathBuf::new())];
    // Striped files with an id or a missing piece, settled once the whole tree is known.
    let mut striped: Vec<(u64, PathBuf, StripeFound)> = Vec::new();
    while let Some((ino, rel)) = stack.pop() {
        // name -> (tier, kind) for every tier that has it
        let mut found: BTreeMap<OsString, Vec<(usize, Kind)>> = BTreeMap::new();
        // A tier left out of a degraded mount is neither read nor mirrored to.
        for t in fs.tiers.iter().filter(|t| !t.missing) {
            let dir = t.path(&rel);
            let tfs = t.fs();
            let rd = match tfs.read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // A folder missing on one tier (made by hand, or a failed mirror).
                    tfs.mkdir_all(&dir)
                        .map_err(|e| Error::tier(&t.name, "mkdir", &dir, e))?;
                    continue;
                }
                Err(e) => return Err(Error::tier(&t.name, "readdir", &dir, e)),
            };
            for (name, ft) in rd {
                let path = dir.join(&name);
                if name.as_bytes().starts_with(TMP_PREFIX.as_bytes()) {
                    log::info!("removing leftover temporary {}", path.display());
                    let _ = tfs.unlink(&path);
                    continue;
                }
                if ino == ROOT_INO && name == fs.stats_dir {
                    log::warn!(
                        "{} hides the stats folder; it is not shown (rename it on the tier)",
                        path.display()
                    );
                    continue;
                }
                if let Some(k) = kind_of(ft) {
                    found.entry(name).or_default().push((t.index, k));
                }
            }
        }
        // Entries set aside during this pass (conflict copies) are listed too, so they
        // are visible at once rather than after the next mount.
        let mut entries: std::collections::VecDeque<(OsString, Vec<(usize, Kind)>)> =
            found.into_iter().collect();
        while let Some((name, on)) = entries.pop_front() {
            let child_rel = rel.join(&name);
            if on.iter().any(|(_, k)| *k == Kind::Dir) {
                for (t, k) in &on {
                    if *k != Kind::Dir {
                        set_aside(
                            fs,
                            *t,
                            &child_rel,
                            "a folder of the same name exists on another tier",
                        );
                    }
                }
                for t in fs.tiers.iter().filter(|t| !t.missing) {
                    if !on.iter().any(|(i, k)| *i == t.index && *k == Kind::Dir) {
                        let p = t.path(&child_rel);
                        let _ = t.fs().mkdir_all(&p);
                    }
                }
                let c = tree.insert(
                    ino,
                    &name,
                    NodeData::Dir {
                        children: BTreeMap::new(),
                    },
                );
                stack.push((c, child_rel));
            } else if on.iter().any(|(_, k)| *k == Kind::File) {
                let file_tiers: Vec<usize> = on
                    .iter()
                    .filter(|(_, k)| *k == Kind::File)
                    .map(|(t, _)| *t)
                    .collect();
                for (t, k) in &on {
                    if *k != Kind::File {
                        set_aside(
                            fs,
                            *t,
                            &child_rel,
                            "a file of the same name exists on another tier",
                        );
                    }
                }
                if let Some((layout, size, stripe)) = adopt_file(fs, &child_rel, &file_tiers) {
                    backing::account_resize(fs, &layout, 0, size);
                    for t in layout.tiers() {
                        fs.tiers[t].counters.files.fetch_add(1, Ordering::Relaxed);
                    }
                    if let FileLayout::Whole { tier } = layout {
                        fs.placer.record_existing(ino, tier, size);
                    }
                    let node = FileNode::new(layout, size, fs.tiers.len());
                    let c = tree.insert(ino, &name, NodeData::File(Arc::new(node)));
                    if let Some(sf) = stripe {
                        striped.push((c, child_rel.clone(), sf));
                    }
                }
            } else {
                let (t, k) = on[0];
                for (other, _) in &on[1..] {
                    set_aside(
                        fs,
                        *other,
                        &child_rel,
                        "a duplicate of an entry on another tier",
                    );
                }
                if t != 0 {
                    // Non-file objects live on the first tier: move it there.
                    let from = fs.tiers[t].path(&child_rel);
                    let to = fs.tiers[0].path(&child_rel);
                    let first = fs.tiers[0].fs();
                    if let Err(e) = fs.tiers[t].fs().rename_into(&from, first, &to, 0) {
                        log::warn!("cannot move {} to the first tier: {e}", from.display());
                    }
                }
                tree.insert(ino, &name, NodeData::Other(k));
            }
            for (new_rel, t) in std::mem::take(&mut *fs.aside.lock()) {
                if new_rel.parent() == Some(rel.as_path()) {
                    if let (Some(n), Ok(m)) = (
                        new_rel.file_name(),
                        fs.tiers[t].fs().stat(&fs.tiers[t].path(&new_rel)),
                    ) {
                        if let Some(k) = kind_of(m.file_type()) {
                            entries.push_back((n.to_os_string(), vec![(t, k)]));
                        }
                    }
                }
            }
        }
    }
    settle_stripes(fs, &mut tree, striped);
    Ok(())
}

/// After the walk: puts striped files split over several paths back together (see
/// `layout::plan_rejoin`), then recreates the pieces still missing, empty.
///
/// A missing piece is not recreated before the whole tree is known: the piece may sit
/// at another path (a rename that reached only some tiers), and an empty piece made in
/// its place would hide the split for good, each half reading zeros where the other
/// holds the bytes.
pub(crate) fn settle_stripes(
    fs: &TierFs,
    tree: &mut Tree,
    mut found: Vec<(u64, PathBuf, StripeFound)>,
) {
    let mut by_id: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, (_, _, sf)) in found.iter().enumerate() {
        if let (Some(id), false) = (sf.id, sf.missing.is_empty()) {
            by_id.entry(id).or_default().push(i);
        }
    }
    for idxs in by_id.values().filter(|v| v.len() > 1) {
        let layouts: Vec<FileLayout> = idxs
            .iter()
            .filter_map(|i| match &tree.nodes.get(&found[*i].0)?.data {
                NodeData::File(f) => Some(f.layout()),
                _ => None,
            })
            .collect();
        let (Some(FileLayout::Stripe(m)), true) = (layouts.first(), layouts.len() == idxs.len())
        else {
            continue;
        };
        if layouts.iter().any(|l| *l != layouts[0]) {
            continue;
        }
        let parts: Vec<crate::layout::Part> = idxs
            .iter()
            .map(|i| crate::layout::Part {
                rel: found[*i].1.clone(),
                tiers: m
                    .tiers
                    .iter()
                    .copied()
                    .filter(|t| !fs.tiers[*t].missing && !found[*i].2.missing.contains(t))
                    .collect(),
            })
            .collect();
        let Some((keep, moves)) = crate::layout::plan_rejoin(m, &parts) else {
            continue;
        };
        let mut gave: Vec<Vec<usize>> = vec![Vec::new(); parts.len()];
        for (from, t) in moves {
            let src = fs.tiers[t].path(&parts[from].rel);
            let dst = fs.tiers[t].path(&parts[keep].rel);
            match fs.tiers[t].fs().rename(&src, &dst, libc::RENAME_NOREPLACE) {
                Ok(()) => {
                    log::warn!(
                        "/{}: its piece on tier '{}' was at /{} (a rename that did not \
                         reach every tier split the file); moved back",
                        parts[keep].rel.display(),
                        fs.tiers[t].name,
                        parts[from].rel.display()
                    );
                    found[idxs[keep]].2.missing.retain(|x| *x != t);
                    gave[from].push(t);
                }
                Err(e) => log::error!(
                    "/{}: cannot move its piece on tier '{}' back from /{}: {e}",
                    parts[keep].rel.display(),
                    fs.tiers[t].name,
                    parts[from].rel.display()
                ),
            }
        }
        // The kept file's size now counts the pieces it got back.
        let kept = found[idxs[keep]].0;
        if let Some(NodeData::File(f)) = tree.nodes.get(&kept).map(|n| &n.data) {
            let size = m
                .tiers
                .iter()
                .filter_map(|t| {
                    let p = fs.tiers[*t].path(&parts[keep].rel);
                    Some(m.logical_end(*t, fs.tiers[*t].fs().stat(&p).ok()?.len()))
                })
                .max()
                .unwrap_or(0);
            let old = f.size.swap(size, Ordering::AcqRel);
            backing::account_resize(fs, &FileLayout::Stripe(m.clone()), old, size);
        }
        // A half that gave away every piece it had is gone.
        for (p, given) in gave.iter().enumerate() {
            if p == keep || given.is_empty() || given.len() < parts[p].tiers.len() {
                continue;
            }
            let ino = found[idxs[p]].0;
            if let Some(n) = tree.nodes.remove(&ino) {
                if let Ok(c) = tree.children_mut(n.parent) {
                    c.remove(&n.name);
                }
                if let NodeData::File(f) = &n.data {
                    backing::account_resize(fs, &f.layout(), f.size(), 0);
                    for t in f.layout().tiers() {
                        let _ = fs.tiers[t].counters.files.fetch_update(
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                            |v| Some(v.saturating_sub(1)),
                        );
                    }
                }
            }
            found[idxs[p]].2.missing.clear();
        }
    }
    for (_, rel, sf) in &found {
        for t in &sf.missing {
            let p = fs.tiers[*t].path(rel);
            log::error!(
                "{}: stripe piece missing; its stripes read as zeros (`tierfs fsck` \
                 lists such files)",
                p.display()
            );
            // The piece carries the layout like every other, or the next mount
            // would take it for a whole file of its own.
            let tfs = fs.tiers[*t].fs();
            if tfs
                .open(&p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o666)
                .is_ok()
            {
                let _ = tfs.setxattr(&p, OsStr::new(LAYOUT_XATTR), sf.encoded.as_bytes(), 0);
            }
        }
    }
}

/// Renames a conflicting backing entry out of the way (kept, visible, never deleted).
pub(crate) fn set_aside(fs: &TierFs, tier: usize, rel: &Path, why: &str) {
    let from = fs.tiers[tier].path(rel);
    // Never replace an earlier conflict copy: take the first free name.
    for n in 1..1000 {
        let to_rel = crate::layout::conflict_path(rel, &fs.tiers[tier].name, n);
        let to = fs.tiers[tier].path(&to_rel);
        match fs.tiers[tier]
            .fs()
            .rename(&from, &to, libc::RENAME_NOREPLACE)
        {
            Ok(()) => {
                log::warn!("{}: {why}; renamed to {}", from.display(), to.display());
                fs.aside.lock().push((to_rel, tier));
                return;
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => {
                log::warn!("{}: {why}; cannot rename it aside: {e}", from.display());
                return;
            }
        }
    }
    log::warn!(
        "{}: {why}; left in place (too many conflict copies)",
        from.display()
    );
}

/// Works out the layout and size of a file whose pieces were found on `on` tiers; for a
/// striped file also its id and the pieces missing on tiers of this mount (which
/// [`TierFs::settle_stripes`] looks for elsewhere before it recreates them).
pub(crate) fn adopt_file(
    fs: &TierFs,
    rel: &Path,
    on: &[usize],
) -> Option<(FileLayout, u64, Option<StripeFound>)> {
    let n = fs.tiers.len();
    let mut layouts = Vec::new();
    // Pieces with no layout xattr at all.
    let mut bare = Vec::new();
    // The raw xattr of each piece.
    let mut raw = Vec::new();
    for &t in on {
        let p = fs.tiers[t].path(rel);
        let tfs = fs.tiers[t].fs();
        let x = tfs.getxattr(&p, OsStr::new(LAYOUT_XATTR));
        raw.push(
            x.as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default(),
        );
        let l = match x {
            Ok(v) => match FileLayout::decode(&String::from_utf8_lossy(&v), n) {
                Ok(l) => l,
                Err(e) => {
                    log::warn!(
                        "{}: {e}; treating it as a whole file on its tier",
                        p.display()
                    );
                    FileLayout::Whole { tier: t }
                }
            },
            Err(_) => FileLayout::Whole { tier: t },
        };
        let len = tfs.stat(&p).map(|m| m.len()).unwrap_or(0);
        layouts.push((t, l, len));
        bare.push(raw.last().is_some_and(|r| r.is_empty()));
    }
    if let Some((first, (_, FileLayout::Stripe(m), _))) = layouts
        .iter()
        .enumerate()
        .find(|(_, (_, l, _))| matches!(l, FileLayout::Stripe(_)))
    {
        let m = m.clone();
        // Every piece of the file carries this text, id included.
        let encoded = raw[first].clone();
        let id = crate::layout::decode_id(&encoded);
        let mut size = 0;
        let mut have = Vec::new();
        for (i, (t, l, len)) in layouts.iter().enumerate() {
            // Creation writes each piece's xattr before the file takes any data, so an
            // empty piece without one, on a tier of the pattern, is this file's piece
            // from a creation a crash interrupted: claim it.
            if bare[i] && *len == 0 && m.tiers.contains(t) {
                let p = fs.tiers[*t].path(rel);
                let tfs = fs.tiers[*t].fs();
                if tfs
                    .setxattr(&p, OsStr::new(LAYOUT_XATTR), encoded.as_bytes(), 0)
                    .is_ok()
                {
                    have.push(*t);
                    log::info!(
                        "{}: empty piece of an interrupted creation, adopted",
                        p.display()
                    );
                    continue;
                }
            }
            if !m.tiers.contains(t)
                || *l != FileLayout::Stripe(m.clone())
                || crate::layout::decode_id(&raw[i]) != id
            {
                set_aside(
                    fs,
                    *t,
                    rel,
                    "a piece that does not belong to the file's stripe layout",
                );
                continue;
            }
            have.push(*t);
            size = size.max(m.logical_end(*t, *len));
        }
        let mut missing = Vec::new();
        for t in &m.tiers {
            if fs.tiers[*t].missing {
                log::warn!(
                    "{}: its stripes on missing tier '{}' answer EIO{}",
                    rel.display(),
                    fs.tiers[*t].name,
                    if m.tiers.last() == Some(t) {
                        ""
                    } else {
                        " (its size may read short)"
                    }
                );
                continue;
            }
            if !have.contains(t) && !fs.tiers[*t].fs().exists(&fs.tiers[*t].path(rel)) {
                missing.push(*t);
            }
        }
        let found = StripeFound {
            id,
            encoded,
            missing,
        };
        return Some((FileLayout::Stripe(m), size, Some(found)));
    }
    // Whole files: one copy is the rule; two mean a move or a cross-tier rename was
    // interrupted. Keep the newest; an identical older copy is dropped, a different one
    // is set aside.
    let newest = layouts
        .iter()
        .max_by_key(|(t, _, _)| {
            fs.tiers[*t]
                .fs()
                .stat(&fs.tiers[*t].path(rel))
                .map(|m| (m.mtime(), m.mtime_nsec()))
                .unwrap_or((0, 0))
        })?
        .clone();
    for (t, _, len) in &layouts {
        if *t == newest.0 {
            continue;
        }
        let p = fs.tiers[*t].path(rel);
        let open = |t: usize, p: &Path| fs.tiers[t].fs().open(p, libc::O_RDONLY, 0).ok();
        let same = *len == newest.2
            && match (open(*t, &p), open(newest.0, &fs.tiers[newest.0].path(rel))) {
                (Some(a), Some(b)) => files_equal(a, b),
                _ => false,
            };
        if same {
            log::warn!(
                "{}: duplicate of the copy on tier '{}'; removed",
                p.display(),
                fs.tiers[newest.0].name
            );
            let _ = fs.tiers[*t].fs().unlink(&p);
        } else {
            set_aside(
                fs,
                *t,
                rel,
                "an older, different copy of a file held by another tier",
            );
        }
    }
    Some((FileLayout::Whole { tier: newest.0 }, newest.2, None))
}

/// A striped file as the scan found it (see [`TierFs::adopt_file`]).
pub(crate) struct StripeFound {
    /// The id its pieces carry (none for pieces made before ids existed).
    pub(crate) id: Option<u64>,
    /// Its layout xattr, id included: what a recreated piece gets.
    pub(crate) encoded: String,
    /// Tiers of this mount on which its piece is missing.
    pub(crate) missing: Vec<usize>,
}

pub(crate) fn files_equal(mut fa: fs::File, mut fb: fs::File) -> bool {
    use std::io::Read;
    let mut ba = vec![0u8; 1 << 20];
    let mut bb = vec![0u8; 1 << 20];
    loop {
        let na = match fa.read(&mut ba) {
            Ok(n) => n,
            Err(_) => return false,
        };
        let mut nb = 0;
        while nb < na {
            match fb.read(&mut bb[nb..na]) {
                Ok(0) => return false,
                Ok(n) => nb += n,
                Err(_) => return false,
            }
        }
        if na == 0 {
            return fb.read(&mut bb[..1]).map(|n| n == 0).unwrap_or(false);
        }
        if ba[..na] != bb[..na] {
            return false;
        }
    }
}
