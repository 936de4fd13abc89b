//! DeepSpeed's request loops for one thread's slice of one file (`csrc/aio/common/
//! deepspeed_aio_common.cpp`): the slice cut into `block_size` requests, at most
//! `queue_depth` in flight on the thread's own context. With `overlap_events` a new request
//! goes in as each one completes (a sliding window); without, a batch of `queue_depth` is
//! submitted and all of it awaited before the next. `single_submit` hands the kernel one
//! request per `io_submit` call instead of the whole batch.
//!
//! The engines: kernel AIO, which is what libaio wraps and DeepSpeed uses, through libaio's
//! `io_submit`/`io_getevents` when a loaded object offers them (under `tierfs run` the
//! preload library does, and takes the requests to the direct path as it does DeepSpeed's)
//! and through the system calls otherwise; and, where the kernel refuses AIO (`io_setup`
//! fails: `fs.aio-max-nr` exhausted, or a kernel without it), blocking `pread`/`pwrite`
//! from `queue_depth` threads per slice, which DeepSpeed itself cannot do: the report says
//! which engine measured.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The `aio` settings that shape one thread's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub block_size: usize,
    pub queue_depth: usize,
    pub single_submit: bool,
    pub overlap_events: bool,
}

/// How the requests reach the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// libaio's functions, found in a loaded object.
    Libaio,
    /// The kernel AIO system calls libaio wraps.
    KernelAio,
    /// `pread`/`pwrite` from threads: kernel AIO is refused here.
    Psync,
}

impl Kind {
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Libaio => "libaio (io_submit/io_getevents of a loaded library)",
            Kind::KernelAio => "kernel AIO (the io_submit/io_getevents system calls libaio wraps)",
            Kind::Psync => "pread/pwrite threads (kernel AIO refused here; DeepSpeed needs it)",
        }
    }
}

/// The engine to measure with: kernel AIO where the kernel gives a context, else psync
/// with the reason. `psync` forces the fallback.
pub fn choose(psync: bool) -> (Kind, Option<String>) {
    if psync {
        return (Kind::Psync, Some("--engine psync".into()));
    }
    match Ctx::new(1) {
        Ok(_) => (
            if aio_fns().0.is_some() {
                Kind::Libaio
            } else {
                Kind::KernelAio
            },
            None,
        ),
        Err(e) => (
            Kind::Psync,
            Some(format!(
                "kernel AIO refused (io_setup: {e}); DeepSpeed's async_io needs it (check \
                 /proc/sys/fs/aio-max-nr against aio-nr)"
            )),
        ),
    }
}

/// One thread's engine, kept across the files of a point.
pub enum Engine {
    Aio(Ctx),
    Psync,
}

impl Engine {
    pub fn new(kind: Kind, shape: &Shape) -> io::Result<Engine> {
        Ok(match kind {
            Kind::Psync => Engine::Psync,
            _ => Engine::Aio(Ctx::new(shape.queue_depth)?),
        })
    }

    /// Reads or writes `buf` at `off` of `fd` as `shape` says; every request must move its
    /// whole length (a short one is an error). Stops submitting once `stop` is set and
    /// returns `Interrupted` after the requests in flight completed.
    pub fn transfer(
        &mut self,
        fd: RawFd,
        buf: &mut [u8],
        off: u64,
        write: bool,
        shape: &Shape,
        stop: &AtomicBool,
    ) -> io::Result<()> {
        let blocks: Vec<(usize, usize)> = (0..buf.len())
            .step_by(shape.block_size.max(1))
            .map(|b| (b, shape.block_size.min(buf.len() - b)))
            .collect();
        match self {
            Engine::Aio(ctx) => ctx.transfer(fd, buf, off, &blocks, write, shape, stop),
            Engine::Psync => psync(fd, buf, off, &blocks, write, shape.queue_depth, stop),
        }
    }
}

/// Linux `struct iocb` (little-endian layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IoCb {
    aio_data: u64,
    aio_key: u32,
    aio_rw_flags: i32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

/// Linux `struct io_event`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

type AioSubmit = unsafe extern "C" fn(libc::c_ulong, libc::c_long, *mut *mut IoCb) -> libc::c_int;
type AioGetevents = unsafe extern "C" fn(
    libc::c_ulong,
    libc::c_long,
    libc::c_long,
    *mut IoEvent,
    *mut libc::timespec,
) -> libc::c_int;

/// libaio's `io_submit` and `io_getevents` where a loaded object offers them, else `None`
/// (the system calls). Calling through them is what lets `tierfs run`'s library see the
/// requests, as it sees DeepSpeed's. libaio's convention: `-errno` on failure.
fn aio_fns() -> (Option<AioSubmit>, Option<AioGetevents>) {
    static FNS: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    let (s, g) = *FNS.get_or_init(|| {
        // SAFETY: dlsym with RTLD_DEFAULT and NUL-terminated names; null when absent.
        unsafe {
            (
                libc::dlsym(libc::RTLD_DEFAULT, c"io_submit".as_ptr()) as usize,
                libc::dlsym(libc::RTLD_DEFAULT, c"io_getevents".as_ptr()) as usize,
            )
        }
    });
    // SAFETY: non-null addresses dlsym gave for these functions, whose C signatures these
    // are (libaio.h).
    unsafe {
        (
            (s != 0).then(|| std::mem::transmute::<usize, AioSubmit>(s)),
            (g != 0).then(|| std::mem::transmute::<usize, AioGetevents>(g)),
        )
    }
}

