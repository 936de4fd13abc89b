//! `${NAME}` in the paths and ids of a config file: what a name expands to on this node,
//! and the expanded path checked to be absolute and plain. A variable that is not set is an
//! error rather than an empty string, because a vanished path part would point a tier at
//! its parent folder.

use std::ffi::CStr;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Expands `${...}` in a path as written and checks the result with [`normalize_absolute`];
/// errors quote what was written (and what it expanded to, where that differs).
pub(super) fn expand_path(
    written: &str,
    vars: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, String> {
    let expanded = expand_with(written, vars)?;
    normalize_absolute(&expanded).map_err(|why| {
        if expanded == written {
            format!("{written:?} {why}")
        } else {
            format!("{written:?} (expanded: {expanded:?}) {why}")
        }
    })
}

/// Checks an expanded path is absolute and returns it without `.` components or repeated
/// and trailing slashes, so that the nesting check compares like with like.
fn normalize_absolute(p: &str) -> Result<PathBuf, String> {
    if p.contains('\0') {
        return Err("contains a NUL character".into());
    }
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err("is not absolute; write the full path, starting with \"/\"".into());
    }
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::Normal(x) => out.push(x),
            Component::ParentDir | Component::Prefix(_) => {
                return Err("contains \"..\"; write the folder without \"..\"".into());
            }
        }
    }
    Ok(out)
}

/// Expands `${NAME}` in `s` with the values of this process ([`process_var`]). Only the
/// braced form expands; a lone `$` (as in `$HOSTNAME`) is kept as written.
pub fn expand_vars(s: &str) -> Result<String, String> {
    expand_with(s, &process_var)
}

/// The value `${name}` has for this process, `None` when it has none.
///
/// `HOSTNAME` is always this node's name (`gethostname`), never the environment's
/// `$HOSTNAME`: Slurm and PBS copy the submitting shell's environment into the job, so there
/// `$HOSTNAME` can name the login node, and every node of a job would share one tier folder.
/// `USER` and `HOME` fall back to the passwd entry of the effective uid where the
/// environment lacks them (cron, `env -i`). Everything else comes from the environment:
/// `${SLURM_JOB_ID}`, `${PBS_JOBID}`, `${TMPDIR}`, or a variable the job script exports.
pub fn process_var(name: &str) -> Option<String> {
    match name {
        "HOSTNAME" => hostname().ok(),
        "USER" => user_name().ok(),
        "HOME" => home_dir().ok(),
        _ => std::env::var(name).ok(),
    }
}

/// Whether `name` can be a variable's name: `[A-Za-z_][A-Za-z0-9_]*`, as in the shell.
fn is_var_name(name: &str) -> bool {
    let mut b = name.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Expands every `${NAME}` of `s` through `lookup`. A variable that is not set, or set to
/// nothing, is an error naming it: a path part that silently vanishes would point the tier
/// at its parent folder, which scratch mode empties at unmount.
pub(super) fn expand_with(
    s: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!(
                "{s:?} has a \"${{\" without a closing \"}}\"; write variables as ${{NAME}}"
            ));
        };
        let var = &after[..end];
        if !is_var_name(var) {
            return Err(format!(
                "{s:?} has ${{{var}}}, which is not a variable name; write ${{NAME}} with \
                 letters, digits and '_', not starting with a digit"
            ));
        }
        match lookup(var) {
            None => {
                return Err(format!(
                    "{s:?} uses ${{{var}}}, which is not set in the environment; set it \
                     (`export {var}=...`, in a batch job before tierfs runs) or write the \
                     folder out"
                ))
            }
            Some(v) if v.is_empty() => {
                return Err(format!(
                    "{s:?} uses ${{{var}}}, which is set but empty; give it a value or \
                     write the folder out"
                ))
            }
            Some(v) => out.push_str(&v),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// This node's host name, as `${HOSTNAME}` expands: `gethostname(2)`, else
/// /proc/sys/kernel/hostname.
pub fn hostname() -> io::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration of the call.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        if let Ok(name) = std::str::from_utf8(&buf[..end]) {
            if !name.is_empty() {
                return Ok(name.to_string());
            }
        }
    }
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")?
        .trim()
        .to_string();
    if name.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the host name is empty",
        ));
    }
    Ok(name)
}

/// The user name, as `${USER}` expands: `$USER`, else the passwd entry of the effective uid.
pub fn user_name() -> io::Result<String> {
    match std::env::var("USER") {
        Ok(u) if !u.is_empty() => Ok(u),
        _ => Ok(passwd_entry()?.0),
    }
}

