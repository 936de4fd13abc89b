//! The thin `fuser` adapter: decode a request, call the core, reply. No policy lives here.
//! Every core call runs inside [`TierFs::contain`], so a panic in a handler is answered EIO
//! and fails that inode alone (see `fs::contain`).
//!
//! What the adapter does own is the kernel negotiation that makes DeepSpeed's I/O reach the
//! tiers at full size and depth: 1 MiB requests (not 128 KiB pieces), `FUSE_ASYNC_DIO` so
//! one libaio submission becomes parallel requests, parallel direct writes to one file, and
//! a `max_background` above DeepSpeed's threads x queue depth.

use crate::error::Error;
use crate::fs::{Attr, Ctx, Kind, SetAttr, TierFs};
use crate::sys::SetTime;
use fuser::BackingId;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Largest request we negotiate: DeepSpeed's aio block size.
pub const MAX_REQUEST: u32 = 1 << 20;
/// Kernel background requests (async direct I/O in flight): 4 ranks x 2 threads x QD 8
/// and headroom.
pub const MAX_BACKGROUND: u16 = 256;
/// How long the kernel may cache attributes and entries. Every change goes through this
/// daemon, so the kernel's copy is only stale if someone edits a tier folder by hand.
const TTL: Duration = Duration::from_secs(1);

/// The `fuser::Filesystem` over a shared core.
pub struct FuseAdapter {
    fs: Arc<TierFs>,
    /// Kernel passthrough registrations, one per inode, shared by all its passthrough
    /// handles (the kernel requires the same backing id for every open of an inode) and
    /// dropped when the last one is released.
    backing: Mutex<HashMap<u64, (Arc<BackingId>, usize)>>,
    /// Passthrough handles and their inode.
    pt_handles: Mutex<HashMap<u64, u64>>,
}

impl FuseAdapter {
    pub fn new(fs: Arc<TierFs>) -> FuseAdapter {
        FuseAdapter {
            fs,
            backing: Mutex::new(HashMap::new()),
            pt_handles: Mutex::new(HashMap::new()),
        }
    }

    /// Registers the inode's backing file with the kernel (once per inode); `None` when the
    /// kernel or our privileges refuse, after which passthrough is off for the mount.
    fn backing_for(
        &self,
        ino: u64,
        fh: u64,
        piece: &crate::io::Piece,
        open: impl FnOnce(&std::fs::File) -> std::io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        let mut map = self.backing.lock();
        if let Some((id, n)) = map.get_mut(&ino) {
            *n += 1;
            self.pt_handles.lock().insert(fh, ino);
            return Some(id.clone());
        }
        match open(piece.file()) {
            Ok(id) => {
                let id = Arc::new(id);
                map.insert(ino, (id.clone(), 1));
                self.pt_handles.lock().insert(fh, ino);
                Some(id)
            }
            Err(e) => {
                drop(map);
                self.fs
                    .disable_passthrough(&format!("the kernel refused a backing file ({e})"));
                self.fs.passthrough_refused(fh);
                None
            }
        }
    }

    fn release_backing(&self, fh: u64) {
        let Some(ino) = self.pt_handles.lock().remove(&fh) else {
            return;
        };
        let mut map = self.backing.lock();
        if let Some((_, n)) = map.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                map.remove(&ino);
            }
        }
    }
}

fn errno(e: &Error) -> Errno {
    if e.is_backing_failure() {
        log::warn!("{e}");
    }
    Errno::from_i32(e.errno())
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDevice => FileType::CharDevice,
        Kind::BlockDevice => FileType::BlockDevice,
    }
}

fn fattr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.ctime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: MAX_REQUEST,
        flags: 0,
    }
}

fn set_time(t: Option<TimeOrNow>) -> Option<SetTime> {
    t.map(|t| match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(t),
    })
}

fn ctx(req: &Request) -> Ctx {
    Ctx {
        uid: req.uid(),
        gid: req.gid(),
    }
}