/// A kernel AIO context (one per thread, as DeepSpeed keeps one per thread).
pub struct Ctx {
    id: libc::c_ulong,
    events: Vec<IoEvent>,
}

impl Ctx {
    fn new(depth: usize) -> io::Result<Ctx> {
        let mut id: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context's id into `id`, a valid c_ulong.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, depth as libc::c_long, &mut id) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Ctx {
            id,
            events: vec![IoEvent::default(); depth.max(1)],
        })
    }

    /// Submits `cbs`; returns how many the kernel took.
    fn submit(&mut self, cbs: &mut [IoCb]) -> io::Result<usize> {
        let mut ptrs: Vec<*mut IoCb> = cbs.iter_mut().map(|c| c as *mut IoCb).collect();
        loop {
            let n = ptrs.len() as libc::c_long;
            // SAFETY: `ptrs` points at `cbs`, alive for the call; the kernel copies each
            // iocb at submission. The buffers they name outlive the requests: `transfer`
            // reaps every request it submitted before it returns.
            let r = unsafe {
                match aio_fns().0 {
                    Some(f) => f(self.id, n, ptrs.as_mut_ptr()) as libc::c_long,
                    None => libc::syscall(libc::SYS_io_submit, self.id, n, ptrs.as_mut_ptr()),
                }
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = if aio_fns().0.is_some() {
                io::Error::from_raw_os_error(-r as i32)
            } else {
                io::Error::last_os_error()
            };
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Waits for at least `min` completions (at most `max`); returns (data, result) pairs.
    fn reap(&mut self, min: usize, max: usize, out: &mut Vec<(u64, i64)>) -> io::Result<()> {
        let max = max.min(self.events.len());
        loop {
            let none = std::ptr::null_mut::<libc::timespec>();
            let ev = self.events.as_mut_ptr();
            // SAFETY: `events` has room for `max` entries; no timeout.
            let n = unsafe {
                match aio_fns().1 {
                    Some(f) => f(self.id, min as _, max as _, ev, none) as libc::c_long,
                    None => libc::syscall(
                        libc::SYS_io_getevents,
                        self.id,
                        min as libc::c_long,
                        max as libc::c_long,
                        ev,
                        none,
                    ),
                }
            };
            if n >= 0 {
                out.extend(self.events[..n as usize].iter().map(|e| (e.data, e.res)));
                return Ok(());
            }
            let e = if aio_fns().1.is_some() {
                io::Error::from_raw_os_error(-n as i32)
            } else {
                io::Error::last_os_error()
            };
            // A signal (Ctrl-C) while waiting: the requests are still in flight, wait on.
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &mut self,
        fd: RawFd,
        buf: &mut [u8],
        off: u64,
        blocks: &[(usize, usize)],
        write: bool,
        shape: &Shape,
        stop: &AtomicBool,
    ) -> io::Result<()> {
        let qd = shape.queue_depth.max(1);
        let base = buf.as_mut_ptr() as u64;
        let iocb = |i: usize| {
            let (at, len) = blocks[i];
            IoCb {
                aio_data: i as u64,
                aio_lio_opcode: if write { 1 } else { 0 }, // IOCB_CMD_PWRITE / PREAD
                aio_fildes: fd as u32,
                // The block's address in `buf`, which outlives the request (see `submit`).
                aio_buf: base + at as u64,
                aio_nbytes: len as u64,
                aio_offset: (off + at as u64) as i64,
                ..IoCb::default()
            }
        };
        let (mut next, mut pending) = (0usize, 0usize);
        let mut failed: Option<io::Error> = None;
        let mut done = Vec::with_capacity(qd);
        loop {
            // Fill the window: all of it with overlap_events, only an empty one without.
            let room = if shape.overlap_events || pending == 0 {
                qd - pending
            } else {
                0
            };
            let n = room.min(blocks.len() - next);
            if n > 0 && failed.is_none() && !stop.load(Ordering::Relaxed) {
                let mut cbs: Vec<IoCb> = (next..next + n).map(iocb).collect();
                let per_call = if shape.single_submit { 1 } else { n };
                let mut taken = 0;
                while taken < n && failed.is_none() {
                    let end = (taken + per_call).min(n);
                    match self.submit(&mut cbs[taken..end]) {
                        Ok(0) => failed = Some(io::Error::other("io_submit took no request")),
                        Ok(k) => taken += k,
                        Err(e) => failed = Some(e),
                    }
                }
                next += taken;
                pending += taken;
            }
            if pending == 0 {
                break;
            }
            // With overlap_events, reap as they come; without, the whole batch.
            let min = if shape.overlap_events { 1 } else { pending };
            done.clear();
            self.reap(min, pending, &mut done)?;
            pending -= done.len();
            for &(i, res) in &done {
                let want = blocks[i as usize].1 as i64;
                if res != want && failed.is_none() {
                    failed = Some(if res < 0 {
                        io::Error::from_raw_os_error(-res as i32)
                    } else {
                        io::Error::other(format!(
                            "a {} of {want} bytes moved {res}",
                            if write { "write" } else { "read" }
                        ))
                    });
                }
            }
            if next == blocks.len() && pending == 0 {
                break;
            }
            if (failed.is_some() || stop.load(Ordering::Relaxed)) && pending == 0 {
                break;
            }
        }
        match failed {
            Some(e) => Err(e),
            None if next < blocks.len() => Err(io::ErrorKind::Interrupted.into()),
            None => Ok(()),
        }
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: the id came from io_setup and is destroyed once; nothing is in flight
        // (`transfer` reaps all it submits).
        unsafe {
            libc::syscall(libc::SYS_io_destroy, self.id);
        }
    }
}

/// The fallback: `queue_depth` threads take the blocks in order with blocking calls.
fn psync(
    fd: RawFd,
    buf: &mut [u8],
    off: u64,
    blocks: &[(usize, usize)],
    write: bool,
    queue_depth: usize,
    stop: &AtomicBool,
) -> io::Result<()> {
    let next = AtomicUsize::new(0);
    let base = buf.as_mut_ptr() as usize;
    let one = || -> io::Result<()> {
        loop {
            if stop.load(Ordering::Relaxed) {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(at, len)) = blocks.get(i) else {
                return Ok(());
            };
            let p = (base + at) as *mut libc::c_void;
            let o = (off + at as u64) as libc::off_t;
            // SAFETY: each block is a distinct range of `buf`, taken by one thread only
            // (the counter hands each index out once), and `buf` outlives the scope.
            let r = unsafe {
                if write {
                    libc::pwrite(fd, p, len, o)
                } else {
                    libc::pread(fd, p, len, o)
                }
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if r as usize != len {
                return Err(io::Error::other(format!(
                    "a request of {len} bytes moved {r}"
                )));
            }
        }
    };
    std::thread::scope(|s| {
        let workers: Vec<_> = (1..queue_depth.max(1)).map(|_| s.spawn(one)).collect();
        let mut r = one();
        for w in workers {
            let x = w
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a thread panicked")));
            if r.is_ok() {
                r = x;
            }
        }
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tierio::AlignedBuf;
    use std::os::fd::AsRawFd;

    fn shapes() -> Vec<Shape> {
        let mut v = Vec::new();
        for (single_submit, overlap_events) in [(false, true), (true, true), (false, false)] {
            v.push(Shape {
                block_size: 64 << 10,
                queue_depth: 3,
                single_submit,
                overlap_events,
            });
        }
        v
    }

    /// Every engine and loop writes and reads back the same bytes, the last request short.
    #[test]
    fn each_engine_and_loop_moves_every_byte() {
        let d = tempfile::tempdir().unwrap();
        let len = (64 << 10) * 5 + 8192;
        let kinds = match choose(false).0 {
            Kind::Psync => vec![Kind::Psync],
            k => vec![k, Kind::Psync],
        };
        let stop = AtomicBool::new(false);
        for kind in kinds {
            for shape in shapes() {
                let p = d.path().join(format!("{kind:?}-{shape:?}"));
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&p)
                    .unwrap();
                let mut w = AlignedBuf::zeroed(len);
                for (i, b) in w.iter_mut().enumerate() {
                    *b = (i * 7 % 251) as u8;
                }
                let mut e = Engine::new(kind, &shape).unwrap();
                e.transfer(f.as_raw_fd(), &mut w, 4096, true, &shape, &stop)
                    .unwrap();
                let mut r = AlignedBuf::zeroed(len);
                e.transfer(f.as_raw_fd(), &mut r, 4096, false, &shape, &stop)
                    .unwrap();
                assert!(r[..] == w[..], "{kind:?} {shape:?}");
                assert_eq!(std::fs::metadata(&p).unwrap().len(), 4096 + len as u64);
            }
        }
    }

    /// A request past the end of what a read-only descriptor can give fails the transfer
    /// (a short read), and `stop` ends one early with Interrupted.
    #[test]
    fn short_requests_fail_and_stop_interrupts() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("small");
        std::fs::write(&p, vec![1u8; 4096]).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let shape = shapes()[0];
        let stop = AtomicBool::new(false);
        for kind in [choose(false).0, Kind::Psync] {
            let mut e = Engine::new(kind, &shape).unwrap();
            let mut b = AlignedBuf::zeroed(128 << 10);
            let err = e
                .transfer(f.as_raw_fd(), &mut b, 0, false, &shape, &stop)
                .unwrap_err();
            assert!(err.to_string().contains("moved"), "{kind:?}: {err}");
            let stopped = AtomicBool::new(true);
            let err = e
                .transfer(f.as_raw_fd(), &mut b, 0, false, &shape, &stopped)
                .unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::Interrupted, "{kind:?}");
        }
    }
}
