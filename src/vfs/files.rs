//! Opening, creating and closing files: the layout a new file gets, its pieces, the
//! placement charge, and size changes (truncate, fallocate) and fsync.

use crate::config::Layout;
use crate::data::{cached, migrate, passthrough};
use crate::error::{Error, Result};
use crate::inodes::file::{FileNode, FileState};
use crate::inodes::pieces;
use crate::inodes::tree::{NodeData, Tree};
use crate::inodes::types::Handle;
use crate::inodes::types::*;
use crate::layout::{FileLayout, StripeMap, LAYOUT_XATTR};
use crate::policy::placement::{self, Charge};
use crate::sys::{self, SetTime};
use crate::tierio::Piece;
use crate::vfs::state::TierFs;
use crate::vfs::{attr, backing, handles, statsdir};
use std::ffi::OsStr;

use crate::data::moves;
use crate::data::writeback;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Chooses the layout of a new file in `parent` (no tree lock needed).
pub(crate) fn choose_layout(fs: &TierFs, parent: u64) -> Result<(FileLayout, Option<Charge>)> {
    let eligible: Vec<bool> = fs
        .tiers
        .iter()
        .map(|t| t.takes_new_data() && t.has_room_for(1 << 20))
        .collect();
    match fs.layout {
        Layout::WholeFile => {
            let c = fs
                .placer
                .choose(parent, &eligible, handles::held_for_placement(fs))
                .ok_or_else(|| pieces::no_room(&fs.tiers, 1 << 20))?;
            Ok((FileLayout::Whole { tier: c.tier }, Some(c)))
        }
        Layout::Stripe => {
            let pattern = placement::stripe_pattern(&fs.placer.shares(), &eligible);
            if pattern.is_empty() {
                return Err(pieces::no_room(&fs.tiers, 1 << 20));
            }
            if pattern.len() == 1 {
                return Ok((
                    FileLayout::Whole {
                        tier: pattern[0] as usize,
                    },
                    None,
                ));
            }
            Ok((
                FileLayout::Stripe(StripeMap::new(fs.stripe_unit, pattern)),
                None,
            ))
        }
    }
}

/// Creates the backing pieces of a new file; on failure nothing is left behind.
pub(crate) fn create_pieces(
    fs: &TierFs,
    rel: &Path,
    layout: &FileLayout,
    mode: u32,
    ctx: Ctx,
) -> Result<Vec<Option<Arc<Piece>>>> {
    let mut pieces: Vec<Option<Arc<Piece>>> = vec![None; fs.tiers.len()];
    let mut made = Vec::new();
    let encoded = layout.encode_with_id(Some(crate::layout::new_file_id()));
    let result = (|| {
        for t in layout.tiers() {
            let tier = &fs.tiers[t];
            let p = tier.path(rel);
            let mut r = Piece::open_new_in(&tier.root, &p, mode, tier.direct_io);
            if let Err(e) = &r {
                if e.kind() == std::io::ErrorKind::NotFound {
                    // The folder is missing on this tier (a failed mirror): make it.
                    if let Some(dir) = p.parent() {
                        let _ = tier.fs().mkdir_all(dir);
                    }
                    r = Piece::open_new_in(&tier.root, &p, mode, tier.direct_io);
                }
            }
            let piece = r.map_err(|e| backing::tier_err(fs, t, "create", &p, e))?;
            made.push((t, p.clone()));
            if let Err(e) = tier
                .fs()
                .setxattr(&p, OsStr::new(LAYOUT_XATTR), encoded.as_bytes(), 0)
            {
                if matches!(layout, FileLayout::Stripe(_)) {
                    return Err(backing::tier_err(fs, t, "set layout xattr on", &p, e));
                }
                if !fs.xattr_warned.swap(true, Ordering::Relaxed) {
                    log::warn!("tier '{}' has no user xattrs ({e}); whole files are recognised by where they sit", tier.name);
                }
            }
            backing::chown_new(fs, &p, ctx, t)?;
            pieces[t] = Some(Arc::new(piece));
        }
        Ok(())
    })();
    if let Err(e) = result {
        for (t, p) in made {
            let _ = fs.tiers[t].fs().unlink(&p);
        }
        return Err(e);
    }
    Ok(pieces)
}

