//! The inodes a mount has failed, and why they may or may not still be written: the sets
//! the data path asks before it moves or writes back a file, and marks when a move tears.
//!
//! An inode fails after a panic in one of its requests (its state in memory is not
//! trusted: `crate::vfs::contain` catches the panic) or when a move of it stops torn on
//! the tiers (`Containment::mark_torn`: its state in memory is sound, so its cached
//! blocks are still written back, `Containment::writes_back`). Every request on a failed
//! inode answers EIO until the next mount, which rebuilds it from the tiers and settles a
//! torn move by its journal (`Containment::mark_journaled`).

use parking_lot::RwLock;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The failed inodes and the panic counter of a mount.
#[derive(Debug, Default)]
pub(crate) struct Containment {
    pub(crate) failed: RwLock<HashSet<u64>>,
    /// Failed inodes whose state in memory is sound (a move torn on the tiers, not a
    /// panic): their cached blocks are still written back, through the old pieces their
    /// handles hold, which the next mount keeps or puts back by the move's journal.
    pub(crate) torn: RwLock<HashSet<u64>>,
    /// Failed inodes whose move tore with a journal naming its temporaries: the next
    /// mount finishes it from them (`relink`), so a pending migration's writes are kept.
    pub(crate) journaled: RwLock<HashSet<u64>>,
    /// Set with the first failed inode: the common case (none) costs one load per request.
    pub(crate) any_failed: AtomicBool,
    pub(crate) panics: AtomicU64,
    /// Debug builds: the inode whose next request panics (`debug-panic`), 0 for none.
    pub(crate) armed: AtomicU64,
}

impl Containment {
    pub(crate) fn is_failed(&self, ino: u64) -> bool {
        self.any_failed.load(Ordering::Acquire) && self.failed.read().contains(&ino)
    }

    pub(crate) fn mark_failed(&self, ino: u64, why: &str) {
        if self.failed.write().insert(ino) {
            self.any_failed.store(true, Ordering::Release);
            log::error!(
                "inode {ino} failed ({why}); every request on it answers EIO until the next \
                 mount, which rebuilds it from the tiers (its data there is left as it was)"
            );
        }
    }

    /// `Containment::mark_failed` for a move torn on the tiers: the inode's state in
    /// memory is sound, so its cached blocks are still written back
    /// (`Containment::writes_back`).
    pub(crate) fn mark_torn(&self, ino: u64, why: &str) {
        // One failed already (a panic while the move ran) stays untrusted.
        if !self.is_failed(ino) {
            self.torn.write().insert(ino);
        }
        self.mark_failed(ino, why);
    }

    /// Notes that `ino`'s move tore with a journal naming its new pieces' temporaries,
    /// which the next mount renames in: its pending writes are not lost
    /// (`Containment::is_journaled`).
    pub(crate) fn mark_journaled(&self, ino: u64) {
        self.journaled.write().insert(ino);
    }

    /// Whether `ino`'s torn move has a journal the next mount finishes it by.
    pub(crate) fn is_journaled(&self, ino: u64) -> bool {
        self.journaled.read().contains(&ino)
    }

    /// Whether the inode's dirty cached blocks may be written to its pieces: not after a
    /// panic, which may have left its layout and open pieces out of step (its data on the
    /// tiers stays as it was, and the unmount reports the blocks lost). A torn move's are:
    /// its handles still hold the old pieces, and the next mount either keeps those (the
    /// move finished: its new pieces had the blocks copied already) or puts them back
    /// (undone).
    pub(crate) fn writes_back(&self, ino: u64) -> bool {
        !self.is_failed(ino) || self.torn.read().contains(&ino)
    }
}
