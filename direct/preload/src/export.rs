//! The C functions the library puts in front of libc's (and libaio's). Each one does the
//! real call and, for descriptors the library tracks, what keeps them exact; for every
//! other descriptor it only costs a look at the table's count.
//!
//! The variadic `open` family and `fcntl` are defined with their optional argument as a
//! plain one: the C calling conventions of the architectures tierfs runs on (x86-64,
//! AArch64 Linux) pass it in the same register either way.

#![allow(clippy::missing_safety_doc)]

use crate::aio::{self, Event, Iocb};
use crate::fdtable::{self, Direct, Shape};
use crate::stats::now_ns;
use crate::{client, mounts::Mount, real, striped};
use libc::{c_char, c_int, c_long, c_uint, c_void, off_t, size_t, ssize_t};
use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use tierfs_wire::{NoReason, Reply, Shape as WireShape};

fn errno() -> c_int {
    // SAFETY: __errno_location is always valid for the calling thread.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

/// Where the library keeps its own descriptors (leases, stripe pieces): high numbers,
/// out of the way of a program that counts on getting the lowest free one.
fn private_min() -> c_long {
    static MIN: AtomicI32 = AtomicI32::new(0);
    let v = MIN.load(Ordering::Relaxed);
    if v > 0 {
        return v as c_long;
    }
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) into a struct we own.
    let cur = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 {
        r.rlim_cur.min(1 << 20) as i32
    } else {
        1024
    };
    let v = (cur / 4 * 3).max(64);
    MIN.store(v, Ordering::Relaxed);
    v as c_long
}

/// Moves descriptor `fd` to a high number (close-on-exec as `cloexec` says); the old
/// number is closed. `None` leaves `fd` as it was.
unsafe fn to_private(fd: c_int, cloexec: bool) -> Option<c_int> {
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    // SAFETY: fcntl on a descriptor of ours.
    let n = unsafe { real::fcntl(fd, cmd, private_min()) };
    if n < 0 {
        return None;
    }
    // SAFETY: the old number is ours; the new one holds the description.
    unsafe { real::close(fd) };
    Some(n)
}

/// After a successful open of `path` with `flags` as `fd`: asks for the direct path where
/// it may apply. Returns `fd` (now perhaps the piece's own descriptor); errno is kept.
unsafe fn opened(fd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if fd < 0 || path.is_null() || client::disabled() {
        return fd;
    }
    if flags & (libc::O_PATH | libc::O_DIRECTORY) != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE
    {
        return fd;
    }
    // SAFETY: the program passed a NUL-terminated path, which the open just used.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    let want = flags & libc::O_DIRECT != 0 || p.ends_with(b".tensor.swp") || crate::ask_all();
    if !want {
        return fd;
    }
    let mounts = crate::mounts_known();
    if mounts.is_empty() {
        return fd;
    }
    // An absolute path outside every mount needs no system call to tell.
    if p.first() == Some(&b'/') && !mounts.iter().any(|m| m.contains(p)) {
        return fd;
    }
    let saved = errno();
    // SAFETY: stat is plain old data; fstat(2) into it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on the descriptor just opened.
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    let m = mounts.iter().find(|m| m.dev() == st.st_dev);
    let out = match m {
        Some(m) if ok && st.st_mode & libc::S_IFMT == libc::S_IFREG => {
            // SAFETY: `fd` is the program's fresh descriptor of a file on `m`.
            unsafe { attach(fd, m, flags, p) }
        }
        _ => fd,
    };
    set_errno(saved);
    out
}

