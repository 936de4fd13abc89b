//! The direct path's core: which open handle may give a program the tier files' own
//! descriptors (a *grant*), what the file is owed while such a *lease* is out, and what
//! the program reports it moved. The socket that carries grants is `crate::direct`'s;
//! nothing here knows of it.
//!
//! A lease is an open FUSE handle of the file that the program keeps as long as it uses the
//! pieces' descriptors (the preload library keeps the FUSE descriptor open beside them),
//! so its RELEASE ends the lease, also when the program is killed. While any lease is out:
//! - the file's bytes go to its pieces past the daemon, so it is not admitted to staging
//!   memory, prefetched, moved or re-laid out. A file staging memory holds is not granted:
//!   memory first (the cache ranks which files are worth it at each open, as without the
//!   direct path), the tiers direct for the rest;
//! - while a lease may write, the pieces are the truth of its size: getattr reads them and
//!   tells the kernel not to cache the answer, a FUSE open of it gets no page cache, and the
//!   size is settled from the pieces at FLUSH and when the last lease goes;
//! - each piece descriptor handed out carries a shared `flock`: a later daemon (after
//!   `mount --force`) that knows nothing of this one's leases still finds the pieces in
//!   use ([`pieces_in_use`]) and does not move them.

use crate::config::Direct;
use crate::data::passthrough;
use crate::error::{Error, Result};
use crate::inodes::file::{FileNode, FileState};
use crate::inodes::types::{is_deepspeed_swap, Handle};
use crate::layout::FileLayout;
use crate::tier::admin::AdminState;
use crate::vfs::state::TierFs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use tierfs_wire::{NoReason, Shape, TierIo};

/// A granted open: the file's shape and one descriptor per piece, in `tiers`' order.
#[derive(Debug)]
pub struct Granted {
    pub ino: u64,
    pub shape: Shape,
    pub tiers: Vec<u8>,
    pub fds: Vec<OwnedFd>,
    /// The grant may write (the kernel's cached pages and attributes of the file must go).
    pub write: bool,
}

/// Why a handle does not go direct, in the protocol's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub why: NoReason,
    pub text: String,
}

fn no(why: NoReason, text: impl Into<String>) -> Refusal {
    Refusal {
        why,
        text: text.into(),
    }
}

/// The inode of the file handle `fh` and a new single-use token that proves the handle to
/// [`grant`] (the answer to the direct path's ioctl, which the kernel delivers only for the
/// descriptors of this handle). A token asked again replaces the one before.
pub(crate) fn token(fs: &TierFs, fh: u64) -> Result<(u64, u64)> {
    // Never 0 (no token waiting).
    let drawn = crate::sys::random_u64()? | 1;
    match fs.handles.lock().get_mut(&fh) {
        Some(Handle::File { ino, token, .. }) => {
            *token = drawn;
            Ok((*ino, drawn))
        }
        Some(_) => Err(Error::NotSupported(
            "the direct path for something not a file",
        )),
        None => Err(Error::BadHandle),
    }
}

/// Open flags a piece descriptor takes over from the program's open: the access mode is
/// the handle's, never more.
const KEPT_FLAGS: i32 = libc::O_APPEND | libc::O_DSYNC | libc::O_SYNC | libc::O_NONBLOCK;

/// Grants the handle `fh` the pieces' own descriptors, as the program's open `flags` ask,
/// with no more access than the handle's own; `token` must be the one [`token`] handed out
/// for it last (spent here, granted or not); `uid` is the caller's (for the log). Refuses a file staging memory holds (served from
/// there), and what the daemon cannot keep exact: a file moving, failed, in kernel
/// passthrough; an `O_DIRECT` open on a tier that refuses DeepSpeed's 1 KiB-aligned tails
/// (the daemon bounces those; the program could not); `O_APPEND` on stripes.
pub(crate) fn grant(
    fs: &TierFs,
    fh: u64,
    token: u64,
    flags: i32,
    uid: u32,
) -> std::result::Result<Granted, Refusal> {
    let (node, ino, read, write) = leasable(fs, fh, token, flags)?;
    let mut st = node.state.write();
    let shape = shape_for(fs, &st, flags)?;
    if st.cache.is_some() {
        // Staging memory holds it (the cache ranked it worth its memory at this open):
        // served from there through FUSE. What memory does not hold goes direct.
        return Err(no(NoReason::Busy, "held in staging memory"));
    }
    let access = match (read, write) {
        (true, true) => libc::O_RDWR,
        (false, true) => libc::O_WRONLY,
        _ => libc::O_RDONLY,
    };
    let direct = if flags & libc::O_DIRECT != 0 {
        libc::O_DIRECT
    } else {
        0
    };
    let open_flags = access | (flags & KEPT_FLAGS) | libc::O_CLOEXEC | direct;
    let (fds, tiers) = open_pieces(fs, &st, open_flags)?;
    st.direct_opens += 1;
    if write {
        st.direct_writers += 1;
    }
    for t in st.layout.tiers() {
        let c = &fs.tiers[t].counters;
        c.direct_open.fetch_add(1, Ordering::Relaxed);
        c.direct_opens_total.fetch_add(1, Ordering::Relaxed);
    }
    drop(st);
    if let Some(Handle::File { direct, .. }) = fs.handles.lock().get_mut(&fh) {
        *direct = true;
    }
    log::debug!(
        "direct path: inode {ino} to uid {uid} ({} piece(s))",
        fds.len()
    );
    Ok(Granted {
        ino,
        shape,
        tiers,
        fds,
        write,
    })
}

