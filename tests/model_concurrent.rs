//! Concurrent model test through a real mount: several threads run random operations at
//! once, part of them on files and names all threads share, and every result is checked
//! against what some sequential order of the operations allows.
//!
//! Each thread has three kinds of work (the shares are stated in [`SHARES`]):
//!
//! - Its own folder `p<T>/` (40 %): the sequential model of `tests/model.rs` — each
//!   operation runs on the mount and on a plain reference folder, and results, errnos,
//!   bytes, sizes and link counts must agree. Only this thread touches that folder, so the
//!   reference is exact: create/open/close, pwrite and pread at unaligned offsets across
//!   64 KiB stripe units, truncate and ftruncate, rename, unlink (also of open files), hard
//!   link, mkdir, rmdir, fsync, stat and fstat.
//! - Shared data files `d/f<K>` (35 %), each with a hard link `d/f<K>.a`: writes of whole
//!   4 KiB blocks (1, 2-4, or 8-20 at once, across stripe units), reads, truncates that
//!   cut and extend (block multiples), fsync, and unlinking and linking the second name
//!   again while others do I/O through it. A thread opens through either name, buffered or
//!   O_DIRECT, and keeps its handle for a while. Every written block carries a stamp: the
//!   file, the block's index, the write's identity (thread and sequence number) and a
//!   payload derived from them, so a read sees either zeros or one write's whole block,
//!   or, only while a write or truncate of that block runs, a torn mix (Linux makes no
//!   read atomic against a write of the same page, on ext4 as through FUSE); a torn block
//!   with nothing of it in flight is a mismatch. Every write, truncate and read records when it began
//!   and ended; [`linearize`] then checks each block like an atomic register: each read
//!   saw a value some order allows (not stale, not from the future, not lost), and at the
//!   end each block holds a write no other write or truncate of it followed, or zeros
//!   after a truncate that followed them; the final size is one some order gives.
//! - A shared folder `s/` of a few names (25 %): create (a stamped file written under a
//!   thread's own temporary name, then renamed over a shared name), link, rename, unlink
//!   and read. A read sees a whole stamp of a file some thread created; at the end each
//!   name holds what some order allows, names with the same stamp are one inode, and each
//!   inode's link count is the number of its names.
//!
//! Threads run in rounds; at the end of each (all threads joined) the checkpoint checks
//! everything above, each thread's folder against its reference byte for byte with the
//! same names linked together, and each tier folder for stray pieces (pieces of names that
//! do not exist); then the mount is unmounted and mounted again and all of it must still
//! hold. The stamps' identities carry over: the values seen at a checkpoint are where the
//! next round's history starts.
//!
//! Configurations: whole-file over 2 tiers with kernel passthrough where allowed and with
//! it off, stripe with a 64 KiB unit over 2 and over 3 tiers, stripe with a small
//! host-memory cache (write-back and eviction run during the rounds), and stripe with
//! `adapt` on whose tier bandwidths swap at every remount, so rewrites re-lay out files
//! (migrations) while other threads read and write them.
//!
//! Hard links are in the mix. Until the core supports them (link(2) answers EPERM), the
//! test fails saying so; `TIERFS_MODEL_NO_LINKS=1` leaves link operations out.
//!
//! Size of the run, from the environment (the defaults are a quick CI run):
//! - `TIERFS_MODEL_CONC_THREADS`: threads (default 4)
//! - `TIERFS_MODEL_CONC_OPS`: operations per thread per round (default 150)
//! - `TIERFS_MODEL_CONC_ROUNDS`: rounds, each ending in a checkpoint and a remount
//!   (default 2)
//! - `TIERFS_MODEL_SEED`: RNG seed (default: random; printed either way). It gives every
//!   thread the same sequence of operations again, not the same interleaving.
//!
//! Long run (>= 100,000 operations per configuration):
//! `TIERFS_MODEL_CONC_ROUNDS=25 TIERFS_MODEL_CONC_OPS=1000 cargo test --release --test
//! model_concurrent -- --nocapture --test-threads=1` (build with `--no-run` and start the
//! printed binary to leave cargo's lock free).
//!
//! Each test prints `model_concurrent[CONFIG]: N ops, M mismatches (seed S)` to stderr.
//! Needs FUSE; where it is missing the tests skip (`require!`), and fail under
//! `TIERFS_REQUIRE_ALL=1`.

mod common;
#[path = "common/linearize.rs"]
mod linearize;
#[path = "common/model_ops.rs"]
mod model_ops;

use common::*;
use linearize::{
    could_end_with, could_read, describe, explain_read, size_could_be, Effect, Ev, SizeEv,
};
use model_ops::{env_num, seed, Op as OwnOp};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tierfs::tierio::AlignedBuf;

/// The block of the shared data files: every write and truncate is whole blocks.
const B: usize = 4096;
/// A shared data file's largest size in blocks: three 64 KiB stripe units.
const BLOCKS: u64 = 48;
const DATA_FILES: usize = 4;
/// Names of the shared folder.
const NAMES: usize = 6;
/// The file number in the stamps of the shared folder's files.
const NS_FILE: u64 = 0xffff;
/// Open handles a thread keeps in its own folder.
const MAX_HANDLES: usize = 6;
/// Paths of a thread's own folder: files and folders collide, "d/a" walks through a file
/// when "d" is one.
const PRIV: [&str; 9] = ["a", "b", "c", "d", "e", "d/a", "d/b", "d/c", "e/a"];
/// Weights of the three kinds of work: own folder, shared data files, shared folder.
const SHARES: [u32; 3] = [40, 35, 25];
const MAGIC: u64 = 0x5449_4552_4653_4d43;

// ----- random numbers and stamps -------------------------------------------------------

/// splitmix64: small, seedable, and the same everywhere.
struct Rng(u64);

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn idx(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// An index into `weights`, drawn by weight.
    fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        let mut r = self.below(u64::from(total)) as u32;
        for (i, w) in weights.iter().enumerate() {
            if r < *w {
                return i;
            }
            r -= w;
        }
        unreachable!()
    }
}

fn word(buf: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap())
}