/// Asks `m`'s daemon for the pieces behind `fd` and installs them.
unsafe fn attach(fd: c_int, m: &Mount, flags: c_int, path: &[u8]) -> c_int {
    let name = String::from_utf8_lossy(path);
    let close_all = |fds: &[c_int]| {
        for f in fds {
            // SAFETY: descriptors the daemon handed us, closed once.
            unsafe { real::close(*f) };
        }
    };
    let now = now_ns();
    if !crate::backoff::asking(m.dev(), now) {
        return fd;
    }
    let answer = client::ask(m, fd, flags);
    let policy = matches!(&answer, Ok((Reply::No { why, .. }, _)) if *why == NoReason::Policy);
    crate::backoff::answered(m.dev(), policy, now);
    let (grant, fds) = match answer {
        Ok((Reply::Grant(g), fds)) if fds.len() == g.tiers.len() => (g, fds),
        Ok((Reply::Grant(_), fds)) => {
            close_all(&fds);
            let why = "the daemon sent the wrong number of descriptors";
            crate::warn_once(why, &format!("{name}: {why}"));
            return fd;
        }
        Ok((Reply::No { why, text }, fds)) => {
            close_all(&fds);
            if why.is_error() {
                crate::warn_once(&text, &format!("{name}: {text}"));
            }
            return fd;
        }
        Err(e) => {
            crate::warn_once(&e, &format!("{name}: {e}"));
            return fd;
        }
    };
    let pieces = grant
        .tiers
        .iter()
        .map(|t| crate::stats::Piece::new(*t))
        .collect();
    let cloexec = flags & libc::O_CLOEXEC != 0;
    let shape = match grant.shape {
        WireShape::Whole => {
            // SAFETY: `fd` is the program's; the lease takes its FUSE description.
            let lease = unsafe {
                real::fcntl(
                    fd,
                    if cloexec {
                        libc::F_DUPFD_CLOEXEC
                    } else {
                        libc::F_DUPFD
                    },
                    private_min(),
                )
            };
            let fd_flags = if cloexec { libc::O_CLOEXEC } else { 0 };
            // SAFETY: the piece replaces the program's descriptor at its number (only once
            // the lease holds the FUSE description).
            let installed = lease >= 0 && unsafe { real::dup3(fds[0], fd, fd_flags) } >= 0;
            if !installed {
                if lease >= 0 {
                    // SAFETY: our own duplicate, closed once.
                    unsafe { real::close(lease) };
                }
                close_all(&fds);
                let why = "cannot install the tier file's descriptor";
                crate::warn_once(why, &format!("{name}: {why}"));
                return fd;
            }
            close_all(&fds);
            Shape::Whole {
                lease: AtomicI32::new(lease),
            }
        }
        WireShape::Stripe { unit, pattern } => {
            let mut mine = Vec::with_capacity(fds.len());
            for f in &fds {
                // SAFETY: a descriptor the daemon handed us.
                match unsafe { to_private(*f, true) } {
                    Some(n) => mine.push(n),
                    None => {
                        close_all(&mine);
                        close_all(&fds[mine.len()..]);
                        crate::warn_once(
                            "out of descriptors",
                            &format!("{name}: out of descriptors"),
                        );
                        return fd;
                    }
                }
            }
            Shape::Stripe {
                map: tierfs_wire::stripe::StripeMap::new(unit, pattern),
                fds: mine.into_iter().map(AtomicI32::new).collect(),
            }
        }
    };
    let d = Arc::new(Direct {
        dev: m.dev(),
        ino: grant.ino,
        shape,
        pieces,
    });
    fdtable::install(fd, d);
    fd
}

macro_rules! opens {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
            // SAFETY: the program's arguments, passed on.
            unsafe { opened(real::openat(libc::AT_FDCWD, path, flags, mode), path, flags) }
        }
    )*};
}
opens!(open, open64);

macro_rules! openats {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
            // SAFETY: the program's arguments, passed on.
            unsafe { opened(real::openat(dirfd, path, flags, mode), path, flags) }
        }
    )*};
}
openats!(openat, openat64);

macro_rules! fortified_opens {
    ($($name:ident),*) => {$(
        /// The `_FORTIFY_SOURCE` form: no mode (no `O_CREAT`).
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int) -> c_int {
            // SAFETY: the program's arguments, passed on.
            unsafe { opened(real::openat(libc::AT_FDCWD, path, flags, 0), path, flags) }
        }
    )*};
}
fortified_opens!(__open_2, __open64_2);

macro_rules! fortified_openats {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
            // SAFETY: the program's arguments, passed on.
            unsafe { opened(real::openat(dirfd, path, flags, 0), path, flags) }
        }
    )*};
}
fortified_openats!(__openat_2, __openat64_2);

macro_rules! creats {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: c_uint) -> c_int {
            let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
            // SAFETY: the program's arguments, passed on.
            unsafe { opened(real::openat(libc::AT_FDCWD, path, flags, mode), path, flags) }
        }
    )*};
}
creats!(creat, creat64);

