//! The steps both kinds of move share (`crate::data::migrate`): whether a layout has
//! drifted from the shares, planning the new layout, making the new pieces as temporaries
//! in limbo, copying bytes into them (each block from where it is), and switching over:
//! the new pieces put in place of the file's, the old ones removed last, so a failure at
//! any point leaves the file as it was. The renames over the file's entries go tier by
//! tier; what a rename replaces is kept until the last one (a file with other names: by
//! those names, `crate::data::linked`; one with one name: a second link of each, a keep,
//! `keep_old`) under a journal ([`crate::relink`]) written before the first, so a
//! failure between them is undone at once and a crash between them by the next mount.

use crate::config::Layout;
use crate::data::cached;
use crate::data::io;
use crate::data::keep;
use crate::data::linked;
use crate::data::passthrough;
use crate::data::Parts;
use crate::error::{Error, Result};
use crate::inodes::file::{FileNode, FileState, Migration};
use crate::inodes::pieces;
use crate::inodes::tree::Tree;
use crate::inodes::types::*;
use crate::layout::{FileLayout, StripeMap, LAYOUT_XATTR};
use crate::policy::placement::{self, Charge};
use crate::sys::{self, SetTime};
use crate::tierio::{AlignedBuf, Piece};
use crate::tierio::{Class, Op};
use parking_lot::Mutex;
use std::ffi::OsStr;
use std::fs::{self};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The unit a migration tracks: DeepSpeed's swap I/O writes whole 1 MiB pieces.
pub(crate) const MIGRATION_BLOCK: u64 = 1 << 20;
/// What one copy step reads and writes at once (a batch over every tier it touches).
pub(crate) const COPY_CHUNK: u64 = 8 * MIGRATION_BLOCK;
/// Block locks of a migration (block `b` uses lock `b % MIGRATION_LOCKS`).
pub(crate) const MIGRATION_LOCKS: usize = 64;
/// Temporaries of a migration end in this (an eager move's have no suffix, so both can be
/// in limbo at once).
pub(crate) const MIGRATION_SUFFIX: &str = "-m";

/// A piece write that failed on `tier`: the caller may move the file off it.
pub(crate) type TierFail = (usize, std::io::Error);

/// How much longer than under the current shares a stripe pattern may make some
/// tier's part of a file's I/O take (its fraction of the pattern over its fraction of
/// the pattern a re-layout would choose) before a file opened for writing is re-laid
/// out. Relative, not absolute: a tier capped to a tenth whose share fell from 26 % to
/// 2 % is the step's bottleneck at 7 % just as at 26 %.
pub(crate) const DRIFT: f64 = 1.3;

/// Whether a striped file's pattern no longer follows the current shares (with
/// `adapt`: a tier slowed down or recovered since the file was laid out). With the
/// `stripe` layout a whole file counts as a one-tier pattern: files rewritten while a
/// slow tier was paused sit whole on the fast tier, and must spread again when it
/// resumes.
pub(crate) fn layout_drifted(fs: &Parts<'_>, layout: &FileLayout) -> bool {
    let single;
    let pattern: &[u8] = match layout {
        FileLayout::Stripe(m) => &m.pattern,
        FileLayout::Whole { tier } if fs.layout == Layout::Stripe => {
            single = [*tier as u8];
            &single
        }
        FileLayout::Whole { .. } => return false,
    };
    if !fs.adapt {
        return false;
    }
    let eligible: Vec<bool> = fs
        .tiers
        .iter()
        .map(|t| t.takes_new_data() && t.has_room_for(1 << 20))
        .collect();
    let ideal = placement::stripe_pattern(&fs.placer.shares(), &eligible);
    if ideal.is_empty() {
        return false;
    }
    let frac =
        |p: &[u8], t: usize| p.iter().filter(|x| **x as usize == t).count() as f64 / p.len() as f64;
    // A tier the pattern overloads: more than DRIFT times its fair fraction, and by at
    // least one slot of the finest pattern (64 slots), so rounding alone never counts.
    // Or a tier the pattern leaves out that now deserves at least `min_share`: a tier
    // that resumed after a pause (at 15 % or more), which the overload rule alone
    // would leave idle while the others carry up to 1.3x their part.
    (0..fs.tiers.len()).any(|t| {
        let (have, fair) = (frac(pattern, t), frac(&ideal, t));
        (have - fair >= 1.0 / 64.0 - 1e-9 && have > fair * DRIFT)
            || (have == 0.0 && fair >= fs.min_share.max(1.0 / 64.0))
    })
}

