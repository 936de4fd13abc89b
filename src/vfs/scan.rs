//! The mount-time scan: rebuilding the tree from what the tiers hold.
//!
//! The tiers are the only persistent copy of the namespace. Each name is resolved with the
//! rules `tierfs fsck` and `tierfs export` use too ([`crate::tier::resolve`]), and the scan
//! carries the plan out at once: a folder on any tier is a folder (mirrored where missing);
//! a file's pieces are recognised by their layout xattr; a duplicate left by an interrupted
//! move is resolved (an identical older copy removed, a different one renamed
//! `NAME.tierfs-conflict-TIER`, never deleted); our own temporaries are removed. A striped
//! file whose pieces sit at two paths (a rename that reached only some tiers) is put back
//! together by its file id before any missing piece is recreated. Names whose pieces are
//! the same backing inodes are one file with several names (hard links), and a name
//! holding only some of another's is the trace of an interrupted link or unlink and goes
//! ([`settle_links`]).

use crate::error::{Error, Result};
use crate::inodes::file::FileNode;
use crate::inodes::pieces;
use crate::inodes::tree::{NodeData, Tree};
use crate::inodes::types::{kind_of, Kind, ROOT_INO, TMP_PREFIX};
use crate::layout::{FileLayout, Part, StripeMap, LAYOUT_XATTR};
use crate::tier::resolve::{
    backing_ids, files_equal, plan_file, plan_links, plan_name, read_pieces, BackingId, Class,
    FilePlan, Step, Winner,
};
use crate::vfs::state::TierFs;
use std::collections::{BTreeMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One folder's entries: name -> (tier, kind) for every tier of the mount that has it.
pub(crate) type Entries = BTreeMap<OsString, Vec<(usize, Kind)>>;

/// What placing one name in the tree left to do.
pub(crate) enum Placed {
    Nothing,
    /// A folder, to walk.
    Dir(u64),
    /// A striped file, to settle once the whole tree is known.
    Striped(u64, StripeFound),
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

/// How the resolver counts a kind of entry.
pub(crate) fn class_of(k: Kind) -> Class {
    match k {
        Kind::Dir => Class::Dir,
        Kind::File => Class::File,
        _ => Class::Other,
    }
}

pub(crate) fn scan(fs: &TierFs) -> Result<()> {
    let (held, cautious) = crate::vfs::held::finish_relinks(fs);
    let mut tree = fs.tree.write();
    let mut stack = vec![(ROOT_INO, PathBuf::new())];
    // Striped files with an id or a missing piece, settled once the whole tree is known.
    let mut striped: Vec<(u64, PathBuf, StripeFound)> = Vec::new();
    while let Some((ino, rel)) = stack.pop() {
        // Entries set aside during this pass (conflict copies) are listed too, so they
        // are visible at once rather than after the next mount.
        let mut entries: VecDeque<_> = list_folder(fs, ino, &rel, &held.keeps, cautious)?
            .into_iter()
            .collect();
        while let Some((name, on)) = entries.pop_front() {
            let child_rel = rel.join(&name);
            if let Some(why) = crate::vfs::held::why_held(fs, &held, cautious, &child_rel, &on) {
                crate::vfs::held::place_held(fs, &mut tree, ino, &name, &on, &why);
                continue;
            }
            match place(fs, &mut tree, ino, &name, &child_rel, &on) {
                Placed::Nothing => {}
                Placed::Dir(c) => stack.push((c, child_rel)),
                Placed::Striped(c, sf) => striped.push((c, child_rel, sf)),
            }
            list_aside(fs, &rel, &mut entries);
        }
    }
    settle_stripes(fs, &mut tree, striped);
    Ok(())
}

/// Lists folder `rel` (inode `ino`) on every tier of this mount: makes it where it is
/// missing, removes our leftover temporaries (not the `keeps` of held journals, nor any
/// when `cautious`: a journal may be unseen; those it leaves out too), and leaves out what
/// hides the stats folder.
pub(crate) fn list_folder(
    fs: &TierFs,
    ino: u64,
    rel: &Path,
    keeps: &std::collections::BTreeSet<PathBuf>,
    cautious: bool,
) -> Result<Entries> {
    let mut found = Entries::new();
    // A tier left out of a degraded mount is neither read nor mirrored to.
    for t in fs.tiers.iter().filter(|t| !t.missing) {
        let dir = t.path(rel);
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
                if cautious || keeps.contains(&rel.join(&name)) {
                    continue;
                }
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
    Ok(found)
}

/// Queues the conflict copies this pass made in folder `rel`, to be placed too.
pub(crate) fn list_aside(
    fs: &TierFs,
    rel: &Path,
    entries: &mut VecDeque<(OsString, Vec<(usize, Kind)>)>,
) {
    for (new_rel, t) in std::mem::take(&mut *fs.aside.lock()) {
        if new_rel.parent() != Some(rel) {
            continue;
        }
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

/// Resolves name `name` (at `rel`, in folder `ino`) found on the `on` tiers, carries
/// the plan out on the tiers and puts the result in the tree.
pub(crate) fn place(
    fs: &TierFs,
    tree: &mut Tree,
    ino: u64,
    name: &OsStr,
    rel: &Path,
    on: &[(usize, Kind)],
) -> Placed {
    let plan = plan_name(on, class_of);
    let why = match plan.winner {
        Winner::Dir(_) => "a folder of the same name exists on another tier",
        Winner::File(_) => "a file of the same name exists on another tier",
        Winner::Other(..) => "a duplicate of an entry on another tier",
    };
    for (t, _) in &plan.aside {
        set_aside(fs, *t, rel, why);
    }
    match plan.winner {
        Winner::Dir(dirs) => {
            for t in fs.tiers.iter().filter(|t| !t.missing) {
                if !dirs.contains(&t.index) {
                    let _ = t.fs().mkdir_all(&t.path(rel));
                }
            }
            let children = BTreeMap::new();
            Placed::Dir(tree.insert(ino, name, NodeData::Dir { children }))
        }
        Winner::File(tiers) => place_file(fs, tree, ino, name, rel, &tiers),
        Winner::Other(t, k) => {
            if t != 0 {
                // Non-file objects live on the first tier: move it there.
                let from = fs.tiers[t].path(rel);
                let to = fs.tiers[0].path(rel);
                let first = fs.tiers[0].fs();
                if let Err(e) = fs.tiers[t].fs().rename_into(&from, first, &to, 0) {
                    log::warn!("cannot move {} to the first tier: {e}", from.display());
                }
            }
            tree.insert(ino, name, NodeData::Other(k));
            Placed::Nothing
        }
    }
}

/// Puts the file whose pieces are on the `on` tiers in the tree and its accounts.
pub(crate) fn place_file(
    fs: &TierFs,
    tree: &mut Tree,
    ino: u64,
    name: &OsStr,
    rel: &Path,
    on: &[usize],
) -> Placed {
    let (layout, size, stripe) = match adopt_file(fs, rel, on) {
        Ok(Some(a)) => a,
        Ok(None) => return Placed::Nothing,
        Err(why) => {
            let on: Vec<(usize, Kind)> = on.iter().map(|&t| (t, Kind::File)).collect();
            crate::vfs::held::place_held(fs, tree, ino, name, &on, &why);
            return Placed::Nothing;
        }
    };
    pieces::account_resize(&fs.tiers, &layout, 0, size);
    for t in layout.tiers() {
        fs.tiers[t].counters.files.fetch_add(1, Ordering::Relaxed);
    }
    if let FileLayout::Whole { tier } = layout {
        fs.placer.record_existing(ino, tier, size);
    }
    let node = FileNode::new(layout, size, fs.tiers.len());
    let c = tree.insert(ino, name, NodeData::File(Arc::new(node)));
    match stripe {
        Some(sf) => Placed::Striped(c, sf),
        None => Placed::Nothing,
    }
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
        rejoin(fs, tree, &mut found, idxs);
    }
    // Before any piece is recreated: an empty piece made for the partial name of an
    // interrupted link would make it a file of its own.
    settle_links(fs, tree, &mut found);
    for (ino, rel, sf) in &found {
        // A file with several names gets the piece under each of them.
        let others: Vec<PathBuf> = tree.get(*ino).map_or_else(
            |_| Vec::new(),
            |n| {
                n.links
                    .iter()
                    .filter_map(|(p, name)| tree.name_rel(*p, name))
                    .collect()
            },
        );
        for t in &sf.missing {
            recreate_piece(fs, rel, *t, &sf.encoded);
            let tier = &fs.tiers[*t];
            for o in &others {
                let _ = tier.fs().link(&tier.path(rel), &tier.path(o));
            }
        }
    }
}

/// Names that are one file with several names (hard links) become one node, and the
/// partial names an interrupted link or unlink left are removed, by the rule of
/// [`crate::tier::resolve::plan_links`]. The first name in path order is the primary one.
pub(crate) fn settle_links(
    fs: &TierFs,
    tree: &mut Tree,
    found: &mut [(u64, PathBuf, StripeFound)],
) {
    let mut cands: Vec<(PathBuf, u64, Vec<BackingId>)> = Vec::new();
    for (&ino, n) in &tree.nodes {
        // A held name (`vfs::held`) is left as it is: a later mount settles it.
        if fs.contain.is_failed(ino) {
            continue;
        }
        let tiers = match &n.data {
            NodeData::Dir { .. } => continue,
            NodeData::File(f) => f.layout().tiers(),
            NodeData::Other(_) => vec![0],
        };
        let tiers: Vec<usize> = tiers
            .into_iter()
            .filter(|t| !fs.tiers[*t].missing)
            .collect();
        let Some(rel) = tree.rel(ino) else { continue };
        let (ids, shared) = backing_ids(|t| (fs.tiers[t].fs(), fs.tiers[t].path(&rel)), &tiers);
        if shared && !ids.is_empty() {
            cands.push((rel, ino, ids));
        }
    }
    if cands.is_empty() {
        return;
    }
    cands.sort();
    let ids: Vec<Vec<BackingId>> = cands.iter().map(|c| c.2.clone()).collect();
    let plan = plan_links(&ids);
    let unstriped = |found: &mut [(u64, PathBuf, StripeFound)], ino: u64| {
        for f in found.iter_mut().filter(|f| f.0 == ino) {
            f.2.missing.clear();
        }
    };
    for (i, of) in &plan.partial {
        let (rel, ino, ids) = &cands[*i];
        log::warn!(
            "/{}: its pieces are some of /{}'s (a hard link or unlink cut short between              the tiers); removed, the file keeps its name /{}",
            rel.display(),
            cands[*of].0.display(),
            cands[*of].0.display()
        );
        for (t, _, _) in ids {
            let _ = fs.tiers[*t].fs().unlink(&fs.tiers[*t].path(rel));
        }
        drop_node(fs, tree, *ino);
        unstriped(found, *ino);
    }
    for (a, b) in &plan.tangled {
        log::error!(
            "/{} and /{} share some pieces on the tiers but not all (made by hand?); left as              two files, each changing the other (`tierfs fsck` lists them)",
            cands[*a].0.display(),
            cands[*b].0.display()
        );
    }
    for g in &plan.groups {
        let primary = cands[g[0]].1;
        for i in &g[1..] {
            let ino = cands[*i].1;
            let Ok(n) = tree.get(ino) else { continue };
            let (parent, name) = (n.parent, n.name.clone());
            drop_node(fs, tree, ino);
            unstriped(found, ino);
            if let Err(e) = tree.add_name(primary, parent, &name) {
                log::error!(
                    "/{}: cannot join it to /{}: {e}",
                    cands[*i].0.display(),
                    cands[g[0]].0.display()
                );
            }
        }
    }
}

/// Puts back together the striped file whose parts are `found[i]` for `i` in `idxs`
/// (one file id, each part lacking pieces), if they share one layout.
pub(crate) fn rejoin(
    fs: &TierFs,
    tree: &mut Tree,
    found: &mut [(u64, PathBuf, StripeFound)],
    idxs: &[usize],
) {
    let layouts: Vec<FileLayout> = idxs
        .iter()
        .filter_map(|i| match &tree.nodes.get(&found[*i].0)?.data {
            NodeData::File(f) => Some(f.layout()),
            _ => None,
        })
        .collect();
    let (Some(FileLayout::Stripe(m)), true) = (layouts.first(), layouts.len() == idxs.len()) else {
        return;
    };
    if layouts.iter().any(|l| *l != layouts[0]) {
        return;
    }
    let parts: Vec<Part> = idxs
        .iter()
        .map(|i| Part {
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
        return;
    };
    let mut gave: Vec<Vec<usize>> = vec![Vec::new(); parts.len()];
    for (from, t) in moves {
        if move_piece_back(fs, t, &parts[from].rel, &parts[keep].rel) {
            found[idxs[keep]].2.missing.retain(|x| *x != t);
            gave[from].push(t);
        }
    }
    // The kept file's size now counts the pieces it got back.
    resize_rejoined(fs, tree, found[idxs[keep]].0, m, &parts[keep].rel);
    // A half that gave away every piece it had is gone.
    for (p, given) in gave.iter().enumerate() {
        if p == keep || given.is_empty() || given.len() < parts[p].tiers.len() {
            continue;
        }
        drop_node(fs, tree, found[idxs[p]].0);
        found[idxs[p]].2.missing.clear();
    }
}

/// Moves the piece on tier `t` from `from` back to `to`; true when it moved.
pub(crate) fn move_piece_back(fs: &TierFs, t: usize, from: &Path, to: &Path) -> bool {
    let src = fs.tiers[t].path(from);
    let dst = fs.tiers[t].path(to);
    match fs.tiers[t].fs().rename(&src, &dst, libc::RENAME_NOREPLACE) {
        Ok(()) => {
            log::warn!(
                "/{}: its piece on tier '{}' was at /{} (a rename that did not reach every \
                 tier split the file); moved back",
                to.display(),
                fs.tiers[t].name,
                from.display()
            );
            true
        }
        Err(e) => {
            log::error!(
                "/{}: cannot move its piece on tier '{}' back from /{}: {e}",
                to.display(),
                fs.tiers[t].name,
                from.display()
            );
            false
        }
    }
}

/// Sets the size of the rejoined file `ino` (at `rel`, striped by `m`) from its pieces.
pub(crate) fn resize_rejoined(fs: &TierFs, tree: &Tree, ino: u64, m: &StripeMap, rel: &Path) {
    let Some(NodeData::File(f)) = tree.nodes.get(&ino).map(|n| &n.data) else {
        return;
    };
    let size = m
        .tiers
        .iter()
        .filter_map(|t| {
            let p = fs.tiers[*t].path(rel);
            Some(m.logical_end(*t, fs.tiers[*t].fs().stat(&p).ok()?.len()))
        })
        .max()
        .unwrap_or(0);
    let old = f.size.swap(size, Ordering::AcqRel);
    pieces::account_resize(&fs.tiers, &FileLayout::Stripe(m.clone()), old, size);
}

/// Takes file `ino`, whose pieces all moved elsewhere, out of the tree and the accounts.
pub(crate) fn drop_node(fs: &TierFs, tree: &mut Tree, ino: u64) {
    let Some(n) = tree.nodes.remove(&ino) else {
        return;
    };
    if let Ok(c) = tree.children_mut(n.parent) {
        c.remove(&n.name);
    }
    if let NodeData::File(f) = &n.data {
        pieces::account_resize(&fs.tiers, &f.layout(), f.size(), 0);
        for t in f.layout().tiers() {
            let _ = fs.tiers[t].counters.files.fetch_update(
                Ordering::Relaxed,
                Ordering::Relaxed,
                |v| Some(v.saturating_sub(1)),
            );
        }
    }
}

/// Recreates the missing piece of `rel` on tier `t`, empty, with the file's layout
/// xattr `encoded`.
pub(crate) fn recreate_piece(fs: &TierFs, rel: &Path, t: usize, encoded: &str) {
    let p = fs.tiers[t].path(rel);
    log::error!(
        "{}: stripe piece missing; its stripes read as zeros (`tierfs fsck` lists such \
         files)",
        p.display()
    );
    // The piece carries the layout like every other, or the next mount would take it
    // for a whole file of its own. Never over an entry that is there after all (one that
    // could not be stat-ed, or came meanwhile): its bytes may be the stripes.
    let tfs = fs.tiers[t].fs();
    if tfs
        .open(&p, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o666)
        .is_ok()
    {
        let _ = tfs.setxattr(&p, OsStr::new(LAYOUT_XATTR), encoded.as_bytes(), 0);
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

/// Works out the layout and size of a file whose pieces were found on `on` tiers
/// ([`crate::tier::resolve::plan_file`]) and carries the plan out; for a striped file also
/// returns its id and the pieces missing on tiers of this mount (which
/// [`TierFs::settle_stripes`] looks for elsewhere before it recreates them). A piece that
/// cannot be read makes it an error (why), and nothing is changed: planned on a guess, the
/// file could be served torn or have a piece set aside or removed.
pub(crate) fn adopt_file(
    fs: &TierFs,
    rel: &Path,
    on: &[usize],
) -> std::result::Result<Option<(FileLayout, u64, Option<StripeFound>)>, String> {
    let found =
        read_pieces(on, |t| (fs.tiers[t].fs(), fs.tiers[t].path(rel))).map_err(|(t, e)| {
            format!(
                "its piece on tier '{}' cannot be read ({e}): left as it is",
                fs.tiers[t].name
            )
        })?;
    let Some(plan) = plan_file(&found, fs.tiers.len(), |a, b| same_bytes(fs, rel, a, b)) else {
        return Ok(None);
    };
    for step in &plan.steps {
        if let Step::Unusable { tier, why, .. } = step {
            log::warn!(
                "{}: {why}; treating it as a whole file on its tier",
                fs.tiers[*tier].path(rel).display()
            );
        }
    }
    match &plan.layout {
        FileLayout::Stripe(m) => {
            let m = m.clone();
            let found = adopt_stripe(fs, rel, &m, &plan);
            Ok(Some((plan.layout, plan.size, Some(found))))
        }
        FileLayout::Whole { tier } => {
            adopt_whole(fs, rel, *tier, &plan);
            Ok(Some((plan.layout, plan.size, None)))
        }
    }
}

/// Carries out a striped file's plan: labels the adopted pieces, sets aside the strays,
/// and says which pieces are missing.
pub(crate) fn adopt_stripe(fs: &TierFs, rel: &Path, m: &StripeMap, plan: &FilePlan) -> StripeFound {
    let stray = "a piece that does not belong to the file's stripe layout";
    // Adopted pieces that could not be labelled, and so were set aside.
    let mut lost = Vec::new();
    for step in &plan.steps {
        match step {
            Step::Adopt { tier } => {
                let p = fs.tiers[*tier].path(rel);
                let tfs = fs.tiers[*tier].fs();
                let label = plan.label.as_bytes();
                if tfs.setxattr(&p, OsStr::new(LAYOUT_XATTR), label, 0).is_ok() {
                    log::info!(
                        "{}: empty piece of an interrupted creation, adopted",
                        p.display()
                    );
                } else {
                    set_aside(fs, *tier, rel, stray);
                    lost.push(*tier);
                }
            }
            Step::SetAside { tier, .. } => set_aside(fs, *tier, rel, stray),
            _ => {}
        }
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
        // A piece that could not be set aside is still there: never truncated.
        let gone = plan.steps.contains(&Step::Missing { tier: *t }) || lost.contains(t);
        if gone && fs.tiers[*t].fs().absent(&fs.tiers[*t].path(rel)) {
            missing.push(*t);
        }
    }
    StripeFound {
        id: plan.id,
        encoded: plan.label.clone(),
        missing,
    }
}

/// Carries out a whole file's plan (kept on `keep`): removes the identical older
/// copies, sets aside the different ones.
pub(crate) fn adopt_whole(fs: &TierFs, rel: &Path, keep: usize, plan: &FilePlan) {
    for step in &plan.steps {
        match step {
            Step::RemoveCopy { tier } => {
                let p = fs.tiers[*tier].path(rel);
                log::warn!(
                    "{}: duplicate of the copy on tier '{}'; removed",
                    p.display(),
                    fs.tiers[keep].name
                );
                let _ = fs.tiers[*tier].fs().unlink(&p);
            }
            Step::SetAside { tier, .. } => set_aside(
                fs,
                *tier,
                rel,
                "an older, different copy of a file held by another tier",
            ),
            _ => {}
        }
    }
}

/// Whether the pieces of `rel` on tiers `a` and `b` hold the same bytes.
pub(crate) fn same_bytes(fs: &TierFs, rel: &Path, a: usize, b: usize) -> bool {
    let open = |t: usize| {
        let p = fs.tiers[t].path(rel);
        fs.tiers[t].fs().open(&p, libc::O_RDONLY, 0).ok()
    };
    match (open(a), open(b)) {
        (Some(fa), Some(fb)) => files_equal(fa, fb),
        _ => false,
    }
}
