//! The filesystem core: the namespace, open files and the data path over the tiers, with no
//! FUSE types in sight. Every operation returns `Result`, so the whole filesystem is tested
//! without a mount; the FUSE layer (`fuse/`) only decodes requests, calls in here and replies.
//!
//! [`TierFs`] is the façade: its one `impl` (this file) is the public API, and each method
//! hands the work to the module that owns the concern:
//! - [`namespace`]: lookup, create, unlink, rename, setattr; [`attr`]: getattr;
//! - [`links`]: hard links (a node with several names);
//! - [`files`]: open, create, close, truncate, fallocate, fsync; [`dirs`]: folder handles;
//! - [`readwrite`]: a read or write of a handle, handed to the data path;
//! - [`handles`]: the handle table and the switch that turns kernel passthrough off;
//! - [`backing`]: tier paths, limbo, xattrs, statfs; [`scan`]: the tree rebuilt at mount;
//! - [`statsdir`]: the `.tierfs/` files and control, their handles opened, read and written
//!   there (reads and writes of any handle not a file's go there, not to the data path);
//!   [`tierctl`]: the operator's commands on
//!   tiers (pause, resume, drain, weight) and the drain; [`contain`]: panics kept to one request;
//! - [`state`]: the shared state; [`lifecycle`]: its construction and shutdown;
//! - [`snapshot`]: the counters gathered for the `.tierfs/` files; [`appio`]: each read and
//!   write counted for the programs' view of it;
//! - below them, [`crate::data`] (the data path below a handle), [`crate::inodes`] (inode
//!   numbers, attributes, handles, the inode tree, an open file's state, failed inodes) and
//!   [`crate::tierio`]-level tier access; beside them, [`adapt`] (shares and probes).
//!
//! State and its persistence:
//! - The tree lives in memory, rebuilt at mount by walking every tier's `data/`
//!   folder; the tiers themselves are the only persistent copy. Directories are mirrored on
//!   every tier; a file's pieces sit at the file's own path on the tiers of its layout;
//!   symlinks and special files live on the first tier.
//! - A file's size is kept in memory, exact at all times, and on disk as its piece sizes.
//! - Mode, owner, times and user xattrs are the primary piece's own (no second copy).
//!
//! Locking: the tree lock is taken before any file's state lock, never the other way. The
//! data path (read, write) does not take the tree lock at all: an open handle holds its
//! file's state, so metadata traffic never stalls I/O.

pub mod adapt;
pub mod appio;
pub mod attr;
pub mod backing;
pub mod contain;
pub mod direct;
pub mod dirs;
pub mod files;
pub mod handles;
pub mod held;
pub mod lifecycle;
pub mod links;
pub mod namespace;
pub mod readwrite;
pub mod scan;
pub mod snapshot;
pub mod state;
pub mod statsdir;
pub mod tierctl;

pub use crate::data::RelayoutCounters;
pub use crate::inodes::file::FileNode;
pub use crate::inodes::types::*;
pub use state::TierFs;
pub use statsdir::{CacheView, CachedFile, MemoryView, OrderEntry};
pub use tierctl::DrainStep;

use crate::cache::Cache;
use crate::config::{Layout, MountConfig};
use crate::data::writeback;
use crate::data::{cached, prefetch};
use crate::error::Result;
use crate::layout::FileLayout;
use crate::policy::placement::Placer;
use crate::tier::Tier;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

impl TierFs {
    /// Builds the filesystem over opened tiers and rebuilds the tree from what they hold,
    /// with a cache only where the config states its size (an automatic size is the
    /// mount's to choose: [`TierFs::with_staging`]).
    pub fn new(config: &MountConfig, tiers: Vec<Tier>) -> Result<TierFs> {
        lifecycle::new(config, tiers)
    }

