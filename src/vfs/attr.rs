//! Attributes: what getattr answers for files, folders, special files and the virtual
//! files, from the primary piece and the in-memory size.

use crate::error::{Error, Result};
use crate::inodes::file::FileNode;
use crate::inodes::file::FileState;
use crate::inodes::tree::{NodeData, Tree};
use crate::inodes::types::*;
use crate::layout::FileLayout;
use crate::sys;
use crate::tierio::Piece;
use crate::vfs::backing;
use crate::vfs::state::TierFs;
use std::ffi::OsStr;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;

pub(crate) fn virtual_attr(fs: &TierFs, v: Virtual) -> Attr {
    let (kind, perm, nlink) = match v {
        Virtual::Dir => (Kind::Dir, 0o555, 2),
        // Read-write for its owner: the replies are read back through the writing handle.
        Virtual::Control => (Kind::File, 0o600, 1),
        // They list the mount's files by name (see `snapshot::shows_names_to`).
        Virtual::Files | Virtual::Cache => (Kind::File, 0o400, 1),
        _ => (Kind::File, 0o444, 1),
    };
    Attr {
        ino: v.ino(),
        kind,
        size: 0,
        blocks: 0,
        perm,
        nlink,
        uid: fs.euid,
        gid: sys_egid(),
        rdev: 0,
        atime: SystemTime::now(),
        mtime: SystemTime::now(),
        ctime: fs.started,
        volatile: false,
    }
}

/// A file's 512-byte blocks: every piece's (a migration's new pieces too), and at least
/// its size where bytes are held in memory. `tar --sparse` takes a file with fewer
/// blocks than its size for one with holes, and stores what it guesses are holes as
/// zeros (GNU tar stores no data at all for a file with none), so too few is never
/// right; too many only costs `du` accuracy.
pub(crate) fn file_blocks(
    fs: &TierFs,
    tree: &Tree,
    ino: u64,
    st: &FileState,
    primary: usize,
    m: &Metadata,
    size: u64,
) -> u64 {
    let piece_blocks = |pieces: &[Option<Arc<Piece>>], t: usize| -> u64 {
        match &pieces[t] {
            Some(p) => p.file().metadata().map(|m| m.blocks()).unwrap_or(0),
            None if fs.tiers[t].missing => 0,
            None => backing::piece_path(fs, tree, ino, t)
                .and_then(|p| Ok(fs.tiers[t].fs().stat(&p)?.blocks()))
                .unwrap_or(0),
        }
    };
    let mut blocks = m.blocks();
    if let FileLayout::Stripe(_) = st.layout {
        for t in st.layout.tiers().into_iter().filter(|t| *t != primary) {
            blocks += piece_blocks(&st.pieces, t);
        }
    }
    if let Some(mig) = &st.migration {
        for t in mig.layout.tiers() {
            if let Some(p) = &mig.pieces[t] {
                blocks += p.file().metadata().map(|m| m.blocks()).unwrap_or(0);
            }
        }
    }
    if st.cache.is_some() {
        blocks = blocks.max(size.div_ceil(512));
    }
    blocks
}

pub(crate) fn attr_from_meta(
    _fs: &TierFs,
    ino: u64,
    kind: Kind,
    m: &Metadata,
    size: Option<u64>,
) -> Attr {
    let size = size.unwrap_or(m.len());
    Attr {
        ino,
        kind,
        size,
        blocks: m.blocks(),
        perm: (m.mode() & 0o7777) as u16,
        // A file's names are the tree's to count (`Node::names`): each name is one
        // link of every piece, and a piece may have others (a hard link made on the
        // tier itself, a scratch hold).
        nlink: if kind == Kind::Dir {
            m.nlink() as u32
        } else {
            1
        },
        uid: m.uid(),
        gid: m.gid(),
        rdev: m.rdev() as u32,
        atime: sys::time_of(m.atime(), m.atime_nsec()),
        mtime: sys::time_of(m.mtime(), m.mtime_nsec()),
        ctime: sys::time_of(m.ctime(), m.ctime_nsec()),
        volatile: false,
    }
}

