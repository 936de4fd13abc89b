//! The one request dispatcher under every transport: a decoded [`Request`] in, a call into
//! the core ([`TierFs`]), a reply body out. It owns the kernel-side state of kernel
//! passthrough (backing ids) and contains handler panics; what the protocol negotiates
//! (INIT) is [`super::init`]'s, which [`Dispatcher::init`] hands the core and the
//! transport's wish. It does not know whether /dev/fuse or io_uring delivered the request.
//!
//! Reply bodies go into a buffer the transport owns: small ones into a reusable `Vec`, a
//! READ's data straight into the transport's page-aligned reply buffer
//! ([`Dispatcher::read`]), so the tier's direct I/O fills the memory the kernel copies from.

use super::abi::{self, fattr, fopen, op, Pod};
use super::init::{negotiate, Negotiated};
use super::reply::{
    attr_out, entry_out, errno, no_flush, open_flags, push_dirent, to_errno, xattr_reply,
};
use super::request::{forget_items, Op, Request};
use crate::stats::ledger::Class;
use crate::stats::reqstats::op_name;
use crate::sys::SetTime;
use crate::tierio::AlignedBuf;
use crate::vfs::{Ctx, SetAttr, TierFs};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a handler produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Success; the body (possibly empty) is in the output buffer.
    Ok,
    /// Failure with this errno (positive).
    Err(i32),
    /// No reply at all (FORGET, BATCH_FORGET, INTERRUPT).
    None,
}

/// The dispatcher of one mount.
pub struct Dispatcher {
    fs: Arc<TierFs>,
    /// The session's /dev/fuse descriptor, for the passthrough ioctls.
    dev: RawFd,
    /// Ask for FUSE over io_uring at INIT.
    want_uring: AtomicBool,
    /// Kernel passthrough registrations, one per inode, shared by all its passthrough
    /// handles (the kernel requires one backing id per inode) and closed with the last one.
    backing: Mutex<HashMap<u64, (u32, usize)>>,
    /// Passthrough handles and their inode.
    pt_handles: Mutex<HashMap<u64, u64>>,
}

