//! The FUSE kernel ABI (protocol 7.42, Linux `include/uapi/linux/fuse.h`): the message
//! layouts and constants this daemon speaks, written out from the documented header.
//!
//! Every struct is `#[repr(C)]`, made only of integers and laid out without implicit padding
//! (checked below), so any byte pattern is a valid value: [`Pod::read`] decodes one from a
//! request without `unsafe` at the call site, and [`Pod::bytes`] encodes a reply.

/// Protocol major version.
pub const KERNEL_VERSION: u32 = 7;
/// The minor version we speak: 42 brought FUSE over io_uring.
pub const KERNEL_MINOR_VERSION: u32 = 42;
/// Oldest kernel minor we accept: 7.31 (Linux 5.9) has every request layout used here.
pub const MIN_KERNEL_MINOR: u32 = 31;
/// The root directory's node id.
pub const ROOT_ID: u64 = 1;
/// The kernel refuses a read buffer smaller than this (or than max_write + headers).
pub const MIN_READ_BUFFER: usize = 8192;

/// Request opcodes.
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const GETLK: u32 = 31;
    pub const SETLK: u32 = 32;
    pub const SETLKW: u32 = 33;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const BMAP: u32 = 37;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const POLL: u32 = 40;
    pub const NOTIFY_REPLY: u32 = 41;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
    pub const SETUPMAPPING: u32 = 48;
    pub const REMOVEMAPPING: u32 = 49;
    pub const SYNCFS: u32 = 50;
    pub const TMPFILE: u32 = 51;
    pub const STATX: u32 = 52;
}

/// INIT flags (`flags` holds bits 0..31, `flags2` bits 32..63).
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const POSIX_LOCKS: u64 = 1 << 1;
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    pub const EXPORT_SUPPORT: u64 = 1 << 4;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DONT_MASK: u64 = 1 << 6;
    pub const FLOCK_LOCKS: u64 = 1 << 10;
    pub const AUTO_INVAL_DATA: u64 = 1 << 12;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const ASYNC_DIO: u64 = 1 << 15;
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const HANDLE_KILLPRIV: u64 = 1 << 19;
    pub const POSIX_ACL: u64 = 1 << 20;
    pub const ABORT_ERROR: u64 = 1 << 21;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const SETXATTR_EXT: u64 = 1 << 29;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const PASSTHROUGH: u64 = 1 << 37;
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// `fuse_setattr_in.valid` bits.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const CTIME: u32 = 1 << 10;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_open_out.open_flags`.
pub mod fopen {
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const KEEP_CACHE: u32 = 1 << 1;
    pub const NOFLUSH: u32 = 1 << 5;
    pub const PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
    pub const PASSTHROUGH: u32 = 1 << 7;
}

/// `fuse_write_in.write_flags`.
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `fuse_open_in.open_flags` / `fuse_create_in.open_flags`.
pub const OPEN_KILL_SUIDGID: u32 = 1 << 0;
/// `fuse_fsync_in.fsync_flags`.
pub const FSYNC_FDATASYNC: u32 = 1 << 0;
/// `fuse_notify_code::FUSE_NOTIFY_INVAL_INODE`, sent as the out header's `error`.
pub const NOTIFY_INVAL_INODE: i32 = 2;
/// A resent request's unique id has this bit set.
pub const UNIQUE_RESEND: u64 = 1 << 63;

/// Plain old data: a `#[repr(C)]` struct of integers with no padding, so every byte
/// pattern of its size is a valid value.
///
/// # Safety
/// Implement only for such structs (the size checks at the bottom of this file hold the
/// no-padding half of the promise).
pub unsafe trait Pod: Copy + Default {
    /// Decodes a value from the start of `b`; `None` when `b` is too short.
    fn read(b: &[u8]) -> Option<Self> {
        if b.len() < std::mem::size_of::<Self>() {
            return None;
        }
        // SAFETY: b holds at least size_of::<Self>() bytes, read_unaligned copes with any
        // alignment, and the trait's contract makes every byte pattern a valid Self.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr() as *const Self) })
    }

