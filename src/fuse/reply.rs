//! Turning the core's results into the kernel's reply structs: attributes with their cache
//! lifetimes, directory entries, extended attribute answers, open flags, and an error's errno.
//! Pure conversions with no state, kept apart from the dispatcher ([`super::dispatch`]) so
//! that the dispatcher holds only what a mount negotiates and registers, and so that these
//! byte layouts can be tested without a mount.

use super::abi::{self, fopen, Pod};
use super::MAX_REQUEST;
use crate::error::Error;
use crate::vfs::{Attr, Kind};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may cache attributes and entries. Every change goes through this
/// daemon, so the kernel's copy is only stale if someone edits a tier folder by hand.
const TTL: Duration = Duration::from_secs(1);

pub(super) fn errno(e: &Error) -> i32 {
    if e.is_backing_failure() {
        log::warn!("{e}");
    }
    e.errno()
}

pub(super) fn to_errno(e: Error) -> i32 {
    errno(&e)
}

pub(super) fn time(t: SystemTime) -> (u64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos()),
        Err(e) => {
            // Before 1970: the kernel reads the seconds as signed.
            let d = e.duration();
            let (s, n) = (d.as_secs() as i64, d.subsec_nanos());
            if n == 0 {
                ((-s) as u64, 0)
            } else {
                ((-s - 1) as u64, 1_000_000_000 - n)
            }
        }
    }
}

fn type_bits(k: Kind) -> u32 {
    match k {
        Kind::Dir => libc::S_IFDIR,
        Kind::File => libc::S_IFREG,
        Kind::Symlink => libc::S_IFLNK,
        Kind::Fifo => libc::S_IFIFO,
        Kind::Socket => libc::S_IFSOCK,
        Kind::CharDevice => libc::S_IFCHR,
        Kind::BlockDevice => libc::S_IFBLK,
    }
}

/// The kernel's view of a node's attributes.
fn fattr_of(a: &Attr) -> abi::Attr {
    let (atime, atimensec) = time(a.atime);
    let (mtime, mtimensec) = time(a.mtime);
    let (ctime, ctimensec) = time(a.ctime);
    abi::Attr {
        ino: a.ino,
        size: a.size,
        blocks: a.blocks,
        atime,
        mtime,
        ctime,
        atimensec,
        mtimensec,
        ctimensec,
        mode: type_bits(a.kind) | a.perm as u32,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: MAX_REQUEST,
        flags: 0,
    }
}

/// How long the kernel may keep `a`: not at all while a program writes the file past the
/// daemon (DeepSpeed checks a file's size with stat(2) before every read).
fn attr_ttl(a: &Attr) -> Duration {
    if a.volatile {
        Duration::ZERO
    } else {
        TTL
    }
}

pub(super) fn entry_out(a: &Attr) -> abi::EntryOut {
    abi::EntryOut {
        nodeid: a.ino,
        generation: 0,
        entry_valid: TTL.as_secs(),
        attr_valid: attr_ttl(a).as_secs(),
        entry_valid_nsec: TTL.subsec_nanos(),
        attr_valid_nsec: attr_ttl(a).subsec_nanos(),
        attr: fattr_of(a),
    }
}

pub(super) fn attr_out(a: &Attr) -> abi::AttrOut {
    abi::AttrOut {
        attr_valid: attr_ttl(a).as_secs(),
        attr_valid_nsec: attr_ttl(a).subsec_nanos(),
        dummy: 0,
        attr: fattr_of(a),
    }
}

pub(super) fn open_flags(info: &crate::vfs::OpenInfo) -> u32 {
    no_flush(info)
        | if info.direct_io {
            fopen::DIRECT_IO
        } else if info.keep_cache {
            fopen::PARALLEL_DIRECT_WRITES | fopen::KEEP_CACHE
        } else {
            fopen::PARALLEL_DIRECT_WRITES
        }
}

pub(super) fn no_flush(info: &crate::vfs::OpenInfo) -> u32 {
    if info.no_flush {
        fopen::NOFLUSH
    } else {
        0
    }
}

/// The reply to getxattr or listxattr: the length when the kernel asks with `size` 0, else
/// the value, or ERANGE when it is longer than `size`. The core returns whole values; the
/// buffer size is the protocol's, so the check lives here.
pub(super) fn xattr_reply(v: &[u8], size: u32, out: &mut Vec<u8>) -> Result<(), i32> {
    if size == 0 {
        out.extend_from_slice(
            abi::GetxattrOut {
                size: v.len() as u32,
                padding: 0,
            }
            .bytes(),
        );
    } else if v.len() > size as usize {
        return Err(libc::ERANGE);
    } else {
        out.extend_from_slice(v);
    }
    Ok(())
}

/// Appends one directory entry if it fits in `max` bytes; false when it does not.
pub(super) fn push_dirent(
    out: &mut Vec<u8>,
    max: usize,
    ino: u64,
    off: u64,
    kind: Kind,
    name: &OsStr,
) -> bool {
    let name = name.as_bytes();
    let len = (std::mem::size_of::<abi::DirentHead>() + name.len()).next_multiple_of(8);
    if out.len() + len > max {
        return false;
    }
    let h = abi::DirentHead {
        ino,
        off,
        namelen: name.len() as u32,
        typ: abi::dirent_type(type_bits(kind)),
    };
    out.extend_from_slice(h.bytes());
    out.extend_from_slice(name);
    out.resize(out.len().next_multiple_of(8), 0);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirents_are_8_byte_aligned_and_stop_at_the_size() {
        let mut out = Vec::new();
        assert!(push_dirent(&mut out, 64, 5, 1, Kind::File, OsStr::new("a")));
        assert_eq!(out.len(), 32);
        assert_eq!(out.len() % 8, 0);
        assert!(push_dirent(
            &mut out,
            64,
            6,
            2,
            Kind::Dir,
            OsStr::new("abcdefgh")
        ));
        assert_eq!(out.len(), 64);
        assert!(!push_dirent(&mut out, 64, 7, 3, Kind::Dir, OsStr::new("x")));
        let h = abi::DirentHead::read(&out[32..]).unwrap();
        assert_eq!((h.ino, h.off, h.namelen), (6, 2, 8));
        assert_eq!(h.typ, libc::DT_DIR as u32);
    }

    #[test]
    fn xattr_size_probe_and_range() {
        let mut out = Vec::new();
        xattr_reply(b"value", 0, &mut out).unwrap();
        assert_eq!(abi::GetxattrOut::read(&out).unwrap().size, 5);
        out.clear();
        assert_eq!(xattr_reply(b"value", 4, &mut out), Err(libc::ERANGE));
        xattr_reply(b"value", 5, &mut out).unwrap();
        assert_eq!(out, b"value");
    }
}