pub(crate) fn create(
    fs: &TierFs,
    parent: u64,
    name: &OsStr,
    mode: u32,
    flags: i32,
    ctx: Ctx,
) -> Result<(Attr, u64, OpenInfo)> {
    attr::check_writable_parent(fs, parent, name)?;
    // The tiers are chosen before the tree lock, and a tier may stop taking data in
    // between: a drain's pass that found it empty (it gathers under the tree lock) would
    // mark it drained and never see this file. Checked again under the lock, so a pass
    // either sees the file or the file goes elsewhere.
    let (mut layout, mut charge, mut tree) = loop {
        let (layout, charge) = choose_layout(fs, parent)?;
        let tree = fs.tree.write();
        if layout.tiers().iter().all(|&t| fs.tiers[t].takes_new_data()) {
            break (layout, charge, tree);
        }
        drop(tree);
        if let Some(c) = charge {
            fs.placer.release(c);
        }
    };
    if let Some(existing) = tree.children(parent)?.get(name).copied() {
        if let Some(c) = charge {
            fs.placer.release(c);
        }
        if flags & libc::O_EXCL != 0 {
            return Err(Error::Exists);
        }
        drop(tree);
        // The request ran on the folder: the file it opens answers as a failed one does.
        crate::vfs::contain::check_failed(fs, existing)?;
        let (fh, info) = open(fs, existing, flags, ctx.uid)?;
        let a = attr::getattr(fs, existing)?;
        attr::remember(fs, &fs.tree.read(), existing);
        return Ok((a, fh, info));
    }
    let rel = tree.rel(parent).ok_or(Error::NotFound)?.join(name);
    let pieces = match create_pieces(fs, &rel, &layout, mode & 0o7777, ctx) {
        Ok(p) => p,
        Err(e) if matches!(&e, Error::Tier { source, .. } if is_rescuable(source)) => {
            // The chosen tier filled up or failed since we looked: try the others.
            if let Some(c) = charge.take() {
                fs.placer.release(c);
            }
            let failed = layout.tiers();
            let eligible: Vec<bool> = fs
                .tiers
                .iter()
                .map(|t| {
                    !failed.contains(&t.index) && t.takes_new_data() && t.has_room_for(1 << 20)
                })
                .collect();
            let c = fs
                .placer
                .choose(parent, &eligible, handles::held_for_placement(fs))
                .ok_or_else(|| pieces::no_room(&fs.tiers, 1 << 20))?;
            layout = FileLayout::Whole { tier: c.tier };
            charge = Some(c);
            create_pieces(fs, &rel, &layout, mode & 0o7777, ctx)?
        }
        Err(e) => {
            if let Some(c) = charge {
                fs.placer.release(c);
            }
            return Err(e);
        }
    };
    for t in layout.tiers() {
        fs.tiers[t].counters.files.fetch_add(1, Ordering::Relaxed);
    }
    let node = Arc::new(FileNode::new(layout, 0, fs.tiers.len()));
    *node.charge.lock() = charge;
    let ino = tree.insert(parent, name, NodeData::File(node.clone()));
    let pt = {
        let mut st = node.state.write();
        st.pieces = pieces;
        let parts = fs.parts();
        let admit = !passthrough::leave_to_kernel(&parts, &st, name, 0, flags);
        cached::cache_on_open(&parts, ino, parent, name, &node, &mut st, false, admit);
        let pt = passthrough::passthrough_piece(&parts, &st, name, 0, flags);
        st.open_keeps_cache(pt.is_some(), flags & libc::O_ACCMODE != libc::O_RDONLY);
        if pt.is_some() {
            passthrough::note_pt_open(&fs.tiers, &mut st);
        }
        pt
    };
    attr::remember(fs, &tree, ino);
    let attr = attr::attr_locked(fs, &tree, ino)?;
    let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
    let fh = handles::new_fh(
        fs,
        Handle::File {
            node,
            ino,
            write,
            read: flags & libc::O_ACCMODE != libc::O_WRONLY,
            passthrough: pt.is_some(),
            token: 0,
            direct: false,
        },
    );
    Ok((
        attr,
        fh,
        OpenInfo {
            direct_io: false,
            // A new file has no pages to drop.
            keep_cache: true,
            no_flush: false,
            passthrough: pt,
        },
    ))
}

