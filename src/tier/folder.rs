//! A tier folder on disk: taking it at mount (its lock, format marker, limbo and what its
//! file system accepts) and giving it up in scratch mode.

use super::{LockRequest, DATA_DIR, META_DIR};
use crate::error::{Error, Result};
use crate::tier::lock::{Holder, TakenOver, TierLock};
use std::path::{Path, PathBuf};

/// Takes the lock of the tier folder `root` as `req` says; a stale scratch daemon's data
/// in `data` goes with its lock.
pub(super) fn take_lock(
    name: &str,
    root: &Path,
    meta: &Path,
    data: &Path,
    req: &LockRequest,
) -> Result<TierLock> {
    let me = Holder::me("mount", req.mountpoint.as_deref(), req.scratch);
    match TierLock::acquire(root, meta, me, req.break_lock) {
        Ok((lock, taken)) => {
            match taken {
                None => {}
                Some(TakenOver::Stale(h)) => {
                    log::warn!(
                        "tier '{name}': took over the stale lock of a tierfs daemon that is \
                         gone ({}) in {}",
                        h.describe(),
                        root.display()
                    );
                    if h.scratch && req.scratch {
                        // That daemon was killed before it could throw its scratch data
                        // away; this mount would otherwise show it as if it were new.
                        log::warn!(
                            "tier '{name}': discarding the scratch data it left in {}",
                            data.display()
                        );
                        std::fs::remove_dir_all(data)
                            .and_then(|_| std::fs::create_dir(data))
                            .map_err(|e| Error::tier(name, "empty", data, e))?;
                    }
                }
                Some(TakenOver::Broken(h)) => log::warn!(
                    "tier '{name}': broke the lock of {} in {} (--break-lock)",
                    h.describe(),
                    root.display()
                ),
                Some(TakenOver::Unreadable) => log::warn!(
                    "tier '{name}': replaced an unreadable lock record in {} \
                     (--break-lock)",
                    root.display()
                ),
            }
            Ok(lock)
        }
        Err(e) => Err(Error::tier(
            name,
            "lock",
            meta.join(crate::tier::lock::RECORD),
            std::io::Error::new(e.kind(), e.to_string()),
        )),
    }
}

/// Writes the format marker of a new tier, or refuses a tier of another format. Only a
/// marker that is surely not there is written (never over one a failing stat hid: it names
/// the tier's pool, [`super::identity`]); one that cannot be read fails the mount.
pub(super) fn check_format(name: &str, meta: &Path) -> Result<()> {
    use std::io::ErrorKind;
    let format = meta.join(super::identity::FORMAT_FILE);
    let text = match std::fs::read_to_string(&format) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let text = format!(
                "tierfs tier format {}\nname {}\n",
                crate::layout::FORMAT_VERSION,
                name
            );
            let mut f = match std::fs::File::options()
                .write(true)
                .create_new(true)
                .open(&format)
            {
                Ok(f) => f,
                // Made meanwhile: read it next time; this mount holds the lock, so no one.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(()),
                Err(e) => return Err(Error::tier(name, "write", &format, e)),
            };
            return std::io::Write::write_all(&mut f, text.as_bytes())
                .map_err(|e| Error::tier(name, "write", &format, e));
        }
        Err(e) => return Err(Error::tier(name, "read", &format, e)),
    };
    let v = super::identity::Identity::parse(&text).format;
    if v != Some(crate::layout::FORMAT_VERSION) {
        return Err(Error::tier(
            name,
            "check format of",
            &format,
            std::io::Error::other(format!(
                "this tier was written by an incompatible tierfs (format {v:?}, this tierfs reads {})",
                crate::layout::FORMAT_VERSION
            )),
        ));
    }
    Ok(())
}

/// Makes the limbo folder if it is missing. What a previous daemon left there stays
/// until the mount's scan has settled the re-link journals ([`empty_limbo`]): a move torn
/// between its own renames is finished from its temporaries there.
pub(super) fn make_limbo(name: &str, limbo: &Path) -> Result<()> {
    if let Err(e) = std::fs::create_dir(limbo) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(Error::tier(name, "mkdir", limbo, e));
        }
    }
    Ok(())
}

/// Empties the limbo folder of what a previous daemon left (the lock is ours, so it is
/// unreferenced) but `spare`, the temporaries a held journal names (paths from the
/// tier's folder `root`). Only for the mount's scan, before any move.
pub fn empty_limbo(name: &str, root: &Path, limbo: &Path, spare: &[&Path]) {
    let rd = match std::fs::read_dir(limbo) {
        Ok(rd) => rd,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!(
                    "tier '{name}': cannot list {} ({e}): what an earlier daemon left there \
                     stays",
                    limbo.display()
                );
            }
            return;
        }
    };
    for e in rd.flatten() {
        let p = e.path();
        if spare.iter().any(|s| root.join(s) == p) {
            continue;
        }
        let r = match e.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&p),
            _ => std::fs::remove_file(&p),
        };
        if let Err(e) = r {
            log::warn!("tier '{name}': cannot remove {}: {e}", p.display());
        }
    }
}

