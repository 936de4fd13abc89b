//! The functions the library interposes, as the next object in the lookup order has them
//! (`dlsym(RTLD_NEXT)`: libc, or another interposer loaded after this one), resolved once
//! each. Where none is found the system call is made directly, so the program never loses
//! a call to this library.

#![allow(clippy::missing_safety_doc)]

use libc::{c_char, c_int, c_long, c_uint, c_void, off_t, size_t, ssize_t};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Resolves `name` (NUL-terminated) once into `slot`; 1 marks "not found".
fn resolve(slot: &AtomicUsize, name: &[u8]) -> usize {
    let v = slot.load(Ordering::Acquire);
    if v != 0 {
        return v;
    }
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name; the result is an address
    // or null.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) } as usize;
    let p = if p == 0 { 1 } else { p };
    slot.store(p, Ordering::Release);
    p
}

macro_rules! real {
    ($( $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty = $sys:expr ; )*) => {
        $(
            /// The next object's `
            #[doc = stringify!($name)]
            /// `.
            pub unsafe fn $name($($a: $t),*) -> $r {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let p = resolve(&SLOT, concat!(stringify!($name), "\0").as_bytes());
                if p == 1 {
                    // SAFETY: the caller's arguments, passed on to the system call.
                    return unsafe { $sys };
                }
                // SAFETY: `p` is the address dlsym gave for this very function, whose C
                // signature is the one written here.
                let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(p) };
                // SAFETY: the caller's arguments, as the function expects them.
                unsafe { f($($a),*) }
            }
        )*
    };
}

real! {
    openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int =
        libc::syscall(libc::SYS_openat, dirfd, path, flags, mode) as c_int;
    close(fd: c_int) -> c_int = libc::syscall(libc::SYS_close, fd) as c_int;
    dup(fd: c_int) -> c_int = libc::syscall(libc::SYS_dup, fd) as c_int;
    dup3(old: c_int, new: c_int, flags: c_int) -> c_int =
        libc::syscall(libc::SYS_dup3, old, new, flags) as c_int;
    fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int =
        libc::syscall(libc::SYS_fcntl, fd, cmd, arg) as c_int;
    read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t =
        libc::syscall(libc::SYS_read, fd, buf, n) as ssize_t;
    write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t =
        libc::syscall(libc::SYS_write, fd, buf, n) as ssize_t;
    pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t =
        libc::syscall(libc::SYS_pread64, fd, buf, n, off) as ssize_t;
    pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t =
        libc::syscall(libc::SYS_pwrite64, fd, buf, n, off) as ssize_t;
    lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t =
        libc::syscall(libc::SYS_lseek, fd, off, whence) as off_t;
}

/// The next object's `mmap`.
pub unsafe fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = resolve(&SLOT, b"mmap\0");
    if p == 1 {
        // SAFETY: the caller's arguments, passed on to the system call.
        return unsafe {
            libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void
        };
    }
    // SAFETY: dlsym's address of mmap, whose C signature this is.
    let f: unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void =
        unsafe { std::mem::transmute(p) };
    // SAFETY: the caller's arguments.
    unsafe { f(addr, len, prot, flags, fd, off) }
}

/// `dup2` as `dup3` without flags, but for `old == new`, which dup3 refuses.
pub unsafe fn dup2(old: c_int, new: c_int) -> c_int {
    if old == new {
        // SAFETY: fcntl F_GETFD only checks that `old` is open.
        return if unsafe { fcntl(old, libc::F_GETFD, 0) } < 0 {
            -1
        } else {
            new
        };
    }
    // SAFETY: the caller's arguments.
    unsafe { dup3(old, new, 0) }
}

/// `close_range(2)` (glibc >= 2.34 has a wrapper; the call itself is what matters).
pub unsafe fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on to the system call.
    unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) as c_int }
}

/// The next object's `_exit` (which never returns); `exit_group` where there is none.
pub unsafe fn exit_now(status: c_int) -> ! {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = resolve(&SLOT, b"_exit\0");
    if p != 1 {
        // SAFETY: `p` is the address dlsym gave for `_exit`, whose C signature this is.
        let f: unsafe extern "C" fn(c_int) -> ! = unsafe { std::mem::transmute(p) };
        // SAFETY: the program's status, as `_exit` expects it.
        unsafe { f(status) }
    }
    // SAFETY: exit_group(2) ends every thread of the process; it does not return.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable!("exit_group returned")
}
