//! Namespace operations: lookup, create of folders, symlinks and special files, unlink,
//! rmdir, rename and setattr, each applied to every tier that holds the object.

use crate::error::{Error, Result};
use crate::inodes::pieces;
use crate::inodes::tree::{NodeData, Tree};
use crate::inodes::types::*;
use crate::layout::NAME_MAX;
use crate::sys::SetTime;
use crate::tierio::Piece;
use crate::vfs::state::TierFs;
use crate::vfs::{attr, backing, files, links};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

pub(crate) fn kill_suidgid(fs: &TierFs, ino: u64) -> Result<bool> {
    let mode = attr::getattr(fs, ino)?;
    if mode.kind != Kind::File {
        return Ok(false);
    }
    let perm = mode.perm as u32;
    let mut new = perm & !libc::S_ISUID;
    if perm & libc::S_IXGRP != 0 {
        new &= !libc::S_ISGID;
    }
    if new == perm {
        return Ok(false);
    }
    setattr(
        fs,
        ino,
        SetAttr {
            mode: Some(new),
            ..SetAttr::default()
        },
    )
    .map(|_| true)
}

pub(crate) fn lookup(fs: &TierFs, parent: u64, name: &OsStr) -> Result<Attr> {
    if attr::reserved(fs, parent, name) {
        return Ok(attr::virtual_attr(fs, Virtual::Dir));
    }
    if parent == Virtual::Dir.ino() {
        return Virtual::FILES
            .iter()
            .find(|v| name == v.name())
            .map(|v| attr::virtual_attr(fs, *v))
            .ok_or(Error::NotFound);
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong);
    }
    // The read lock is enough: the count is atomic, and a forget (which may drop the
    // node) takes the write lock, so it runs wholly before or after this.
    let tree = fs.tree.read();
    let ino = tree.child(parent, name)?;
    let a = attr::attr_locked(fs, &tree, ino)?;
    attr::remember(fs, &tree, ino);
    Ok(a)
}

pub(crate) fn forget(fs: &TierFs, ino: u64, n: u64) {
    if ino == ROOT_INO || Virtual::from_ino(ino).is_some() {
        return;
    }
    let mut tree = fs.tree.write();
    if let Some(node) = tree.nodes.get_mut(&ino) {
        let count = node.nlookup.get_mut();
        *count = count.saturating_sub(n);
    }
    files::drop_if_gone(fs, &mut tree, ino);
}

