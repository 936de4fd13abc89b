//! tierfs-faultfs: a small fault-injecting FUSE filesystem, for testing tierfs on a tier
//! that starts failing with EIO (which a loop device cannot be made to do on kernels
//! without device-mapper).
//!
//!     tierfs-faultfs SRC MNT      (runs in the foreground until MNT is unmounted)
//!
//! Passes everything through to the folder SRC. The file `MNT/.faultfs-control` (not
//! listed, always reachable) switches faults on and off, synchronously: writing a list of
//! words makes, from the moment the write returns,
//!
//! - `read`  — every data read (read(2) of a file) fail with EIO,
//! - `write` — every data write, fsync, fallocate and truncate fail with EIO,
//! - `meta`  — every namespace change (create, mkdir, mknod, symlink, unlink, rmdir,
//!   rename, chmod/chown/utimes, set/remove xattr) fail with EIO,
//! - `all`   — all three; `off` — none;
//! - `xattr` — (not in `all`) every xattr read (getxattr, listxattr) fail with EIO, like
//!   a disk whose inode blocks holding them went bad.
//!
//! Reading the file gives the current set. Lookups, stat, listing, open and (but for
//! `xattr`) xattr reads keep working, like a disk whose media fails while its metadata is cached. Every injected
//! error is counted and printed to stderr. Files are opened with `FOPEN_DIRECT_IO`, so no
//! page cache hides a fault.

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tierfs::sys;

const CONTROL: &str = ".faultfs-control";
const CONTROL_INO: u64 = u64::MAX - 1;
const CONTROL_FH: u64 = u64::MAX - 1;
const ROOT: u64 = 1;
const TTL: Duration = Duration::ZERO;

const F_READ: u32 = 1;
const F_WRITE: u32 = 2;
const F_META: u32 = 4;
const F_XATTR: u32 = 8;

struct Inodes {
    by_ino: HashMap<u64, PathBuf>,
    by_path: HashMap<PathBuf, u64>,
    next: u64,
}

impl Inodes {
    fn ino_of(&mut self, rel: &Path) -> u64 {
        if let Some(i) = self.by_path.get(rel) {
            return *i;
        }
        let i = self.next;
        self.next += 1;
        self.by_ino.insert(i, rel.to_path_buf());
        self.by_path.insert(rel.to_path_buf(), i);
        i
    }
    fn forget_path(&mut self, rel: &Path) {
        if let Some(i) = self.by_path.remove(rel) {
            self.by_ino.remove(&i);
        }
    }
    /// `from` (and everything below it) is now called `to`.
    fn renamed(&mut self, from: &Path, to: &Path) {
        self.forget_path(to);
        let moved: Vec<(PathBuf, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (p, i) in moved {
            self.by_path.remove(&p);
            // `to.join("")` would end in a slash, which a file's path must not (ENOTDIR).
            let below = p.strip_prefix(from).unwrap();
            let np = if below.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(below)
            };
            self.by_ino.insert(i, np.clone());
            self.by_path.insert(np, i);
        }
    }
}

struct FaultFs {
    src: PathBuf,
    inodes: Mutex<Inodes>,
    files: Mutex<HashMap<u64, std::sync::Arc<File>>>,
    next_fh: AtomicU64,
    faults: AtomicU32,
    injected: AtomicU64,
}

fn eio() -> Errno {
    Errno::from_i32(libc::EIO)
}

fn err(e: std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn kind(ft: std::fs::FileType) -> FileType {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        FileType::Directory
    } else if ft.is_symlink() {
        FileType::Symlink
    } else if ft.is_fifo() {
        FileType::NamedPipe
    } else if ft.is_socket() {
        FileType::Socket
    } else if ft.is_char_device() {
        FileType::CharDevice
    } else if ft.is_block_device() {
        FileType::BlockDevice
    } else {
        FileType::RegularFile
    }
}

fn faults_text(f: u32) -> String {
    let mut w = Vec::new();
    for (bit, name) in [
        (F_READ, "read"),
        (F_WRITE, "write"),
        (F_META, "meta"),
        (F_XATTR, "xattr"),
    ] {
        if f & bit != 0 {
            w.push(name);
        }
    }
    if w.is_empty() {
        "off\n".into()
    } else {
        format!("{}\n", w.join(" "))
    }
}

fn parse_faults(text: &[u8]) -> Option<u32> {
    let mut f = 0;
    for w in String::from_utf8_lossy(text).split(|c: char| c.is_whitespace() || c == ',') {
        f |= match w {
            "" | "off" | "none" => 0,
            "read" => F_READ,
            "write" => F_WRITE,
            "meta" => F_META,
            "xattr" => F_XATTR,
            "rw" => F_READ | F_WRITE,
            "all" => F_READ | F_WRITE | F_META,
            _ => return None,
        };
    }
    Some(f)
}

