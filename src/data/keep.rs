//! What a move of a file with one name keeps of its old pieces until its last rename, so
//! that neither a failed rename nor a crash between its renames leaves the file with new
//! pieces on some tiers and old ones on others (a file with several names has its other
//! names for that, [`crate::data::linked`]). [`keep_old`] links each entry a rename will
//! replace under a second name and, for a move of more than one rename, writes a keep
//! journal ([`crate::relink`]); [`put_back`] undoes the renames done when one fails;
//! [`after_renames`] makes the renames durable and lets the keeps go. The journal's rule
//! at mount and in `fsck` is [`crate::relink`]'s.

use crate::data::Parts;
use crate::error::Result;
use crate::inodes::file::{Journaled, Migration};
use crate::inodes::pieces;
use crate::inodes::types::TMP_PREFIX;
use crate::layout::FileLayout;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where the move of an unlinked file keeps the entry its rename on tier `t` replaces
/// (limbo, beside the move's temporary: a crash loses such a file anyway).
fn kept_path(fs: &Parts<'_>, t: usize, ino: u64, suffix: &str) -> PathBuf {
    fs.tiers[t]
        .limbo
        .join(format!("{TMP_PREFIX}{ino}{suffix}.old"))
}

/// What [`keep_old`] kept on one tier of a move's layout.
enum Keep {
    /// The link of the entry the rename replaces.
    Link(PathBuf),
    /// The file has no entry there: putting back renames the new one back to its
    /// temporary name.
    NoEntry,
    /// The tier refused the link (a filesystem without hard links, or at its link
    /// limit): the move goes on as before keeping existed, and a rename failing after
    /// this tier's fails the inode rather than leave it mixed.
    Refused(std::io::Error),
}

/// (tier, what was kept) for each tier of a move's layout, in the order of the renames.
type Kept = Vec<(usize, Keep)>;

/// What [`keep_old`] made for a move.
#[derive(Default)]
pub(crate) struct Keeps {
    kept: Kept,
    /// The keep journal ([`crate::relink`]: `keeps` set) of a named file's move with more
    /// than one rename, every old entry it replaces kept; removed after the move. With it,
    /// the tiers the move leaves whose old entries it names.
    journal: Option<(PathBuf, Vec<usize>)>,
}

/// A link refusal that says the tier cannot keep a second name (rather than a failing
/// tier): the move must not depend on it.
fn link_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM) | Some(libc::EOPNOTSUPP) | Some(libc::EMLINK) | Some(libc::ENOSYS)
    )
}