/// The layout a file moves to: off tier `bad` if given, else following the shares.
pub(crate) fn plan_layout(
    fs: &Parts<'_>,
    tree: &Tree,
    ino: u64,
    old: &FileLayout,
    bad: Option<usize>,
    want: u64,
) -> Result<(FileLayout, Option<Charge>)> {
    // With the stripe layout a whole file (laid out while only one tier was eligible or
    // unpaused) spreads again with the pool's unit.
    let unit = match old {
        FileLayout::Stripe(m) => Some(m.unit),
        FileLayout::Whole { .. } if fs.layout == Layout::Stripe => Some(fs.stripe_unit),
        FileLayout::Whole { .. } => None,
    };
    Ok(match unit {
        Some(unit) => {
            let eligible: Vec<bool> = fs
                .tiers
                .iter()
                .map(|t| Some(t.index) != bad && t.takes_new_data() && t.has_room_for(1 << 20))
                .collect();
            let pattern = placement::stripe_pattern(&fs.placer.shares(), &eligible);
            match pattern.len() {
                0 => return Err(pieces::no_room(fs.tiers, want)),
                1 => (
                    FileLayout::Whole {
                        tier: pattern[0] as usize,
                    },
                    None,
                ),
                _ => (FileLayout::Stripe(StripeMap::new(unit, pattern)), None),
            }
        }
        None => {
            let eligible: Vec<bool> = fs
                .tiers
                .iter()
                .map(|t| Some(t.index) != bad && t.takes_new_data() && t.has_room_for(want))
                .collect();
            let parent = tree.nodes.get(&ino).map(|n| n.parent).unwrap_or(ROOT_INO);
            let c = fs
                .placer
                .choose(parent, &eligible, passthrough::held_for_placement(fs))
                .ok_or_else(|| pieces::no_room(fs.tiers, want))?;
            (FileLayout::Whole { tier: c.tier }, Some(c))
        }
    })
}

/// Where a move's temporary piece on tier `t` is: limbo, which every mount empties once
/// the journals are settled, but for the temporaries a held journal names. Those outlive
/// this process, and inode numbers start again at every mount: the name carries a
/// number drawn once per process, so a later daemon's move never truncates one, and the
/// move's own `tag`, so a journal left by one move never names another's.
fn tmp_path(fs: &Parts<'_>, t: usize, ino: u64, suffix: &str, tag: u64) -> PathBuf {
    static DRAWN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let r = DRAWN.get_or_init(crate::layout::new_file_id);
    fs.tiers[t]
        .limbo
        .join(format!("{TMP_PREFIX}{ino}-{r:016x}-{tag}{suffix}"))
}

/// [`tmp_path`] of move `m`'s piece on tier `t`.
pub(crate) fn tmp_of(fs: &Parts<'_>, t: usize, ino: u64, m: &Migration) -> PathBuf {
    tmp_path(fs, t, ino, m.suffix, m.tag)
}

