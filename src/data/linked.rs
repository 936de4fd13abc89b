//! The part of a move that belongs to a file with several names (hard links): before the
//! move renames anything, a link of each new piece beside every other name and the
//! journal ([`stage`]); after the primary name's renames, each of those links renamed over
//! its name, the folders synced, the old entries removed and the journal gone
//! ([`install`]). The rule and the journal's format, which the mount's scan and `fsck`
//! share, are [`crate::relink`]'s.

use crate::data::Parts;
use crate::error::Result;
use crate::inodes::file::Journaled;
use crate::inodes::pieces;
use crate::inodes::tree::Tree;
use crate::layout::FileLayout;
use crate::relink::{self, Journal};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A move's other names, made ready by [`stage`].
pub(crate) struct Staged {
    journal: Journal,
    path: PathBuf,
    /// (tier, temporary link of the new piece, the name's entry it replaces).
    links: Vec<(usize, PathBuf, PathBuf)>,
}

/// For a file whose primary name is `primary` and that has others: links each new piece
/// of layout `new` (`piece(t)`: the move's temporary on tier `t`) under a temporary name
/// beside every other name, then writes
/// the journal on the new primary tier. A failure undoes what was made and leaves the
/// file as it was. `None` for a file with one name.
pub(crate) fn stage(
    fs: &Parts<'_>,
    tree: &Tree,
    ino: u64,
    primary: &Path,
    old: &FileLayout,
    new: &FileLayout,
    piece: impl Fn(usize) -> PathBuf,
) -> Result<Option<Staged>> {
    let Some(node) = tree.nodes.get(&ino) else {
        return Ok(None);
    };
    let names: Vec<PathBuf> = node
        .links
        .iter()
        .filter_map(|(parent, name)| tree.name_rel(*parent, name))
        .collect();
    if names.is_empty() {
        return Ok(None);
    }
    let mut links = Vec::new();
    let r = (|| -> Result<Journal> {
        let (mut new_inos, mut pending) = (Vec::new(), Vec::new());
        for t in new.tiers() {
            let piece = piece(t);
            pending.push((t, from_root(fs, t, &piece)));
            let b = fs.tiers[t].fs();
            let i = b
                .stat(&piece)
                .map_err(|e| pieces::tier_err(fs.tiers, t, "stat", &piece, e))?
                .ino();
            new_inos.push((t, i));
            for name in &names {
                let to = fs.tiers[t].path(name);
                let tmp = relink::link_as_temp(b, &piece, &to)
                    .map_err(|e| pieces::tier_err(fs.tiers, t, "link", &to, e))?;
                links.push((t, tmp, to));
            }
        }
        let mut old_inos = Vec::new();
        for t in old.tiers() {
            let p = fs.tiers[t].path(primary);
            let i = fs.tiers[t]
                .fs()
                .stat(&p)
                .map_err(|e| pieces::tier_err(fs.tiers, t, "stat", &p, e))?
                .ino();
            old_inos.push((t, i));
        }
        Ok(Journal {
            primary: primary.to_path_buf(),
            names: names.clone(),
            new: new_inos,
            old: old_inos,
            keeps: false,
            pending,
        })
    })();
    let written = r.and_then(|journal| {
        let t = new.primary();
        let meta = fs.tiers[t].root.join(crate::tier::META_DIR);
        let stamp = format!("{ino}-{:016x}", crate::layout::new_file_id());
        let path = relink::write(&meta, &stamp, &journal)
            .map_err(|e| pieces::tier_err(fs.tiers, t, "write a re-link journal in", &meta, e))?;
        Ok((journal, path))
    });
    match written {
        Ok((journal, path)) => Ok(Some(Staged {
            journal,
            path,
            links,
        })),
        Err(e) => {
            drop_links(fs, &links);
            Err(e)
        }
    }
}

/// A move's temporary on tier `t` as a journal names it: from the tier's folder.
pub(crate) fn from_root(fs: &Parts<'_>, t: usize, p: &Path) -> PathBuf {
    p.strip_prefix(&fs.tiers[t].root).unwrap_or(p).to_path_buf()
}

