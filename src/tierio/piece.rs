//! Backing I/O on one piece of a file: full reads and writes, never short, with O_DIRECT
//! where the tier accepts it and the request is aligned.
//!
//! A piece's reads and writes are visible only inside [`crate::tierio`]: every byte to or
//! from a tier is admitted, counted and run there ([`super::Io`]). The rest of the daemon
//! opens pieces and uses their descriptor for metadata (fsync, truncate, fstat).
//!
//! Why two descriptors per piece: DeepSpeed's 1 MiB requests are 4 KiB-aligned but its
//! tails are not (FACTS.md), and Lustre direct I/O and 4Kn drives reject unaligned direct
//! I/O with EINVAL. Aligned requests go through an `O_DIRECT` descriptor from an aligned
//! bounce buffer (so the tier, not the page cache, is what we measure and fill); unaligned
//! ones go through a buffered descriptor of the same file. The kernel keeps the two coherent
//! (a direct write invalidates cached pages; a direct read flushes dirty ones first).

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Alignment of offsets, lengths and buffers for direct I/O on every tier.
pub const ALIGN: usize = crate::sys::DIRECT_ALIGN;

/// A heap buffer aligned to [`ALIGN`], for O_DIRECT.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give &[u8], like Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (capacity rounded up to [`ALIGN`]).
    pub fn zeroed(len: usize) -> AlignedBuf {
        let cap = len.div_ceil(ALIGN).max(1) * ALIGN;
        let layout = std::alloc::Layout::from_size_align(cap, ALIGN).expect("valid layout");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len, cap }
    }

    /// Sets the length, growing the allocation if needed (contents past the old length are
    /// unspecified but initialized).
    pub fn resize(&mut self, len: usize) {
        if len > self.cap {
            *self = AlignedBuf::zeroed(len);
        }
        self.len = len;
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.cap, ALIGN).expect("valid layout");
        // SAFETY: ptr was allocated with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap >= len initialized bytes (allocated zeroed).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

thread_local! {
    /// One bounce buffer per thread: FUSE workers handle one request at a time.
    static BOUNCE: RefCell<AlignedBuf> = RefCell::new(AlignedBuf::zeroed(1 << 20));
}

