//! tierfs-replay: DeepSpeed ZeRO-3 swap I/O, replayed against any directory.
//!
//! Reproduces what unmodified DeepSpeed ZeRO-Infinity (offload_param and offload_optimizer
//! both on NVMe) does to its `nvme_path`, without torch or DeepSpeed (see shared/FACTS.md):
//!
//! - the same folders and file names, one set per rank:
//!   `zero_stage_3/optimizer/rank<R>/{<id>,exp_avg-<id>,exp_avg_sq-<id>}.tensor.swp`,
//!   `<id>_gradient_<offset>_<numel>.tensor.swp` and
//!   `zero_stage_3/bfloat16params/rank<R>/<pid>_param.tensor.swp`, `<id>` = `<first>_<last>`;
//! - the same open/close per operation and flags: reads stat the path (size check), then
//!   `open(O_RDONLY|O_DIRECT)`; writes `open(O_WRONLY|O_CREAT|O_DIRECT, 0600)`, no O_TRUNC;
//! - the same request stream: whole files at offset 0 in `--block` (1 MiB) requests,
//!   `--queue-depth` (8) in flight per aio handle, one file at a time per handle, separate
//!   read and write handles, sizes padded to 1 KiB only (non-4 KiB tails);
//! - the same phases: forward (parameter files ascending), backward (parameter files
//!   descending, gradient files written descending), optimizer step (subgroups ascending,
//!   DeepSpeed's pipeline_read/pipeline_write overlap unless `--no-pipeline`).
//!
//! Every file's content is a function of (file, step), and every read is checked.

use clap::{Parser, ValueEnum};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::{Duration, Instant};

const ALIGN: usize = 4096;

const AFTER_HELP: &str = "\
Unaligned tails: DeepSpeed pads tensors to 1024 x intra_op_parallelism bytes only, so its
swap files end in a tail that is 1 KiB- but not 4 KiB-aligned, and it writes that tail with
O_DIRECT too (which fails with EINVAL on Lustre and 4Kn drives). This replay writes the
4 KiB-aligned body of each file with O_DIRECT from 4096-aligned buffers and the unaligned
tail through a second, non-O_DIRECT descriptor of the same file (opened and closed with the
first). Reads stay all O_DIRECT: the last request is rounded up to 4 KiB and must come back
short by exactly the bytes past end of file.

Engines: io_uring (default) keeps --queue-depth requests in flight per handle on one ring per
rank; libaio does the same with io_submit/io_getevents on one aio context per rank, as
DeepSpeed's async_io op does; psync runs 2 x --queue-depth threads per rank doing
pread/pwrite. Against FUSE the engines differ: io_uring issues from the submitting thread
with task work pending, and each write there can make the kernel ask the daemon for
security.capability many times over (see docs/PERFORMANCE.md); libaio is what DeepSpeed does.

Verification: every 4 KiB block of every file is a function of (file, step, block); each
read is checked unless --no-verify. Exit status: 0 ok, 1 data wrong (content mismatch or a
file of the wrong size; the files are named), 2 bad usage, 3 I/O error (the file, offset
and errno are named).

Example:
  tierfs-replay /mnt/tierfs/ds --ranks 2 --subgroups 8 --subgroup-bytes 32MiB --steps 3 --json out.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum StepOrder {
    Ascending,
    Alternate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
enum EngineKind {
    #[value(name = "io_uring")]
    #[serde(rename = "io_uring")]
    IoUring,
    #[value(name = "libaio")]
    #[serde(rename = "libaio")]
    Libaio,
    #[value(name = "psync")]
    #[serde(rename = "psync")]
    Psync,
}

impl EngineKind {
    fn name(self) -> &'static str {
        match self {
            EngineKind::IoUring => "io_uring",
            EngineKind::Libaio => "libaio",
            EngineKind::Psync => "psync",
        }
    }
}

#[derive(Debug, Clone, Parser, Serialize)]
#[command(
    name = "tierfs-replay",
    about = "Replay DeepSpeed ZeRO-3 NVMe swap I/O (files, flags, sizes, order, overlap) against a directory, verifying every read",
    after_help = AFTER_HELP
)]
struct Args {
    /// The directory DeepSpeed would get as nvme_path.
    dir: PathBuf,
    /// Ranks, each a thread with its own rank<R> folders, working concurrently.
    #[arg(long, default_value_t = 1)]
    ranks: usize,
    /// Optimizer subgroups per rank.
    #[arg(long, default_value_t = 8)]
    subgroups: usize,
    /// Bytes of one subgroup's fp32 master tensor before the tail (exp_avg, exp_avg_sq and
    /// the gradients are the same size; parameter files, bf16, half).
    #[arg(long, default_value = "32MiB", value_parser = parse_size)]
    subgroup_bytes: u64,
    /// Extra bytes on each subgroup, a multiple of 1 KiB, so files end unaligned like
    /// DeepSpeed's (0 for 4 KiB-aligned files).
    #[arg(long, default_value = "6KiB", value_parser = parse_size)]
    tail: u64,
    /// Parameters per subgroup: one parameter file and one gradient file each.
    #[arg(long, default_value_t = 1)]
    params_per_subgroup: usize,
    /// Requests in flight per aio handle (DeepSpeed's queue_depth).
    #[arg(long, default_value_t = 8)]
    queue_depth: usize,
    /// Request size (DeepSpeed's block_size), a multiple of 4 KiB.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    block: u64,
    /// I/O engine.
    #[arg(long, value_enum, default_value_t = EngineKind::IoUring)]
    engine: EngineKind,
    /// Training steps after the set-up pass.
    #[arg(long, default_value_t = 3)]
    steps: usize,
    /// Milliseconds of modeled optimizer compute per subgroup (a sleep).
    #[arg(long, default_value_t = 0.0)]
    compute_ms_per_subgroup: f64,
    /// Serialize the optimizer step: read subgroup i, compute, write it, then i+1.
    #[arg(long)]
    no_pipeline: bool,
    /// Only the optimizer is offloaded (`offload_param` off): no parameter files; the
    /// backward pass writes every gradient file, descending.
    #[arg(long)]
    optimizer_only: bool,
    /// Subgroup order of the optimizer step: `ascending` every step (unmodified DeepSpeed)
    /// or `alternate` (descending on even steps, as the MLP-Offload patch does).
    #[arg(long, value_enum, default_value_t = StepOrder::Ascending)]
    order: StepOrder,
    /// A tierfs `.tierfs/cache` file: report, per phase, how many of the bytes read came
    /// from tierfs's host-memory cache.
    #[arg(long)]
    cache_stats: Option<PathBuf>,
    /// Parameter files in flight ahead in forward and backward.
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// Skip filling and checking data (faster, checks nothing).
    #[arg(long)]
    no_verify: bool,
    /// Write all results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write one line per file operation here: opened_s done_s R|W bytes path (seconds
    /// since start).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Remove the swap files at the end.
    #[arg(long)]
    cleanup: bool,
    /// Print only the summary.
    #[arg(long, short)]
    quiet: bool,
    /// Self-test of the checker: after set-up, zero 4 KiB of rank 0's first master file
    /// (through a plain descriptor); the run must then fail with exit 1 naming it.
    #[arg(long, hide = true)]
    corrupt_after_setup: bool,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let mul: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        _ => {
            return Err(format!(
                "bad unit in {s:?} (use B, KiB, MiB, GiB, KB, MB, GB)"
            ))
        }
    };
    let v = n * mul;
    if !(0.0..=1e15).contains(&v) || v.fract() != 0.0 {
        return Err(format!("bad size {s:?}"));
    }
    Ok(v as u64)
}

// ----- failures ------------------------------------------------------------------------

/// Where the JSON goes, for failures reported from a rank thread.
static JSON_PATH: OnceLock<Option<PathBuf>> = OnceLock::new();

