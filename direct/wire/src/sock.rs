//! The direct path's socket, for both sides: an abstract `SOCK_SEQPACKET` unix socket (one
//! message a packet), messages with descriptors attached (`SCM_RIGHTS`), and the peer's
//! credentials (`SO_PEERCRED`). Descriptors come and go as raw numbers: the preload
//! library must close them through its own `close` (the one it interposes), so this module
//! never closes what it hands back.

#![allow(unsafe_code)]

use std::io;

/// A socket address for the abstract name `name` (no file; a leading NUL).
fn addr(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all zeros is a valid value.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let b = name.as_bytes();
    if b.len() + 1 > a.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket name too long",
        ));
    }
    for (i, c) in b.iter().enumerate() {
        a.sun_path[i + 1] = *c as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + b.len();
    Ok((a, len as libc::socklen_t))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn seqpacket() -> io::Result<libc::c_int> {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    check(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })
}

/// A listening socket bound to the abstract `name` (the daemon's). The caller owns it.
pub fn listen(name: &str) -> io::Result<libc::c_int> {
    let (a, len) = addr(name)?;
    let fd = seqpacket()?;
    // SAFETY: `a` is a valid sockaddr_un of `len` bytes; `fd` is our socket.
    let mut r = unsafe { libc::bind(fd, &a as *const _ as *const libc::sockaddr, len) };
    if r == 0 {
        // SAFETY: listen(2) on our socket.
        r = unsafe { libc::listen(fd, 128) };
    }
    if r < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: closing the socket we made, on failure.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    Ok(fd)
}

/// A connection to the abstract `name` (the library's). The caller owns it.
pub fn connect(name: &str) -> io::Result<libc::c_int> {
    let (a, len) = addr(name)?;
    let fd = seqpacket()?;
    // SAFETY: `a` is a valid sockaddr_un of `len` bytes; `fd` is our socket.
    if unsafe { libc::connect(fd, &a as *const _ as *const libc::sockaddr, len) } < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: closing the socket we made, on failure.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    Ok(fd)
}

/// Accepts one connection on `listener`. The caller owns it.
pub fn accept(listener: libc::c_int) -> io::Result<libc::c_int> {
    // SAFETY: accept4(2) without an address; the result is checked.
    check(unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    })
}

/// Who is at the other end: (pid, uid, gid) as the kernel saw them at connect.
pub fn peer(fd: libc::c_int) -> io::Result<(u32, u32, u32)> {
    // SAFETY: ucred is plain old data.
    let mut c: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt(2) into `c` of `len` bytes.
    check(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut c as *mut _ as *mut libc::c_void,
            &mut len,
        )
    })?;
    Ok((c.pid as u32, c.uid, c.gid))
}

/// Sets how long a receive on `fd` may wait (0: forever).
pub fn set_timeout(fd: libc::c_int, millis: u64) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: (millis / 1000) as libc::time_t,
        tv_usec: ((millis % 1000) * 1000) as libc::suseconds_t,
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: setsockopt(2) with a timeval of the size given.
        check(unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
    }
    Ok(())
}

const FD_SPACE: usize = 8 * (crate::MAX_FDS + 2);

/// Sends one message with `fds` attached (they stay the caller's).
pub fn send(fd: libc::c_int, msg: &[u8], fds: &[libc::c_int]) -> io::Result<()> {
    if fds.len() > crate::MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    let mut space = [0u64; FD_SPACE / 8];
    // SAFETY: msghdr is plain old data.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE is arithmetic.
        let need = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
        h.msg_control = space.as_mut_ptr() as *mut libc::c_void;
        h.msg_controllen = need as _;
        // SAFETY: the control buffer holds `need` bytes (at most FD_SPACE), aligned for
        // cmsghdr; CMSG_FIRSTHDR/CMSG_DATA point inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&h);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr() as *const u8, libc::CMSG_DATA(c), bytes);
        }
    }
    loop {
        // SAFETY: `h` points at `iov` and `space`, both alive for the call.
        let n = unsafe { libc::sendmsg(fd, &h, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message into `buf`: its length and the descriptors that came with it
/// (the caller's to close; received close-on-exec). `Ok((0, []))` is the peer's end.
/// A message cut short, or with cut-off descriptors, is an error (its descriptors are
/// handed back all the same, to be closed).
pub fn recv(fd: libc::c_int, buf: &mut [u8]) -> io::Result<(usize, Vec<libc::c_int>, bool)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut space = [0u64; FD_SPACE / 8];
    // SAFETY: msghdr is plain old data.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    h.msg_control = space.as_mut_ptr() as *mut libc::c_void;
    h.msg_controllen = FD_SPACE as _;
    let n = loop {
        // SAFETY: `h` points at `iov` (into `buf`) and `space`, alive for the call.
        let n = unsafe { libc::recvmsg(fd, &mut h, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `space`, within
    // msg_controllen; each SCM_RIGHTS payload is an array of ints.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let len = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..len / std::mem::size_of::<libc::c_int>() {
                    let mut v: libc::c_int = 0;
                    std::ptr::copy_nonoverlapping(
                        data.add(i * std::mem::size_of::<libc::c_int>()),
                        &mut v as *mut libc::c_int as *mut u8,
                        std::mem::size_of::<libc::c_int>(),
                    );
                    fds.push(v);
                }
            }
            c = libc::CMSG_NXTHDR(&h, c);
        }
    }
    let cut = h.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
    Ok((n, fds, cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(fd: libc::c_int) {
        // SAFETY: closing a descriptor the test owns.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn messages_carry_descriptors_and_credentials() {
        let name = format!("tierfs-wire-test-{}", std::process::id());
        let l = listen(&name).unwrap();
        let c = connect(&name).unwrap();
        let s = accept(l).unwrap();
        let (pid, uid, _) = peer(s).unwrap();
        assert_eq!(pid, std::process::id());
        // SAFETY: getuid(2) has no failure mode.
        assert_eq!(uid, unsafe { libc::getuid() });
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        use std::os::fd::AsRawFd;
        send(c, b"hello", &[f.as_raw_fd(), f.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 64];
        let (n, fds, cut) = recv(s, &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len(), cut), (&b"hello"[..], 2, false));
        for fd in fds {
            // SAFETY: fcntl(2) F_GETFD on a received descriptor.
            assert!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC != 0);
            close(fd);
        }
        // A message larger than the buffer is reported cut, not taken for a whole one.
        send(c, &[7u8; 100], &[]).unwrap();
        let (_, _, cut) = recv(s, &mut buf).unwrap();
        assert!(cut);
        close(c);
        assert_eq!(recv(s, &mut buf).unwrap().0, 0, "the peer's end");
        set_timeout(s, 10).unwrap();
        for fd in [s, l] {
            close(fd);
        }
        assert!(listen(&"x".repeat(200)).is_err());
    }
}