fn open_flags(info: &crate::fs::OpenInfo) -> FopenFlags {
    if info.direct_io {
        FopenFlags::FOPEN_DIRECT_IO
    } else {
        FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
    }
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if self.fs.passthrough_enabled() {
            let ok = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(1).is_ok();
            if !ok {
                self.fs
                    .disable_passthrough("this kernel has no FUSE passthrough (Linux >= 6.9)");
            } else if crate::sys::euid() != 0 {
                // Registering a backing file needs CAP_SYS_ADMIN.
                self.fs.disable_passthrough(
                    "not root (registering backing files needs CAP_SYS_ADMIN)",
                );
            }
        }
        let _ = config.set_max_write(MAX_REQUEST);
        let _ = config.set_max_readahead(MAX_REQUEST);
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        for cap in [
            InitFlags::FUSE_ASYNC_DIO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_MAX_PAGES,
        ] {
            if config.add_capabilities(cap).is_err() {
                log::info!("kernel lacks {cap:?}");
            }
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.fs.shutdown();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.fs.contain("lookup", parent.0, || {
            let a = self.fs.lookup(parent.0, name)?;
            self.fs.check_failed(a.ino).map(|()| a)
        });
        match r {
            Ok(a) => reply.entry(&TTL, &fattr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _ = self.fs.contain("forget", ino.0, || {
            self.fs.forget(ino.0, nlookup);
            Ok(())
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.contain("getattr", ino.0, || self.fs.getattr(ino.0)) {
            Ok(a) => reply.attr(&TTL, &fattr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let s = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: set_time(atime),
            mtime: set_time(mtime),
        };
        match self
            .fs
            .contain("setattr", ino.0, || self.fs.setattr(ino.0, s))
        {
            Ok(a) => reply.attr(&TTL, &fattr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        use std::os::unix::ffi::OsStrExt;
        match self
            .fs
            .contain("readlink", ino.0, || self.fs.readlink(ino.0))
        {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = self.fs.contain("mknod", parent.0, || {
            self.fs.mknod(parent.0, name, mode & !umask, rdev, ctx(req))
        });
        match r {
            Ok(a) => reply.entry(&TTL, &fattr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.fs.contain("mkdir", parent.0, || {
            self.fs.mkdir(parent.0, name, mode & !umask, ctx(req))
        });
        match r {
            Ok(a) => reply.entry(&TTL, &fattr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self
            .fs
            .contain("unlink", parent.0, || self.fs.unlink(parent.0, name))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self
            .fs
            .contain("rmdir", parent.0, || self.fs.rmdir(parent.0, name))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.fs.contain("symlink", parent.0, || {
            self.fs.symlink(parent.0, link_name, target, ctx(req))
        });
        match r {
            Ok(a) => reply.entry(&TTL, &fattr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        // Both folders must be sound.
        let r = self.fs.contain("rename", parent.0, || {
            self.fs.check_failed(newparent.0)?;
            self.fs
                .rename(parent.0, name, newparent.0, newname, flags.bits())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        match self.fs.contain("link", ino.0, || self.fs.link()) {
            Ok(a) => reply.entry(&TTL, &fattr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self
            .fs
            .contain("open", ino.0, || self.fs.open(ino.0, flags.0))
        {
            Ok((fh, info)) => {
                if let Some(piece) = &info.passthrough {
                    if let Some(id) = self.backing_for(ino.0, fh, piece, |f| reply.open_backing(f))
                    {
                        return reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &id);
                    }
                }
                reply.opened(FileHandle(fh), open_flags(&info))
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // The reply borrows the core's buffer, so it is sent from inside the callback.
        let mut reply = Some(reply);
        let r = self.fs.contain("read", ino.0, || {
            self.fs.read_with(fh.0, offset, size, |data| {
                if let Some(r) = reply.take() {
                    r.data(data);
                }
            })
        });
        if let (Err(e), Some(r)) = (r, reply) {
            r.error(errno(&e));
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self
            .fs
            .contain("write", ino.0, || self.fs.write(fh.0, offset, data))
        {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Writes are on the tier when they are acknowledged; flush only brings the books
        // (a passthrough file's size) up to date before close returns.
        match self.fs.contain("flush", ino.0, || self.fs.flush(fh.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.release_backing(fh.0);
        match self.fs.contain("release", ino.0, || self.fs.release(fh.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self
            .fs
            .contain("fsync", ino.0, || self.fs.fsync(fh.0, datasync))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.contain("opendir", ino.0, || self.fs.opendir(ino.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self
            .fs
            .contain("readdir", ino.0, || self.fs.readdir(fh.0, offset))
        {
            Ok(entries) => {
                for (i, e) in entries.iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(e.ino), (i + 1) as u64, file_type(e.kind), &e.name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.fs.contain("releasedir", ino.0, || {
            self.fs.releasedir(fh.0);
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self
            .fs
            .contain("fsyncdir", ino.0, || self.fs.fsyncdir(ino.0))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        match self.fs.contain("statfs", ino.0, || Ok(self.fs.statfs())) {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        match self.fs.contain("setxattr", ino.0, || {
            self.fs.setxattr(ino.0, name, value, flags)
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self
            .fs
            .contain("getxattr", ino.0, || self.fs.getxattr(ino.0, name))
        {
            Ok(v) => xattr_reply(reply, &v, size),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self
            .fs
            .contain("listxattr", ino.0, || self.fs.listxattr(ino.0))
        {
            Ok(v) => xattr_reply(reply, &v, size),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self
            .fs
            .contain("removexattr", ino.0, || self.fs.removexattr(ino.0, name))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // Mounted with default_permissions: the kernel checks modes itself.
        match self.fs.contain("access", ino.0, || Ok(())) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.fs.contain("create", parent.0, || {
            self.fs
                .create(parent.0, name, mode & !umask, flags, ctx(req))
        });
        match r {
            Ok((a, fh, info)) => {
                if let Some(piece) = &info.passthrough {
                    if let Some(id) = self.backing_for(a.ino, fh, piece, |f| reply.open_backing(f))
                    {
                        return reply.created_passthrough(
                            &TTL,
                            &fattr(&a),
                            Generation(0),
                            FileHandle(fh),
                            FopenFlags::empty(),
                            &id,
                        );
                    }
                }
                reply.created(
                    &TTL,
                    &fattr(&a),
                    Generation(0),
                    FileHandle(fh),
                    open_flags(&info),
                )
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // No ioctls of our own; tools probe a few (e.g. FS_IOC_GETFLAGS) and expect ENOTTY.
        reply.error(Errno::from_i32(libc::ENOTTY));
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.fs.contain("fallocate", ino.0, || {
            self.fs.fallocate(fh.0, offset, length, mode)
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

fn xattr_reply(reply: ReplyXattr, v: &[u8], size: u32) {
    if size == 0 {
        reply.size(v.len() as u32);
    } else if v.len() > size as usize {
        reply.error(Errno::from_i32(libc::ERANGE));
    } else {
        reply.data(v);
    }
}