/// Fills one block with the stamp of write `id` to block `block` of file `file`.
fn stamp(buf: &mut [u8], file: u64, block: u64, id: u64) {
    let words = B / 8;
    let mut x = mix(id ^ (file << 48) ^ (block << 32));
    for i in 0..words {
        let v = match i {
            0 => MAGIC ^ file,
            1 => block,
            2 => id,
            _ if i == words - 1 => id,
            _ => {
                x = mix(x.wrapping_add(i as u64));
                x
            }
        };
        buf[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
}

/// Links of a shared file's second name refused with ENOENT while the source existed (see
/// `Op::DLinkAlias`), over the whole test binary.
static LINK_ENOENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How [`decode`]'s answer for a block mixing two stamps begins.
const TORN: &str = "torn block";

/// A block read back: `None` for zeros, the write's identity for a whole stamp of a write
/// to this very block, an error for anything else.
fn decode(buf: &[u8], file: u64, block: u64) -> Result<Option<u64>, String> {
    if buf.iter().all(|b| *b == 0) {
        return Ok(None);
    }
    let id = word(buf, 2);
    if (0..3).all(|i| word(buf, i) == 0) {
        // Zeros at its start, a write's bytes further on: the write (or the zeros of a
        // truncate) landed while the read copied the block.
        return Err(format!(
            "{TORN}: zeros, then a write's bytes (last word {:#x})",
            word(buf, B / 8 - 1)
        ));
    }
    if word(buf, 0) != MAGIC ^ file || word(buf, 1) != block {
        return Err(format!(
            "not a stamp of file {file} block {block}: header {:#x} {:#x} {id:#x}",
            word(buf, 0),
            word(buf, 1)
        ));
    }
    let mut want = vec![0u8; B];
    stamp(&mut want, file, block, id);
    match (0..B / 8).find(|i| word(buf, *i) != word(&want, *i)) {
        None => Ok(Some(id)),
        Some(i) => Err(format!(
            "{TORN}: stamp of write {} but word {i} of {} is {:#x}{}",
            show_id(id),
            B / 8,
            word(buf, i),
            if word(buf, i) == 0 { " (zeros)" } else { "" }
        )),
    }
}

/// A write's identity: thread (from 1) and the thread's sequence number.
fn show_id(id: u64) -> String {
    format!("t{}#{}", (id >> 40).wrapping_sub(1), id & ((1 << 40) - 1))
}

fn show_val(v: Option<u64>) -> String {
    v.map_or_else(|| "zeros".into(), show_id)
}

// ----- operations ----------------------------------------------------------------------

/// How a shared data file is reached: a fresh open or the thread's kept handle, through
/// its second name, with O_DIRECT.
#[derive(Clone, Copy, Debug)]
struct Via {
    reopen: bool,
    alias: bool,
    direct: bool,
}

#[derive(Clone, Debug)]
enum Op {
    /// An operation of the thread's own folder (`path`, `from` and `to` index [`PRIV`]).
    Own(OwnOp),
    DWrite {
        file: usize,
        first: u64,
        n: u64,
        via: Via,
    },
    DRead {
        file: usize,
        first: u64,
        n: u64,
        via: Via,
    },
    DTruncate {
        file: usize,
        blocks: u64,
        by_path: bool,
        via: Via,
    },
    DFsync {
        file: usize,
        via: Via,
    },
    DUnlinkAlias {
        file: usize,
    },
    DLinkAlias {
        file: usize,
    },
    /// With a cache: `.tierfs/control` `drop` (write back and evict) or `flush`.
    DCacheCtl {
        file: usize,
        drop: bool,
    },
    SCreate {
        name: usize,
    },
    SLink {
        from: usize,
        to: usize,
    },
    SRename {
        from: usize,
        to: usize,
    },
    SUnlink {
        name: usize,
    },
    SRead {
        name: usize,
    },
}

/// Offsets in a thread's own files: anywhere in 256 KiB, or next to a 64 KiB boundary.
fn p_offset(r: &mut Rng) -> u64 {
    if r.chance(30) {
        (r.below(5) * 65536).saturating_add_signed(r.below(7) as i64 - 3)
    } else {
        r.below(256 << 10)
    }
}

fn p_len(r: &mut Rng) -> usize {
    match r.below(4) {
        0 => r.idx(300),
        1 | 2 => r.idx(16 << 10),
        _ => r.idx(140 << 10),
    }
}

/// An own-folder operation: buffered I/O at any offset, no O_DIRECT (the reference's ext4
/// refuses unaligned direct I/O; tests/model.rs covers it), fsync not fdatasync.
fn gen_private(r: &mut Rng, links: bool) -> Op {
    let (p, h) = (PRIV.len(), MAX_HANDLES);
    let link_w = if links { 6 } else { 0 };
    let w = [10, 6, 5, 18, 12, 5, 4, 8, 5, link_w, 5, 4, 2, 6, 4];
    Op::Own(match r.weighted(&w) {
        0 => OwnOp::Create {
            path: r.idx(p),
            excl: r.chance(20),
            trunc: r.chance(20),
            write: true,
            direct: false,
        },
        1 => OwnOp::Open {
            path: r.idx(p),
            write: r.chance(70),
            trunc: false,
            direct: false,
        },
        2 => OwnOp::Close { h: r.idx(h) },
        3 => OwnOp::Write {
            h: r.idx(h),
            off: p_offset(r),
            len: p_len(r),
            aligned: false,
            seed: r.next(),
        },
        4 => OwnOp::Read {
            h: r.idx(h),
            off: p_offset(r),
            len: p_len(r),
            aligned: false,
        },
        5 => OwnOp::Truncate {
            path: r.idx(p),
            size: p_offset(r),
        },
        6 => OwnOp::FTruncate {
            h: r.idx(h),
            size: p_offset(r),
        },
        7 => OwnOp::Rename {
            from: r.idx(p),
            to: r.idx(p),
        },
        8 => OwnOp::Unlink { path: r.idx(p) },
        9 => OwnOp::Link {
            from: r.idx(p),
            to: r.idx(p),
        },
        10 => OwnOp::Mkdir { path: r.idx(p) },
        11 => OwnOp::Rmdir { path: r.idx(p) },
        12 => OwnOp::Fsync {
            h: r.idx(h),
            datasync: false,
        },
        13 => OwnOp::Stat { path: r.idx(p) },
        _ => OwnOp::FStat { h: r.idx(h) },
    })
}

fn gen_via(r: &mut Rng, links: bool) -> Via {
    Via {
        reopen: r.chance(25),
        alias: links && r.chance(40),
        direct: r.chance(30),
    }
}

fn gen_data(r: &mut Rng, links: bool, cache: bool) -> Op {
    let link_w = if links { 3 } else { 0 };
    let cache_w = if cache { 3 } else { 0 };
    let file = r.idx(DATA_FILES);
    match r.weighted(&[45, 38, 7, 4, link_w, link_w, cache_w]) {
        0 => {
            let n = match r.below(4) {
                0 | 1 => 1,
                2 => 2 + r.below(3),
                _ => 8 + r.below(13),
            };
            Op::DWrite {
                file,
                first: r.below(BLOCKS - n + 1),
                n,
                via: gen_via(r, links),
            }
        }
        1 => {
            let n = 1 + r.below(BLOCKS);
            Op::DRead {
                file,
                first: r.below(BLOCKS - n + 1),
                n,
                via: gen_via(r, links),
            }
        }
        2 => Op::DTruncate {
            file,
            blocks: r.below(BLOCKS + 1),
            by_path: r.chance(50),
            via: gen_via(r, links),
        },
        3 => Op::DFsync {
            file,
            via: gen_via(r, links),
        },
        4 => Op::DUnlinkAlias { file },
        5 => Op::DLinkAlias { file },
        _ => Op::DCacheCtl {
            file,
            drop: r.chance(50),
        },
    }
}

fn gen_shared_names(r: &mut Rng, links: bool) -> Op {
    let link_w = if links { 20 } else { 0 };
    match r.weighted(&[30, link_w, 20, 15, 15]) {
        0 => Op::SCreate { name: r.idx(NAMES) },
        1 => Op::SLink {
            from: r.idx(NAMES),
            to: r.idx(NAMES),
        },
        2 => Op::SRename {
            from: r.idx(NAMES),
            to: r.idx(NAMES),
        },
        3 => Op::SUnlink { name: r.idx(NAMES) },
        _ => Op::SRead { name: r.idx(NAMES) },
    }
}

/// The next operation and its kind (0 own folder, 1 shared data, 2 shared folder). Every
/// choice is drawn before anything runs, so a seed gives a thread the same operations
/// whatever the others do.
fn gen(r: &mut Rng, links: bool, cache: bool) -> (usize, Op) {
    let kind = r.weighted(&SHARES);
    let op = match kind {
        0 => gen_private(r, links),
        1 => gen_data(r, links, cache),
        _ => gen_shared_names(r, links),
    };
    (kind, op)
}

// ----- the shared context and the logs -------------------------------------------------

struct Ctx {
    mnt: PathBuf,
    refdir: PathBuf,
    links: bool,
    /// The mount has a host-memory cache: `.tierfs/control` commands are in the mix.
    cache: bool,
    t0: Instant,
}

impl Ctx {
    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }
    fn m(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
    fn data(&self, k: usize, alias: bool) -> PathBuf {
        self.m(&format!("d/f{k}{}", if alias { ".a" } else { "" }))
    }
    fn name(&self, i: usize) -> PathBuf {
        self.m(&format!("s/n{i}"))
    }
}

struct DWriteEv {
    file: usize,
    first: u64,
    n: u64,
    id: u64,
    start: u64,
    end: u64,
    /// Through an O_DIRECT descriptor.
    direct: bool,
}

struct DTruncEv {
    file: usize,
    blocks: u64,
    start: u64,
    end: u64,
}

struct DReadEv {
    file: usize,
    block: u64,
    seen: Option<u64>,
    start: u64,
    end: u64,
    thread: usize,
    direct: bool,
    /// The block was a mix of stamps (why): allowed only while a write or truncate of the
    /// block ran, since Linux makes no read atomic against a write of the same page.
    torn: Option<String>,
}

/// What a thread did to shared state in one round.
#[derive(Default)]
struct Log {
    writes: Vec<DWriteEv>,
    truncs: Vec<DTruncEv>,
    reads: Vec<DReadEv>,
    /// Effects on the shared folder's names.
    names: Vec<(usize, Ev)>,
    /// Identities of files created for the shared folder, and those reads there saw.
    created: Vec<u64>,
    seen: Vec<u64>,
}

/// A file of a thread's own folder, open on the mount and in the reference.
struct Pair {
    m: File,
    r: File,
}

struct Worker {
    t: usize,
    rng: Rng,
    seq: u64,
    hs: Vec<Pair>,
    data: Vec<Option<File>>,
    /// Whether each of those handles has O_DIRECT.
    data_direct: Vec<bool>,
    log: Log,
    ops: u64,
    kinds: [u64; 3],
    fails: Vec<String>,
    /// The own folder's model stopped at its first mismatch (everything after would differ).
    desynced: bool,
}

type Res<T> = Result<T, i32>;

fn res<T>(r: std::io::Result<T>) -> Res<T> {
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

fn same<T: PartialEq + std::fmt::Debug>(what: &str, m: Res<T>, r: Res<T>) -> Result<(), String> {
    if m == r {
        return Ok(());
    }
    let show = |x: &Res<T>| match x {
        Ok(v) => {
            let s = format!("Ok({v:?})");
            s.chars().take(160).collect::<String>()
        }
        Err(e) => format!("Err({})", std::io::Error::from_raw_os_error(*e)),
    };
    Err(format!(
        "{what}: the mount gave {}, the reference {}",
        show(&m),
        show(&r)
    ))
}

/// What stat shows in a thread's own folder: folder or file, and a file's size and links.
fn shape(m: std::io::Result<std::fs::Metadata>) -> Res<(bool, u64, u64)> {
    res(m).map(|m| {
        if m.is_dir() {
            (true, 0, 0)
        } else {
            (false, m.len(), m.nlink())
        }
    })
}

fn truncate_path(p: &Path, size: u64) -> std::io::Result<()> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::truncate(c.as_ptr(), size as libc::off_t) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn read_upto(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

fn link_refused(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EPERM)
}

// ----- one thread's operations ---------------------------------------------------------

impl Worker {
    fn new(t: usize, seed: u64) -> Worker {
        Worker {
            t,
            rng: Rng(mix(seed ^ mix(t as u64 + 1))),
            seq: 0,
            hs: Vec::new(),
            data: (0..DATA_FILES).map(|_| None).collect(),
            data_direct: vec![false; DATA_FILES],
            log: Log::default(),
            ops: 0,
            kinds: [0; 3],
            fails: Vec::new(),
            desynced: false,
        }
    }

    fn next_id(&mut self) -> u64 {
        self.seq += 1;
        ((self.t as u64 + 1) << 40) | self.seq
    }

    fn pm(&self, ctx: &Ctx, i: usize) -> PathBuf {
        ctx.m(&format!("p{}/{}", self.t, PRIV[i]))
    }
    fn pr(&self, ctx: &Ctx, i: usize) -> PathBuf {
        ctx.refdir.join(format!("p{}/{}", self.t, PRIV[i]))
    }

    fn round(&mut self, ctx: &Ctx, ops: u64) {
        for _ in 0..ops {
            let (kind, op) = gen(&mut self.rng, ctx.links, ctx.cache);
            let done = match kind {
                0 if self.desynced => Ok(false),
                0 => self.private(ctx, &op),
                1 => self.shared_data(ctx, &op),
                _ => self.shared_names(ctx, &op),
            };
            match done {
                Ok(true) => {
                    self.ops += 1;
                    self.kinds[kind] += 1;
                }
                Ok(false) => {}
                Err(m) => {
                    self.ops += 1;
                    self.kinds[kind] += 1;
                    self.desynced |= kind == 0;
                    self.fails
                        .push(format!("thread {} op {} {op:?}: {m}", self.t, self.ops));
                }
            }
        }
        self.hs.clear();
        self.data.iter_mut().for_each(|d| *d = None);
    }

    fn open_pair(&mut self, ctx: &Ctx, i: usize, write: bool, flags: i32) -> Result<(), String> {
        let o = |p: &Path| {
            OpenOptions::new()
                .read(true)
                .write(write)
                .mode(0o644)
                .custom_flags(flags)
                .open(p)
        };
        let (m, r) = (res(o(&self.pm(ctx, i))), res(o(&self.pr(ctx, i))));
        let what = format!("open {:?} (write {write}, flags {flags:#o})", PRIV[i]);
        match (m, r) {
            (Ok(m), Ok(r)) => {
                if self.hs.len() == MAX_HANDLES {
                    self.hs.remove(0);
                }
                self.hs.push(Pair { m, r });
                Ok(())
            }
            (m, r) => same(&what, m.map(|_| ()), r.map(|_| ())),
        }
    }

    /// One operation of the thread's own folder, on the mount and on the reference.
    fn private(&mut self, ctx: &Ctx, op: &Op) -> Result<bool, String> {
        let k = |hs: &Vec<Pair>, h: usize| (!hs.is_empty()).then(|| h % hs.len());
        let t = self.t;
        let m = |i: usize| ctx.m(&format!("p{t}/{}", PRIV[i]));
        let r = |i: usize| ctx.refdir.join(format!("p{t}/{}", PRIV[i]));
        let Op::Own(op) = op else {
            unreachable!("not an operation of the own folder: {op:?}")
        };
        // What gen_private does not draw (O_DIRECT, aligned I/O, O_TRUNC on a plain open,
        // fallocate, remount) falls to the last arm.
        match *op {
            OwnOp::Create {
                path,
                excl,
                trunc,
                write,
                direct: false,
            } => {
                let mut fl = libc::O_CREAT;
                fl |= if excl { libc::O_EXCL } else { 0 };
                fl |= if trunc { libc::O_TRUNC } else { 0 };
                self.open_pair(ctx, path, write, fl)?;
            }
            OwnOp::Open {
                path,
                write,
                trunc: false,
                direct: false,
            } => self.open_pair(ctx, path, write, 0)?,
            OwnOp::Close { h } => {
                let Some(i) = k(&self.hs, h) else {
                    return Ok(false);
                };
                self.hs.remove(i);
            }
            OwnOp::Write {
                h,
                off,
                len,
                aligned: false,
                seed,
            } => {
                let Some(i) = k(&self.hs, h) else {
                    return Ok(false);
                };
                let data = pattern(len, seed);
                let p = &self.hs[i];
                let what = format!("pwrite {len} at {off}");
                same(
                    &what,
                    res(p.m.write_all_at(&data, off)),
                    res(p.r.write_all_at(&data, off)),
                )?;
            }
            OwnOp::Read {
                h,
                off,
                len,
                aligned: false,
            } => {
                let Some(i) = k(&self.hs, h) else {
                    return Ok(false);
                };
                let p = &self.hs[i];
                let read = |f: &File| {
                    let mut v = vec![0u8; len];
                    read_upto(f, &mut v, off).map(|n| {
                        v.truncate(n);
                        v
                    })
                };
                let (a, b) = (res(read(&p.m)), res(read(&p.r)));
                if let (Ok(a), Ok(b)) = (&a, &b) {
                    if a != b {
                        let at = a.iter().zip(b).position(|(x, y)| x != y);
                        return Err(format!(
                            "pread {len} at {off}: {} bytes where the reference has {}, first difference at {at:?}",
                            a.len(),
                            b.len()
                        ));
                    }
                }
                same(
                    &format!("pread {len} at {off}"),
                    a.map(|_| ()),
                    b.map(|_| ()),
                )?;
            }
            OwnOp::Truncate { path, size } => same(
                &format!("truncate {:?} to {size}", PRIV[path]),
                res(truncate_path(&m(path), size)),
                res(truncate_path(&r(path), size)),
            )?,
            OwnOp::FTruncate { h, size } => {
                let Some(i) = k(&self.hs, h) else {
                    return Ok(false);
                };
                let p = &self.hs[i];
                same(
                    &format!("ftruncate to {size}"),
                    res(p.m.set_len(size)),
                    res(p.r.set_len(size)),
                )?;
            }
            OwnOp::Rename { from, to } => same(
                &format!("rename {:?} -> {:?}", PRIV[from], PRIV[to]),
                res(std::fs::rename(m(from), m(to))),
                res(std::fs::rename(r(from), r(to))),
            )?,
            OwnOp::Unlink { path } => same(
                &format!("unlink {:?}", PRIV[path]),
                res(std::fs::remove_file(m(path))),
                res(std::fs::remove_file(r(path))),
            )?,
            OwnOp::Link { from, to } => same(
                &format!("link {:?} -> {:?}", PRIV[from], PRIV[to]),
                res(std::fs::hard_link(m(from), m(to))),
                res(std::fs::hard_link(r(from), r(to))),
            )?,
            OwnOp::Mkdir { path } => same(
                &format!("mkdir {:?}", PRIV[path]),
                res(std::fs::create_dir(m(path))),
                res(std::fs::create_dir(r(path))),
            )?,
            OwnOp::Rmdir { path } => same(
                &format!("rmdir {:?}", PRIV[path]),
                res(std::fs::remove_dir(m(path))),
                res(std::fs::remove_dir(r(path))),
            )?,
            OwnOp::Fsync { h, datasync } => {
                let Some(i) = k(&self.hs, h) else {
                    return Ok(false);
                };
                let p = &self.hs[i];
                let sync = |f: &File| {
                    if datasync {
                        f.sync_data()
                    } else {
                        f.sync_all()
                    }
                };
                same("fsync", res(sync(&p.m)), res(sync(&p.r)))?;
            }
            OwnOp::Stat { path } => same(
                &format!("stat {:?}", PRIV[path]),
                shape(std::fs::symlink_metadata(m(path))),
                shape(std::fs::symlink_metadata(r(path))),
            )?,
            OwnOp::FStat { h } => {
                let Some(i) = k(&self.hs, h) else {
                    return Ok(false);
                };
                let p = &self.hs[i];
                same("fstat", shape(p.m.metadata()), shape(p.r.metadata()))?;
            }
            _ => unreachable!("not an operation of the own folder: {op:?}"),
        }
        Ok(true)
    }

    /// The thread's handle of shared file `k`, opened afresh when `via` says so or when it
    /// has none; through the second name when asked and it exists (another thread may be
    /// re-linking it), else the first.
    fn data_handle(&mut self, ctx: &Ctx, k: usize, via: Via) -> Result<&File, String> {
        if via.reopen || self.data[k].is_none() {
            self.data[k] = None;
            let open = |p: &Path| {
                let mut o = OpenOptions::new();
                o.read(true).write(true);
                if via.direct {
                    o.custom_flags(libc::O_DIRECT);
                }
                o.open(p)
            };
            let f = match via.alias.then(|| open(&ctx.data(k, true))) {
                Some(Ok(f)) => f,
                Some(Err(e)) if e.kind() != ErrorKind::NotFound => {
                    return Err(format!("open d/f{k}.a: {e}"));
                }
                _ => open(&ctx.data(k, false)).map_err(|e| format!("open d/f{k}: {e}"))?,
            };
            self.data[k] = Some(f);
            self.data_direct[k] = via.direct;
        }
        Ok(self.data[k].as_ref().unwrap())
    }

    fn shared_data(&mut self, ctx: &Ctx, op: &Op) -> Result<bool, String> {
        match *op {
            Op::DWrite {
                file,
                first,
                n,
                via,
            } => {
                let id = self.next_id();
                let mut buf = AlignedBuf::zeroed(n as usize * B);
                for (i, blk) in buf.chunks_mut(B).enumerate() {
                    stamp(blk, file as u64, first + i as u64, id);
                }
                let f = self.data_handle(ctx, file, via)?;
                let start = ctx.now();
                let r = f.write_at(&buf, first * B as u64);
                let end = ctx.now();
                match r {
                    Ok(w) if w == buf.len() => {}
                    Ok(w) => return Err(format!("short write: {w} of {} bytes", buf.len())),
                    Err(e) => return Err(format!("write: {e}")),
                }
                let direct = self.data_direct[file];
                self.log.writes.push(DWriteEv {
                    file,
                    first,
                    n,
                    id,
                    start,
                    end,
                    direct,
                });
            }
            Op::DRead {
                file,
                first,
                n,
                via,
            } => {
                let mut buf = AlignedBuf::zeroed(n as usize * B);
                let f = self.data_handle(ctx, file, via)?;
                let start = ctx.now();
                let got = read_upto(f, &mut buf, first * B as u64);
                let end = ctx.now();
                let got = got.map_err(|e| format!("read: {e}"))?;
                if got % B != 0 {
                    return Err(format!(
                        "read of blocks {first}+{n} returned {got} bytes: part of a block (sizes are block multiples)"
                    ));
                }
                for (i, blk) in buf[..got].chunks(B).enumerate() {
                    let block = first + i as u64;
                    let (seen, torn) = match decode(blk, file as u64, block) {
                        Ok(seen) => (seen, None),
                        // Judged with the history: see `DReadEv::torn`.
                        Err(e) if e.starts_with(TORN) => (None, Some(e)),
                        Err(e) => {
                            return Err(format!("d/f{file} block {block} at [{start}..{end}]: {e}"))
                        }
                    };
                    self.log.reads.push(DReadEv {
                        file,
                        block,
                        seen,
                        start,
                        end,
                        thread: self.t,
                        direct: self.data_direct[file],
                        torn,
                    });
                }
            }
            Op::DTruncate {
                file,
                blocks,
                by_path,
                via,
            } => {
                let size = blocks * B as u64;
                let (start, r) = if by_path {
                    let p = ctx.data(file, via.alias);
                    let start = ctx.now();
                    let mut r = truncate_path(&p, size);
                    if via.alias && r.as_ref().is_err_and(|e| e.kind() == ErrorKind::NotFound) {
                        r = truncate_path(&ctx.data(file, false), size);
                    }
                    (start, r)
                } else {
                    let f = self.data_handle(ctx, file, via)?;
                    let start = ctx.now();
                    (start, f.set_len(size))
                };
                let end = ctx.now();
                r.map_err(|e| format!("truncate to {size}: {e}"))?;
                self.log.truncs.push(DTruncEv {
                    file,
                    blocks,
                    start,
                    end,
                });
            }
            Op::DFsync { file, via } => {
                let f = self.data_handle(ctx, file, via)?;
                f.sync_all().map_err(|e| format!("fsync: {e}"))?;
            }
            Op::DUnlinkAlias { file } => match std::fs::remove_file(ctx.data(file, true)) {
                Err(e) if e.kind() != ErrorKind::NotFound => return Err(format!("unlink: {e}")),
                _ => {}
            },
            Op::DLinkAlias { file } => {
                match std::fs::hard_link(ctx.data(file, false), ctx.data(file, true)) {
                    // Seen once in ~20,000-200,000 operations of the stripe 2-tier
                    // configuration (session 8): link(2) answers ENOENT though its source
                    // exists, and the name is not made. Not explained yet (reported on
                    // issue #18); counted and printed (`link_enoent`), not hidden, and not
                    // a mismatch while it is open.
                    Err(e) if e.kind() == ErrorKind::NotFound && ctx.data(file, false).exists() => {
                        LINK_ENOENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) if e.kind() != ErrorKind::AlreadyExists => {
                        return Err(format!("link: {e}"))
                    }
                    _ => {}
                }
            }
            Op::DCacheCtl { file, drop } => {
                let cmd = format!("{} d/f{file}\n", if drop { "drop" } else { "flush" });
                std::fs::write(ctx.m(".tierfs/control"), cmd)
                    .map_err(|e| format!("control: {e}"))?;
            }
            _ => unreachable!("not an operation of the shared files: {op:?}"),
        }
        Ok(true)
    }

    fn shared_names(&mut self, ctx: &Ctx, op: &Op) -> Result<bool, String> {
        let missing = |e: &std::io::Error| e.kind() == ErrorKind::NotFound;
        match *op {
            Op::SCreate { name } => {
                let id = self.next_id();
                let tmp = ctx.m(&format!("s/.t{}", self.t));
                let mut buf = vec![0u8; B];
                stamp(&mut buf, NS_FILE, 0, id);
                std::fs::write(&tmp, &buf).map_err(|e| format!("write {tmp:?}: {e}"))?;
                self.log.created.push(id);
                let start = ctx.now();
                let r = std::fs::rename(&tmp, ctx.name(name));
                let end = ctx.now();
                if let Err(e) = r {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(format!("rename over s/n{name}: {e}"));
                }
                let effect = Effect::Set(id);
                self.log.names.push((name, Ev { start, end, effect }));
            }
            Op::SLink { from, to } => {
                let start = ctx.now();
                let r = std::fs::hard_link(ctx.name(from), ctx.name(to));
                let end = ctx.now();
                match r {
                    Ok(()) => {
                        let effect = Effect::SetUnknown;
                        self.log.names.push((to, Ev { start, end, effect }));
                    }
                    Err(e) if missing(&e) || e.kind() == ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(format!("link: {e}")),
                }
            }
            Op::SRename { from, to } => {
                let start = ctx.now();
                let r = std::fs::rename(ctx.name(from), ctx.name(to));
                let end = ctx.now();
                match r {
                    Ok(()) if from != to => {
                        // A rename between two names of one inode does nothing (POSIX).
                        let (from_effect, to_effect) = (Effect::Unknown, Effect::SetUnknown);
                        let ev = |effect| Ev { start, end, effect };
                        self.log.names.push((from, ev(from_effect)));
                        self.log.names.push((to, ev(to_effect)));
                    }
                    Ok(()) => {}
                    Err(e) if missing(&e) => {}
                    Err(e) => return Err(format!("rename: {e}")),
                }
            }
            Op::SUnlink { name } => {
                let start = ctx.now();
                let r = std::fs::remove_file(ctx.name(name));
                let end = ctx.now();
                match r {
                    Ok(()) => {
                        let effect = Effect::Clear;
                        self.log.names.push((name, Ev { start, end, effect }));
                    }
                    Err(e) if missing(&e) => {}
                    Err(e) => return Err(format!("unlink: {e}")),
                }
            }
            Op::SRead { name } => {
                let f = match File::open(ctx.name(name)) {
                    Ok(f) => f,
                    Err(e) if missing(&e) => return Ok(true),
                    Err(e) => return Err(format!("open: {e}")),
                };
                let mut buf = vec![0u8; 2 * B];
                let got = read_upto(&f, &mut buf, 0).map_err(|e| format!("read: {e}"))?;
                if got != B {
                    return Err(format!("read {got} bytes of a {B}-byte file"));
                }
                match decode(&buf[..B], NS_FILE, 0)? {
                    Some(id) => self.log.seen.push(id),
                    None => return Err("read zeros where a stamp was written".into()),
                }
                let md = f.metadata().map_err(|e| format!("fstat: {e}"))?;
                if md.len() != B as u64 || md.nlink() > NAMES as u64 {
                    return Err(format!(
                        "fstat: size {} and {} links (a file here has {B} bytes and at most {NAMES} names)",
                        md.len(),
                        md.nlink()
                    ));
                }
            }
            _ => unreachable!("not an operation of the shared folder: {op:?}"),
        }
        Ok(true)
    }
}

// ----- checkpoints ---------------------------------------------------------------------

/// The state a checkpoint saw, where the next round's history begins.
struct Model {
    /// Per shared file: each block's value, and the size in bytes.
    blocks: Vec<Vec<Option<u64>>>,
    sizes: Vec<u64>,
    /// The identity each shared name held (None: absent).
    names: Vec<Option<u64>>,
    /// Every identity created for the shared folder.
    created: HashSet<u64>,
    /// When that state held.
    at: u64,
}

impl Model {
    fn new() -> Model {
        Model {
            blocks: vec![vec![None; BLOCKS as usize]; DATA_FILES],
            sizes: vec![0; DATA_FILES],
            names: vec![None; NAMES],
            created: HashSet::new(),
            at: 0,
        }
    }
}

/// Checks every shared file against the round's history; records what each holds now.
fn check_data(ctx: &Ctx, model: &mut Model, logs: &[&Log], fails: &mut Vec<String>) {
    let at = model.at;
    for k in 0..DATA_FILES {
        let bytes = match std::fs::read(ctx.data(k, false)) {
            Ok(b) => b,
            Err(e) => {
                fails.push(format!("read d/f{k}: {e}"));
                continue;
            }
        };
        let size = bytes.len() as u64;
        if size % B as u64 != 0 || size > BLOCKS * B as u64 {
            fails.push(format!(
                "d/f{k}: size {size} (writes and truncates are whole blocks up to {BLOCKS})"
            ));
            continue;
        }
        let mut fin = vec![None; BLOCKS as usize];
        for (b, blk) in bytes.chunks(B).enumerate() {
            match decode(blk, k as u64, b as u64) {
                Ok(v) => fin[b] = v,
                Err(e) => fails.push(format!("d/f{k} block {b} at the checkpoint: {e}")),
            }
        }
        let writes: Vec<&DWriteEv> = logs
            .iter()
            .flat_map(|l| &l.writes)
            .filter(|w| w.file == k)
            .collect();
        let truncs: Vec<&DTruncEv> = logs
            .iter()
            .flat_map(|l| &l.truncs)
            .filter(|t| t.file == k)
            .collect();
        for b in 0..BLOCKS {
            let mut evs = vec![Ev {
                start: at,
                end: at,
                effect: model.blocks[k][b as usize].map_or(Effect::Clear, Effect::Set),
            }];
            for w in writes
                .iter()
                .filter(|w| (w.first..w.first + w.n).contains(&b))
            {
                evs.push(Ev {
                    start: w.start,
                    end: w.end,
                    effect: Effect::Set(w.id),
                });
            }
            for t in truncs.iter().filter(|t| t.blocks <= b) {
                evs.push(Ev {
                    start: t.start,
                    end: t.end,
                    effect: Effect::Clear,
                });
            }
            let reads = logs
                .iter()
                .flat_map(|l| &l.reads)
                .filter(|r| r.file == k && r.block == b);
            for r in reads {
                if let Some(why) = &r.torn {
                    // A mix is what a read sees while a write fills the same page (Linux
                    // copies into and out of a cached page without a lock between them,
                    // on ext4 as through FUSE); with nothing of the block in flight it is
                    // bytes no write made.
                    let racing = evs[1..]
                        .iter()
                        .any(|e| e.start <= r.end && e.end >= r.start);
                    if !racing {
                        fails.push(format!(
                            "d/f{k} block {b}: a read by thread {} (O_DIRECT {}) at [{}..{}] saw a {why}, with no write or truncate of the block running then",
                            r.thread, r.direct, r.start, r.end
                        ));
                    }
                    continue;
                }
                if !could_read(&evs, r.seen, r.start, r.end) {
                    fails.push(format!(
                        "d/f{k} block {b}: a read by thread {} (O_DIRECT {}) at [{}..{}] saw {}, which no order allows: {}; O_DIRECT writes: {:?}",
                        r.thread, r.direct, r.start, r.end, show_val(r.seen), explain_read(&evs, r.seen, r.start, r.end),
                        writes.iter().filter(|w| w.direct && (w.first..w.first + w.n).contains(&b)).map(|w| show_id(w.id)).collect::<Vec<_>>()
                    ));
                }
            }
            if !could_end_with(&evs, fin[b as usize]) {
                fails.push(format!(
                    "d/f{k} block {b} ends with {} (size {size}), which no order allows; its last events: {}",
                    show_val(fin[b as usize]),
                    describe(&evs, 8)
                ));
            }
        }
        let mut sizes = vec![SizeEv {
            start: at,
            end: at,
            size: model.sizes[k],
            truncate: true,
        }];
        sizes.extend(truncs.iter().map(|t| SizeEv {
            start: t.start,
            end: t.end,
            size: t.blocks * B as u64,
            truncate: true,
        }));
        sizes.extend(writes.iter().map(|w| SizeEv {
            start: w.start,
            end: w.end,
            size: (w.first + w.n) * B as u64,
            truncate: false,
        }));
        if !size_could_be(&sizes, size) {
            let mut last: Vec<&SizeEv> = sizes.iter().collect();
            last.sort_by_key(|e| e.start);
            let last: Vec<String> = last
                .iter()
                .rev()
                .take(8)
                .map(|e| {
                    format!(
                        "[{}..{}] {} {}",
                        e.start,
                        e.end,
                        if e.truncate { "truncate" } else { "write to" },
                        e.size
                    )
                })
                .collect();
            fails.push(format!(
                "d/f{k} ends with size {size}, which no order gives; the last events: {}",
                last.join(", ")
            ));
        }
        model.blocks[k] = fin;
        model.sizes[k] = size;
    }
    check_aliases(ctx, fails);
}

/// `d/` holds the shared files and their second names, which are the same inodes.
fn check_aliases(ctx: &Ctx, fails: &mut Vec<String>) {
    let names = match ls(&ctx.m("d")) {
        Ok(n) => n,
        Err(e) => return fails.push(e),
    };
    for n in &names {
        let known = (0..DATA_FILES).any(|k| *n == format!("f{k}") || *n == format!("f{k}.a"));
        if !known {
            fails.push(format!("d/ holds a stray name {n:?}"));
        }
    }
    for k in 0..DATA_FILES {
        let (Ok(main), alias) = (
            std::fs::metadata(ctx.data(k, false)),
            std::fs::metadata(ctx.data(k, true)),
        ) else {
            fails.push(format!("d/f{k} is gone"));
            continue;
        };
        let names = 1 + u64::from(alias.is_ok());
        if let Ok(a) = &alias {
            if a.ino() != main.ino() {
                fails.push(format!(
                    "d/f{k}.a is inode {}, d/f{k} inode {}",
                    a.ino(),
                    main.ino()
                ));
            }
        }
        if main.nlink() != names {
            fails.push(format!("d/f{k} has {} links, {names} names", main.nlink()));
        }
    }
}

fn ls(dir: &Path) -> Result<BTreeSet<String>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("readdir {dir:?}: {e}"))?;
    let mut out = BTreeSet::new();
    for e in rd {
        let e = e.map_err(|e| format!("readdir {dir:?}: {e}"))?;
        out.insert(e.file_name().to_string_lossy().into_owned());
    }
    Ok(out)
}

/// Checks the shared folder: names, their stamps and inodes, and each name's history.
fn check_names(ctx: &Ctx, model: &mut Model, logs: &[&Log], fails: &mut Vec<String>) {
    for l in logs {
        model.created.extend(&l.created);
    }
    for id in logs.iter().flat_map(|l| &l.seen) {
        if !model.created.contains(id) {
            fails.push(format!(
                "a read in s/ saw {}, which no thread created",
                show_id(*id)
            ));
        }
    }
    match ls(&ctx.m("s")) {
        Ok(names) => {
            for n in names
                .iter()
                .filter(|n| !(0..NAMES).any(|i| **n == format!("n{i}")))
            {
                fails.push(format!("s/ holds a stray name {n:?}"));
            }
        }
        Err(e) => fails.push(e),
    }
    let mut by_ino: HashMap<u64, (BTreeSet<u64>, u64, u64)> = HashMap::new();
    let mut by_id: HashMap<u64, BTreeSet<u64>> = HashMap::new();
    let mut now = vec![None; NAMES];
    for (i, slot) in now.iter_mut().enumerate() {
        let p = ctx.name(i);
        let (md, bytes) = match (std::fs::metadata(&p), std::fs::read(&p)) {
            (Ok(md), Ok(b)) => (md, b),
            (Err(e), _) | (_, Err(e)) if e.kind() == ErrorKind::NotFound => continue,
            (Err(e), _) | (_, Err(e)) => {
                fails.push(format!("s/n{i}: {e}"));
                continue;
            }
        };
        let id = match (bytes.len() == B).then(|| decode(&bytes, NS_FILE, 0)) {
            Some(Ok(Some(id))) => id,
            other => {
                fails.push(format!(
                    "s/n{i}: {} bytes, not a stamp ({other:?})",
                    bytes.len()
                ));
                continue;
            }
        };
        if !model.created.contains(&id) {
            fails.push(format!(
                "s/n{i} holds {}, which no thread created",
                show_id(id)
            ));
        }
        *slot = Some(id);
        let e = by_ino.entry(md.ino()).or_default();
        e.0.insert(id);
        e.1 += 1;
        e.2 = md.nlink();
        by_id.entry(id).or_default().insert(md.ino());
    }
    for (ino, (ids, names, nlink)) in &by_ino {
        if ids.len() != 1 || *names != *nlink {
            fails.push(format!(
                "s/: inode {ino} holds stamps {:?} under {names} names, {nlink} links",
                ids.iter().map(|i| show_id(*i)).collect::<Vec<_>>()
            ));
        }
    }
    for (id, inos) in &by_id {
        if inos.len() != 1 {
            fails.push(format!("s/: stamp {} is in inodes {inos:?}", show_id(*id)));
        }
    }
    for (i, seen) in now.iter().enumerate() {
        let at = model.at;
        let init = model.names[i].map_or(Effect::Clear, Effect::Set);
        let mut evs = vec![Ev {
            start: at,
            end: at,
            effect: init,
        }];
        evs.extend(
            logs.iter()
                .flat_map(|l| &l.names)
                .filter(|(n, _)| *n == i)
                .map(|(_, e)| *e),
        );
        if !could_end_with(&evs, *seen) {
            fails.push(format!(
                "s/n{i} ends with {}, which no order allows; its last events: {}",
                seen.map_or_else(|| "no file".into(), show_id),
                describe(&evs, 8)
            ));
        }
    }
    model.names = now;
}

/// A folder's files and subfolders: path -> (is a folder, size, bytes, the paths linked
/// to the same inode).
type Tree = BTreeMap<PathBuf, (bool, u64, Vec<u8>, Vec<PathBuf>)>;

fn tree(root: &Path, skip_top: &[&str]) -> Result<Tree, String> {
    let mut out = Tree::new();
    let mut inos: HashMap<u64, Vec<PathBuf>> = HashMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for name in ls(&root.join(&rel))? {
            if rel.as_os_str().is_empty() && skip_top.contains(&name.as_str()) {
                continue;
            }
            let p = rel.join(&name);
            let full = root.join(&p);
            let md = std::fs::symlink_metadata(&full).map_err(|e| format!("stat {full:?}: {e}"))?;
            if md.is_dir() {
                stack.push(p.clone());
                out.insert(p, (true, 0, Vec::new(), Vec::new()));
            } else {
                let bytes = std::fs::read(&full).map_err(|e| format!("read {full:?}: {e}"))?;
                inos.entry(md.ino()).or_default().push(p.clone());
                out.insert(p, (false, md.len(), bytes, Vec::new()));
            }
        }
    }
    for mut group in inos.into_values() {
        group.sort();
        for p in &group {
            out.get_mut(p).unwrap().3 = group.clone();
        }
    }
    Ok(out)
}

