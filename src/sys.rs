//! Thin, safe wrappers over the few libc calls std does not offer (xattrs, statvfs, flock,
//! utimensat, fallocate, posix_fadvise). Each returns `io::Result` with the OS error.
//!
//! The path-taking ones are for paths outside a tier's data (the export's destination, a
//! tier folder's own setup); a tier's files, folders and pieces are reached only through
//! [`crate::tier::beneath`].

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The alignment of offsets, lengths and buffers that O_DIRECT asks for on every file system
/// tierfs meets (4 KiB sectors and pages).
pub const DIRECT_ALIGN: usize = 4096;

/// Whether the file system holding `dir` accepts an O_DIRECT write of `len` bytes at offset
/// 0 from a [`DIRECT_ALIGN`]-aligned buffer (in a file made and removed for the test).
pub fn dir_accepts_direct_io_of(dir: &Path, len: usize) -> bool {
    use std::fs::OpenOptions;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let p = dir.join(format!(".tierfs-dio-{}", std::process::id()));
    // An aligned part of a larger zeroed buffer: what O_DIRECT needs, without an allocation
    // of a layout of its own.
    let raw = vec![0u8; len + DIRECT_ALIGN];
    let at = raw.as_ptr().align_offset(DIRECT_ALIGN);
    let buf = &raw[at..at + len];
    let r = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .and_then(|f| f.write_all_at(buf, 0));
    let _ = std::fs::remove_file(&p);
    r.is_ok()
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn cname(n: &OsStr) -> io::Result<CString> {
    CString::new(n.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check_size(r: libc::ssize_t) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Runs a size-returning call (an xattr read or list) twice: once with a null buffer for
/// the length, then with a buffer that long; again if the value grew in between (ERANGE).
pub(crate) fn sized(
    mut call: impl FnMut(*mut libc::c_void, usize) -> libc::ssize_t,
) -> io::Result<Vec<u8>> {
    loop {
        let len = check_size(call(std::ptr::null_mut(), 0))?;
        let mut buf = vec![0u8; len];
        match check_size(call(buf.as_mut_ptr().cast(), buf.len())) {
            Ok(got) => {
                buf.truncate(got);
                return Ok(buf);
            }
            // The value grew between the two calls: ask again.
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The names in a NUL-separated xattr name list.
pub(crate) fn split_names(list: &[u8]) -> Vec<Vec<u8>> {
    list.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| s.to_vec())
        .collect()
}

/// Reads an xattr of `path` (not following a final symlink).
pub fn lgetxattr(path: &Path, name: &OsStr) -> io::Result<Vec<u8>> {
    let p = cpath(path)?;
    let n = cname(name)?;
    // SAFETY: p and n are valid NUL-terminated strings; `sized` passes a buffer valid for
    // writes of the given length, or null with 0 (which asks only for the length).
    sized(|buf, len| unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf, len) })
}

/// Sets an xattr of `path` (not following a final symlink). `flags`: XATTR_CREATE/REPLACE.
pub fn lsetxattr(path: &Path, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
    let p = cpath(path)?;
    let n = cname(name)?;
    // SAFETY: valid strings; value is valid for reads of value.len() bytes.
    check(unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
}

/// Lists xattr names of `path` (not following a final symlink).
pub fn llistxattr(path: &Path) -> io::Result<Vec<Vec<u8>>> {
    let p = cpath(path)?;
    // SAFETY: p is a valid string; `sized` passes a buffer valid for writes of the given
    // length, or null with 0.
    sized(|buf, len| unsafe { libc::llistxattr(p.as_ptr(), buf.cast(), len) })
        .map(|b| split_names(&b))
}

/// Removes an xattr of `path` (not following a final symlink).
pub fn lremovexattr(path: &Path, name: &OsStr) -> io::Result<()> {
    let p = cpath(path)?;
    let n = cname(name)?;
    // SAFETY: valid NUL-terminated strings.
    check(unsafe { libc::lremovexattr(p.as_ptr(), n.as_ptr()) })
}

/// Filesystem space of the filesystem holding `path`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Space {
    pub block_size: u64,
    pub total: u64,
    pub free: u64,
    pub avail: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u64,
}

pub fn statvfs(path: &Path) -> io::Result<Space> {
    let p = cpath(path)?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: p is a valid string and s a valid out-pointer.
    check(unsafe { libc::statvfs(p.as_ptr(), &mut s) })?;
    let f = s.f_frsize as u64;
    Ok(Space {
        block_size: f,
        total: s.f_blocks as u64 * f,
        free: s.f_bfree as u64 * f,
        avail: s.f_bavail as u64 * f,
        files: s.f_files as u64,
        files_free: s.f_ffree as u64,
        name_max: s.f_namemax as u64,
    })
}

/// Takes an exclusive, non-blocking flock on `fd`.
pub fn try_lock_exclusive(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fd is a valid open descriptor for the duration of the call.
    check(unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) })
}

/// Releases an flock taken with [`try_lock_exclusive`].
pub fn unlock(fd: BorrowedFd<'_>) {
    // SAFETY: fd is a valid open descriptor for the duration of the call.
    unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_UN) };
}