/// Reports a fatal failure and exits: 1 for wrong data, 3 for I/O errors.
fn die(code: i32, msg: &str) -> ! {
    eprintln!("tierfs-replay: {msg}");
    if let Some(Some(p)) = JSON_PATH.get() {
        let v = serde_json::json!({ "ok": false, "exit": code, "error": msg });
        let _ = std::fs::write(p, serde_json::to_string_pretty(&v).unwrap_or_default());
    }
    std::process::exit(code);
}

#[derive(Debug)]
enum Fail {
    /// Wrong size (DeepSpeed's size assertion would fire).
    Data(String),
    /// An errno or a short transfer.
    Io(String),
}

impl Fail {
    fn exit(self) -> ! {
        match self {
            Fail::Data(m) => die(1, &m),
            Fail::Io(m) => die(3, &m),
        }
    }
}

// ----- aligned buffers -----------------------------------------------------------------

/// A zeroed heap buffer aligned to 4096 bytes.
struct AlignedBuf {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: the buffer is plain owned heap memory; it is only shared with the kernel or an
// I/O worker while the owning Transfer keeps it alive and does not touch it.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let cap = len.max(ALIGN).div_ceil(ALIGN) * ALIGN;
        let layout = std::alloc::Layout::from_size_align(cap, ALIGN).expect("layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, cap }
    }
    fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to cap initialized (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.cap) }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.cap) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.cap, ALIGN).expect("layout");
        // SAFETY: allocated in new() with this very layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// Reuses buffers so steady-state steps allocate nothing.
#[derive(Default)]
struct Pool {
    free: Vec<AlignedBuf>,
}

impl Pool {
    fn get(&mut self, len: usize) -> AlignedBuf {
        let need = len.div_ceil(ALIGN) * ALIGN;
        // smallest free buffer that fits
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.cap >= need)
            .min_by_key(|(_, b)| b.cap)
            .map(|(i, _)| i);
        match best {
            Some(i) => self.free.swap_remove(i),
            None => AlignedBuf::new(need),
        }
    }
    fn put(&mut self, b: AlignedBuf) {
        self.free.push(b);
    }
}

// ----- content -------------------------------------------------------------------------

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// 4 KiB of pseudo-random bytes for (file, version).
fn template(key: u64, version: u64) -> Vec<u8> {
    let mut seed = key ^ version.wrapping_mul(0xA24B_AED4_963E_E407);
    let mut t = Vec::with_capacity(ALIGN);
    for _ in 0..ALIGN / 8 {
        t.extend_from_slice(&splitmix(&mut seed).to_le_bytes());
    }
    t
}

/// The first 16 bytes of block `i`: its index and version, and the file's key.
fn stamp(i: usize, key: u64, version: u64) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[..8].copy_from_slice(&((i as u64) | (version << 40)).to_le_bytes());
    s[8..].copy_from_slice(&key.to_le_bytes());
    s
}

/// Writes the content of (file, version) into buf[..size].
fn fill(buf: &mut [u8], size: usize, key: u64, version: u64) {
    let tpl = template(key, version);
    for (i, blk) in buf[..size].chunks_mut(ALIGN).enumerate() {
        let n = blk.len();
        blk.copy_from_slice(&tpl[..n]);
        let s = stamp(i, key, version);
        let m = n.min(16);
        blk[..m].copy_from_slice(&s[..m]);
    }
}

/// Counts the 4 KiB blocks of buf[..size] that differ from (file, version).
fn check(buf: &[u8], size: usize, key: u64, version: u64) -> u64 {
    let tpl = template(key, version);
    let mut bad = 0;
    for (i, blk) in buf[..size].chunks(ALIGN).enumerate() {
        let n = blk.len();
        let s = stamp(i, key, version);
        let m = n.min(16);
        if blk[..m] != s[..m] || blk[m..] != tpl[m..n] {
            bad += 1;
        }
    }
    bad
}

// ----- engines -------------------------------------------------------------------------

/// One block request.
#[derive(Clone, Copy)]
struct Req {
    fd: RawFd,
    ptr: *mut u8,
    len: usize,
    off: u64,
    write: bool,
    user: u64,
}

// SAFETY: a Req carries a pointer into a buffer that its Transfer keeps alive and leaves
// untouched until the request's completion has been handled.
unsafe impl Send for Req {}

trait Engine {
    /// Queues one request (submitted by the next `wait`).
    fn push(&mut self, r: Req) -> io::Result<()>;
    /// Submits what is queued, waits for at least one completion and returns all there are
    /// as (user, result: bytes or -errno).
    fn wait(&mut self, out: &mut Vec<(u64, i64)>) -> io::Result<()>;
}

struct Uring {
    ring: io_uring::IoUring,
}

impl Uring {
    fn new(depth: usize) -> io::Result<Uring> {
        let entries = (depth * 2 + 2).next_power_of_two() as u32;
        let ring = io_uring::IoUring::new(entries)?;
        // Requests that cannot be issued without blocking (FUSE, for one) go to io-wq
        // workers; let there be one per request in flight.
        let n = (depth * 2 + 2) as u32;
        let _ = ring.submitter().register_iowq_max_workers(&mut [n, n]);
        Ok(Uring { ring })
    }
}

impl Engine for Uring {
    fn push(&mut self, r: Req) -> io::Result<()> {
        use io_uring::{opcode, types};
        let e = if r.write {
            opcode::Write::new(types::Fd(r.fd), r.ptr, r.len as u32)
                .offset(r.off)
                .build()
        } else {
            opcode::Read::new(types::Fd(r.fd), r.ptr, r.len as u32)
                .offset(r.off)
                .build()
        }
        .user_data(r.user);
        loop {
            // SAFETY: the fd and the buffer stay valid until this request completes (the
            // Transfer owning them is only finished after its completions are reaped).
            let pushed = unsafe { self.ring.submission().push(&e) };
            if pushed.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    fn wait(&mut self, out: &mut Vec<(u64, i64)>) -> io::Result<()> {
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        for c in self.ring.completion() {
            out.push((c.user_data(), c.result() as i64));
        }
        Ok(())
    }
}

/// Linux `struct iocb` (little-endian layout).
#[repr(C)]
#[derive(Clone, Copy)]
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

/// libaio's `io_submit` and `io_getevents` where a loaded object offers them (libaio, or an
/// interposer such as tierfs's preload library under `tierfs run`, as DeepSpeed's calls
/// meet it), else `None`: the raw system calls. libaio's convention: `-errno` on failure.
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

type AioSubmit = unsafe extern "C" fn(libc::c_ulong, libc::c_long, *mut *mut IoCb) -> libc::c_int;
type AioGetevents = unsafe extern "C" fn(
    libc::c_ulong,
    libc::c_long,
    libc::c_long,
    *mut IoEvent,
    *mut libc::timespec,
) -> libc::c_int;

/// Kernel AIO (what libaio wraps and DeepSpeed's async_io uses): libaio's functions where
/// a loaded object has them ([`aio_fns`]), else the raw system calls.
struct Aio {
    ctx: libc::c_ulong,
    queued: Vec<IoCb>,
    events: Vec<IoEvent>,
}

impl Aio {
    fn new(depth: usize) -> io::Result<Aio> {
        let n = depth * 2 + 2;
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context id into ctx, a valid c_ulong.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, n as libc::c_long, &mut ctx) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Aio {
            ctx,
            queued: Vec::new(),
            events: vec![IoEvent::default(); n],
        })
    }
}

impl Engine for Aio {
    fn push(&mut self, r: Req) -> io::Result<()> {
        self.queued.push(IoCb {
            aio_data: r.user,
            aio_key: 0,
            aio_rw_flags: 0,
            aio_lio_opcode: if r.write { 1 } else { 0 }, // IOCB_CMD_PWRITE / PREAD
            aio_reqprio: 0,
            aio_fildes: r.fd as u32,
            aio_buf: r.ptr as u64,
            aio_nbytes: r.len as u64,
            aio_offset: r.off as i64,
            aio_reserved2: 0,
            aio_flags: 0,
            aio_resfd: 0,
        });
        Ok(())
    }