/// Each thread's folder against its reference: names, kinds, sizes, bytes, links.
fn check_private(ctx: &Ctx, threads: usize, fails: &mut Vec<String>) {
    for t in 0..threads {
        let sub = format!("p{t}");
        let (m, r) = match (tree(&ctx.m(&sub), &[]), tree(&ctx.refdir.join(&sub), &[])) {
            (Ok(m), Ok(r)) => (m, r),
            (Err(e), _) | (_, Err(e)) => return fails.push(e),
        };
        if m.keys().ne(r.keys()) {
            fails.push(format!(
                "{sub}: names {:?}, the reference {:?}",
                m.keys(),
                r.keys()
            ));
            continue;
        }
        for (p, (dir, size, bytes, group)) in &m {
            let (rdir, rsize, rbytes, rgroup) = &r[p];
            if dir != rdir || size != rsize || bytes != rbytes || group != rgroup {
                fails.push(format!(
                    "{sub}/{p:?}: folder {dir} size {size} linked {group:?}; the reference: folder {rdir} size {rsize} linked {rgroup:?}{}",
                    if bytes != rbytes { ", and the bytes differ" } else { "" }
                ));
            }
        }
    }
}

/// Each tier holds only folders and pieces of names the mount shows, and every folder;
/// every file has a piece somewhere.
fn check_tiers(ctx: &Ctx, setup: &Setup, fails: &mut Vec<String>) {
    let mount = match tree(&ctx.mnt, &[".tierfs"]) {
        Ok(t) => t,
        Err(e) => return fails.push(e),
    };
    let mut pieces: BTreeMap<PathBuf, usize> = BTreeMap::new();
    for i in 0..setup.tiers.len() {
        let tier = match tree(&setup.tier_path(i).join("data"), &[]) {
            Ok(t) => t,
            Err(e) => return fails.push(e),
        };
        for (p, (dir, ..)) in &tier {
            match mount.get(p) {
                Some((d, ..)) if d == dir => *pieces.entry(p.clone()).or_default() += 1,
                _ => fails.push(format!(
                    "tier {i} holds a stray {} {p:?}",
                    if *dir { "folder" } else { "piece" }
                )),
            }
        }
        for (p, (dir, ..)) in &mount {
            if *dir && !tier.contains_key(p) {
                fails.push(format!("tier {i} lacks folder {p:?}"));
            }
        }
    }
    for (p, (dir, ..)) in &mount {
        if !dir && !pieces.contains_key(p) {
            fails.push(format!("file {p:?} has no piece on any tier"));
        }
    }
}

