//! The library `tierfs run` preloads (`LD_PRELOAD`): a program's opens of DeepSpeed's
//! swap files and of anything `O_DIRECT` on a tierfs mount get the tier files' own
//! descriptors, so their bytes never cross FUSE (where the kernel copies every `O_DIRECT`
//! payload into the daemon, and without root there is no kernel passthrough).
//!
//! How, per open under a mount ([`mounts`]): the open goes through FUSE as usual (the
//! kernel checks permissions and does `O_CREAT`/`O_TRUNC`/`O_EXCL`); then the library asks
//! the mount's daemon for the pieces behind that descriptor, passing it along as proof
//! ([`client`]). On a grant:
//! - a file whole on one tier: the piece's descriptor is installed at the program's fd
//!   number, and the FUSE descriptor moves to a high number and stays open as the *lease*
//!   (the daemon keeps the file's pieces where they are while it is open, and learns of its
//!   end from the kernel when it closes, also if the program is killed). Every call, raw
//!   syscalls, io_uring and libaio included, then works on the tier file itself;
//! - a striped file: the program's fd stays the FUSE descriptor (so whatever the library
//!   does not wrap is still exact, through FUSE), and the library splits the calls it wraps
//!   over the pieces itself: `pread`/`pwrite`/`read`/`write` and libaio's
//!   `io_submit`/`io_getevents`/`io_pgetevents` ([`striped`], [`aio`]).
//!
//! Anything else, an error or a "no" included, leaves the FUSE descriptor as it was: the
//! program runs as without the library, slower. An error says so once on stderr
//! (`tierfs: WARNING: ...`); success is silent. When the program closes a direct
//! descriptor, what it moved goes back to the daemon ([`stats`]) for its counters and
//! bandwidth estimates. Outside tierfs mounts an open costs a check of the path against the
//! mount list (no system call for an absolute path).
//!
//! `TIERFS_DIRECT=0` turns the library off; `TIERFS_DIRECT_ALL=1` asks for every open of a
//! regular file under a mount, not only `O_DIRECT` and swap files (the daemon still
//! decides).

// The C functions (`export`) are left out of the unit tests, which would otherwise
// interpose them on the test binary itself; what only they use is then unused there.
#![cfg_attr(test, allow(dead_code))]

pub mod aio;
mod backoff;
mod client;
mod fdtable;
pub mod mounts;
mod real;
mod stats;
pub mod striped;

#[cfg(not(test))]
mod export;

/// Prints one line to stderr (the program's), as `tierfs: WARNING: ...`, for an error
/// that sends an open back to FUSE: once per `key` (the error without the file's name, so a
/// daemon out of reach is one line, naming the first file, not one per file).
fn warn_once(key: &str, msg: &str) {
    use std::sync::Mutex;
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut seen = match SEEN.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    if seen.iter().any(|s| s == key) || seen.len() > 32 {
        return;
    }
    seen.push(key.to_string());
    drop(seen);
    let line = format!("tierfs: WARNING: {msg} (this file goes through FUSE)\n");
    // SAFETY: write(2) of our own buffer to stderr.
    unsafe { real::write(2, line.as_ptr() as *const libc::c_void, line.len()) };
}

/// The tierfs mounts of this process, read from `/proc/self/mountinfo` the first time
/// they are needed (with the real functions: the library's own `open` is what asks).
fn mounts_known() -> &'static [mounts::Mount] {
    static MOUNTS: std::sync::OnceLock<Vec<mounts::Mount>> = std::sync::OnceLock::new();
    MOUNTS.get_or_init(|| {
        let mut text = Vec::new();
        // SAFETY: a NUL-terminated constant path; the descriptor is ours, closed below.
        let fd = unsafe {
            real::openat(
                libc::AT_FDCWD,
                c"/proc/self/mountinfo".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Vec::new();
        }
        let mut buf = [0u8; 16384];
        loop {
            // SAFETY: read(2) into our buffer.
            let n = unsafe { real::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
            if n <= 0 {
                break;
            }
            text.extend_from_slice(&buf[..n as usize]);
        }
        // SAFETY: our descriptor, closed once.
        unsafe { real::close(fd) };
        mounts::parse(&String::from_utf8_lossy(&text))
    })
}

/// `TIERFS_DIRECT_ALL=1`: ask the daemon about every open of a regular file on a mount.
fn ask_all() -> bool {
    static ALL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALL.get_or_init(|| std::env::var_os("TIERFS_DIRECT_ALL").is_some_and(|v| v == "1"))
}