pub(crate) fn setattr(fs: &TierFs, ino: u64, s: SetAttr) -> Result<Attr> {
    if ino == Virtual::Control.ino()
        && s.size == Some(0)
        && s.mode.is_none()
        && s.uid.is_none()
        && s.gid.is_none()
    {
        // `echo cmd > .tierfs/control` opens with O_TRUNC: nothing to truncate.
        return Ok(attr::virtual_attr(fs, Virtual::Control));
    }
    if Virtual::from_ino(ino).is_some() {
        return Err(Error::Access("the stats files are read-only"));
    }
    let tree = fs.tree.read();
    let node = tree.get(ino)?;
    let open_pieces: Vec<(usize, Arc<Piece>)> = match &node.data {
        NodeData::File(f) => f
            .state
            .read()
            .pieces
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.clone().map(|p| (i, p)))
            .collect(),
        _ => Vec::new(),
    };
    // An unlinked but open file has no paths: act on its descriptors.
    let paths = if node.linked {
        backing::backing_paths(fs, &tree, ino)?
    } else {
        Vec::new()
    };
    if let Some(size) = s.size {
        match &node.data {
            NodeData::File(f) => files::truncate(fs, &tree, ino, f, size)?,
            NodeData::Dir { .. } => return Err(Error::IsDir),
            _ => return Err(Error::Invalid("truncate of a special file")),
        }
    }
    if let Some(mode) = s.mode {
        let perm = fs::Permissions::from_mode(mode & 0o7777);
        if node.kind() != Kind::Symlink {
            for (t, p) in &paths {
                // Never through a symlink planted in place of the piece or folder.
                fs.tiers[*t]
                    .fs()
                    .chmod(p, mode & 0o7777)
                    .map_err(|e| backing::tier_err(fs, *t, "chmod", p, e))?;
            }
            for (t, p) in &open_pieces {
                if paths.is_empty() {
                    p.file().set_permissions(perm.clone()).map_err(|e| {
                        backing::tier_err(fs, *t, "fchmod", Path::new("(open file)"), e)
                    })?;
                }
            }
        }
    }
    if s.uid.is_some() || s.gid.is_some() {
        for (t, p) in &paths {
            fs.tiers[*t]
                .fs()
                .chown(p, s.uid, s.gid)
                .map_err(|e| backing::tier_err(fs, *t, "chown", p, e))?;
        }
        if paths.is_empty() {
            for (t, p) in &open_pieces {
                std::os::unix::fs::fchown(p.file(), s.uid, s.gid).map_err(|e| {
                    backing::tier_err(fs, *t, "fchown", Path::new("(open file)"), e)
                })?;
            }
        }
    }
    if s.atime.is_some() || s.mtime.is_some() {
        let a = s.atime.unwrap_or(SetTime::Omit);
        let m = s.mtime.unwrap_or(SetTime::Omit);
        for (t, p) in &paths {
            fs.tiers[*t]
                .fs()
                .utimens(p, a, m)
                .map_err(|e| backing::tier_err(fs, *t, "utimens", p, e))?;
        }
        if let NodeData::File(f) = &node.data {
            if f.state.read().cache.is_some() {
                // Dirty bytes in memory would overwrite it at write-back (`cp -p`,
                // `rsync -a`, `tar x` set the times after writing): keep it until then.
                match m {
                    SetTime::At(t) => *f.mtime.lock() = Some(t),
                    SetTime::Now => *f.mtime.lock() = Some(SystemTime::now()),
                    SetTime::Omit => {}
                }
            }
        }
    }
    attr::attr_locked(fs, &tree, ino)
}

pub(crate) fn readlink(fs: &TierFs, ino: u64) -> Result<OsString> {
    let tree = fs.tree.read();
    let node = tree.get(ino)?;
    if node.kind() != Kind::Symlink {
        return Err(Error::Invalid("not a symlink"));
    }
    let rel = tree.rel(ino).ok_or(Error::NotFound)?;
    let p = fs.tiers[0].path(&rel);
    fs.tiers[0]
        .fs()
        .readlink(&p)
        .map(|t| t.into_os_string())
        .map_err(|e| backing::tier_err(fs, 0, "readlink", &p, e))
}

pub(crate) fn mkdir(fs: &TierFs, parent: u64, name: &OsStr, mode: u32, ctx: Ctx) -> Result<Attr> {
    attr::check_writable_parent(fs, parent, name)?;
    let mut tree = fs.tree.write();
    if tree.children(parent)?.contains_key(name) {
        return Err(Error::Exists);
    }
    let rel = tree.rel(parent).ok_or(Error::NotFound)?.join(name);
    let mut made: Vec<(usize, PathBuf)> = Vec::new();
    for t in fs.tiers.iter().filter(|t| !t.missing) {
        let p = t.path(&rel);
        let r = t
            .fs()
            .mkdir(&p, 0o777)
            .and_then(|_| t.fs().chmod(&p, mode & 0o7777));
        if let Err(e) = r
            .map_err(|e| backing::tier_err(fs, t.index, "mkdir", &p, e))
            .and_then(|_| backing::chown_new(fs, &p, ctx, t.index))
        {
            for (u, m) in made {
                let _ = fs.tiers[u].fs().rmdir(&m);
            }
            return Err(e);
        }
        made.push((t.index, p));
    }
    let ino = tree.insert(
        parent,
        name,
        NodeData::Dir {
            children: BTreeMap::new(),
        },
    );
    if let Some(n) = tree.nodes.get_mut(&ino) {
        n.degraded_new = fs.tiers.iter().any(|t| t.missing);
    }
    attr::remember(fs, &tree, ino);
    attr::attr_locked(fs, &tree, ino)
}