fn checkpoint(
    ctx: &Ctx,
    setup: &Setup,
    model: &mut Model,
    logs: &[&Log],
    threads: usize,
) -> Vec<String> {
    let mut fails = Vec::new();
    check_data(ctx, model, logs, &mut fails);
    check_names(ctx, model, logs, &mut fails);
    check_private(ctx, threads, &mut fails);
    check_tiers(ctx, setup, &mut fails);
    model.at = ctx.now();
    fails
}

// ----- mounting and the runs -----------------------------------------------------------

/// One configuration.
struct Spec {
    name: &'static str,
    layout: &'static str,
    /// (tier name, bandwidth)
    tiers: &'static [(&'static str, &'static str)],
    /// Lines added to `[placement]`, `[mount]` and `[cache]`.
    placement: &'static str,
    mount: &'static str,
    cache: &'static str,
    /// The tiers' bandwidths are given in reverse order at every other mount, so with
    /// `adapt` striped files drift from the shares and rewrites re-lay them out.
    swap_bandwidths: bool,
    /// Kernel passthrough must serve some opens (where the kernel offers it).
    passthrough: bool,
}

fn config_text(setup: &Setup, spec: &Spec, swapped: bool) -> String {
    let n = spec.tiers.len();
    let mut s = String::new();
    for (i, (name, bw)) in spec.tiers.iter().enumerate() {
        let bw = if swapped { spec.tiers[n - 1 - i].1 } else { bw };
        s.push_str(&format!(
            "[[tier]]\nname = \"{name}\"\npath = \"{}\"\ncreate = true\n\
             read_bandwidth = \"{bw}\"\nwrite_bandwidth = \"{bw}\"\n",
            setup.tier_path(i).display()
        ));
    }
    s.push_str(&format!(
        "[placement]\nlayout = \"{}\"\nstripe_unit = \"64KiB\"\n{}[mount]\nlog_file = \"{}\"\n{}[cache]\n{}",
        spec.layout,
        spec.placement,
        setup.log_path().display(),
        spec.mount,
        spec.cache
    ));
    s
}