/// Step 1 of a move: the new pieces, as temporaries in limbo. On failure nothing is
/// left behind and the charge is released.
pub(crate) fn begin_move(
    fs: &Parts<'_>,
    ino: u64,
    st: &FileState,
    layout: FileLayout,
    charge: Option<Charge>,
    suffix: &'static str,
    size: u64,
) -> Result<Migration> {
    if st.bypassed() || st.pieces_in_use() {
        // Whoever holds those pieces' descriptors would go on writing the old ones.
        return Err(Error::NotSupported("moving a file written past the daemon"));
    }
    let primary = st.layout.primary();
    static MOVES: AtomicU64 = AtomicU64::new(0);
    let tag = MOVES.fetch_add(1, Ordering::Relaxed);
    let made = (|| -> Result<Vec<Option<Arc<Piece>>>> {
        let meta = pieces::open_piece(fs.tiers, st, primary, "move")?
            .file()
            .metadata()
            .map_err(|e| {
                pieces::tier_err(fs.tiers, primary, "fstat", Path::new("(open file)"), e)
            })?;
        let mut pieces: Vec<Option<Arc<Piece>>> = vec![None; fs.tiers.len()];
        for t in layout.tiers() {
            let p = tmp_path(fs, t, ino, suffix, tag);
            match Piece::open_new_in(
                &fs.tiers[t].root,
                &p,
                meta.mode() & 0o7777,
                fs.tiers[t].direct_io,
            ) {
                Ok(piece) => pieces[t] = Some(Arc::new(piece)),
                Err(e) => {
                    for u in layout.tiers() {
                        if pieces[u].is_some() {
                            let _ = fs.tiers[u].fs().unlink(&tmp_path(fs, u, ino, suffix, tag));
                        }
                    }
                    return Err(pieces::tier_err(fs.tiers, t, "create", &p, e));
                }
            }
        }
        Ok(pieces)
    })();
    let pieces = match made {
        Ok(p) => p,
        Err(e) => {
            if let Some(c) = charge {
                fs.placer.release(c);
            }
            return Err(e);
        }
    };
    let blocks = size.div_ceil(MIGRATION_BLOCK) as usize;
    Ok(Migration {
        layout,
        pieces,
        charge,
        suffix,
        tag,
        old_size: size,
        moved: (0..blocks).map(|_| AtomicBool::new(false)).collect(),
        locks: (0..MIGRATION_LOCKS).map(|_| Mutex::new(())).collect(),
    })
}

/// Removes a move's temporaries and returns its charge (it will not switch over). A
/// failed inode's stay: a move torn between its own renames is finished from them by the
/// next mount (its journal names them), and that mount empties limbo of the others.
pub(crate) fn drop_move(fs: &Parts<'_>, ino: u64, m: Migration) {
    let keep = fs.contain.is_failed(ino);
    drop_temporaries(fs, ino, m, keep);
}

/// Whether every new piece of `m` still has a name on its tier (its temporary, or the
/// file's entry it was renamed to): what a torn move's journal needs for the next mount
/// to finish it. A put-back that replaced an entry after failing to link the new piece
/// back leaves that piece nameless, and the move is then undone without its writes.
pub(crate) fn all_named(m: &Migration) -> bool {
    m.pieces
        .iter()
        .flatten()
        .all(|p| p.file().metadata().is_ok_and(|x| x.nlink() > 0))
}

/// [`drop_move`], the temporaries removed or `keep`.
pub(crate) fn drop_temporaries(fs: &Parts<'_>, ino: u64, m: Migration, keep: bool) {
    if !keep {
        for t in m.layout.tiers() {
            let _ = fs.tiers[t].fs().unlink(&tmp_of(fs, t, ino, &m));
        }
    }
    if let Some(c) = m.charge {
        fs.placer.release(c);
    }
}

/// Writes `data` at logical `off` into a move's new pieces, as one batch of `class`.
pub(crate) fn write_new(
    fs: &Parts<'_>,
    m: &Migration,
    off: u64,
    data: &[u8],
    class: Class,
) -> std::result::Result<(), TierFail> {
    let exts = m.layout.extents(off, data.len());
    let tiers: Vec<usize> = exts.iter().map(|ex| ex.tier).collect();
    let mut ops: Vec<Op> = exts
        .iter()
        .map(|ex| Op::Write {
            piece: m.pieces[ex.tier].as_ref().expect("made by begin_move"),
            buf: &data[ex.buf..ex.buf + ex.len],
            off: ex.local,
        })
        .collect();
    let results = io::run_batch(fs.io, class, &tiers, &mut ops);
    for (r, t) in results.into_iter().zip(tiers) {
        r.map_err(|e| (t, e))?;
    }
    Ok(())
}

