//! I/O engines: how a batch of backing reads and writes reaches the tiers.
//!
//! A FUSE request on a striped file, a cache write-back, or a cache fill can touch several
//! pieces on several tiers at once. The engine runs such a batch: `psync` one request
//! after another with `pread`/`pwrite` (the oracle, and the fallback where io_uring is not
//! allowed), `io_uring` all of them at once on a per-thread ring, so one thread keeps every
//! tier of the batch busy instead of waiting on one while the other idles.
//!
//! Both keep the contract of [`Piece`]: a write moves every byte or fails, a read returns
//! fewer bytes only at the piece's end, O_DIRECT is used for aligned requests and a tier
//! that refuses it falls back to buffered I/O. The io_uring engine submits the common case
//! (one request, full transfer) itself and finishes anything unusual (a short transfer, a
//! refused direct request) through the piece's own `pread`/`pwrite` path, so the two
//! engines cannot disagree on an edge case; `tests` runs one conformance suite on both.

use super::piece::{note_bounce, AlignedBuf, Piece, ALIGN};
use super::sched::Class;
use std::cell::RefCell;
use std::io;
use std::time::Instant;

/// One backing request of a batch.
pub enum Op<'a> {
    Read {
        piece: &'a Piece,
        buf: &'a mut [u8],
        off: u64,
    },
    Write {
        piece: &'a Piece,
        buf: &'a [u8],
        off: u64,
    },
}