fn set_time(secs: u64, nsec: u32) -> SystemTime {
    let s = secs as i64;
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(s.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

impl Dispatcher {
    /// A dispatcher for `fs` on the connection `dev`; `want_uring` asks the kernel for FUSE
    /// over io_uring at INIT.
    pub fn new(fs: Arc<TierFs>, dev: &impl AsRawFd, want_uring: bool) -> Dispatcher {
        Dispatcher {
            fs,
            dev: dev.as_raw_fd(),
            want_uring: AtomicBool::new(want_uring),
            backing: Mutex::new(HashMap::new()),
            pt_handles: Mutex::new(HashMap::new()),
        }
    }

    /// Whether to ask for FUSE over io_uring at INIT (decided before INIT: once the kernel
    /// agrees, every request waits until the ring is registered).
    pub fn set_want_uring(&self, want: bool) {
        self.want_uring.store(want, Ordering::Relaxed);
    }

    pub fn fs(&self) -> &Arc<TierFs> {
        &self.fs
    }

    /// Answers the kernel's INIT ([`negotiate`]): what we ask for and what we settled on.
    pub fn init(&self, i: &abi::InitIn) -> Result<(abi::InitOut, Negotiated), String> {
        negotiate(&self.fs, self.want_uring.load(Ordering::Relaxed), i)
    }

    /// Serves a READ into `buf` (at least `arg.size` bytes, page-aligned for direct I/O);
    /// returns the bytes read.
    pub fn read(&self, nodeid: u64, arg: &abi::ReadIn, buf: &mut [u8]) -> Result<usize, i32> {
        self.fs.requests().count(op::READ);
        let size = (arg.size as usize).min(buf.len());
        let r = self.contain(op::READ, nodeid, || {
            self.fs
                .read_into(arg.fh, arg.offset, &mut buf[..size])
                .map_err(|e| errno(&e))
        });
        if let Ok(n) = r {
            self.fs.ledger().moved(Class::Demand, n as u64);
        }
        r
    }

    /// Serves a READ and sends its data with `send` (not called on an error): from the
    /// host-memory cache's block when the read lies in one, so the daemon copies nothing,
    /// else from `buf`, read into first. For a transport that can send from any memory
    /// (/dev/fuse's `writev`); the ring's replies must be in its own buffer ([`Self::read`]).
    pub fn read_reply(
        &self,
        nodeid: u64,
        arg: &abi::ReadIn,
        buf: &mut [u8],
        send: impl FnOnce(&[u8]),
    ) -> Result<usize, i32> {
        self.fs.requests().count(op::READ);
        let size = (arg.size as usize).min(buf.len());
        let r = self.contain(op::READ, nodeid, || {
            self.fs
                .read_to(arg.fh, arg.offset, &mut buf[..size], |d| {
                    send(d);
                    d.len()
                })
                .map_err(|e| errno(&e))
        });
        if let Ok(n) = r {
            self.fs.ledger().moved(Class::Demand, n as u64);
        }
        r
    }

    /// Serves a WRITE whose data fills `buf`, a transport's page-aligned request buffer
    /// the filesystem may keep (a whole block of a cached file, see [`TierFs::write_buf`])
    /// in exchange for another of the same size; the reply body goes into `out`.
    pub fn handle_write_buf(
        &self,
        nodeid: u64,
        arg: &abi::WriteIn,
        buf: &mut AlignedBuf,
        out: &mut Vec<u8>,
    ) -> Reply {
        self.fs.requests().count(op::WRITE);
        out.clear();
        let r = self.contain(op::WRITE, nodeid, || {
            self.write(nodeid, arg, |fs| fs.write_buf(arg.fh, arg.offset, buf), out)
        });
        match r {
            Ok(()) => Reply::Ok,
            Err(e) => {
                out.clear();
                Reply::Err(e)
            }
        }
    }

    /// Serves any request but READ (and INIT, which the session answers); a reply body goes
    /// into `out` (cleared first).
    pub fn handle(&self, req: &Request, out: &mut Vec<u8>) -> Reply {
        self.fs.requests().count(req.opcode);
        out.clear();
        let r = self.contain(req.opcode, req.nodeid, || self.serve(req, out));
        match r {
            Ok(r) => r,
            // FORGET gets no reply, not even an error (a failed inode is not forgotten: it
            // stays failed until remount anyway).
            Err(_) if matches!(req.op, Op::Forget { .. } | Op::BatchForget { .. }) => Reply::None,
            Err(e) => {
                out.clear();
                Reply::Err(e)
            }
        }
    }

    /// Runs a handler through the core's containment ([`TierFs::contain`]): EIO at once
    /// for a failed inode; a panic becomes EIO for this request, logged with the operation
    /// and inode, counted, and the inode failed until remount.
    fn contain<T>(
        &self,
        opcode: u32,
        ino: u64,
        f: impl FnOnce() -> Result<T, i32>,
    ) -> Result<T, i32> {
        match self.fs.contain(op_name(opcode), ino, || Ok(f())) {
            Ok(r) => r,
            Err(e) => Err(errno(&e)),
        }
    }

    fn serve(&self, req: &Request, out: &mut Vec<u8>) -> Result<Reply, i32> {
        let fs = &self.fs;
        let ctx = Ctx {
            uid: req.uid,
            gid: req.gid,
        };
        let ino = req.nodeid;
        match &req.op {
            Op::Init(_) => return Err(libc::EPROTO),
            Op::Destroy => {}
            Op::Lookup { name } => {
                // A failed file is not handed out again.
                let a = fs.lookup(ino, name).map_err(to_errno)?;
                fs.check_failed(a.ino).map_err(to_errno)?;
                out.extend_from_slice(entry_out(&a).bytes())
            }
            Op::Forget { nlookup } => {
                fs.forget(ino, *nlookup);
                return Ok(Reply::None);
            }
            Op::BatchForget { items, .. } => {
                for f in forget_items(items) {
                    fs.forget(f.nodeid, f.nlookup);
                }
                return Ok(Reply::None);
            }
            Op::Getattr => {
                out.extend_from_slice(attr_out(&fs.getattr(ino).map_err(to_errno)?).bytes())
            }
            Op::Setattr(s) => self.setattr(ino, s, out)?,
            Op::Readlink => out.extend_from_slice(fs.readlink(ino).map_err(to_errno)?.as_bytes()),
            Op::Symlink { name, target } => out.extend_from_slice(
                entry_out(
                    &fs.symlink(ino, name, Path::new(target), ctx)
                        .map_err(to_errno)?,
                )
                .bytes(),
            ),
            Op::Mknod { name, arg } => out.extend_from_slice(
                entry_out(
                    &fs.mknod(ino, name, arg.mode & !arg.umask, arg.rdev, ctx)
                        .map_err(to_errno)?,
                )
                .bytes(),
            ),
            Op::Mkdir { name, arg } => out.extend_from_slice(
                entry_out(
                    &fs.mkdir(ino, name, arg.mode & !arg.umask, ctx)
                        .map_err(to_errno)?,
                )
                .bytes(),
            ),
            Op::Unlink { name } => fs.unlink(ino, name).map_err(to_errno)?,
            Op::Rmdir { name } => fs.rmdir(ino, name).map_err(to_errno)?,
            Op::Rename {
                name,
                newdir,
                newname,
                flags,
            } => {
                // Both folders must be sound (contain checked the first).
                fs.check_failed(*newdir).map_err(to_errno)?;
                fs.rename(ino, name, *newdir, newname, *flags)
                    .map_err(to_errno)?
            }
            Op::Link { oldnodeid, newname } => {
                // The linked inode must be sound too (contain checked the folder).
                fs.check_failed(*oldnodeid).map_err(to_errno)?;
                let a = fs.link(*oldnodeid, ino, newname).map_err(to_errno)?;
                out.extend_from_slice(entry_out(&a).bytes())
            }
            Op::Open(o) => self.open(ino, o, ctx, out)?,
            Op::Read(_) => return Err(libc::EPROTO),
            Op::Write { arg, data } => {
                self.write(ino, arg, |fs| fs.write(arg.fh, arg.offset, data), out)?
            }
            Op::Statfs => self.statfs(out),
            Op::Release(r) => {
                self.release_backing(r.fh);
                fs.release(r.fh).map_err(to_errno)?;
            }
            Op::Fsync(f) => fs
                .fsync(f.fh, f.fsync_flags & abi::FSYNC_FDATASYNC != 0)
                .map_err(to_errno)?,
            Op::Setxattr { name, value, flags } => fs
                .setxattr(ino, name, value, *flags as i32)
                .map_err(to_errno)?,
            Op::Getxattr { name, size } => {
                xattr_reply(&fs.getxattr(ino, name).map_err(to_errno)?, *size, out)?
            }
            Op::Listxattr { size } => {
                xattr_reply(&fs.listxattr(ino).map_err(to_errno)?, *size, out)?
            }
            Op::Removexattr { name } => fs.removexattr(ino, name).map_err(to_errno)?,
            // Writes are on the tier when acknowledged; flush only brings the books (a
            // passthrough file's size) up to date before close returns.
            Op::Flush(f) => fs.flush(f.fh).map_err(to_errno)?,
            Op::Opendir(_) => self.opendir(ino, out)?,
            Op::Readdir(r) => self.readdir(r, out)?,
            Op::Releasedir(r) => fs.releasedir(r.fh),
            Op::Fsyncdir(_) => fs.fsyncdir(ino).map_err(to_errno)?,
            // Mounted with default_permissions: the kernel checks modes itself.
            Op::Access(_) => {}
            Op::Create { name, arg } => self.create(ino, name, arg, ctx, out)?,
            // The handler runs to completion; the kernel waits for its reply.
            Op::Interrupt { .. } => return Ok(Reply::None),
            Op::Fallocate(f) => fs
                .fallocate(f.fh, f.offset, f.length, f.mode as i32)
                .map_err(to_errno)?,
            Op::Ioctl(i) => self.ioctl(i, out)?,
            Op::Unsupported if req.opcode == op::IOCTL => return Err(libc::ENOTTY),
            Op::Unsupported => return Err(libc::ENOSYS),
        }
        Ok(Reply::Ok)
    }

    // The handlers below are the longer arms of `serve`, each for one operation; they reply
    // into `out` like the inline arms and are inlined back into it.

    #[inline]
    fn setattr(&self, ino: u64, s: &abi::SetattrIn, out: &mut Vec<u8>) -> Result<(), i32> {
        let fs = &self.fs;
        if s.valid & fattr::KILL_SUIDGID != 0 {
            fs.kill_suidgid(ino).map_err(to_errno)?;
        }
        let t = |now: u32, set: u32, secs: u64, nsec: u32| {
            if s.valid & now != 0 {
                Some(SetTime::Now)
            } else if s.valid & set != 0 {
                Some(SetTime::At(set_time(secs, nsec)))
            } else {
                None
            }
        };
        let sa = SetAttr {
            mode: (s.valid & fattr::MODE != 0).then_some(s.mode),
            uid: (s.valid & fattr::UID != 0).then_some(s.uid),
            gid: (s.valid & fattr::GID != 0).then_some(s.gid),
            size: (s.valid & fattr::SIZE != 0).then_some(s.size),
            atime: t(fattr::ATIME_NOW, fattr::ATIME, s.atime, s.atimensec),
            mtime: t(fattr::MTIME_NOW, fattr::MTIME, s.mtime, s.mtimensec),
        };
        out.extend_from_slice(attr_out(&fs.setattr(ino, sa).map_err(to_errno)?).bytes());
        Ok(())
    }

    /// The direct path's one question: which handle is this descriptor, with a token that
    /// proves it (the preload library asks it of a descriptor the program just opened, see
    /// `crate::direct`). No other ioctls: tools probe a few (FS_IOC_GETFLAGS) and expect
    /// ENOTTY.
    fn ioctl(&self, i: &abi::IoctlIn, out: &mut Vec<u8>) -> Result<(), i32> {
        if i.cmd != tierfs_wire::IOC_HANDLE || (i.out_size as usize) < tierfs_wire::IOC_HANDLE_LEN {
            return Err(libc::ENOTTY);
        }
        let (ino, token) = self.fs.direct_token(i.fh).map_err(to_errno)?;
        out.extend_from_slice(abi::IoctlOut::default().bytes());
        out.extend_from_slice(&i.fh.to_le_bytes());
        out.extend_from_slice(&ino.to_le_bytes());
        out.extend_from_slice(&token.to_le_bytes());
        Ok(())
    }

    #[inline]
    fn open(&self, ino: u64, o: &abi::OpenIn, ctx: Ctx, out: &mut Vec<u8>) -> Result<(), i32> {
        let fs = &self.fs;
        if o.open_flags & abi::OPEN_KILL_SUIDGID != 0 && fs.kill_suidgid(ino).map_err(to_errno)? {
            self.invalidate_attr(ino);
        }
        let (fh, info) = fs.open_as(ino, o.flags as i32, ctx).map_err(to_errno)?;
        out.extend_from_slice(self.open_out(ino, fh, &info).bytes());
        Ok(())
    }

    #[inline]
    fn write(
        &self,
        ino: u64,
        arg: &abi::WriteIn,
        write: impl FnOnce(&TierFs) -> crate::error::Result<u32>,
        out: &mut Vec<u8>,
    ) -> Result<(), i32> {
        let fs = &self.fs;
        if arg.write_flags & abi::WRITE_KILL_SUIDGID != 0
            && fs.kill_suidgid(ino).map_err(to_errno)?
        {
            self.invalidate_attr(ino);
        }
        let n = write(fs).map_err(to_errno)?;
        fs.ledger().moved(Class::Demand, n as u64);
        out.extend_from_slice(
            abi::WriteOut {
                size: n,
                padding: 0,
            }
            .bytes(),
        );
        Ok(())
    }

    #[inline]
    fn statfs(&self, out: &mut Vec<u8>) {
        let s = self.fs.statfs();
        let k = abi::Kstatfs {
            blocks: s.blocks,
            bfree: s.bfree,
            bavail: s.bavail,
            files: s.files,
            ffree: s.ffree,
            bsize: s.bsize,
            namelen: s.namelen,
            frsize: s.bsize,
            ..abi::Kstatfs::default()
        };
        out.extend_from_slice(k.bytes());
    }

    #[inline]
    fn opendir(&self, ino: u64, out: &mut Vec<u8>) -> Result<(), i32> {
        let fh = self.fs.opendir(ino).map_err(to_errno)?;
        out.extend_from_slice(
            abi::OpenOut {
                fh,
                open_flags: 0,
                backing_id: 0,
            }
            .bytes(),
        );
        Ok(())
    }

    #[inline]
    fn readdir(&self, r: &abi::ReadIn, out: &mut Vec<u8>) -> Result<(), i32> {
        let entries = self.fs.readdir(r.fh, r.offset).map_err(to_errno)?;
        for (i, d) in entries.iter().enumerate().skip(r.offset as usize) {
            if !push_dirent(out, r.size as usize, d.ino, (i + 1) as u64, d.kind, &d.name) {
                break;
            }
        }
        Ok(())
    }

    #[inline]
    fn create(
        &self,
        ino: u64,
        name: &OsStr,
        arg: &abi::CreateIn,
        ctx: Ctx,
        out: &mut Vec<u8>,
    ) -> Result<(), i32> {
        let (a, fh, info) = self
            .fs
            .create(ino, name, arg.mode & !arg.umask, arg.flags as i32, ctx)
            .map_err(to_errno)?;
        out.extend_from_slice(entry_out(&a).bytes());
        out.extend_from_slice(self.open_out(a.ino, fh, &info).bytes());
        Ok(())
    }

    /// Tells the kernel to drop its cached attributes of `ino` (after a change no reply
    /// carries, such as set-user-ID cleared by a write).
    fn invalidate_attr(&self, ino: u64) {
        super::notify::inval_inode(self.dev, ino, false);
    }

    /// The OPEN/CREATE reply, registering the backing file when the core offers passthrough.
    fn open_out(&self, ino: u64, fh: u64, info: &crate::vfs::OpenInfo) -> abi::OpenOut {
        if let Some(piece) = &info.passthrough {
            if let Some(id) = self.backing_for(ino, fh, piece.file()) {
                return abi::OpenOut {
                    fh,
                    open_flags: fopen::PASSTHROUGH | no_flush(info),
                    backing_id: id as i32,
                };
            }
        }
        abi::OpenOut {
            fh,
            open_flags: open_flags(info),
            backing_id: 0,
        }
    }

    /// Registers the inode's backing file with the kernel (once per inode); `None` when the
    /// kernel or our privileges refuse, after which passthrough is off for the mount.
    fn backing_for(&self, ino: u64, fh: u64, file: &std::fs::File) -> Option<u32> {
        let mut map = self.backing.lock();
        if let Some((id, n)) = map.get_mut(&ino) {
            *n += 1;
            self.pt_handles.lock().insert(fh, ino);
            return Some(*id);
        }
        let m = abi::BackingMap {
            fd: file.as_raw_fd(),
            flags: 0,
            padding: 0,
        };
        // SAFETY: FUSE_DEV_IOC_BACKING_OPEN reads one fuse_backing_map from the pointer,
        // which points to a live, correctly laid out struct for the duration of the call.
        let id = unsafe { libc::ioctl(self.dev, abi::DEV_IOC_BACKING_OPEN, &m) };
        if id > 0 {
            map.insert(ino, (id as u32, 1));
            self.pt_handles.lock().insert(fh, ino);
            return Some(id as u32);
        }
        let err = std::io::Error::last_os_error();
        drop(map);
        self.fs
            .disable_passthrough(&format!("the kernel refused a backing file ({err})"));
        self.fs.passthrough_refused(fh);
        None
    }

    fn release_backing(&self, fh: u64) {
        let Some(ino) = self.pt_handles.lock().remove(&fh) else {
            return;
        };
        let mut map = self.backing.lock();
        if let Some((id, n)) = map.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                let id = *id;
                map.remove(&ino);
                // SAFETY: FUSE_DEV_IOC_BACKING_CLOSE reads one u32 from the pointer, which
                // points to a live u32 for the duration of the call.
                let r = unsafe { libc::ioctl(self.dev, abi::DEV_IOC_BACKING_CLOSE, &id) };
                if r != 0 {
                    log::warn!(
                        "closing passthrough backing id {id}: {}",
                        std::io::Error::last_os_error()
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::reply::time;
    use super::*;

    #[test]
    fn times_before_1970_round_trip() {
        for t in [
            UNIX_EPOCH + Duration::new(1_000_000_000, 5),
            UNIX_EPOCH,
            UNIX_EPOCH - Duration::new(100, 250_000_000),
            UNIX_EPOCH - Duration::from_secs(7),
        ] {
            let (s, n) = time(t);
            assert_eq!(set_time(s, n), t, "{t:?}");
        }
    }
}
