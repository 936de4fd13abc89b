//! Running one point of the sweep: the ranks' files written, then read, each phase timed
//! from a common start to the last rank's end; and the folder the files live in, which
//! goes away whatever happens (an error, Ctrl-C, SIGTERM from a batch system).

use super::aio::{Engine, Kind, Shape};
use super::Point;
use crate::tierio::AlignedBuf;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by SIGINT or SIGTERM while a sweep runs: the requests in flight complete, nothing
/// more is submitted, and the sweep's folder is removed.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    // A second signal ends the process the usual way (a hung mount must not trap it).
    // SAFETY: signal() with SIG_DFL is async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

/// Whether a signal asked the sweep to stop.
pub fn stop_flag() -> &'static AtomicBool {
    &STOP
}

/// Catches SIGINT and SIGTERM for the rest of the process (the sweep is the whole of it).
pub fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: an all-zero sigaction is valid; the handler only stores to an atomic and
        // resets its own disposition, both async-signal-safe. No SA_RESTART: a blocking
        // wait returns EINTR, and the loops look at the flag.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The sweep's folder in the mount; removed with everything in it when dropped.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    /// A new folder `.tierfs-tune-PID[-N]` at the mount's root, mode 0700.
    pub fn create(mount: &Path) -> io::Result<Scratch> {
        use std::os::unix::fs::DirBuilderExt;
        let pid = std::process::id();
        for n in 0..100 {
            let name = match n {
                0 => format!(".tierfs-tune-{pid}"),
                n => format!(".tierfs-tune-{pid}-{n}"),
            };
            let dir = mount.join(name);
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(Scratch { dir }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("no free name for the sweep's folder"))
    }

    /// Removes the files of a point (not the folder).
    pub fn clear(&self) -> io::Result<()> {
        for e in std::fs::read_dir(&self.dir)? {
            std::fs::remove_file(e?.path())?;
        }
        Ok(())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!(
                "tierfs: WARNING: could not remove {}: {e}; remove it by hand",
                self.dir.display()
            );
        }
    }
}

/// What one phase moved and how long it took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phase {
    pub bytes: u64,
    pub secs: f64,
    pub files: u64,
}

impl Phase {
    pub fn gbps(&self) -> f64 {
        if self.secs > 0.0 {
            self.bytes as f64 / self.secs / 1e9
        } else {
            0.0
        }
    }
}

/// One point's workers: per rank a buffer of a file's size and its files.
pub struct Run<'a> {
    pub dir: &'a Path,
    pub kind: Kind,
    pub shape: Shape,
    pub threads: usize,
    pub file_size: u64,
    /// Files per rank at most (the space the mount has).
    pub max_files: u64,
}

