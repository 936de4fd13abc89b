//! The tiers' side of the namespace: backing paths of a node's entries, limbo for unlinked
//! files, ownership of new objects, extended attributes and statfs (a file's pieces, which
//! the data path shares, are in [`crate::inodes::pieces`]).

use crate::error::{Error, Result};
use crate::inodes::pieces;
use crate::inodes::tree::{NodeData, Tree};
use crate::inodes::types::*;
use crate::layout::NAME_MAX;
use crate::vfs::state::TierFs;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// [`pieces::tier_err`] on this filesystem's tiers.
pub(crate) fn tier_err(
    fs: &TierFs,
    tier: usize,
    op: &'static str,
    path: &Path,
    e: std::io::Error,
) -> Error {
    pieces::tier_err(&fs.tiers, tier, op, path, e)
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
            return Err(pieces::missing_err(&fs.tiers, t, "change"));
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

/// [`pieces::piece_path`] on this filesystem's tiers.
pub(crate) fn piece_path(fs: &TierFs, tree: &Tree, ino: u64, tier: usize) -> Result<PathBuf> {
    pieces::piece_path(&fs.tiers, tree, ino, tier)
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