fn mount<'a>(setup: &'a Setup, spec: &Spec, swapped: bool) -> Mount<'a> {
    std::fs::write(setup.config_path(), config_text(setup, spec, swapped)).unwrap();
    std::fs::create_dir_all(setup.mountpoint()).unwrap();
    let out = setup.tierfs(&[
        "mount",
        "--config",
        setup.config_path().to_str().unwrap(),
        setup.mountpoint().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "tierfs mount failed: {}\nlog:\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(setup.log_path()).unwrap_or_default()
    );
    setup.adopt()
}

/// Figures from stats.json summed over a configuration's mounts.
#[derive(Default, Debug)]
struct Figures {
    passthrough_offered: bool,
    passthrough_opens: u64,
    migrations: u64,
    writeback_bytes: u64,
    evictions: u64,
}

impl Figures {
    fn add(&mut self, m: &Mount<'_>) {
        let st = m.stats_json();
        self.passthrough_offered |= st["passthrough"].as_bool().unwrap();
        for t in st["tiers"].as_array().unwrap() {
            self.passthrough_opens += t["passthrough_opens"].as_u64().unwrap();
        }
        self.migrations += st["relayout"]["migrations_started"].as_u64().unwrap();
        if let Some(c) = st["cache"].as_object() {
            self.writeback_bytes += c["writeback_bytes"].as_u64().unwrap();
            self.evictions += c["evictions"].as_u64().unwrap();
        }
    }
}