/// Runs the real call `f`, then drops `gone` (closing what the library kept for it)
/// without letting that change the call's errno.
fn keeping_errno<R>(f: impl FnOnce() -> R, gone: Vec<Arc<Direct>>) -> R {
    let r = f();
    let e = errno();
    drop(gone);
    set_errno(e);
    r
}

/// `_exit` (and `_Exit`): the process's waiting reports go first (see `client::Pending`).
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    client::flush_pending();
    // SAFETY: ends the process as the program asked.
    unsafe { real::exit_now(status) }
}

#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    client::flush_pending();
    // SAFETY: as above.
    unsafe { real::exit_now(status) }
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fdtable::is_private(fd) {
        // The library's own (a program closing every number): it stays open, and the
        // program sees the close it asked for succeed.
        return 0;
    }
    let gone: Vec<_> = fdtable::take(fd).into_iter().collect();
    let striped = gone.iter().any(|d| matches!(d.shape, Shape::Stripe { .. }));
    // SAFETY: the program's argument.
    let r = keeping_errno(|| unsafe { real::close(fd) }, gone);
    if r < 0 && striped && errno() == libc::ENOTCONN {
        // A striped file's descriptor is FUSE's, and its daemon is gone: the close still
        // happened, and its bytes are in the pieces (fsync reached them, not FUSE).
        set_errno(0);
        return 0;
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    const CLOEXEC: c_int = 1 << 2; // CLOSE_RANGE_CLOEXEC
    if !fdtable::any() || flags & CLOEXEC != 0 {
        // SAFETY: the program's arguments.
        return unsafe { real::close_range(first, last, flags) };
    }
    // The library's own descriptors in the range are closed by their opens' ends, once.
    let mut spare = fdtable::private_in(first, last);
    spare.sort();
    let gone = fdtable::take_range(first, last);
    keeping_errno(
        || {
            let mut from = first;
            let mut r = 0;
            for s in spare.iter().map(|s| *s as c_uint) {
                if s > from {
                    // SAFETY: a sub-range of the program's range.
                    r = r.min(unsafe { real::close_range(from, s - 1, flags) });
                }
                from = s.saturating_add(1);
            }
            if from <= last && from != 0 {
                // SAFETY: as above.
                r = r.min(unsafe { real::close_range(from, last, flags) });
            }
            r
        },
        gone,
    )
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the program's argument.
    let n = unsafe { real::dup(fd) };
    if n >= 0 {
        if let Some(d) = fdtable::get(fd) {
            drop(fdtable::set(n, d));
        }
    }
    n
}

/// Before `new` is replaced: a descriptor of the library's sitting there moves out of
/// the way (to another high number, with its close-on-exec flag).
unsafe fn clear_target(new: c_int) {
    if !fdtable::is_private(new) {
        return;
    }
    // SAFETY: F_GETFD on our own descriptor.
    let cloexec = unsafe { real::fcntl(new, libc::F_GETFD, 0) } & libc::FD_CLOEXEC != 0;
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    // SAFETY: duplicates our descriptor to another high number; `new` is then the
    // program's to replace.
    let to = unsafe { real::fcntl(new, cmd, private_min()) };
    if to < 0 {
        return;
    }
    match fdtable::moved(new, to) {
        fdtable::Moved::Socket => client::moved(new, to),
        fdtable::Moved::Yes => {}
        // SAFETY: not ours after all (closed meanwhile): the copy goes.
        fdtable::Moved::No => unsafe {
            real::close(to);
        },
    }
}

