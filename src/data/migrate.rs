//! Moving a file's bytes to a new layout while it stays usable: off a tier that is full or
//! failed (the write that failed then succeeds), or to follow the shares when a striped
//! file is rewritten.
//!
//! Both go through the same three steps: [`crate::data::moves::begin_move`] makes the new pieces as
//! temporaries in limbo, `copy` fills them from the file's current bytes, and
//! [`crate::data::moves::switch_to`] puts them in place under the file's state lock and removes the old
//! pieces last, so a failure at any point leaves the file as it was.
//!
//! - Eager ([`relocate`]): every byte is copied at once (a full or failed tier,
//!   or a cached file).
//! - Lazy (a *migration*, for a drifted striped file opened for writing): DeepSpeed
//!   rewrites its swap files whole every step, so copying them first would read every old
//!   byte, a quarter of them from the tier that just slowed down, only to overwrite them.
//!   Instead the file keeps its old layout while writes go to the new pieces, one 1 MiB
//!   block at a time (a block written whole is just marked moved; a partial write to an
//!   unmoved block copies the block's old bytes first), and reads take each block from
//!   where it is. When the last writer closes (or on fsync, truncate, fallocate, unmount)
//!   the blocks that never moved are copied and the file switches over. Until then the new
//!   bytes live only in limbo temporaries: a daemon crash loses the writes made since the
//!   migration began unless they were fsynced (fsync commits first).

use crate::data::moves::{self, TierFail, MIGRATION_BLOCK, MIGRATION_LOCKS, MIGRATION_SUFFIX};
use crate::inodes::pieces;

use crate::inodes::file::{FileNode, FileState, Migration};

use crate::error::{Error, Result};

use crate::data::Parts;
use crate::inodes::tree::Tree;
use crate::inodes::types::*;
use crate::tierio::Class;

use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Moves a file off tier `bad` (full, or failed) now: copies its bytes into a new
/// layout on the other tiers — a stripe pattern over them for a striped file, one tier
/// with room for a whole file — then switches over and removes the old pieces last.
/// With `bad = None`, re-lays out a drifted file. A migration under way is taken over
/// (its moved blocks are copied from its pieces, which are then dropped). Nothing
/// written is lost; on any failure the file stays as it was.
pub(crate) fn relocate(
    fs: &Parts<'_>,
    ino: u64,
    node: &Arc<FileNode>,
    bad: Option<usize>,
    need: u64,
) -> Result<()> {
    // A failed inode (a move of a file with several names torn on the tiers) stays as the
    // tiers have it for the next mount to settle from its journal: moved again, the first
    // move's new pieces would count as old and the journal would no longer match. Every
    // caller is covered here: a write-back's or re-layout's rescue, a cached file's move.
    if fs.contain.is_failed(ino) {
        return Err(Error::Failed { ino });
    }
    if !relocate_once(fs, ino, node, bad, need, false)? {
        // A cached file whose switch could not get the tree lock in time: again, holding
        // it from the start (the copy then runs under it: the rare case).
        relocate_once(fs, ino, node, bad, need, true)?;
    }
    Ok(())
}

/// Temporaries of an uncached file's eager move, which after its copy stands as a
/// migration whose blocks all moved until the switch: apart from the lazy migration's
/// (`-m`) and from a cached file's move (no suffix). Two, so that a move taking over one
/// whose switch failed makes its own temporaries beside the other's.
const EAGER_SUFFIXES: [&str; 2] = ["-e", "-f"];

/// Whether `m` is an uncached eager move waiting for its switch.
fn is_eager(m: &Migration) -> bool {
    EAGER_SUFFIXES.contains(&m.suffix)
}

/// How long a cached file's move, its bytes copied, waits for the tree lock it needs for
/// the switch. It holds the file's lock meanwhile, against the usual order (tree first),
/// so the wait is bounded: a thread holding the tree lock and waiting for this file waits
/// at most this long.
const RETAKE_TREE: std::time::Duration = std::time::Duration::from_millis(100);