/// Attributes of a node, read from its primary backing object; the tree lock is held.
pub(crate) fn attr_locked(fs: &TierFs, tree: &Tree, ino: u64) -> Result<Attr> {
    if let Some(v) = Virtual::from_ino(ino) {
        return Ok(virtual_attr(fs, v));
    }
    let node = tree.get(ino)?;
    let kind = node.kind();
    match &node.data {
        NodeData::File(f) => {
            let st = match f.state.try_read_for(STATE_WAIT) {
                Some(st) => st,
                None => match busy_attr(fs, tree, ino, kind, f, node.names() as u32) {
                    Some(a) => return Ok(a),
                    // The move switched over under us (the old piece is gone): by now
                    // the lock is free or about to be.
                    None => f.state.read(),
                },
            };
            // The primary piece, or where a degraded mount lacks its tier, another.
            let primary = std::iter::once(st.layout.primary())
                .chain(st.layout.tiers())
                .find(|t| !fs.tiers[*t].missing)
                .unwrap_or(st.layout.primary());
            let size = f.size();
            let m = if let Some(p) = &st.pieces[primary] {
                p.file().metadata().map_err(|e| {
                    backing::tier_err(fs, primary, "fstat", Path::new("(open file)"), e)
                })?
            } else {
                let path = backing::piece_path(fs, tree, ino, primary)?;
                fs.tiers[primary]
                    .fs()
                    .stat(&path)
                    .map_err(|e| backing::tier_err(fs, primary, "stat", &path, e))?
            };
            // While the kernel writes through passthrough, or a program through the pieces'
            // own descriptors (the direct path), the pieces' sizes are the truth.
            let size = if st.direct_writers > 0 {
                st.pieces_size().unwrap_or(size)
            } else if st.pt_opens > 0 {
                m.len()
            } else {
                size
            };
            let mut a = attr_from_meta(fs, ino, kind, &m, Some(size));
            a.volatile = st.direct_writers > 0;
            a.blocks = file_blocks(fs, tree, ino, &st, primary, &m, size);
            if let (Some(_), Some(t)) = (&st.cache, *f.mtime.lock()) {
                // A change the cache holds: the piece learns it at write-back.
                a.mtime = t;
                a.ctime = a.ctime.max(t);
            }
            a.nlink = node.names() as u32;
            Ok(a)
        }
        _ => {
            if let Some(a) = node.removed_attr {
                return Ok(a);
            }
            let rel = tree.rel(ino).ok_or(Error::NotFound)?;
            let path = fs.tiers[0].path(&rel);
            let m = fs.tiers[0]
                .fs()
                .stat(&path)
                .map_err(|e| backing::tier_err(fs, 0, "stat", &path, e))?;
            let mut a = attr_from_meta(fs, ino, kind, &m, None);
            if kind != Kind::Dir {
                a.nlink = node.names() as u32;
            }
            Ok(a)
        }
    }
}

pub(crate) fn check_writable_parent(fs: &TierFs, parent: u64, name: &OsStr) -> Result<()> {
    if Virtual::from_ino(parent).is_some() {
        return Err(Error::Access("the stats folder is read-only"));
    }
    if reserved(fs, parent, name) {
        return Err(Error::Exists);
    }
    name_ok(name)
}

pub(crate) fn reserved(fs: &TierFs, parent: u64, name: &OsStr) -> bool {
    parent == ROOT_INO && name == fs.stats_dir
}

pub(crate) fn getattr(fs: &TierFs, ino: u64) -> Result<Attr> {
    let tree = fs.tree.read();
    attr_locked(fs, &tree, ino)
}

/// Counts a reference handed to the kernel by create/mkdir/symlink/mknod.
pub(crate) fn remember(_fs: &TierFs, tree: &Tree, ino: u64) {
    if let Some(n) = tree.nodes.get(&ino) {
        n.nlookup.fetch_add(1, Ordering::Relaxed);
    }
}

/// How long getattr waits for a file's lock before answering without it.
const STATE_WAIT: Duration = Duration::from_millis(20);

/// Attributes of a file whose lock a move holds while it copies the bytes: from its
/// primary piece by path, where it stays until the switch, and the exact in-memory size;
/// the block count is the primary piece's alone. `None` when that piece cannot be read
/// (the move has just switched over and removed it).
fn busy_attr(
    fs: &TierFs,
    tree: &Tree,
    ino: u64,
    kind: Kind,
    f: &FileNode,
    nlink: u32,
) -> Option<Attr> {
    let primary = f.primary.load(Ordering::Acquire);
    let path = backing::piece_path(fs, tree, ino, primary).ok()?;
    let m = fs.tiers[primary].fs().stat(&path).ok()?;
    let size = f.size();
    let mut a = attr_from_meta(fs, ino, kind, &m, Some(size));
    // Only the primary piece is seen here, and a cached file's bytes may be in memory
    // alone: never fewer blocks than the size needs (`file_blocks`: too few misleads
    // `tar --sparse` and `du` into treating data as holes).
    a.blocks = a.blocks.max(size.div_ceil(512));
    if let Some(t) = *f.mtime.lock() {
        a.mtime = t;
        a.ctime = a.ctime.max(t);
    }
    a.nlink = nlink;
    Some(a)
}