impl FaultFs {
    fn real(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.src.clone()
        } else {
            self.src.join(rel)
        }
    }
    fn rel(&self, ino: u64) -> Result<PathBuf, Errno> {
        self.inodes
            .lock()
            .by_ino
            .get(&ino)
            .cloned()
            .ok_or(Errno::from_i32(libc::ESTALE))
    }
    fn child(&self, parent: u64, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.rel(parent)?.join(name))
    }
    /// EIO if fault `bit` is on (counted and logged).
    fn fault(&self, bit: u32, what: &str, rel: &Path) -> Result<(), Errno> {
        if self.faults.load(Ordering::SeqCst) & bit != 0 {
            let n = self.injected.fetch_add(1, Ordering::Relaxed) + 1;
            if n <= 20 || n.is_power_of_two() {
                eprintln!("faultfs: EIO injected: {what} {} (#{n})", rel.display());
            }
            return Err(eio());
        }
        Ok(())
    }
    fn control_attr(&self) -> FileAttr {
        let now = SystemTime::now();
        FileAttr {
            ino: INodeNo(CONTROL_INO),
            size: faults_text(self.faults.load(Ordering::SeqCst)).len() as u64,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind: FileType::RegularFile,
            perm: 0o600,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
    fn attr_of(&self, rel: &Path) -> Result<FileAttr, Errno> {
        let m = std::fs::symlink_metadata(self.real(rel)).map_err(err)?;
        let ino = if rel.as_os_str().is_empty() {
            ROOT
        } else {
            self.inodes.lock().ino_of(rel)
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size: m.len(),
            blocks: m.blocks(),
            atime: sys::time_of(m.atime(), m.atime_nsec()),
            mtime: sys::time_of(m.mtime(), m.mtime_nsec()),
            ctime: sys::time_of(m.ctime(), m.ctime_nsec()),
            crtime: sys::time_of(m.ctime(), m.ctime_nsec()),
            kind: kind(m.file_type()),
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: 4096,
            flags: 0,
        })
    }
    fn file(&self, fh: u64) -> Result<std::sync::Arc<File>, Errno> {
        self.files
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(Errno::from_i32(libc::EBADF))
    }
    fn add_file(&self, f: File) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files.lock().insert(fh, std::sync::Arc::new(f));
        fh
    }
    fn entry(&self, rel: &Path, reply: ReplyEntry) {
        match self.attr_of(rel) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }
}