    /// [`TierFs::new`] with the staging memory the mount chose ([`crate::cache::memory`]).
    pub fn with_staging(
        config: &MountConfig,
        tiers: Vec<Tier>,
        staging: crate::cache::memory::Plan,
    ) -> Result<TierFs> {
        lifecycle::with_staging(config, tiers, staging)
    }

    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }

    pub fn placer(&self) -> &Placer {
        &self.placer
    }

    pub fn layout_kind(&self) -> Layout {
        self.layout
    }

    pub fn config_text(&self) -> &str {
        &self.config_text
    }

    /// The FUSE request counters (the FUSE layer counts, the stats files show).
    pub fn requests(&self) -> &Arc<crate::stats::reqstats::RequestStats> {
        &self.requests
    }

    /// The CPU ledger (the FUSE workers and the background threads charge it).
    pub fn ledger(&self) -> &crate::stats::ledger::CpuLedger {
        &self.ledger
    }

    /// Clears set-user-ID, and set-group-ID where the group may execute, as a write,
    /// truncate or `O_TRUNC` open by a caller without CAP_FSETID must
    /// (`FUSE_HANDLE_KILLPRIV_V2` leaves this to us; the daemon itself has CAP_FSETID as
    /// root, so the tier would not do it). Nothing happens when neither bit is set; the
    /// answer says whether the mode changed.
    pub fn kill_suidgid(&self, ino: u64) -> Result<bool> {
        namespace::kill_suidgid(self, ino)
    }

    pub fn started(&self) -> SystemTime {
        self.started
    }

    pub fn stats_dir_name(&self) -> &OsStr {
        &self.stats_dir
    }

    /// Samples every tier's online bandwidth and, when an estimate moved, recomputes the
    /// Eq. 1 shares that new files (and stripe patterns) follow. Returns the shares.
    pub fn refresh_shares(&self) -> Vec<f64> {
        adapt::refresh_shares(self)
    }

    /// Recomputes the Eq. 1 shares from the current estimates (with `adapt`; without it
    /// the configured or probed figures stay), pausing tiers too slow to be worth their
    /// risk.
    pub fn recompute_shares(&self) {
        adapt::recompute_shares(self)
    }

    /// One period of every shared tier's ledger ([`crate::coord::SharedTier::tick`]): this
    /// node's rate, demand and saturation out, the job's view in. Runs on a thread of its
    /// own (the daemon's `tierfs-ledger`), so a PFS slow to answer holds up neither the
    /// estimator nor the stats. False when no tier is shared (no thread needed).
    pub fn tick_shared(&self) -> bool {
        adapt::tick_shared(self)
    }

    /// A tier's coordination with the job's other nodes, if it is shared.
    pub fn shared_tier(&self, index: usize) -> Option<&crate::coord::SharedTier> {
        adapt::shared_tier(self, index)
    }

    /// Takes this node out of the shared tiers' ledgers (a clean unmount).
    pub fn leave_shared(&self) {
        adapt::leave_shared(self)
    }

    /// Recovery probes (with `adapt`): a tier whose share fell well below its stated or
    /// probed one and whose own traffic has gone quiet is measured with a small probe on a
    /// thread of its own, so its share can return when its bandwidth does.
    pub fn probe_tiers(self: &Arc<Self>) {
        adapt::probe_tiers(self)
    }

    /// The configured passthrough mode.
    pub fn passthrough_mode(&self) -> crate::config::Passthrough {
        handles::passthrough_mode(self)
    }

    /// Whether passthrough may still be offered.
    pub fn passthrough_enabled(&self) -> bool {
        handles::passthrough_enabled(self)
    }

    /// Stops offering passthrough (the kernel or our privileges do not allow it).
    pub fn disable_passthrough(&self, why: &str) {
        handles::disable_passthrough(self, why)
    }

    /// The adapter could not register a passthrough handle: serve it through the daemon.
    pub fn passthrough_refused(&self, fh: u64) {
        handles::passthrough_refused(self, fh)
    }

    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<Attr> {
        namespace::lookup(self, parent, name)
    }

    pub fn forget(&self, ino: u64, n: u64) {
        namespace::forget(self, ino, n)
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        attr::getattr(self, ino)
    }

    pub fn setattr(&self, ino: u64, s: SetAttr) -> Result<Attr> {
        namespace::setattr(self, ino, s)
    }

    pub fn readlink(&self, ino: u64) -> Result<OsString> {
        namespace::readlink(self, ino)
    }

    pub fn mkdir(&self, parent: u64, name: &OsStr, mode: u32, ctx: Ctx) -> Result<Attr> {
        namespace::mkdir(self, parent, name, mode, ctx)
    }

    pub fn symlink(&self, parent: u64, name: &OsStr, target: &Path, ctx: Ctx) -> Result<Attr> {
        namespace::symlink(self, parent, name, target, ctx)
    }

    /// mknod: regular files become ordinary tierfs files; FIFOs, sockets and character
    /// and block devices live on the first tier. The kernel lets only CAP_MKNOD make a
    /// device node and the backing mknod needs it of the daemon too (EPERM otherwise);
    /// `rdev` is the kernel's 32-bit encoding, the C library's for majors below 4096.
    /// Opening a device through the mount is the kernel's affair (`nodev` refuses it).
    pub fn mknod(&self, parent: u64, name: &OsStr, mode: u32, rdev: u32, ctx: Ctx) -> Result<Attr> {
        namespace::mknod(self, parent, name, mode, rdev, ctx)
    }

    pub fn unlink(&self, parent: u64, name: &OsStr) -> Result<()> {
        namespace::unlink(self, parent, name)
    }

    pub fn rmdir(&self, parent: u64, name: &OsStr) -> Result<()> {
        namespace::rmdir(self, parent, name)
    }

    /// link(2): node `ino` (not a folder) gets the name `newname` in `newparent`, a
    /// link of each of its backing entries on its tier ([`links`]).
    pub fn link(&self, ino: u64, newparent: u64, newname: &OsStr) -> Result<Attr> {
        links::link(self, ino, newparent, newname)
    }

    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> Result<()> {
        namespace::rename(self, parent, name, newparent, newname, flags)
    }

    pub fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        ctx: Ctx,
    ) -> Result<(Attr, u64, OpenInfo)> {
        files::create(self, parent, name, mode, flags, ctx)
    }

    pub fn open(&self, ino: u64, flags: i32) -> Result<(u64, OpenInfo)> {
        files::open(self, ino, flags, self.euid)
    }

    /// The inode of the open file handle `fh` and a single-use token proving it (the direct
    /// path's ioctl asks it; [`direct::token`]).
    pub fn direct_token(&self, fh: u64) -> Result<(u64, u64)> {
        direct::token(self, fh)
    }

    /// Grants the open handle `fh`, proven by its `token`, the pieces' own descriptors for a
    /// program under `tierfs run` (`uid`), as its open `flags` ask, or says why not
    /// ([`direct`]).
    pub fn direct_grant(
        &self,
        fh: u64,
        token: u64,
        flags: i32,
        uid: u32,
    ) -> std::result::Result<direct::Granted, direct::Refusal> {
        direct::grant(self, fh, token, flags, uid)
    }

    /// What a program's direct descriptors moved, as it reports it (`uid`: who reports).
    pub fn direct_report(&self, uid: u32, tiers: &[tierfs_wire::TierIo]) {
        direct::report(self, uid, tiers)
    }

    /// [`TierFs::open`] by the user `ctx`: the `.tierfs/` views list file names only to the
    /// mount's owner and root (through `allow_other` anyone may read them).
    pub fn open_as(&self, ino: u64, flags: i32, ctx: Ctx) -> Result<(u64, OpenInfo)> {
        files::open(self, ino, flags, ctx.uid)
    }

    /// `close(2)` of a handle (FLUSH, which the caller waits for, unlike RELEASE): brings a
    /// passthrough file's size and the placement books up to date, so the stats are exact
    /// as soon as `close` returns.
    pub fn flush(&self, fh: u64) -> Result<()> {
        files::flush(self, fh)
    }

    pub fn release(&self, fh: u64) -> Result<()> {
        files::release(self, fh)
    }

    /// Reads `size` bytes at `off` and hands them to `reply` (from a per-thread aligned
    /// buffer, so the hot path allocates nothing).
    pub fn read_with<R>(
        &self,
        fh: u64,
        off: u64,
        size: u32,
        reply: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let req = appio::Request::start(self, fh);
        let file = req.is_file();
        // Counted before the reply goes: the program may close the file once it has it.
        let reply = |d: &[u8]| {
            req.done(self, off, Some(d.len() as u64), false);
            reply(d)
        };
        if file {
            readwrite::read_with(self, fh, off, size, reply)
        } else {
            statsdir::read_with(self, fh, off, size as usize, reply)
        }
    }

    /// Reads up to `buf.len()` bytes at `off` and hands them to `reply`: from the
    /// host-memory cache's memory when the read lies in one cached block (`reply` runs
    /// with that block locked, so it must not call back into the filesystem), else from
    /// `buf`, which a page-aligned reply buffer of a FUSE transport can be.
    pub fn read_to<R>(
        &self,
        fh: u64,
        off: u64,
        buf: &mut [u8],
        reply: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let req = appio::Request::start(self, fh);
        let file = req.is_file();
        let reply = |d: &[u8]| {
            req.done(self, off, Some(d.len() as u64), false);
            reply(d)
        };
        if file {
            readwrite::read_to(self, fh, off, buf, reply)
        } else {
            statsdir::read_with(self, fh, off, buf.len(), reply)
        }
    }

    /// Reads up to `buf.len()` bytes at `off` into `buf`; returns how many (fewer only at
    /// the end of the file). A page-aligned `buf` lets the tier's direct I/O land in it
    /// with no bounce copy: the FUSE transports pass their reply buffers here.
    pub fn read_into(&self, fh: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
        let req = appio::Request::start(self, fh);
        let r = if req.is_file() {
            readwrite::read_into(self, fh, off, buf)
        } else {
            statsdir::read_into(self, fh, off, buf)
        };
        req.done(self, off, r.as_ref().ok().map(|n| *n as u64), false);
        r
    }

    /// Replaces the engine that runs the batches (before the filesystem is shared): tests
    /// install one that records what arrives.
    pub fn set_engine(&mut self, engine: Box<dyn crate::tierio::Engine>) {
        state::set_engine(self, engine)
    }

    /// Writes all of `data` at `off`, or fails with the tier's errno: never a short write.
    pub fn write(&self, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
        let req = appio::Request::start(self, fh);
        let r = if req.is_file() {
            readwrite::write(self, fh, off, data)
        } else {
            statsdir::write(self, fh, data)
        };
        req.done(self, off, r.as_ref().ok().map(|n| *n as u64), true);
        r
    }

    /// [`Self::write`] of a FUSE transport's page-aligned request buffer: a write of
    /// exactly one block of the host-memory cache, at a block boundary, into a cached file
    /// takes `buf` itself as the block's memory and leaves another buffer of the same size
    /// in `buf` (no copy); any other write copies as [`Self::write`] does.
    pub fn write_buf(&self, fh: u64, off: u64, buf: &mut crate::tierio::AlignedBuf) -> Result<u32> {
        let req = appio::Request::start(self, fh);
        let r = if req.is_file() {
            readwrite::write_buf(self, fh, off, buf)
        } else {
            statsdir::write(self, fh, buf)
        };
        req.done(self, off, r.as_ref().ok().map(|n| *n as u64), true);
        r
    }

    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<()> {
        files::fsync(self, fh, datasync)
    }

    pub fn fallocate(&self, fh: u64, off: u64, len: u64, mode: i32) -> Result<()> {
        files::fallocate(self, fh, off, len, mode)
    }

    pub fn opendir(&self, ino: u64) -> Result<u64> {
        dirs::opendir(self, ino)
    }

    /// Entries from position `offset` of the snapshot taken at opendir.
    pub fn readdir(&self, fh: u64, offset: u64) -> Result<Arc<Vec<DirEntry>>> {
        dirs::readdir(self, fh, offset)
    }

    pub fn releasedir(&self, fh: u64) {
        dirs::releasedir(self, fh)
    }

    pub fn fsyncdir(&self, ino: u64) -> Result<()> {
        dirs::fsyncdir(self, ino)
    }

    pub fn statfs(&self) -> StatFs {
        backing::statfs(self)
    }

    pub fn setxattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> Result<()> {
        backing::setxattr(self, ino, name, value, flags)
    }

    pub fn getxattr(&self, ino: u64, name: &OsStr) -> Result<Vec<u8>> {
        backing::getxattr(self, ino, name)
    }

    pub fn listxattr(&self, ino: u64) -> Result<Vec<u8>> {
        backing::listxattr(self, ino)
    }

    pub fn removexattr(&self, ino: u64, name: &OsStr) -> Result<()> {
        backing::removexattr(self, ino, name)
    }

    /// Every file: (path, size, layout), in path order.
    pub fn file_list(&self) -> Vec<(PathBuf, u64, FileLayout)> {
        statsdir::file_list(self)
    }

    /// At unmount: writes the cache back, stops its threads, finishes re-layouts and syncs
    /// every open piece. Returns what did not reach a tier, one line per file (its path and
    /// why): those bytes are lost when the daemon exits, and the caller must say so.
    /// Runs once (FUSE's DESTROY and the daemon's exit both call it); later calls return the
    /// first one's answer. In scratch mode it only stops the cache threads: the data is
    /// being thrown away, so nothing counts as lost.
    pub fn shutdown(&self) -> Vec<String> {
        lifecycle::shutdown(self)
    }

    pub fn cache(&self) -> Option<&Arc<Cache<FileNode>>> {
        self.cache.as_ref()
    }

    /// The background writer: dirty files older than `writeback_delay` (gradient files only
    /// under memory pressure), the files asked for, or everything on `flush`.
    pub fn writeback_loop(&self) {
        prefetch::writeback_loop(&self.parts())
    }

    /// Writes every dirty cached file back (control `flush`); the first error.
    pub fn flush_cache(&self) -> Result<()> {
        writeback::flush_cache(&self.parts())
    }

    /// The prefetcher: loads predicted files into the cache, behind demand I/O.
    pub fn prefetch_loop(&self) {
        prefetch::prefetch_loop(&self.parts())
    }

    /// Loads one file into the cache (admitting it if the policy lets it in). `asked`: a
    /// `prefetch` command, wanted now whatever the order says.
    pub fn prefetch(&self, ino: u64, asked: bool) -> Result<()> {
        prefetch::prefetch(&self.parts(), ino, asked)
    }

    /// Lowers (or raises) the cache's budget to `target` bytes and, when it holds more,
    /// evicts until it holds no more than the budget: clean files first, the ones needed
    /// last first (that frees memory at once), then dirty ones, written back first. Gives
    /// up after [`crate::data::cached::SHRINK_WITHIN`] (files busy all that time, or write-back failing); the
    /// watch's next poll tries again.
    pub fn shrink_cache(&self, target: u64) {
        writeback::shrink_cache(&self.parts(), target)
    }

    /// The pressure watch ([`crate::cache::memory`]): every poll, the budget follows the
    /// memory the job leaves free, and the cache gets under a lowered one at once.
    pub fn memory_watch_loop(&self) {
        prefetch::memory_watch_loop(&self.parts())
    }

    /// Stops the cache's threads' loops (they finish what they hold).
    pub fn stop_cache(&self) {
        cached::stop_cache(&self.parts())
    }

    /// Runs a `.tierfs/control` write: every line is checked first, so a bad one changes
    /// nothing; the reply a read-write handle reads back (`ok ...` lines), or the refusal
    /// ([`crate::error::Error::Refused`] for a command refused: its errno and reason). Without a cache
    /// the hints are accepted and have no effect.
    pub fn control(&self, text: &[u8]) -> Result<String> {
        statsdir::control(self, text)
    }

    /// One pass of the drains under way (`drain TIER`): moves the files off each draining
    /// tier while `keep_going` says so; the daemon's drain thread calls it in a loop.
    pub fn drain_step(&self, keep_going: &dyn Fn() -> bool) -> DrainStep {
        tierctl::drain_step(self, keep_going, &|ino| {
            files::drop_if_gone(self, &mut self.tree.write(), ino)
        })
    }

    pub fn cache_view(&self) -> CacheView {
        statsdir::cache_view(self)
    }

    /// Starts the cache's writer and prefetcher threads (nothing without a cache).
    pub fn start_cache_threads(
        fs: &Arc<TierFs>,
    ) -> std::io::Result<Vec<std::thread::JoinHandle<()>>> {
        lifecycle::start_cache_threads(fs)
    }

    pub fn relayout_counters(&self) -> &RelayoutCounters {
        &self.relayout
    }

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
        contain::contain(self, op, ino, f)
    }

    /// EIO ([`crate::error::Error::Failed`]) if `ino` has failed. Entry replies (lookup, create, mkdir)
    /// check the inode they answer with too, so a failed file is not handed out again.
    pub fn check_failed(&self, ino: u64) -> Result<()> {
        contain::check_failed(self, ino)
    }

    /// Whether `ino` answers EIO until the next mount.
    pub fn is_failed(&self, ino: u64) -> bool {
        self.contain.is_failed(ino)
    }

    /// Marks `ino` failed (logged with `why`): every request on it answers EIO until the
    /// next mount.
    pub fn mark_failed(&self, ino: u64, why: &str) {
        self.contain.mark_failed(ino, why)
    }

    /// Requests whose handler panicked since mount.
    pub fn request_panics(&self) -> u64 {
        contain::request_panics(self)
    }

    /// Inodes marked failed since mount.
    pub fn failed_inodes(&self) -> u64 {
        contain::failed_inodes(self)
    }
}
