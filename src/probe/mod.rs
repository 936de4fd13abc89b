//! Measures a directory's sequential read and write bandwidth the way DeepSpeed uses it.
//!
//! The probe mimics DeepSpeed's swapper (`deepspeed_aio`): a test file opened with
//! `O_DIRECT`, `block_size` requests from page-aligned buffers and `queue_depth` requests in
//! flight. The queue depth is made of `queue_depth` threads, each doing `pwrite`/`pread` of
//! its own contiguous slice of the file, like DeepSpeed's intra-op threads.
//!
//! * Write phase: whole passes over the file (`file_size` rounded up to `block_size`), each
//!   ended by `fdatasync` (inside the timed interval), until `min_time` has gone; at least one
//!   pass.
//! * Read phase: whole passes reading the file back (it was fully written, so reads hit real
//!   blocks) until `min_time` has gone. Every block carries its offset and a byte pattern;
//!   what is read back is checked.
//!
//! Where `O_DIRECT` is refused (`EINVAL` from `open` or from the first write: tmpfs on old
//! kernels, some FUSE filesystems, unaligned `block_size`), buffered I/O is measured instead:
//! each write pass ends with `fdatasync`, and the file's page cache is dropped
//! (`posix_fadvise(DONTNEED)`) before each read pass, so every pass reaches the device.
//! `ProbeResult::direct_io` then says `false`.
//!
//! This file owns the measurement itself (options, test file, passes, verification, errors);
//! the result's cache file is `cache.rs`'s and `tierfs probe`'s table `report.rs`'s, both
//! re-exported here, so that neither a stored figure nor its display reaches into the I/O.

use std::alloc::Layout;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::tierio::{AlignedBuf, ALIGN};
use crate::units::fmt_bytes;

mod cache;
mod report;
mod wait;
pub use cache::probe_cached;
pub use report::{format_age, render_table, render_table_at};
use wait::Waits;
pub use wait::{CpuWait, CPU_WAIT_LIMIT};

/// What a probe measured.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ProbeResult {
    /// Bytes per second, sequential reads.
    pub read_bps: f64,
    /// Bytes per second, sequential writes.
    pub write_bps: f64,
    /// Whether O_DIRECT was accepted; false means buffered I/O + fsync was measured.
    pub direct_io: bool,
    /// Unix seconds when it was measured.
    pub measured_at: u64,
    /// Bytes moved in each direction.
    ///
    /// Both directions move whole passes over the test file; this is the smaller of the two
    /// totals, so at least this many bytes were written and at least this many read.
    pub bytes: u64,
    /// How short of cores the machine was while the probe ran ([`CpuWait`]); `None` in
    /// caches written before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_wait: Option<CpuWait>,
}

/// How hard to probe.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Bytes of the test file.
    pub file_size: u64,
    /// Minimum time per direction; the probe repeats passes until this much time has gone.
    pub min_time: Duration,
    /// Requests in flight.
    pub queue_depth: usize,
    /// Request size.
    pub block_size: usize,
    /// A result measured while tasks waited for a core more than this share of the time is
    /// not cached ([`CPU_WAIT_LIMIT`]; 1.0 caches every result).
    pub cpu_wait_limit: f64,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            file_size: 1 << 30,
            min_time: Duration::from_secs(3),
            queue_depth: 8,
            block_size: 1 << 20,
            cpu_wait_limit: CPU_WAIT_LIMIT,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("probe of {dir}: {msg}")]
    Io { dir: String, msg: String },
    /// The directory's filesystem ran out of space (ENOSPC or EDQUOT) during the probe.
    #[error(
        "probe of {dir}: not enough space: the probe needs {} free for its test file \
         (file_size rounded up to block_size); free some space or lower file_size: {msg}",
        fmt_bytes(*needed)
    )]
    NoSpace {
        dir: String,
        needed: u64,
        msg: String,
    },
    /// What was read back differs from what was written.
    #[error("probe of {dir}: data read back differs from what was written: {msg}")]
    Corrupt { dir: String, msg: String },
    /// The options cannot be used (zero sizes or queue depth).
    #[error("probe of {dir}: invalid options: {msg}")]
    InvalidOptions { dir: String, msg: String },
}

