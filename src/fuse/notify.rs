//! Notifications the daemon sends the kernel unasked, on /dev/fuse (also under FUSE over
//! io_uring, which leaves them to the device).

use super::abi::{self, Pod};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// Tells the kernel to drop its cached attributes of `ino`, and with `data` its cached
/// pages too (the file changed behind the daemon: a program writes it on the direct path).
pub(super) fn inval_inode(dev: RawFd, ino: u64, data: bool) {
    let body = abi::NotifyInvalInodeOut {
        ino,
        // From 0 with length 0: every page. Negative: attributes only.
        off: if data { 0 } else { -1 },
        len: 0,
    };
    let h = abi::OutHeader {
        len: (std::mem::size_of::<abi::OutHeader>() + std::mem::size_of_val(&body)) as u32,
        error: abi::NOTIFY_INVAL_INODE,
        unique: 0,
    };
    let mut msg = h.bytes().to_vec();
    msg.extend_from_slice(body.bytes());
    // SAFETY: writes our own initialized buffer to the /dev/fuse descriptor.
    let n = unsafe { libc::write(dev, msg.as_ptr() as *const libc::c_void, msg.len()) };
    if n < 0 {
        // ENOENT: the kernel has forgotten the inode, so it caches nothing of it.
        log::debug!(
            "invalidating inode {ino}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// A handle on a session's /dev/fuse for notifications, usable from any thread for as long
/// as it lives (it keeps the descriptor open).
#[derive(Clone)]
pub struct Notifier(pub(super) Arc<OwnedFd>);

impl Notifier {
    /// Drops the kernel's cached attributes of `ino`, and with `data` its pages.
    pub fn inval_inode(&self, ino: u64, data: bool) {
        inval_inode(self.0.as_raw_fd(), ino, data);
    }
}
