//! The core's vocabulary: inode numbers, attributes, directory entries and open flags
//! as the FUSE adapter sees them, the `.tierfs/` virtual files, and small rules on names and
//! errors shared by the namespace and the data path.

use crate::error::{Error, Result};
use crate::inodes::file::FileNode;
use crate::layout::{FileLayout, NAME_MAX};
use crate::sys::SetTime;
use crate::tierio::Piece;
use std::ffi::{OsStr, OsString};
use std::fs::{self};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::sync::Arc;
use std::time::SystemTime;

/// Inode of the mount root (FUSE's fixed root id).
pub const ROOT_INO: u64 = 1;
/// Inodes 2..FIRST_INO are the virtual stats files; see [`Virtual`].
pub const FIRST_INO: u64 = 64;
/// Prefix of the temporary names tierfs uses inside tier folders (cleaned at mount).
pub const TMP_PREFIX: &str = ".tierfs-tmp-";

/// The virtual, read-only files under the stats folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Virtual {
    Dir,
    Tiers,
    Files,
    Config,
    StatsJson,
    /// Prometheus text exposition format (see `crate::stats::metrics`).
    Metrics,
    /// The host-memory cache: totals, learned orders, cached files (JSON).
    Cache,
    /// Commands: hints for the cache and the operator's on tiers (`crate::control`); a
    /// handle open read-write reads back the reply to its last write.
    Control,
}

impl Virtual {
    pub const FILES: [Virtual; 7] = [
        Virtual::Tiers,
        Virtual::Files,
        Virtual::Config,
        Virtual::StatsJson,
        Virtual::Metrics,
        Virtual::Cache,
        Virtual::Control,
    ];

    pub fn ino(self) -> u64 {
        match self {
            Virtual::Dir => 2,
            Virtual::Tiers => 3,
            Virtual::Files => 4,
            Virtual::Config => 5,
            Virtual::StatsJson => 6,
            Virtual::Metrics => 7,
            Virtual::Cache => 8,
            Virtual::Control => 9,
        }
    }

    pub fn from_ino(ino: u64) -> Option<Virtual> {
        Some(match ino {
            2 => Virtual::Dir,
            3 => Virtual::Tiers,
            4 => Virtual::Files,
            5 => Virtual::Config,
            6 => Virtual::StatsJson,
            7 => Virtual::Metrics,
            8 => Virtual::Cache,
            9 => Virtual::Control,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Virtual::Dir => "",
            Virtual::Tiers => "tiers",
            Virtual::Files => "files",
            Virtual::Config => "config",
            Virtual::StatsJson => "stats.json",
            Virtual::Metrics => "metrics",
            Virtual::Cache => "cache",
            Virtual::Control => "control",
        }
    }
}

/// What kind of object a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

/// Attributes of a node as the caller sees them.
#[derive(Debug, Clone, Copy)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub blocks: u64,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    /// Changing behind the daemon's back (a program writes the pieces through direct-path
    /// descriptors): the kernel must not cache these attributes.
    pub volatile: bool,
}

/// Who is asking (for ownership of new objects).
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    pub uid: u32,
    pub gid: u32,
}

/// Attribute changes of a setattr; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// One directory entry for readdir.
#[derive(Debug, Clone)]
pub struct DirEntry {
    pub ino: u64,
    pub kind: Kind,
    pub name: OsString,
}

/// Filesystem totals for statfs.
#[derive(Debug, Clone, Copy)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
}

/// How the adapter should open a handle.
#[derive(Debug, Clone, Default)]
pub struct OpenInfo {
    /// Bypass the kernel page cache (virtual files, whose size is not known in advance).
    pub direct_io: bool,
    /// The kernel may keep the file's cached pages (`FOPEN_KEEP_CACHE`); see
    /// `FileState::open_keeps_cache`.
    pub keep_cache: bool,
    /// The close needs no FLUSH (`FOPEN_NOFLUSH`): a read-only open, for which the daemon
    /// has nothing to do at close, and the kernel (no writeback cache) nothing to write.
    /// Every read close saves a round trip to the daemon, and the direct path's grant,
    /// which closes its copy of the program's descriptor, one more.
    pub no_flush: bool,
    /// Open in kernel passthrough on this backing piece: the kernel then does the handle's
    /// reads and writes itself. The adapter registers the piece once per inode and calls
    /// [`crate::vfs::TierFs::passthrough_refused`] if the kernel will not take it.
    pub passthrough: Option<Arc<Piece>>,
}

/// Headroom a tier must have beyond a file's size before the file may be opened in
/// passthrough: passthrough writes bypass the daemon, so the move-on-ENOSPC rescue cannot
/// run for them and a full tier would fail the caller.
pub const PASSTHROUGH_HEADROOM: u64 = 1 << 30;

