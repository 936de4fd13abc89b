//! An open file's state: its size, layout, open pieces, cache entry and lazy migration,
//! behind the file's own lock. The namespace finds a file by inode; the data path works on
//! this state alone, so reads and writes never touch the tree.

use crate::layout::FileLayout;
use crate::policy::placement::Charge;
use crate::tierio::Piece;
use parking_lot::{Mutex, RwLock};

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// A regular file's state while the mount runs.
#[derive(Debug)]
pub struct FileNode {
    pub(crate) size: AtomicU64,
    /// The layout's primary tier, readable without the state lock: getattr answers from
    /// the primary piece while a move holds the lock for a long copy.
    pub(crate) primary: AtomicUsize,
    pub(crate) state: RwLock<FileState>,
    /// Placement charge, settled with the real size when the last writer closes.
    pub(crate) charge: Mutex<Option<Charge>>,
    /// Written since the last settle.
    pub(crate) dirty: AtomicBool,
    /// Unlinked: its bytes need never reach a tier again.
    pub(crate) gone: AtomicBool,
    /// While cached: the file's mtime when its primary piece does not have it yet (a write
    /// absorbed in memory, or a time set by the user that the next write-back would
    /// overwrite). Shown by getattr; stamped on the primary piece after each write-back.
    pub(crate) mtime: Mutex<Option<SystemTime>>,
}

#[derive(Debug)]
pub(crate) struct FileState {
    pub(crate) layout: FileLayout,
    /// Open pieces by tier index, present while `opens > 0`.
    pub(crate) pieces: Vec<Option<Arc<Piece>>>,
    pub(crate) opens: u32,
    /// How many of `opens` are kernel passthrough handles. The kernel keeps an inode either
    /// in passthrough or in cached mode, so while this is non-zero every open must be
    /// passthrough, and while other opens exist none may be.
    pub(crate) pt_opens: u32,
    /// Held in the host-memory cache: every read and write goes through it, and the pieces
    /// stay open while it is (for write-back).
    pub(crate) cache: Option<Arc<crate::cache::entry::Entry>>,
    /// How many of `opens` may write (a migration commits when the last one closes).
    pub(crate) writers: u32,
    /// How many of `opens` are direct-path leases (`crate::vfs::direct`): a program holds
    /// the pieces' own descriptors and its I/O never reaches the daemon. While any is out
    /// the file is not cached, moved or migrated, and ...
    pub(crate) direct_opens: u32,
    /// ... while any of them may write, its size is read from the pieces and the kernel
    /// may not cache its attributes.
    pub(crate) direct_writers: u32,
    /// A lazy re-layout under way (see `relocate`): writes go to its new pieces, reads
    /// take each block from where it is. Never together with `cache`.
    pub(crate) migration: Option<Migration>,
    /// A passthrough handle was opened since the kernel last dropped this file's cached
    /// pages: its writes went to the backing file, past those pages, so the next open must
    /// have the kernel drop them (see [`FileState::open_keeps_cache`]). Linux 6.18 drops
    /// them itself when an inode leaves passthrough (the test passes without this), but no
    /// document promises it, and one drop per passthrough use costs little.
    pub(crate) pt_since_drop: bool,
}

impl FileState {
    /// Whether a program does this file's I/O past the daemon now: kernel passthrough or
    /// direct-path leases. Its pieces are then the truth (size included), and it must not
    /// be cached, moved or re-laid out under them.
    pub(crate) fn bypassed(&self) -> bool {
        self.pt_opens > 0 || self.direct_opens > 0
    }

    /// The file's size as its open pieces say it (`None` where a piece is not open or
    /// cannot be read): the truth while something writes them past the daemon.
    pub(crate) fn pieces_size(&self) -> Option<u64> {
        let len = |t: usize| -> Option<u64> {
            self.pieces[t]
                .as_ref()?
                .file()
                .metadata()
                .ok()
                .map(|m| m.len())
        };
        match &self.layout {
            FileLayout::Whole { tier } => len(*tier),
            FileLayout::Stripe(m) => m
                .tiers
                .iter()
                .map(|t| Some(m.logical_end(*t, len(*t)?)))
                .try_fold(0, |a, e| Some(a.max(e?))),
        }
    }