pub(crate) fn symlink(
    fs: &TierFs,
    parent: u64,
    name: &OsStr,
    target: &Path,
    ctx: Ctx,
) -> Result<Attr> {
    attr::check_writable_parent(fs, parent, name)?;
    let mut tree = fs.tree.write();
    if tree.children(parent)?.contains_key(name) {
        return Err(Error::Exists);
    }
    let rel = tree.rel(parent).ok_or(Error::NotFound)?.join(name);
    let p = fs.tiers[0].path(&rel);
    fs.tiers[0]
        .fs()
        .symlink(target, &p)
        .map_err(|e| backing::tier_err(fs, 0, "symlink", &p, e))?;
    backing::chown_new(fs, &p, ctx, 0)?;
    let ino = tree.insert(parent, name, NodeData::Other(Kind::Symlink));
    attr::remember(fs, &tree, ino);
    attr::attr_locked(fs, &tree, ino)
}

pub(crate) fn mknod(
    fs: &TierFs,
    parent: u64,
    name: &OsStr,
    mode: u32,
    rdev: u32,
    ctx: Ctx,
) -> Result<Attr> {
    let fmt = mode & libc::S_IFMT;
    if fmt == libc::S_IFREG || fmt == 0 {
        let (a, fh, _) = files::create(fs, parent, name, mode, libc::O_RDWR, ctx)?;
        files::release(fs, fh)?;
        return Ok(a);
    }
    let kind = match fmt {
        libc::S_IFIFO => Kind::Fifo,
        libc::S_IFSOCK => Kind::Socket,
        libc::S_IFCHR => Kind::CharDevice,
        libc::S_IFBLK => Kind::BlockDevice,
        _ => return Err(Error::Invalid("mknod of an unknown file type")),
    };
    attr::check_writable_parent(fs, parent, name)?;
    let mut tree = fs.tree.write();
    if tree.children(parent)?.contains_key(name) {
        return Err(Error::Exists);
    }
    let rel = tree.rel(parent).ok_or(Error::NotFound)?.join(name);
    let p = fs.tiers[0].path(&rel);
    fs.tiers[0]
        .fs()
        .mknod(&p, mode, u64::from(rdev))
        .map_err(|e| backing::tier_err(fs, 0, "mknod", &p, e))?;
    backing::chown_new(fs, &p, ctx, 0)?;
    let ino = tree.insert(parent, name, NodeData::Other(kind));
    attr::remember(fs, &tree, ino);
    attr::attr_locked(fs, &tree, ino)
}