impl Run<'_> {
    /// The settings of `p` with the sweep's submission mode.
    pub fn shape_of(p: &Point, single_submit: bool, overlap_events: bool) -> Shape {
        Shape {
            block_size: p.block_size as usize,
            queue_depth: p.queue_depth,
            single_submit,
            overlap_events,
        }
    }

    fn path(&self, rank: usize, i: u64) -> PathBuf {
        self.dir.join(format!("rank{rank}-{i}.tensor.swp"))
    }

    /// Every rank writes files until `secs` have passed (at least one each); returns the
    /// phase and the files each rank wrote.
    pub fn write(&self, bufs: &mut [AlignedBuf], secs: f64) -> io::Result<(Phase, Vec<u64>)> {
        let start = Instant::now();
        let deadline = start + Duration::from_secs_f64(secs);
        let counts = self.ranks(bufs, |rank, buf, engines| {
            let mut i = 0;
            while i == 0 || (Instant::now() < deadline && i < self.max_files) {
                self.file(&self.path(rank, i), buf, engines, true)?;
                i += 1;
            }
            Ok(i)
        })?;
        let files: u64 = counts.iter().sum();
        Ok((
            Phase {
                bytes: files * self.file_size,
                secs: start.elapsed().as_secs_f64(),
                files,
            },
            counts,
        ))
    }

    /// Every rank reads back the files it wrote (`counts`).
    pub fn read(&self, bufs: &mut [AlignedBuf], counts: &[u64]) -> io::Result<Phase> {
        let start = Instant::now();
        self.ranks(bufs, |rank, buf, engines| {
            for i in 0..counts[rank] {
                self.file(&self.path(rank, i), buf, engines, false)?;
            }
            Ok(0)
        })?;
        let files: u64 = counts.iter().sum();
        Ok(Phase {
            bytes: files * self.file_size,
            secs: start.elapsed().as_secs_f64(),
            files,
        })
    }

    /// Runs `work` for every rank at once, each with its buffer and its threads' engines
    /// (made before the clock matters: DeepSpeed makes its handles once).
    fn ranks(
        &self,
        bufs: &mut [AlignedBuf],
        work: impl Fn(usize, &mut AlignedBuf, &mut [Engine]) -> io::Result<u64> + Sync,
    ) -> io::Result<Vec<u64>> {
        let mut engines: Vec<Vec<Engine>> = Vec::new();
        for _ in 0..bufs.len() {
            engines.push(
                (0..self.threads)
                    .map(|_| Engine::new(self.kind, &self.shape))
                    .collect::<io::Result<_>>()?,
            );
        }
        std::thread::scope(|s| {
            let work = &work;
            let handles: Vec<_> = bufs
                .iter_mut()
                .zip(engines.iter_mut())
                .enumerate()
                .map(|(rank, (buf, e))| s.spawn(move || work(rank, buf, e)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("a rank panicked")))
                })
                .collect()
        })
    }

    /// One file, DeepSpeed's way: opened, each thread's contiguous slice moved on its own
    /// engine, closed.
    fn file(
        &self,
        path: &Path,
        buf: &mut AlignedBuf,
        engines: &mut [Engine],
        write: bool,
    ) -> io::Result<()> {
        let f = if write {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .mode(0o600)
                .custom_flags(libc::O_DIRECT)
                .open(path)
        } else {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
        }
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let fd = f.as_raw_fd();
        let slice = (self.file_size / self.threads as u64) as usize;
        let stop = stop_flag();
        let shape = self.shape;
        std::thread::scope(|s| {
            let mut parts = buf[..self.file_size as usize]
                .chunks_mut(slice)
                .zip(engines.iter_mut())
                .enumerate();
            let (_, (first, e0)) = parts.next().expect("at least one thread");
            let others: Vec<_> = parts
                .map(|(t, (part, e))| {
                    s.spawn(move || e.transfer(fd, part, (t * slice) as u64, write, &shape, stop))
                })
                .collect();
            let mut r = e0.transfer(fd, first, 0, write, &shape, stop);
            for h in others {
                let x = h
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a thread panicked")));
                if r.is_ok() {
                    r = x;
                }
            }
            r
        })
        .map_err(|e| {
            if e.kind() == io::ErrorKind::Interrupted {
                e
            } else {
                io::Error::new(e.kind(), format!("{}: {e}", path.display()))
            }
        })
    }
}

/// A rank's buffer: a file's size, filled with bytes that do not compress.
pub fn buffer(size: u64, rank: usize) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(size as usize);
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ rank as u64;
    for chunk in b.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_writes_and_reads_its_files_and_the_folder_goes() {
        let d = tempfile::tempdir().unwrap();
        let scratch = Scratch::create(d.path()).unwrap();
        let dir = scratch.dir.clone();
        assert!(dir.starts_with(d.path()));
        let p = Point {
            block_size: 64 << 10,
            queue_depth: 4,
            threads: 2,
        };
        let kind = super::super::aio::choose(false).0;
        let run = Run {
            dir: &dir,
            kind,
            shape: Run::shape_of(&p, false, true),
            threads: 2,
            file_size: 1 << 20,
            max_files: 3,
        };
        let mut bufs = vec![buffer(1 << 20, 0), buffer(1 << 20, 1)];
        let want = bufs[1][..].to_vec();
        // Zero seconds: one file per rank all the same.
        let (w, counts) = run.write(&mut bufs, 0.0).unwrap();
        assert_eq!((w.files, w.bytes), (2, 2 << 20));
        assert_eq!(counts, vec![1, 1]);
        assert_eq!(std::fs::read(dir.join("rank1-0.tensor.swp")).unwrap(), want);
        // Long enough for more: at most max_files each.
        let (w, counts) = run.write(&mut bufs, 30.0).unwrap();
        assert_eq!(counts, vec![3, 3]);
        assert_eq!(w.bytes, 6 << 20);
        bufs[1].fill(0);
        let r = run.read(&mut bufs, &counts).unwrap();
        assert_eq!((r.files, r.bytes), (6, 6 << 20));
        assert_eq!(bufs[1][..], want[..], "read back what was written");
        assert!(r.gbps() > 0.0);
        scratch.clear().unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        drop(scratch);
        assert!(!dir.exists(), "the folder is removed");
        // Two sweeps of one process get two folders.
        let a = Scratch::create(d.path()).unwrap();
        let b = Scratch::create(d.path()).unwrap();
        assert_ne!(a.dir, b.dir);
    }

    #[test]
    fn buffers_differ_per_rank_and_do_not_repeat() {
        let a = buffer(1 << 16, 0);
        let b = buffer(1 << 16, 1);
        assert_ne!(a[..], b[..]);
        assert_ne!(a[..4096], a[4096..8192]);
    }
}