unsafe fn duped(old: c_int, new: c_int, r: c_int) -> c_int {
    if r >= 0 && old != new {
        let prev = fdtable::take(new);
        if let Some(d) = fdtable::get(old) {
            drop(fdtable::set(new, d));
        }
        let e = errno();
        drop(prev);
        set_errno(e);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: the program's arguments.
    unsafe {
        clear_target(new);
        duped(old, new, real::dup2(old, new))
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: the program's arguments.
    unsafe {
        clear_target(new);
        duped(old, new, real::dup3(old, new, flags))
    }
}

/// Stops splitting a striped descriptor (and every number of the same open): from now on
/// all of its calls go through FUSE, exact whatever they are.
fn demote(fd: c_int) {
    if let Some(d) = fdtable::get(fd) {
        if matches!(d.shape, Shape::Stripe { .. }) {
            let gone = fdtable::take_all_of(&d);
            drop(d);
            let e = errno();
            drop(gone);
            set_errno(e);
        }
    }
}

macro_rules! fcntls {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
            if cmd == libc::F_SETFL {
                // O_DIRECT or O_APPEND changed on the FUSE descriptor would not reach the
                // pieces: a striped file goes back to FUSE.
                demote(fd);
            }
            // SAFETY: the program's arguments.
            let r = unsafe { real::fcntl(fd, cmd, arg) };
            if r >= 0 && (cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC) {
                if let Some(d) = fdtable::get(fd) {
                    drop(fdtable::set(r, d));
                }
            }
            r
        }
    )*};
}
fcntls!(fcntl, fcntl64);

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    if fd >= 0 {
        // Mapped pages of the FUSE file would not see the pieces' writes.
        demote(fd);
    }
    // SAFETY: the program's arguments.
    unsafe { real::mmap(addr, len, prot, flags, fd, off) }
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the program's arguments.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// A whole file's synchronous call, timed for the report. The tier file refuses an
/// `O_DIRECT` request its alignment rules do not allow (EINVAL), where FUSE takes any: such
/// a call goes through the lease (the FUSE descriptor, same file, same flags) instead, at
/// `off` or at the program's descriptor's offset, which then moves on as it would have.
unsafe fn timed(
    d: &Direct,
    fd: c_int,
    write: bool,
    buf: *mut u8,
    n: usize,
    off: Option<off_t>,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let dir = d.pieces[0].dir(write);
    let t0 = now_ns();
    dir.begin(t0);
    let r = call();
    dir.end(r.max(0) as u64, t0, now_ns());
    if r >= 0 || errno() != libc::EINVAL {
        return r;
    }
    let Shape::Whole { lease } = &d.shape else {
        return r;
    };
    let lease = lease.load(Ordering::Acquire);
    let at = match off {
        Some(o) => o,
        // SAFETY: lseek on the program's descriptor.
        None => unsafe { real::lseek64(fd, 0, libc::SEEK_CUR) },
    };
    if at < 0 {
        return r;
    }
    // SAFETY: the program's buffer of `n` bytes, on our lease.
    let r = unsafe {
        if write {
            real::pwrite64(lease, buf as *const c_void, n, at)
        } else {
            real::pread64(lease, buf as *mut c_void, n, at)
        }
    };
    if r > 0 && off.is_none() {
        // SAFETY: lseek/fcntl on the program's descriptor.
        unsafe {
            if write && real::fcntl(fd, libc::F_GETFL, 0) & libc::O_APPEND != 0 {
                real::lseek64(fd, 0, libc::SEEK_END);
            } else {
                real::lseek64(fd, at + r as off_t, libc::SEEK_SET);
            }
        }
    }
    r
}