/// What a move checks with the file's lock held, before it plans: the inode has not
/// failed since [`relocate`] looked (a request that panicked left a state a move must not
/// copy), and another eager move that has copied and waits for its switch is finished
/// first (both locks are held in order). If that switch fails, this move takes it over
/// like any migration (its moved blocks are read from its pieces, then it is dropped),
/// unless it tore the file: its journal and old pieces then wait for the next mount,
/// which another move would leave unmatched.
fn before_move(
    fs: &Parts<'_>,
    tree: &Tree,
    ino: u64,
    node: &Arc<FileNode>,
    st: &mut FileState,
) -> Result<()> {
    if fs.contain.is_failed(ino) {
        return Err(Error::Failed { ino });
    }
    if st.migration.as_ref().is_some_and(is_eager) {
        let r = commit_locked(fs, tree, ino, node, st);
        // Failed by the switch, torn or whole with its journal left (`keep::journal_stays`).
        if fs.contain.is_failed(ino) {
            return Err(r.err().unwrap_or(Error::Failed { ino }));
        }
        if let Err(e) = r {
            log::warn!("inode {ino}: a pending move could not switch over ({e}); moving again");
        }
    }
    Ok(())
}

/// One try of [`relocate`]; `Ok(false)` when a cached file's switch must be tried again
/// with the tree lock held throughout (`hold_tree`).
fn relocate_once(
    fs: &Parts<'_>,
    ino: u64,
    node: &Arc<FileNode>,
    bad: Option<usize>,
    need: u64,
    hold_tree: bool,
) -> Result<bool> {
    let mut tree = Some(fs.tree.read());
    if !tree.as_ref().expect("held").nodes.contains_key(&ino) {
        // Unlinked and forgotten since the caller found it (a background write-back):
        // its pieces are gone, and a move would leave new ones in limbo for nobody.
        return Ok(true);
    }
    let mut st = node.state.write();
    before_move(fs, tree.as_ref().expect("held"), ino, node, &mut st)?;
    let old = st.layout.clone();
    let on = |b: usize| {
        old.tiers().contains(&b)
            || st
                .migration
                .as_ref()
                .is_some_and(|m| m.layout.tiers().contains(&b))
    };
    match bad {
        Some(b) if !on(b) => return Ok(true), // moved already
        None if !moves::layout_drifted(fs, &old) => return Ok(true),
        _ => {}
    }
    if st.bypassed() {
        // The kernel (passthrough) or a program (the direct path) writes this file's old
        // pieces itself: it cannot move under them.
        return Err(Error::NotSupported("moving a file written past the daemon"));
    }
    let size = node.size();
    let want = need.max(size) + (1 << 20);
    let (layout, charge) =
        moves::plan_layout(fs, tree.as_ref().expect("held"), ino, &old, bad, want)?;
    let cached = st.cache.is_some();
    if !(cached && hold_tree) {
        // No data copy under the tree lock: the file's own lock keeps its bytes still
        // while they are copied, and the switch takes the tree lock again afterwards.
        tree = None;
    }
    let suffix = match &st.migration {
        _ if cached => "",
        Some(p) if p.suffix == EAGER_SUFFIXES[0] => EAGER_SUFFIXES[1],
        _ => EAGER_SUFFIXES[0],
    };
    let m = moves::begin_move(fs, ino, &st, layout, charge, suffix, size)?;
    if let Err(e) = copy_all(fs, ino, node, &st, &m, size) {
        moves::drop_move(fs, ino, m);
        return Err(e);
    }
    if cached {
        // A cached file's newest bytes live in memory, where a write between the copy and
        // the switch would be marked clean by it: it switches without letting go of its
        // lock, taking the tree lock within a bound.
        let retaken;
        let tree = match &tree {
            Some(g) => g,
            None => match fs.tree.try_read_for(RETAKE_TREE) {
                Some(g) => {
                    retaken = g;
                    &retaken
                }
                None => {
                    moves::drop_move(fs, ino, m);
                    return Ok(false);
                }
            },
        };
        if let Err(e) = moves::switch_to(fs, tree, ino, node, &mut st, &m) {
            drop_cached_move(fs, ino, &st, m);
            return Err(e);
        }
        drop(st);
    } else {
        if let Some(pending) = st.migration.take() {
            // Its moved blocks were read from its pieces and copied above.
            moves::drop_move(fs, ino, pending);
            fs.relayout
                .migrations_dropped
                .fetch_add(1, Ordering::Relaxed);
        }
        // Every block is in the new pieces: the move stands as a migration whose blocks
        // all moved (writes go there) until the switch, which takes the locks in order.
        for b in &m.moved {
            b.store(true, Ordering::Release);
        }
        st.migration = Some(m);
        drop(st);
        let tree = fs.tree.read();
        let mut st = node.state.write();
        // Someone else may have switched it over meanwhile (another move, a release).
        if st.migration.as_ref().is_some_and(is_eager) {
            commit_locked(fs, &tree, ino, node, &mut st)?;
        }
    }
    fs.relayout.eager_moves.fetch_add(1, Ordering::Relaxed);
    fs.relayout
        .eager_copied_bytes
        .fetch_add(size, Ordering::Relaxed);
    log_moved(fs, ino, size, bad, &node.state.read().layout.encode());
    Ok(true)
}