/// Step 2: copies the file's current bytes of `[off, off+len)` (memory's if cached,
/// each block from where it is if a migration is under way) into `m`'s pieces.
pub(crate) fn copy_range(
    fs: &Parts<'_>,
    node: &FileNode,
    st: &FileState,
    m: &Migration,
    off: u64,
    len: u64,
) -> Result<std::result::Result<(), TierFail>> {
    fs.ledger.moved(crate::stats::ledger::Class::Migration, len);
    fs.ledger
        .charge(crate::stats::ledger::Class::Migration, || {
            copy_range_blocks(fs, node, st, m, off, len)
        })
}

pub(crate) fn copy_range_blocks(
    fs: &Parts<'_>,
    node: &FileNode,
    st: &FileState,
    m: &Migration,
    off: u64,
    len: u64,
) -> Result<std::result::Result<(), TierFail>> {
    // Each chunk is read and written as one batch over all its extents, at the
    // migration's class: behind demand, prefetch and write-back, within the queue's bound.
    let class = Class::Migration;
    let mut buf = AlignedBuf::zeroed((len.min(COPY_CHUNK) as usize).max(1));
    let mut pos = off;
    while pos < off + len {
        let n = ((off + len - pos) as usize).min(buf.len());
        match st.cache.clone() {
            // Its newest bytes may be only in memory.
            Some(e) => cached::cached_read(fs, node, st, &e, pos, &mut buf[..n], class)?,
            None => read_file(fs, st, pos, &mut buf[..n], class)?,
        }
        if let Err(f) = write_new(fs, m, pos, &buf[..n], class) {
            return Ok(Err(f));
        }
        pos += n as u64;
    }
    Ok(Ok(()))
}