/// A stat timestamp (seconds and nanoseconds since the epoch, possibly negative) as a
/// `SystemTime`.
pub fn time_of(secs: i64, nsecs: i64) -> std::time::SystemTime {
    use std::time::{Duration, UNIX_EPOCH};
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nsecs as u64)
    }
}

/// A time to set with utimensat: `None` leaves it unchanged.
#[derive(Debug, Clone, Copy)]
pub enum SetTime {
    Omit,
    Now,
    At(std::time::SystemTime),
}

pub(crate) fn timespec(t: SetTime) -> libc::timespec {
    match t {
        SetTime::Omit => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        SetTime::Now => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        SetTime::At(t) => {
            let (sec, nsec) = match t.duration_since(std::time::UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
                Err(e) => {
                    let d = e.duration();
                    let mut s = -(d.as_secs() as i64);
                    let mut n = -(d.subsec_nanos() as i64);
                    if n < 0 {
                        s -= 1;
                        n += 1_000_000_000;
                    }
                    (s, n)
                }
            };
            libc::timespec {
                tv_sec: sec as libc::time_t,
                tv_nsec: nsec as _,
            }
        }
    }
}

/// Sets atime/mtime of `path` without following a final symlink.
pub fn lutimens(path: &Path, atime: SetTime, mtime: SetTime) -> io::Result<()> {
    let p = cpath(path)?;
    let ts = [timespec(atime), timespec(mtime)];
    // SAFETY: p is valid; ts is an array of two timespecs as utimensat requires.
    check(unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            p.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// Sets atime/mtime of an open file.
pub fn futimens(fd: BorrowedFd<'_>, atime: SetTime, mtime: SetTime) -> io::Result<()> {
    let ts = [timespec(atime), timespec(mtime)];
    // SAFETY: fd is valid for the call; ts is an array of two timespecs as futimens requires.
    check(unsafe { libc::futimens(fd.as_raw_fd(), ts.as_ptr()) })
}

/// fallocate(2) on an open file.
pub fn fallocate(fd: BorrowedFd<'_>, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: fd is valid for the call; fallocate has no memory arguments.
    check(unsafe {
        libc::fallocate(
            fd.as_raw_fd(),
            mode,
            offset as libc::off_t,
            len as libc::off_t,
        )
    })
}

/// mknod(2) for FIFOs and sockets.
pub fn mknod(path: &Path, mode: u32, rdev: u64) -> io::Result<()> {
    let p = cpath(path)?;
    // SAFETY: p is a valid string.
    check(unsafe { libc::mknod(p.as_ptr(), mode as libc::mode_t, rdev as libc::dev_t) })
}

/// renameat2 with flags (RENAME_NOREPLACE / RENAME_EXCHANGE).
pub fn rename2(from: &Path, to: &Path, flags: u32) -> io::Result<()> {
    let f = cpath(from)?;
    let t = cpath(to)?;
    // SAFETY: valid strings; AT_FDCWD resolves them as absolute paths.
    check(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            flags,
        )
    })
}

