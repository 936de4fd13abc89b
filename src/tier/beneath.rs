//! Backing access beneath a tier folder: the one way the daemon (and `fsck`/`export`)
//! reaches a piece, a folder, a symlink or a node on a tier.
//!
//! Every call takes the tier folder's root and a path below it (as `Tier::path` and
//! `Tier::limbo_path` give) and works relative to a descriptor of the root through the `*at`
//! family: `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` to reach a file or the
//! parent folder of a name, then `fstatat`-like, `mkdirat`, `renameat2`, `unlinkat`,
//! `symlinkat`, `mknodat`, `fchownat`, `fchmodat`, `utimensat` and the xattr `*at` calls
//! (`getxattrat` and kin, Linux 6.13; `/proc/self/fd/N/name` before that) on the last name.
//! Two things follow:
//! - Nothing is reached through a symlink inside a tier (one planted there by hand gives
//!   ELOOP), race-free, for every operation, not only opens.
//! - Any path the kernel accepts through the mount works on the tiers, although the tier
//!   prefix makes the absolute backing path longer than PATH_MAX: a relative path longer
//!   than one `openat2` takes is walked in pieces of at most [`STEP`] bytes.
//!
//! The absolute paths stay what errors and logs name. The tier folder is opened by its path
//! at each call, not held open, so a tier folder mounted over or replaced under the
//! daemon is seen at once; a call on a name costs that open, one `openat2` for its folder
//! and the call. Kernels without `openat2` (before 5.6) get a walk one name at a time with
//! `O_NOFOLLOW`, refusing symlinks the same way.
//!
//! Debug builds also hold a fault switch ([`fail_nth`]): the tests make the Nth `link`,
//! `rename` or `unlink` beneath one tier folder fail with a chosen errno, to reach the
//! error paths of a multi-step change (a move of a file with several names) at an exact
//! step, which a real tier fails only by chance. Only code linking the library arms it,
//! never a request through the mount; while nothing is armed a call pays one relaxed
//! load, and release builds compile it out.

use std::ffi::{CString, OsStr};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::sys::{self, SetTime};

/// The longest relative path handed to one `openat2`: PATH_MAX less its NUL, less some
/// room so a step never sits on the limit.
pub const STEP: usize = libc::PATH_MAX as usize - 64;

/// A tier folder whose paths are reached only beneath it.
#[derive(Debug, Clone, Copy)]
pub struct Beneath<'a> {
    root: &'a Path,
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn cstr(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

/// The kernel's `struct open_how` (libc's is non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// The kernel's `struct xattr_args` for `getxattrat`/`setxattrat`.
#[repr(C)]
struct XattrArgs {
    value: u64,
    size: u32,
    flags: u32,
}

// The xattr `*at` calls (Linux 6.13) have one number on every architecture (the unified
// syscall table); the libc crate does not name them yet.
const SYS_SETXATTRAT: libc::c_long = 463;
const SYS_GETXATTRAT: libc::c_long = 464;
const SYS_LISTXATTRAT: libc::c_long = 465;
const SYS_REMOVEXATTRAT: libc::c_long = 466;

/// Cleared the first time the kernel answers ENOSYS to an xattr `*at` call: the
/// `/proc/self/fd` paths serve from then on.
static XATTR_AT: AtomicBool = AtomicBool::new(true);

/// The namespace calls [`fail_nth`] can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Link,
    Rename,
    /// A rename that takes effect and still answers the error (an NFS reply lost and the
    /// retransmitted RENAME finding its source gone: ENOENT).
    RenameDone,
    Unlink,
    SyncDir,
}

/// One armed fault: the `left`-th next `call` beneath `root` fails with `errno`.
struct Armed {
    root: PathBuf,
    call: Fault,
    left: u32,
    errno: i32,
}

/// Whether any fault is armed: all a call pays while none is.
static FAULTS_ARMED: AtomicBool = AtomicBool::new(false);
static FAULTS: Mutex<Vec<Armed>> = Mutex::new(Vec::new());

