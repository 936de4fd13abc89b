//! The tiers' side of the namespace: backing paths of a file's pieces, opening pieces,
//! limbo for unlinked files, ownership of new objects, extended attributes and statfs.

use crate::data::file::FileState;
use crate::error::{Error, Result};
use crate::layout::{FileLayout, NAME_MAX};
use crate::tierio::Piece;
use crate::vfs::state::TierFs;
use crate::vfs::tree::{NodeData, Tree};
use crate::vfs::types::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The piece of an open file on `tier`, or EIO when the tier was left out of a degraded
/// mount (the only way an open file lacks one).
pub(crate) fn open_piece<'a>(
    fs: &TierFs,
    st: &'a FileState,
    tier: usize,
    op: &'static str,
) -> Result<&'a Piece> {
    piece_in(fs, &st.pieces, tier, op)
}

/// The piece on `tier` among `pieces` (a file's, or a move's new ones).
pub(crate) fn piece_in<'a>(
    fs: &TierFs,
    pieces: &'a [Option<Arc<Piece>>],
    tier: usize,
    op: &'static str,
) -> Result<&'a Piece> {
    match &pieces[tier] {
        Some(p) => Ok(p),
        None if fs.tiers[tier].missing => Err(missing_err(fs, tier, op)),
        None => Err(Error::BadHandle),
    }
}

/// The error for a request that needs a tier missing from a degraded mount.
pub(crate) fn missing_err(fs: &TierFs, tier: usize, op: &'static str) -> Error {
    let t = &fs.tiers[tier];
    t.counters.errors.fetch_add(1, Ordering::Relaxed);
    Error::tier(
        &t.name,
        op,
        &t.root,
        // No raw errno: the caller gets EIO, and no move is attempted.
        std::io::Error::other("the tier is missing (mounted degraded without it)"),
    )
}

pub(crate) fn tier_err(
    fs: &TierFs,
    tier: usize,
    op: &'static str,
    path: &Path,
    e: std::io::Error,
) -> Error {
    fs.tiers[tier].note_error(&e);
    Error::tier(&fs.tiers[tier].name, op, path, e)
}

/// Adjusts the per-tier `used` counters for a size change of a file.
pub(crate) fn account_resize(fs: &TierFs, layout: &FileLayout, old: u64, new: u64) {
    match layout {
        FileLayout::Whole { tier } => fs.tiers[*tier].add_used(new as i64 - old as i64),
        FileLayout::Stripe(m) => {
            for t in &m.tiers {
                let d = m.piece_len(*t, new) as i64 - m.piece_len(*t, old) as i64;
                fs.tiers[*t].add_used(d);
            }
        }
    }
}

/// Backing paths of a node: every tier for folders, the layout's tiers for files, the
/// first tier for the rest.
///
/// A file with a piece on a tier missing from a degraded mount has no complete set of
/// paths: changing it (rename, unlink, chmod, ...) answers EIO, so the piece on the
/// missing tier never goes out of step with the others.
///
/// The paths are for the tier's [`crate::tier::beneath`] calls, never for a path-taking call of
/// its own: those reach nothing through a symlink in a tier, and any depth.
pub(crate) fn backing_paths(fs: &TierFs, tree: &Tree, ino: u64) -> Result<Vec<(usize, PathBuf)>> {
    let node = tree.get(ino)?;
    if let NodeData::File(f) = &node.data {
        if let Some(t) = f
            .state
            .read()
            .layout
            .tiers()
            .into_iter()
            .find(|t| fs.tiers[*t].missing)
        {
            return Err(missing_err(fs, t, "change"));
        }
    }
    if let (NodeData::File(f), true) = (&node.data, node.limbo) {
        return Ok(f
            .state
            .read()
            .layout
            .tiers()
            .into_iter()
            .map(|t| (t, fs.tiers[t].limbo_path(ino)))
            .collect());
    }
    let rel = tree.rel(ino).ok_or(Error::NotFound)?;
    Ok(match &node.data {
        NodeData::Dir { .. } => fs
            .tiers
            .iter()
            .filter(|t| !t.missing)
            .map(|t| (t.index, t.path(&rel)))
            .collect(),
        NodeData::File(f) => f
            .state
            .read()
            .layout
            .tiers()
            .into_iter()
            .map(|t| (t, fs.tiers[t].path(&rel)))
            .collect(),
        NodeData::Other(_) => vec![(0, fs.tiers[0].path(&rel))],
    })
}

