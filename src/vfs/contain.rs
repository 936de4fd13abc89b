//! Per-request panic containment: a bug that panics in one request's handler costs that
//! request and that inode, not the mount.
//!
//! Every request handler runs inside [`TierFs::contain`] (the FUSE adapter calls it around
//! each core call, and so must any other transport): a panic is caught, logged with the
//! operation and inode, counted (`tierfs_request_panics_total`), answered with EIO, and the
//! inode is marked failed. `parking_lot` locks do not poison, so the state the panic left
//! half-changed (a layout, a size, a piece table) would otherwise be served as if it were
//! sound; a failed inode instead answers EIO to every request until the next mount, which
//! rebuilds it from the tiers. Its data on the tiers is left as it was: at unmount its
//! re-layout is not committed, and its dirty blocks in the host-memory cache are never
//! written back (`crate::data::cached::write_back_locked`; the unmount reports them lost).
//! A move torn on the tiers fails the inode too, but its state in memory is sound and its
//! cached blocks are written back (the sets and their rules are
//! [`crate::inodes::contain`]'s, which the data path marks and asks). Requests on its
//! folder still run, but none removes, renames or replaces it, nor renames a folder above
//! it (its move's journal may be pending, and the next mount settles that against its
//! names by path and its backing inodes: `crate::vfs::namespace`, `crate::vfs::links`).
//!
//! Debug builds accept a control command `debug-panic PATH` (see [`crate::control`]) that
//! makes the next request on PATH's inode panic, so the tests can show all of this through
//! a real mount; release builds refuse the command as unknown.

use crate::error::{Error, Result};
use crate::vfs::state::TierFs;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

/// The text of a panic payload.
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = p.downcast_ref::<&str>() {
        s
    } else if let Some(s) = p.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

pub(crate) fn contain<T>(
    fs: &TierFs,
    op: &'static str,
    ino: u64,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    check_failed(fs, ino)?;
    match catch_unwind(AssertUnwindSafe(|| {
        injected_panic(fs, op, ino);
        f()
    })) {
        Ok(r) => r,
        Err(p) => {
            fs.contain.panics.fetch_add(1, Ordering::Relaxed);
            let what = panic_text(&*p);
            log::error!("request {op} on inode {ino} panicked: {what}; answered EIO");
            // A panic's state is never trusted, even if a move tore the inode meanwhile.
            fs.contain.torn.write().remove(&ino);
            fs.contain.mark_failed(ino, &format!("a panic in {op}"));
            Err(Error::Failed { ino })
        }
    }
}

pub(crate) fn check_failed(fs: &TierFs, ino: u64) -> Result<()> {
    if fs.contain.is_failed(ino) {
        Err(Error::Failed { ino })
    } else {
        Ok(())
    }
}

/// A folder above a failed file is not renamed (EIO): a pending move's journal names the
/// file by its path, and under a new one it would no longer find it.
pub(crate) fn check_none_failed_below(
    fs: &TierFs,
    tree: &crate::inodes::tree::Tree,
    dir: &std::path::Path,
) -> Result<()> {
    if !fs.contain.any_failed.load(Ordering::Acquire) {
        return Ok(());
    }
    let failed = fs.contain.failed.read();
    // Any of its names: the journal names each of them.
    let below = |ino: u64| {
        let others = tree
            .get(ino)
            .map(|n| n.links.as_slice())
            .unwrap_or_default();
        tree.rel(ino)
            .into_iter()
            .chain(others.iter().filter_map(|(p, n)| tree.name_rel(*p, n)))
            .any(|r| r.starts_with(dir))
    };
    match failed.iter().find(|i| below(**i)) {
        Some(ino) => Err(Error::Failed { ino: *ino }),
        None => Ok(()),
    }
}

pub(crate) fn request_panics(fs: &TierFs) -> u64 {
    fs.contain.panics.load(Ordering::Relaxed)
}

pub(crate) fn failed_inodes(fs: &TierFs) -> u64 {
    fs.contain.failed.read().len() as u64
}

/// Debug builds: makes the next request on `ino` panic (`debug-panic`).
pub(crate) fn arm_panic(fs: &TierFs, ino: u64) {
    if cfg!(debug_assertions) {
        fs.contain.armed.store(ino, Ordering::SeqCst);
        log::warn!("debug-panic: the next request on inode {ino} panics");
    }
}

pub(crate) fn injected_panic(fs: &TierFs, op: &'static str, ino: u64) {
    if cfg!(debug_assertions)
        && ino != 0
        && fs
            .contain
            .armed
            .compare_exchange(ino, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    {
        panic!("injected by debug-panic ({op} on inode {ino})");
    }
}