/// Drops a cached file's move whose switch failed. Its dirty blocks stay in memory and
/// are written back through the old pieces, even when the switch tore the file and
/// failed the inode (`contain::writes_back`); should the inode be one that is never
/// written back, those bytes are lost: said now, and by the unmount.
fn drop_cached_move(fs: &Parts<'_>, ino: u64, st: &FileState, m: Migration) {
    // Its temporaries go even when the switch tore the file: a cached file's bytes are in
    // memory and written back to its old pieces (a write may follow the tear), so the
    // next mount must undo the move, not finish it from a copy older than those. Unless
    // they are not written back (a tier that refused its keep, a panic): finishing from
    // the copy is then all that keeps the bytes memory held at the move.
    let failed = fs.contain.is_failed(ino);
    let keep = failed && !fs.contain.writes_back(ino);
    moves::drop_temporaries(fs, ino, m, keep);
    if !fs.contain.writes_back(ino) {
        log::error!(
            "inode {ino} failed in its move, whose copy is dropped or undone: its {} dirty \
             blocks in memory are never written back (reported LOST at unmount)",
            st.cache.as_ref().map_or(0, |c| c.dirty_blocks())
        );
    }
}

fn log_moved(fs: &Parts<'_>, ino: u64, size: u64, bad: Option<usize>, now: &str) {
    match bad {
        Some(b) => log::info!(
            "moved inode {ino} ({size} bytes) off tier '{}': now {now}",
            fs.tiers[b].name
        ),
        None => log::info!(
            "re-laid out inode {ino} ({size} bytes) to follow the current shares: now {now}"
        ),
    }
}

/// Copies all of a file's `size` bytes into a move's pieces (the file's lock held).
fn copy_all(
    fs: &Parts<'_>,
    ino: u64,
    node: &FileNode,
    st: &FileState,
    m: &Migration,
    size: u64,
) -> Result<()> {
    match moves::copy_range(fs, node, st, m, 0, size)? {
        Ok(()) => Ok(()),
        Err((t, e)) => Err(pieces::tier_err(
            fs.tiers,
            t,
            "write",
            &moves::tmp_of(fs, t, ino, m),
            e,
        )),
    }
}