/// Hands the allocator's free memory back to the kernel. glibc keeps freed blocks in its
/// arenas (1 MiB blocks stop being mmapped once its threshold has risen past them), where
/// they still count against the memory cgroup: memory the cache gives up under pressure
/// must leave the process, not only the cache.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only walks glibc's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Nanoseconds the calling thread has spent runnable but waiting for a core (the second
/// field of `/proc/thread-self/schedstat`), or `None` where the kernel does not keep it.
/// A tier request's wall time includes this wait; on a machine short of cores it would
/// read as a slow tier (the bandwidth estimates take it out, [`crate::tier::NetBusy`]).
/// One `pread` of a file each thread opens once: about a microsecond.
pub fn thread_run_delay_ns() -> Option<u64> {
    use std::os::unix::fs::FileExt;
    thread_local! {
        static SCHEDSTAT: Option<std::fs::File> =
            std::fs::File::open("/proc/thread-self/schedstat").ok();
    }
    SCHEDSTAT.with(|f| {
        let mut buf = [0u8; 96];
        let n = f.as_ref()?.read_at(&mut buf, 0).ok()?;
        parse_run_delay(&buf[..n])
    })
}

/// Microseconds during which at least one task on this machine was runnable but waiting
/// for a core (the `some ... total=` field of `/proc/pressure/cpu`, PSI), or `None` where
/// the kernel keeps no pressure figures (`CONFIG_PSI` off, or `psi=0`).
pub fn cpu_pressure_some_us() -> Option<u64> {
    parse_pressure_some(&std::fs::read("/proc/pressure/cpu").ok()?)
}

/// The `total=` of the `some` line of a PSI file.
fn parse_pressure_some(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text)
        .ok()?
        .lines()
        .find(|l| l.starts_with("some "))?
        .split_ascii_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// The run delay from a schedstat line: `<on-cpu ns> <run delay ns> <timeslices>`.
fn parse_run_delay(line: &[u8]) -> Option<u64> {
    std::str::from_utf8(line)
        .ok()?
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Whether `uid` is the effective user of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Eight bytes from the kernel's random pool (`getrandom(2)`, which does not block once the
/// pool is ready at boot): tokens a peer must not guess.
pub fn random_u64() -> io::Result<u64> {
    let mut b = [0u8; 8];
    // SAFETY: getrandom(2) writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        Ok(u64::from_le_bytes(b))
    } else if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Err(io::Error::other("getrandom(2) returned too few bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_pressure_is_the_total_of_the_some_line() {
        let psi = b"some avg10=0.00 avg60=1.50 avg300=0.00 total=1253122423\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=7\n";
        assert_eq!(parse_pressure_some(psi), Some(1253122423));
        assert_eq!(parse_pressure_some(b"full avg10=0.00 total=7\n"), None);
        assert_eq!(parse_pressure_some(b"some avg10=0.00 total=x\n"), None);
        assert_eq!(parse_pressure_some(b""), None);
    }

    #[test]
    fn run_delay_is_the_second_schedstat_field_and_grows_with_contention() {
        assert_eq!(parse_run_delay(b"123 456 7\n"), Some(456));
        assert_eq!(parse_run_delay(b"123"), None);
        assert_eq!(parse_run_delay(b"x y z"), None);
        let before = thread_run_delay_ns()
            .expect("/proc/thread-self/schedstat (a kernel with CONFIG_SCHED_INFO)");
        // More spinning threads than cores: this thread must wait for a core at some point.
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinners: Vec<_> = (0..cores * 2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let t0 = std::time::Instant::now();
        let mut after = before;
        while after == before && t0.elapsed() < std::time::Duration::from_secs(10) {
            let mut x = 0u64;
            for i in 0..1_000_000u64 {
                x = x.wrapping_add(std::hint::black_box(i));
            }
            std::hint::black_box(x);
            after = thread_run_delay_ns().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for s in spinners {
            s.join().unwrap();
        }
        assert!(after > before, "no run delay seen in 10 s of contention");
    }

    #[test]
    fn xattr_round_trip_and_space() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        match lsetxattr(&f, OsStr::new("user.t"), b"v", 0) {
            Ok(()) => {
                assert_eq!(lgetxattr(&f, OsStr::new("user.t")).unwrap(), b"v");
                assert!(llistxattr(&f).unwrap().contains(&b"user.t".to_vec()));
                lremovexattr(&f, OsStr::new("user.t")).unwrap();
                assert!(lgetxattr(&f, OsStr::new("user.t")).is_err());
            }
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP)),
        }
        let s = statvfs(d.path()).unwrap();
        assert!(s.total > 0 && s.avail <= s.total);
    }
}