/// Step 3: puts a move's pieces in place of the file's (state lock held for writing)
/// and removes the old pieces last. On an error the file is as it was (a rename failing
/// after the first puts back what the others replaced, and the move's temporaries stay
/// for another try) and the caller decides what becomes of `m`; or, where that could not
/// be done (a file with other names, or a put-back that failed), the inode is failed.
pub(crate) fn switch_to(
    fs: &Parts<'_>,
    tree: &Tree,
    ino: u64,
    node: &FileNode,
    st: &mut FileState,
    m: &Migration,
) -> Result<()> {
    let rel = tree.rel(ino);
    let final_path = |t: usize| match &rel {
        Some(r) => fs.tiers[t].path(r),
        None => fs.tiers[t].limbo_path(ino),
    };
    let tmp = |t: usize| tmp_of(fs, t, ino, m);
    let layout = &m.layout;
    let size = node.size();
    let primary = st.layout.primary();
    // Mode and owner as they are now (a chmod may have come since the move began).
    let meta = pieces::open_piece(fs.tiers, st, primary, "move")?
        .file()
        .metadata()
        .map_err(|e| pieces::tier_err(fs.tiers, primary, "fstat", Path::new("(open file)"), e))?;
    let old_primary = final_path(primary);
    let pfs = fs.tiers[primary].fs();
    let user_xattrs: Vec<(Vec<u8>, Vec<u8>)> = pfs
        .listxattr(&old_primary)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with(b"user.") && n.as_slice() != LAYOUT_XATTR.as_bytes())
        .filter_map(|n| {
            let v = pfs.getxattr(&old_primary, OsStr::from_bytes(&n)).ok()?;
            Some((n, v))
        })
        .collect();
    prepare_pieces(fs, ino, m, size, &meta, &user_xattrs)?;
    // The file keeps its times (a time set by the user, its last write's: a migration's
    // writes stamp the old primary piece; a cached file's may be newer, `node.mtime`).
    // They go last, as every step above changed them.
    let new_primary = m.pieces[layout.primary()]
        .as_ref()
        .expect("made by begin_move");
    let mtime = (*node.mtime.lock())
        .filter(|_| st.cache.is_some())
        .unwrap_or_else(|| sys::time_of(meta.mtime(), meta.mtime_nsec()));
    let _ = sys::futimens(
        std::os::fd::AsFd::as_fd(new_primary.file()),
        SetTime::At(sys::time_of(meta.atime(), meta.atime_nsec())),
        SetTime::At(mtime),
    );
    // A file with other names: their links and the journal that lets a crash finish
    // their re-linking (or undo a torn move), before anything is renamed.
    let staged = match &rel {
        Some(r) => linked::stage(fs, tree, ino, r, &st.layout, layout, tmp)?,
        None => None,
    };
    // A file with one name: the entries the renames replace, kept until the last one
    // (and a journal naming them), so a failed rename is undone in process, and a crash
    // between the renames by the next mount.
    let kept = match &staged {
        Some(_) => keep::Keeps::default(),
        None => keep::keep_old(fs, ino, m, rel.as_deref(), &st.layout, (&final_path, &tmp))?,
    };
    for (i, t) in layout.tiers().into_iter().enumerate() {
        let (from, to) = (tmp(t), final_path(t));
        if let Err(e) = fs.tiers[t].fs().rename(&from, &to, 0) {
            match staged {
                Some(s) if i == 0 => linked::abandon(fs, s),
                Some(s) => linked::torn(fs, ino, s),
                None => keep::put_back(fs, ino, kept, i, &final_path, &tmp),
            }
            return Err(pieces::tier_err(fs.tiers, t, "rename", &to, e));
        }
    }
    let journaled = match staged {
        Some(s) => linked::install(fs, ino, s),
        None => keep::after_renames(fs, ino, kept, (&st.layout, layout), &final_path),
    };
    // Old pieces a journal that had to stay names are the next mount's (`Journaled`);
    // judged by the journal, as a panic elsewhere may fail the inode with none.
    retire_old(
        fs,
        node,
        &st.layout,
        layout,
        size,
        &journaled.spare,
        final_path,
    );
    // Last: a crash before this finds the primary's old pieces still to remove.
    if let Some(path) = journaled.done {
        if let Err(e) = std::fs::remove_file(&path) {
            keep::journal_stays(fs, ino, &path, &format!("it could not be removed: {e}"));
        }
    }
    let mut c = node.charge.lock();
    if let Some(old_charge) = c.take() {
        fs.placer.release(old_charge);
    }
    // An unlinked file gave its charge back when it was removed: so does its move.
    *c = match m.charge {
        Some(ch) if node.gone.load(Ordering::Relaxed) => {
            fs.placer.release(ch);
            None
        }
        ch => ch.map(|ch| fs.placer.settle(ch, size)),
    };
    drop(c);
    st.pieces = m.pieces.clone();
    if let (Some(c), Some(e)) = (&fs.cache, &st.cache) {
        // Every byte, memory's included, is in the new pieces.
        for slot in e.all_slots() {
            e.set_clean(&mut slot.lock(), &c.counters);
        }
        cached::release_space(fs, e);
        e.space.lock().upto = size;
    }
    node.primary.store(layout.primary(), Ordering::Release);
    st.layout = layout.clone();
    Ok(())
}

