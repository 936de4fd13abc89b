//! `tierfs run -- COMMAND`: the program with the preload library on `LD_PRELOAD`.
//!
//! The library is found beside the running `tierfs` binary (`cargo build --release` puts
//! `libtierfs_preload.so` there; an install copies both; in a build tree also its `deps/`,
//! where `cargo test` leaves it), or where `TIERFS_PRELOAD` says.
//! The command replaces this process (exec), so its exit status, signals and job control
//! are its own.

use crate::error::failure::Failure;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The library's file name.
pub const LIBRARY: &str = "libtierfs_preload.so";

/// Where the preload library is: `TIERFS_PRELOAD`, else beside this binary.
pub fn library() -> Result<PathBuf, Failure> {
    if let Some(p) = std::env::var_os("TIERFS_PRELOAD") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(Failure::usage(format!(
                "TIERFS_PRELOAD names {}, which is not a file; unset it to use the library \
                 beside tierfs",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::runtime(format!("cannot find the tierfs binary: {e}")))?;
    let dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    let lib = dir.join(LIBRARY);
    // In a build tree `cargo test` leaves it in deps/ only (`cargo build` copies it up):
    // the newer of the two.
    let newest = [lib.clone(), dir.join("deps").join(LIBRARY)]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p);
    if let Some(lib) = newest {
        Ok(lib)
    } else {
        Err(Failure::runtime(format!(
            "the preload library {} is missing; `cargo build --release` builds it beside \
             target/release/tierfs, and an install copies it beside the tierfs binary \
             (or set TIERFS_PRELOAD=PATH)",
            lib.display()
        )))
    }
}

/// `LD_PRELOAD` with `lib` first, keeping what was there (once).
pub fn preload_value(lib: &OsStr, current: Option<&OsStr>) -> OsString {
    let mut v = OsString::from(lib);
    if let Some(cur) = current {
        for part in cur.as_bytes().split(|c| *c == b':' || *c == b' ') {
            if part.is_empty() || part == lib.as_bytes() {
                continue;
            }
            v.push(":");
            v.push(OsStr::from_bytes(part));
        }
    }
    v
}

/// `tierfs run`.
pub fn run(print_library: bool, command: &[OsString]) -> Result<(), Failure> {
    let lib = library()?;
    if print_library {
        println!("{}", lib.display());
        return Ok(());
    }
    let Some((prog, args)) = command.split_first() else {
        return Err(Failure::usage(
            "give the command to run after `--`, e.g. `tierfs run -- python train.py`",
        ));
    };
    let value = preload_value(lib.as_os_str(), std::env::var_os("LD_PRELOAD").as_deref());
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(prog)
        .args(args)
        .env("LD_PRELOAD", value)
        .exec();
    let code = if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Err(Failure {
        code,
        message: format!("cannot run {}: {e}", prog.to_string_lossy()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_goes_first_and_once() {
        let lib = OsStr::new("/opt/t/libtierfs_preload.so");
        assert_eq!(preload_value(lib, None), lib);
        assert_eq!(
            preload_value(
                lib,
                Some(OsStr::new("/a.so /opt/t/libtierfs_preload.so:/b.so"))
            ),
            OsStr::new("/opt/t/libtierfs_preload.so:/a.so:/b.so")
        );
    }
}