/// Before the renames of a file with one name, when there is more than one (a single
/// rename that fails leaves the file as it was): links each entry a rename will replace
/// (an old piece, on a tier both layouts use) under a second name, so that a rename
/// failing after the first can put the old pieces back ([`put_back`]): a file with other
/// names has them for that ([`crate::data::linked::torn`]). One link per piece, on the
/// tier's own filesystem. For a named file the links are one temporary name beside the primary (in
/// the data folder, which the mount settles journals in before it removes temporaries),
/// and a keep journal naming them is written and synced last ([`crate::relink`]): a crash
/// between the renames is undone (or finished) by the next mount or `fsck --repair`. An
/// unlinked file's links are in limbo, with no journal. On failure the links made are
/// removed and the file is as it was.
pub(crate) fn keep_old(
    fs: &Parts<'_>,
    ino: u64,
    m: &Migration,
    rel: Option<&Path>,
    old: &FileLayout,
    (final_path, tmp): (&impl Fn(usize) -> PathBuf, &impl Fn(usize) -> PathBuf),
) -> Result<Keeps> {
    if m.layout.tiers().len() < 2 {
        return Ok(Keeps::default());
    }
    let keep_rel = rel.map(|r| crate::relink::temp_name(r.parent().unwrap_or(Path::new(""))));
    let mut kept: Kept = Vec::new();
    for t in m.layout.tiers() {
        let (b, entry) = (fs.tiers[t].fs(), final_path(t));
        let keep = match &keep_rel {
            Some(k) => fs.tiers[t].path(k),
            None => kept_path(fs, t, ino, m.suffix),
        };
        let mut r = b.link(&entry, &keep);
        if keep_rel.is_none()
            && matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists)
        {
            // In limbo, named by the inode: left by an earlier move of this file whose
            // `drop_kept` could not remove it (warned), a stale second name of an entry
            // that move replaced. A failed inode, whose kept link may be its only old
            // piece, never gets here (`relocate` and the commit at release refuse it).
            // Beside the name, a keep's name is never taken again (`relink::temp_name`):
            // one that exists may be a held journal's only old piece, and the move fails.
            r = b.unlink(&keep).and_then(|()| b.link(&entry, &keep));
        }
        match r {
            Ok(()) => kept.push((t, Keep::Link(keep))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && b.absent(&entry) => {
                kept.push((t, Keep::NoEntry))
            }
            Err(e) if link_unsupported(&e) => {
                log::debug!("tier '{}' keeps no second name ({e})", fs.tiers[t].name);
                kept.push((t, Keep::Refused(e)))
            }
            Err(e) => {
                drop_kept(fs, &kept);
                return Err(pieces::tier_err(fs.tiers, t, "link", &entry, e));
            }
        }
    }
    // Written even where a tier refused its link: that tier's old piece cannot be put
    // back, but the journal's temporaries let the next mount finish a torn move, where
    // without it the file would be left a mix of old and new pieces.
    let journal = match (rel, &keep_rel) {
        (Some(r), Some(k)) => match write_keep_journal(fs, ino, m, r, k, old, (final_path, tmp)) {
            Ok(p) => Some(p),
            Err(e) => {
                drop_kept(fs, &kept);
                return Err(e);
            }
        },
        _ => None,
    };
    Ok(Keeps { kept, journal })
}

/// Writes (synced) the keep journal of a named file's move, on its new primary tier:
/// primary `rel`, the keeps' name `keep`, the new pieces' and the old entries' backing
/// inodes. An old entry on a tier the move leaves that cannot be read is left out (a move
/// off a failing tier must not depend on it): the renames never touch it.
fn write_keep_journal(
    fs: &Parts<'_>,
    ino: u64,
    m: &Migration,
    rel: &Path,
    keep: &Path,
    old: &FileLayout,
    (final_path, tmp): (&impl Fn(usize) -> PathBuf, &impl Fn(usize) -> PathBuf),
) -> Result<(PathBuf, Vec<usize>)> {
    let new_tiers = m.layout.tiers();
    let (mut new, mut pending) = (Vec::new(), Vec::new());
    for &t in &new_tiers {
        pending.push((t, crate::data::linked::from_root(fs, t, &tmp(t))));
        let piece = m.pieces[t].as_ref().expect("made by begin_move");
        let meta = piece.file().metadata().map_err(|e| {
            pieces::tier_err(fs.tiers, t, "fstat", Path::new("(the move's new piece)"), e)
        })?;
        new.push((t, meta.ino()));
    }
    let mut olds = Vec::new();
    for t in old.tiers() {
        let p = final_path(t);
        match fs.tiers[t].fs().stat(&p) {
            Ok(meta) => olds.push((t, meta.ino())),
            Err(_) if !new_tiers.contains(&t) => {}
            Err(e) => return Err(pieces::tier_err(fs.tiers, t, "stat", &p, e)),
        }
    }
    // The tiers the move leaves whose old entries the journal names: should it stay, they
    // are spared for an undo. One it could not name goes as after any move: spared, a
    // mount that finishes the move would leave it under the file's name, where its old
    // layout can win over the new pieces (`resolve::plan_file` takes the first striped
    // piece's) and the new ones be set aside.
    let named = olds
        .iter()
        .map(|&(t, _)| t)
        .filter(|t| !new_tiers.contains(t))
        .collect();
    let journal = crate::relink::Journal {
        primary: rel.to_path_buf(),
        names: vec![keep.to_path_buf()],
        new,
        old: olds,
        keeps: true,
        pending,
    };
    let t = m.layout.primary();
    let meta = fs.tiers[t].root.join(crate::tier::META_DIR);
    let stamp = format!("{ino}-{:016x}", crate::layout::new_file_id());
    crate::relink::write(&meta, &stamp, &journal)
        .map(|p| (p, named))
        .map_err(|e| pieces::tier_err(fs.tiers, t, "write a re-link journal in", &meta, e))
}