fn open_options(flags: i32) -> OpenOptions {
    let acc = flags & libc::O_ACCMODE;
    let mut o = OpenOptions::new();
    o.read(acc == libc::O_RDONLY || acc == libc::O_RDWR)
        .write(acc == libc::O_WRONLY || acc == libc::O_RDWR)
        // The kernel sends explicit offsets; O_APPEND would make pwrite ignore them, and
        // O_DIRECT is the kernel's business here (FOPEN_DIRECT_IO).
        .custom_flags(
            flags
                & !(libc::O_ACCMODE
                    | libc::O_APPEND
                    | libc::O_DIRECT
                    | libc::O_CREAT
                    | libc::O_EXCL
                    | libc::O_TRUNC),
        );
    o
}

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == ROOT && name == CONTROL {
            return reply.entry(&TTL, &self.control_attr(), Generation(0));
        }
        match self.child(parent.0, name) {
            Ok(rel) => self.entry(&rel, reply),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino.0 == CONTROL_INO {
            return reply.attr(&TTL, &self.control_attr());
        }
        match self.rel(ino.0).and_then(|r| self.attr_of(&r)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
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
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if ino.0 == CONTROL_INO {
            return reply.attr(&TTL, &self.control_attr());
        }
        let r = (|| -> Result<FileAttr, Errno> {
            let rel = self.rel(ino.0)?;
            let p = self.real(&rel);
            if let Some(size) = size {
                self.fault(F_WRITE, "truncate", &rel)?;
                match fh.map(|f| self.file(f.0)) {
                    Some(Ok(f)) => f.set_len(size).map_err(err)?,
                    _ => OpenOptions::new()
                        .write(true)
                        .open(&p)
                        .and_then(|f| f.set_len(size))
                        .map_err(err)?,
                }
            }
            if mode.is_some()
                || uid.is_some()
                || gid.is_some()
                || atime.is_some()
                || mtime.is_some()
            {
                self.fault(F_META, "setattr", &rel)?;
            }
            if let Some(m) = mode {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m & 0o7777))
                    .map_err(err)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&p, uid, gid).map_err(err)?;
            }
            if atime.is_some() || mtime.is_some() {
                let t = |t: Option<TimeOrNow>| match t {
                    None => sys::SetTime::Omit,
                    Some(TimeOrNow::Now) => sys::SetTime::Now,
                    Some(TimeOrNow::SpecificTime(t)) => sys::SetTime::At(t),
                };
                sys::lutimens(&p, t(atime), t(mtime)).map_err(err)?;
            }
            self.attr_of(&rel)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self
            .rel(ino.0)
            .and_then(|r| std::fs::read_link(self.real(&r)).map_err(err))
        {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let rel = self.child(parent.0, name)?;
            self.fault(F_META, "mknod", &rel)?;
            sys::mknod(&self.real(&rel), mode & !umask, rdev as u64).map_err(err)?;
            Ok(rel)
        })();
        match r {
            Ok(rel) => self.entry(&rel, reply),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let rel = self.child(parent.0, name)?;
            self.fault(F_META, "mkdir", &rel)?;
            let p = self.real(&rel);
            std::fs::create_dir(&p).map_err(err)?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode & !umask & 0o7777))
                .map_err(err)?;
            Ok(rel)
        })();
        match r {
            Ok(rel) => self.entry(&rel, reply),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let rel = self.child(parent.0, name)?;
            self.fault(F_META, "unlink", &rel)?;
            std::fs::remove_file(self.real(&rel)).map_err(err)?;
            self.inodes.lock().forget_path(&rel);
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let rel = self.child(parent.0, name)?;
            self.fault(F_META, "rmdir", &rel)?;
            std::fs::remove_dir(self.real(&rel)).map_err(err)?;
            self.inodes.lock().forget_path(&rel);
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let rel = self.child(parent.0, link_name)?;
            self.fault(F_META, "symlink", &rel)?;
            std::os::unix::fs::symlink(target, self.real(&rel)).map_err(err)?;
            Ok(rel)
        })();
        match r {
            Ok(rel) => self.entry(&rel, reply),
            Err(e) => reply.error(e),
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
        let r = (|| {
            let from = self.child(parent.0, name)?;
            let to = self.child(newparent.0, newname)?;
            self.fault(F_META, "rename", &from)?;
            sys::rename2(&self.real(&from), &self.real(&to), flags.bits()).map_err(err)?;
            let mut inodes = self.inodes.lock();
            if flags.bits() & libc::RENAME_EXCHANGE != 0 {
                let tmp = PathBuf::from("\0faultfs-exchange");
                inodes.renamed(&from, &tmp);
                inodes.renamed(&to, &from);
                inodes.renamed(&tmp, &to);
            } else {
                inodes.renamed(&from, &to);
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino.0 == CONTROL_INO {
            return reply.opened(FileHandle(CONTROL_FH), FopenFlags::FOPEN_DIRECT_IO);
        }
        let r = (|| {
            let rel = self.rel(ino.0)?;
            let f = open_options(flags.0).open(self.real(&rel)).map_err(err)?;
            if flags.0 & libc::O_TRUNC != 0 {
                self.fault(F_WRITE, "truncate", &rel)?;
                f.set_len(0).map_err(err)?;
            }
            Ok(self.add_file(f))
        })();
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            let rel = self.child(parent.0, name)?;
            self.fault(F_META, "create", &rel)?;
            let mut o = open_options(flags);
            o.create(true).mode(mode & !umask);
            if flags & libc::O_EXCL != 0 {
                o.create_new(true);
            }
            if flags & libc::O_TRUNC != 0 {
                o.truncate(true);
            }
            let f = o.open(self.real(&rel)).map_err(err)?;
            let a = self.attr_of(&rel)?;
            Ok((a, self.add_file(f)))
        })();
        match r {
            Ok((a, fh)) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
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
        if fh.0 == CONTROL_FH {
            let t = faults_text(self.faults.load(Ordering::SeqCst));
            let b = t.as_bytes();
            let s = (offset as usize).min(b.len());
            let e = (s + size as usize).min(b.len());
            return reply.data(&b[s..e]);
        }
        let r = (|| {
            let rel = self.rel(ino.0).unwrap_or_default();
            self.fault(F_READ, "read", &rel)?;
            let f = self.file(fh.0)?;
            let mut buf = vec![0u8; size as usize];
            let mut done = 0;
            while done < buf.len() {
                match f.read_at(&mut buf[done..], offset + done as u64) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(err(e)),
                }
            }
            buf.truncate(done);
            Ok(buf)
        })();
        match r {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
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
        if fh.0 == CONTROL_FH {
            return match parse_faults(data) {
                Some(f) => {
                    self.faults.store(f, Ordering::SeqCst);
                    eprintln!("faultfs: faults now {}", faults_text(f).trim());
                    reply.written(data.len() as u32)
                }
                None => reply.error(Errno::from_i32(libc::EINVAL)),
            };
        }
        let r = (|| {
            let rel = self.rel(ino.0).unwrap_or_default();
            self.fault(F_WRITE, "write", &rel)?;
            let f = self.file(fh.0)?;
            f.write_all_at(data, offset).map_err(err)?;
            Ok(data.len() as u32)
        })();
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.files.lock().remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        if fh.0 == CONTROL_FH {
            return reply.ok();
        }
        let r = (|| {
            let rel = self.rel(ino.0).unwrap_or_default();
            self.fault(F_WRITE, "fsync", &rel)?;
            let f = self.file(fh.0)?;
            if datasync {
                f.sync_data()
            } else {
                f.sync_all()
            }
            .map_err(err)
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = (|| {
            let rel = self.rel(ino.0)?;
            let mut ents: Vec<(OsString, FileType)> = Vec::new();
            for e in std::fs::read_dir(self.real(&rel)).map_err(err)? {
                let e = e.map_err(err)?;
                let ft = e.file_type().map_err(err)?;
                ents.push((e.file_name(), kind(ft)));
            }
            ents.sort_by(|a, b| a.0.cmp(&b.0));
            Ok((rel, ents))
        })();
        match r {
            Ok((rel, ents)) => {
                for (i, (name, k)) in ents.iter().enumerate().skip(offset as usize) {
                    let ino = self.inodes.lock().ino_of(&rel.join(name));
                    if reply.add(INodeNo(ino), (i + 1) as u64, *k, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match sys::statvfs(&self.src) {
            Ok(s) => {
                let b = s.block_size.max(1);
                reply.statfs(
                    s.total / b,
                    s.free / b,
                    s.avail / b,
                    s.files,
                    s.files_free,
                    b as u32,
                    s.name_max as u32,
                    b as u32,
                )
            }
            Err(e) => reply.error(err(e)),
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
        let r = (|| {
            let rel = self.rel(ino.0)?;
            self.fault(F_META, "setxattr", &rel)?;
            sys::lsetxattr(&self.real(&rel), name, value, flags).map_err(err)
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.rel(ino.0).and_then(|rel| {
            self.fault(F_XATTR, "getxattr", &rel)?;
            sys::lgetxattr(&self.real(&rel), name).map_err(err)
        }) {
            Ok(v) => xattr_reply(reply, &v, size),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.rel(ino.0).and_then(|rel| {
            self.fault(F_XATTR, "listxattr", &rel)?;
            sys::llistxattr(&self.real(&rel)).map_err(err)
        }) {
            Ok(names) => {
                let mut v = Vec::new();
                for n in names {
                    v.extend_from_slice(&n);
                    v.push(0);
                }
                xattr_reply(reply, &v, size)
            }
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let rel = self.rel(ino.0)?;
            self.fault(F_META, "removexattr", &rel)?;
            sys::lremovexattr(&self.real(&rel), name).map_err(err)
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
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
        let r = (|| {
            let rel = self.rel(ino.0).unwrap_or_default();
            self.fault(F_WRITE, "fallocate", &rel)?;
            let f = self.file(fh.0)?;
            sys::fallocate(f.as_fd(), mode, offset, length).map_err(err)
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
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

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.len() != 2 || args[0] == "-h" || args[0] == "--help" {
        eprintln!(
            "usage: tierfs-faultfs SRC MNT\n\
             passes SRC through at MNT; write read|write|meta|all|off (words may combine) to\n\
             MNT/{CONTROL} to make those operations fail with EIO from then on"
        );
        std::process::exit(2);
    }
    let src = std::fs::canonicalize(&args[0]).unwrap_or_else(|e| {
        eprintln!("tierfs-faultfs: {}: {e}", Path::new(&args[0]).display());
        std::process::exit(1)
    });
    let mut inodes = Inodes {
        by_ino: HashMap::new(),
        by_path: HashMap::new(),
        next: 2,
    };
    inodes.by_ino.insert(ROOT, PathBuf::new());
    inodes.by_path.insert(PathBuf::new(), ROOT);
    let fs = FaultFs {
        src,
        inodes: Mutex::new(inodes),
        files: Mutex::new(HashMap::new()),
        next_fh: AtomicU64::new(1),
        faults: AtomicU32::new(0),
        injected: AtomicU64::new(0),
    };
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("faultfs".into()),
        fuser::MountOption::Subtype("faultfs".into()),
    ];
    config.n_threads = Some(8);
    config.clone_fd = true;
    let session = fuser::Session::new(fs, Path::new(&args[1]), &config).unwrap_or_else(|e| {
        eprintln!(
            "tierfs-faultfs: cannot mount at {}: {e}",
            Path::new(&args[1]).display()
        );
        std::process::exit(1)
    });
    eprintln!("faultfs: mounted {}", Path::new(&args[1]).display());
    if let Err(e) = session.run() {
        eprintln!("tierfs-faultfs: session ended: {e}");
        std::process::exit(1);
    }
}
