//! Cost of the placement decisions on the create and data paths: choosing a tier for a new
//! whole file, building a stripe pattern, and splitting a 1 MiB request into stripe extents.
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use tierfs::layout::StripeMap;
use tierfs::policy::placement::{shares, stripe_pattern, Placer};

fn bench(c: &mut Criterion) {
    let s = shares(&[3.2e9, 3.2e9, 3.2e9, 3.2e9, 1.1e9]);
    let placer = Placer::new(s.clone());
    let eligible = [true; 5];
    let mut dir = 0u64;
    c.bench_function("whole_file_choose_and_settle", |b| {
        b.iter(|| {
            dir = (dir + 1) % 64;
            let ch = placer.choose(black_box(dir), &eligible, 0).unwrap();
            placer.settle(ch, 32 << 20)
        })
    });
    c.bench_function("stripe_pattern_5_tiers", |b| {
        b.iter(|| stripe_pattern(black_box(&s), &eligible))
    });
    let map = StripeMap::new(1 << 20, stripe_pattern(&s, &eligible));
    let mut off = 0u64;
    c.bench_function("stripe_extents_1MiB_unaligned", |b| {
        b.iter(|| {
            off = (off + 4096 * 37) % (1 << 34);
            map.extents(black_box(off), 1 << 20)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
