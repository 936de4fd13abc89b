//! Why this user may not reach a file or folder: the folder on the way that lacks search (x)
//! permission for it, or the file's own mode, with the `chmod` that would let it in. A bare
//! "Permission denied (os error 13)" names neither the folder nor the fix, and the folder
//! at fault is often not the one named (a parent of a tier path, of the config file).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// This process's user as messages name it: `user NAME (uid N)`.
pub fn who() -> String {
    let uid = crate::sys::euid();
    match super::vars::passwd_entry() {
        Ok((name, _)) => format!("user {name} (uid {uid})"),
        Err(_) => format!("uid {uid}"),
    }
}

/// Whether `faccessat(path, mode)` with the effective ids, as file operations check them,
/// refuses this user (not: the path is missing).
fn refused(path: &Path, mode: i32) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call, which only
    // reads it.
    let rc = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), mode, libc::AT_EACCESS) };
    rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EACCES)
}

/// The first folder on the way to `path` (its ancestors, from `/` down) that this user may
/// not search.
pub fn unsearchable_ancestor(path: &Path) -> Option<PathBuf> {
    let abs = std::path::absolute(path).ok()?;
    let mut chain: Vec<&Path> = abs.ancestors().skip(1).collect();
    chain.reverse();
    chain
        .into_iter()
        .find(|d| refused(d, libc::X_OK))
        .map(Path::to_path_buf)
}

/// Which of `u`, `g`, `o` the permission bits for this user are in `path`'s mode.
fn whose(path: &Path) -> &'static str {
    let Ok(m) = std::fs::metadata(path) else {
        return "o";
    };
    if m.uid() == crate::sys::euid() {
        return "u";
    }
    // SAFETY: getegid has no preconditions.
    let egid = unsafe { libc::getegid() };
    let mut groups = vec![0 as libc::gid_t; 1024];
    // SAFETY: `groups` has room for the 1024 ids getgroups may write.
    let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
    groups.truncate(n.max(0) as usize);
    if m.gid() == egid || groups.contains(&m.gid()) {
        "g"
    } else {
        "o"
    }
}

/// The fix for a folder on the way to `path` that this user may not search, if there is
/// one: `; folder D lacks search (x) permission for user U (uid N): ...`.
pub fn unsearchable_hint(path: &Path) -> Option<String> {
    let d = unsearchable_ancestor(path)?;
    Some(format!(
        "; folder {} lacks search (x) permission for {}: let it in (`chmod {}+x {}`, by the \
         folder's owner) or choose a path it can reach",
        d.display(),
        who(),
        whose(&d),
        d.display()
    ))
}

/// What to add to the message of `e`, an error reading the file `path`: where this user is
/// kept out and the fix; nothing for other errors.
pub fn why_unreadable(path: &Path, e: &io::Error) -> String {
    if e.kind() != io::ErrorKind::PermissionDenied {
        return String::new();
    }
    unsearchable_hint(path).unwrap_or_else(|| {
        format!(
            "; {} may not read it: let it read the file (`chmod {}+r {}`, by the file's \
             owner) or use a copy it can read",
            who(),
            whose(path),
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_permission_errors_get_a_hint() {
        let e = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(why_unreadable(Path::new("/nonexistent/x"), &e), "");
        assert!(unsearchable_ancestor(Path::new("/tmp/x/y")).is_none());
        assert!(who().contains(&format!("uid {}", crate::sys::euid())));
    }
}
