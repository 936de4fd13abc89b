//! Which tierfs a tier folder belongs to, read before a mount touches the folder.
//!
//! Each tier folder's `.tierfs-meta/format` names the on-disk format, the tier's own name,
//! the *pool* (a random id shared by the tiers of one tierfs, made at its first mount) and
//! the pool's tiers in config order. Why: the everyday failure of a cluster node is a
//! parallel file system that is not mounted while its mountpoint folder exists, empty.
//! Taken for a new tier, every stripe of it read as zeros and a rewrite left the file mixing
//! new and old pieces once the real folder came back, with no error. So a folder with no
//! format file where another tier of the pool says this tier holds data is refused (or, with
//! `--degraded`, left out: its files then answer EIO, never zeros), as is a tier of another
//! pool, or one that was another tier of this pool (two paths swapped: stripes name their
//! tiers by position). Folders written by a tierfs from before the pool id carry no pool;
//! they are taken as they are and get one at their next mount.

use std::io::ErrorKind;
use std::path::Path;

/// The file in a tier's `.tierfs-meta/` that says what the tier is.
pub const FORMAT_FILE: &str = "format";
const FORMAT_PREFIX: &str = "tierfs tier format ";

/// What a tier's format file says of it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// The on-disk format version (`None` when the first line does not say one).
    pub format: Option<u32>,
    /// The tier's name in its pool's config.
    pub name: Option<String>,
    /// The pool's id (`None`: written before pools had one).
    pub pool: Option<String>,
    /// The pool's tiers, in config order (empty: not known).
    pub tiers: Vec<String>,
}

impl Identity {
    pub fn parse(text: &str) -> Identity {
        let mut id = Identity::default();
        for line in text.lines() {
            if let Some(v) = line.strip_prefix(FORMAT_PREFIX) {
                id.format = v.trim().parse().ok();
            } else if let Some(v) = line.strip_prefix("name ") {
                id.name = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("pool ") {
                id.pool = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("tiers ") {
                id.tiers = v.split_whitespace().map(str::to_string).collect();
            }
        }
        id
    }

    pub fn encode(&self) -> String {
        let mut s = format!(
            "{FORMAT_PREFIX}{}\n",
            self.format.unwrap_or(crate::layout::FORMAT_VERSION)
        );
        if let Some(n) = &self.name {
            s += &format!("name {n}\n");
        }
        if let Some(p) = &self.pool {
            s += &format!("pool {p}\n");
        }
        if !self.tiers.is_empty() {
            s += &format!("tiers {}\n", self.tiers.join(" "));
        }
        s
    }
}

/// What a folder named as a tier turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// No format file: never a tier, or emptied (also: the folder does not exist yet).
    Blank,
    Tier(Identity),
    /// The format file is there or may be, but cannot be read (the reason).
    Unreadable(String),
}

/// Reads what the tier folder `root` says it is, changing nothing.
pub fn read(root: &Path) -> Seen {
    let path = root.join(super::META_DIR).join(FORMAT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => Seen::Tier(Identity::parse(&text)),
        Err(e) if e.kind() == ErrorKind::NotFound => Seen::Blank,
        Err(e) => Seen::Unreadable(format!("cannot read {}: {e}", path.display())),
    }
}

/// One tier of a config, as the check sees it: (name, folder).
pub type Named<'a> = (&'a str, &'a Path);

/// A tier folder the mount must not use as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub index: usize,
    /// Its format file could not be read (rather than saying it is not this tier).
    pub unreadable: bool,
    pub why: String,
}

/// The pool the config's tiers belong to: the id and tier list of the first tier folder
/// that has one (the first tier's, when it is there), and which folder said so.
fn pool_of(seen: &[Option<Seen>]) -> Option<(usize, &Identity)> {
    seen.iter().enumerate().find_map(|(i, s)| match s {
        Some(Seen::Tier(id)) if id.pool.is_some() => Some((i, id)),
        _ => None,
    })
}

