//! The one error type of the filesystem core, and its single mapping to an errno.
//!
//! Every core operation returns `Result<T, Error>`; the FUSE adapter only calls
//! [`Error::errno`]. Backing-store failures keep the tier and path they happened on, so the
//! daemon log says where a request failed while the caller gets the tier's own errno (never a
//! short write, never zeros instead of data).
//!
//! Beside it, [`failure`]: the error a *command* ends with (a message and the process exit
//! code), which every command, the offline tools and the daemon's background child share.
//! The two are the crate's two errors, kept apart because they answer different callers
//! (a kernel request wants an errno, a process an exit code), and kept together here, at
//! the bottom layer, because nearly everything above returns one or the other.

pub mod failure;

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("name too long")]
    NameTooLong,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("operation not permitted: {0}")]
    NotPermitted(&'static str),
    #[error("operation not supported: {0}")]
    NotSupported(&'static str),
    #[error("permission denied: {0}")]
    Access(&'static str),
    #[error("no such attribute")]
    NoAttr,
    #[error("unknown file handle")]
    BadHandle,
    #[error(
        "no tier has space for {0} more bytes (each tier keeps FREE_RESERVE of its file \
         system free and stays within its capacity; the log has each tier's account)"
    )]
    NoSpace(u64),
    /// A backing filesystem call failed on one tier.
    #[error("tier '{tier}': {op} {path}: {source}")]
    Tier {
        tier: String,
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The tier returned fewer bytes than its file size says it holds.
    #[error("tier '{tier}': short read of {path} at {offset}: got {got} of {want} bytes")]
    ShortRead {
        tier: String,
        path: PathBuf,
        offset: u64,
        got: usize,
        want: usize,
    },
    /// The inode failed earlier (see `vfs::contain`: a request panicked, or a move was torn
    /// on the tiers): EIO until remount.
    #[error(
        "inode {ino} failed (a panic in a request, or a move torn on the tiers: see the log); \
         EIO until the next mount"
    )]
    Failed { ino: u64 },
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A `.tierfs/control` write refused, with the errno it fails with and the reason the
    /// writer reads back from its handle (`crate::vfs::tierctl`).
    #[error("{reason}")]
    Refused { errno: i32, reason: String },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The errno a FUSE caller sees.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound => libc::ENOENT,
            Error::Exists => libc::EEXIST,
            Error::NotDir => libc::ENOTDIR,
            Error::IsDir => libc::EISDIR,
            Error::NotEmpty => libc::ENOTEMPTY,
            Error::NameTooLong => libc::ENAMETOOLONG,
            Error::Invalid(_) => libc::EINVAL,
            Error::NotPermitted(_) => libc::EPERM,
            Error::NotSupported(_) => libc::EOPNOTSUPP,
            Error::Access(_) => libc::EACCES,
            Error::NoAttr => libc::ENODATA,
            Error::BadHandle => libc::EBADF,
            Error::NoSpace(_) => libc::ENOSPC,
            Error::Tier { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::ShortRead { .. } => libc::EIO,
            Error::Failed { .. } => libc::EIO,
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::Refused { errno, .. } => *errno,
        }
    }

    /// Whether this error came from a tier (and so belongs in the daemon log), as opposed
    /// to an ordinary answer such as ENOENT.
    pub fn is_backing_failure(&self) -> bool {
        matches!(
            self,
            Error::Tier { .. } | Error::ShortRead { .. } | Error::Io(_)
        )
    }

    /// Builds a [`Error::Tier`] from a failed backing call.
    pub fn tier(tier: &str, op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Tier {
            tier: tier.to_string(),
            op,
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backing_errno_passes_through() {
        let e = Error::tier(
            "pfs",
            "write",
            "/x",
            io::Error::from_raw_os_error(libc::EROFS),
        );
        assert_eq!(e.errno(), libc::EROFS);
        assert!(e.is_backing_failure());
        assert!(e.to_string().contains("tier 'pfs'"));
        assert!(!Error::NotFound.is_backing_failure());
    }

    #[test]
    fn errors_without_os_code_are_eio() {
        let e = Error::Io(io::Error::other("boom"));
        assert_eq!(e.errno(), libc::EIO);
    }
}
