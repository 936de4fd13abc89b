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
//! re-layout is not committed. Requests on its folder that name it (unlink, rename) still
//! run, so the file can be removed or moved aside without a remount.
//!
//! Debug builds accept a control command `debug-panic PATH` (see [`crate::control`]) that
//! makes the next request on PATH's inode panic, so the tests can show all of this through
//! a real mount; release builds refuse the command as unknown.

use super::TierFs;
use crate::error::{Error, Result};
use parking_lot::RwLock;
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The failed inodes and the panic counter of a mount.
#[derive(Debug, Default)]
pub(super) struct Containment {
    failed: RwLock<HashSet<u64>>,
    /// Set with the first failed inode: the common case (none) costs one load per request.
    any_failed: AtomicBool,
    panics: AtomicU64,
    /// Debug builds: the inode whose next request panics (`debug-panic`), 0 for none.
    armed: AtomicU64,
}

/// The text of a panic payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = p.downcast_ref::<&str>() {
        s
    } else if let Some(s) = p.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

impl TierFs {
    /// Runs the handler of one request on inode `ino` (for requests on a handle, the inode
    /// the handle is open on; for name operations, the folder): EIO at once if `ino` has
    /// failed; otherwise `f`'s result, or, if `f` panics, EIO with `ino` marked failed,
    /// the panic logged with `op` and counted.
    pub fn contain<T>(
        &self,
        op: &'static str,
        ino: u64,
        f: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        self.check_failed(ino)?;
        match catch_unwind(AssertUnwindSafe(|| {
            self.injected_panic(op, ino);
            f()
        })) {
            Ok(r) => r,
            Err(p) => {
                self.contain.panics.fetch_add(1, Ordering::Relaxed);
                let what = panic_text(&*p);
                log::error!("request {op} on inode {ino} panicked: {what}; answered EIO");
                self.mark_failed(ino, &format!("a panic in {op}"));
                Err(Error::Failed { ino })
            }
        }
    }

    /// EIO ([`Error::Failed`]) if `ino` has failed. Entry replies (lookup, create, mkdir)
    /// check the inode they answer with too, so a failed file is not handed out again.
    pub fn check_failed(&self, ino: u64) -> Result<()> {
        if self.is_failed(ino) {
            Err(Error::Failed { ino })
        } else {
            Ok(())
        }
    }

    /// Whether `ino` answers EIO until the next mount.
    pub fn is_failed(&self, ino: u64) -> bool {
        self.contain.any_failed.load(Ordering::Acquire) && self.contain.failed.read().contains(&ino)
    }

    /// Marks `ino` failed (logged with `why`): every request on it answers EIO until the
    /// next mount.
    pub fn mark_failed(&self, ino: u64, why: &str) {
        if self.contain.failed.write().insert(ino) {
            self.contain.any_failed.store(true, Ordering::Release);
            log::error!(
                "inode {ino} failed ({why}); every request on it answers EIO until the next \
                 mount, which rebuilds it from the tiers (its data there is left as it was)"
            );
        }
    }

    /// Requests whose handler panicked since mount.
    pub fn request_panics(&self) -> u64 {
        self.contain.panics.load(Ordering::Relaxed)
    }

    /// Inodes marked failed since mount.
    pub fn failed_inodes(&self) -> u64 {
        self.contain.failed.read().len() as u64
    }

    /// Debug builds: makes the next request on `ino` panic (`debug-panic`).
    pub(super) fn arm_panic(&self, ino: u64) {
        if cfg!(debug_assertions) {
            self.contain.armed.store(ino, Ordering::SeqCst);
            log::warn!("debug-panic: the next request on inode {ino} panics");
        }
    }

    fn injected_panic(&self, op: &'static str, ino: u64) {
        if cfg!(debug_assertions)
            && ino != 0
            && self
                .contain
                .armed
                .compare_exchange(ino, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            panic!("injected by debug-panic ({op} on inode {ino})");
        }
    }
}