/// The home folder, as `${HOME}` expands: `$HOME`, else the passwd entry of the effective uid.
pub fn home_dir() -> io::Result<String> {
    match std::env::var("HOME") {
        Ok(h) if !h.is_empty() => Ok(h),
        _ => Ok(passwd_entry()?.1),
    }
}

/// (name, home folder) of the effective uid, from `getpwuid_r(3)`.
pub(super) fn passwd_entry() -> io::Result<(String, String)> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: `passwd` is a plain C struct of integers and pointers, for which all-zero
        // is a valid (if meaningless) value; getpwuid_r overwrites it.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: `pwd` and `result` are live locals,
        // and `buf` is writable for `buf.len()` bytes.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < (1 << 20) {
            let len = buf.len() * 4;
            buf.resize(len, 0);
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        if result.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no passwd entry for uid {uid}"),
            ));
        }
        // SAFETY: on success pw_name and pw_dir point to NUL-terminated strings inside
        // `buf`, which is alive and unmodified until the end of this block.
        let (name, dir) = unsafe {
            (
                CStr::from_ptr(pwd.pw_name).to_string_lossy().into_owned(),
                CStr::from_ptr(pwd.pw_dir).to_string_lossy().into_owned(),
            )
        };
        return Ok((name, dir));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MountConfig;

    #[test]
    fn expansion() {
        let look = |v: &str| -> Option<String> {
            match v {
                "UNSET" => None,
                "EMPTY" => Some(String::new()),
                _ => Some(format!("<{v}>")),
            }
        };
        assert_eq!(
            expand_with("/a/${HOSTNAME}/${USER}", &look).unwrap(),
            "/a/<HOSTNAME>/<USER>"
        );
        assert_eq!(
            expand_with("/a/$HOSTNAME/$", &look).unwrap(),
            "/a/$HOSTNAME/$"
        );
        assert_eq!(expand_with("${HOME}", &look).unwrap(), "<HOME>");
        // Any variable of the environment, e.g. a batch system's job id.
        assert_eq!(
            expand_with("/s/${SLURM_JOB_ID}-${_x1}", &look).unwrap(),
            "/s/<SLURM_JOB_ID>-<_x1>"
        );
        let e = expand_with("/a/${UNSET}/b", &look).unwrap_err();
        assert!(e.contains("${UNSET}, which is not set"), "{e}");
        let e = expand_with("/a/${EMPTY}/b", &look).unwrap_err();
        assert!(e.contains("${EMPTY}, which is set but empty"), "{e}");
        assert!(expand_with("/a/${HOSTNAME", &look)
            .unwrap_err()
            .contains("closing"));
        for bad in ["${}", "${1A}", "${A-B}", "${A B}"] {
            let e = expand_with(bad, &look).unwrap_err();
            assert!(e.contains("is not a variable name"), "{bad}: {e}");
        }
        assert!(!hostname().unwrap().is_empty());
        assert!(!user_name().unwrap().is_empty());
        // ${HOSTNAME} is the node's own name whatever the environment says.
        assert_eq!(process_var("HOSTNAME"), hostname().ok());
        // A container may run under a uid with no passwd entry; then there is nothing to check.
        if let Ok((name, _)) = passwd_entry() {
            assert!(!name.is_empty());
        }
    }

    #[test]
    fn job_variables_in_paths_name_the_key_when_unset() {
        let text = "[[tier]]\nname = 'a'\npath = '/scratch/${SLURM_JOB_ID}/a'\n\
                    [mount]\nlog_file = '/tmp/${TMPDIR_X}/log'\n";
        let job = |v: &str| (v == "SLURM_JOB_ID").then(|| "4242".to_string());
        let e = MountConfig::parse_with_vars(text, Path::new("/j.toml"), &job)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/j.toml: mount.log_file: \"/tmp/${TMPDIR_X}/log\" uses ${TMPDIR_X}, which is not set"),
            "{e}"
        );
        assert!(!e.contains("tier[0].path"), "{e}");
        let all = |v: &str| Some(format!("v-{v}"));
        let c = MountConfig::parse_with_vars(text, Path::new("/j.toml"), &all).unwrap();
        assert_eq!(c.tiers[0].path, Path::new("/scratch/v-SLURM_JOB_ID/a"));
        assert_eq!(
            c.mount.log_file.as_deref(),
            Some(Path::new("/tmp/v-TMPDIR_X/log"))
        );
    }
}