/// Readies a move's temporaries to stand for the file: length, mode, the layout xattr
/// (with a new file id: the new pieces are a new set, see `layout::new_file_id`), owner,
/// and on the primary the user's xattrs; each synced.
pub(crate) fn prepare_pieces(
    fs: &Parts<'_>,
    ino: u64,
    m: &Migration,
    size: u64,
    meta: &std::fs::Metadata,
    user_xattrs: &[(Vec<u8>, Vec<u8>)],
) -> Result<()> {
    let layout = &m.layout;
    let encoded = layout.encode_with_id(Some(crate::layout::new_file_id()));
    for t in layout.tiers() {
        let piece = m.pieces[t].as_ref().expect("made by begin_move");
        let p = tmp_of(fs, t, ino, m);
        // Holes at the end of a piece still count toward the file's size.
        piece
            .file()
            .set_len(layout.piece_len(t, size))
            .map_err(|e| pieces::tier_err(fs.tiers, t, "truncate", &p, e))?;
        let _ = piece
            .file()
            .set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777));
        let tfs = fs.tiers[t].fs();
        if let Err(e) = tfs.setxattr(&p, OsStr::new(LAYOUT_XATTR), encoded.as_bytes(), 0) {
            if matches!(layout, FileLayout::Stripe(_)) {
                return Err(pieces::tier_err(fs.tiers, t, "set layout xattr on", &p, e));
            }
        }
        let _ = tfs.chown(&p, Some(meta.uid()), Some(meta.gid()));
        if t == layout.primary() {
            for (n, v) in user_xattrs {
                let _ = tfs.setxattr(&p, OsStr::from_bytes(n), v, 0);
            }
        }
        // Last, so its layout xattr is durable too: a journal may have the next mount
        // rename this piece in as it is.
        piece
            .file()
            .sync_all()
            .map_err(|e| pieces::tier_err(fs.tiers, t, "fsync", &p, e))?;
    }
    Ok(())
}

/// After the switch: removes the old pieces the new layout does not use but those on the
/// tiers in `spare` (a read-only tier keeps its stale piece; the mount-time scan prefers
/// the newer copy and sets the old one aside) and moves the file's count and bytes on the
/// tiers' books.
pub(crate) fn retire_old(
    fs: &Parts<'_>,
    node: &FileNode,
    old: &FileLayout,
    layout: &FileLayout,
    size: u64,
    spare: &[usize],
    final_path: impl Fn(usize) -> PathBuf,
) {
    let new_tiers = layout.tiers();
    // An unlinked file was taken off the books when it was removed.
    let counted = !node.gone.load(Ordering::Relaxed);
    for t in old.tiers() {
        if !new_tiers.contains(&t) && !spare.contains(&t) {
            let p = final_path(t);
            match fs.tiers[t].fs().unlink(&p) {
                // Re-linking a file's names removed it already.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    log::warn!("cannot remove the old piece {}: {e}", p.display());
                    fs.tiers[t].note_error(&e);
                }
                Ok(()) => {}
            }
        }
        if counted {
            let _ = fs.tiers[t].counters.files.fetch_update(
                Ordering::Relaxed,
                Ordering::Relaxed,
                |v| Some(v.saturating_sub(1)),
            );
        }
    }
    if counted {
        for t in &new_tiers {
            fs.tiers[*t].counters.files.fetch_add(1, Ordering::Relaxed);
        }
        pieces::account_resize(fs.tiers, old, size, 0);
        pieces::account_resize(fs.tiers, layout, 0, size);
    }
}

/// Reads `[off, off+buf.len())` of a file as it is now (no cache) at `class`: during a
/// migration each block from where its bytes are, else from the pieces.
pub(crate) fn read_file(
    fs: &Parts<'_>,
    st: &FileState,
    off: u64,
    buf: &mut [u8],
    class: Class,
) -> Result<()> {
    let Some(m) = &st.migration else {
        return io::read_pieces(fs.io, st, off, buf, class);
    };
    let end = off + buf.len() as u64;
    let mut pos = off;
    while pos < end {
        let b = pos / MIGRATION_BLOCK;
        let chunk_end = end.min((b + 1) * MIGRATION_BLOCK);
        let dst = &mut buf[(pos - off) as usize..(chunk_end - off) as usize];
        if m.is_moved(b) {
            io::read_layout(fs.io, &m.layout, &m.pieces, pos, dst, true, class)?;
        } else {
            io::read_pieces(fs.io, st, pos, dst, class)?;
        }
        pos = chunk_end;
    }
    Ok(())
}