/// At an open for writing of a drifted striped file: begins a lazy move (a migration)
/// to a layout that follows the shares. A cached file is moved at once instead (its
/// bytes are in memory). Nothing is copied here.
pub(crate) fn start_migration(fs: &Parts<'_>, ino: u64, node: &Arc<FileNode>) -> Result<()> {
    let tree = fs.tree.read();
    let mut st = node.state.write();
    // A failed inode is not moved (a held name's placeholder, say, has no real layout).
    let failed = fs.contain.is_failed(ino);
    if failed || st.migration.is_some() || !moves::layout_drifted(fs, &st.layout) {
        return Ok(());
    }
    if st.cache.is_some() {
        drop(st);
        drop(tree);
        return relocate(fs, ino, node, None, 0);
    }
    if st.bypassed() {
        return Err(Error::NotSupported("moving a file written past the daemon"));
    }
    let size = node.size();
    let old = st.layout.clone();
    let (layout, charge) = moves::plan_layout(fs, &tree, ino, &old, None, size + (1 << 20))?;
    let m = moves::begin_move(fs, ino, &st, layout, charge, MIGRATION_SUFFIX, size)?;
    log::info!(
        "re-laying out inode {ino} ({size} bytes) as it is rewritten, to follow the current shares: {} -> {}",
        old.encode(),
        m.layout.encode()
    );
    st.migration = Some(m);
    fs.relayout
        .migrations_started
        .fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A write during a migration (state lock held): into the new pieces, block by block.
/// A block's first write copies its old bytes first unless it replaces all of them.
pub(crate) fn migration_write(
    fs: &Parts<'_>,
    node: &FileNode,
    st: &FileState,
    m: &Migration,
    off: u64,
    data: &[u8],
) -> Result<std::result::Result<(), TierFail>> {
    let end = off + data.len() as u64;
    let mut pos = off;
    while pos < end {
        let b = pos / MIGRATION_BLOCK;
        let bstart = b * MIGRATION_BLOCK;
        let chunk_end = end.min(bstart + MIGRATION_BLOCK);
        let chunk = &data[(pos - off) as usize..(chunk_end - off) as usize];
        if !m.is_moved(b) {
            let _g = m.locks[b as usize % MIGRATION_LOCKS].lock();
            if !m.is_moved(b) {
                let old_end = (bstart + MIGRATION_BLOCK).min(m.old_size);
                let whole = pos <= bstart && chunk_end >= old_end;
                if !whole {
                    // Read-modify-write: the block's old bytes first.
                    if let Err(f) = moves::copy_range(fs, node, st, m, bstart, old_end - bstart)? {
                        return Ok(Err(f));
                    }
                }
                if let Err(f) = moves::write_new(fs, m, pos, chunk, Class::DemandWrite) {
                    return Ok(Err(f));
                }
                m.moved[b as usize].store(true, Ordering::Release);
                let c = if whole {
                    &fs.relayout.migration_rewritten_bytes
                } else {
                    &fs.relayout.migration_copied_bytes
                };
                c.fetch_add(old_end - bstart, Ordering::Relaxed);
                pos = chunk_end;
                continue;
            }
        }
        if let Err(f) = moves::write_new(fs, m, pos, chunk, Class::DemandWrite) {
            return Ok(Err(f));
        }
        pos = chunk_end;
    }
    Ok(Ok(()))
}

/// Finishes a migration (state lock held for writing): copies the blocks that never
/// moved, then switches over. On failure the migration stays (the file reads as before,
/// moved blocks from the new pieces) and the error is returned; a full or failed new
/// tier gets the file moved off it instead.
pub(crate) fn commit_locked(
    fs: &Parts<'_>,
    tree: &Tree,
    ino: u64,
    node: &Arc<FileNode>,
    st: &mut FileState,
) -> Result<bool> {
    if st.migration.is_none() {
        return Ok(false);
    }
    let eager = st.migration.as_ref().is_some_and(is_eager);
    // Out of the state while the rest is copied: reads below see the old layout,
    // which holds every block not moved.
    let m = st.migration.take().expect("checked above");
    let (copied, r) = copy_blocks(fs, ino, node, st, &m);
    if let Err(e) = r.and_then(|()| moves::switch_to(fs, tree, ino, node, st, &m)) {
        // Still consistent: the old layout plus the blocks moved so far.
        st.migration = Some(m);
        return Err(e);
    }
    // A file unlinked but still open switches into limbo, where its handles find its
    // bytes: the writes made through the move live only in its pieces, so dropping the
    // move there (as a truncate or fallocate of the unlinked file once did) lost them.
    if eager {
        // An eager move switching over (`relocate` counts and logs it).
        return Ok(true);
    }
    fs.relayout
        .migrations_committed
        .fetch_add(1, Ordering::Relaxed);
    log::info!(
        "re-laid out inode {ino} ({} bytes; {} copied at the switch): now {}",
        node.size(),
        copied,
        m.layout.encode()
    );
    Ok(true)
}

/// Drops a migration whose file is gone: its temporaries and charge (state lock held).
pub(crate) fn discard_migration(fs: &Parts<'_>, ino: u64, st: &mut FileState) {
    if let Some(m) = st.migration.take() {
        moves::drop_move(fs, ino, m);
        fs.relayout
            .migrations_dropped
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Finishes a file's migration, if it has one (takes the tree and state locks). A new
/// tier that refuses the copy (full, failed) gets the file moved off it, every byte
/// with it.
pub(crate) fn commit_migration(fs: &Parts<'_>, ino: u64, node: &Arc<FileNode>) -> Result<()> {
    let r = copy_unmoved(fs, ino, node).and_then(|()| {
        let tree = fs.tree.read();
        let mut st = node.state.write();
        commit_locked(fs, &tree, ino, node, &mut st)
    });
    match r {
        Ok(_) => Ok(()),
        // A failed inode (a move of a file with several names torn on the tiers) stays as
        // the tiers have it for the next mount to settle: moved off now, it would leave
        // behind a journal the mount can no longer match to the file.
        Err(Error::Tier {
            ref tier,
            ref source,
            ..
        }) if is_rescuable(source) && !fs.contain.is_failed(ino) => {
            let bad = fs.tiers.iter().position(|t| &t.name == tier);
            log::warn!(
                "tier '{tier}' refused the re-layout of inode {ino} ({source}); moving the file off it"
            );
            relocate(fs, ino, node, bad, node.size())
        }
        Err(e) => Err(e),
    }
}

/// The same, with the tree lock already held (truncate, unmount).
pub(crate) fn commit_migration_locked(
    fs: &Parts<'_>,
    tree: &Tree,
    ino: u64,
    node: &Arc<FileNode>,
    st: &mut FileState,
) -> Result<()> {
    commit_locked(fs, tree, ino, node, st).map(|_| ())
}

/// Copies a migration's blocks that never moved, with no tree lock and the file's lock held
/// only for reading, so lookups, other files and this file's own reads and writes go on
/// meanwhile (a write to a block takes the block's lock, as this copy does). What the
/// switch then copies under the locks is only what a failure here left.
pub(crate) fn copy_unmoved(fs: &Parts<'_>, ino: u64, node: &FileNode) -> Result<()> {
    let st = node.state.read();
    let Some(m) = &st.migration else {
        return Ok(());
    };
    // An unlinked file's too: its commit switches into limbo, and what is copied here is
    // not copied under the tree lock there.
    copy_blocks(fs, ino, node, &st, m).1
}

/// Copies `m`'s blocks that have not moved yet, each under its block lock (writers of the
/// block take it too), counting the bytes in `migration_copied_bytes`; stops at the first
/// failure, the blocks copied before it staying moved. Returns the bytes copied too.
fn copy_blocks(
    fs: &Parts<'_>,
    ino: u64,
    node: &FileNode,
    st: &FileState,
    m: &Migration,
) -> (u64, Result<()>) {
    let mut copied = 0;
    let mut r = Ok(());
    for b in m.unmoved().collect::<Vec<_>>() {
        let _g = m.locks[b as usize % MIGRATION_LOCKS].lock();
        if m.is_moved(b) {
            continue; // a write replaced it meanwhile
        }
        let bstart = b * MIGRATION_BLOCK;
        let len = (bstart + MIGRATION_BLOCK).min(m.old_size) - bstart;
        match moves::copy_range(fs, node, st, m, bstart, len) {
            Ok(Ok(())) => {
                m.moved[b as usize].store(true, Ordering::Release);
                copied += len;
            }
            Ok(Err((t, e))) => {
                r = Err(pieces::tier_err(
                    fs.tiers,
                    t,
                    "write",
                    &moves::tmp_of(fs, t, ino, m),
                    e,
                ));
                break;
            }
            Err(e) => {
                r = Err(e);
                break;
            }
        }
    }
    fs.relayout
        .migration_copied_bytes
        .fetch_add(copied, Ordering::Relaxed);
    (copied, r)
}