/// Debug builds (the tests'): the `nth` (from 1) `call` beneath the tier folder `root`
/// (as [`Beneath::new`] gets it) from now on fails with `errno`, once; a rename counts
/// on the folder it renames from. Faults are per folder, so tests running side by side in
/// one process do not meet each other's. Arm it before the operation that is to fail
/// starts. Release builds have no switch: arming one there panics, so a test cannot pass
/// without its fault.
pub fn fail_nth(root: &Path, call: Fault, nth: u32, errno: i32) {
    if !cfg!(debug_assertions) {
        panic!("fault injection exists in debug builds only");
    }
    assert!(nth >= 1, "the first call is nth 1");
    let mut f = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
    f.push(Armed {
        root: root.to_path_buf(),
        call,
        left: nth,
        errno,
    });
    FAULTS_ARMED.store(true, Ordering::Relaxed);
}

/// How many faults armed beneath `root` have not fired yet (a test checks that its fault
/// was reached).
pub fn faults_pending(root: &Path) -> usize {
    let f = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
    f.iter().filter(|a| a.root == root).count()
}

/// The armed fault's error for this `call` beneath `root`, if this is its turn.
fn injected(root: &Path, call: Fault) -> io::Result<()> {
    if !cfg!(debug_assertions) || !FAULTS_ARMED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut f = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(i) = f.iter().position(|a| a.root == root && a.call == call) else {
        return Ok(());
    };
    f[i].left -= 1;
    if f[i].left > 0 {
        return Ok(());
    }
    let errno = f.remove(i).errno;
    if f.is_empty() {
        FAULTS_ARMED.store(false, Ordering::Relaxed);
    }
    Err(err(errno))
}