impl<'a> Op<'a> {
    pub fn len(&self) -> usize {
        match self {
            Op::Read { buf, .. } => buf.len(),
            Op::Write { buf, .. } => buf.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_write(&self) -> bool {
        matches!(self, Op::Write { .. })
    }

    pub fn piece(&self) -> &'a Piece {
        match self {
            Op::Read { piece, .. } | Op::Write { piece, .. } => piece,
        }
    }

    /// The op done the `pread`/`pwrite` way.
    fn run_sync(&mut self) -> io::Result<usize> {
        match self {
            Op::Read { piece, buf, off } => piece.read_at(buf, *off),
            Op::Write { piece, buf, off } => piece.write_all_at(buf, *off).map(|()| buf.len()),
        }
    }
}

/// Runs batches of backing requests. Results are in the order of the ops: bytes read
/// (fewer only at the piece's end) or written (all of them).
///
/// `class` is what the batch is for, as admitted by [`super::Io::submit`] (the only caller
/// in the daemon): an engine may use it (as an I/O priority, or to count what arrives, as
/// the tests' counting engine does); the two built-in ones treat every class alike.
pub trait Engine: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    fn run(&self, class: Class, ops: &mut [Op<'_>]) -> Vec<io::Result<usize>>;

    /// Whether it runs a batch's ops one after another: each is then counted on its own
    /// (`tierio::Io::submit`), as one waits behind the others of its batch, and that
    /// wait is not its tier's.
    fn sequential(&self) -> bool {
        false
    }

    /// [`Engine::run`], with when each op completed. A tier's busy time ends with its own
    /// requests, not with the batch: a batch holding a request to a tier that queues (a
    /// PFS another job loads) would otherwise count that wait as every other tier's busy
    /// time and drag their estimates down with it. By default, the batch's end for all.
    fn run_timed(&self, class: Class, ops: &mut [Op<'_>]) -> Vec<(io::Result<usize>, Instant)> {
        let r = self.run(class, ops);
        let now = Instant::now();
        r.into_iter().map(|x| (x, now)).collect()
    }
}

/// One request after another.
#[derive(Debug, Default)]
pub struct Psync;

impl Engine for Psync {
    fn name(&self) -> &'static str {
        "psync"
    }

    fn run(&self, _class: Class, ops: &mut [Op<'_>]) -> Vec<io::Result<usize>> {
        ops.iter_mut().map(|op| op.run_sync()).collect()
    }

    fn sequential(&self) -> bool {
        true
    }

    fn run_timed(&self, _class: Class, ops: &mut [Op<'_>]) -> Vec<(io::Result<usize>, Instant)> {
        ops.iter_mut()
            .map(|op| (op.run_sync(), Instant::now()))
            .collect()
    }
}

/// Entries of each thread's ring: more than any batch the daemon builds at once.
const RING_ENTRIES: u32 = 64;

thread_local! {
    static RING: RefCell<Option<io_uring::IoUring>> = const { RefCell::new(None) };
}

/// All of a batch at once, on a ring per thread.
#[derive(Debug, Default)]
pub struct IoUring;

impl IoUring {
    /// The engine, if this kernel and process may use io_uring (containers often forbid it).
    pub fn new() -> io::Result<IoUring> {
        io_uring::IoUring::new(4)?;
        Ok(IoUring)
    }
}

/// How one op was submitted.
struct Sub {
    direct: bool,
    /// Aligned copy of the caller's buffer for a direct request from an unaligned one.
    bounce: Option<AlignedBuf>,
}

impl Engine for IoUring {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn run(&self, class: Class, ops: &mut [Op<'_>]) -> Vec<io::Result<usize>> {
        self.run_ring(class, ops, false)
            .into_iter()
            .map(|(r, _)| r)
            .collect()
    }

    fn run_timed(&self, class: Class, ops: &mut [Op<'_>]) -> Vec<(io::Result<usize>, Instant)> {
        self.run_ring(class, ops, true)
    }
}

impl IoUring {
    /// The batch on this thread's ring; `timed`: each completion reaped as it comes, with
    /// its instant (one wake-up each), else all at once (one wait for the batch, every op
    /// stamped with its end).
    fn run_ring(
        &self,
        class: Class,
        ops: &mut [Op<'_>],
        timed: bool,
    ) -> Vec<(io::Result<usize>, Instant)> {
        if ops.len() <= 1 {
            // Nothing to overlap: a plain syscall costs less than a ring round trip.
            return Psync.run_timed(class, ops);
        }
        let mut out: Vec<Option<(io::Result<usize>, Instant)>> =
            (0..ops.len()).map(|_| None).collect();
        for chunk_start in (0..ops.len()).step_by(RING_ENTRIES as usize) {
            let end = (chunk_start + RING_ENTRIES as usize).min(ops.len());
            let r = RING.with(|cell| {
                let mut cell = cell.borrow_mut();
                if cell.is_none() {
                    *cell = Some(io_uring::IoUring::new(RING_ENTRIES)?);
                }
                let ring = cell.as_mut().expect("just made");
                run_chunk(
                    ring,
                    &mut ops[chunk_start..end],
                    &mut out[chunk_start..end],
                    timed,
                );
                Ok::<(), io::Error>(())
            });
            if r.is_err() {
                // No ring for this thread: the rest the plain way.
                for (op, o) in ops[chunk_start..end]
                    .iter_mut()
                    .zip(&mut out[chunk_start..end])
                {
                    if o.is_none() {
                        *o = Some((op.run_sync(), Instant::now()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|o| o.expect("every op has a result"))
            .collect()
    }
}

/// Submits every op of `ops` (at most the ring's size) and waits for all of them, noting
/// when each completed (`timed`: reaped as they come, else once all are done); ops that
/// cannot or need not go through the ring are done in place.
fn run_chunk(
    ring: &mut io_uring::IoUring,
    ops: &mut [Op<'_>],
    out: &mut [Option<(io::Result<usize>, Instant)>],
    timed: bool,
) {
    use io_uring::{opcode, types};
    let mut subs: Vec<Option<Sub>> = (0..ops.len()).map(|_| None).collect();
    let mut pushed = 0usize;
    for (i, op) in ops.iter_mut().enumerate() {
        let len = op.len();
        let (piece, off, write) = match op {
            Op::Read { piece, off, .. } => (*piece, *off, false),
            Op::Write { piece, off, .. } => (*piece, *off, true),
        };
        if len == 0 || len > u32::MAX as usize {
            out[i] = Some((op.run_sync(), Instant::now()));
            continue;
        }
        if write {
            if let Some(e) = piece.write_refusal() {
                out[i] = Some((Err(e), Instant::now()));
                continue;
            }
        }
        let direct_fd = piece.direct_fd_for(off, len);
        let (fd, direct) = match direct_fd {
            Some(fd) => (fd, true),
            None => (piece.buffered_fd(), false),
        };
        let (ptr, bounce) = match op {
            Op::Read { buf, .. } => {
                if direct && (buf.as_ptr() as usize) % ALIGN != 0 {
                    note_bounce(len);
                    let mut b = AlignedBuf::zeroed(len);
                    (b.as_mut_ptr(), Some(b))
                } else {
                    (buf.as_mut_ptr(), None)
                }
            }
            Op::Write { buf, .. } => {
                if direct && (buf.as_ptr() as usize) % ALIGN != 0 {
                    note_bounce(len);
                    let mut b = AlignedBuf::zeroed(len);
                    b.copy_from_slice(buf);
                    (b.as_mut_ptr(), Some(b))
                } else {
                    (buf.as_ptr() as *mut u8, None)
                }
            }
        };
        let sqe = if write {
            opcode::Write::new(types::Fd(fd), ptr as *const u8, len as u32)
                .offset(off)
                .build()
        } else {
            opcode::Read::new(types::Fd(fd), ptr, len as u32)
                .offset(off)
                .build()
        }
        .user_data(i as u64);
        // SAFETY: the buffer behind `ptr` (the caller's, borrowed for this whole call, or
        // `bounce`, kept in `subs` until the end) and the descriptor (owned by `piece`,
        // borrowed for this call) stay valid until the completion is reaped below, which
        // happens before this function returns.
        let ok = unsafe { ring.submission().push(&sqe).is_ok() };
        if !ok {
            out[i] = Some((op.run_sync(), Instant::now()));
            continue;
        }
        subs[i] = Some(Sub { direct, bounce });
        pushed += 1;
    }
    let mut reaped = 0usize;
    while reaped < pushed {
        match ring.submit_and_wait(if timed { 1 } else { pushed - reaped }) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                ) => {}
            Err(e) => {
                // The kernel took the requests and may still use the buffers: they must
                // not be released before it is done, so keep waiting.
                log::error!("io_uring wait failed ({e}); retrying");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let done: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        let at = Instant::now();
        for (i, res) in done {
            reaped += 1;
            let sub = subs[i].take().expect("one completion per submission");
            let whole = res >= 0 && res as usize == ops[i].len();
            let r = finish(&mut ops[i], sub, res);
            // One finished the `pread`/`pwrite` way completes when that is done.
            out[i] = Some((r, if whole { at } else { Instant::now() }));
        }
    }
}

/// The result of one completed op: a full transfer as is, anything else finished or
/// retried the `pread`/`pwrite` way (which also handles a tier refusing direct I/O).
fn finish(op: &mut Op<'_>, sub: Sub, res: i32) -> io::Result<usize> {
    let len = op.len();
    if res < 0 {
        let e = io::Error::from_raw_os_error(-res);
        let piece = match op {
            Op::Read { piece, .. } | Op::Write { piece, .. } => *piece,
        };
        if sub.direct && piece.refuse_direct(&e) {
            return op.run_sync();
        }
        return match op {
            // A failed direct read is retried buffered, as the piece itself does.
            Op::Read { .. } if sub.direct => op.run_sync(),
            _ => Err(e),
        };
    }
    let n = res as usize;
    match op {
        Op::Read { piece, buf, off } => {
            if let Some(b) = &sub.bounce {
                buf[..n].copy_from_slice(&b[..n]);
            }
            if n == len || n == 0 && !sub.direct {
                return Ok(n);
            }
            let more = piece.read_at(&mut buf[n..], *off + n as u64)?;
            Ok(n + more)
        }
        Op::Write { piece, buf, off } => {
            if n < len {
                piece.write_all_at(&buf[n..], *off + n as u64)?;
            }
            Ok(len)
        }
    }
}

/// The engine for `[mount] engine`: `io_uring` where allowed (else `psync`, logged).
pub fn choose(kind: crate::config::EngineKind) -> Box<dyn Engine> {
    match kind {
        crate::config::EngineKind::Psync => Box::new(Psync),
        crate::config::EngineKind::IoUring => match IoUring::new() {
            Ok(e) => Box::new(e),
            Err(e) => {
                log::warn!("io_uring is not available ({e}); the psync engine is used");
                Box::new(Psync)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    //! One conformance suite for both engines, each checked against plain file contents.
    use super::*;
    use crate::tierio::piece::dir_accepts_direct_io;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
            .collect()
    }

    fn engines() -> Vec<Box<dyn Engine>> {
        let mut v: Vec<Box<dyn Engine>> = vec![Box::new(Psync)];
        match IoUring::new() {
            Ok(e) => v.push(Box::new(e)),
            Err(e) => {
                crate::testutil::have(
                    false,
                    &format!("io_uring is refused here ({e}); only the psync engine is checked"),
                );
            }
        }
        v
    }

    /// Two pieces (as on two tiers), with and without O_DIRECT where the temp dir takes it.
    fn pieces(dir: &std::path::Path, direct: bool) -> (Piece, Piece) {
        (
            Piece::open_new(&dir.join("a"), 0o600, direct).unwrap(),
            Piece::open_new(&dir.join("b"), 0o600, direct).unwrap(),
        )
    }

    fn conformance(engine: &dyn Engine, direct: bool) {
        let dir = tempfile::tempdir().unwrap();
        let direct = direct && dir_accepts_direct_io(dir.path());
        let (a, b) = pieces(dir.path(), direct);
        let name = format!("{} direct={direct}", engine.name());
        // Aligned, unaligned offset, unaligned length, unaligned buffer, tiny, empty.
        let d1 = pattern(1 << 20, 1);
        let d2 = pattern(3 * 4096 + 100, 2);
        let big = AlignedBuf::zeroed(257 << 10);
        let mut big = big;
        big.copy_from_slice(&pattern(257 << 10, 3));
        let mut ops = vec![
            Op::Write {
                piece: &a,
                buf: &d1,
                off: 0,
            },
            Op::Write {
                piece: &b,
                buf: &d2,
                off: 1000,
            },
            Op::Write {
                piece: &a,
                buf: &big,
                off: 2 << 20,
            },
            Op::Write {
                piece: &b,
                buf: &d1[1..4097],
                off: 1 << 20,
            },
            Op::Write {
                piece: &a,
                buf: &[],
                off: 5 << 20,
            },
        ];
        let r = engine.run(Class::DemandWrite, &mut ops);
        let want_w = [d1.len(), d2.len(), big.len(), 4096, 0];
        for (i, (r, w)) in r.into_iter().zip(want_w).enumerate() {
            assert_eq!(r.unwrap(), w, "{name}: write {i}");
        }
        // The files hold what plain reads of them say.
        let fa = std::fs::read(dir.path().join("a")).unwrap();
        let fb = std::fs::read(dir.path().join("b")).unwrap();
        assert_eq!(&fa[..d1.len()], &d1[..], "{name}");
        assert_eq!(&fa[2 << 20..], &big[..], "{name}");
        assert_eq!(&fb[1000..1000 + d2.len()], &d2[..], "{name}");
        assert_eq!(&fb[1 << 20..(1 << 20) + 4096], &d1[1..4097], "{name}");
        assert!(
            fa[d1.len()..2 << 20].iter().all(|x| *x == 0),
            "{name}: hole"
        );

        // Reads: aligned and not, into aligned and unaligned buffers, across the end.
        let mut r1 = AlignedBuf::zeroed(1 << 20);
        let mut r2 = vec![0u8; d2.len() + 1];
        let mut r3 = AlignedBuf::zeroed(512 << 10);
        let mut r4 = vec![0u8; 4096 + 1];
        let mut r5 = AlignedBuf::zeroed(4096);
        let (r2s, r4s) = (&mut r2[1..], &mut r4[1..]);
        let mut ops = vec![
            Op::Read {
                piece: &a,
                buf: &mut r1,
                off: 0,
            },
            Op::Read {
                piece: &b,
                buf: r2s,
                off: 1000,
            },
            Op::Read {
                piece: &a,
                buf: &mut r3,
                off: 2 << 20,
            },
            Op::Read {
                piece: &b,
                buf: r4s,
                off: 1 << 20,
            },
            Op::Read {
                piece: &a,
                buf: &mut r5,
                off: 64 << 20,
            },
        ];
        let got: Vec<usize> = engine
            .run(Class::DemandRead, &mut ops)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got, vec![1 << 20, d2.len(), 257 << 10, 4096, 0], "{name}");
        assert_eq!(&r1[..], &d1[..], "{name}");
        assert_eq!(&r2[1..], &d2[..], "{name}");
        assert_eq!(&r3[..257 << 10], &big[..], "{name}: short read at the end");
        assert_eq!(&r4[1..], &d1[1..4097], "{name}");

        // A write to a piece that refuses writing fails with its errno, the rest of the batch
        // succeeds: a piece whose tier refused writing at open (EROFS, answered before the
        // write is tried) and one whose descriptor the kernel refuses (EBADF from the write
        // itself). Both are read-only descriptors, so this holds as root too.
        let ok_data = pattern(8192, 9);
        for (refusal, want) in [(Some(libc::EROFS), libc::EROFS), (None, libc::EBADF)] {
            let ro_path = dir.path().join(format!("ro-{want}"));
            std::fs::write(&ro_path, b"x").unwrap();
            let ro = Piece::read_only(&ro_path, direct, refusal).unwrap();
            let aligned = {
                let mut b = AlignedBuf::zeroed(ok_data.len());
                b.copy_from_slice(&ok_data);
                b
            };
            let mut ops = vec![
                Op::Write {
                    piece: &ro,
                    buf: &ok_data,
                    off: 0,
                },
                Op::Write {
                    piece: &b,
                    buf: &ok_data,
                    off: 0,
                },
                Op::Write {
                    piece: &ro,
                    buf: &aligned,
                    off: 4096,
                },
            ];
            let r = engine.run(Class::DemandWrite, &mut ops);
            for i in [0, 2] {
                match &r[i] {
                    Err(e) => assert_eq!(e.raw_os_error(), Some(want), "{name}: write {i}: {e}"),
                    Ok(n) => panic!("{name}: write {i} to a read-only piece wrote {n} bytes"),
                }
            }
            assert_eq!(r[1].as_ref().ok(), Some(&ok_data.len()), "{name}");
            assert_eq!(std::fs::read(&ro_path).unwrap(), b"x", "{name}");
            let fb = std::fs::read(dir.path().join("b")).unwrap();
            assert_eq!(&fb[..ok_data.len()], &ok_data[..], "{name}");
        }
    }

    #[test]
    fn engines_conform_buffered_and_direct() {
        for e in engines() {
            conformance(e.as_ref(), false);
            conformance(e.as_ref(), true);
        }
    }

    #[test]
    fn many_ops_more_than_a_ring() {
        for e in engines() {
            let dir = tempfile::tempdir().unwrap();
            let p = Piece::open_new(&dir.path().join("f"), 0o600, false).unwrap();
            let data = pattern(200 * 4096, 5);
            let mut ops: Vec<Op> = data
                .chunks(4096)
                .enumerate()
                .map(|(i, c)| Op::Write {
                    piece: &p,
                    buf: c,
                    off: (i * 4096) as u64,
                })
                .collect();
            assert!(e
                .run(Class::DemandWrite, &mut ops)
                .iter()
                .all(|r| r.is_ok()));
            assert_eq!(
                std::fs::read(dir.path().join("f")).unwrap(),
                data,
                "{}",
                e.name()
            );
            let mut back = vec![0u8; data.len()];
            let mut ops: Vec<Op> = back
                .chunks_mut(4096)
                .enumerate()
                .map(|(i, c)| Op::Read {
                    piece: &p,
                    buf: c,
                    off: (i * 4096) as u64,
                })
                .collect();
            // Read back with each completion's instant (reaped as they come).
            let t0 = Instant::now();
            let r = e.run_timed(Class::DemandRead, &mut ops);
            let t1 = Instant::now();
            assert!(r
                .iter()
                .all(|(r, at)| *r.as_ref().unwrap() == 4096 && (t0..=t1).contains(at)));
            assert_eq!(back, data, "{}", e.name());
        }
    }
}
