//! Costs on the data path: admitting a request through a tier's queue (uncontended, and
//! with a thread per class contending), and a backing piece's full write and read by
//! block size on a temp dir (O_DIRECT where the filesystem takes it, like a tier).
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tierfs::io::{dir_accepts_direct_io, AlignedBuf, Piece};
use tierfs::sched::{Class, TierQueue};

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
                piece.write_all_at(&buf, off).unwrap();
                off = (off + bs as u64) % span;
            })
        });
        g.bench_with_input(BenchmarkId::new("read", bs), &bs, |b, _| {
            b.iter(|| {
                let n = piece.read_at(&mut buf, off).unwrap();
                off = (off + bs as u64) % span;
                black_box(n)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, admission, piece_io);
criterion_main!(benches);