/// The handle's file, inode and whether it may read and write, if `token` proves it and its
/// open may go direct at all.
fn leasable(
    fs: &TierFs,
    fh: u64,
    token: u64,
    flags: i32,
) -> std::result::Result<(std::sync::Arc<FileNode>, u64, bool, bool), Refusal> {
    let (node, ino, read, write, passthrough) = {
        let mut handles = fs.handles.lock();
        let Some(Handle::File {
            node,
            ino,
            read,
            write,
            passthrough,
            direct,
            token: waiting,
        }) = handles.get_mut(&fh)
        else {
            return Err(no(NoReason::Refused, "not an open file of this mount"));
        };
        // A wrong guess leaves the right token in place: a peer cannot spend another's.
        if *waiting == 0 || *waiting != token {
            return Err(no(NoReason::Refused, "not the handle's token"));
        }
        *waiting = 0;
        if *direct {
            return Err(no(NoReason::Refused, "a lease already"));
        }
        (node.clone(), *ino, *read, *write, *passthrough)
    };
    if fs.direct_mode == Direct::Off {
        return Err(no(
            NoReason::Policy,
            "direct = \"off\" in the mount's config",
        ));
    }
    if passthrough {
        return Err(no(NoReason::Policy, "in kernel passthrough already"));
    }
    if fs.contain.is_failed(ino) {
        return Err(no(NoReason::Busy, "the file failed (EIO)"));
    }
    let swap = {
        let tree = fs.tree.read();
        tree.nodes
            .get(&ino)
            .is_some_and(|n| is_deepspeed_swap(n.name.as_ref()))
    };
    if flags & libc::O_DIRECT == 0 && !swap {
        return Err(no(
            NoReason::Policy,
            "neither O_DIRECT nor a DeepSpeed swap file",
        ));
    }
    Ok((node, ino, read, write))
}

/// How the file's pieces hold it, if the program can be handed them as they are now.
fn shape_for(fs: &TierFs, st: &FileState, flags: i32) -> std::result::Result<Shape, Refusal> {
    if st.migration.is_some() {
        return Err(no(NoReason::Busy, "moving to a new layout"));
    }
    if st.layout.tiers().iter().any(|t| fs.tiers[*t].missing) {
        return Err(no(NoReason::Busy, "a tier of it is missing"));
    }
    if st
        .layout
        .tiers()
        .iter()
        .any(|t| fs.tiers[*t].admin.state() == AdminState::Draining)
    {
        // A lease would hold the pieces the drain must move.
        return Err(no(NoReason::Busy, "a tier of it is draining"));
    }
    let direct = flags & libc::O_DIRECT != 0;
    if direct
        && st
            .layout
            .tiers()
            .iter()
            .any(|t| !fs.tiers[*t].small_direct_io)
    {
        return Err(no(
            NoReason::Policy,
            "O_DIRECT on a tier that refuses 1 KiB-aligned direct I/O",
        ));
    }
    match &st.layout {
        FileLayout::Whole { .. } => Ok(Shape::Whole),
        FileLayout::Stripe(_) if flags & libc::O_APPEND != 0 => {
            Err(no(NoReason::Policy, "O_APPEND on a striped file"))
        }
        FileLayout::Stripe(m) => Ok(Shape::Stripe {
            unit: m.unit,
            pattern: m.pattern.clone(),
        }),
    }
}