/// Bytes copied through [`BOUNCE`] because a direct request's memory was not page-aligned
/// (`stats.json` `bounce_bytes`): the FUSE transports hand us aligned buffers, so this
/// stays 0 for DeepSpeed-style aligned I/O.
static BOUNCE_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts `n` bytes bounced (also by the engine's own bounce buffers).
pub(crate) fn note_bounce(n: usize) {
    BOUNCE_BYTES.fetch_add(n as u64, Ordering::Relaxed);
}

/// Bytes bounced so far in this process.
pub fn bounce_bytes() -> u64 {
    BOUNCE_BYTES.load(Ordering::Relaxed)
}

fn is_aligned(off: u64, len: usize, ptr: *const u8) -> bool {
    off % ALIGN as u64 == 0 && len % ALIGN == 0 && len > 0 && (ptr as usize) % ALIGN == 0
}

/// One backing file, open for reading and writing.
#[derive(Debug)]
pub struct Piece {
    file: File,
    direct: Option<File>,
    /// Cleared the first time the tier refuses a direct request, so we stop trying.
    direct_ok: AtomicBool,
    /// Set when the file could only be opened read-only: the errno a write then gets
    /// (EACCES for a 0444 file, EROFS for a tier that turned read-only).
    read_only: Option<i32>,
}

impl Piece {
    /// Opens an existing backing file for reading and writing (read-only when the file's
    /// mode refuses us writing, as for a 0444 file under a non-root daemon: writes through
    /// it then fail with EBADF, which the kernel's own permission check makes unreachable).
    /// `direct`: also open an O_DIRECT descriptor (the tier accepted O_DIRECT at mount).
    pub fn open(path: &Path, direct: bool) -> io::Result<Piece> {
        Self::open_with(None, path, None, direct)
    }

    /// Creates (or empties) the backing file at `path` with `mode`.
    pub fn open_new(path: &Path, mode: u32, direct: bool) -> io::Result<Piece> {
        Self::open_with(None, path, Some(mode), direct)
    }

    /// [`Piece::open`] of a `path` inside the tier folder `root`, following no symlink below
    /// `root` (a symlink planted in a tier gives ELOOP; see [`crate::tier::beneath`]).
    pub fn open_in(root: &Path, path: &Path, direct: bool) -> io::Result<Piece> {
        Self::open_with(Some(root), path, None, direct)
    }

    /// [`Piece::open_new`] inside the tier folder `root`, as [`Piece::open_in`].
    pub fn open_new_in(root: &Path, path: &Path, mode: u32, direct: bool) -> io::Result<Piece> {
        Self::open_with(Some(root), path, Some(mode), direct)
    }

    fn open_with(
        root: Option<&Path>,
        path: &Path,
        create: Option<u32>,
        direct: bool,
    ) -> io::Result<Piece> {
        let open = |write: bool, extra: i32| -> io::Result<File> {
            let acc = if write { libc::O_RDWR } else { libc::O_RDONLY };
            let cr = if create.is_some() {
                libc::O_CREAT | libc::O_TRUNC
            } else {
                0
            };
            match root {
                Some(r) => crate::tier::beneath::Beneath::new(r).open(
                    path,
                    acc | cr | extra,
                    create.unwrap_or(0),
                ),
                None => {
                    let mut o = OpenOptions::new();
                    o.read(true)
                        .write(write)
                        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | extra);
                    if let Some(mode) = create {
                        o.create(true).truncate(true).mode(mode);
                    }
                    o.open(path)
                }
            }
        };
        let (file, read_only) = match open(true, 0) {
            Ok(f) => (f, None),
            Err(e)
                if create.is_none()
                    && matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EROFS)) =>
            {
                (open(false, 0)?, e.raw_os_error())
            }
            Err(e) => return Err(e),
        };
        let write = read_only.is_none();
        let direct = if direct {
            let mut o = OpenOptions::new();
            o.read(true)
                .write(write)
                .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC);
            // The same file: re-opened through the descriptor's /proc entry (a link to
            // exactly this inode, so no O_NOFOLLOW), so no path lookup can land elsewhere.
            o.open(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
        } else {
            None
        };
        let direct_ok = AtomicBool::new(direct.is_some());
        Ok(Piece {
            file,
            direct,
            direct_ok,
            read_only,
        })
    }

    /// The buffered descriptor (for fsync, fallocate, truncate, fstat).
    pub fn file(&self) -> &File {
        &self.file
    }

    fn direct_file(&self) -> Option<&File> {
        if self.direct_ok.load(Ordering::Relaxed) {
            self.direct.as_ref()
        } else {
            None
        }
    }

    /// The errno a write gets before it is tried (a piece opened read-only).
    pub(in crate::tierio) fn write_refusal(&self) -> Option<io::Error> {
        self.read_only.map(io::Error::from_raw_os_error)
    }

    /// The O_DIRECT descriptor, if a request at `off` of `len` bytes goes direct (the tier
    /// takes it and the request is aligned); the buffer must then be aligned too.
    pub(in crate::tierio) fn direct_fd_for(
        &self,
        off: u64,
        len: usize,
    ) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        let d = self.direct_file()?;
        (off % ALIGN as u64 == 0 && len % ALIGN == 0 && len > 0).then(|| d.as_raw_fd())
    }

    /// The buffered descriptor's number (for engines that submit requests themselves).
    pub(in crate::tierio) fn buffered_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.file.as_raw_fd()
    }

    /// Notes a refused direct request: true (and direct I/O off for this piece) on EINVAL.
    pub(in crate::tierio) fn refuse_direct(&self, e: &io::Error) -> bool {
        if e.raw_os_error() == Some(libc::EINVAL) {
            if self.direct_ok.swap(false, Ordering::Relaxed) {
                log::warn!("a tier refused an aligned O_DIRECT request ({e}); using buffered I/O for this file");
            }
            return true;
        }
        false
    }

    /// Writes all of `buf` at `off`, or fails: never a short write.
    pub(in crate::tierio) fn write_all_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        if let Some(errno) = self.read_only {
            return Err(io::Error::from_raw_os_error(errno));
        }
        if let Some(d) = self.direct_file() {
            if off % ALIGN as u64 == 0 && buf.len() % ALIGN == 0 && !buf.is_empty() {
                let r = if (buf.as_ptr() as usize) % ALIGN == 0 {
                    write_full(d, buf, off)
                } else {
                    BOUNCE_BYTES.fetch_add(buf.len() as u64, Ordering::Relaxed);
                    BOUNCE.with(|b| {
                        let mut b = b.borrow_mut();
                        b.resize(buf.len());
                        b.copy_from_slice(buf);
                        write_full(d, &b, off)
                    })
                };
                match r {
                    Err(e) if self.refuse_direct(&e) => {}
                    r => return r,
                }
            }
        }
        write_full(&self.file, buf, off)
    }

    /// Reads into `buf` at `off` until it is full or the piece ends; returns the bytes read.
    pub(in crate::tierio) fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        if let Some(d) = self.direct_file() {
            if off % ALIGN as u64 == 0 && buf.len() % ALIGN == 0 && !buf.is_empty() {
                let r = if is_aligned(off, buf.len(), buf.as_ptr()) {
                    read_full(d, buf, off)
                } else {
                    BOUNCE_BYTES.fetch_add(buf.len() as u64, Ordering::Relaxed);
                    BOUNCE.with(|b| {
                        let mut b = b.borrow_mut();
                        b.resize(buf.len());
                        let n = read_full(d, &mut b, off)?;
                        buf[..n].copy_from_slice(&b[..n]);
                        Ok(n)
                    })
                };
                match r {
                    Err(e) if self.refuse_direct(&e) => {}
                    // A full read is the common case; anything less is checked through the
                    // buffered descriptor, which also serves a tier whose filesystem failed
                    // (ext4 after errors=remount-ro refuses direct reads but not buffered).
                    Ok(n) if n == buf.len() => return Ok(n),
                    Ok(n) => return Ok(n + read_full(&self.file, &mut buf[n..], off + n as u64)?),
                    Err(e) => {
                        log::debug!("direct read failed ({e}); retrying buffered");
                    }
                }
            }
        }
        read_full(&self.file, buf, off)
    }
}