    fn wait(&mut self, out: &mut Vec<(u64, i64)>) -> io::Result<()> {
        let mut ptrs: Vec<*mut IoCb> = self.queued.iter_mut().map(|c| c as *mut IoCb).collect();
        let mut done = 0;
        while done < ptrs.len() {
            // SAFETY: ptrs[done..] point into self.queued, alive for the call; the kernel
            // copies each iocb at submission.
            let r = unsafe {
                let n = (ptrs.len() - done) as libc::c_long;
                match aio_fns().0 {
                    Some(f) => f(self.ctx, n, ptrs.as_mut_ptr().add(done)) as libc::c_long,
                    None => libc::syscall(
                        libc::SYS_io_submit,
                        self.ctx,
                        n,
                        ptrs.as_mut_ptr().add(done),
                    ),
                }
            };
            if r < 0 {
                let e = if aio_fns().0.is_some() {
                    io::Error::from_raw_os_error(-r as i32)
                } else {
                    io::Error::last_os_error()
                };
                if e.raw_os_error() == Some(libc::EAGAIN) || e.kind() == io::ErrorKind::Interrupted
                {
                    continue;
                }
                return Err(e);
            }
            done += r as usize;
        }
        self.queued.clear();
        loop {
            // SAFETY: events has room for events.len() entries; no timeout.
            let n = unsafe {
                let (len, out) = (self.events.len() as libc::c_long, self.events.as_mut_ptr());
                let none = std::ptr::null_mut::<libc::timespec>();
                match aio_fns().1 {
                    Some(f) => f(self.ctx, 1, len, out, none) as libc::c_long,
                    None => libc::syscall(
                        libc::SYS_io_getevents,
                        self.ctx,
                        1 as libc::c_long,
                        len,
                        out,
                        none,
                    ),
                }
            };
            if n < 0 {
                let e = if aio_fns().1.is_some() {
                    io::Error::from_raw_os_error(-n as i32)
                } else {
                    io::Error::last_os_error()
                };
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for ev in &self.events[..n as usize] {
                out.push((ev.data, ev.res));
            }
            return Ok(());
        }
    }
}

impl Drop for Aio {
    fn drop(&mut self) {
        // SAFETY: ctx came from io_setup and is destroyed once.
        unsafe {
            libc::syscall(libc::SYS_io_destroy, self.ctx);
        }
    }
}

struct Psync {
    tx: Option<crossbeam_channel::Sender<Req>>,
    rx: crossbeam_channel::Receiver<(u64, i64)>,
    workers: Vec<std::thread::JoinHandle<()>>,
    queued: Vec<Req>,
}

impl Psync {
    fn new(threads: usize) -> Psync {
        let (tx, rq) = crossbeam_channel::unbounded::<Req>();
        let (cq, rx) = crossbeam_channel::unbounded();
        let workers = (0..threads)
            .map(|_| {
                let rq = rq.clone();
                let cq = cq.clone();
                std::thread::spawn(move || {
                    while let Ok(r) = rq.recv() {
                        // SAFETY: see Req: the fd and buffer outlive this request.
                        let n = unsafe {
                            if r.write {
                                libc::pwrite(
                                    r.fd,
                                    r.ptr as *const libc::c_void,
                                    r.len,
                                    r.off as i64,
                                )
                            } else {
                                libc::pread(r.fd, r.ptr as *mut libc::c_void, r.len, r.off as i64)
                            }
                        };
                        let res = if n < 0 {
                            -(io::Error::last_os_error()
                                .raw_os_error()
                                .unwrap_or(libc::EIO) as i64)
                        } else {
                            n as i64
                        };
                        if cq.send((r.user, res)).is_err() {
                            break;
                        }
                    }
                })
            })
            .collect();
        Psync {
            tx: Some(tx),
            rx,
            workers,
            queued: Vec::new(),
        }
    }
}

impl Engine for Psync {
    fn push(&mut self, r: Req) -> io::Result<()> {
        self.queued.push(r);
        Ok(())
    }
    fn wait(&mut self, out: &mut Vec<(u64, i64)>) -> io::Result<()> {
        let tx = self.tx.as_ref().expect("engine open");
        for r in self.queued.drain(..) {
            tx.send(r)
                .map_err(|_| io::Error::other("psync workers gone"))?;
        }
        let first = self
            .rx
            .recv()
            .map_err(|_| io::Error::other("psync workers gone"))?;
        out.push(first);
        while let Ok(c) = self.rx.try_recv() {
            out.push(c);
        }
        Ok(())
    }
}

impl Drop for Psync {
    fn drop(&mut self) {
        self.tx = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

// ----- transfers: one whole-file read or write -----------------------------------------

/// What a file is: where, how big, and its content key.
#[derive(Clone, Debug)]
struct FileSpec {
    path: PathBuf,
    size: u64,
    key: u64,
}

struct Transfer {
    spec: FileSpec,
    write: bool,
    /// Content version expected (reads) or written (writes).
    version: u64,
    buf: AlignedBuf,
    fd: Option<File>,
    tail_fd: Option<File>,
    next_off: u64,
    inflight: usize,
    err: Option<Fail>,
    /// When its file was opened (for --trace).
    opened: Option<Instant>,
}

impl Transfer {
    /// End of the part done with O_DIRECT on `fd`.
    fn body_end(&self) -> u64 {
        if self.write {
            self.spec.size / ALIGN as u64 * ALIGN as u64
        } else {
            self.spec.size
        }
    }
    fn all_issued(&self) -> bool {
        self.next_off >= self.spec.size || self.err.is_some()
    }
}

#[derive(Default)]
struct Chan {
    queue: VecDeque<u64>,
    active: Option<u64>,
}

const READ: usize = 0;
const WRITE: usize = 1;

/// One rank's I/O: a read handle and a write handle (DeepSpeed's pipelined swapper has
/// both), each doing one file at a time with up to `qd` block requests in flight.
struct Io {
    engine: Box<dyn Engine>,
    qd: usize,
    block: u64,
    transfers: HashMap<u64, Transfer>,
    done: HashMap<u64, Transfer>,
    next_id: u64,
    chans: [Chan; 2],
    /// request slot -> (transfer, offset, bytes expected back)
    slots: HashMap<u64, (u64, u64, u64)>,
    next_slot: u64,
    completions: Vec<(u64, i64)>,
    bytes_read: u64,
    bytes_written: u64,
    /// Time spent blocked in the engine or submitting.
    io_time: Duration,
    /// --trace: one line per finished transfer.
    trace: Option<Arc<Mutex<File>>>,
    epoch: Instant,
}

impl Io {
    fn new(
        kind: EngineKind,
        qd: usize,
        block: u64,
        trace: Option<Arc<Mutex<File>>>,
        epoch: Instant,
    ) -> io::Result<Io> {
        let engine: Box<dyn Engine> = match kind {
            EngineKind::IoUring => Box::new(Uring::new(qd)?),
            EngineKind::Libaio => Box::new(Aio::new(qd)?),
            EngineKind::Psync => Box::new(Psync::new(qd * 2)),
        };
        Ok(Io {
            engine,
            qd,
            block,
            transfers: HashMap::new(),
            done: HashMap::new(),
            next_id: 0,
            chans: [Chan::default(), Chan::default()],
            slots: HashMap::new(),
            next_slot: 0,
            completions: Vec::new(),
            bytes_read: 0,
            bytes_written: 0,
            io_time: Duration::ZERO,
            trace,
            epoch,
        })
    }

    fn start(&mut self, spec: FileSpec, write: bool, version: u64, buf: AlignedBuf) -> u64 {
        let t0 = Instant::now();
        let id = self.next_id;
        self.next_id += 1;
        self.transfers.insert(
            id,
            Transfer {
                spec,
                write,
                version,
                buf,
                fd: None,
                tail_fd: None,
                next_off: 0,
                inflight: 0,
                err: None,
                opened: None,
            },
        );
        self.chans[if write { WRITE } else { READ }]
            .queue
            .push_back(id);
        self.fill_chans();
        self.io_time += t0.elapsed();
        id
    }

    fn is_done(&self, id: u64) -> bool {
        self.done.contains_key(&id)
    }

    /// Blocks until transfer `id` is done and hands it back.
    fn wait(&mut self, id: u64) -> Transfer {
        let t0 = Instant::now();
        while !self.done.contains_key(&id) {
            if !self.transfers.contains_key(&id) {
                panic!("waiting for unknown transfer {id}");
            }
            self.pump();
        }
        self.io_time += t0.elapsed();
        let t = self.done.remove(&id).expect("done");
        if let Some(e) = t.err {
            e.exit();
        }
        t
    }

    /// Takes a transfer back if it is done, without blocking.
    fn take_if_done(&mut self, id: u64) -> Option<Transfer> {
        let t = self.done.remove(&id)?;
        if let Some(e) = t.err {
            e.exit();
        }
        Some(t)
    }

    fn open(t: &mut Transfer) -> Result<(), Fail> {
        let p = &t.spec.path;
        if t.write {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .mode(0o600)
                .custom_flags(libc::O_DIRECT)
                .open(p)
                .map_err(|e| {
                    Fail::Io(format!(
                        "open {} O_WRONLY|O_CREAT|O_DIRECT: {e}",
                        p.display()
                    ))
                })?;
            if t.spec.size % ALIGN as u64 != 0 {
                let tf = OpenOptions::new()
                    .write(true)
                    .open(p)
                    .map_err(|e| Fail::Io(format!("open {} O_WRONLY (tail): {e}", p.display())))?;
                t.tail_fd = Some(tf);
            }
            t.fd = Some(f);
        } else {
            // DeepSpeed checks the size (newfstatat) before it opens for reading.
            let m =
                std::fs::metadata(p).map_err(|e| Fail::Io(format!("stat {}: {e}", p.display())))?;
            if m.size() != t.spec.size {
                return Err(Fail::Data(format!(
                    "size mismatch: {} is {} bytes, expected {}",
                    p.display(),
                    m.size(),
                    t.spec.size
                )));
            }
            let f = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(p)
                .map_err(|e| Fail::Io(format!("open {} O_RDONLY|O_DIRECT: {e}", p.display())))?;
            t.fd = Some(f);
        }
        Ok(())
    }

    /// Issues requests until each channel has `qd` in flight or nothing left to issue.
    fn fill_chans(&mut self) {
        for c in [READ, WRITE] {
            loop {
                let id = match self.chans[c].active {
                    Some(id) => id,
                    None => match self.chans[c].queue.pop_front() {
                        Some(id) => {
                            let t = self.transfers.get_mut(&id).expect("queued transfer");
                            t.opened = Some(Instant::now());
                            if let Err(e) = Self::open(t) {
                                t.err = Some(e);
                            }
                            self.chans[c].active = Some(id);
                            id
                        }
                        None => break,
                    },
                };
                let t = self.transfers.get_mut(&id).expect("active transfer");
                if t.all_issued() {
                    if t.inflight == 0 {
                        self.finish(c, id);
                        continue;
                    }
                    break;
                }
                if t.inflight >= self.qd {
                    break;
                }
                // the next request of the active file
                let off = t.next_off;
                let body_end = t.body_end();
                let (fd, len, expect) = if off < body_end {
                    let len = (body_end - off).min(self.block);
                    if t.write {
                        (t.fd.as_ref().expect("open").as_raw_fd(), len, len)
                    } else {
                        // round the last read up to 4 KiB: O_DIRECT, short at EOF
                        let rl = len.div_ceil(ALIGN as u64) * ALIGN as u64;
                        (t.fd.as_ref().expect("open").as_raw_fd(), rl, len)
                    }
                } else {
                    let len = t.spec.size - off;
                    (t.tail_fd.as_ref().expect("tail fd").as_raw_fd(), len, len)
                };
                t.next_off = off + expect;
                t.inflight += 1;
                let slot = self.next_slot;
                self.next_slot += 1;
                self.slots.insert(slot, (id, off, expect));
                // SAFETY: off + len <= buf.cap: the buffer holds the size rounded up to 4 KiB.
                let ptr = unsafe { t.buf.ptr.add(off as usize) };
                debug_assert!(off as usize + len as usize <= t.buf.cap);
                let r = Req {
                    fd,
                    ptr,
                    len: len as usize,
                    off,
                    write: t.write,
                    user: slot,
                };
                if let Err(e) = self.engine.push(r) {
                    die(3, &format!("I/O engine: {e}"));
                }
            }
        }
    }

    fn finish(&mut self, c: usize, id: u64) {
        let mut t = self.transfers.remove(&id).expect("transfer");
        t.fd = None; // close, as DeepSpeed does after every operation
        t.tail_fd = None;
        if let (Some(tr), Some(o)) = (&self.trace, t.opened) {
            let e = self.epoch;
            let line = format!(
                "{:.6} {:.6} {} {} {}\n",
                o.duration_since(e).as_secs_f64(),
                e.elapsed().as_secs_f64(),
                if t.write { "W" } else { "R" },
                t.spec.size,
                t.spec.path.display()
            );
            let _ = tr
                .lock()
                .map(|mut f| std::io::Write::write_all(&mut *f, line.as_bytes()));
        }
        self.chans[c].active = None;
        self.done.insert(id, t);
    }

    /// Waits for completions and refills.
    fn pump(&mut self) {
        self.fill_chans();
        if self.slots.is_empty() {
            return;
        }
        let mut out = std::mem::take(&mut self.completions);
        out.clear();
        if let Err(e) = self.engine.wait(&mut out) {
            die(3, &format!("I/O engine: {e}"));
        }
        for &(slot, res) in &out {
            let (id, off, expect) = self.slots.remove(&slot).expect("slot");
            let t = self.transfers.get_mut(&id).expect("transfer in flight");
            t.inflight -= 1;
            let op = if t.write { "write" } else { "read" };
            if res < 0 {
                if t.err.is_none() {
                    t.err = Some(Fail::Io(format!(
                        "{op} {} at offset {off} ({expect} bytes): {}",
                        t.spec.path.display(),
                        io::Error::from_raw_os_error((-res) as i32)
                    )));
                }
            } else if res as u64 != expect {
                if t.err.is_none() {
                    t.err = Some(Fail::Io(format!(
                        "short {op}: {} at offset {off}: {res} of {expect} bytes",
                        t.spec.path.display()
                    )));
                }
            } else if t.write {
                self.bytes_written += res as u64;
            } else {
                self.bytes_read += res as u64;
            }
        }
        self.completions = out;
        self.fill_chans();
    }

    /// Waits for every transfer in `ids` and returns their buffers to the pool.
    fn wait_all(&mut self, ids: &mut Vec<u64>, pool: &mut Pool) {
        for id in ids.drain(..) {
            let t = self.wait(id);
            pool.put(t.buf);
        }
    }
}

// ----- the model: subgroups, parameters and their files --------------------------------

#[derive(Clone, Debug)]
struct Subgroup {
    master: FileSpec,
    exp_avg: FileSpec,
    exp_avg_sq: FileSpec,
    grads: Vec<FileSpec>,
    params: Vec<FileSpec>,
}

impl Subgroup {
    fn optimizer_reads(&self) -> Vec<&FileSpec> {
        let mut v = vec![&self.master, &self.exp_avg, &self.exp_avg_sq];
        v.extend(self.grads.iter());
        v
    }
}

fn spec(dir: &Path, name: String) -> FileSpec {
    let path = dir.join(&name);
    let key = fnv(&path.to_string_lossy());
    FileSpec { path, size: 0, key }
}

fn build_rank(args: &Args, rank: usize) -> (PathBuf, PathBuf, Vec<Subgroup>) {
    let opt = args
        .dir
        .join("zero_stage_3/optimizer")
        .join(format!("rank{rank}"));
    let par = args
        .dir
        .join("zero_stage_3/bfloat16params")
        .join(format!("rank{rank}"));
    let total = args.subgroup_bytes + args.tail;
    let units = total / 1024;
    let p = args.params_per_subgroup as u64;
    let mut sgs = Vec::new();
    for s in 0..args.subgroups {
        let first = s * args.params_per_subgroup;
        let last = first + args.params_per_subgroup - 1;
        let id = format!("{first}_{last}");
        let sized = |mut f: FileSpec, n: u64| {
            f.size = n;
            f
        };
        let mut grads = Vec::new();
        let mut params = Vec::new();
        let mut elem_off = 0u64;
        for j in 0..p {
            let u = if j + 1 == p {
                units - (units / p) * (p - 1)
            } else {
                units / p
            };
            let fp32 = u * 1024;
            let numel = fp32 / 4;
            grads.push(sized(
                spec(&opt, format!("{id}_gradient_{elem_off}_{numel}.tensor.swp")),
                fp32,
            ));
            let bf16 = (numel * 2).div_ceil(1024) * 1024;
            if !args.optimizer_only {
                params.push(sized(
                    spec(&par, format!("{}_param.tensor.swp", first + j as usize)),
                    bf16,
                ));
            }
            elem_off += numel;
        }
        sgs.push(Subgroup {
            master: sized(spec(&opt, format!("{id}.tensor.swp")), total),
            exp_avg: sized(spec(&opt, format!("exp_avg-{id}.tensor.swp")), total),
            exp_avg_sq: sized(spec(&opt, format!("exp_avg_sq-{id}.tensor.swp")), total),
            grads,
            params,
        });
    }
    (opt, par, sgs)
}

// ----- results -------------------------------------------------------------------------

#[derive(Clone, Debug, Default, Serialize)]
struct RankPhase {
    rank: usize,
    io_s: f64,
    compute_s: f64,
    wall_s: f64,
    bytes_read: u64,
    bytes_written: u64,
}

#[derive(Clone, Debug, Serialize)]
struct PhaseResult {
    step: usize,
    phase: String,
    /// Barrier to barrier, all ranks.
    wall_s: f64,
    /// Slowest rank's wall time less its compute (sleep, fill, check): exposed I/O time.
    io_s: f64,
    bytes_read: u64,
    bytes_written: u64,
    /// (read + written) / io_s / 1e9.
    gb_per_s: f64,
    ranks: Vec<RankPhase>,
}

#[derive(Debug, Serialize)]
struct Summary {
    ok: bool,
    exit: i32,
    pipelined: bool,
    files_per_rank: usize,
    bytes_per_rank: u64,
    per_step_bytes_read: u64,
    per_step_bytes_written: u64,
    optimizer_io_s: Vec<f64>,
    optimizer_io_s_median: f64,
    optimizer_gb_per_s_median: f64,
    forward_gb_per_s_median: f64,
    backward_gb_per_s_median: f64,
    step_io_s_median: f64,
    files_checked: u64,
    mismatched_blocks: u64,
    mismatched_files: Vec<String>,
    /// With --cache-stats: per step, the share of the optimizer step's reads served from
    /// tierfs's cache.
    optimizer_cache_share: Vec<f64>,
    optimizer_cache_share_median: Option<f64>,
}

#[derive(Serialize)]
struct Report<'a> {
    args: &'a Args,
    summary: Summary,
    phases: Vec<PhaseResult>,
}

/// Shared between rank threads.
struct Shared {
    barrier: Barrier,
    files_checked: AtomicU64,
    bad_blocks: AtomicU64,
    bad_files: Mutex<Vec<String>>,
    /// (step, phase name, phase start)
    phases: Mutex<Vec<(usize, String, Vec<RankPhase>)>>,
    epoch: Instant,
    trace: Option<Arc<Mutex<File>>>,
    /// (step, phase, bytes served from the cache) per phase, with --cache-stats.
    cache: Mutex<Vec<(usize, String, u64)>>,
    cache_mark: Mutex<u64>,
}

/// `hit_bytes` of a tierfs `.tierfs/cache` file.
fn cache_hits(p: &Path) -> u64 {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("hit_bytes")?.as_u64())
        .unwrap_or_else(|| {
            die(
                3,
                &format!("--cache-stats {}: no hit_bytes in it", p.display()),
            )
        })
}

struct RankCtx<'a> {
    args: &'a Args,
    rank: usize,
    sh: &'a Shared,
    io: Io,
    pool: Pool,
    compute: Duration,
    phase_start: Instant,
    phase_read0: u64,
    phase_written0: u64,
}