/// A new descriptor of each piece, opened with `flags`, each with a shared `flock`.
fn open_pieces(
    fs: &TierFs,
    st: &FileState,
    flags: i32,
) -> std::result::Result<(Vec<OwnedFd>, Vec<u8>), Refusal> {
    let mut fds = Vec::new();
    let mut tiers = Vec::new();
    for t in st.layout.tiers() {
        let Some(piece) = &st.pieces[t] else {
            return Err(no(NoReason::Error, "a piece is not open"));
        };
        let fd = reopen(piece.file().as_raw_fd(), flags).map_err(|e| {
            no(
                NoReason::Error,
                format!("cannot open the piece on tier '{}': {e}", fs.tiers[t].name),
            )
        })?;
        // SAFETY: flock(2) on a descriptor we own; no memory involved.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0 {
            // A tier without flock (Lustre `noflock`) still gets its lease; only a later
            // daemon's check is lost there.
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(no(NoReason::Busy, "a move of it is under way"));
            }
        }
        fds.push(fd);
        tiers.push(t as u8);
    }
    Ok((fds, tiers))
}

/// A new open file description of the file `fd` refers to, with `flags`: through
/// /proc/self/fd, so no path (which a rename may change) is looked up in a tier.
fn reopen(fd: i32, flags: i32) -> std::io::Result<OwnedFd> {
    let p = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
    // SAFETY: a NUL-terminated path we own; the result is checked.
    let r = unsafe { libc::open(p.as_ptr(), flags) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `r` is a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// The end of a lease (its handle's RELEASE): the last writing one settles the size
/// from the pieces.
pub(crate) fn end_lease(fs: &TierFs, ino: u64, node: &FileNode, write: bool) {
    let mut st = node.state.write();
    st.direct_opens = st.direct_opens.saturating_sub(1);
    for t in st.layout.tiers() {
        fs.tiers[t]
            .counters
            .direct_open
            .fetch_sub(1, Ordering::Relaxed);
    }
    if write {
        st.direct_writers = st.direct_writers.saturating_sub(1);
        passthrough::sync_size_from_pieces(&fs.tiers, node, &st);
    }
    log::debug!("direct path: a lease of inode {ino} ended");
}

/// What a program reports its direct descriptors moved, per tier: counted in the tiers'
/// bytes and requests. The busy periods feed the bandwidth estimates, merged with what
/// other descriptors reported (ranks reading a tier at once share its time), and only
/// from the mount's owner (and root): another user's report cannot skew the layout of
/// the owner's files.
pub(crate) fn report(fs: &TierFs, uid: u32, tiers: &[TierIo]) {
    let trusted = uid == 0 || uid == fs.euid;
    for io in tiers {
        let Some(t) = fs.tiers.get(io.tier as usize) else {
            continue;
        };
        let c = &t.counters;
        c.bytes_read.fetch_add(io.read_bytes, Ordering::Relaxed);
        c.bytes_written.fetch_add(io.write_bytes, Ordering::Relaxed);
        c.reads.fetch_add(io.reads, Ordering::Relaxed);
        c.writes.fetch_add(io.writes, Ordering::Relaxed);
        c.direct_bytes
            .fetch_add(io.read_bytes + io.write_bytes, Ordering::Relaxed);
        c.app.direct(io);
        if trusted {
            c.read_busy.add_ns(c.direct_read.add(&io.read_busy));
            c.write_busy.add_ns(c.direct_write.add(&io.write_busy));
            let both: Vec<_> = io.read_busy.iter().chain(&io.write_busy).copied().collect();
            c.io_busy.add_ns(c.direct_io.add(&both));
            c.read_ns.fetch_add(io.read_lat_ns, Ordering::Relaxed);
            c.write_ns.fetch_add(io.write_lat_ns, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reopened_descriptor_has_only_the_access_asked() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        let rw = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        let ro = reopen(rw.as_raw_fd(), libc::O_RDONLY | libc::O_CLOEXEC).unwrap();
        let f = std::fs::File::from(ro);
        use std::io::Write;
        assert!((&f).write(b"x").is_err(), "a read-only grant writes");
        // SAFETY: fcntl(2) F_GETFD on a descriptor we own.
        let fd_flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFD) };
        assert!(fd_flags & libc::FD_CLOEXEC != 0);
    }

    #[test]
    fn a_shared_lock_on_a_granted_descriptor_shows_the_piece_in_use() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        let daemon = std::fs::File::open(&p).unwrap();
        let granted = reopen(daemon.as_raw_fd(), libc::O_RDONLY).unwrap();
        let probe = |f: &std::fs::File| {
            // SAFETY: flock(2) on descriptors we own.
            let ok = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
            if ok {
                // SAFETY: as above.
                unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
            }
            ok
        };
        assert!(probe(&daemon), "free before the grant");
        // SAFETY: flock(2) on a descriptor we own.
        let locked = unsafe { libc::flock(granted.as_raw_fd(), libc::LOCK_SH) };
        assert_eq!(locked, 0);
        assert!(!probe(&daemon), "the grant's lock is not seen");
        drop(granted);
        assert!(probe(&daemon), "the lock outlived the descriptor");
    }
}
