//! Hard links: a file, symlink or special file with several names.
//!
//! Every name has its own entries on the tiers, hard links of the same backing inodes: a
//! striped file's name has a link of each of its pieces, each on the piece's tier, so any
//! name reaches the same bytes, mode, owner, times and xattrs, and the tiers alone say
//! which names are one file (the mount-time scan groups them by backing inode, see
//! [`crate::tier::resolve::plan_links`]). The tree keeps one node per file with a primary name
//! and the others ([`crate::inodes::tree::Node::links`]).
//!
//! A name is added or removed one tier at a time, in tier order; a failure undoes the
//! tiers already done. A crash in between leaves a name whose pieces are a strict subset
//! of another name's, which the resolver removes (its backing inodes live on under the
//! other name; the interrupted link or unlink was never acknowledged).
//!
//! A file with several names moves between tiers like any other: the move renames its
//! new pieces in under the primary name, then makes every other name's entries links of
//! them, with a journal that lets the mount or `tierfs fsck` finish after a crash
//! ([`crate::relink`]).

use crate::data::migrate;
use crate::error::{Error, Result};
use crate::inodes::tree::{NodeData, Tree};
use crate::inodes::types::*;
use crate::vfs::attr;
use crate::vfs::backing;
use crate::vfs::state::TierFs;
use std::ffi::OsStr;
use std::path::PathBuf;

/// link(2): gives node `ino` the name `newname` in folder `newparent`.
pub(crate) fn link(fs: &TierFs, ino: u64, newparent: u64, newname: &OsStr) -> Result<Attr> {
    if Virtual::from_ino(ino).is_some() || ino == ROOT_INO {
        return Err(Error::NotPermitted(
            "hard links to the stats files or the root",
        ));
    }
    attr::check_writable_parent(fs, newparent, newname)?;
    let mut tree = fs.tree.write();
    // In the order Linux checks: an existing name before the kind of the source.
    if tree.children(newparent)?.contains_key(newname) {
        return Err(Error::Exists);
    }
    let node = tree.get(ino)?;
    if node.kind() == Kind::Dir {
        return Err(Error::NotPermitted("hard links to folders"));
    }
    if !node.linked {
        return Err(Error::NotFound);
    }
    if let NodeData::File(f) = &node.data {
        let f = f.clone();
        let mut st = f.state.write();
        // A move under way is finished first, so the new name is made from the pieces
        // the file keeps (a move's commit would re-link it too, but a crash before then
        // would leave the name on pieces no journal names).
        if st.migration.is_some() {
            migrate::commit_migration_locked(&fs.parts(), &tree, ino, &f, &mut st)?;
        }
    }
    add_name(fs, &mut tree, ino, newparent, newname)?;
    attr::remember(fs, &tree, ino);
    attr::attr_locked(fs, &tree, ino)
}

/// Links every backing entry of node `ino` (linked, not a folder) at the name
/// (`parent`, `name`), in tier order, and adds the name to the tree. On a failure the
/// tiers already linked are undone.
pub(crate) fn add_name(
    fs: &TierFs,
    tree: &mut Tree,
    ino: u64,
    parent: u64,
    name: &OsStr,
) -> Result<()> {
    let rel = tree.name_rel(parent, name).ok_or(Error::NotFound)?;
    let mut made: Vec<(usize, PathBuf)> = Vec::new();
    for (t, from) in backing::backing_paths(fs, tree, ino)? {
        let tfs = fs.tiers[t].fs();
        let to = fs.tiers[t].path(&rel);
        let mut r = tfs.link(&from, &to);
        if let Err(e) = &r {
            if e.kind() == std::io::ErrorKind::NotFound && tfs.exists(&from) {
                // The folder is missing on this tier (a failed mirror): make it.
                if let Some(dir) = to.parent() {
                    let _ = tfs.mkdir_all(dir);
                }
                r = tfs.link(&from, &to);
            }
        }
        if let Err(e) = r {
            for (u, p) in made {
                let _ = fs.tiers[u].fs().unlink(&p);
            }
            return Err(backing::tier_err(fs, t, "link", &to, e));
        }
        made.push((t, to));
    }
    tree.add_name(ino, parent, name)
}

/// Removes the name (`parent`, `name`) of node `ino`, which has others: its backing
/// entries, in tier order, then the name in the tree. The node, its pieces under the
/// other names and its open handles are untouched. On a failure the tiers already done
/// are linked again from another name.
pub(crate) fn remove_name(
    fs: &TierFs,
    tree: &mut Tree,
    ino: u64,
    parent: u64,
    name: &OsStr,
) -> Result<()> {
    // A failed file's names may disagree on the tiers (a move whose re-linking failed):
    // none is removed until the next mount settles them.
    crate::vfs::contain::check_failed(fs, ino)?;
    let node = tree.get(ino)?;
    let (other_parent, other_name) = if node.is_primary(parent, name) {
        node.links.first().cloned().ok_or(Error::NotFound)?
    } else {
        (node.parent, node.name.clone())
    };
    let rel = tree.name_rel(parent, name).ok_or(Error::NotFound)?;
    let other = tree
        .name_rel(other_parent, &other_name)
        .ok_or(Error::NotFound)?;
    let tiers: Vec<usize> = backing::backing_paths(fs, tree, ino)?
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    let mut done: Vec<usize> = Vec::new();
    for t in tiers {
        let p = fs.tiers[t].path(&rel);
        match fs.tiers[t].fs().unlink(&p) {
            Ok(()) => done.push(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                for u in done {
                    let tier = &fs.tiers[u];
                    let _ = tier.fs().link(&tier.path(&other), &tier.path(&rel));
                }
                return Err(backing::tier_err(fs, t, "unlink", &p, e));
            }
        }
    }
    tree.remove_name(ino, parent, name)
}