impl RankCtx<'_> {
    fn begin(&mut self) {
        self.sh.barrier.wait();
        self.phase_start = Instant::now();
        self.compute = Duration::ZERO;
        self.phase_read0 = self.io.bytes_read;
        self.phase_written0 = self.io.bytes_written;
    }

    fn end(&mut self, step: usize, name: &str) {
        let wall = self.phase_start.elapsed();
        let rp = RankPhase {
            rank: self.rank,
            io_s: (wall.saturating_sub(self.compute)).as_secs_f64(),
            compute_s: self.compute.as_secs_f64(),
            wall_s: wall.as_secs_f64(),
            bytes_read: self.io.bytes_read - self.phase_read0,
            bytes_written: self.io.bytes_written - self.phase_written0,
        };
        {
            let mut ph = self.sh.phases.lock().expect("lock");
            match ph.iter_mut().find(|(s, n, _)| *s == step && n == name) {
                Some((_, _, v)) => v.push(rp),
                None => ph.push((step, name.to_string(), vec![rp])),
            }
        }
        if self.sh.barrier.wait().is_leader() {
            if let Some(p) = &self.args.cache_stats {
                // Every rank is past the phase and none has begun the next.
                let now = cache_hits(p);
                let mut mark = self.sh.cache_mark.lock().expect("lock");
                let d = now.saturating_sub(*mark);
                *mark = now;
                self.sh
                    .cache
                    .lock()
                    .expect("lock")
                    .push((step, name.to_string(), d));
            }
        }
        self.sh.barrier.wait();
    }

    /// Checks a finished read; returns its buffer.
    fn verify(&mut self, t: Transfer) -> AlignedBuf {
        if !self.args.no_verify {
            let c0 = Instant::now();
            let bad = check(
                t.buf.as_slice(),
                t.spec.size as usize,
                t.spec.key,
                t.version,
            );
            self.sh.files_checked.fetch_add(1, Ordering::Relaxed);
            if bad > 0 {
                self.sh.bad_blocks.fetch_add(bad, Ordering::Relaxed);
                let msg = format!(
                    "{}: {bad} of {} 4 KiB blocks differ from step {}'s content",
                    t.spec.path.display(),
                    (t.spec.size as usize).div_ceil(ALIGN),
                    t.version
                );
                eprintln!("tierfs-replay: MISMATCH {msg}");
                self.sh.bad_files.lock().expect("lock").push(msg);
            }
            self.compute += c0.elapsed();
        }
        t.buf
    }

    /// A buffer holding (file, version), ready to write.
    fn content(&mut self, f: &FileSpec, version: u64, buf: Option<AlignedBuf>) -> AlignedBuf {
        let mut b = buf.unwrap_or_else(|| self.pool.get(f.size as usize));
        if !self.args.no_verify {
            let c0 = Instant::now();
            fill(b.as_mut_slice(), f.size as usize, f.key, version);
            self.compute += c0.elapsed();
        }
        b
    }

    fn write(&mut self, f: &FileSpec, version: u64, buf: Option<AlignedBuf>) -> u64 {
        let b = self.content(f, version, buf);
        self.io.start(f.clone(), true, version, b)
    }

    fn read(&mut self, f: &FileSpec, version: u64) -> u64 {
        let b = self.pool.get(f.size as usize);
        self.io.start(f.clone(), false, version, b)
    }

    /// Returns finished writes' buffers to the pool; blocks while more than `keep` remain.
    fn reap(&mut self, writes: &mut VecDeque<u64>, keep: usize) {
        while let Some(&id) = writes.front() {
            if writes.len() > keep || self.io.is_done(id) {
                let t = if self.io.is_done(id) {
                    self.io.take_if_done(id).expect("done")
                } else {
                    self.io.wait(id)
                };
                self.pool.put(t.buf);
                writes.pop_front();
            } else {
                break;
            }
        }
    }

    fn sleep_compute(&mut self) {
        if self.args.compute_ms_per_subgroup > 0.0 {
            let c0 = Instant::now();
            std::thread::sleep(Duration::from_secs_f64(
                self.args.compute_ms_per_subgroup / 1e3,
            ));
            self.compute += c0.elapsed();
        }
    }
}

