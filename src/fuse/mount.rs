//! Getting a FUSE connection: mounting (the `mount` system call as root, `fusermount3`
//! otherwise), unmounting, and extra /dev/fuse descriptors for worker threads.
//!
//! An ordinary user cannot call `mount`; the setuid helper `fusermount3` (package fuse3)
//! opens /dev/fuse, mounts, and hands the descriptor back over a socket. It opens the
//! device with the user's own rights, so where /dev/fuse is mode 0600 (container images
//! often ship it so) no user can mount FUSE at all: tierfs then says so and names the fix
//! (`tests/mount_cli.rs`, `user_mount_with_dev_fuse_0600_says_what_to_fix`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// What to mount.
#[derive(Debug, Clone)]
pub struct MountSpec<'a> {
    /// The source mountinfo shows (no commas or spaces).
    pub source: &'a str,
    pub mountpoint: &'a Path,
    pub allow_other: bool,
}

/// How the connection was made, which decides how to unmount it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountedBy {
    /// The `mount` system call (root).
    Syscall,
    /// `fusermount3`.
    Fusermount,
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

fn open_dev_fuse() -> io::Result<OwnedFd> {
    // SAFETY: a plain open of a constant path; the result is checked.
    let fd = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Mounts a new FUSE connection at the mountpoint and returns its /dev/fuse descriptor.
/// Root mounts with the system call (falling back to `fusermount3` where that is refused,
/// as in a user namespace); everyone else goes through `fusermount3`.
pub fn mount(spec: &MountSpec) -> io::Result<(OwnedFd, MountedBy)> {
    if crate::sys::euid() == 0 {
        match mount_syscall(spec) {
            Ok(fd) => return Ok((fd, MountedBy::Syscall)),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                log::info!("the mount system call was refused ({e}); trying fusermount3");
            }
            Err(e) => return Err(e),
        }
    }
    mount_fusermount(spec).map(|fd| (fd, MountedBy::Fusermount))
}

fn mount_syscall(spec: &MountSpec) -> io::Result<OwnedFd> {
    let fd = open_dev_fuse()?;
    let st = std::fs::metadata(spec.mountpoint)?;
    use std::os::unix::fs::MetadataExt;
    let mut data = format!(
        "fd={},rootmode={:o},user_id={},group_id={},default_permissions",
        fd.as_raw_fd(),
        st.mode() & libc::S_IFMT,
        crate::sys::euid(),
        // SAFETY: getegid has no preconditions.
        unsafe { libc::getegid() }
    );
    if spec.allow_other {
        data.push_str(",allow_other");
    }
    let target = cstr(spec.mountpoint)?;
    let source = CString::new(spec.source)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "source contains a NUL byte"))?;
    let data = CString::new(data).expect("no NUL in mount options");
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            c"fuse.tierfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr() as *const libc::c_void,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

fn mount_fusermount(spec: &MountSpec) -> io::Result<OwnedFd> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds has room for the two descriptors socketpair writes.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded, so both are fresh descriptors we own.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Ours must not leak into fusermount3; theirs must reach it (socketpair without
    // SOCK_CLOEXEC leaves both inheritable).
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(ours.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    let mut opts = format!(
        "fsname={},subtype=tierfs,default_permissions,nosuid,nodev",
        spec.source
    );
    if spec.allow_other {
        opts.push_str(",allow_other");
    }
    let out = Command::new("fusermount3")
        .arg("-o")
        .arg(&opts)
        .arg("--")
        .arg(spec.mountpoint)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run fusermount3 ({e}); as a non-root user tierfs needs it: install the fuse3 package"),
            )
        })?;
    drop(theirs);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        // fusermount3 opens /dev/fuse with the user's own rights (the device's mode is the
        // administrator's word on who may use FUSE), so no helper can get past it.
        let hint = if err.contains("failed to open /dev/fuse") {
            "; /dev/fuse does not let this user read and write it (container images often \
             make it 0600): an administrator must make it 0666, the kernel's default"
        } else {
            ""
        };
        return Err(io::Error::other(format!("fusermount3 failed: {err}{hint}")));
    }
    receive_fd(&ours)
}

/// Receives one descriptor sent with SCM_RIGHTS.
fn receive_fd(sock: &OwnedFd) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    // Room for one cmsghdr carrying one int, aligned as CMSG_SPACE requires.
    let mut space = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid; we then point it at live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr() as *mut libc::c_void;
    // SAFETY: CMSG_SPACE is a pure computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    // SAFETY: msg points to valid buffers for the duration of the call.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: msg was filled by recvmsg; CMSG_FIRSTHDR/CMSG_DATA stay within msg_control.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other(
                "fusermount3 did not send the /dev/fuse descriptor",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const RawFd);
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Another descriptor on the same connection (`FUSE_DEV_IOC_CLONE`), so worker threads do
/// not queue on one file. `None` where /dev/fuse cannot be opened (mode 0600 for a user):
/// then the threads share the session's descriptor.
pub fn clone_fd(session: &OwnedFd) -> Option<OwnedFd> {
    let fd = open_dev_fuse().ok()?;
    let master: u32 = session.as_raw_fd() as u32;
    // SAFETY: FUSE_DEV_IOC_CLONE reads one u32 (the session's fd) from the pointer.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), super::abi::DEV_IOC_CLONE, &master) };
    (r == 0).then_some(fd)
}

/// Unmounts `mountpoint` the way it was mounted. Lazy (`MNT_DETACH`, `fusermount3 -z`):
/// the name goes now and the daemon keeps serving files still open until they are closed,
/// so nothing in flight is cut off.
pub fn unmount(mountpoint: &Path, by: MountedBy) -> io::Result<()> {
    if by == MountedBy::Syscall {
        let c = cstr(mountpoint)?;
        // SAFETY: c is a valid NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINVAL) {
            // Not mounted (any more).
            return Ok(());
        }
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(e);
        }
    }
    let out = Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg("--")
        .arg(mountpoint)
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "fusermount3 -u: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