/// Unlinks a node's backing objects and detaches it from the tree (tree lock held).
pub(crate) fn detach(
    fs: &TierFs,
    tree: &mut Tree,
    parent: u64,
    name: &OsStr,
    ino: u64,
    remove_backing: bool,
) -> Result<()> {
    let (is_file, referenced) = match &tree.get(ino)?.data {
        NodeData::File(f) => (
            true,
            tree.get(ino)?.nlookup.load(Ordering::Relaxed) > 0 || f.state.read().opens > 0,
        ),
        _ => (false, false),
    };
    let keep_attr = match tree.get(ino)?.data {
        NodeData::File(_) => None,
        _ => attr::attr_locked(fs, tree, ino).ok().map(|mut a| {
            a.nlink = 0;
            a
        }),
    };
    let mut limbo = tree.get(ino)?.limbo;
    if remove_backing && is_file && referenced && !limbo {
        // The kernel may still stat or open this inode (a racing lookup, an open
        // handle): keep its pieces in limbo until it forgets it.
        backing::to_limbo(fs, tree, ino)?;
        limbo = true;
    } else if remove_backing && !limbo {
        let paths = backing::backing_paths(fs, tree, ino)?;
        let is_dir = matches!(tree.get(ino)?.data, NodeData::Dir { .. });
        for (t, p) in paths {
            let r = if is_dir {
                fs.tiers[t].fs().rmdir(&p)
            } else {
                fs.tiers[t].fs().unlink(&p)
            };
            match r {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(backing::tier_err(
                        fs,
                        t,
                        if is_dir { "rmdir" } else { "unlink" },
                        &p,
                        e,
                    ))
                }
            }
        }
    }
    if let Ok(c) = tree.children_mut(parent) {
        c.remove(name);
    }
    let node = tree.nodes.get_mut(&ino).ok_or(Error::NotFound)?;
    node.linked = false;
    node.removed_attr = keep_attr;
    node.limbo = limbo;
    if let NodeData::File(f) = &node.data {
        f.gone.store(true, Ordering::Relaxed);
        let st = f.state.read();
        pieces::account_resize(&fs.tiers, &st.layout, f.size(), 0);
        for t in st.layout.tiers() {
            let _ = fs.tiers[t].counters.files.fetch_update(
                Ordering::Relaxed,
                Ordering::Relaxed,
                |v| Some(v.saturating_sub(1)),
            );
        }
        if let Some(c) = f.charge.lock().take() {
            fs.placer.release(c);
        }
    }
    files::drop_if_gone(fs, tree, ino);
    Ok(())
}

pub(crate) fn unlink(fs: &TierFs, parent: u64, name: &OsStr) -> Result<()> {
    if Virtual::from_ino(parent).is_some() || attr::reserved(fs, parent, name) {
        return Err(Error::Access("the stats folder is read-only"));
    }
    let mut tree = fs.tree.write();
    let ino = tree.child(parent, name)?;
    if tree.get(ino)?.kind() == Kind::Dir {
        return Err(Error::IsDir);
    }
    if tree.get(ino)?.names() > 1 {
        return links::remove_name(fs, &mut tree, ino, parent, name);
    }
    // A failed file may have a move's journal pending: removed now, its backing inodes
    // could be reused by a new file at the name before the next mount settles the
    // journal against them.
    crate::vfs::contain::check_failed(fs, ino)?;
    detach(fs, &mut tree, parent, name, ino, true)
}

pub(crate) fn rmdir(fs: &TierFs, parent: u64, name: &OsStr) -> Result<()> {
    if Virtual::from_ino(parent).is_some() || attr::reserved(fs, parent, name) {
        return Err(Error::Access("the stats folder is read-only"));
    }
    let mut tree = fs.tree.write();
    let ino = tree.child(parent, name)?;
    if !tree.children(ino)?.is_empty() {
        return Err(Error::NotEmpty);
    }
    detach(fs, &mut tree, parent, name, ino, true)
}