fn run_rank(args: &Args, rank: usize, sh: &Shared) {
    let (opt, par, sgs) = build_rank(args, rank);
    let io = Io::new(
        args.engine,
        args.queue_depth,
        args.block,
        sh.trace.clone(),
        sh.epoch,
    )
    .unwrap_or_else(|e| die(3, &format!("I/O engine {}: {e}", args.engine.name())));
    let mut cx = RankCtx {
        args,
        rank,
        sh,
        io,
        pool: Pool::default(),
        compute: Duration::ZERO,
        phase_start: sh.epoch,
        phase_read0: 0,
        phase_written0: 0,
    };
    let window = args.prefetch.max(1);

    // ---- set-up: the parameter folder is removed file by file and re-created; every file
    // is written once (version 0).
    cx.begin();
    if par.exists() {
        let entries = std::fs::read_dir(&par)
            .unwrap_or_else(|e| die(3, &format!("readdir {}: {e}", par.display())));
        for e in entries.flatten() {
            std::fs::remove_file(e.path())
                .unwrap_or_else(|er| die(3, &format!("unlink {}: {er}", e.path().display())));
        }
        std::fs::remove_dir(&par)
            .unwrap_or_else(|e| die(3, &format!("rmdir {}: {e}", par.display())));
    }
    // Stale swap files from an earlier run with other sizes would keep their old length
    // (no O_TRUNC) and fail the size check: remove them (DeepSpeed itself only empties the
    // parameter folder).
    if let Ok(entries) = std::fs::read_dir(&opt) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().ends_with(".tensor.swp") {
                std::fs::remove_file(e.path())
                    .unwrap_or_else(|er| die(3, &format!("unlink {}: {er}", e.path().display())));
            }
        }
    }
    for d in [&opt, &par] {
        std::fs::create_dir_all(d)
            .unwrap_or_else(|e| die(3, &format!("mkdir {}: {e}", d.display())));
    }
    let mut writes = VecDeque::new();
    for sg in &sgs {
        let mut all = sg.optimizer_reads();
        all.extend(sg.params.iter());
        for f in all {
            let id = cx.write(f, 0, None);
            writes.push_back(id);
            cx.reap(&mut writes, window);
        }
    }
    cx.reap(&mut writes, 0);
    if args.corrupt_after_setup && rank == 0 {
        use std::os::unix::fs::FileExt;
        let f = OpenOptions::new()
            .write(true)
            .open(&sgs[0].master.path)
            .and_then(|f| {
                f.write_all_at(&[0u8; ALIGN], ALIGN as u64)
                    .and(f.sync_all())
            });
        if let Err(e) = f {
            die(
                3,
                &format!("corrupting {}: {e}", sgs[0].master.path.display()),
            );
        }
    }
    cx.end(0, "setup");

    for step in 1..=args.steps {
        let prev = (step - 1) as u64;
        let cur = step as u64;

        // ---- forward: parameter files ascending
        cx.begin();
        let files: Vec<&FileSpec> = sgs.iter().flat_map(|s| s.params.iter()).collect();
        let mut reads = VecDeque::new();
        for f in &files {
            reads.push_back(cx.read(f, prev));
            if reads.len() > window {
                let t = cx.io.wait(reads.pop_front().expect("read"));
                let b = cx.verify(t);
                cx.pool.put(b);
            }
        }
        while let Some(id) = reads.pop_front() {
            let t = cx.io.wait(id);
            let b = cx.verify(t);
            cx.pool.put(b);
        }
        cx.end(step, "forward");

        // ---- backward: parameter files descending; each subgroup's gradients are
        // written (descending) once its parameters are in.
        cx.begin();
        let mut reads: VecDeque<(u64, usize)> = VecDeque::new();
        let mut writes = VecDeque::new();
        let mut pending_params: Vec<usize> = vec![0; sgs.len()];
        let order: Vec<(usize, &FileSpec)> = sgs
            .iter()
            .enumerate()
            .rev()
            .flat_map(|(i, s)| s.params.iter().rev().map(move |f| (i, f)))
            .collect();
        for (i, _) in &order {
            pending_params[*i] += 1;
        }
        if args.optimizer_only {
            // No parameters to wait for: the gradients come out subgroup by subgroup.
            for sg in sgs.iter().rev() {
                for g in sg.grads.iter().rev() {
                    writes.push_back(cx.write(g, cur, None));
                    cx.reap(&mut writes, window * 2);
                }
            }
        }
        let mut k = 0;
        while k < order.len() || !reads.is_empty() {
            while k < order.len() && reads.len() < window {
                let (i, f) = order[k];
                reads.push_back((cx.read(f, prev), i));
                k += 1;
            }
            let (id, i) = reads.pop_front().expect("read");
            let t = cx.io.wait(id);
            let b = cx.verify(t);
            cx.pool.put(b);
            pending_params[i] -= 1;
            if pending_params[i] == 0 {
                for g in sgs[i].grads.iter().rev() {
                    writes.push_back(cx.write(g, cur, None));
                }
            }
            cx.reap(&mut writes, window * 2);
        }
        cx.reap(&mut writes, 0);
        cx.end(step, "backward");

        // ---- optimizer step: subgroups ascending
        cx.begin();
        let start_reads = |cx: &mut RankCtx, sg: &Subgroup| -> Vec<u64> {
            sg.optimizer_reads()
                .into_iter()
                .enumerate()
                .map(|(j, f)| {
                    // master and moments were last written in the previous step,
                    // gradients in this step's backward
                    let v = if j < 3 { prev } else { cur };
                    cx.read(f, v)
                })
                .collect()
        };
        let pipeline = !args.no_pipeline;
        let mut walk: Vec<usize> = (0..sgs.len()).collect();
        if args.order == StepOrder::Alternate && step % 2 == 0 {
            walk.reverse();
        }
        let mut next_reads = start_reads(&mut cx, &sgs[walk[0]]);
        let mut prev_writes: Vec<u64> = Vec::new();
        for (k, &i) in walk.iter().enumerate() {
            let sg = &sgs[i];
            let mine: Vec<Transfer> = next_reads.drain(..).map(|id| cx.io.wait(id)).collect();
            if pipeline && k + 1 < walk.len() {
                next_reads = start_reads(&mut cx, &sgs[walk[k + 1]]);
            }
            // compute: check the inputs, model the update, produce the outputs in place
            let mut bufs: Vec<AlignedBuf> = mine.into_iter().map(|t| cx.verify(t)).collect();
            cx.sleep_compute();
            let grads: Vec<AlignedBuf> = bufs.split_off(3);
            for g in grads {
                cx.pool.put(g);
            }
            let mut outs = Vec::new();
            let mut it = bufs.into_iter();
            for f in [&sg.master, &sg.exp_avg, &sg.exp_avg_sq] {
                let b = cx.content(f, cur, it.next());
                outs.push((f, b));
            }
            for f in &sg.params {
                let b = cx.content(f, cur, None);
                outs.push((f, b));
            }
            // pipeline_write: the writes of i-1 complete before those of i start
            cx.io.wait_all(&mut prev_writes, &mut cx.pool);
            for (f, b) in outs {
                prev_writes.push(cx.io.start(f.clone(), true, cur, b));
            }
            if !pipeline {
                cx.io.wait_all(&mut prev_writes, &mut cx.pool);
                if k + 1 < walk.len() {
                    next_reads = start_reads(&mut cx, &sgs[walk[k + 1]]);
                }
            }
        }
        cx.io.wait_all(&mut prev_writes, &mut cx.pool);
        cx.end(step, "optimizer");
    }

    if args.cleanup {
        for sg in &sgs {
            let mut all = sg.optimizer_reads();
            all.extend(sg.params.iter());
            for f in all {
                let _ = std::fs::remove_file(&f.path);
            }
        }
        let _ = std::fs::remove_dir(&opt);
        let _ = std::fs::remove_dir(&par);
    }
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn validate(a: &Args) -> Result<(), String> {
    if a.ranks == 0 || a.subgroups == 0 || a.params_per_subgroup == 0 || a.queue_depth == 0 {
        return Err(
            "--ranks, --subgroups, --params-per-subgroup and --queue-depth must be at least 1"
                .into(),
        );
    }
    if a.block == 0 || a.block % ALIGN as u64 != 0 || a.block > 1 << 30 {
        return Err("--block must be a multiple of 4 KiB, at most 1 GiB".into());
    }
    if a.subgroup_bytes % 1024 != 0 || a.tail % 1024 != 0 {
        return Err(
            "--subgroup-bytes and --tail must be multiples of 1 KiB (DeepSpeed pads to 1 KiB)"
                .into(),
        );
    }
    let units = (a.subgroup_bytes + a.tail) / 1024;
    if units < a.params_per_subgroup as u64 {
        return Err("subgroup too small for --params-per-subgroup".into());
    }
    if a.queue_depth > 1024 {
        return Err("--queue-depth at most 1024".into());
    }
    Ok(())
}