/// Removes [`keep_old`]'s links (after the last rename, or when none was made).
fn drop_kept(fs: &Parts<'_>, kept: &[(usize, Keep)]) {
    for (t, k) in kept {
        if let Keep::Link(k) = k {
            if let Err(e) = fs.tiers[*t].fs().unlink(k) {
                log::warn!("cannot remove {}: {e}", k.display());
            }
        }
    }
}

/// The rename on the `done`-th tier of `kept` failed (a file with one name): each tier
/// renamed before it gets its new piece back under its temporary name (the move stays
/// whole, to be tried again) and its old entry back in place, the file is as it was,
/// and the other kept links and the journal go. Should that fail, the inode fails (EIO,
/// never a mix of old and new pieces) until the next mount, which settles the move by
/// the keep journal (an unlinked file's, kept in limbo, are lost with limbo). A move that
/// renamed a tier which kept no old piece cannot be undone: nothing is put back, and the
/// next mount finishes it from its temporaries by the journal.
pub(crate) fn put_back(
    fs: &Parts<'_>,
    ino: u64,
    keeps: Keeps,
    done: usize,
    final_path: &impl Fn(usize) -> PathBuf,
    tmp: &impl Fn(usize) -> PathBuf,
) {
    let kept = &keeps.kept;
    let refused = kept[..done]
        .iter()
        .any(|(_, k)| matches!(k, Keep::Refused(_)));
    if let (true, Some((j, _))) = (refused, &keeps.journal) {
        // Put back, the other tiers would hold old pieces beside this one's new piece and
        // their own new pieces maybe nameless: a mix neither finished nor undone.
        fs.contain.mark_journaled(ino);
        fs.contain.mark_failed(
            ino,
            &format!(
                "its move stopped between its own pieces after renaming a tier that keeps no \
                 second name, so it cannot be undone; the next mount finishes it from its \
                 temporaries by the journal {}",
                j.display()
            ),
        );
        return;
    }
    let mut failed = Vec::new();
    for (t, k) in &kept[..done] {
        let (b, entry, tmp) = (fs.tiers[*t].fs(), final_path(*t), tmp(*t));
        let r = match k {
            Keep::Link(k) => {
                // The new piece keeps a name (its temporary's, so the move can be tried
                // again) while the old entry replaces it in one step.
                if let Err(e) = b.link(&entry, &tmp) {
                    // The retry will find no temporary and fail, reported at unmount.
                    log::warn!("cannot link the new piece back as {}: {e}", tmp.display());
                }
                b.rename(k, &entry, 0)
            }
            // No old entry to put back: the new piece simply goes back to its temporary
            // name (no second name needed, so a tier without hard links loses nothing).
            Keep::NoEntry => b.rename(&entry, &tmp, 0),
            Keep::Refused(e) => {
                failed.push(format!(
                    "{}: its old piece was not kept (the tier refused a link: {e})",
                    entry.display()
                ));
                continue;
            }
        };
        if let Err(e) = r {
            fs.tiers[*t].note_error(&e);
            failed.push(format!("{}: {e}", entry.display()));
        }
    }
    drop_kept(fs, &kept[done..]);
    match (failed.is_empty(), keeps.journal.map(|(j, _)| j)) {
        (true, Some(j)) => {
            // As after a move: the put-back renames on disk before the journal goes
            // (else it stays, and the next mount finds the move never took effect).
            let restored = kept[..done].iter().map(|(t, _)| *t);
            match sync_folders(fs, restored, final_path) {
                Ok(()) => {
                    if let Err(e) = std::fs::remove_file(&j) {
                        log::warn!("cannot remove the re-link journal {}: {e}", j.display());
                    }
                }
                // Not failed (a migration's writes in limbo would then be lost): the
                // file is as before the move, which is retried; the journal, if a
                // later move leaves it unmatched, holds the name at the next mount.
                Err(e) => log::warn!(
                    "cannot sync the folders of inode {ino}'s undone move ({e}); its journal {} stays for the next mount",
                    j.display()
                ),
            }
        }
        (true, None) => {}
        (false, j) => {
            // Where a tier refused its keep (or with no journal: an unlinked file's, in
            // limbo) the old piece of a tier renamed may be reachable only through the
            // open handle: blocks written back into it would vanish, so they are
            // reported lost instead, and the next mount cannot undo the move.
            let why = format!(
                "its move stopped between its own pieces and its old pieces could not all be \
                 put back ({}){}",
                failed.join("; "),
                j.as_ref().map_or(String::new(), |j| format!(
                    "; the next mount settles the move by the journal {}",
                    j.display()
                ))
            );
            if j.is_some() {
                fs.contain.mark_journaled(ino);
            }
            if j.is_some() && !refused {
                fs.contain.mark_torn(ino, &why)
            } else {
                fs.contain.mark_failed(ino, &why)
            }
        }
    }
}

