//! Counters of what the kernel asked the daemon: requests per FUSE opcode, the transport
//! that carried them, and the operations' names the logs, stats and metrics print.
//! (Handler panics are counted by the core: `vfs::contain`.)
//!
//! Kept apart from both the FUSE layer (which counts) and the stats files (which show
//! them) so that neither has to know the other: the core names an operation without
//! depending on the FUSE layer. Tests use these counts to prove that a request never
//! reached the daemon (kernel passthrough) or that the io_uring transport really carried
//! the traffic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// One past the largest FUSE opcode counted (FUSE_STATX = 52).
pub const OPCODES: usize = 53;

/// The operation's upper-case name (`FUSE_READ`'s is "READ"), "UNKNOWN" for a number
/// that names none: opcodes are the kernel's `enum fuse_opcode` (`include/uapi/linux/fuse.h`),
/// fixed by the protocol, and `crate::fuse::abi::op` names the same numbers (its tests check
/// the two agree).
pub fn op_name(opcode: u32) -> &'static str {
    match opcode {
        1 => "LOOKUP",
        2 => "FORGET",
        3 => "GETATTR",
        4 => "SETATTR",
        5 => "READLINK",
        6 => "SYMLINK",
        8 => "MKNOD",
        9 => "MKDIR",
        10 => "UNLINK",
        11 => "RMDIR",
        12 => "RENAME",
        13 => "LINK",
        14 => "OPEN",
        15 => "READ",
        16 => "WRITE",
        17 => "STATFS",
        18 => "RELEASE",
        20 => "FSYNC",
        21 => "SETXATTR",
        22 => "GETXATTR",
        23 => "LISTXATTR",
        24 => "REMOVEXATTR",
        25 => "FLUSH",
        26 => "INIT",
        27 => "OPENDIR",
        28 => "READDIR",
        29 => "RELEASEDIR",
        30 => "FSYNCDIR",
        31 => "GETLK",
        32 => "SETLK",
        33 => "SETLKW",
        34 => "ACCESS",
        35 => "CREATE",
        36 => "INTERRUPT",
        37 => "BMAP",
        38 => "DESTROY",
        39 => "IOCTL",
        40 => "POLL",
        41 => "NOTIFY_REPLY",
        42 => "BATCH_FORGET",
        43 => "FALLOCATE",
        44 => "READDIRPLUS",
        45 => "RENAME2",
        46 => "LSEEK",
        47 => "COPY_FILE_RANGE",
        48 => "SETUPMAPPING",
        49 => "REMOVEMAPPING",
        50 => "SYNCFS",
        51 => "TMPFILE",
        52 => "STATX",
        _ => "UNKNOWN",
    }
}

/// Request counters shared by the transport and the stats files.
#[derive(Debug)]
pub struct RequestStats {
    by_op: [AtomicU64; OPCODES],
    other: AtomicU64,
    /// Requests that arrived through a ring entry and through /dev/fuse.
    ring: AtomicU64,
    dev: AtomicU64,
    transport: OnceLock<&'static str>,
}

impl Default for RequestStats {
    fn default() -> Self {
        RequestStats {
            by_op: std::array::from_fn(|_| AtomicU64::new(0)),
            other: AtomicU64::new(0),
            ring: AtomicU64::new(0),
            dev: AtomicU64::new(0),
            transport: OnceLock::new(),
        }
    }
}

impl RequestStats {
    /// Counts one request of `opcode`.
    pub fn count(&self, opcode: u32) {
        match self.by_op.get(opcode as usize) {
            Some(c) => c.fetch_add(1, Ordering::Relaxed),
            None => self.other.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Requests of `opcode` so far.
    pub fn get(&self, opcode: u32) -> u64 {
        self.by_op
            .get(opcode as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Counts a request that arrived through the ring (`true`) or /dev/fuse.
    pub fn arrived(&self, ring: bool) {
        if ring { &self.ring } else { &self.dev }.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests that arrived through the ring and through /dev/fuse.
    pub fn by_transport(&self) -> (u64, u64) {
        (
            self.ring.load(Ordering::Relaxed),
            self.dev.load(Ordering::Relaxed),
        )
    }

    /// Records which transport serves the mount ("uring" or "dev"); first call wins.
    pub fn set_transport(&self, name: &'static str) {
        let _ = self.transport.set(name);
    }

    /// The transport serving the mount; "" before the kernel's INIT.
    pub fn transport(&self) -> &'static str {
        self.transport.get().copied().unwrap_or("")
    }

    /// `(opcode, count)` of every opcode seen at least once.
    pub fn nonzero(&self) -> Vec<(u32, u64)> {
        self.by_op
            .iter()
            .enumerate()
            .map(|(i, c)| (i as u32, c.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_opcode_and_first_transport_wins() {
        let s = RequestStats::default();
        s.count(15);
        s.count(15);
        s.count(16);
        s.count(9999);
        assert_eq!(s.get(15), 2);
        assert_eq!(s.nonzero(), vec![(15, 2), (16, 1)]);
        assert_eq!(s.transport(), "");
        s.set_transport("uring");
        s.set_transport("dev");
        assert_eq!(s.transport(), "uring");
    }
}