/// `openat2(dir, rel)` without following any symlink and without leaving `dir`; on kernels
/// without openat2 (before 5.6) a walk one name at a time with O_NOFOLLOW.
fn open_at(dir: BorrowedFd<'_>, rel: &[u8], flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let c = cstr(rel)?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64,
        mode: if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
            u64::from(mode)
        } else {
            0
        },
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: the directory descriptor, the NUL-terminated path and `how` are valid for
    // the call, and the size passed is that of `how`.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd >= 0 {
        // SAFETY: openat2 returned a new descriptor that nothing else owns.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::ENOSYS) {
        return Err(e);
    }
    let names: Vec<&[u8]> = rel
        .split(|b| *b == b'/')
        .filter(|n| !n.is_empty() && *n != b".")
        .collect();
    let Some((last, dirs)) = names.split_last() else {
        // `dir` itself.
        // SAFETY: dir is open and "." a valid NUL-terminated name for the call.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c".".as_ptr(), flags | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: openat returned a new descriptor that nothing else owns.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    };
    let mut cur: Option<OwnedFd> = None;
    for n in dirs {
        let at = cur.as_ref().map_or(dir, |f| f.as_fd());
        let next = open_one(at, n, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        cur = Some(next);
    }
    open_one(cur.as_ref().map_or(dir, |f| f.as_fd()), last, flags, mode)
}

/// openat of one name below `dir` that is not followed if it is a symlink; a symlink where a
/// folder is wanted gives ELOOP, as RESOLVE_NO_SYMLINKS does.
fn open_one(dir: BorrowedFd<'_>, name: &[u8], flags: i32, mode: u32) -> io::Result<OwnedFd> {
    if name == b".." || name == b"." {
        return Err(err(libc::EXDEV));
    }
    let c = cstr(name)?;
    // SAFETY: dir is open and c a valid NUL-terminated name for the call.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        // O_NOFOLLOW | O_DIRECTORY on a symlink answers ENOTDIR; say what it is.
        if e.raw_os_error() == Some(libc::ENOTDIR) && flags & libc::O_DIRECTORY != 0 {
            // SAFETY: an all-zero stat is a valid value of this plain C struct.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: valid descriptor, name and out-pointer for the call.
            let r = unsafe {
                libc::fstatat(
                    dir.as_raw_fd(),
                    c.as_ptr(),
                    &mut st,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            };
            if r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFLNK {
                return Err(err(libc::ELOOP));
            }
        }
        return Err(e);
    }
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The folder `rel` (relative, no `..`) below `dir`, walked in steps of at most [`STEP`]
/// bytes; `None` for an empty `rel` (the caller uses `dir` itself).
fn walk_dir(dir: BorrowedFd<'_>, rel: &Path) -> io::Result<Option<OwnedFd>> {
    let mut cur: Option<OwnedFd> = None;
    let mut step: Vec<u8> = Vec::new();
    let flush = |cur: &mut Option<OwnedFd>, step: &mut Vec<u8>| -> io::Result<()> {
        if !step.is_empty() {
            let at = cur.as_ref().map_or(dir, |f| f.as_fd());
            // A trailing "/." makes every name of the step a folder on the way, so a symlink
            // among them gives ELOOP, not the ENOTDIR of an O_NOFOLLOW final name.
            step.extend_from_slice(b"/.");
            let next = open_at(at, step, libc::O_PATH | libc::O_DIRECTORY, 0)?;
            *cur = Some(next);
            step.clear();
        }
        Ok(())
    };
    for c in rel.components() {
        let Component::Normal(n) = c else {
            return Err(err(libc::EXDEV));
        };
        let n = n.as_bytes();
        if !step.is_empty() && step.len() + 1 + n.len() > STEP {
            flush(&mut cur, &mut step)?;
        }
        if !step.is_empty() {
            step.push(b'/');
        }
        step.extend_from_slice(n);
    }
    flush(&mut cur, &mut step)?;
    Ok(cur)
}

/// The folder holding a name and the name: what the `*at` calls take.
struct Parent {
    dir: OwnedFd,
    name: CString,
}

impl Parent {
    fn fd(&self) -> libc::c_int {
        self.dir.as_raw_fd()
    }

    /// The name as a path through `/proc/self/fd`, short whatever the depth: for the calls
    /// that have no `*at` form on this kernel.
    fn proc_path(&self) -> PathBuf {
        let mut p = PathBuf::from(format!("/proc/self/fd/{}", self.fd()));
        p.push(OsStr::from_bytes(self.name.as_bytes()));
        p
    }
}

impl<'a> Beneath<'a> {
    /// The tier folder `root` (from the config; it may itself contain symlinks).
    pub fn new(root: &'a Path) -> Beneath<'a> {
        Beneath { root }
    }

    fn rel<'p>(&self, p: &'p Path) -> io::Result<&'p Path> {
        p.strip_prefix(self.root).map_err(|_| err(libc::EXDEV))
    }

    fn open_root(&self) -> io::Result<OwnedFd> {
        let c = cstr(self.root.as_os_str().as_bytes())?;
        // SAFETY: c is a valid NUL-terminated path for the call.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: open returned a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The folder holding `p` and `p`'s last name. The root itself has no parent here
    /// (EXDEV): the daemon never renames or removes a tier folder through this.
    fn parent(&self, p: &Path) -> io::Result<Parent> {
        let rel = self.rel(p)?;
        let name = match rel.components().next_back() {
            Some(Component::Normal(n)) => cstr(n.as_bytes())?,
            _ => return Err(err(libc::EXDEV)),
        };
        let root = self.open_root()?;
        let dir = match walk_dir(root.as_fd(), rel.parent().unwrap_or(Path::new("")))? {
            Some(d) => d,
            None => root,
        };
        Ok(Parent { dir, name })
    }

    /// Opens `p` with `flags` (and `mode` with O_CREAT); never follows a symlink, a final
    /// one included (ELOOP, or the link itself with O_PATH).
    pub fn open(&self, p: &Path, flags: i32, mode: u32) -> io::Result<File> {
        let rel = self.rel(p)?.as_os_str().as_bytes();
        let fd = if rel.is_empty() {
            open_at(self.open_root()?.as_fd(), b".", flags, mode)?
        } else if rel.len() <= STEP {
            open_at(self.open_root()?.as_fd(), rel, flags, mode)?
        } else {
            let par = self.parent(p)?;
            open_at(par.dir.as_fd(), par.name.as_bytes(), flags, mode)?
        };
        Ok(File::from(fd))
    }

    /// fsync of the folder `p`: makes the entries changed in it durable.
    pub fn sync_dir(&self, p: &Path) -> io::Result<()> {
        injected(self.root, Fault::SyncDir)?;
        self.open(p, libc::O_RDONLY | libc::O_DIRECTORY, 0)?
            .sync_all()
    }

    /// lstat of `p`.
    pub fn stat(&self, p: &Path) -> io::Result<Metadata> {
        self.open(p, libc::O_PATH, 0)?.metadata()
    }

    /// Whether `p` is there (a dangling symlink is).
    pub fn exists(&self, p: &Path) -> bool {
        self.stat(p).is_ok()
    }

    /// Whether `p` is surely not there (`ENOENT`): an entry that cannot be stat-ed for
    /// another reason may be, and what decides to make or drop one must not guess.
    pub fn absent(&self, p: &Path) -> bool {
        matches!(self.stat(p), Err(e) if e.kind() == io::ErrorKind::NotFound)
    }

    /// mkdir of `p` with `mode` (less the umask).
    pub fn mkdir(&self, p: &Path, mode: u32) -> io::Result<()> {
        let par = self.parent(p)?;
        // SAFETY: valid descriptor and name for the call.
        check(unsafe { libc::mkdirat(par.fd(), par.name.as_ptr(), mode as libc::mode_t) })
    }

    /// Makes `p` and every missing folder above it (mode 0777 less the umask, as
    /// `create_dir_all`).
    pub fn mkdir_all(&self, p: &Path) -> io::Result<()> {
        let mut cur = self.open_root()?;
        for c in self.rel(p)?.components() {
            let Component::Normal(n) = c else {
                return Err(err(libc::EXDEV));
            };
            let n = n.as_bytes();
            let dot = [n, b"/."].concat();
            // "/.": a symlink in place of a folder gives ELOOP (see `walk_dir`).
            let open =
                |at: &OwnedFd| open_at(at.as_fd(), &dot, libc::O_PATH | libc::O_DIRECTORY, 0);
            cur = match open(&cur) {
                Ok(d) => d,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    let c = cstr(n)?;
                    // SAFETY: valid descriptor and name for the call.
                    match check(unsafe { libc::mkdirat(cur.as_raw_fd(), c.as_ptr(), 0o777) }) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                        Err(e) => return Err(e),
                    }
                    open(&cur)?
                }
                Err(e) => return Err(e),
            };
        }
        Ok(())
    }

    /// symlink `p` -> `target`.
    pub fn symlink(&self, target: &Path, p: &Path) -> io::Result<()> {
        let t = cstr(target.as_os_str().as_bytes())?;
        let par = self.parent(p)?;
        // SAFETY: valid strings and descriptor for the call.
        check(unsafe { libc::symlinkat(t.as_ptr(), par.fd(), par.name.as_ptr()) })
    }

    /// The target of the symlink `p`.
    pub fn readlink(&self, p: &Path) -> io::Result<PathBuf> {
        let par = self.parent(p)?;
        let mut buf = vec![0u8; 256];
        loop {
            // SAFETY: buf is valid for writes of buf.len() bytes.
            let n = unsafe {
                libc::readlinkat(
                    par.fd(),
                    par.name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            if n < buf.len() {
                buf.truncate(n);
                return Ok(PathBuf::from(OsStr::from_bytes(&buf)));
            }
            // Possibly cut short: ask again with room to spare.
            buf.resize(buf.len() * 2, 0);
        }
    }

    /// mknod of `p`: FIFOs, sockets, character and block devices (`rdev` in the C
    /// library's encoding).
    pub fn mknod(&self, p: &Path, mode: u32, rdev: u64) -> io::Result<()> {
        let par = self.parent(p)?;
        // SAFETY: valid descriptor and name for the call.
        check(unsafe {
            libc::mknodat(
                par.fd(),
                par.name.as_ptr(),
                mode as libc::mode_t,
                rdev as libc::dev_t,
            )
        })
    }

    /// unlink of a non-folder `p`.
    pub fn unlink(&self, p: &Path) -> io::Result<()> {
        injected(self.root, Fault::Unlink)?;
        let par = self.parent(p)?;
        // SAFETY: valid descriptor and name for the call.
        check(unsafe { libc::unlinkat(par.fd(), par.name.as_ptr(), 0) })
    }

    /// A hard link `to` of `from` (a symlink `from` itself, never its target), both
    /// beneath this root.
    pub fn link(&self, from: &Path, to: &Path) -> io::Result<()> {
        injected(self.root, Fault::Link)?;
        let f = self.parent(from)?;
        let t = self.parent(to)?;
        // SAFETY: valid descriptors and names for the call; flags 0 never follow.
        check(unsafe { libc::linkat(f.fd(), f.name.as_ptr(), t.fd(), t.name.as_ptr(), 0) })
    }

    /// rmdir of the empty folder `p`.
    pub fn rmdir(&self, p: &Path) -> io::Result<()> {
        let par = self.parent(p)?;
        // SAFETY: valid descriptor and name for the call.
        check(unsafe { libc::unlinkat(par.fd(), par.name.as_ptr(), libc::AT_REMOVEDIR) })
    }

    /// renameat2 of `from` to `to`, both beneath this root, with `flags`
    /// (RENAME_NOREPLACE / RENAME_EXCHANGE; 0 for a plain rename).
    pub fn rename(&self, from: &Path, to: &Path, flags: u32) -> io::Result<()> {
        self.rename_into(from, *self, to, flags)
    }

    /// [`Beneath::rename`] of `from` beneath this root to `to` beneath `dest`'s (another
    /// tier folder: EXDEV where it is another file system).
    pub fn rename_into(
        &self,
        from: &Path,
        dest: Beneath<'_>,
        to: &Path,
        flags: u32,
    ) -> io::Result<()> {
        injected(self.root, Fault::Rename)?;
        // The entry `from` names, to tell a rename that failed from one that took effect
        // and answered an error all the same (an NFS client whose reply was lost: its
        // retransmission finds the source gone). Taken for failed, the caller would undo
        // the other tiers' renames around this one and leave the object split.
        let id = |b: &Beneath<'_>, p: &Path| b.stat(p).ok().map(|m| (m.dev(), m.ino()));
        let before = (flags & libc::RENAME_EXCHANGE == 0)
            .then(|| id(self, from))
            .flatten();
        let f = self.parent(from)?;
        let t = dest.parent(to)?;
        // SAFETY: valid descriptors and names for the call.
        let r = check(unsafe {
            libc::renameat2(f.fd(), f.name.as_ptr(), t.fd(), t.name.as_ptr(), flags)
        })
        .and_then(|()| injected(self.root, Fault::RenameDone));
        match (r, before) {
            (Err(e), Some(b)) if id(&dest, to) == Some(b) && id(self, from) != Some(b) => {
                log::warn!(
                    "renaming {} to {} answered {e}, but it took effect: taken as done",
                    from.display(),
                    to.display()
                );
                Ok(())
            }
            (r, _) => r,
        }
    }

    /// lchown of `p`; `None` leaves that id unchanged.
    pub fn chown(&self, p: &Path, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        let par = self.parent(p)?;
        // SAFETY: valid descriptor and name for the call; -1 (as the id type) keeps an id.
        check(unsafe {
            libc::fchownat(
                par.fd(),
                par.name.as_ptr(),
                uid.unwrap_or(u32::MAX) as libc::uid_t,
                gid.unwrap_or(u32::MAX) as libc::gid_t,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    }

    /// chmod of `p` without following a final symlink (EOPNOTSUPP for a symlink, whose
    /// mode Linux cannot change).
    pub fn chmod(&self, p: &Path, mode: u32) -> io::Result<()> {
        let par = self.parent(p)?;
        // SAFETY: valid descriptor and name for the call.
        check(unsafe {
            libc::fchmodat(
                par.fd(),
                par.name.as_ptr(),
                mode as libc::mode_t,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    }

    /// Sets atime/mtime of `p` without following a final symlink.
    pub fn utimens(&self, p: &Path, atime: SetTime, mtime: SetTime) -> io::Result<()> {
        let par = self.parent(p)?;
        let ts = [sys::timespec(atime), sys::timespec(mtime)];
        // SAFETY: valid descriptor and name; ts is the array of two utimensat requires.
        check(unsafe {
            libc::utimensat(
                par.fd(),
                par.name.as_ptr(),
                ts.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    }

    /// Runs the xattr `*at` form (`at`) on `p`'s parent and name, or, where the kernel has
    /// none, the path form (`by_path`) on the `/proc/self/fd` path of the name.
    fn xattr<T>(
        &self,
        p: &Path,
        at: impl FnOnce(&Parent) -> io::Result<T>,
        by_path: impl FnOnce(&Path) -> io::Result<T>,
    ) -> io::Result<T> {
        let par = self.parent(p)?;
        if XATTR_AT.load(Ordering::Relaxed) {
            match at(&par) {
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                    XATTR_AT.store(false, Ordering::Relaxed);
                }
                r => return r,
            }
        }
        by_path(&par.proc_path())
    }

    /// Reads the xattr `name` of `p` (not following a final symlink).
    pub fn getxattr(&self, p: &Path, name: &OsStr) -> io::Result<Vec<u8>> {
        let n = cstr(name.as_bytes())?;
        self.xattr(
            p,
            |par| {
                sys::sized(|buf, len| {
                    let args = XattrArgs {
                        value: buf as u64,
                        size: len as u32,
                        flags: 0,
                    };
                    // SAFETY: valid descriptor and strings; args names a buffer valid for
                    // writes of len bytes (or null with 0) and its size is passed.
                    unsafe {
                        libc::syscall(
                            SYS_GETXATTRAT,
                            par.fd(),
                            par.name.as_ptr(),
                            libc::AT_SYMLINK_NOFOLLOW,
                            n.as_ptr(),
                            &args as *const XattrArgs,
                            std::mem::size_of::<XattrArgs>(),
                        ) as libc::ssize_t
                    }
                })
            },
            |path| sys::lgetxattr(path, name),
        )
    }

    /// Sets the xattr `name` of `p` (not following a final symlink); `flags`:
    /// XATTR_CREATE / XATTR_REPLACE.
    pub fn setxattr(&self, p: &Path, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
        let n = cstr(name.as_bytes())?;
        self.xattr(
            p,
            |par| {
                let args = XattrArgs {
                    value: value.as_ptr() as u64,
                    size: value.len() as u32,
                    flags: flags as u32,
                };
                // SAFETY: valid descriptor and strings; args names value, valid for reads
                // of its length, and its size is passed.
                let r = unsafe {
                    libc::syscall(
                        SYS_SETXATTRAT,
                        par.fd(),
                        par.name.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                        n.as_ptr(),
                        &args as *const XattrArgs,
                        std::mem::size_of::<XattrArgs>(),
                    )
                };
                check(r as libc::c_int)
            },
            |path| sys::lsetxattr(path, name, value, flags),
        )
    }

    /// The xattr names of `p` (not following a final symlink).
    pub fn listxattr(&self, p: &Path) -> io::Result<Vec<Vec<u8>>> {
        self.xattr(
            p,
            |par| {
                sys::sized(|buf, len| {
                    // SAFETY: valid descriptor and name; buf is valid for writes of len
                    // bytes (or null with 0).
                    unsafe {
                        libc::syscall(
                            SYS_LISTXATTRAT,
                            par.fd(),
                            par.name.as_ptr(),
                            libc::AT_SYMLINK_NOFOLLOW,
                            buf,
                            len,
                        ) as libc::ssize_t
                    }
                })
                .map(|b| sys::split_names(&b))
            },
            sys::llistxattr,
        )
    }

    /// Removes the xattr `name` of `p` (not following a final symlink).
    pub fn removexattr(&self, p: &Path, name: &OsStr) -> io::Result<()> {
        let n = cstr(name.as_bytes())?;
        self.xattr(
            p,
            |par| {
                // SAFETY: valid descriptor and strings for the call.
                let r = unsafe {
                    libc::syscall(
                        SYS_REMOVEXATTRAT,
                        par.fd(),
                        par.name.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                        n.as_ptr(),
                    )
                };
                check(r as libc::c_int)
            },
            |path| sys::lremovexattr(path, name),
        )
    }

    /// The entries of the folder `p`: names and file types (from the folder, no stat).
    pub fn read_dir(&self, p: &Path) -> io::Result<Vec<(std::ffi::OsString, std::fs::FileType)>> {
        let dir = self.open(p, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        // The descriptor's /proc path is short at any depth; `dir` stays open while it is
        // read, so the path names this folder, not a later one with the same number.
        let proc = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let mut out = Vec::new();
        for ent in std::fs::read_dir(proc)? {
            let ent = ent?;
            out.push((ent.file_name(), ent.file_type()?));
        }
        drop(dir);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

    /// A path of exactly `total` bytes below `root` made of folders of `seg`-byte names,
    /// the last name a file (at most `seg + 1` bytes); the folders are made beneath `root`.
    fn deep(b: &Beneath<'_>, root: &Path, total: usize, seg: usize) -> PathBuf {
        let mut p = root.to_path_buf();
        let mut len = 0;
        while total - len > seg + 1 {
            p.push("d".repeat(seg));
            len += seg + 1;
        }
        b.mkdir_all(&p).unwrap();
        p.push("f".repeat(total - len));
        assert_eq!(p.strip_prefix(root).unwrap().as_os_str().len(), total);
        p
    }

    #[test]
    fn every_call_works_below_path_max_and_beyond() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let b = Beneath::new(root);
        // Relative 4095 bytes: with the root before it, longer than PATH_MAX.
        let p = deep(&b, root, libc::PATH_MAX as usize - 1, 100);
        assert!(p.as_os_str().len() > libc::PATH_MAX as usize);
        let mut f = b
            .open(&p, libc::O_CREAT | libc::O_RDWR, 0o640)
            .expect("create");
        std::io::Write::write_all(&mut f, b"deep").unwrap();
        drop(f);
        let m = b.stat(&p).unwrap();
        assert_eq!((m.len(), m.mode() & 0o777 & !0o022), (4, 0o640));
        b.chmod(&p, 0o600).unwrap();
        assert_eq!(b.stat(&p).unwrap().permissions().mode() & 0o777, 0o600);
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        b.utimens(&p, SetTime::Omit, SetTime::At(old)).unwrap();
        assert_eq!(b.stat(&p).unwrap().mtime(), 1_000_000);
        b.chown(&p, None, None).unwrap();
        match b.setxattr(&p, OsStr::new("user.k"), b"v", 0) {
            Ok(()) => {
                assert_eq!(b.getxattr(&p, OsStr::new("user.k")).unwrap(), b"v");
                assert!(b.listxattr(&p).unwrap().contains(&b"user.k".to_vec()));
                b.removexattr(&p, OsStr::new("user.k")).unwrap();
                assert_eq!(
                    b.getxattr(&p, OsStr::new("user.k"))
                        .unwrap_err()
                        .raw_os_error(),
                    Some(libc::ENODATA)
                );
            }
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP)),
        }
        let q = p.with_file_name("g");
        b.rename(&p, &q, libc::RENAME_NOREPLACE).unwrap();
        assert!(!b.exists(&p) && b.exists(&q));
        // To another root and back.
        let other = tempfile::tempdir().unwrap();
        let o = Beneath::new(other.path());
        let there = other.path().join("moved");
        b.rename_into(&q, o, &there, 0).unwrap();
        assert!(!b.exists(&q) && o.exists(&there));
        assert_eq!(
            b.rename(&there, &q, 0).unwrap_err().raw_os_error(),
            Some(libc::EXDEV),
            "a path outside the root is refused"
        );
        o.rename_into(&there, b, &q, 0).unwrap();
        let names: Vec<_> = b
            .read_dir(q.parent().unwrap())
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("g")]);
        let mut s = String::new();
        std::io::Read::read_to_string(&mut b.open(&q, libc::O_RDONLY, 0).unwrap(), &mut s).unwrap();
        assert_eq!(s, "deep");
        let l = q.with_file_name("l");
        b.symlink(Path::new("g"), &l).unwrap();
        assert_eq!(b.readlink(&l).unwrap(), Path::new("g"));
        assert!(b.stat(&l).unwrap().file_type().is_symlink());
        let fifo = q.with_file_name("p");
        b.mknod(&fifo, libc::S_IFIFO | 0o600, 0).unwrap();
        assert!(b.stat(&fifo).unwrap().file_type().is_fifo());
        for x in [&q, &l, &fifo] {
            b.unlink(x).unwrap();
        }
        let sub = q.with_file_name("sub");
        b.mkdir(&sub, 0o755).unwrap();
        assert!(b.stat(&sub).unwrap().is_dir());
        b.rmdir(&sub).unwrap();
        assert!(b.read_dir(q.parent().unwrap()).unwrap().is_empty());
    }

    #[test]
    fn an_armed_fault_fails_only_its_call_on_its_folder_once() {
        let d = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let (b, o) = (Beneath::new(d.path()), Beneath::new(other.path()));
        for r in [d.path(), other.path()] {
            std::fs::write(r.join("x"), b"x").unwrap();
        }
        let (x, y) = (d.path().join("x"), d.path().join("y"));
        fail_nth(d.path(), Fault::Rename, 2, libc::EXDEV);
        assert_eq!(faults_pending(d.path()), 1);
        // Other calls and other folders do not count.
        b.link(&x, &d.path().join("l")).unwrap();
        o.rename(&other.path().join("x"), &other.path().join("y"), 0)
            .unwrap();
        b.rename(&x, &y, 0).unwrap();
        assert_eq!(
            b.rename(&y, &x, 0).unwrap_err().raw_os_error(),
            Some(libc::EXDEV)
        );
        assert!(b.exists(&y) && !b.exists(&x), "the failed rename ran");
        assert_eq!(faults_pending(d.path()), 0);
        b.rename(&y, &x, 0).unwrap();
    }

    #[test]
    fn one_long_name_chain_is_walked_in_steps() {
        // 250-byte names: step boundaries fall inside the parent chain.
        let d = tempfile::tempdir().unwrap();
        let b = Beneath::new(d.path());
        let p = deep(&b, d.path(), 3 * STEP, 250);
        b.open(&p, libc::O_CREAT | libc::O_WRONLY, 0o600).unwrap();
        assert!(b.stat(&p).unwrap().is_file());
        b.unlink(&p).unwrap();
    }

    #[test]
    fn symlinks_inside_the_tier_are_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        let root = d.path().join("t");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("evil")).unwrap();
        let b = Beneath::new(&root);
        let through = root.join("evil").join("secret");
        let eloop =
            |r: io::Result<()>| assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ELOOP));
        eloop(b.open(&through, libc::O_RDONLY, 0).map(drop));
        eloop(b.stat(&through).map(drop));
        eloop(b.unlink(&through));
        eloop(b.chmod(&through, 0o777));
        eloop(b.rename(&through, &root.join("x"), 0));
        eloop(b.setxattr(&through, OsStr::new("user.k"), b"v", 0));
        eloop(b.mkdir_all(&through));
        // A deep path whose steps cross the link.
        let mut far = root.join("evil");
        for _ in 0..50 {
            far.push("d".repeat(100));
        }
        eloop(b.stat(&far).map(drop));
        // The link itself is reachable as a link, and outside paths are refused.
        assert!(b.stat(&root.join("evil")).unwrap().file_type().is_symlink());
        assert_eq!(
            b.stat(&outside.path().join("secret"))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EXDEV)
        );
        assert_eq!(
            b.stat(&root.join("../x")).unwrap_err().raw_os_error(),
            Some(libc::EXDEV)
        );
        assert!(outside.path().join("secret").exists());
    }

    #[test]
    fn the_per_name_walk_refuses_symlinks_too() {
        // The walk used where openat2 is missing, tried here directly.
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("a")).unwrap();
        std::os::unix::fs::symlink("/", d.path().join("a/l")).unwrap();
        let root = File::open(d.path()).unwrap();
        let e = open_one(root.as_fd(), b"a", libc::O_PATH | libc::O_DIRECTORY, 0).unwrap();
        let r = open_one(e.as_fd(), b"l", libc::O_PATH | libc::O_DIRECTORY, 0);
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ELOOP));
        assert_eq!(
            open_one(root.as_fd(), b"..", libc::O_PATH, 0)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EXDEV)
        );
    }
}