    /// Whether a program may hold a direct descriptor of one of the open pieces that this
    /// daemon did not hand out (an earlier daemon's, before `mount --force`): the shared
    /// `flock` every direct grant puts on its descriptors keeps an exclusive one from
    /// being taken (`crate::vfs::direct`).
    pub(crate) fn pieces_in_use(&self) -> bool {
        use std::os::fd::AsRawFd;
        self.pieces.iter().flatten().any(|p| {
            let fd = p.file().as_raw_fd();
            // SAFETY: flock(2) on the piece's own descriptor; no memory involved.
            let got = unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0;
            if got {
                // SAFETY: as above; the lock was only a question.
                unsafe { libc::flock(fd, libc::LOCK_UN) };
            }
            !got && std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
        })
    }

    /// Counts one more open, `pt` whether in passthrough, and says whether the kernel may
    /// keep the file's cached pages for it (`FOPEN_KEEP_CACHE`). Every byte of a file the
    /// daemon serves reaches it through the kernel, which keeps its own pages up to date,
    /// so they need dropping only after passthrough writes. Dropping them at every open (the
    /// kernel's default) races with a buffered write in flight on another handle: the
    /// kernel marks the written page up to date before its WRITE reaches the daemon, the
    /// drop takes the page, and a read then caches the bytes from before the write, where
    /// they stay after it returned (the concurrent model test found it).
    pub(crate) fn open_keeps_cache(&mut self, pt: bool, write: bool) -> bool {
        self.opens += 1;
        self.writers += u32::from(write);
        if pt {
            self.pt_since_drop = true;
            return false;
        }
        !std::mem::replace(&mut self.pt_since_drop, false)
    }
}

impl FileNode {
    /// Whether the tiers' books count this file's bytes: an unlinked file was taken off
    /// them when it was removed, so its growth or shrinking must not go back on them (it
    /// would leak `used` until a remount, or take it from other files).
    pub(crate) fn counted(&self) -> bool {
        !self.gone.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn new(layout: FileLayout, size: u64, ntiers: usize) -> FileNode {
        FileNode {
            size: AtomicU64::new(size),
            primary: AtomicUsize::new(layout.primary()),
            state: RwLock::new(FileState {
                layout,
                pieces: vec![None; ntiers],
                opens: 0,
                pt_opens: 0,
                cache: None,
                writers: 0,
                direct_opens: 0,
                direct_writers: 0,
                migration: None,
                pt_since_drop: false,
            }),
            charge: Mutex::new(None),
            dirty: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            mtime: Mutex::new(None),
        }
    }

    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    pub fn layout(&self) -> FileLayout {
        self.state.read().layout.clone()
    }
}

/// A lazy move in progress: the new layout and its pieces (temporaries in limbo), and
/// which blocks already hold their bytes there.
#[derive(Debug)]
pub(crate) struct Migration {
    pub(crate) layout: FileLayout,
    pub(crate) pieces: Vec<Option<Arc<Piece>>>,
    pub(crate) charge: Option<Charge>,
    pub(crate) suffix: &'static str,
    /// A number of this move alone, in its temporaries' names (`moves::tmp_of`): a journal
    /// that outlives its move never names a later move's temporary.
    pub(crate) tag: u64,
    /// The file's size when the migration began: blocks at or past it have no old bytes.
    pub(crate) old_size: u64,
    /// Per block below `old_size`: its bytes are in the new pieces. Set only once they are.
    pub(crate) moved: Vec<AtomicBool>,
    /// Serialize a block's first write (and its copy) against other writers of the block.
    pub(crate) locks: Vec<Mutex<()>>,
}

impl Migration {
    /// Whether block `b`'s bytes are in the new layout (blocks past the old end always).
    pub(crate) fn is_moved(&self, b: u64) -> bool {
        self.moved
            .get(b as usize)
            .is_none_or(|m| m.load(Ordering::Acquire))
    }

    pub(crate) fn unmoved(&self) -> impl Iterator<Item = u64> + '_ {
        self.moved
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.load(Ordering::Acquire))
            .map(|(b, _)| b as u64)
    }
}

/// What a move's journal ([`crate::relink`]) leaves to do once its renames are made.
#[derive(Default)]
pub(crate) struct Journaled {
    /// The journal, done with: the caller removes it once the old pieces are gone.
    pub done: Option<PathBuf>,
    /// The tiers the move left whose old pieces a journal that stays names (its renames
    /// could not be made durable): the next mount may undo the move from them, so they
    /// are not removed. Old pieces it does not name go as after any move.
    pub spare: Vec<usize>,
}
