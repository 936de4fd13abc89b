//! A re-link journal: its text format, and its file in a tier's `.tierfs-meta/` folder
//! (written and synced, read, listed, set aside as `*.unfinished`), with the temporaries
//! of journal writes a crash cut short.
//!
//! Kept apart from the rule that settles a journal (the parent module): this part says
//! only what a journal holds and where it lies, and is all that the tools that read
//! journals without carrying them out (`tierfs export`, `fsck`'s listing) need. It knows
//! nothing of tiers or backing calls; the rule reads journals through it.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Journal files' names begin so, in a tier's `.tierfs-meta/` folder.
pub const JOURNAL_PREFIX: &str = "relink-";
pub(super) const MAGIC: &str = "tierfs-relink v1";

/// A move's re-linking, as written before its first rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    /// The file's primary name, relative to the tiers' data folders.
    pub primary: PathBuf,
    /// Its other names.
    pub names: Vec<PathBuf>,
    /// (tier, backing inode) of each new piece.
    pub new: Vec<(usize, u64)>,
    /// (tier, backing inode) of each old piece.
    pub old: Vec<(usize, u64)>,
    /// `names` are not the user's but the move's keeps: second names (temporaries beside
    /// the primary) of the old entries its renames replace, for a file with one name. On
    /// every verdict they are removed, never re-linked; a torn move is undone from them.
    pub keeps: bool,
    /// (tier, path from the tier's folder) of each new piece's temporary (in limbo): what
    /// finishes a move torn between the primary's renames. Empty in older journals.
    pub pending: Vec<(usize, PathBuf)>,
}

pub(super) fn hex(b: &[u8]) -> String {
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
        if self.keeps {
            s += "keeps\n";
        }
        for n in &self.names {
            s += &format!("name {}\n", hex(n.as_os_str().as_bytes()));
        }
        for (t, ino) in &self.new {
            s += &format!("new {t} {ino}\n");
        }
        for (t, ino) in &self.old {
            s += &format!("old {t} {ino}\n");
        }
        for (t, p) in &self.pending {
            s += &format!("pending {t} {}\n", hex(p.as_os_str().as_bytes()));
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
        let (mut keeps, mut pending) = (false, vec![]);
        for l in lines {
            let mut w = l.split(' ');
            match (w.next()?, w.next(), w.next()) {
                ("primary", Some(v), None) => primary = Some(path(v)?),
                ("keeps", None, None) => keeps = true,
                ("name", Some(v), None) => names.push(path(v)?),
                ("new", Some(t), Some(i)) => new.push((t.parse().ok()?, i.parse().ok()?)),
                ("old", Some(t), Some(i)) => old.push((t.parse().ok()?, i.parse().ok()?)),
                ("pending", Some(t), Some(p)) => pending.push((t.parse().ok()?, path(p)?)),
                ("end", None, None) => {
                    return Some(Journal {
                        primary: primary?,
                        names,
                        new,
                        old,
                        keeps,
                        pending,
                    })
                }
                _ => return None,
            }
        }
        None
    }

    pub(super) fn old_ino(&self, t: usize) -> Option<u64> {
        self.old.iter().find(|(u, _)| *u == t).map(|(_, i)| *i)
    }

    pub(super) fn new_ino(&self, t: usize) -> Option<u64> {
        self.new.iter().find(|(u, _)| *u == t).map(|(_, i)| *i)
    }

    /// The new piece's temporary on tier `t`, from the tier's folder.
    pub fn pending_on(&self, t: usize) -> Option<&Path> {
        self.pending
            .iter()
            .find(|(u, _)| *u == t)
            .map(|(_, p)| p.as_path())
    }

    /// Every tier it names.
    pub fn tiers(&self) -> Vec<usize> {
        self.new.iter().chain(&self.old).map(|(t, _)| *t).collect()
    }
}

/// Writes `j` as `meta/NAME` (synced, and the folder too); returns its path.
pub fn write(meta: &Path, name: &str, j: &Journal) -> io::Result<PathBuf> {
    let p = meta.join(format!("{JOURNAL_PREFIX}{name}"));
    let tmp = meta.join(format!(".{JOURNAL_PREFIX}{name}.tmp"));
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(j.encode().as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &p)?;
        std::fs::File::open(meta)?.sync_all()
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_file(&p);
        return Err(e);
    }
    Ok(p)
}