/// Checks every tier folder of a config against the others (`skip`: indexes left out
/// already). Refuses a folder that cannot be read, a tier of another pool, one that was
/// another tier of this pool, and a blank folder where the pool says a tier holds data.
pub fn check(tiers: &[Named<'_>], skip: &[usize]) -> Vec<Refused> {
    let seen: Vec<Option<Seen>> = tiers
        .iter()
        .enumerate()
        .map(|(i, (_, root))| (!skip.contains(&i)).then(|| read(root)))
        .collect();
    let Some((by, pool)) = pool_of(&seen) else {
        return unreadable(tiers, &seen);
    };
    let (by_name, by_root) = tiers[by];
    let pool_id = pool.pool.as_deref().unwrap_or_default();
    let mut out = Vec::new();
    for (i, s) in seen.iter().enumerate() {
        let (name, root) = tiers[i];
        let why = match s {
            None => continue,
            Some(Seen::Unreadable(e)) => format!(
                "{e}; whether {} is this tierfs's tier '{name}' cannot be told: fix the file \
                 system or the permissions there, or mount with --degraded to go on without it",
                root.display()
            ),
            Some(Seen::Blank) if pool.tiers.iter().any(|t| t == name) => format!(
                "{} is not a tierfs tier (no {}/{FORMAT_FILE}), but tier '{by_name}' ({}) says \
                 tier '{name}' of this tierfs holds data there: is its file system mounted on \
                 this node? Mount it and retry; to go on without it, mount with --degraded \
                 (files with pieces on it then fail with EIO)",
                root.display(),
                super::META_DIR,
                by_root.display()
            ),
            Some(Seen::Blank) => continue,
            Some(Seen::Tier(id)) => match refusal(id, i, tiers, pool_id) {
                Some(w) => w,
                None => continue,
            },
        };
        let unreadable = matches!(s, Some(Seen::Unreadable(_)));
        out.push(Refused {
            index: i,
            unreadable,
            why,
        });
    }
    out
}

/// Without any pool id to compare with, only folders that cannot be read are refused.
fn unreadable(tiers: &[Named<'_>], seen: &[Option<Seen>]) -> Vec<Refused> {
    seen.iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            Some(Seen::Unreadable(e)) => Some(Refused {
                index: i,
                unreadable: true,
                why: format!(
                    "{e}; whether {} is this tierfs's tier '{}' cannot be told: fix the file \
                     system or the permissions there, or mount with --degraded to go on \
                     without it",
                    tiers[i].1.display(),
                    tiers[i].0
                ),
            }),
            _ => None,
        })
        .collect()
}

