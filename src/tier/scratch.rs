//! A scratch mount's hold on its tier folders: it may remove at unmount only what it
//! created, so it takes only folders that hold nothing else, and marks each with whether
//! it made the folder itself.
//!
//! The marker (`.tierfs-meta/scratch`) is written by the first `tierfs mount` of the
//! folder, the one that creates it or finds it empty, before the daemon starts; a later
//! mount (the daemon's own start, or the mount after a killed scratch daemon) finds it and
//! knows that everything in `data/` is scratch data. At unmount the data and tierfs's own
//! files go, and the folder too only if the marker says the mount made it. A mount that is
//! not scratch removes the marker: from then on the data is kept. Why: a scratch mount once
//! removed a tier folder whole at unmount, with the files a user had in it before.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// The marker's name in `.tierfs-meta/`.
pub const MARKER: &str = "scratch";
const MAGIC: &str = "tierfs scratch v1";

/// What a scratch mount will do with one tier folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Not there: the mount creates it, and removes it at unmount.
    Create,
    /// There and empty: the mount removes what it puts there, and keeps the folder.
    Empty,
    /// Marked by a scratch mount (this one's start, or a killed one): its data is scratch
    /// data, and the folder goes at unmount if that mount made it.
    Marked { created: bool },
}

impl Plan {
    /// What `tierfs check-config` says of it.
    pub fn describe(&self) -> &'static str {
        match self {
            Plan::Create => "will be created, and removed with its data at unmount",
            Plan::Empty => {
                "is empty: what the mount puts there is removed at unmount, the folder kept"
            }
            Plan::Marked { created: true } => {
                "holds an earlier scratch mount's data: discarded; removed at unmount"
            }
            Plan::Marked { created: false } => {
                "holds an earlier scratch mount's data: discarded; the folder kept at unmount"
            }
        }
    }
}

/// Whether the tier folder `root` may be used for scratch data, and how; `Err` names what
/// is in it that a scratch mount did not create (up to three entries).
pub fn inspect(root: &Path) -> Result<Plan, String> {
    match std::fs::symlink_metadata(root) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Plan::Create),
        Err(e) => return Err(format!("cannot look into it: {e}")),
        Ok(_) => {}
    }
    if let Some(created) = marked(root) {
        return Ok(Plan::Marked { created });
    }
    let mut found = entries(root, Path::new(""))?;
    if found.is_empty() {
        return Ok(Plan::Empty);
    }
    // Name what is inside `data/` rather than `data` itself: that is the user's.
    if let Some(i) = found.iter().position(|p| p == Path::new(super::DATA_DIR)) {
        let inside = entries(&root.join(super::DATA_DIR), Path::new(super::DATA_DIR))?;
        if inside.is_empty() && found.len() == 1 {
            return Err(format!(
                "it holds an empty {}/ folder of an earlier tier that was not scratch",
                super::DATA_DIR
            ));
        }
        found.splice(i..=i, inside);
    }
    found.sort();
    let n = found.len();
    let mut names: Vec<String> = found
        .iter()
        .take(3)
        .map(|p| p.display().to_string())
        .collect();
    if n > 3 {
        names.push(format!("and {} more", n - 3));
    }
    Err(format!("it holds {}", names.join(", ")))
}

fn entries(dir: &Path, prefix: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .map(|e| {
            e.map(|e| prefix.join(e.file_name()))
                .map_err(|e| format!("cannot list {}: {e}", dir.display()))
        })
        .collect()
}

/// The marker's word on whether a scratch mount created `root` (`None`: no readable marker).
pub fn marked(root: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(root.join(super::META_DIR).join(MARKER)).ok()?;
    let mut lines = text.lines();
    (lines.next()? == MAGIC).then_some(())?;
    match lines.next()? {
        "folder created" => Some(true),
        "folder existed" => Some(false),
        _ => None,
    }
}

/// Marks `root` as a scratch mount's, `created` whether this mount made the folder (synced:
/// a crash right after must not leave a scratch folder unmarked, or data it cannot tell).
pub fn mark(root: &Path, created: bool) -> std::io::Result<()> {
    let meta = root.join(super::META_DIR);
    match std::fs::create_dir(&meta) {
        Err(e) if e.kind() != ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let word = if created { "created" } else { "existed" };
    let mut f = std::fs::File::create(meta.join(MARKER))?;
    std::io::Write::write_all(&mut f, format!("{MAGIC}\nfolder {word}\n").as_bytes())?;
    f.sync_all()?;
    std::fs::File::open(&meta)?.sync_all()
}

/// A mount that is not scratch keeps its data: the folder is no scratch folder any more.
pub fn unmark(root: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(root.join(super::META_DIR).join(MARKER)) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_with_anything_a_scratch_mount_did_not_make_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("t");
        assert_eq!(inspect(&root), Ok(Plan::Create));
        std::fs::create_dir(&root).unwrap();
        assert_eq!(inspect(&root), Ok(Plan::Empty));
        // An earlier tier's data, as the issue found it removed.
        std::fs::create_dir(root.join("data")).unwrap();
        std::fs::write(root.join("data/old.txt"), b"keep me").unwrap();
        let e = inspect(&root).unwrap_err();
        assert!(e.contains("data/old.txt"), "{e}");
        std::fs::remove_file(root.join("data/old.txt")).unwrap();
        assert!(inspect(&root).unwrap_err().contains("empty data/"));
        std::fs::write(root.join("notes"), b"x").unwrap();
        assert!(inspect(&root).unwrap_err().contains("notes"));
    }

    #[test]
    fn the_marker_says_who_made_the_folder_and_a_normal_mount_drops_it() {
        let d = tempfile::tempdir().unwrap();
        for created in [true, false] {
            let root = d.path().join(format!("t{created}"));
            std::fs::create_dir(&root).unwrap();
            mark(&root, created).unwrap();
            std::fs::create_dir(root.join("data")).unwrap();
            std::fs::write(root.join("data/f"), b"scratch").unwrap();
            assert_eq!(marked(&root), Some(created));
            assert_eq!(inspect(&root), Ok(Plan::Marked { created }));
            unmark(&root).unwrap();
            assert_eq!(marked(&root), None);
            assert!(inspect(&root).is_err(), "its data is kept now");
        }
    }
}