/// Opens `ino` for the user `uid` (who sees the file names in `.tierfs/` views only if the
/// mount's owner or root: [`crate::vfs::snapshot::shows_names_to`]).
pub(crate) fn open(fs: &TierFs, ino: u64, flags: i32, uid: u32) -> Result<(u64, OpenInfo)> {
    let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
    if let Some(v) = Virtual::from_ino(ino) {
        return statsdir::open(fs, v, write, uid);
    }
    let tree = fs.tree.read();
    let node = tree.get(ino)?;
    let f = match &node.data {
        NodeData::File(f) => f.clone(),
        NodeData::Dir { .. } => return Err(Error::IsDir),
        NodeData::Other(_) => return Err(Error::NotSupported("open of a special file")),
    };
    let (parent, name) = (node.parent, node.name.clone());
    let (pt, relayout, keep_cache, uncached) = {
        let mut st = f.state.write();
        if st.opens == 0 && st.cache.is_none() && st.migration.is_none() {
            for t in st.layout.tiers() {
                if fs.tiers[t].missing {
                    // Left out of a degraded mount: requests that need it answer EIO.
                    continue;
                }
                // Also an unlinked file the kernel still references: its pieces are
                // in limbo.
                let p = backing::piece_path(fs, &tree, ino, t)?;
                let piece = Piece::open_in(&fs.tiers[t].root, &p, fs.tiers[t].direct_io)
                    .map_err(|e| backing::tier_err(fs, t, "open", &p, e))?;
                st.pieces[t] = Some(Arc::new(piece));
            }
        }
        // A drifted file is re-laid out at its next open for writing, which the daemon
        // must serve: no passthrough for any open of it, readers included (the kernel
        // keeps one mode per inode, and FUSE sends a reader's RELEASE asynchronously,
        // so DeepSpeed's write open of a file it just read can arrive while that
        // read handle is still open; in passthrough it would pin the old layout).
        let parts = fs.parts();
        let relayout = !st.bypassed() && moves::layout_drifted(&parts, &st.layout);
        let admit = relayout || !passthrough::leave_to_kernel(&parts, &st, &name, f.size(), flags);
        cached::cache_on_open(&parts, ino, parent, &name, &f, &mut st, !write, admit);
        let pt = if relayout {
            None
        } else {
            passthrough::passthrough_piece(&parts, &st, &name, f.size(), flags)
        };
        let keep_cache = st.open_keeps_cache(pt.is_some(), write);
        if pt.is_some() {
            passthrough::note_pt_open(&fs.tiers, &mut st);
        }
        // A program writes the pieces past the daemon: the kernel may keep no pages of it
        // for this open (the daemon's reads of the pieces see those writes, its pages not).
        let uncached = st.direct_writers > 0;
        (pt, relayout, keep_cache, uncached)
    };
    drop(tree);
    // DeepSpeed rewrites its swap files in place every step (no O_TRUNC), so a file
    // laid out under old shares would keep them forever: when it is opened for writing
    // and its stripes no longer follow the shares, it moves as it is rewritten (a
    // migration: rewritten blocks go to the new layout, the rest is copied when the
    // last writer closes). A failed move leaves the file as it was.
    if write && relayout {
        if let Err(e) = migrate::start_migration(&fs.parts(), ino, &f) {
            log::warn!("re-laying out inode {ino} failed (it stays as it is): {e}");
        }
    }
    Ok((
        handles::new_fh(
            fs,
            Handle::File {
                node: f,
                ino,
                write,
                read: flags & libc::O_ACCMODE != libc::O_WRONLY,
                passthrough: pt.is_some(),
                token: 0,
                direct: false,
            },
        ),
        OpenInfo {
            direct_io: uncached,
            keep_cache,
            no_flush: !write,
            passthrough: pt,
        },
    ))
}