pub(crate) fn name_ok(name: &OsStr) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong);
    }
    if name.is_empty() || name == "." || name == ".." || name.as_bytes().contains(&b'/') {
        return Err(Error::Invalid("bad name"));
    }
    // Our own temporaries carry this prefix and the mount-time scan removes them, so a
    // user file of that name would be lost: refuse it up front.
    if name.as_bytes().starts_with(TMP_PREFIX.as_bytes()) {
        return Err(Error::NotPermitted(
            "names starting with .tierfs-tmp- are reserved",
        ));
    }
    Ok(())
}

pub(crate) fn kind_of(ft: fs::FileType) -> Option<Kind> {
    Some(if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_socket() {
        Kind::Socket
    } else if ft.is_char_device() {
        Kind::CharDevice
    } else if ft.is_block_device() {
        Kind::BlockDevice
    } else {
        return None;
    })
}

pub(crate) fn is_no_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Write failures a whole file survives by moving to another tier: the tier is full, or it
/// has turned read-only or failing (what it holds is copied while reads still work).
pub(crate) fn is_rescuable(e: &std::io::Error) -> bool {
    is_no_space(e) || matches!(e.raw_os_error(), Some(libc::EROFS) | Some(libc::EIO))
}

/// Whether writing `[off, end)` of a file reaches its primary piece.
pub(crate) fn touches_primary(layout: &FileLayout, off: u64, end: u64) -> bool {
    let FileLayout::Stripe(m) = layout else {
        return true;
    };
    let (first, last) = (off / m.unit, (end.max(off + 1) - 1) / m.unit);
    let period = m.pattern.len() as u64;
    last - first + 1 >= period
        || (first..=last).any(|k| m.pattern[(k % period) as usize] == m.pattern[0])
}

pub(crate) fn sys_egid() -> u32 {
    // SAFETY: getegid cannot fail.
    unsafe { libc::getegid() }
}
/// Whether `name` is one of DeepSpeed's swap files (`*.tensor.swp`: optimizer state,
/// gradients and parameters). DeepSpeed opens them `O_DIRECT` and never clears the flag on
/// an open file, so kernel passthrough of such an open is safe, which it is not for every
/// program (see [`crate::config::Passthrough::Auto`]).
pub fn is_deepspeed_swap(name: &OsStr) -> bool {
    name.as_bytes().ends_with(b".tensor.swp")
}

#[derive(Debug, Clone)]
pub(crate) enum Handle {
    File {
        node: Arc<FileNode>,
        ino: u64,
        write: bool,
        /// The open may read (not `O_WRONLY`): with `write`, the access the kernel checked.
        read: bool,
        passthrough: bool,
        /// The direct path's single-use token last handed out for this handle by its ioctl
        /// (`crate::vfs::direct::token`), 0 when none is waiting.
        token: u64,
        /// A direct-path lease (`crate::vfs::direct`): a program holds the pieces' own
        /// descriptors for as long as this handle is open.
        direct: bool,
    },
    Virtual(Arc<Vec<u8>>),
    /// `.tierfs/control`, open for writing (and, read-write, for reading the replies).
    Control(Arc<Reply>),
    Dir(Arc<Vec<DirEntry>>),
}

/// The reply to a handle's last `.tierfs/control` write, read back through the same
/// handle: `ok ...` lines, or `error: ...` with the reason the write failed. Read from a
/// cursor of its own, not the file offset: the write moved the offset past its bytes, so a
/// plain `read` after `write` starts there, and a `pread` at 0 is as good.
#[derive(Debug, Default)]
pub(crate) struct Reply(parking_lot::Mutex<(Vec<u8>, usize)>);

impl Reply {
    /// The longest reply kept: a `status` of many tiers fits; a refused write's reason
    /// quotes at most an excerpt of the bad line (`crate::control::log_excerpt`).
    pub(crate) const MAX: usize = 64 << 10;

    /// Replaces the reply (a new write answered); the next read starts at its beginning.
    pub(crate) fn set(&self, mut text: String) {
        if text.len() > Self::MAX {
            let mut cut = Self::MAX;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        *self.0.lock() = (text.into_bytes(), 0);
    }

    /// Copies the unread rest of the reply into `buf`; 0 once it has all been read.
    pub(crate) fn read(&self, buf: &mut [u8]) -> usize {
        let mut g = self.0.lock();
        let (text, at) = &mut *g;
        let n = buf.len().min(text.len() - *at);
        buf[..n].copy_from_slice(&text[*at..*at + n]);
        *at += n;
        n
    }
}