pub(crate) fn rename(
    fs: &TierFs,
    parent: u64,
    name: &OsStr,
    newparent: u64,
    newname: &OsStr,
    flags: u32,
) -> Result<()> {
    if Virtual::from_ino(parent).is_some()
        || Virtual::from_ino(newparent).is_some()
        || attr::reserved(fs, parent, name)
    {
        return Err(Error::Access("the stats folder is read-only"));
    }
    attr::check_writable_parent(fs, newparent, newname)?;
    if flags & libc::RENAME_EXCHANGE != 0 {
        return Err(Error::Invalid("RENAME_EXCHANGE is not supported"));
    }
    // RENAME_WHITEOUT (overlayfs) would need a whiteout device node left behind, which
    // tierfs cannot store: refuse it rather than rename without one.
    if flags & !libc::RENAME_NOREPLACE != 0 {
        return Err(Error::Invalid("only RENAME_NOREPLACE is supported"));
    }
    let mut tree = fs.tree.write();
    let ino = tree.child(parent, name)?;
    // A failed file's names may disagree on the tiers (a move whose re-linking failed):
    // they stay as they are until the next mount settles them.
    crate::vfs::contain::check_failed(fs, ino)?;
    let kind = tree.get(ino)?.kind();
    tree.children(newparent)?;
    let mut target = tree.children(newparent)?.get(newname).copied();
    if target == Some(ino) {
        // Two names of one file: rename(2) does nothing.
        return Ok(());
    }
    if let Some(t) = target {
        // Replacing a failed file removes it: refused as its unlink is.
        crate::vfs::contain::check_failed(fs, t)?;
    }
    check_rename(fs, &tree, ino, kind, newparent, target, flags)?;
    // The name renamed, which for a file with several names need not be its primary one.
    let from_rel = tree.name_rel(parent, name).ok_or(Error::NotFound)?;
    if kind == Kind::Dir {
        crate::vfs::contain::check_none_failed_below(fs, &tree, &from_rel)?;
    }
    let to_rel = tree.name_rel(newparent, newname).ok_or(Error::NotFound)?;
    let src: Vec<usize> = backing::backing_paths(fs, &tree, ino)?
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    // A target with other names keeps its node and pieces: only this name of it goes,
    // first (its inode stays reachable by the others, so no limbo is needed), and comes
    // back if the move fails.
    let mut unlinked_target = None;
    if let Some(t) = target.filter(|t| tree.get(*t).is_ok_and(|n| n.names() > 1)) {
        links::remove_name(fs, &mut tree, t, newparent, newname)?;
        unlinked_target = Some(t);
        target = None;
    }
    let target_in_limbo = match target {
        Some(t) => clear_target(fs, &mut tree, t, kind, &src)?,
        None => None,
    };
    let moved = move_pieces(
        fs,
        &mut tree,
        kind,
        &src,
        &from_rel,
        &to_rel,
        target_in_limbo,
    );
    if let Err(e) = moved {
        if let Some(t) = unlinked_target {
            if let Err(e) = links::add_name(fs, &mut tree, t, newparent, newname) {
                log::error!("/{}: lost this name of a file with several names after a failed rename onto it ({e}); the file keeps its other names", to_rel.display());
            }
        }
        return Err(e);
    }
    if let Some(t) = target {
        detach(fs, &mut tree, newparent, newname, t, false)?;
    }
    tree.children_mut(parent)?.remove(name);
    tree.children_mut(newparent)?
        .insert(newname.to_os_string(), ino);
    tree.rename_name(ino, (parent, name), (newparent, newname))
}

/// Whether `ino` (of `kind`) may take the place of `target` under `newparent`: the checks
/// rename(2) makes, and a folder neither moved into itself nor renamed while a tier that
/// holds a copy of it is missing.
fn check_rename(
    fs: &TierFs,
    tree: &Tree,
    ino: u64,
    kind: Kind,
    newparent: u64,
    target: Option<u64>,
    flags: u32,
) -> Result<()> {
    if let Some(t) = target {
        if flags & libc::RENAME_NOREPLACE != 0 {
            return Err(Error::Exists);
        }
        let tk = tree.get(t)?.kind();
        match (kind == Kind::Dir, tk == Kind::Dir) {
            (true, false) => return Err(Error::NotDir),
            (false, true) => return Err(Error::IsDir),
            (true, true) if !tree.children(t)?.is_empty() => return Err(Error::NotEmpty),
            _ => {}
        }
    }
    // A folder has a copy on every tier, the missing one of a degraded mount included,
    // and that copy may hold striped pieces and whole files no listing shows: renamed
    // on the present tiers alone, the folder would split in two, and each striped file
    // in it into two halves reading zeros where the other holds the bytes. (A file
    // with a piece on the missing tier is refused by `backing_paths` later.)
    if let Some(m) = fs.tiers.iter().find(|t| t.missing) {
        for n in std::iter::once(ino).chain(target) {
            let node = tree.get(n)?;
            if node.kind() == Kind::Dir && !node.degraded_new {
                return Err(pieces::missing_err(&fs.tiers, m.index, "rename"));
            }
        }
    }
    if kind == Kind::Dir {
        // Refuse to move a folder into itself.
        let mut cur = newparent;
        while cur != ROOT_INO {
            if cur == ino {
                return Err(Error::Invalid("cannot move a folder into itself"));
            }
            cur = tree.get(cur)?.parent;
        }
    }
    Ok(())
}

