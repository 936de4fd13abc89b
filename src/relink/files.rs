//! A journal's file in a tier's `.tierfs-meta/` folder: written and synced, listed, set
//! aside, and the temporaries of writes a crash cut short.

use super::{Journal, JOURNAL_PREFIX};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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

/// Removes the temporaries of journal writes a crash cut short in `meta` (see [`write`]):
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
