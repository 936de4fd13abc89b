//! The inode tree: names, parents and what each inode is. Pure bookkeeping in memory,
//! rebuilt from the tiers at mount (`scan`); every change to it is made under the
//! filesystem's tree lock.

use crate::data::file::FileNode;
use crate::error::{Error, Result};
use crate::vfs::types::*;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

#[derive(Debug)]
pub(crate) enum NodeData {
    Dir {
        children: BTreeMap<OsString, u64>,
    },
    File(Arc<FileNode>),
    /// Symlinks and special files, which live on the first tier only.
    Other(Kind),
}

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) parent: u64,
    pub(crate) name: OsString,
    pub(crate) data: NodeData,
    /// Kernel references (lookups not yet forgotten). Atomic so that a lookup needs only
    /// the tree's read lock: lookups then never wait behind one another or a reader.
    pub(crate) nlookup: AtomicU64,
    /// Still reachable by name.
    pub(crate) linked: bool,
    /// For folders and special files: their attributes when they were removed, since an
    /// open handle may still fstat them and the backing object is gone.
    pub(crate) removed_attr: Option<Attr>,
    /// An unlinked file whose pieces wait in the tiers' limbo folders until the kernel
    /// forgets it.
    pub(crate) limbo: bool,
    /// A folder made while a tier was left out of a degraded mount: it has no copy there,
    /// so renaming it needs no missing tier.
    pub(crate) degraded_new: bool,
}

impl Node {
    pub(crate) fn kind(&self) -> Kind {
        match &self.data {
            NodeData::Dir { .. } => Kind::Dir,
            NodeData::File(_) => Kind::File,
            NodeData::Other(k) => *k,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Tree {
    pub(crate) nodes: HashMap<u64, Node>,
    pub(crate) next_ino: u64,
}

impl Tree {
    pub(crate) fn get(&self, ino: u64) -> Result<&Node> {
        self.nodes.get(&ino).ok_or(Error::NotFound)
    }

    pub(crate) fn children(&self, ino: u64) -> Result<&BTreeMap<OsString, u64>> {
        match &self.get(ino)?.data {
            NodeData::Dir { children } => Ok(children),
            _ => Err(Error::NotDir),
        }
    }

    pub(crate) fn children_mut(&mut self, ino: u64) -> Result<&mut BTreeMap<OsString, u64>> {
        match &mut self.nodes.get_mut(&ino).ok_or(Error::NotFound)?.data {
            NodeData::Dir { children } => Ok(children),
            _ => Err(Error::NotDir),
        }
    }

    pub(crate) fn child(&self, parent: u64, name: &OsStr) -> Result<u64> {
        self.children(parent)?
            .get(name)
            .copied()
            .ok_or(Error::NotFound)
    }

    /// The node's path relative to the mount root; `None` once it is unlinked.
    pub(crate) fn rel(&self, ino: u64) -> Option<PathBuf> {
        let mut parts = Vec::new();
        let mut cur = ino;
        while cur != ROOT_INO {
            let n = self.nodes.get(&cur)?;
            if !n.linked {
                return None;
            }
            parts.push(n.name.clone());
            cur = n.parent;
        }
        let mut p = PathBuf::new();
        for part in parts.iter().rev() {
            p.push(part);
        }
        Some(p)
    }

    pub(crate) fn insert(&mut self, parent: u64, name: &OsStr, data: NodeData) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(
            ino,
            Node {
                parent,
                name: name.to_os_string(),
                data,
                nlookup: AtomicU64::new(0),
                linked: true,
                removed_attr: None,
                limbo: false,
                degraded_new: false,
            },
        );
        if let Ok(c) = self.children_mut(parent) {
            c.insert(name.to_os_string(), ino);
        }
        ino
    }
}