/// Settles a file's placement charge with its current size, if it was written.
pub(crate) fn settle_charge(fs: &TierFs, node: &FileNode) {
    if node.dirty.swap(false, Ordering::Relaxed) {
        let mut c = node.charge.lock();
        if let Some(ch) = *c {
            *c = Some(fs.placer.settle(ch, node.size()));
        }
    }
}

pub(crate) fn flush(fs: &TierFs, fh: u64) -> Result<()> {
    if let Handle::File {
        node,
        direct: true,
        write: true,
        ..
    } = handles::handle(fs, fh)?
    {
        // The program closes its descriptor: the size it wrote is the file's before
        // close(2) returns (a stat right after must see it).
        let st = node.state.read();
        passthrough::sync_size_from_pieces(&fs.tiers, &node, &st);
        drop(st);
        settle_charge(fs, &node);
        return Ok(());
    }
    if let Handle::File {
        node,
        passthrough: true,
        ..
    } = handles::handle(fs, fh)?
    {
        let st = node.state.read();
        if let FileLayout::Whole { .. } = st.layout {
            passthrough::sync_size_from_pieces(&fs.tiers, &node, &st);
        }
        drop(st);
        settle_charge(fs, &node);
    }
    Ok(())
}

pub(crate) fn release(fs: &TierFs, fh: u64) -> Result<()> {
    let h = fs.handles.lock().remove(&fh).ok_or(Error::BadHandle)?;
    if let Handle::File {
        node,
        passthrough,
        ino,
        write,
        direct,
        ..
    } = h
    {
        if direct {
            crate::vfs::direct::end_lease(fs, ino, &node, write);
        }
        let last_writer = {
            let st = node.state.read();
            write && st.writers == 1 && st.migration.is_some()
        };
        if last_writer && !node.gone.load(Ordering::Relaxed) {
            // The rewrite is over: copy what it left and switch to the new layout.
            if let Err(e) = migrate::commit_migration(&fs.parts(), ino, &node) {
                log::error!(
                    "re-layout of inode {ino} could not finish (it keeps its old layout and the moved blocks): {e}"
                );
            }
        }
        let mut st = node.state.write();
        if write {
            st.writers = st.writers.saturating_sub(1);
        }
        if passthrough {
            st.pt_opens = st.pt_opens.saturating_sub(1);
            if let FileLayout::Whole { tier } = st.layout {
                fs.tiers[tier]
                    .counters
                    .pt_open
                    .fetch_sub(1, Ordering::Relaxed);
                passthrough::sync_size_from_pieces(&fs.tiers, &node, &st);
            }
        }
        st.opens = st.opens.saturating_sub(1);
        if st.opens == 0 && node.gone.load(Ordering::Relaxed) {
            // Unlinked mid-migration: nobody will read it again.
            migrate::discard_migration(&fs.parts(), ino, &mut st);
        }
        if st.opens == 0 && st.cache.is_none() && st.migration.is_none() {
            for p in st.pieces.iter_mut() {
                *p = None;
            }
        }
        let last = st.opens == 0;
        drop(st);
        settle_charge(fs, &node);
        if last {
            // An unlinked file the kernel has already forgotten goes now.
            let mut tree = fs.tree.write();
            drop_if_gone(fs, &mut tree, ino);
        }
    }
    Ok(())
}