/// Measures `dir`. Writes and removes a temporary file in it.
pub fn probe_dir(dir: &Path, opts: &ProbeOptions) -> Result<ProbeResult, ProbeError> {
    let dir_s = dir.display().to_string();
    let nblocks = check_options(opts, &dir_s)?;
    let bs = opts.block_size as u64;
    // check_options saw that this does not overflow.
    let total = nblocks * bs;
    check_dir(dir, &dir_s, total)?;

    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let path = dir.join(format!(".tierfs-probe-{}-{}", std::process::id(), nanos));
    let name = path.display().to_string();
    let (file, direct) = create_test_file(&path, &name, &dir_s)?;
    let guard = TempFile(path.clone());

    let threads = (opts.queue_depth as u64).min(nblocks) as usize;
    let mut bufs: Vec<AlignedBuf> = (0..threads).map(|_| pattern_buf(opts.block_size)).collect();
    let (file, direct) = if direct {
        confirm_direct(file, &path, &name, &dir_s, &mut bufs[0], total)?
    } else {
        (file, false)
    };

    let plan = Plan {
        file: &file,
        nblocks,
        bs,
        min_time: opts.min_time,
    };
    let mut waits = Waits::default();
    let (wbytes, wtime) = plan
        .run(&mut bufs, Phase::Write, direct, &mut waits)
        .map_err(|e| e.into_probe_error(&dir_s, total, &name))?;
    let (rbytes, rtime) = plan
        .run(&mut bufs, Phase::Read, direct, &mut waits)
        .map_err(|e| e.into_probe_error(&dir_s, total, &name))?;
    drop(file);
    drop(guard);

    let write_bps = wbytes as f64 / wtime.as_secs_f64().max(1e-9);
    let read_bps = rbytes as f64 / rtime.as_secs_f64().max(1e-9);
    let cpu_wait = waits.shares(wtime + rtime);
    log::debug!(
        "probe of {dir_s}: wrote {wbytes} B in {wtime:?}, read {rbytes} B in {rtime:?}, \
         direct={direct}, {threads} threads, waits for a core {cpu_wait:?}"
    );
    Ok(ProbeResult {
        read_bps,
        write_bps,
        direct_io: direct,
        measured_at: unix_now(),
        bytes: wbytes.min(rbytes),
        cpu_wait: Some(cpu_wait),
    })
}

/// Refuses options the probe cannot run with; returns the blocks of the test file.
fn check_options(opts: &ProbeOptions, dir_s: &str) -> Result<u64, ProbeError> {
    let invalid = |msg: &str| ProbeError::InvalidOptions {
        dir: dir_s.to_string(),
        msg: msg.into(),
    };
    if opts.block_size == 0 {
        return Err(invalid("block_size is 0"));
    }
    if opts.queue_depth == 0 {
        return Err(invalid("queue_depth is 0"));
    }
    if opts.file_size == 0 {
        return Err(invalid("file_size is 0"));
    }
    let bs = opts.block_size as u64;
    let nblocks = opts.file_size.div_ceil(bs);
    nblocks
        .checked_mul(bs)
        .ok_or_else(|| invalid("file_size rounded up to block_size overflows"))?;
    Layout::from_size_align(opts.block_size, ALIGN)
        .map_err(|e| invalid(&format!("block_size {}: {e}", opts.block_size)))?;
    Ok(nblocks)
}

/// `dir` is a directory with room for the `total` bytes of the test file (where its free
/// space is known): fail before filling the file system.
fn check_dir(dir: &Path, dir_s: &str, total: u64) -> Result<(), ProbeError> {
    let io_err = |msg: String| ProbeError::Io {
        dir: dir_s.to_string(),
        msg,
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(io_err("not a directory".into())),
        Err(e) => return Err(io_err(format!("cannot use directory: {e}"))),
    }
    if let Some(avail) = available_bytes(dir) {
        if avail < total {
            return Err(ProbeError::NoSpace {
                dir: dir_s.to_string(),
                needed: total,
                msg: format!("only {} available", fmt_bytes(avail)),
            });
        }
    }
    Ok(())
}

/// Creates the test file at `path` (named `name` in messages), with `O_DIRECT` where the
/// file system takes it; says which.
fn create_test_file(path: &Path, name: &str, dir_s: &str) -> Result<(File, bool), ProbeError> {
    let io_err = |msg: String| ProbeError::Io {
        dir: dir_s.to_string(),
        msg,
    };
    match open_test_file(path, true) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            log::warn!(
                "probe of {dir_s}: O_DIRECT open refused ({e}); measuring buffered I/O + fsync"
            );
            let f = open_test_file(path, false)
                .map_err(|e| io_err(format!("cannot create test file {name}: {e}")))?;
            Ok((f, false))
        }
        Err(e) => Err(io_err(format!("cannot create test file {name}: {e}"))),
    }
}