/// What a tier's file system accepts, found at mount, and its block device.
pub(super) struct Capabilities {
    pub direct_io: bool,
    pub small_direct_io: bool,
    pub user_xattrs: bool,
    pub device_stat: Option<PathBuf>,
    pub device_base: (u64, u64),
}

impl Capabilities {
    pub(super) fn of(meta: &Path, data: &Path) -> Capabilities {
        let direct_io = crate::sys::dir_accepts_direct_io_of(data, crate::sys::DIRECT_ALIGN);
        let user_xattrs = {
            let f = meta.join(format!(".xattr-check-{}", std::process::id()));
            let ok = std::fs::write(&f, b"").is_ok()
                && crate::sys::lsetxattr(&f, std::ffi::OsStr::new("user.tierfs.check"), b"1", 0)
                    .is_ok();
            let _ = std::fs::remove_file(&f);
            ok
        };
        let small_direct_io = direct_io && crate::sys::dir_accepts_direct_io_of(data, 1024);
        let device_stat = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(data).ok().and_then(|m| {
                // SAFETY: major/minor are pure arithmetic on the device number.
                let (ma, mi) = (libc::major(m.dev()), libc::minor(m.dev()));
                let p = PathBuf::from(format!("/sys/dev/block/{ma}:{mi}/stat"));
                p.exists().then_some(p)
            })
        };
        let device_base = device_stat
            .as_deref()
            .and_then(read_device_bytes)
            .unwrap_or((0, 0));
        Capabilities {
            direct_io,
            small_direct_io,
            user_xattrs,
            device_stat,
            device_base,
        }
    }
}

/// Scratch mode, part one (lock still held): removes the tier's data and everything of
/// tierfs's own in its `.tierfs-meta/` but the lock files.
pub fn discard_contents(root: &Path) -> std::io::Result<()> {
    remove_if_there(&root.join(DATA_DIR))?;
    let meta = root.join(META_DIR);
    let keep = [crate::tier::lock::RECORD, crate::tier::lock::NODE_LOCK];
    match std::fs::read_dir(&meta) {
        Ok(rd) => {
            for e in rd {
                let e = e?;
                if keep.iter().any(|k| e.file_name() == *k) {
                    continue;
                }
                remove_if_there(&e.path())?;
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Scratch mode, part two (lock released): removes `.tierfs-meta/`, and the tier folder
/// itself if the scratch mount `created` it ([`super::scratch`]); a folder that existed
/// before is kept, empty. Anything in the folder that is not tierfs's (a user's file next
/// to `data/`) is kept, and with it the folder: the error lists it. A tier somebody locked
/// meanwhile is left alone.
pub fn remove_folder(root: &Path, created: bool) -> std::result::Result<(), String> {
    let meta = root.join(META_DIR);
    if let Some(h) = crate::tier::lock::holder_of(&meta) {
        return Err(format!(
            "kept {}: it was locked again meanwhile ({})",
            root.display(),
            h.describe()
        ));
    }
    remove_if_there(&meta).map_err(|e| format!("cannot remove {}: {e}", meta.display()))?;
    if !created {
        return Ok(());
    }
    match std::fs::remove_dir(root) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {
            let mut names: Vec<String> = std::fs::read_dir(root)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            Err(format!(
                "kept {}: it holds files tierfs did not make ({}); remove them by hand",
                root.display(),
                names.join(", ")
            ))
        }
        Err(e) => Err(format!("cannot remove {}: {e}", root.display())),
    }
}

fn remove_if_there(p: &Path) -> std::io::Result<()> {
    let r = match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) => Err(e),
    };
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

pub(super) fn read_device_bytes(stat: &Path) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(stat).ok()?;
    let f: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // Fields 3 and 7 (1-based) are sectors read and written, in 512-byte units.
    Some((f.get(2)? * 512, f.get(6)? * 512))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A marker that cannot be read fails the mount instead of being written over (it names
    /// the tier's pool); one that is there is never rewritten.
    #[test]
    fn a_format_marker_is_written_only_where_surely_missing() {
        let d = tempfile::tempdir().unwrap();
        let format = d.path().join(super::super::identity::FORMAT_FILE);
        check_format("t", d.path()).unwrap();
        let first = std::fs::read_to_string(&format).unwrap();
        assert!(first.starts_with("tierfs tier format "), "{first}");
        std::fs::write(&format, format!("{first}pool abc\n")).unwrap();
        check_format("t", d.path()).unwrap();
        assert!(std::fs::read_to_string(&format)
            .unwrap()
            .contains("pool abc"));
        std::fs::remove_file(&format).unwrap();
        std::fs::create_dir(&format).unwrap();
        let e = check_format("t", d.path()).unwrap_err().to_string();
        assert!(e.contains("read"), "{e}");
        std::fs::remove_dir(&format).unwrap();
        std::fs::write(&format, "tierfs tier format 99\n").unwrap();
        assert!(check_format("t", d.path())
            .unwrap_err()
            .to_string()
            .contains("incompatible"));
    }
}