/// `pread`/`pwrite` of a striped file over its pieces; reads past a piece's end inside the
/// file (a hole) read zeros, as the file would. A request a piece refuses for its `O_DIRECT`
/// alignment (EINVAL), which FUSE would take, goes whole through `fuse_fd` (the program's
/// own descriptor) instead.
unsafe fn stripe_rw(
    d: &Direct,
    fuse_fd: c_int,
    write: bool,
    buf: *mut u8,
    n: usize,
    off: u64,
) -> ssize_t {
    let Shape::Stripe { map, fds } = &d.shape else {
        return -1;
    };
    let fds: Vec<c_int> = fds.iter().map(|f| f.load(Ordering::Acquire)).collect();
    let mut size: Option<u64> = None;
    let mut refused = false;
    let r = striped::split(map, off, n, &mut |e| {
        let Some(i) = d.piece_of(e.tier) else {
            return Err(libc::EIO);
        };
        let dir = d.pieces[i].dir(write);
        let t0 = now_ns();
        dir.begin(t0);
        // SAFETY: `buf` holds `n` bytes (the program's), `e.buf + e.len <= n`.
        let r = unsafe {
            if write {
                real::pwrite64(
                    fds[i],
                    buf.add(e.buf) as *const c_void,
                    e.len,
                    e.local as off_t,
                )
            } else {
                real::pread64(
                    fds[i],
                    buf.add(e.buf) as *mut c_void,
                    e.len,
                    e.local as off_t,
                )
            }
        };
        dir.end(r.max(0) as u64, t0, now_ns());
        if r < 0 {
            refused |= errno() == libc::EINVAL;
            return Err(errno());
        }
        let mut got = r as usize;
        if !write && got < e.len {
            // Short: the file's end, or a hole before a later stripe.
            let size = *size.get_or_insert_with(|| file_size(map, &d.pieces, &fds));
            let logical = off + e.buf as u64 + got as u64;
            let zeros = size.saturating_sub(logical).min((e.len - got) as u64) as usize;
            // SAFETY: within the program's buffer, as above.
            unsafe { std::ptr::write_bytes(buf.add(e.buf + got), 0, zeros) };
            got += zeros;
        }
        Ok(got)
    });
    if refused {
        // SAFETY: the program's buffer and descriptor.
        return unsafe {
            if write {
                real::pwrite64(fuse_fd, buf as *const c_void, n, off as off_t)
            } else {
                real::pread64(fuse_fd, buf as *mut c_void, n, off as off_t)
            }
        };
    }
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// A striped file's size from its pieces' (as the daemon derives it).
fn file_size(
    map: &tierfs_wire::stripe::StripeMap,
    pieces: &[crate::stats::Piece],
    fds: &[c_int],
) -> u64 {
    pieces
        .iter()
        .zip(fds)
        .map(|(p, fd)| {
            // SAFETY: stat is plain old data; fstat(2) into it on our descriptor.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::fstat(*fd, &mut st) } != 0 {
                return 0;
            }
            map.logical_end(p.tier as usize, st.st_size as u64)
        })
        .max()
        .unwrap_or(0)
}

macro_rules! preads {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
            match fdtable::get(fd) {
                // SAFETY: the program's arguments.
                Some(d) if matches!(d.shape, Shape::Stripe { .. }) && off >= 0 => unsafe {
                    stripe_rw(&d, fd, false, buf as *mut u8, n, off as u64)
                },
                // SAFETY: the program's arguments.
                Some(d) => unsafe {
                    timed(&d, fd, false, buf as *mut u8, n, Some(off), || real::pread64(fd, buf, n, off))
                },
                // SAFETY: the program's arguments.
                None => unsafe { real::pread64(fd, buf, n, off) },
            }
        }
    )*};
}
preads!(pread, pread64);

macro_rules! pwrites {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
            match fdtable::get(fd) {
                // SAFETY: the program's arguments.
                Some(d) if matches!(d.shape, Shape::Stripe { .. }) && off >= 0 => unsafe {
                    stripe_rw(&d, fd, true, buf as *mut u8, n, off as u64)
                },
                // SAFETY: the program's arguments.
                Some(d) => unsafe {
                    timed(&d, fd, true, buf as *mut u8, n, Some(off), || real::pwrite64(fd, buf, n, off))
                },
                // SAFETY: the program's arguments.
                None => unsafe { real::pwrite64(fd, buf, n, off) },
            }
        }
    )*};
}
pwrites!(pwrite, pwrite64);

