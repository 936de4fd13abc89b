//! What a mount found in its tier folders before it touched them, so that a mount that
//! fails before it answers (fusermount3 refused it, a tier without user xattrs) takes away
//! what it made there: the tier folder it created, the `.tierfs-meta/` and `data/` it put
//! in a folder that had none. Never anything that was there before: a failed mount must
//! leave the folders as it found them, not half initialised, and must not cost a user a
//! file (a scratch mount once removed a folder whole, files it did not make included).
//!
//! `tierfs mount` looks before it creates anything ([`Before::survey`]) and hands what it
//! saw to the daemon it starts in the background (an environment variable), since that
//! daemon starts after the folders were made. The daemon removes what was new only while
//! it holds the tiers' locks: a mount that lost the race for a lock to another one leaves
//! that one's folders alone.

use crate::config::MountConfig;
use crate::tier::{DATA_DIR, META_DIR};
use std::path::{Path, PathBuf};

/// What [`Before::survey`] saw, handed to the background daemon.
const ENV: &str = "TIERFS_TIERS_BEFORE";

/// Which parts of one tier folder were there before the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    dir: bool,
    meta: bool,
    data: bool,
}

/// What every tier folder of a config held before this mount (in config order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Before(Vec<Seen>);

impl Before {
    /// Looks at `config`'s tier folders now, before anything is created in them.
    pub fn survey(config: &MountConfig) -> Before {
        // Only "missing" counts as not there: a folder that cannot be looked at is treated
        // as there, so it is never removed.
        let there = |p: &Path| !matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        Before(
            config
                .tiers
                .iter()
                .map(|t| Seen {
                    dir: there(&t.path),
                    meta: there(&t.path.join(META_DIR)),
                    data: there(&t.path.join(DATA_DIR)),
                })
                .collect(),
        )
    }

    /// What the `tierfs mount` that started this daemon saw (taken out of the
    /// environment); without one, a survey now.
    pub fn inherited_or_survey(config: &MountConfig) -> Before {
        let inherited = std::env::var(ENV).ok().and_then(|v| Before::decode(&v));
        std::env::remove_var(ENV);
        match inherited {
            Some(b) if b.0.len() == config.tiers.len() => b,
            _ => Before::survey(config),
        }
    }

    /// The environment variable that hands this to the background daemon.
    pub fn env(&self) -> (&'static str, String) {
        let flag = |on: bool, c: char| if on { c } else { '-' };
        let s: Vec<String> = self
            .0
            .iter()
            .map(|s| {
                [flag(s.dir, 'd'), flag(s.meta, 'm'), flag(s.data, 'a')]
                    .iter()
                    .collect()
            })
            .collect();
        (ENV, s.join(","))
    }

    fn decode(v: &str) -> Option<Before> {
        v.split(',')
            .map(|t| match t.as_bytes() {
                [d, m, a] => Some(Seen {
                    dir: *d == b'd',
                    meta: *m == b'm',
                    data: *a == b'a',
                }),
                _ => None,
            })
            .collect::<Option<Vec<Seen>>>()
            .map(Before)
    }

    /// Removes from `config`'s tier folders what was not there before: `data/` if empty,
    /// `.tierfs-meta/` with what tierfs put in it, the folder itself if empty then. Returns
    /// what it removed. Call it only while this mount holds the tiers' locks.
    pub fn undo(&self, config: &MountConfig) -> Vec<PathBuf> {
        let mut removed = Vec::new();
        for (t, seen) in config.tiers.iter().zip(&self.0) {
            let data = t.path.join(DATA_DIR);
            if !seen.data && std::fs::remove_dir(&data).is_ok() {
                removed.push(data);
            }
            let meta = t.path.join(META_DIR);
            // Made by this mount, so it holds only tierfs's own files (lock, format, probe
            // results, the default log).
            if !seen.meta && meta.is_dir() && std::fs::remove_dir_all(&meta).is_ok() {
                removed.push(meta);
            }
            if !seen.dir && std::fs::remove_dir(&t.path).is_ok() {
                removed.push(t.path.clone());
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dirs: &[&Path]) -> MountConfig {
        let mut text = String::new();
        for (i, d) in dirs.iter().enumerate() {
            text.push_str(&format!("[[tier]]\nname = \"t{i}\"\npath = {:?}\n", d));
        }
        MountConfig::parse(&text, Path::new("/t.toml")).unwrap()
    }

    #[test]
    fn removes_only_what_was_new() {
        let d = tempfile::tempdir().unwrap();
        let (new, empty, used) = (
            d.path().join("new"),
            d.path().join("empty"),
            d.path().join("used"),
        );
        std::fs::create_dir(&empty).unwrap();
        std::fs::create_dir_all(used.join(DATA_DIR)).unwrap();
        std::fs::write(used.join("mine.txt"), b"keep").unwrap();
        std::fs::write(used.join(DATA_DIR).join("old"), b"keep").unwrap();
        let c = config(&[&new, &empty, &used]);
        let before = Before::survey(&c);
        // What a mount makes in them.
        for dir in [&new, &empty, &used] {
            std::fs::create_dir_all(dir.join(META_DIR).join("limbo")).unwrap();
            std::fs::write(dir.join(META_DIR).join("lock"), b"").unwrap();
            std::fs::create_dir_all(dir.join(DATA_DIR)).unwrap();
        }
        let (k, v) = before.env();
        assert_eq!(k, ENV);
        assert_eq!(v, "---,d--,d-a");
        assert_eq!(Before::decode(&v), Some(before.clone()));
        let removed = before.undo(&c);
        assert!(!new.exists(), "{removed:?}");
        assert!(empty.is_dir() && std::fs::read_dir(&empty).unwrap().next().is_none());
        assert_eq!(std::fs::read(used.join("mine.txt")).unwrap(), b"keep");
        assert_eq!(
            std::fs::read(used.join(DATA_DIR).join("old")).unwrap(),
            b"keep"
        );
        assert!(!used.join(META_DIR).exists());
        assert_eq!(removed.len(), 3 + 2 + 1, "{removed:?}");
        // A folder that held a tier already: nothing goes.
        std::fs::create_dir_all(used.join(META_DIR)).unwrap();
        let again = Before::survey(&c);
        std::fs::create_dir_all(new.join(DATA_DIR)).unwrap();
        std::fs::write(
            new.join(DATA_DIR).join("x"),
            b"a file the mount did not make",
        )
        .unwrap();
        again.undo(&c);
        assert!(used.join(META_DIR).is_dir());
        assert!(
            new.join(DATA_DIR).join("x").exists(),
            "a non-empty data/ was removed"
        );
        assert_eq!(Before::decode("d-"), None);
    }
}