/// Removes the temporaries of journal writes a crash cut short in `meta` (see [`write()`]):
/// a move does nothing on the tiers before its journal is in place, so such a file
/// describes nothing that happened. Only for a mount's scan, while no move runs. Returns
/// the paths removed.
pub fn remove_torn_writes(meta: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(meta) else {
        return Vec::new();
    };
    let torn =
        |n: &[u8]| n.starts_with(format!(".{JOURNAL_PREFIX}").as_bytes()) && n.ends_with(b".tmp");
    rd.flatten()
        .filter(|e| torn(e.file_name().as_bytes()))
        .map(|e| e.path())
        .filter(|p| std::fs::remove_file(p).is_ok())
        .collect()
}

/// A journal file as read: `Ok(Some(..))`, `Ok(None)` when it does not parse, `Err` when it
/// could not be read (an I/O error, a stale handle: anything but its being gone).
pub type Listed = (PathBuf, io::Result<Option<Journal>>);

/// The journals in `meta` (a tier's `.tierfs-meta/`; none when it does not exist). `Err`
/// when the folder, or an entry of it, cannot be listed: a journal there may go unseen.
pub fn list(meta: &Path) -> io::Result<Vec<Listed>> {
    read_journals(meta, false)
}

/// The journals in `meta` set aside as `*.unfinished` ([`set_aside`]), never to be
/// replayed: each names a file whose bytes may be mixed from before and after its move.
pub fn list_set_aside(meta: &Path) -> io::Result<Vec<Listed>> {
    read_journals(meta, true)
}

fn read_journals(meta: &Path, set_aside: bool) -> io::Result<Vec<Listed>> {
    let rd = match std::fs::read_dir(meta) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e?;
        let n = e.file_name();
        let n = n.as_bytes();
        if !n.starts_with(JOURNAL_PREFIX.as_bytes()) || n.ends_with(b".unfinished") != set_aside {
            continue;
        }
        let j = match read(&e.path()) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            j => j,
        };
        out.push((e.path(), j));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Reads the journal at `path`: `Ok(None)` when it does not parse (bytes that are not
/// UTF-8 included), `Err` when it cannot be read.
pub fn read(path: &Path) -> io::Result<Option<Journal>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Journal::decode(&s)),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(None),
        Err(e) => Err(e),
    }
}

/// Makes the removal or renaming of a journal in `meta` durable (best effort: the
/// worst a lost one does is settle the journal again, which finds nothing left to do).
pub(super) fn sync_folder(meta: Option<&Path>) {
    if let Some(Ok(f)) = meta.map(std::fs::File::open) {
        let _ = f.sync_all();
    }
}

/// Renames a journal that will not be replayed to `*.unfinished`; returns `why` and where
/// it went.
pub fn set_aside(path: &Path, why: &str) -> String {
    let to = path.with_extension("unfinished");
    match std::fs::rename(path, &to) {
        Ok(()) => {
            sync_folder(path.parent());
            format!("{why} (journal set aside as {})", to.display())
        }
        Err(e) => format!(
            "{why} (and the journal {} could not be set aside: {e})",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal() -> Journal {
        Journal {
            primary: "d/a".into(),
            names: vec!["b".into()],
            new: vec![(1, 21), (2, 22)],
            old: vec![(0, 10), (1, 11)],
            keeps: false,
            pending: vec![],
        }
    }

    #[test]
    fn torn_journal_writes_are_removed_and_nothing_else() {
        let d = tempfile::tempdir().unwrap();
        let j = journal();
        let p = write(d.path(), "kept", &j).unwrap();
        let torn = d.path().join(format!(".{JOURNAL_PREFIX}cut.tmp"));
        std::fs::write(&torn, "tierfs-relink v1\nprim").unwrap();
        let other = d.path().join(".other.tmp");
        std::fs::write(&other, "").unwrap();
        assert_eq!(remove_torn_writes(d.path()), vec![torn.clone()]);
        assert!(p.exists() && other.exists() && !torn.exists());
        assert!(remove_torn_writes(&d.path().join("none")).is_empty());
    }
}