/// `read`/`write` of a striped file: at the FUSE descriptor's offset, which then moves
/// past what was moved (two threads sharing one such descriptor for sequential I/O may
/// interleave: use pread/pwrite there, as DeepSpeed does).
unsafe fn stripe_seq(fd: c_int, d: &Direct, write: bool, buf: *mut u8, n: usize) -> ssize_t {
    // SAFETY: lseek on the program's descriptor.
    let pos = unsafe { real::lseek64(fd, 0, libc::SEEK_CUR) };
    if pos < 0 {
        return -1;
    }
    // SAFETY: the program's buffer of `n` bytes.
    let r = unsafe { stripe_rw(d, fd, write, buf, n, pos as u64) };
    if r > 0 {
        // SAFETY: as above.
        unsafe { real::lseek64(fd, pos + r as off_t, libc::SEEK_SET) };
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    match fdtable::get(fd) {
        // SAFETY: the program's arguments.
        Some(d) if matches!(d.shape, Shape::Stripe { .. }) => unsafe {
            stripe_seq(fd, &d, false, buf as *mut u8, n)
        },
        // SAFETY: the program's arguments.
        Some(d) => unsafe {
            timed(&d, fd, false, buf as *mut u8, n, None, || {
                real::read(fd, buf, n)
            })
        },
        // SAFETY: the program's arguments.
        None => unsafe { real::read(fd, buf, n) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    match fdtable::get(fd) {
        // SAFETY: the program's arguments.
        Some(d) if matches!(d.shape, Shape::Stripe { .. }) => unsafe {
            stripe_seq(fd, &d, true, buf as *mut u8, n)
        },
        // SAFETY: the program's arguments.
        Some(d) => unsafe {
            timed(&d, fd, true, buf as *mut u8, n, None, || {
                real::write(fd, buf, n)
            })
        },
        // SAFETY: the program's arguments.
        None => unsafe { real::write(fd, buf, n) },
    }
}

/// `fsync`/`fdatasync` of a striped file: of its pieces, where its bytes are (the size is
/// theirs too), so a program keeps its durability also when the daemon is gone.
fn stripe_sync(d: &Direct, sys: c_long) -> Option<c_int> {
    let Shape::Stripe { fds, .. } = &d.shape else {
        return None;
    };
    let mut r = 0;
    for f in fds {
        // SAFETY: fsync(2)/fdatasync(2) of our own piece descriptor.
        if unsafe { libc::syscall(sys, f.load(Ordering::Acquire)) } != 0 && r == 0 {
            r = -1;
        }
    }
    Some(r)
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    match fdtable::get(fd).and_then(|d| stripe_sync(&d, libc::SYS_fsync)) {
        Some(r) => r,
        // SAFETY: the program's argument.
        None => unsafe { libc::syscall(libc::SYS_fsync, fd) as c_int },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    match fdtable::get(fd).and_then(|d| stripe_sync(&d, libc::SYS_fdatasync)) {
        Some(r) => r,
        // SAFETY: the program's argument.
        None => unsafe { libc::syscall(libc::SYS_fdatasync, fd) as c_int },
    }
}

fn neg_errno() -> c_int {
    -errno()
}

#[no_mangle]
pub unsafe extern "C" fn io_submit(ctx: libc::c_ulong, nr: c_long, iocbs: *mut *mut Iocb) -> c_int {
    if !fdtable::any() || nr <= 0 || iocbs.is_null() {
        // SAFETY: the program's arguments, to the kernel.
        let r = unsafe { libc::syscall(libc::SYS_io_submit, ctx, nr, iocbs) } as c_int;
        return if r < 0 { neg_errno() } else { r };
    }
    // SAFETY: the program passes `nr` iocb pointers.
    let list = unsafe { std::slice::from_raw_parts(iocbs, nr as usize) };
    let mut mine: Vec<*mut Iocb> = Vec::with_capacity(list.len());
    let mut ranges = Vec::with_capacity(list.len());
    for &p in list {
        // SAFETY: each pointer is the program's iocb, valid for the call.
        let iocb = unsafe { *p };
        let start = mine.len();
        let watched = match fdtable::get(iocb.fildes as c_int) {
            Some(d) => {
                mine.extend(aio::with(|r| r.add(p as u64, &iocb, &d)));
                true
            }
            None => {
                mine.push(p);
                false
            }
        };
        ranges.push((start..mine.len(), watched));
    }
    // SAFETY: `mine` holds valid iocb pointers (the program's, or our parts).
    let r = unsafe {
        libc::syscall(
            libc::SYS_io_submit,
            ctx,
            mine.len() as c_long,
            mine.as_ptr(),
        )
    };
    let err = errno();
    let taken = if r < 0 { 0 } else { r as usize };
    let mut submitted = 0;
    let mut by_hand = Vec::new();
    for (i, (range, watched)) in ranges.iter().enumerate() {
        if range.end <= taken {
            submitted += 1;
        } else if range.start < taken {
            // The kernel took some parts of a split iocb: the library does the rest itself,
            // so the program's iocb still completes once.
            by_hand.extend(mine[taken..range.end].iter().copied());
            submitted += 1;
        } else if *watched {
            let subs = &mine[range.clone()];
            aio::with(|reaper| reaper.forget(list[i] as u64, subs));
        }
    }
    for p in by_hand {
        // SAFETY: one of our parts, valid until its completion is taken.
        let part = unsafe { *p };
        // SAFETY: the part names a piece descriptor and a range of the program's buffer.
        let res = unsafe {
            if part.opcode == aio::PWRITE {
                real::pwrite64(
                    part.fildes as c_int,
                    part.buf as *const c_void,
                    part.nbytes as usize,
                    part.offset,
                )
            } else {
                real::pread64(
                    part.fildes as c_int,
                    part.buf as *mut c_void,
                    part.nbytes as usize,
                    part.offset,
                )
            }
        };
        let res = if res < 0 {
            -(errno() as i64)
        } else {
            res as i64
        };
        if let Some(ev) = aio::with(|reaper| reaper.done_by_hand(p as u64, res)) {
            aio::stash(ctx, ev);
        }
    }
    if submitted == 0 && r < 0 {
        return -err;
    }
    submitted as c_int
}

/// io_pgetevents(2)'s number: 333 on x86-64, 292 on AArch64 (the generic table).
#[cfg(target_arch = "x86_64")]
const SYS_IO_PGETEVENTS: c_long = 333;
#[cfg(not(target_arch = "x86_64"))]
const SYS_IO_PGETEVENTS: c_long = 292;

#[repr(C)]
struct IoSigset {
    ss: *const libc::sigset_t,
    len: libc::c_ulong,
}

/// Reaps up to `nr` events for the program, at least `min_nr` unless the timeout ends
/// first: parts of split iocbs are gathered, the rest passes as it is.
unsafe fn getevents(
    ctx: libc::c_ulong,
    min_nr: c_long,
    nr: c_long,
    events: *mut Event,
    timeout: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    let raw = |min: c_long, n: c_long, out: *mut Event, t: *const libc::timespec| -> c_long {
        let sig = IoSigset {
            ss: sigmask,
            len: 8,
        };
        // SAFETY: the program's context and buffer (a part of it), to the kernel.
        unsafe {
            if sigmask.is_null() {
                libc::syscall(libc::SYS_io_getevents, ctx, min, n, out, t)
            } else {
                // io_pgetevents(2); libc has no name for it on every target.
                libc::syscall(SYS_IO_PGETEVENTS, ctx, min, n, out, t, &sig)
            }
        }
    };
    let watching = !aio::with(|r| r.is_empty()) || aio::stashed(ctx);
    if !watching {
        let r = raw(min_nr, nr, events, timeout) as c_int;
        return if r < 0 { neg_errno() } else { r };
    }
    // SAFETY: the program's buffer of `nr` events.
    let out = unsafe { std::slice::from_raw_parts_mut(events, nr.max(0) as usize) };
    let mut got = aio::unstash(ctx, out);
    let deadline = (!timeout.is_null()).then(|| {
        // SAFETY: the program's timespec.
        let t = unsafe { *timeout };
        now_ns() + t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    });
    loop {
        if got >= out.len() {
            return got as c_int;
        }
        let want = (min_nr as usize).saturating_sub(got).min(out.len() - got);
        let left = deadline.map(|d| {
            let ns = d.saturating_sub(now_ns());
            libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            }
        });
        let t = left.as_ref().map_or(std::ptr::null(), |t| t as *const _);
        let mut buf = vec![Event::default(); out.len() - got];
        let r = raw(want as c_long, buf.len() as c_long, buf.as_mut_ptr(), t);
        if r < 0 {
            return if got > 0 { got as c_int } else { neg_errno() };
        }
        for ev in &buf[..r as usize] {
            if let Some(e) = aio::with(|reaper| reaper.take(*ev)) {
                out[got] = e;
                got += 1;
            }
        }
        let timed_out = deadline.is_some_and(|d| now_ns() >= d);
        if got >= min_nr as usize || timed_out || (r == 0 && want == 0) {
            return got as c_int;
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn io_getevents(
    ctx: libc::c_ulong,
    min_nr: c_long,
    nr: c_long,
    events: *mut Event,
    timeout: *const libc::timespec,
) -> c_int {
    // SAFETY: the program's arguments.
    unsafe { getevents(ctx, min_nr, nr, events, timeout, std::ptr::null()) }
}

#[no_mangle]
pub unsafe extern "C" fn io_pgetevents(
    ctx: libc::c_ulong,
    min_nr: c_long,
    nr: c_long,
    events: *mut Event,
    timeout: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the program's arguments.
    unsafe { getevents(ctx, min_nr, nr, events, timeout, sigmask) }
}
