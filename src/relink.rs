//! A moved file's other names (hard links), and the journal that carries their re-linking
//! across a crash.
//!
//! Every move of a file's bytes (a re-layout, a lazy migration's commit, a move off a full
//! or failing tier) makes new pieces and renames them in under the file's primary name. A
//! file with several names then needs each other name's entries replaced by links of the
//! new pieces, and the old pieces gone: one rename or unlink per name and tier. A crash in
//! between would leave some names on the old pieces, a second file with older bytes where
//! there was one. So before its first rename the move writes a [`Journal`] into the
//! primary tier's `.tierfs-meta/` (synced): the names, the new layout's tiers, and the
//! backing inode of each old piece. It removes the journal once every name is done. A
//! journal found at mount (the scan, before it reads any folder) or by `tierfs fsck` is
//! carried out again with the same rule, [`plan`]; `tierfs export` refuses to copy while
//! one is there, as it only reads.
//!
//! [`plan`] checks every entry against the journal's inodes: a name's entry is replaced
//! only when it is an old piece (or missing), and removed only when it is an old piece on
//! a tier the new layout left, so a journal that outlived its move can change nothing
//! that is not the file's. When the primary name's pieces are not all new yet (the crash
//! came before or during their renames) the move never took effect: the names keep the
//! old pieces, and the mount's other rules settle the primary name, as for a file with
//! one name.

use crate::beneath::Beneath;
use crate::vfs::types::TMP_PREFIX;
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Journal files' names begin so, in a tier's `.tierfs-meta/` folder.
pub const JOURNAL_PREFIX: &str = "relink-";
const MAGIC: &str = "tierfs-relink v1";

/// A move's re-linking, as written before its first rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    /// The file's primary name, relative to the tiers' data folders.
    pub primary: PathBuf,
    /// Its other names.
    pub names: Vec<PathBuf>,
    /// The tiers of the new layout (each holds a new piece under `primary`).
    pub new: Vec<usize>,
    /// (tier, backing inode) of each old piece.
    pub old: Vec<(usize, u64)>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Journal {
    /// The text form: one field a line, paths hex-encoded (a name may hold any byte but
    /// `/` and NUL, newlines included).
    pub fn encode(&self) -> String {
        let mut s = format!(
            "{MAGIC}\nprimary {}\n",
            hex(self.primary.as_os_str().as_bytes())
        );
        for n in &self.names {
            s += &format!("name {}\n", hex(n.as_os_str().as_bytes()));
        }
        for t in &self.new {
            s += &format!("new {t}\n");
        }
        for (t, ino) in &self.old {
            s += &format!("old {t} {ino}\n");
        }
        s + "end\n"
    }

    /// Parses [`Journal::encode`]'s output; `None` for anything else, a torn write
    /// included (it ends with `end`).
    pub fn decode(s: &str) -> Option<Journal> {
        let mut lines = s.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let path = |v: &str| Some(PathBuf::from(OsString::from_vec(unhex(v)?)));
        let (mut primary, mut names, mut new, mut old) = (None, vec![], vec![], vec![]);
        for l in lines {
            let mut w = l.split(' ');
            match (w.next()?, w.next(), w.next()) {
                ("primary", Some(v), None) => primary = Some(path(v)?),
                ("name", Some(v), None) => names.push(path(v)?),
                ("new", Some(t), None) => new.push(t.parse().ok()?),
                ("old", Some(t), Some(i)) => old.push((t.parse().ok()?, i.parse().ok()?)),
                ("end", None, None) => {
                    return Some(Journal {
                        primary: primary?,
                        names,
                        new,
                        old,
                    })
                }
                _ => return None,
            }
        }
        None
    }

    fn old_ino(&self, t: usize) -> Option<u64> {
        self.old.iter().find(|(u, _)| *u == t).map(|(_, i)| *i)
    }
}

