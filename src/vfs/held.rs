//! What the mount's scan holds back from its walk so that no move a crash cut short is
//! resolved into a mix of old and new pieces, or loses the old pieces that would undo it.
//!
//! Before any folder is read, the re-link journals ([`crate::relink`]) are settled. One
//! that cannot be (a tier left out, an I/O error, a tear beyond undoing) is *held*: its
//! names are put in the tree unresolved and failed (EIO), and its keeps are not removed.
//! When a journal may be unseen or cannot be told (a degraded mount, whose missing tier may
//! hold one; a journal or `.tierfs-meta/` that cannot be read, for any reason but the
//! journal's being gone; a journal that does not parse, set aside or not) the scan is
//! *cautious*: it removes no temporary, and a file whose present pieces disagree (belong
//! to different layouts, or one is missing on a tier that is here) is held the same way
//! rather than resolved, until a mount that sees every journal.

use crate::inodes::file::FileNode;
use crate::inodes::tree::{NodeData, Tree};
use crate::inodes::types::Kind;
use crate::layout::FileLayout;
use crate::relink::Held;
use crate::tier::resolve::{plan_file, read_pieces, Step};
use crate::vfs::state::TierFs;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;

/// Settles the journals on every tier of the mount, removes the temporaries of journal
/// writes a crash cut short, then empties each tier's limbo but for what a held journal
/// names. Returns what the unsettled ones hold, and whether the walk must be cautious: a
/// tier left out, or a journal that may be unseen or cannot be told (its folder or itself
/// cannot be read, or it does not parse, set aside or not).
pub(crate) fn finish_relinks(fs: &TierFs) -> (Held, bool) {
    let mut held = Held::default();
    let mut cautious = fs.tiers.iter().any(|t| t.missing);
    for t in fs.tiers.iter().filter(|t| !t.missing) {
        let meta = t.root.join(crate::tier::META_DIR);
        for p in crate::relink::remove_torn_writes(&meta) {
            log::info!("removed {}, a journal write a crash cut short", p.display());
        }
        let (pending, aside) = match (
            crate::relink::list(&meta),
            crate::relink::list_set_aside(&meta),
        ) {
            (Ok(p), Ok(a)) => (p, a),
            (Err(e), _) | (_, Err(e)) => {
                log::warn!(
                    "cannot list {} ({e}): a move's journal there would go unseen, so this \
                     mount removes no temporary and holds files whose pieces disagree (EIO)",
                    meta.display()
                );
                cautious = true;
                (Vec::new(), Vec::new())
            }
        };
        for (path, _) in pending {
            let on = |u: usize| {
                let x = fs.tiers.get(u).filter(|x| !x.missing)?;
                Some((x.fs(), x.data.clone()))
            };
            match crate::relink::finish(&path, on) {
                Ok(done) => log::warn!("{done}"),
                Err(not) if not.cautious => {
                    log::warn!("re-link journal {}: {not}", path.display());
                    cautious = true;
                }
                Err(not) => {
                    log::error!("re-link journal {}: {not}", path.display());
                    if let Some(j) = not.held {
                        held.hold(*j, &path);
                    }
                }
            }
        }
        // Set aside at an earlier mount: never replayed, but one that cannot be told may
        // name a move's keeps and temporaries, the only way back to its old bytes.
        for (path, j) in aside {
            let why = match j {
                Ok(Some(_)) => continue,
                Ok(None) => "does not parse".to_string(),
                Err(e) => format!("cannot be read ({e})"),
            };
            log::warn!(
                "re-link journal {} (set aside) {why}: what it names cannot be told, so \
                 this mount removes no temporary and holds files whose pieces disagree \
                 (EIO); remove it once those files are settled by hand",
                path.display()
            );
            cautious = true;
        }
    }
    // Only now: a move torn between its renames was finished from its temporaries there.
    // A journal that may be unseen may name some, so a cautious mount leaves them all.
    if !cautious {
        for t in &fs.tiers {
            let spare: Vec<&Path> = held
                .pending
                .iter()
                .filter(|(u, _)| *u == t.index)
                .map(|(_, p)| p.as_path())
                .collect();
            crate::tier::empty_limbo(&t.name, &t.root, &t.limbo, &spare);
        }
    }
    (held, cautious)
}

/// Why the name at `rel`, found on the `on` tiers, is held (placed unresolved and
/// failed), if it is: a held journal names it, or, when `cautious`, its pieces disagree.
pub(crate) fn why_held(
    fs: &TierFs,
    held: &Held,
    cautious: bool,
    rel: &Path,
    on: &[(usize, Kind)],
) -> Option<String> {
    if !on.iter().any(|(_, k)| *k == Kind::File) {
        return None;
    }
    if let Some(j) = held.names.get(rel) {
        return Some(format!("its move is not settled (journal {})", j.display()));
    }
    (cautious && pieces_disagree(fs, rel, on)).then(|| {
        "its pieces disagree while a move's journal may be unseen (a tier left out, or a \
         journal that cannot be read): left as they are for a mount that sees every journal"
            .to_string()
    })
}

/// Whether resolving the file would change its pieces: entries of other kinds beside it,
/// pieces of different layouts or copies, or a piece missing on a tier that is here.
fn pieces_disagree(fs: &TierFs, rel: &Path, on: &[(usize, Kind)]) -> bool {
    if on.iter().any(|(_, k)| *k != Kind::File) {
        return true;
    }
    let tiers: Vec<usize> = on.iter().map(|(t, _)| *t).collect();
    // A piece that cannot be read is held by the scan in any case (`scan::place_file`).
    let Ok(found) = read_pieces(&tiers, |t| (fs.tiers[t].fs(), fs.tiers[t].path(rel))) else {
        return true;
    };
    let Some(plan) = plan_file(&found, fs.tiers.len(), |_, _| false) else {
        return false;
    };
    plan.steps.iter().any(|s| match s {
        Step::SetAside { .. } | Step::RemoveCopy { .. } => true,
        Step::Missing { tier } => !fs.tiers[*tier].missing,
        _ => false,
    })
}

/// Puts a held name in the tree as it is on the tiers, unresolved and failed (EIO): its
/// pieces are neither read nor changed, nor counted, until a later mount settles them.
pub(crate) fn place_held(
    fs: &TierFs,
    tree: &mut Tree,
    ino: u64,
    name: &OsStr,
    on: &[(usize, Kind)],
    why: &str,
) {
    let t = on.first().map_or(0, |(t, _)| *t);
    let node = FileNode::new(FileLayout::Whole { tier: t }, 0, fs.tiers.len());
    let c = tree.insert(ino, name, NodeData::File(Arc::new(node)));
    log::error!(
        "/{}: held, answers EIO: {why}",
        tree.rel(c).unwrap_or_default().display()
    );
    fs.contain.mark_failed(c, why);
}