/// The first write, from `buf`, decides whether `O_DIRECT` really works on the test file
/// opened with it: where that write is refused the file is reopened buffered. Returns the
/// file to measure and whether it does direct I/O; `total` is its size, for messages.
fn confirm_direct(
    file: File,
    path: &Path,
    name: &str,
    dir_s: &str,
    buf: &mut AlignedBuf,
    total: u64,
) -> Result<(File, bool), ProbeError> {
    stamp(buf, 0);
    match write_full(&file, buf, 0) {
        Ok(()) => Ok((file, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            log::warn!(
                "probe of {dir_s}: O_DIRECT write refused ({e}); \
                 measuring buffered I/O + fsync"
            );
            drop(file);
            let file = open_test_file(path, false).map_err(|e| ProbeError::Io {
                dir: dir_s.to_string(),
                msg: format!("cannot reopen test file {name}: {e}"),
            })?;
            Ok((file, false))
        }
        Err(e) => Err(op_error(dir_s, total, name, "write", 0, e)),
    }
}

/// A buffer of `len` bytes for the probe's requests, filled with [`pattern`].
fn pattern_buf(len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(len);
    for (i, x) in b.iter_mut().enumerate() {
        *x = pattern(i);
    }
    b
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Removes the file at the path when dropped (the probe's test file, also on error).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.0) {
            if e.kind() != io::ErrorKind::NotFound {
                log::warn!("cannot remove {}: {e}", self.0.display());
            }
        }
    }
}

fn open_test_file(path: &Path, direct: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(true).mode(0o600);
    if direct {
        o.create_new(true).custom_flags(libc::O_DIRECT);
    } else {
        o.create(true).truncate(true);
    }
    o.open(path)
}

/// The byte every block holds at position `i` (past the offset stamp).
fn pattern(i: usize) -> u8 {
    ((i % 251) as u8) ^ 0x5a
}

/// Length of the offset stamp at the start of each block.
fn stamp_len(buf: &[u8]) -> usize {
    buf.len().min(8)
}

/// Marks `buf` as the block at `offset`.
fn stamp(buf: &mut [u8], offset: u64) {
    let n = stamp_len(buf);
    buf[..n].copy_from_slice(&offset.to_le_bytes()[..n]);
}

/// Positions checked after a read, besides the stamp.
fn sample_positions(len: usize) -> [usize; 3] {
    [len / 3, len / 2, len - 1]
}

/// Overwrites the checked bytes so that a read that leaves the buffer alone is caught.
fn clobber(buf: &mut [u8], offset: u64) {
    stamp(buf, !offset);
    for p in sample_positions(buf.len()) {
        if p >= stamp_len(buf) {
            buf[p] = !pattern(p);
        }
    }
}

/// Checks that `buf` holds the block written at `offset`.
fn verify(buf: &[u8], offset: u64) -> Result<(), String> {
    let n = stamp_len(buf);
    if buf[..n] != offset.to_le_bytes()[..n] {
        return Err(format!(
            "block at offset {offset}: stamp {:02x?}, expected {:02x?}",
            &buf[..n],
            &offset.to_le_bytes()[..n]
        ));
    }
    for p in sample_positions(buf.len()) {
        if p >= n && buf[p] != pattern(p) {
            return Err(format!(
                "block at offset {offset}: byte {p} is {:#04x}, expected {:#04x}",
                buf[p],
                pattern(p)
            ));
        }
    }
    Ok(())
}

fn write_full(f: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.write_at(&buf[done..], offset + done as u64) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "wrote 0 bytes")),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn read_full(f: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "test file ended early",
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Write,
    Read,
}

/// Why a phase failed.
enum PhaseError {
    Io {
        op: &'static str,
        offset: u64,
        err: io::Error,
    },
    Corrupt(String),
}

impl PhaseError {
    fn into_probe_error(self, dir: &str, needed: u64, name: &str) -> ProbeError {
        match self {
            PhaseError::Io { op, offset, err } => op_error(dir, needed, name, op, offset, err),
            PhaseError::Corrupt(msg) => ProbeError::Corrupt {
                dir: dir.into(),
                msg: format!("{name}: {msg}"),
            },
        }
    }
}

fn op_error(
    dir: &str,
    needed: u64,
    name: &str,
    op: &str,
    offset: u64,
    err: io::Error,
) -> ProbeError {
    let what = if op == "fdatasync" {
        format!("cannot fdatasync test file {name}: {err}")
    } else {
        format!("cannot {op} test file {name} at offset {offset}: {err}")
    };
    match err.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => ProbeError::NoSpace {
            dir: dir.into(),
            needed,
            msg: what,
        },
        _ => ProbeError::Io {
            dir: dir.into(),
            msg: what,
        },
    }
}