/// Why the formatted tier `id`, found where the config puts its tier `i`, is refused.
fn refusal(id: &Identity, i: usize, tiers: &[Named<'_>], pool: &str) -> Option<String> {
    let (name, root) = tiers[i];
    if let Some(p) = id.pool.as_deref().filter(|p| *p != pool) {
        return Some(format!(
            "{} is a tier of another tierfs (pool {p}{}), not of this one (pool {pool}): point \
             tier '{name}' at this tierfs's own folder",
            root.display(),
            list(&id.tiers)
        ));
    }
    let was = id.name.as_deref()?;
    let other = tiers.iter().position(|(n, _)| *n == was)?;
    (was != name && other != i).then(|| {
        format!(
            "{} holds this tierfs's tier '{was}', not '{name}': the config's tier paths are \
             swapped or out of order (stripes name their tiers by position), so give tier \
             '{was}' this folder again",
            root.display()
        )
    })
}

fn list(tiers: &[String]) -> String {
    if tiers.is_empty() {
        String::new()
    } else {
        format!(", tiers {}", tiers.join(", "))
    }
}

/// A new pool id: 16 random bytes in hex.
pub fn new_pool_id() -> String {
    let mut b = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        // No /dev/urandom: the time and pid still tell pools apart on one cluster.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b = (t ^ (u128::from(std::process::id()) << 96)).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Writes what an opened tier is (its lock held): the format file replaced whole through a
/// temporary, and synced, so a crash leaves the old one or the new one. Unchanged files
/// are not rewritten.
pub fn record(root: &Path, id: &Identity) -> std::io::Result<()> {
    let meta = root.join(super::META_DIR);
    let path = meta.join(FORMAT_FILE);
    let text = id.encode();
    if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
        return Ok(());
    }
    let tmp = meta.join(format!(".{FORMAT_FILE}.{}.tmp", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(&meta)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(dir: &Path, name: &str, pool: Option<&str>, tiers: &[&str]) {
        std::fs::create_dir_all(dir.join(crate::tier::META_DIR)).unwrap();
        let id = Identity {
            format: Some(crate::layout::FORMAT_VERSION),
            name: Some(name.into()),
            pool: pool.map(str::to_string),
            tiers: tiers.iter().map(|t| t.to_string()).collect(),
        };
        record(dir, &id).unwrap();
    }

    #[test]
    fn the_format_file_round_trips_and_reads_old_ones() {
        let id = Identity {
            format: Some(3),
            name: Some("nvme".into()),
            pool: Some("ab12".into()),
            tiers: vec!["nvme".into(), "pfs".into()],
        };
        assert_eq!(Identity::parse(&id.encode()), id);
        // Before pools: the format and the name only.
        let old = Identity::parse("tierfs tier format 3\nname pfs\n");
        assert_eq!(
            (old.format, old.name.as_deref(), old.pool),
            (Some(3), Some("pfs"), None)
        );
    }

    #[test]
    fn a_blank_folder_where_the_pool_expects_a_tier_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(&b).unwrap();
        tier(&a, "nvme", Some("p1"), &["nvme", "pfs"]);
        let tiers = [("nvme", a.as_path()), ("pfs", b.as_path())];
        let r = check(&tiers, &[]);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].index, 1);
        assert!(
            r[0].why.contains("is its file system mounted"),
            "{}",
            r[0].why
        );
        // Left out already (a degraded mount): nothing more to say.
        assert!(check(&tiers, &[1]).is_empty());
        // A tier the pool never had is a new one.
        let tiers = [("nvme", a.as_path()), ("extra", b.as_path())];
        assert!(check(&tiers, &[]).is_empty());
        // Nor is a blank folder refused beside a tier written before pools had ids.
        tier(&a, "nvme", None, &[]);
        let tiers = [("nvme", a.as_path()), ("pfs", b.as_path())];
        assert!(check(&tiers, &[]).is_empty());
    }

    #[test]
    fn a_tier_of_another_pool_or_another_position_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        tier(&a, "nvme", Some("p1"), &["nvme", "pfs"]);
        tier(&b, "pfs", Some("p2"), &["x", "pfs"]);
        let tiers = [("nvme", a.as_path()), ("pfs", b.as_path())];
        let r = check(&tiers, &[]);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].why.contains("another tierfs (pool p2"), "{}", r[0].why);
        // The same pool, paths swapped.
        tier(&b, "pfs", Some("p1"), &["nvme", "pfs"]);
        let swapped = [("nvme", b.as_path()), ("pfs", a.as_path())];
        let r = check(&swapped, &[]);
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(
            r[0].why.contains("holds this tierfs's tier 'pfs'"),
            "{}",
            r[0].why
        );
        // A tier renamed in the config (no other tier has its old name) is taken.
        let renamed = [("nvme", a.as_path()), ("lustre", b.as_path())];
        assert!(check(&renamed, &[]).is_empty());
    }

    #[test]
    fn a_format_file_that_cannot_be_read_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        tier(&a, "nvme", None, &[]);
        // A folder where the file should be: reading it fails with EISDIR, not NotFound.
        let b = d.path().join("b");
        std::fs::create_dir_all(b.join(crate::tier::META_DIR).join(FORMAT_FILE)).unwrap();
        let tiers = [("nvme", a.as_path()), ("pfs", b.as_path())];
        let r = check(&tiers, &[]);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].why.contains("cannot be told"), "{}", r[0].why);
        tier(&a, "nvme", Some("p"), &["nvme", "pfs"]);
        assert_eq!(check(&tiers, &[]).len(), 1);
    }

    #[test]
    fn recording_replaces_the_file_only_when_it_changes() {
        let d = tempfile::tempdir().unwrap();
        tier(d.path(), "nvme", Some("p"), &["nvme"]);
        let path = d.path().join(crate::tier::META_DIR).join(FORMAT_FILE);
        let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        tier(d.path(), "nvme", Some("p"), &["nvme"]);
        let again = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        assert_eq!(ino, again, "rewritten though unchanged");
        assert_eq!(new_pool_id().len(), 32);
        assert_ne!(new_pool_id(), new_pool_id());
    }
}