/// Makes way for the source (of `kind`, with pieces on the tiers `src`) at the name of
/// `target`. A file being replaced moves to limbo first, whole, and is returned so that a
/// failed move can put it back: the kernel may still stat or open the old inode (rename(2)
/// never lets the name go missing), and pieces on tiers the source does not cover must not
/// survive under the name. A crash here loses the target, never the source. An (empty)
/// folder or other entry is removed from the tiers the source will not rename onto it.
fn clear_target(
    fs: &TierFs,
    tree: &mut Tree,
    target: u64,
    kind: Kind,
    src: &[usize],
) -> Result<Option<u64>> {
    if matches!(
        tree.nodes.get(&target).map(|n| &n.data),
        Some(NodeData::File(_))
    ) {
        backing::to_limbo(fs, tree, target)?;
        if let Some(n) = tree.nodes.get_mut(&target) {
            n.limbo = true;
        }
        return Ok(Some(target));
    }
    for (tier, p) in backing::backing_paths(fs, tree, target)? {
        if !src.contains(&tier) {
            let r = if kind == Kind::Dir {
                fs.tiers[tier].fs().rmdir(&p)
            } else {
                fs.tiers[tier].fs().unlink(&p)
            };
            if let Err(e) = r {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(backing::tier_err(fs, tier, "unlink", &p, e));
                }
            }
        }
    }
    Ok(None)
}

/// Renames the object's entry from `from_rel` to `to_rel` on each tier of `src`. On a
/// failure, what already moved is moved back and the replaced file (`target_in_limbo`)
/// returns under its name, so the tiers stay in agreement with the unchanged tree.
fn move_pieces(
    fs: &TierFs,
    tree: &mut Tree,
    kind: Kind,
    src: &[usize],
    from_rel: &Path,
    to_rel: &Path,
    target_in_limbo: Option<u64>,
) -> Result<()> {
    let mut done: Vec<usize> = Vec::new();
    for &t in src {
        let from = fs.tiers[t].path(from_rel);
        let to = fs.tiers[t].path(to_rel);
        let tfs = fs.tiers[t].fs();
        let mut r = tfs.rename(&from, &to, 0);
        if let Err(e) = &r {
            if e.kind() == std::io::ErrorKind::NotFound && kind == Kind::Dir && !tfs.exists(&from) {
                // The folder was missing on this tier: make it where it goes.
                r = tfs.mkdir_all(&to);
            }
        }
        if let Err(e) = r {
            for &u in &done {
                let _ = fs.tiers[u].fs().rename(
                    &fs.tiers[u].path(to_rel),
                    &fs.tiers[u].path(from_rel),
                    0,
                );
            }
            if let Some(old) = target_in_limbo {
                if let Ok(paths) = backing::backing_paths(fs, tree, old) {
                    for (u, l) in paths {
                        let _ = fs.tiers[u].fs().rename(&l, &fs.tiers[u].path(to_rel), 0);
                    }
                }
                if let Some(n) = tree.nodes.get_mut(&old) {
                    n.limbo = false;
                }
            }
            return Err(backing::tier_err(fs, t, "rename", &from, e));
        }
        done.push(t);
    }
    Ok(())
}

/// A file's path for messages, or its inode once it has none.
pub(crate) fn describe(fs: &TierFs, ino: u64) -> String {
    describe_in(&fs.tree.read(), ino)
}

pub(crate) fn describe_in(tree: &Tree, ino: u64) -> String {
    match tree.rel(ino) {
        Some(rel) => format!("/{}", crate::stats::escape_path(&rel)),
        None => format!("(inode {ino}, deleted)"),
    }
}