/// Where a file's piece on `tier` is: at its path, or in limbo once unlinked.
pub(crate) fn piece_path(fs: &TierFs, tree: &Tree, ino: u64, tier: usize) -> Result<PathBuf> {
    Ok(if tree.get(ino)?.limbo {
        fs.tiers[tier].limbo_path(ino)
    } else {
        fs.tiers[tier].path(&tree.rel(ino).ok_or(Error::NotFound)?)
    })
}

/// Moves an unlinked file's pieces to limbo (the kernel may still open or stat it).
pub(crate) fn to_limbo(fs: &TierFs, tree: &Tree, ino: u64) -> Result<()> {
    let mut moved: Vec<(usize, PathBuf, PathBuf)> = Vec::new();
    for (t, p) in backing_paths(fs, tree, ino)? {
        let l = fs.tiers[t].limbo_path(ino);
        match fs.tiers[t].fs().rename(&p, &l, 0) {
            Ok(()) => moved.push((t, l, p)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                for (u, l, p) in moved {
                    let _ = fs.tiers[u].fs().rename(&l, &p, 0);
                }
                return Err(tier_err(fs, t, "unlink", &p, e));
            }
        }
    }
    Ok(())
}

/// Gives a new backing object the caller's ownership when we are root.
pub(crate) fn chown_new(fs: &TierFs, path: &Path, ctx: Ctx, tier: usize) -> Result<()> {
    if fs.euid == 0 && (ctx.uid != 0 || ctx.gid != 0) {
        fs.tiers[tier]
            .fs()
            .chown(path, Some(ctx.uid), Some(ctx.gid))
            .map_err(|e| tier_err(fs, tier, "chown", path, e))?;
    }
    Ok(())
}

pub(crate) fn statfs(fs: &TierFs) -> StatFs {
    let bsize = 4096u64;
    let (mut blocks, mut bfree, mut bavail, mut files, mut ffree) = (0, 0, 0, 0, 0);
    for t in &fs.tiers {
        let Some(s) = t.space() else { continue };
        let total = t.capacity.map_or(s.total, |c| c.min(s.total));
        let used = t.counters.used.load(Ordering::Relaxed);
        let cap_left = t.capacity.map_or(u64::MAX, |c| c.saturating_sub(used));
        blocks += total / bsize;
        bfree += s.free.min(cap_left) / bsize;
        bavail += s.avail.min(cap_left) / bsize;
        files += s.files;
        ffree += s.files_free;
    }
    StatFs {
        blocks,
        bfree,
        bavail,
        files,
        ffree,
        bsize: bsize as u32,
        namelen: NAME_MAX as u32,
    }
}

pub(crate) fn xattr_path(fs: &TierFs, ino: u64) -> Result<(usize, PathBuf)> {
    if Virtual::from_ino(ino).is_some() {
        return Err(Error::NotSupported("xattrs on stats files"));
    }
    let tree = fs.tree.read();
    let node = tree.get(ino)?;
    let t = match &node.data {
        NodeData::File(f) => f.state.read().layout.primary(),
        _ => 0,
    };
    let p = if node.limbo {
        fs.tiers[t].limbo_path(ino)
    } else {
        fs.tiers[t].path(&tree.rel(ino).ok_or(Error::NotFound)?)
    };
    Ok((t, p))
}

pub(crate) fn xattr_name_ok(name: &OsStr) -> Result<()> {
    if name.as_bytes().starts_with(b"user.tierfs.") {
        return Err(Error::NotPermitted(
            "user.tierfs.* names are reserved by tierfs",
        ));
    }
    if !name.as_bytes().starts_with(b"user.") {
        return Err(Error::NotSupported("only user.* xattrs are stored"));
    }
    Ok(())
}