/// Syncs the folder holding the file's entry on each of `tiers`.
fn sync_folders(
    fs: &Parts<'_>,
    tiers: impl IntoIterator<Item = usize>,
    final_path: &impl Fn(usize) -> PathBuf,
) -> std::io::Result<()> {
    for t in tiers {
        let entry = final_path(t);
        let dir = entry.parent().unwrap_or(Path::new(""));
        fs.tiers[t].fs().sync_dir(dir)?;
    }
    Ok(())
}

/// After the last rename of a move with keeps: with a journal (more than one rename), the
/// renames must be on disk before the old pieces, the keeps and the journal go (each tier
/// is its own filesystem, and a power cut that kept a removal on one and lost a rename on
/// another would leave a mix with nothing to settle it), then the keeps go; the journal to
/// remove once the old pieces are gone. If the folders cannot be synced, the keeps, the
/// journal and the old pieces it names stay for the next mount, which
/// finds the move done and finishes it (or, should a power cut have lost a rename, undoes
/// it). With no journal (one rename, a tier that refused its keep, an unlinked file) the
/// folders are synced too before the old pieces go, if the move leaves a tier; should
/// that fail there is nothing to settle a mix with, and they go as before (warned).
pub(crate) fn after_renames(
    fs: &Parts<'_>,
    ino: u64,
    kept: Keeps,
    (old, new): (&FileLayout, &FileLayout),
    final_path: &impl Fn(usize) -> PathBuf,
) -> Journaled {
    let tiers = new.tiers();
    let Some((j, named)) = kept.journal else {
        drop_kept(fs, &kept.kept);
        if old.tiers().iter().any(|t| !tiers.contains(t)) {
            if let Err(e) = sync_folders(fs, tiers, final_path) {
                log::warn!(
                    "inode {ino}: the folders of its move could not be synced ({e}); its old \
                     pieces are removed all the same"
                );
            }
        }
        return Journaled::default();
    };
    match sync_folders(fs, tiers, final_path) {
        Ok(()) => {
            drop_kept(fs, &kept.kept);
            Journaled {
                done: Some(j),
                spare: Vec::new(),
            }
        }
        Err(e) => {
            journal_stays(
                fs,
                ino,
                &j,
                &format!("its folders could not be synced: {e}"),
            );
            Journaled {
                done: None,
                spare: named,
            }
        }
    }
}

/// A move's journal that must stay for the next mount although the move is whole (its
/// folders could not be synced, or the journal not removed): the inode fails until that
/// mount settles it, since a later move, or a new file at its name, would leave the journal
/// matching neither old nor new pieces, and the mount would then hold the name (EIO) for
/// good. Its state is sound: a torn inode's cached blocks are still written back.
pub(crate) fn journal_stays(fs: &Parts<'_>, ino: u64, j: &Path, why: &str) {
    fs.contain.mark_torn(
        ino,
        &format!(
            "its move's journal {} stays for the next mount ({why}), which settles it",
            j.display()
        ),
    );
}