fn gb(b: u64) -> f64 {
    b as f64 / 1e9
}

fn main() {
    // SAFETY: restoring the default SIGPIPE action (die quietly when piped into `head`)
    // before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = Args::parse();
    if let Err(e) = validate(&args) {
        eprintln!("tierfs-replay: {e}");
        std::process::exit(2);
    }
    let _ = JSON_PATH.set(args.json.clone());
    if let Err(e) = std::fs::create_dir_all(&args.dir) {
        die(3, &format!("mkdir {}: {e}", args.dir.display()));
    }

    let (_, _, sgs) = build_rank(&args, 0);
    let files_per_rank: usize = sgs.iter().map(|s| 3 + s.grads.len() + s.params.len()).sum();
    let bytes_per_rank: u64 = sgs
        .iter()
        .map(|s| {
            s.optimizer_reads().iter().map(|f| f.size).sum::<u64>()
                + s.params.iter().map(|f| f.size).sum::<u64>()
        })
        .sum();
    let param_bytes: u64 = sgs.iter().flat_map(|s| &s.params).map(|f| f.size).sum();
    let grad_bytes: u64 = sgs.iter().flat_map(|s| &s.grads).map(|f| f.size).sum();
    let master_bytes: u64 = sgs.iter().map(|s| s.master.size).sum();
    let r = args.ranks as u64;
    let step_read = r * (2 * param_bytes + 3 * master_bytes + grad_bytes);
    let step_write = r * (grad_bytes + 3 * master_bytes + param_bytes);
    let pipelined = !args.no_pipeline;

    if !args.quiet {
        println!(
            "tierfs-replay {}: {} rank(s) x {} subgroups of {} B fp32 ({} + {} tail), {} param(s)/subgroup; \
             {} files, {:.3} GB per rank; QD {} x {} B blocks, {}, optimizer {}, verify {}",
            args.dir.display(),
            args.ranks,
            args.subgroups,
            args.subgroup_bytes + args.tail,
            args.subgroup_bytes,
            args.tail,
            args.params_per_subgroup,
            files_per_rank,
            gb(bytes_per_rank),
            args.queue_depth,
            args.block,
            args.engine.name(),
            if pipelined { "pipelined (reads of i+1 and writes of i overlap)" } else { "serialized" },
            if args.no_verify { "off" } else { "on" },
        );
        println!(
            "per step, all ranks: read {:.3} GB, write {:.3} GB (optimizer step: read {:.3} GB, write {:.3} GB)",
            gb(step_read),
            gb(step_write),
            gb(r * (3 * master_bytes + grad_bytes)),
            gb(r * (3 * master_bytes + param_bytes)),
        );
    }

    let trace = args.trace.as_ref().map(|p| {
        let f = File::create(p).unwrap_or_else(|e| die(2, &format!("{}: {e}", p.display())));
        Arc::new(Mutex::new(f))
    });
    let sh = Arc::new(Shared {
        barrier: Barrier::new(args.ranks),
        files_checked: AtomicU64::new(0),
        bad_blocks: AtomicU64::new(0),
        bad_files: Mutex::new(Vec::new()),
        phases: Mutex::new(Vec::new()),
        epoch: Instant::now(),
        trace,
        cache: Mutex::new(Vec::new()),
        cache_mark: Mutex::new(args.cache_stats.as_deref().map(cache_hits).unwrap_or(0)),
    });
    let args = Arc::new(args);
    let handles: Vec<_> = (0..args.ranks)
        .map(|rank| {
            let a = Arc::clone(&args);
            let s = Arc::clone(&sh);
            std::thread::Builder::new()
                .name(format!("rank{rank}"))
                .spawn(move || run_rank(&a, rank, &s))
                .expect("spawn rank thread")
        })
        .collect();
    for h in handles {
        if h.join().is_err() {
            die(3, "a rank thread panicked");
        }
    }

    let mut phases = Vec::new();
    for (step, name, ranks) in sh.phases.lock().expect("lock").drain(..) {
        let wall = ranks.iter().map(|r| r.wall_s).fold(0.0, f64::max);
        let io_s = ranks.iter().map(|r| r.io_s).fold(0.0, f64::max);
        let br: u64 = ranks.iter().map(|r| r.bytes_read).sum();
        let bw: u64 = ranks.iter().map(|r| r.bytes_written).sum();
        let gbps = if io_s > 0.0 { gb(br + bw) / io_s } else { 0.0 };
        phases.push(PhaseResult {
            step,
            phase: name,
            wall_s: wall,
            io_s,
            bytes_read: br,
            bytes_written: bw,
            gb_per_s: gbps,
            ranks,
        });
    }
    if !args.quiet {
        println!(
            "{:<6} {:<10} {:>8} {:>8} {:>10} {:>10} {:>8}",
            "step", "phase", "wall s", "I/O s", "read GB", "write GB", "GB/s"
        );
        for p in &phases {
            println!(
                "{:<6} {:<10} {:>8.3} {:>8.3} {:>10.3} {:>10.3} {:>8.3}",
                p.step,
                p.phase,
                p.wall_s,
                p.io_s,
                gb(p.bytes_read),
                gb(p.bytes_written),
                p.gb_per_s
            );
        }
    }
    let of =
        |name: &str| -> Vec<&PhaseResult> { phases.iter().filter(|p| p.phase == name).collect() };
    let opt_io: Vec<f64> = of("optimizer").iter().map(|p| p.io_s).collect();
    let med_gbps = |name: &str| median(&of(name).iter().map(|p| p.gb_per_s).collect::<Vec<_>>());
    let step_io: Vec<f64> = (1..=args.steps)
        .map(|s| {
            phases
                .iter()
                .filter(|p| p.step == s && p.phase != "setup")
                .map(|p| p.io_s)
                .sum()
        })
        .collect();
    let opt_read: u64 = r * (3 * master_bytes + grad_bytes);
    let opt_cache: Vec<f64> = sh
        .cache
        .lock()
        .expect("lock")
        .iter()
        .filter(|(_, n, _)| n == "optimizer")
        .map(|(_, _, hit)| *hit as f64 / opt_read.max(1) as f64)
        .collect();
    let bad_files = sh.bad_files.lock().expect("lock").clone();
    let bad_blocks = sh.bad_blocks.load(Ordering::Relaxed);
    let exit = if bad_blocks > 0 { 1 } else { 0 };
    let summary = Summary {
        ok: exit == 0,
        exit,
        pipelined,
        files_per_rank,
        bytes_per_rank,
        per_step_bytes_read: step_read,
        per_step_bytes_written: step_write,
        optimizer_io_s_median: median(&opt_io),
        optimizer_io_s: opt_io,
        optimizer_gb_per_s_median: med_gbps("optimizer"),
        forward_gb_per_s_median: med_gbps("forward"),
        backward_gb_per_s_median: med_gbps("backward"),
        step_io_s_median: median(&step_io),
        files_checked: sh.files_checked.load(Ordering::Relaxed),
        mismatched_blocks: bad_blocks,
        mismatched_files: bad_files.clone(),
        optimizer_cache_share: opt_cache.clone(),
        optimizer_cache_share_median: (!opt_cache.is_empty()).then(|| median(&opt_cache)),
    };
    if let Some(m) = summary.optimizer_cache_share_median {
        println!(
            "cache: optimizer step reads served from memory: median {:.3} ({})",
            m,
            opt_cache
                .iter()
                .map(|s| format!("{s:.3}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    println!(
        "optimizer step I/O: median {:.3} s ({}), {:.3} GB/s; forward {:.3} GB/s, backward {:.3} GB/s; step I/O median {:.3} s",
        summary.optimizer_io_s_median,
        summary
            .optimizer_io_s
            .iter()
            .map(|s| format!("{s:.3}"))
            .collect::<Vec<_>>()
            .join(" "),
        summary.optimizer_gb_per_s_median,
        summary.forward_gb_per_s_median,
        summary.backward_gb_per_s_median,
        summary.step_io_s_median,
    );
    if args.no_verify {
        println!("verify: off");
    } else {
        println!(
            "verify: {} file reads checked, {} mismatched 4 KiB blocks",
            summary.files_checked, summary.mismatched_blocks
        );
    }
    if let Some(p) = &args.json {
        let rep = Report {
            args: &args,
            summary,
            phases,
        };
        let s = serde_json::to_string_pretty(&rep).expect("json");
        if let Err(e) = std::fs::write(p, s) {
            eprintln!("tierfs-replay: writing {}: {e}", p.display());
        }
    }
    if exit != 0 {
        for f in &bad_files {
            eprintln!("tierfs-replay: data mismatch: {f}");
        }
        std::process::exit(exit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_round_trip_and_detects_changes() {
        let size = 3 * 4096 + 2048;
        let mut b = AlignedBuf::new(size);
        fill(b.as_mut_slice(), size, 42, 3);
        assert_eq!(check(b.as_slice(), size, 42, 3), 0);
        assert_eq!(check(b.as_slice(), size, 42, 2), 4);
        assert_eq!(check(b.as_slice(), size, 43, 3), 4);
        b.as_mut_slice()[4096 * 3 + 100] ^= 1;
        assert_eq!(check(b.as_slice(), size, 42, 3), 1);
    }

    #[test]
    fn sizes_and_names_follow_deepspeed() {
        let a = Args::parse_from([
            "x",
            "/d",
            "--subgroups",
            "2",
            "--params-per-subgroup",
            "2",
            "--subgroup-bytes",
            "1MiB",
        ]);
        let (_, _, sgs) = build_rank(&a, 1);
        let s = &sgs[1];
        assert_eq!(
            s.master.path,
            Path::new("/d/zero_stage_3/optimizer/rank1/2_3.tensor.swp")
        );
        assert!(s.exp_avg.path.ends_with("exp_avg-2_3.tensor.swp"));
        assert!(s.exp_avg_sq.path.ends_with("exp_avg_sq-2_3.tensor.swp"));
        assert_eq!(s.master.size, (1 << 20) + 6144);
        assert!(s.master.size % 4096 != 0);
        assert!(s.grads[0]
            .path
            .ends_with("2_3_gradient_0_131840.tensor.swp"));
        assert!(s.grads[1]
            .path
            .ends_with("2_3_gradient_131840_131840.tensor.swp"));
        assert_eq!(s.grads.iter().map(|g| g.size).sum::<u64>(), s.master.size);
        assert_eq!(
            s.params[1].path,
            Path::new("/d/zero_stage_3/bfloat16params/rank1/3_param.tensor.swp")
        );
        // bf16 is half, padded up to 1 KiB
        assert_eq!(s.params[1].size, 264192);
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("32MiB").unwrap(), 32 << 20);
        assert_eq!(parse_size("6KiB").unwrap(), 6144);
        assert_eq!(parse_size("1MB").unwrap(), 1_000_000);
        assert!(parse_size("1XB").is_err());
    }

    #[test]
    fn replays_both_engines_in_a_temp_dir() {
        for engine in ["io_uring", "libaio", "psync"] {
            let d = std::env::temp_dir().join(format!(
                "tierfs-replay-test-{}-{engine}",
                std::process::id()
            ));
            let a = Args::parse_from([
                "x",
                d.to_str().unwrap(),
                "--ranks",
                "2",
                "--subgroups",
                "3",
                "--subgroup-bytes",
                "256KiB",
                "--params-per-subgroup",
                "2",
                "--block",
                "64KiB",
                "--steps",
                "2",
                "--engine",
                engine,
            ]);
            // tmpfs rejects O_DIRECT: only run where the temp dir accepts it
            std::fs::create_dir_all(&d).unwrap();
            let probe = d.join("probe");
            let ok = OpenOptions::new()
                .write(true)
                .create(true)
                .custom_flags(libc::O_DIRECT)
                .open(&probe)
                .is_ok();
            let _ = std::fs::remove_file(&probe);
            if !ok {
                let _ = std::fs::remove_dir_all(&d);
                continue;
            }
            let sh = Shared {
                barrier: Barrier::new(2),
                files_checked: AtomicU64::new(0),
                bad_blocks: AtomicU64::new(0),
                bad_files: Mutex::new(Vec::new()),
                phases: Mutex::new(Vec::new()),
                epoch: Instant::now(),
                trace: None,
                cache: Mutex::new(Vec::new()),
                cache_mark: Mutex::new(0),
            };
            std::thread::scope(|s| {
                for r in 0..2 {
                    let (a, sh) = (&a, &sh);
                    s.spawn(move || run_rank(a, r, sh));
                }
            });
            assert_eq!(sh.bad_blocks.load(Ordering::Relaxed), 0);
            // per rank per step: 6 forward + 6 backward param reads + 3 x 5 optimizer reads
            assert_eq!(
                sh.files_checked.load(Ordering::Relaxed),
                2 * 2 * (6 + 6 + 15)
            );
            let ph = sh.phases.lock().unwrap();
            assert_eq!(ph.len(), 1 + 3 * 2);
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}