/// The first tier of `layout` that may not take a file's growth from `old` to `new`
/// bytes ([`Tier::may_grow`]: its `capacity`, or free space promised to cached data).
pub(crate) fn refuses_growth(
    fs: &TierFs,
    layout: &FileLayout,
    old: u64,
    new: u64,
) -> Option<usize> {
    if new <= old {
        return None;
    }
    layout.tiers().into_iter().find(|t| {
        let n = layout.piece_len(*t, new) - layout.piece_len(*t, old);
        n > 0 && !fs.tiers[*t].may_grow(n)
    })
}

/// A write that did not reach the primary piece (other stripes only, or a migration's
/// new pieces) still changes the file: the primary piece, which holds the file's times,
/// gets the present mtime and ctime, as a write to it would have given it.
pub(crate) fn touch_primary(fs: &TierFs, st: &FileState) {
    let t = st.layout.primary();
    if let Some(p) = &st.pieces[t] {
        if let Err(e) = sys::futimens(
            std::os::fd::AsFd::as_fd(p.file()),
            SetTime::Omit,
            SetTime::Now,
        ) {
            log::warn!(
                "tier '{}': cannot update a file's mtime: {e}",
                fs.tiers[t].name
            );
            fs.tiers[t].note_error(&e);
        }
    }
}

/// Sets a file's size, piece by piece (tree lock held for reading).
pub(crate) fn truncate(
    fs: &TierFs,
    tree: &Tree,
    ino: u64,
    f: &Arc<FileNode>,
    size: u64,
) -> Result<()> {
    let mut st = f.state.write();
    // The cache holds whole files as they were: write back and drop, then resize.
    cached::uncache_locked(&fs.parts(), f, &mut st)?;
    // A migration tracks blocks of the size it began with: finish it first.
    migrate::commit_migration_locked(&fs.parts(), tree, ino, f, &mut st)?;
    let st = st;
    let set = |t: usize, len: u64| -> Result<()> {
        if fs.tiers[t].missing {
            return Err(pieces::missing_err(&fs.tiers, t, "truncate"));
        }
        if let Some(p) = &st.pieces[t] {
            return p
                .file()
                .set_len(len)
                .map_err(|e| backing::tier_err(fs, t, "truncate", Path::new("(open file)"), e));
        }
        let p = backing::piece_path(fs, tree, ino, t)?;
        fs.tiers[t]
            .fs()
            .open(&p, libc::O_WRONLY, 0)
            .and_then(|file| file.set_len(len))
            .map_err(|e| backing::tier_err(fs, t, "truncate", &p, e))
    };
    let old = f.size();
    match &st.layout {
        FileLayout::Whole { tier } => set(*tier, size)?,
        FileLayout::Stripe(m) => {
            for t in &m.tiers {
                set(*t, m.piece_len(*t, size))?;
            }
        }
    }
    f.size.store(size, Ordering::Release);
    if f.counted() {
        pieces::account_resize(&fs.tiers, &st.layout, old, size);
    }
    f.dirty.store(true, Ordering::Relaxed);
    Ok(())
}

pub(crate) fn fsync(fs: &TierFs, fh: u64, datasync: bool) -> Result<()> {
    let node = match handles::handle(fs, fh)? {
        Handle::File { node, ino, .. } => {
            let e = node.state.read().cache.clone();
            if let Some(e) = e {
                writeback::write_back(&fs.parts(), &node, &e, ino)?;
            }
            // A migration's new bytes are in limbo temporaries until it switches over.
            if node.state.read().migration.is_some() && !node.gone.load(Ordering::Relaxed) {
                migrate::commit_migration(&fs.parts(), ino, &node)?;
            }
            node
        }
        _ => return Ok(()),
    };
    let st = node.state.read();
    for (t, p) in st.pieces.iter().enumerate() {
        if let Some(p) = p {
            let r = if datasync {
                p.file().sync_data()
            } else {
                p.file().sync_all()
            };
            r.map_err(|e| backing::tier_err(fs, t, "fsync", Path::new("(open file)"), e))?;
        }
    }
    Ok(())
}