    /// Decodes a value from the start of `b`, zero-extending a shorter prefix (older
    /// kernels send shorter versions of some structs).
    fn read_prefix(b: &[u8]) -> Self {
        let mut v = Self::default();
        let n = b.len().min(std::mem::size_of::<Self>());
        // SAFETY: v is a valid, exclusively borrowed Self of size_of::<Self>() >= n bytes;
        // any byte pattern is a valid Self (the trait's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), &mut v as *mut Self as *mut u8, n);
        }
        v
    }

    /// The value's bytes, for a reply.
    fn bytes(&self) -> &[u8] {
        // SAFETY: Self has no padding (the trait's contract), so all size_of::<Self>()
        // bytes are initialized, and they live as long as &self.
        unsafe {
            std::slice::from_raw_parts(
                self as *const Self as *const u8,
                std::mem::size_of::<Self>(),
            )
        }
    }
}

macro_rules! pod {
    ($( $(#[$m:meta])* pub struct $name:ident { $( pub $f:ident : $t:ty ),* $(,)? } = $size:expr; )*) => {
        $(
            $(#[$m])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
            pub struct $name { $( pub $f: $t ),* }
            // SAFETY: integers only; the assertion below proves there is no padding.
            unsafe impl Pod for $name {}
            const _: () = assert!(std::mem::size_of::<$name>() == $size);
            const _: () = assert!(0 $( + std::mem::size_of::<$t>() )* == $size);
        )*
    };
}

pod! {
    pub struct InHeader {
        pub len: u32, pub opcode: u32, pub unique: u64, pub nodeid: u64,
        pub uid: u32, pub gid: u32, pub pid: u32, pub total_extlen: u16, pub padding: u16,
    } = 40;
    pub struct OutHeader { pub len: u32, pub error: i32, pub unique: u64 } = 16;
    pub struct Attr {
        pub ino: u64, pub size: u64, pub blocks: u64, pub atime: u64, pub mtime: u64,
        pub ctime: u64, pub atimensec: u32, pub mtimensec: u32, pub ctimensec: u32,
        pub mode: u32, pub nlink: u32, pub uid: u32, pub gid: u32, pub rdev: u32,
        pub blksize: u32, pub flags: u32,
    } = 88;
    pub struct EntryOut {
        pub nodeid: u64, pub generation: u64, pub entry_valid: u64, pub attr_valid: u64,
        pub entry_valid_nsec: u32, pub attr_valid_nsec: u32, pub attr: Attr,
    } = 128;
    pub struct AttrOut {
        pub attr_valid: u64, pub attr_valid_nsec: u32, pub dummy: u32, pub attr: Attr,
    } = 104;
    pub struct ForgetIn { pub nlookup: u64 } = 8;
    pub struct ForgetOne { pub nodeid: u64, pub nlookup: u64 } = 16;
    pub struct BatchForgetIn { pub count: u32, pub dummy: u32 } = 8;
    pub struct GetattrIn { pub getattr_flags: u32, pub dummy: u32, pub fh: u64 } = 16;
    pub struct MknodIn { pub mode: u32, pub rdev: u32, pub umask: u32, pub padding: u32 } = 16;
    pub struct MkdirIn { pub mode: u32, pub umask: u32 } = 8;
    pub struct RenameIn { pub newdir: u64 } = 8;
    pub struct Rename2In { pub newdir: u64, pub flags: u32, pub padding: u32 } = 16;
    pub struct LinkIn { pub oldnodeid: u64 } = 8;
    pub struct SetattrIn {
        pub valid: u32, pub padding: u32, pub fh: u64, pub size: u64, pub lock_owner: u64,
        pub atime: u64, pub mtime: u64, pub ctime: u64, pub atimensec: u32,
        pub mtimensec: u32, pub ctimensec: u32, pub mode: u32, pub unused4: u32,
        pub uid: u32, pub gid: u32, pub unused5: u32,
    } = 88;
    pub struct OpenIn { pub flags: u32, pub open_flags: u32 } = 8;
    pub struct CreateIn { pub flags: u32, pub mode: u32, pub umask: u32, pub open_flags: u32 } = 16;
    pub struct OpenOut { pub fh: u64, pub open_flags: u32, pub backing_id: i32 } = 16;
    pub struct ReleaseIn { pub fh: u64, pub flags: u32, pub release_flags: u32, pub lock_owner: u64 } = 24;
    pub struct FlushIn { pub fh: u64, pub unused: u32, pub padding: u32, pub lock_owner: u64 } = 24;
    pub struct ReadIn {
        pub fh: u64, pub offset: u64, pub size: u32, pub read_flags: u32,
        pub lock_owner: u64, pub flags: u32, pub padding: u32,
    } = 40;
    pub struct WriteIn {
        pub fh: u64, pub offset: u64, pub size: u32, pub write_flags: u32,
        pub lock_owner: u64, pub flags: u32, pub padding: u32,
    } = 40;
    pub struct WriteOut { pub size: u32, pub padding: u32 } = 8;
    pub struct Kstatfs {
        pub blocks: u64, pub bfree: u64, pub bavail: u64, pub files: u64, pub ffree: u64,
        pub bsize: u32, pub namelen: u32, pub frsize: u32, pub padding: u32,
        pub spare0: u32, pub spare1: u32, pub spare2: u32, pub spare3: u32, pub spare4: u32,
        pub spare5: u32,
    } = 80;
    pub struct FsyncIn { pub fh: u64, pub fsync_flags: u32, pub padding: u32 } = 16;
    pub struct IoctlIn {
        pub fh: u64, pub flags: u32, pub cmd: u32, pub arg: u64, pub in_size: u32,
        pub out_size: u32,
    } = 32;
    pub struct IoctlOut { pub result: i32, pub flags: u32, pub in_iovs: u32, pub out_iovs: u32 } = 16;
    pub struct SetxattrIn { pub size: u32, pub flags: u32 } = 8;
    pub struct GetxattrIn { pub size: u32, pub padding: u32 } = 8;
    pub struct GetxattrOut { pub size: u32, pub padding: u32 } = 8;
    pub struct AccessIn { pub mask: u32, pub padding: u32 } = 8;
    pub struct InitIn {
        pub major: u32, pub minor: u32, pub max_readahead: u32, pub flags: u32,
        pub flags2: u32, pub unused0: u32, pub unused1: u32, pub unused2: u32,
        pub unused3: u32, pub unused4: u32, pub unused5: u32, pub unused6: u32,
        pub unused7: u32, pub unused8: u32, pub unused9: u32, pub unused10: u32,
    } = 64;
    pub struct InitOut {
        pub major: u32, pub minor: u32, pub max_readahead: u32, pub flags: u32,
        pub max_background: u16, pub congestion_threshold: u16, pub max_write: u32,
        pub time_gran: u32, pub max_pages: u16, pub map_alignment: u16, pub flags2: u32,
        pub max_stack_depth: u32, pub request_timeout: u16, pub unused0: u16,
        pub unused1: u32, pub unused2: u32, pub unused3: u32, pub unused4: u32,
        pub unused5: u32,
    } = 64;
    pub struct InterruptIn { pub unique: u64 } = 8;
    pub struct FallocateIn {
        pub fh: u64, pub offset: u64, pub length: u64, pub mode: u32, pub padding: u32,
    } = 32;
    pub struct NotifyInvalInodeOut { pub ino: u64, pub off: i64, pub len: i64 } = 24;
    pub struct DirentHead { pub ino: u64, pub off: u64, pub namelen: u32, pub typ: u32 } = 24;
    pub struct BackingMap { pub fd: i32, pub flags: u32, pub padding: u64 } = 16;
    /// The fixed part of a ring entry's header area (`struct fuse_uring_ent_in_out`).
    pub struct UringEntInOut {
        pub flags: u64, pub commit_id: u64, pub payload_sz: u32, pub padding: u32,
        pub reserved: u64,
    } = 32;
    /// The 80-byte command area of an `IORING_OP_URING_CMD` SQE (`struct fuse_uring_cmd_req`),
    /// padded to the full area.
    pub struct UringCmdReq {
        pub flags: u64, pub commit_id: u64, pub qid: u16, pub padding0: u16, pub padding1: u32,
        pub rest0: u64, pub rest1: u64, pub rest2: u64, pub rest3: u64, pub rest4: u64,
        pub rest5: u64, pub rest6: u64,
    } = 80;
}

/// `struct fuse_uring_req_header`: `in_out` (the in/out header), `op_in` (the opcode's own
/// struct), then [`UringEntInOut`].
pub const URING_IN_OUT_HEADER_SZ: usize = 128;
pub const URING_OP_IN_OUT_SZ: usize = 128;
pub const URING_HEADER_SZ: usize = URING_IN_OUT_HEADER_SZ + URING_OP_IN_OUT_SZ + 32;
/// `enum fuse_uring_cmd`.
pub const URING_CMD_REGISTER: u32 = 1;
pub const URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// `_IOR(229, 0, uint32_t)`: attach a new /dev/fuse descriptor to a connection.
pub const DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;
/// `_IOW(229, 1, struct fuse_backing_map)`: register a passthrough backing file.
pub const DEV_IOC_BACKING_OPEN: libc::c_ulong = 0x4010_e501;
/// `_IOW(229, 2, uint32_t)`: drop a passthrough backing file.
pub const DEV_IOC_BACKING_CLOSE: libc::c_ulong = 0x4004_e502;

/// The size of the opcode's own leading struct: the part that FUSE over io_uring puts in
/// the ring entry's `op_in` area, the rest going to the payload buffer. /dev/fuse sends
/// both back to back, so one split serves both transports. Since Linux 6.14 every request
/// whose first argument is not a struct (LOOKUP's name, UNLINK's, ...) carries an empty
/// first argument, hence 0 here.
pub fn op_in_len(opcode: u32) -> usize {
    use std::mem::size_of;
    match opcode {
        op::FORGET => size_of::<ForgetIn>(),
        op::GETATTR => size_of::<GetattrIn>(),
        op::SETATTR => size_of::<SetattrIn>(),
        op::MKNOD => size_of::<MknodIn>(),
        op::MKDIR => size_of::<MkdirIn>(),
        op::RENAME => size_of::<RenameIn>(),
        op::RENAME2 => size_of::<Rename2In>(),
        op::LINK => size_of::<LinkIn>(),
        op::OPEN | op::OPENDIR => size_of::<OpenIn>(),
        op::READ | op::READDIR | op::READDIRPLUS => size_of::<ReadIn>(),
        op::WRITE => size_of::<WriteIn>(),
        op::RELEASE | op::RELEASEDIR => size_of::<ReleaseIn>(),
        op::FSYNC | op::FSYNCDIR => size_of::<FsyncIn>(),
        op::SETXATTR => size_of::<SetxattrIn>(),
        op::GETXATTR | op::LISTXATTR => size_of::<GetxattrIn>(),
        op::FLUSH => size_of::<FlushIn>(),
        op::INIT => size_of::<InitIn>(),
        op::ACCESS => size_of::<AccessIn>(),
        op::CREATE | op::TMPFILE => size_of::<CreateIn>(),
        op::INTERRUPT => size_of::<InterruptIn>(),
        op::BATCH_FORGET => size_of::<BatchForgetIn>(),
        op::FALLOCATE => size_of::<FallocateIn>(),
        op::GETLK | op::SETLK | op::SETLKW => 48,
        op::BMAP => 16,
        op::IOCTL => size_of::<IoctlIn>(),
        op::POLL => 24,
        op::LSEEK => 24,
        op::COPY_FILE_RANGE => 56,
        op::SYNCFS => 8,
        op::STATX => 24,
        _ => 0,
    }
}

/// File type bits of a mode, as the kernel's `DT_*` values for directory entries.
pub fn dirent_type(mode: u32) -> u32 {
    (mode & libc::S_IFMT) >> 12
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_kernel_macros() {
        // _IOC(dir, type, nr, size) = dir << 30 | size << 16 | type << 8 | nr
        let ioc = |dir: libc::c_ulong, nr: libc::c_ulong, size: libc::c_ulong| {
            dir << 30 | size << 16 | 229 << 8 | nr
        };
        assert_eq!(DEV_IOC_CLONE, ioc(2, 0, 4));
        assert_eq!(DEV_IOC_BACKING_OPEN, ioc(1, 1, 16));
        assert_eq!(DEV_IOC_BACKING_CLOSE, ioc(1, 2, 4));
    }

    #[test]
    fn pod_round_trips_and_reads_short_prefixes() {
        let w = WriteIn {
            fh: 7,
            offset: 1 << 20,
            size: 4096,
            write_flags: WRITE_KILL_SUIDGID,
            ..Default::default()
        };
        assert_eq!(WriteIn::read(w.bytes()), Some(w));
        assert_eq!(WriteIn::read(&w.bytes()[..39]), None);
        // A 7.31 kernel's 16-byte fuse_init_in still decodes, the rest zero.
        let i = InitIn {
            major: 7,
            minor: 31,
            max_readahead: 1 << 17,
            flags: 5,
            ..Default::default()
        };
        let short = InitIn::read_prefix(&i.bytes()[..16]);
        assert_eq!(short, i);
        assert_eq!(URING_HEADER_SZ, 288);
    }

    #[test]
    fn every_opcode_is_named_by_the_request_counters() {
        // The names live with the counters (`crate::stats::reqstats`), the numbers here.
        macro_rules! named {
            ($($op:ident),*) => {{
                $(assert_eq!(crate::stats::reqstats::op_name(op::$op), stringify!($op));)*
                [$(op::$op),*].len()
            }};
        }
        let n = named!(
            LOOKUP,
            FORGET,
            GETATTR,
            SETATTR,
            READLINK,
            SYMLINK,
            MKNOD,
            MKDIR,
            UNLINK,
            RMDIR,
            RENAME,
            LINK,
            OPEN,
            READ,
            WRITE,
            STATFS,
            RELEASE,
            FSYNC,
            SETXATTR,
            GETXATTR,
            LISTXATTR,
            REMOVEXATTR,
            FLUSH,
            INIT,
            OPENDIR,
            READDIR,
            RELEASEDIR,
            FSYNCDIR,
            GETLK,
            SETLK,
            SETLKW,
            ACCESS,
            CREATE,
            INTERRUPT,
            BMAP,
            DESTROY,
            IOCTL,
            POLL,
            NOTIFY_REPLY,
            BATCH_FORGET,
            FALLOCATE,
            READDIRPLUS,
            RENAME2,
            LSEEK,
            COPY_FILE_RANGE,
            SETUPMAPPING,
            REMOVEMAPPING,
            SYNCFS,
            TMPFILE,
            STATX
        );
        let unnamed = (0..crate::stats::reqstats::OPCODES as u32 + 8)
            .filter(|&o| crate::stats::reqstats::op_name(o) == "UNKNOWN")
            .count();
        assert_eq!(
            n + unnamed,
            crate::stats::reqstats::OPCODES + 8,
            "a name without an opcode"
        );
    }

    #[test]
    fn dirent_types_are_dt_values() {
        assert_eq!(dirent_type(libc::S_IFDIR | 0o755), libc::DT_DIR as u32);
        assert_eq!(dirent_type(libc::S_IFREG | 0o644), libc::DT_REG as u32);
        assert_eq!(dirent_type(libc::S_IFLNK | 0o777), libc::DT_LNK as u32);
    }
}