/// The test file and how to walk it.
struct Plan<'a> {
    file: &'a File,
    nblocks: u64,
    bs: u64,
    min_time: Duration,
}

impl Plan<'_> {
    /// Runs whole passes of `phase` until `min_time` has gone (at least one); returns the
    /// bytes moved and the time the passes took.
    fn run(
        &self,
        bufs: &mut [AlignedBuf],
        phase: Phase,
        direct: bool,
        waits: &mut Waits,
    ) -> Result<(u64, Duration), PhaseError> {
        let mut bytes = 0u64;
        let mut elapsed = Duration::ZERO;
        loop {
            if phase == Phase::Read && !direct {
                drop_cache(self.file);
            }
            let psi0 = crate::sys::cpu_pressure_some_us();
            let t0 = Instant::now();
            let waited = self.pass(bufs, phase)?;
            if phase == Phase::Write {
                self.file.sync_data().map_err(|err| PhaseError::Io {
                    op: "fdatasync",
                    offset: 0,
                    err,
                })?;
            }
            elapsed += t0.elapsed();
            waits.add_machine(psi0, crate::sys::cpu_pressure_some_us());
            waits.add_threads(waited);
            bytes += self.nblocks * self.bs;
            if elapsed >= self.min_time {
                return Ok((bytes, elapsed));
            }
        }
    }

    /// One pass over the whole file: thread `t` of `bufs.len()` moves its contiguous slice.
    /// Returns the threads' mean run delay in ns (`None` where schedstat cannot be read).
    fn pass(&self, bufs: &mut [AlignedBuf], phase: Phase) -> Result<Option<f64>, PhaseError> {
        let threads = bufs.len() as u64;
        let abort = AtomicBool::new(false);
        std::thread::scope(|s| {
            let handles: Vec<_> = bufs
                .iter_mut()
                .enumerate()
                .map(|(t, buf)| {
                    let t = t as u64;
                    let first = t * self.nblocks / threads;
                    let end = (t + 1) * self.nblocks / threads;
                    let abort = &abort;
                    s.spawn(move || {
                        let before = crate::sys::thread_run_delay_ns();
                        let r = self.slice(buf, phase, first, end, abort);
                        if r.is_err() {
                            abort.store(true, Ordering::Relaxed);
                        }
                        let waited = before
                            .zip(crate::sys::thread_run_delay_ns())
                            .map(|(a, b)| b.saturating_sub(a));
                        (r, waited)
                    })
                })
                .collect();
            let mut result = Ok(());
            let mut waited = Some(0u64);
            for h in handles {
                let (r, w) = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                if result.is_ok() {
                    result = r;
                }
                waited = waited.zip(w).map(|(a, b)| a + b);
            }
            result.map(|()| waited.map(|ns| ns as f64 / threads as f64))
        })
    }

    fn slice(
        &self,
        buf: &mut AlignedBuf,
        phase: Phase,
        first: u64,
        end: u64,
        abort: &AtomicBool,
    ) -> Result<(), PhaseError> {
        for block in first..end {
            if abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            let offset = block * self.bs;
            match phase {
                Phase::Write => {
                    stamp(buf, offset);
                    write_full(self.file, buf, offset).map_err(|err| PhaseError::Io {
                        op: "write",
                        offset,
                        err,
                    })?;
                }
                Phase::Read => {
                    clobber(buf, offset);
                    read_full(self.file, buf, offset).map_err(|err| PhaseError::Io {
                        op: "read",
                        offset,
                        err,
                    })?;
                    verify(buf, offset).map_err(PhaseError::Corrupt)?;
                }
            }
        }
        Ok(())
    }
}

/// Bytes an unprivileged user may still write to the filesystem of `dir` (`statvfs`), or
/// `None` when that cannot be told.
fn available_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: c is a valid NUL-terminated path and st points to writable memory of the right
    // type; statvfs fills it on success.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised st.
    let st = unsafe { st.assume_init() };
    // The field types differ between targets (u32 on some 32-bit ones).
    #[allow(clippy::unnecessary_cast)]
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Drops the (clean, fdatasync'ed) page cache of `f`, so buffered reads reach the device.
fn drop_cache(f: &File) {
    // SAFETY: posix_fadvise only reads its integer arguments; the fd is open for the call.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        log::debug!(
            "posix_fadvise(DONTNEED): {}",
            io::Error::from_raw_os_error(rc)
        );
    }
}

#[cfg(test)]
mod tests;