fn write_full(f: &File, mut buf: &[u8], mut off: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match f.write_at(buf, off) {
            Ok(0) => return Err(io::Error::from_raw_os_error(libc::EIO)),
            Ok(n) => {
                buf = &buf[n..];
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads at `off` until `buf` is full or the file ends; returns the bytes read.
pub fn read_full(f: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Whether the filesystem holding `dir` accepts O_DIRECT (tmpfs before Linux 6.6 does not).
pub fn dir_accepts_direct_io(dir: &Path) -> bool {
    crate::sys::dir_accepts_direct_io_of(dir, ALIGN)
}

/// Pieces that refuse writing, for the engines' conformance tests ([`super::engine`]).
#[cfg(test)]
impl Piece {
    /// `path` opened read-only, as [`Piece::open`] leaves a file whose tier refused writing:
    /// with `refusal` a write fails with that errno before it is tried; with `None` it
    /// reaches the kernel, which refuses it (EBADF), as a write through a descriptor whose
    /// file system can no longer take it would be refused.
    pub(crate) fn read_only(path: &Path, direct: bool, refusal: Option<i32>) -> io::Result<Piece> {
        let file = OpenOptions::new().read(true).open(path)?;
        let direct = if direct {
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
                .ok()
        } else {
            None
        };
        Ok(Piece {
            file,
            direct_ok: AtomicBool::new(direct.is_some()),
            direct,
            read_only: refusal,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn aligned_and_unaligned_writes_read_back() {
        let d = tempfile::tempdir().unwrap();
        let direct = dir_accepts_direct_io(d.path());
        let p = Piece::open_new(&d.path().join("f"), 0o600, direct).unwrap();
        let a = pattern(1 << 20, 1);
        p.write_all_at(&a, 0).unwrap();
        let tail = pattern(6 * 1024 + 3, 2);
        p.write_all_at(&tail, 1 << 20).unwrap();
        let mut back = AlignedBuf::zeroed((1 << 20) + 8192);
        let n = p.read_at(&mut back, 0).unwrap();
        assert_eq!(n, (1 << 20) + tail.len());
        assert_eq!(&back[..1 << 20], &a[..]);
        assert_eq!(&back[1 << 20..n], &tail[..]);
        // unaligned buffer, aligned offset: goes through the bounce buffer
        let mut v = vec![0u8; 4096 + 1];
        let n = p.read_at(&mut v[1..], 4096).unwrap();
        assert_eq!(n, 4096);
        assert_eq!(&v[1..], &a[4096..8192]);
    }

    #[test]
    fn aligned_buf_is_aligned() {
        let mut b = AlignedBuf::zeroed(10);
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        b.resize(3 << 20);
        assert_eq!(b.len(), 3 << 20);
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
    }
}