/// The shared files and folders every round starts from; with links, each shared file's
/// second name (link(2) answering EPERM fails the test here, naming the switch).
fn prepare(ctx: &Ctx, threads: usize) {
    for d in ["d", "s"] {
        std::fs::create_dir(ctx.m(d)).unwrap();
    }
    for t in 0..threads {
        std::fs::create_dir(ctx.m(&format!("p{t}"))).unwrap();
        std::fs::create_dir_all(ctx.refdir.join(format!("p{t}"))).unwrap();
    }
    for k in 0..DATA_FILES {
        File::create(ctx.data(k, false)).unwrap();
        if ctx.links {
            if let Err(e) = std::fs::hard_link(ctx.data(k, false), ctx.data(k, true)) {
                assert!(
                    !link_refused(&e),
                    "link(2) through the mount answered EPERM: hard links are part of this \
                     test (issue #18); set TIERFS_MODEL_NO_LINKS=1 to run it without them"
                );
                panic!("link d/f{k} -> d/f{k}.a: {e}");
            }
        }
    }
}

fn run(spec: Spec) {
    require!(fuse());
    let threads = env_num("TIERFS_MODEL_CONC_THREADS", 4).max(1) as usize;
    let per_round = env_num("TIERFS_MODEL_CONC_OPS", 150);
    let rounds = env_num("TIERFS_MODEL_CONC_ROUNDS", 2).max(1);
    let seed = seed();
    let links = std::env::var_os("TIERFS_MODEL_NO_LINKS").is_none_or(|v| v != "1");
    let tiers = spec
        .tiers
        .iter()
        .map(|(n, bw)| TierSpec::new(n, bw))
        .collect();
    let setup = Setup::new(tiers, spec.layout);
    let ctx = Ctx {
        mnt: setup.mountpoint(),
        refdir: setup.dir.path().join("ref"),
        links,
        cache: !spec.cache.contains("size = \"off\""),
        t0: Instant::now(),
    };
    let started = Instant::now();
    let mut swapped = false;
    let mut m = mount(&setup, &spec, swapped);
    prepare(&ctx, threads);
    let mut model = Model::new();
    model.at = ctx.now();
    let mut workers: Vec<Worker> = (0..threads).map(|t| Worker::new(t, seed)).collect();
    let mut figures = Figures::default();
    let mut fails = Vec::new();
    for round in 0..rounds {
        std::thread::scope(|s| {
            for w in workers.iter_mut() {
                let ctx = &ctx;
                s.spawn(move || w.round(ctx, per_round));
            }
        });
        for w in workers.iter_mut() {
            fails.append(&mut w.fails);
        }
        let logs: Vec<Log> = workers
            .iter_mut()
            .map(|w| std::mem::take(&mut w.log))
            .collect();
        let refs: Vec<&Log> = logs.iter().collect();
        let mut f = checkpoint(&ctx, &setup, &mut model, &refs, threads);
        fails.extend(f.drain(..).map(|e| format!("round {round}: {e}")));
        figures.add(&m);
        m.unmount();
        swapped ^= spec.swap_bandwidths;
        m = mount(&setup, &spec, swapped);
        let mut f = checkpoint(&ctx, &setup, &mut model, &[], threads);
        fails.extend(
            f.drain(..)
                .map(|e| format!("round {round}, after the remount: {e}")),
        );
        if !fails.is_empty() {
            break;
        }
    }
    figures.add(&m);
    m.unmount();
    let ops: u64 = workers.iter().map(|w| w.ops).sum();
    let kinds: Vec<u64> = (0..3)
        .map(|k| workers.iter().map(|w| w.kinds[k]).sum())
        .collect();
    let pct = |k: usize| 100.0 * kinds[k] as f64 / ops.max(1) as f64;
    // Straight to stderr, which the test harness does not capture, so passing runs show it.
    let _ = writeln!(
        std::io::stderr(),
        "model_concurrent[{}]: {ops} ops, {} mismatches (seed {seed}); {threads} threads x {rounds} rounds x {per_round}, \
         own/shared-data/shared-names {:.0}/{:.0}/{:.0} %, links {}, {:.1} s; link_enoent so far {}; {figures:?}",
        spec.name,
        fails.len(),
        pct(0),
        pct(1),
        pct(2),
        if links { "on" } else { "off (TIERFS_MODEL_NO_LINKS=1)" },
        started.elapsed().as_secs_f64(),
        LINK_ENOENT.load(std::sync::atomic::Ordering::Relaxed)
    );
    if !fails.is_empty() {
        let shown: Vec<&String> = fails.iter().take(20).collect();
        panic!(
            "model_concurrent[{}] (TIERFS_MODEL_SEED={seed}): {} mismatches:\n{}",
            spec.name,
            fails.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    if spec.passthrough
        && have(
            figures.passthrough_offered,
            "kernel passthrough is not offered here (root and Linux >= 6.9)",
        )
    {
        assert!(
            figures.passthrough_opens > 0,
            "model_concurrent[{}]: no open went to kernel passthrough",
            spec.name
        );
    }
    if spec.swap_bandwidths {
        assert!(
            figures.migrations > 0,
            "model_concurrent[{}]: no re-layout began",
            spec.name
        );
    }
    if ctx.cache {
        assert!(
            figures.writeback_bytes > 0,
            "model_concurrent[{}]: the cache wrote nothing back: {figures:?}",
            spec.name
        );
    }
}

const TWO: &[(&str, &str)] = &[("fast", "2GB/s"), ("slow", "1GB/s")];
const OFF: &str = "size = \"off\"\n";

#[test]
fn conc_whole_file_2_tiers() {
    run(Spec {
        name: "whole-file, 2 tiers",
        layout: "whole-file",
        tiers: TWO,
        placement: "",
        mount: "",
        cache: OFF,
        swap_bandwidths: false,
        passthrough: true,
    });
}

#[test]
fn conc_whole_file_2_tiers_no_passthrough() {
    run(Spec {
        name: "whole-file, 2 tiers, passthrough off",
        layout: "whole-file",
        tiers: TWO,
        placement: "",
        mount: "passthrough = \"off\"\n",
        cache: OFF,
        swap_bandwidths: false,
        passthrough: false,
    });
}

#[test]
fn conc_stripe_64k_2_tiers() {
    run(Spec {
        name: "stripe 64KiB, 2 tiers",
        layout: "stripe",
        tiers: TWO,
        placement: "",
        mount: "",
        cache: OFF,
        swap_bandwidths: false,
        passthrough: false,
    });
}

#[test]
fn conc_stripe_64k_3_tiers() {
    run(Spec {
        name: "stripe 64KiB, 3 tiers, psync engine",
        layout: "stripe",
        tiers: &[("nvme0", "3GB/s"), ("nvme1", "2GB/s"), ("pfs", "1GB/s")],
        placement: "",
        mount: "engine = \"psync\"\n",
        cache: OFF,
        swap_bandwidths: false,
        passthrough: false,
    });
}

/// A cache smaller than what the threads write, so files move in and out of it and
/// write-back runs while they work.
#[test]
fn conc_stripe_64k_2_tiers_cache() {
    run(Spec {
        name: "stripe 64KiB, 2 tiers, cache",
        layout: "stripe",
        tiers: TWO,
        placement: "",
        mount: "",
        cache: "size = \"16MiB\"\nwriteback_delay = 0.02\nmax_file = \"256KiB\"\n",
        swap_bandwidths: false,
        passthrough: false,
    });
}

/// Bandwidths 1:3 then 3:1 at every other mount with `adapt` on: files written under one
/// set of shares have drifted under the next, and their rewrites re-lay them out
/// (migrations) while other threads read, write and truncate them.
#[test]
fn conc_stripe_64k_2_tiers_relayout() {
    run(Spec {
        name: "stripe 64KiB, 2 tiers, re-layout",
        layout: "stripe",
        tiers: &[("fast", "3GB/s"), ("slow", "1GB/s")],
        placement: "adapt = true\n",
        mount: "",
        cache: OFF,
        swap_bandwidths: true,
        passthrough: false,
    });
}

/// Regression (found by this test: stale reads of the shared files, with reopens in the
/// mix): a buffered read that began after a buffered write() returned saw the bytes from
/// before that write while another thread opened the same file. Every open without
/// `FOPEN_KEEP_CACHE` made the kernel drop the file's clean cached pages; FUSE's
/// write-through marks a written page up to date and unlocks it before it sends the WRITE,
/// so the drop could take the new page while the WRITE was in flight, and a read then
/// fetched the old bytes from the daemon and cached them, where they stayed after the write
/// returned. Every file the daemon serves had it (stripe with io_uring or psync, whole-file
/// with passthrough off, both transports), none in kernel passthrough. Fixed in 400d829
/// (opens keep the cache).
#[test]
fn bug_stale_read_after_write_while_another_opens() {
    require!(fuse());
    let runs: Vec<String> = [("stripe", ""), ("whole-file", "passthrough = \"off\"\n")]
        .iter()
        .map(|(layout, extra)| {
            let (stale, reads) = stale_reads(layout, extra);
            format!("{layout} {extra:?}: {stale} of {reads} reads stale")
        })
        .collect();
    assert!(
        runs.iter().all(|r| r.contains(": 0 of")),
        "reads saw bytes older than a write that had returned before they began: {runs:?}"
    );
}

/// 5 s of one thread rewriting 64 KiB of a file with a counter, one reading it, and one
/// opening and closing it; a read must see at least the counter of the last write that
/// returned before it began. Returns (stale reads, reads).
fn stale_reads(layout: &str, extra: &str) -> (u64, u64) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const LEN: usize = 64 << 10;
    let mut s = Setup::two(layout);
    s.extra = extra.into();
    let m = s.mount();
    let p = m.path("f");
    std::fs::write(&p, vec![0u8; LEN]).unwrap();
    let (published, stop) = (AtomicU64::new(0), AtomicBool::new(false));
    let (stale, reads) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let f = OpenOptions::new().write(true).open(&p).unwrap();
            for i in 1u64.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let buf: Vec<u8> = (0..LEN / 8).flat_map(|_| i.to_le_bytes()).collect();
                f.write_all_at(&buf, 0).unwrap();
                published.store(i, Ordering::SeqCst);
            }
        });
        sc.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                drop(File::open(&p).unwrap());
            }
        });
        sc.spawn(|| {
            let f = File::open(&p).unwrap();
            let mut buf = vec![0u8; LEN];
            while !stop.load(Ordering::Relaxed) {
                let want = published.load(Ordering::SeqCst);
                f.read_exact_at(&mut buf, 0).unwrap();
                reads.fetch_add(1, Ordering::Relaxed);
                if (0..LEN / 8).any(|w| word(&buf, w) < want) {
                    stale.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        std::thread::sleep(std::time::Duration::from_secs(5));
        stop.store(true, Ordering::Relaxed);
    });
    m.unmount();
    (stale.into_inner(), reads.into_inner())
}
