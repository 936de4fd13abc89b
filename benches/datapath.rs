//! Costs on the data path: admitting a request through a tier's queue (uncontended, and
//! with a thread per class contending), and a backing piece's full write and read by
//! block size on a temp dir (O_DIRECT where the filesystem takes it, like a tier), and the
//! I/O engines running a batch of requests over two pieces by block size and batch depth.
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tierfs::tierio::piece::dir_accepts_direct_io;
use tierfs::tierio::{AlignedBuf, Class, Engine, IoUring, Op, Piece, Psync, TierQueue};

fn admission(c: &mut Criterion) {
    let q = TierQueue::new(32, false);
    c.bench_function("queue_acquire_release_uncontended", |b| {
        b.iter(|| drop(black_box(q.acquire(Class::DemandWrite, 1))))
    });
    let q = std::sync::Arc::new(TierQueue::new(4, false));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let others: Vec<_> = (0..3)
        .map(|i| {
            let (q, stop) = (q.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    drop(q.acquire(Class::Prefetch, 100 + i));
                }
            })
        })
        .collect();
    c.bench_function("queue_acquire_release_contended", |b| {
        b.iter(|| drop(black_box(q.acquire(Class::DemandRead, 1))))
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in others {
        t.join().unwrap();
    }
}

fn piece_io(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let direct = dir_accepts_direct_io(dir.path());
    let piece = Piece::open_new(&dir.path().join("bench.piece"), 0o600, direct).unwrap();
    let mut g = c.benchmark_group("piece");
    for bs in [64usize << 10, 256 << 10, 1 << 20] {
        let mut buf = AlignedBuf::zeroed(bs);
        buf.fill(7);
        let span = 64u64 << 20;
        let mut off = 0u64;
        g.throughput(Throughput::Bytes(bs as u64));
        g.bench_with_input(BenchmarkId::new("write", bs), &bs, |b, _| {
            b.iter(|| {
                // A piece's I/O is tierio's alone: one op on the psync engine is its
                // write_all_at and nothing more.
                let r = Psync.run(
                    Class::DemandWrite,
                    &mut [Op::Write {
                        piece: &piece,
                        buf: &buf,
                        off,
                    }],
                );
                r[0].as_ref().unwrap();
                off = (off + bs as u64) % span;
            })
        });
        g.bench_with_input(BenchmarkId::new("read", bs), &bs, |b, _| {
            b.iter(|| {
                let mut ops = [Op::Read {
                    piece: &piece,
                    buf: &mut buf,
                    off,
                }];
                let n = *Psync.run(Class::DemandRead, &mut ops)[0].as_ref().unwrap();
                off = (off + bs as u64) % span;
                black_box(n)
            })
        });
    }
    g.finish();
}

/// A batch of `qd` requests of `bs` bytes over two pieces (as on two tiers), per engine.
fn engines(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let direct = dir_accepts_direct_io(dir.path());
    let a = Piece::open_new(&dir.path().join("a"), 0o600, direct).unwrap();
    let b = Piece::open_new(&dir.path().join("b"), 0o600, direct).unwrap();
    let mut list: Vec<Box<dyn Engine>> = vec![Box::new(Psync)];
    if let Ok(e) = IoUring::new() {
        list.push(Box::new(e));
    }
    let mut g = c.benchmark_group("engine");
    for engine in &list {
        for (bs, qd) in [(256usize << 10, 8usize), (1 << 20, 2), (1 << 20, 8)] {
            let mut bufs: Vec<AlignedBuf> = (0..qd).map(|_| AlignedBuf::zeroed(bs)).collect();
            g.throughput(Throughput::Bytes((bs * qd) as u64));
            let id = format!("{}/bs{}k/qd{qd}", engine.name(), bs >> 10);
            g.bench_function(BenchmarkId::new("write", &id), |bch| {
                bch.iter(|| {
                    let mut ops: Vec<Op> = bufs
                        .iter()
                        .enumerate()
                        .map(|(i, buf)| Op::Write {
                            piece: if i % 2 == 0 { &a } else { &b },
                            buf,
                            off: (i / 2 * bs) as u64,
                        })
                        .collect();
                    black_box(engine.run(Class::DemandWrite, &mut ops))
                })
            });
            g.bench_function(BenchmarkId::new("read", &id), |bch| {
                bch.iter(|| {
                    let mut ops: Vec<Op> = bufs
                        .iter_mut()
                        .enumerate()
                        .map(|(i, buf)| Op::Read {
                            piece: if i % 2 == 0 { &a } else { &b },
                            buf,
                            off: (i / 2 * bs) as u64,
                        })
                        .collect();
                    black_box(engine.run(Class::DemandRead, &mut ops))
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, admission, piece_io, engines);
criterion_main!(benches);