pub(crate) fn fallocate(fs: &TierFs, fh: u64, off: u64, len: u64, mode: i32) -> Result<()> {
    let (node, ino) = match handles::handle(fs, fh)? {
        Handle::File {
            node,
            ino,
            write: true,
            ..
        } => {
            if node.state.read().migration.is_some() {
                migrate::commit_migration(&fs.parts(), ino, &node)?;
            }
            (node, ino)
        }
        Handle::File { .. } => return Err(Error::BadHandle),
        _ => return Err(Error::Access("the stats files are read-only")),
    };
    let allowed = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE;
    if mode & !allowed != 0 {
        return Err(Error::NotSupported("this fallocate mode"));
    }
    if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 && mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
        return Err(Error::Invalid("PUNCH_HOLE needs KEEP_SIZE"));
    }
    let end = off
        .checked_add(len)
        .ok_or(Error::Invalid("range overflow"))?;
    if node.state.read().cache.is_some() {
        let mut st = node.state.write();
        cached::uncache_locked(&fs.parts(), &node, &mut st)?;
    }
    let st = loop {
        let st = node.state.read();
        if st.migration.is_none() {
            break st;
        }
        // A move installed since the check above (an eager move waiting for its switch):
        // the hole must go into the pieces the file keeps.
        drop(st);
        migrate::commit_migration(&fs.parts(), ino, &node)?;
    };
    // Each tier's stripes of a logical range are contiguous in its piece.
    let ranges: Vec<(usize, u64, u64)> = match &st.layout {
        FileLayout::Whole { tier } => vec![(*tier, off, len)],
        FileLayout::Stripe(m) => m
            .tiers
            .iter()
            .filter_map(|t| {
                let a = m.piece_len(*t, off);
                let b = m.piece_len(*t, end);
                (b > a).then_some((*t, a, b - a))
            })
            .collect(),
    };
    for (t, a, l) in ranges {
        let p = pieces::open_piece(&fs.tiers, &st, t, "fallocate")?;
        sys::fallocate(std::os::fd::AsFd::as_fd(p.file()), mode, a, l)
            .map_err(|e| backing::tier_err(fs, t, "fallocate", Path::new("(open file)"), e))?;
    }
    if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
        let old = node.size.fetch_max(end, Ordering::AcqRel);
        if end > old {
            if let FileLayout::Stripe(m) = &st.layout {
                // Pieces past their share of the new size must read as the file's end.
                let holder = m.locate(end - 1).0;
                if let Some(p) = &st.pieces[holder] {
                    let want = m.piece_len(holder, end);
                    let cur = p.file().metadata().map(|m| m.len()).unwrap_or(0);
                    if cur < want {
                        p.file().set_len(want).map_err(|e| {
                            backing::tier_err(fs, holder, "truncate", Path::new("(open file)"), e)
                        })?;
                    }
                }
            }
            if node.counted() {
                pieces::account_resize(&fs.tiers, &st.layout, old, end);
            }
        }
    }
    Ok(())
}

/// Forgets a node that is neither linked, referenced by the kernel nor open, and
/// deletes its pieces in limbo.
pub(crate) fn drop_if_gone(fs: &TierFs, tree: &mut Tree, ino: u64) {
    let Some(n) = tree.nodes.get(&ino) else {
        return;
    };
    if n.linked || n.nlookup.load(Ordering::Relaxed) > 0 {
        return;
    }
    if let NodeData::File(f) = &n.data {
        if f.state.read().opens > 0 {
            return;
        }
        migrate::discard_migration(&fs.parts(), ino, &mut f.state.write());
        cached::cache_forget(&fs.parts(), f);
    }
    if n.limbo {
        if let Ok(paths) = backing::backing_paths(fs, tree, ino) {
            for (t, p) in paths {
                let _ = fs.tiers[t].fs().unlink(&p);
            }
        }
    }
    tree.nodes.remove(&ino);
}
