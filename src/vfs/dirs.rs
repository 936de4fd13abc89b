//! Directory handles: listing a folder (merged over the tiers by the tree) and fsync of
//! a folder.

use crate::error::{Error, Result};
use crate::inodes::types::Handle;
use crate::inodes::types::*;
use crate::vfs::state::TierFs;
use crate::vfs::{backing, handles};

use std::sync::Arc;

pub(crate) fn opendir(fs: &TierFs, ino: u64) -> Result<u64> {
    let entries = if ino == Virtual::Dir.ino() {
        let mut v = vec![
            DirEntry {
                ino,
                kind: Kind::Dir,
                name: ".".into(),
            },
            DirEntry {
                ino: ROOT_INO,
                kind: Kind::Dir,
                name: "..".into(),
            },
        ];
        v.extend(Virtual::FILES.iter().map(|f| DirEntry {
            ino: f.ino(),
            kind: Kind::File,
            name: f.name().into(),
        }));
        v
    } else {
        let tree = fs.tree.read();
        let node = tree.get(ino)?;
        let children = tree.children(ino)?;
        let mut v = Vec::with_capacity(children.len() + 3);
        v.push(DirEntry {
            ino,
            kind: Kind::Dir,
            name: ".".into(),
        });
        v.push(DirEntry {
            ino: node.parent,
            kind: Kind::Dir,
            name: "..".into(),
        });
        if ino == ROOT_INO {
            v.push(DirEntry {
                ino: Virtual::Dir.ino(),
                kind: Kind::Dir,
                name: fs.stats_dir.clone(),
            });
        }
        for (name, c) in children {
            if let Ok(n) = tree.get(*c) {
                v.push(DirEntry {
                    ino: *c,
                    kind: n.kind(),
                    name: name.clone(),
                });
            }
        }
        v
    };
    Ok(handles::new_fh(fs, Handle::Dir(Arc::new(entries))))
}

pub(crate) fn readdir(fs: &TierFs, fh: u64, offset: u64) -> Result<Arc<Vec<DirEntry>>> {
    match handles::handle(fs, fh)? {
        Handle::Dir(e) => {
            let _ = offset;
            Ok(e)
        }
        _ => Err(Error::NotDir),
    }
}

pub(crate) fn releasedir(fs: &TierFs, fh: u64) {
    fs.handles.lock().remove(&fh);
}

pub(crate) fn fsyncdir(fs: &TierFs, ino: u64) -> Result<()> {
    if Virtual::from_ino(ino).is_some() {
        return Ok(());
    }
    let tree = fs.tree.read();
    if tree.get(ino).is_ok_and(|n| !n.linked) {
        // A removed folder that is still open: nothing of it is left to sync.
        return Ok(());
    }
    for (t, p) in backing::backing_paths(fs, &tree, ino)? {
        fs.tiers[t]
            .fs()
            .open(&p, libc::O_RDONLY, 0)
            .and_then(|d| d.sync_all())
            .map_err(|e| backing::tier_err(fs, t, "fsync", &p, e))?;
    }
    Ok(())
}