/// Undoes [`stage`] when the move stops before any of the primary name's pieces was
/// renamed: the staged links and the journal go, and the file is as it was.
pub(crate) fn abandon(fs: &Parts<'_>, s: Staged) {
    drop_links(fs, &s.links);
    if let Err(e) = std::fs::remove_file(&s.path) {
        log::warn!(
            "cannot remove the re-link journal {}: {e}",
            s.path.display()
        );
    }
}

/// When a move stops after some of the primary name's pieces were renamed in: the file
/// is torn on the tiers, and its names may disagree. The inode fails until the next
/// mount, whose scan undoes the move by the journal: the other names, which no step had
/// touched yet, give the primary its old pieces back ([`crate::relink`]).
pub(crate) fn torn(fs: &Parts<'_>, ino: u64, s: Staged) {
    fs.contain.mark_journaled(ino);
    let why = format!(
        "its move stopped between its own pieces; the journal {} is settled at the next \
         mount",
        s.path.display()
    );
    drop_links_and_fail(fs, ino, &s.links, &why);
}

/// After the primary name's pieces are renamed in: each staged link renamed over its
/// name, the folders synced (so no removal below can reach the disk before the renames),
/// and each name's old entries on tiers the move left removed. Returns the journal, for
/// the caller to remove once the primary's old pieces are gone too. After a failure the
/// journal stays and the inode fails until the next mount, whose scan settles the journal
/// (until then no request can act on names the tiers do not agree on); the primary's old
/// pieces it names are then spared, as that mount may need them.
pub(crate) fn install(fs: &Parts<'_>, ino: u64, s: Staged) -> Journaled {
    let j = &s.journal;
    let r = (|| -> std::io::Result<()> {
        for (t, tmp, to) in &s.links {
            fs.tiers[*t].fs().rename(tmp, to, 0)?;
        }
        let mut dirs: Vec<(usize, PathBuf)> = s
            .links
            .iter()
            .map(|(t, _, to)| (*t, to.parent().unwrap_or(Path::new("")).to_path_buf()))
            .chain(j.new.iter().map(|(t, _)| {
                let p = fs.tiers[*t].path(&j.primary);
                (*t, p.parent().unwrap_or(Path::new("")).to_path_buf())
            }))
            .collect();
        dirs.sort();
        dirs.dedup();
        for (t, d) in dirs {
            fs.tiers[t].fs().sync_dir(&d)?;
        }
        for name in &j.names {
            for &(t, old) in &j.old {
                if j.new.iter().any(|(u, _)| *u == t) {
                    continue;
                }
                let p = fs.tiers[t].path(name);
                if fs.tiers[t].fs().stat(&p).is_ok_and(|m| m.ino() == old) {
                    fs.tiers[t].fs().unlink(&p)?;
                }
            }
        }
        Ok(())
    })();
    match r {
        Ok(()) => Journaled {
            done: Some(s.path),
            spare: Vec::new(),
        },
        Err(e) => {
            let why = format!(
                "re-linking its other names after a move failed: {e}; the journal {} is \
                 finished at the next mount",
                s.path.display()
            );
            drop_links_and_fail(fs, ino, &s.links, &why);
            let new: Vec<usize> = j.new.iter().map(|&(t, _)| t).collect();
            Journaled {
                done: None,
                spare: j
                    .old
                    .iter()
                    .map(|&(t, _)| t)
                    .filter(|t| !new.contains(t))
                    .collect(),
            }
        }
    }
}

/// Removes a move's staged links that will not be renamed over their names (what was
/// renamed already is gone from the temporary name, and the unlink finds nothing).
fn drop_links(fs: &Parts<'_>, links: &[(usize, PathBuf, PathBuf)]) {
    for (t, tmp, _) in links {
        let _ = fs.tiers[*t].fs().unlink(tmp);
    }
}

/// A move stopped once the tiers may disagree about the file's names: its staged links go
/// and the inode fails until the next mount settles its journal (`why` says which step).
fn drop_links_and_fail(fs: &Parts<'_>, ino: u64, links: &[(usize, PathBuf, PathBuf)], why: &str) {
    drop_links(fs, links);
    fs.contain.mark_torn(ino, why);
}