/// Writes `j` as `meta/NAME` (synced, and the folder too); returns its path.
pub fn write(meta: &Path, name: &str, j: &Journal) -> io::Result<PathBuf> {
    let p = meta.join(format!("{JOURNAL_PREFIX}{name}"));
    let tmp = meta.join(format!(".{JOURNAL_PREFIX}{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(j.encode().as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &p)?;
    std::fs::File::open(meta)?.sync_all()?;
    Ok(p)
}

/// The journals in `meta` (a tier's `.tierfs-meta/`): (path, journal, or `None` when
/// it does not parse).
pub fn list(meta: &Path) -> Vec<(PathBuf, Option<Journal>)> {
    let Ok(rd) = std::fs::read_dir(meta) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, Option<Journal>)> = rd
        .flatten()
        .filter(|e| {
            e.file_name()
                .as_bytes()
                .starts_with(JOURNAL_PREFIX.as_bytes())
        })
        .map(|e| {
            let j = std::fs::read_to_string(e.path())
                .ok()
                .and_then(|s| Journal::decode(&s));
            (e.path(), j)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// One change [`plan`] asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Make `names[name]`'s entry on `tier` a link of the primary's (replacing an old
    /// piece, or where it has none).
    Link { name: usize, tier: usize },
    /// Remove `names[name]`'s old piece on `tier`, which the new layout left.
    Unlink { name: usize, tier: usize },
    /// Remove the primary name's old piece on `tier`, which the new layout left.
    UnlinkPrimary { tier: usize },
}

/// What [`plan`] asks for: the steps, and the entries left alone as not the file's
/// (name, tier).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub foreign: Vec<(usize, usize)>,
}

/// What a journal's names hold now: `ino(name, tier)` gives the backing inode of a
/// name's entry on a tier, `None` where it has none; name `None` is the primary.
/// `None` when the move never took effect.
pub fn plan(j: &Journal, ino: impl Fn(Option<usize>, usize) -> Option<u64>) -> Option<Plan> {
    // The primary's new pieces must all be in place, or the move never took effect.
    for &t in &j.new {
        let p = ino(None, t)?;
        if Some(p) == j.old_ino(t) {
            return None;
        }
    }
    let mut steps = Vec::new();
    let mut foreign = Vec::new();
    for n in 0..j.names.len() {
        for &t in &j.new {
            match ino(Some(n), t) {
                Some(i) if Some(i) == ino(None, t) => {}
                None => steps.push(Step::Link { name: n, tier: t }),
                Some(i) if Some(i) == j.old_ino(t) => steps.push(Step::Link { name: n, tier: t }),
                Some(_) => foreign.push((n, t)),
            }
        }
        for &(t, old) in &j.old {
            if !j.new.contains(&t) && ino(Some(n), t) == Some(old) {
                steps.push(Step::Unlink { name: n, tier: t });
            }
        }
    }
    for &(t, old) in &j.old {
        if !j.new.contains(&t) && ino(None, t) == Some(old) {
            steps.push(Step::UnlinkPrimary { tier: t });
        }
    }
    Some(Plan { steps, foreign })
}

/// Carries `j` out on the tiers `on(t)` gives (a tier's calls and its data folder):
/// [`plan`], then each step. `Ok(None)` when the move never took effect; else the
/// steps done and the entries left alone. Stops at the first failure.
pub fn carry_out<'a>(
    j: &Journal,
    on: impl Fn(usize) -> (Beneath<'a>, PathBuf),
) -> io::Result<Option<Plan>> {
    let entry = |name: Option<usize>, t: usize| -> PathBuf {
        let rel = name.map_or(&j.primary, |n| &j.names[n]);
        on(t).1.join(rel)
    };
    let ino = |name: Option<usize>, t: usize| -> Option<u64> {
        on(t).0.stat(&entry(name, t)).ok().map(|m| m.ino())
    };
    let Some(p) = plan(j, ino) else {
        return Ok(None);
    };
    for s in &p.steps {
        match *s {
            Step::Link { name, tier } => {
                let b = on(tier).0;
                let to = entry(Some(name), tier);
                // A name the scan removes should this process die holding it.
                let tmp = to.with_file_name(format!("{TMP_PREFIX}relink-{}", std::process::id()));
                let _ = b.unlink(&tmp);
                if let Err(e) = b.link(&entry(None, tier), &tmp) {
                    if e.kind() != io::ErrorKind::NotFound {
                        return Err(e);
                    }
                    // The name's folder is missing on this tier (a failed mirror).
                    if let Some(dir) = to.parent() {
                        b.mkdir_all(dir)?;
                    }
                    b.link(&entry(None, tier), &tmp)?;
                }
                // Replaces an old piece in one step: the name is never without an entry.
                if let Err(e) = b.rename(&tmp, &to, 0) {
                    let _ = b.unlink(&tmp);
                    return Err(e);
                }
            }
            Step::Unlink { name, tier } => on(tier).0.unlink(&entry(Some(name), tier))?,
            Step::UnlinkPrimary { tier } => on(tier).0.unlink(&entry(None, tier))?,
        }
    }
    Ok(Some(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn journal() -> Journal {
        Journal {
            primary: "d/a".into(),
            names: vec![
                "b".into(),
                PathBuf::from(OsString::from_vec(b"c\nx\xff".to_vec())),
            ],
            new: vec![1, 2],
            old: vec![(0, 10), (1, 11)],
        }
    }

    #[test]
    fn the_journal_round_trips_and_a_torn_one_is_refused() {
        let j = journal();
        let s = j.encode();
        assert_eq!(Journal::decode(&s), Some(j));
        let torn = &s[..s.len() - 4];
        assert_eq!(Journal::decode(torn), None);
        assert_eq!(Journal::decode("garbage"), None);
        assert_eq!(Journal::decode(&s.replace("new 1", "new x")), None);
    }

    fn plan_of(j: &Journal, state: &HashMap<(Option<usize>, usize), u64>) -> Option<Plan> {
        plan(j, |n, t| state.get(&(n, t)).copied())
    }

    #[test]
    fn a_move_cut_short_after_the_primary_relinks_every_name() {
        let j = journal();
        // Primary: new pieces 21 (tier 1), 22 (tier 2); its old piece on tier 0 is left.
        // Name b: done on tier 1, old on tier 0; name c: old pieces only.
        let state: HashMap<_, _> = [
            ((None, 0), 10),
            ((None, 1), 21),
            ((None, 2), 22),
            ((Some(0), 0), 10),
            ((Some(0), 1), 21),
            ((Some(1), 0), 10),
            ((Some(1), 1), 11),
        ]
        .into();
        let Plan { steps, foreign } = plan_of(&j, &state).unwrap();
        assert_eq!(
            steps,
            vec![
                Step::Link { name: 0, tier: 2 },
                Step::Unlink { name: 0, tier: 0 },
                Step::Link { name: 1, tier: 1 },
                Step::Link { name: 1, tier: 2 },
                Step::Unlink { name: 1, tier: 0 },
                Step::UnlinkPrimary { tier: 0 },
            ]
        );
        assert!(foreign.is_empty());
    }

    #[test]
    fn nothing_is_done_before_the_primary_is_switched_nor_to_others_entries() {
        let j = journal();
        // The primary still has its old piece on tier 1: the move did not take effect.
        let state: HashMap<_, _> = [((None, 1), 11), ((None, 2), 22)].into();
        assert_eq!(plan_of(&j, &state), None);
        // Missing on a new tier: not switched either.
        let state: HashMap<_, _> = [((None, 1), 21)].into();
        assert_eq!(plan_of(&j, &state), None);
        // Done, and a stale journal: entries that are neither old nor new are left.
        let state: HashMap<_, _> = [
            ((None, 1), 21),
            ((None, 2), 22),
            ((Some(0), 1), 99),
            ((Some(0), 2), 22),
            ((Some(0), 0), 98),
            ((Some(1), 1), 21),
            ((Some(1), 2), 22),
        ]
        .into();
        let Plan { steps, foreign } = plan_of(&j, &state).unwrap();
        assert!(steps.is_empty(), "{steps:?}");
        assert_eq!(foreign, vec![(0, 1)]);
    }
}
