//! The inode tree: names, parents and what each inode is. Pure bookkeeping in memory,
//! rebuilt from the tiers at mount (`scan`); every change to it is made under the
//! filesystem's tree lock.
//!
//! A node that is not a folder may have several names (hard links): its *primary* name
//! (`parent`, `name`), through which [`Tree::rel`] reaches its pieces on the tiers, and
//! the others in `links`. Every name has its own backing entries on the same backing
//! inodes, so any of them reaches the same bytes; the primary one is only the one the
//! core uses. Removing the primary name promotes the next one.

use crate::error::{Error, Result};
use crate::inodes::file::FileNode;
use crate::inodes::types::*;
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
    /// The node's other names (hard links), in the order they were made.
    pub(crate) links: Vec<(u64, OsString)>,
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
    /// The root folder as a mount starts with it: its own parent, looked up once (the
    /// kernel's reference), with no children yet.
    pub(crate) fn root() -> Node {
        Node {
            parent: ROOT_INO,
            name: OsString::new(),
            links: Vec::new(),
            data: NodeData::Dir {
                children: BTreeMap::new(),
            },
            nlookup: AtomicU64::new(1),
            linked: true,
            removed_attr: None,
            limbo: false,
            degraded_new: false,
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        match &self.data {
            NodeData::Dir { .. } => Kind::Dir,
            NodeData::File(_) => Kind::File,
            NodeData::Other(k) => *k,
        }
    }

    /// How many names the node has (0 once the last one is removed).
    pub(crate) fn names(&self) -> usize {
        if self.linked {
            1 + self.links.len()
        } else {
            0
        }
    }

    /// Whether (`parent`, `name`) is the node's primary name.
    pub(crate) fn is_primary(&self, parent: u64, name: &OsStr) -> bool {
        self.parent == parent && self.name == name
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

    /// The path of name `name` in folder `parent`, relative to the mount root.
    pub(crate) fn name_rel(&self, parent: u64, name: &OsStr) -> Option<PathBuf> {
        Some(self.rel(parent)?.join(name))
    }

    /// Gives node `ino` (linked, not a folder) another name in folder `parent`. The
    /// caller has checked that the name is free.
    pub(crate) fn add_name(&mut self, ino: u64, parent: u64, name: &OsStr) -> Result<()> {
        let node = self.nodes.get_mut(&ino).ok_or(Error::NotFound)?;
        node.links.push((parent, name.to_os_string()));
        self.children_mut(parent)?.insert(name.to_os_string(), ino);
        Ok(())
    }

    /// Takes name (`parent`, `name`) away from node `ino`, which keeps at least one
    /// other: the primary one goes to the oldest other name.
    pub(crate) fn remove_name(&mut self, ino: u64, parent: u64, name: &OsStr) -> Result<()> {
        let node = self.nodes.get_mut(&ino).ok_or(Error::NotFound)?;
        if node.is_primary(parent, name) {
            if node.links.is_empty() {
                return Err(Error::Invalid("the last name of a node"));
            }
            let (p, n) = node.links.remove(0);
            node.parent = p;
            node.name = n;
        } else {
            let i = node
                .links
                .iter()
                .position(|(p, n)| *p == parent && n == name)
                .ok_or(Error::NotFound)?;
            node.links.remove(i);
        }
        if let Ok(c) = self.children_mut(parent) {
            c.remove(name);
        }
        Ok(())
    }

    /// Renames name (`parent`, `name`) of node `ino` to (`newparent`, `newname`) in the
    /// node's names (the folders' children are the caller's).
    pub(crate) fn rename_name(
        &mut self,
        ino: u64,
        (parent, name): (u64, &OsStr),
        (newparent, newname): (u64, &OsStr),
    ) -> Result<()> {
        let node = self.nodes.get_mut(&ino).ok_or(Error::NotFound)?;
        if node.is_primary(parent, name) {
            node.parent = newparent;
            node.name = newname.to_os_string();
            return Ok(());
        }
        let l = node
            .links
            .iter_mut()
            .find(|(p, n)| *p == parent && n == name)
            .ok_or(Error::NotFound)?;
        *l = (newparent, newname.to_os_string());
        Ok(())
    }

    pub(crate) fn insert(&mut self, parent: u64, name: &OsStr, data: NodeData) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(
            ino,
            Node {
                parent,
                name: name.to_os_string(),
                links: Vec::new(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tree_with_dirs() -> (Tree, u64, u64) {
        let mut nodes = HashMap::new();
        nodes.insert(ROOT_INO, Node::root());
        let mut t = Tree {
            nodes,
            next_ino: FIRST_INO,
        };
        let dir = |t: &mut Tree, name: &str| {
            let children = BTreeMap::new();
            t.insert(ROOT_INO, OsStr::new(name), NodeData::Dir { children })
        };
        let (a, b) = (dir(&mut t, "a"), dir(&mut t, "b"));
        (t, a, b)
    }

    #[test]
    fn a_node_keeps_its_names_and_promotes_one_when_the_primary_goes() {
        let (mut t, a, b) = tree_with_dirs();
        let f = t.insert(a, OsStr::new("f"), NodeData::Other(Kind::Fifo));
        assert_eq!(t.get(f).unwrap().names(), 1);
        t.add_name(f, b, OsStr::new("g")).unwrap();
        t.add_name(f, a, OsStr::new("h")).unwrap();
        assert_eq!(t.get(f).unwrap().names(), 3);
        // Every name looks up the one node; the primary name gives the path.
        assert_eq!(t.child(b, OsStr::new("g")).unwrap(), f);
        assert_eq!(t.child(a, OsStr::new("h")).unwrap(), f);
        assert_eq!(t.rel(f).unwrap(), PathBuf::from("a/f"));
        assert_eq!(
            t.name_rel(b, OsStr::new("g")).unwrap(),
            PathBuf::from("b/g")
        );
        // The primary name goes: the oldest other one takes its place.
        t.remove_name(f, a, OsStr::new("f")).unwrap();
        assert_eq!(t.rel(f).unwrap(), PathBuf::from("b/g"));
        assert!(t.child(a, OsStr::new("f")).is_err());
        assert_eq!(t.get(f).unwrap().names(), 2);
        // A name that is not the primary is renamed in place.
        t.rename_name(f, (a, OsStr::new("h")), (b, OsStr::new("k")))
            .unwrap();
        assert_eq!(t.get(f).unwrap().links, vec![(b, OsString::from("k"))]);
        t.rename_name(f, (b, OsStr::new("g")), (a, OsStr::new("p")))
            .unwrap();
        assert_eq!(t.rel(f).unwrap(), PathBuf::from("a/p"));
        // Not a name of the node; and its last name is not removed here (`detach` is).
        assert!(t.remove_name(f, a, OsStr::new("nope")).is_err());
        t.remove_name(f, b, OsStr::new("k")).unwrap();
        assert!(t.remove_name(f, a, OsStr::new("p")).is_err());
        assert_eq!(t.get(f).unwrap().names(), 1);
    }
}