pub(crate) fn setxattr(
    fs: &TierFs,
    ino: u64,
    name: &OsStr,
    value: &[u8],
    flags: i32,
) -> Result<()> {
    if Virtual::from_ino(ino).is_some() {
        return Err(Error::Access("the stats files are read-only"));
    }
    xattr_name_ok(name)?;
    if fs.tree.read().get(ino)?.kind() == Kind::Symlink {
        return Err(Error::NotPermitted("user xattrs on symlinks"));
    }
    let (t, p) = xattr_path(fs, ino)?;
    fs.tiers[t]
        .fs()
        .setxattr(&p, name, value, flags)
        .map_err(|e| tier_err(fs, t, "setxattr", &p, e))
}

pub(crate) fn getxattr(fs: &TierFs, ino: u64, name: &OsStr) -> Result<Vec<u8>> {
    if xattr_name_ok(name).is_err() {
        return Err(Error::NoAttr);
    }
    let (t, p) = xattr_path(fs, ino)?;
    fs.tiers[t]
        .fs()
        .getxattr(&p, name)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENODATA) => Error::NoAttr,
            Some(libc::EOPNOTSUPP) => Error::NoAttr,
            _ => tier_err(fs, t, "getxattr", &p, e),
        })
}

pub(crate) fn listxattr(fs: &TierFs, ino: u64) -> Result<Vec<u8>> {
    if Virtual::from_ino(ino).is_some() {
        return Ok(Vec::new());
    }
    let (t, p) = xattr_path(fs, ino)?;
    let names = match fs.tiers[t].fs().listxattr(&p) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Vec::new(),
        Err(e) => return Err(tier_err(fs, t, "listxattr", &p, e)),
    };
    let mut out = Vec::new();
    for n in names {
        if n.starts_with(b"user.") && !n.starts_with(b"user.tierfs.") {
            out.extend_from_slice(&n);
            out.push(0);
        }
    }
    Ok(out)
}

pub(crate) fn removexattr(fs: &TierFs, ino: u64, name: &OsStr) -> Result<()> {
    if Virtual::from_ino(ino).is_some() {
        return Err(Error::Access("the stats files are read-only"));
    }
    xattr_name_ok(name).map_err(|_| Error::NoAttr)?;
    let (t, p) = xattr_path(fs, ino)?;
    fs.tiers[t]
        .fs()
        .removexattr(&p, name)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENODATA) => Error::NoAttr,
            _ => tier_err(fs, t, "removexattr", &p, e),
        })
}

/// ENOSPC for a new file or a move no tier has room for, logged with each tier's
/// account: `df` may show free space that tierfs keeps back ([`crate::tier::FREE_RESERVE`]
/// per tier, and what the cache has promised), or the tier is at its `capacity`.
pub(crate) fn no_room(fs: &TierFs, want: u64) -> Error {
    use crate::units::fmt_bytes;
    let why: Vec<String> = fs
        .tiers
        .iter()
        .filter(|t| !t.missing)
        .map(|t| {
            let avail = t.space().map_or(0, |s| s.avail);
            let mut w = format!(
                "'{}' {} free on its file system, {} of it kept back (FREE_RESERVE)",
                t.name,
                fmt_bytes(avail),
                fmt_bytes(avail.min(crate::tier::FREE_RESERVE))
            );
            let promised = t.counters.reserved.load(Ordering::Relaxed);
            if promised > 0 {
                w.push_str(&format!(
                    ", {} promised to cached data",
                    fmt_bytes(promised)
                ));
            }
            if let Some(c) = t.capacity {
                w.push_str(&format!(
                    ", {} of its capacity {} used",
                    fmt_bytes(t.counters.used.load(Ordering::Relaxed)),
                    fmt_bytes(c)
                ));
            }
            if !t.is_healthy() {
                w.push_str(&format!(", {}", t.state()));
            }
            w
        })
        .collect();
    log::warn!(
        "no tier has room for {} more bytes (ENOSPC): {}",
        fmt_bytes(want),
        why.join("; ")
    );
    Error::NoSpace(want)
}
