//! A tier filling up: a configured capacity stops new files from going there; a real
//! ENOSPC in the middle of a file moves the file to another tier without losing a byte;
//! with no room anywhere the writer gets ENOSPC, never a short write.
mod common;
use common::*;

#[test]
fn capacity_full_tier_gets_no_new_files() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::new(
            vec![
                TierSpec::new("small", "2GB/s").capacity("16MiB"),
                TierSpec::new("big", "1GB/s"),
            ],
            layout,
        );
        let m = s.mount();
        let mut placed = Vec::new();
        for i in 0..20u64 {
            let used0 = settled_used(&m)[0];
            let rel = format!("f{i}");
            write_direct_threads(&m.path(&rel), &pattern(2 * MIB, i), 2, 0);
            let on = s.tiers_holding(&rel);
            if used0 + (MIB as u64) >= 16 << 20 {
                assert_eq!(
                    on,
                    vec![1],
                    "{layout}: f{i} was placed on the full tier (it held {used0} bytes of 16 MiB)"
                );
                assert_eq!(m.file_entry(&rel).unwrap()["layout"], "whole-file");
            }
            placed.push((used0, on));
        }
        let used = settled_used(&m);
        assert!(
            used[0] >= 15 << 20 && used[0] <= 18 << 20,
            "{layout}: the small tier should fill to about its capacity: {used:?} {placed:?}"
        );
        assert_eq!(used.iter().sum::<u64>(), 40 << 20);
        assert!(
            placed.iter().any(|(_, on)| on.contains(&0)),
            "{layout}: the small tier took nothing: {placed:?}"
        );
        for i in 0..20u64 {
            assert!(read_direct_threads(&m.path(&format!("f{i}")), 2) == pattern(2 * MIB, i));
        }
        let real: Vec<u64> = (0..2).map(|i| s.backing_bytes(i)).collect();
        assert_eq!(used, real, "{layout}");
        // stats.json and statfs show the small tier has no room left.
        let st = m.stats_json();
        assert!(
            st["tiers"][0]["free"].as_u64().unwrap() <= MIB as u64,
            "{st}"
        );
        assert_eq!(st["tiers"][0]["capacity"], 16u64 << 20);
        // Freeing space there makes it eligible again.
        for (i, (_, on)) in placed.iter().enumerate() {
            if on.contains(&0) {
                std::fs::remove_file(m.path(&format!("f{i}"))).unwrap();
            }
        }
        write_direct_threads(&m.path("again"), &pattern(2 * MIB, 99), 2, 0);
        assert!(
            s.tiers_holding("again").contains(&0),
            "{layout}: the emptied small tier gets new files again"
        );
        assert_no_stale(&m);
        m.unmount();
    }
}

/// Issue #21 bug 7: `capacity` was checked only when a file was created, so a file made
/// empty (as DeepSpeed makes its swap files) and then written put any amount on the
/// capped tier: 50 MiB of a whole file on a 20 MiB tier, 67 MiB of a striped 100 MB one.
/// A write that would take a tier past its capacity now moves the file, as a full tier's
/// ENOSPC does.
#[test]
fn bug_capacity_is_checked_only_when_a_file_is_created() {
    require!(fuse());
    for (layout, size) in [("whole-file", 50 * MIB), ("stripe", 100_000_000)] {
        let s = Setup::new(
            vec![
                TierSpec::new("capped", "2GB/s").capacity("20MiB"),
                TierSpec::new("big", "1GB/s"),
            ],
            layout,
        );
        let m = s.mount();
        let data = pattern(size, 7);
        // Created empty, then written in 1 MiB requests.
        let f = open_flags(&m.path("f"), libc::O_WRONLY | libc::O_CREAT, 0o600).unwrap();
        assert!(
            s.tiers_holding("f").contains(&0),
            "{layout}: the empty file should start on the capped tier"
        );
        for (i, chunk) in data.chunks(MIB).enumerate() {
            pwrite_exact(&f, chunk, (i * MIB) as u64).unwrap();
        }
        drop(f);
        let used = settled_used(&m);
        let real = s.backing_bytes(0);
        assert!(
            used[0] <= 20 << 20 && real <= 20 << 20,
            "{layout}: the capped tier holds {used:?} (backing {real}) past its 20 MiB"
        );
        assert_eq!(used.iter().sum::<u64>(), size as u64, "{layout}");
        assert!(std::fs::read(m.path("f")).unwrap() == data, "{layout}");
        assert_no_stale(&m);
        m.unmount();
    }
}

/// Issue #21: a tier whose file system has less than the 64 MiB tierfs keeps back
/// (`FREE_RESERVE`) refused every new file while `df` showed free space, and nothing said
/// why. The ENOSPC is now logged with each tier's account, naming the reserve.
#[test]
fn bug_free_reserve_refuses_files_without_saying_why() {
    require!(tmpfs_tier());
    let s = Setup::new(vec![TierSpec::new("small", "2GB/s")], "whole-file");
    let _tmp = Tmpfs::mount(&s.tier_path(0), "48m");
    let m = s.mount();
    let e = std::fs::write(m.path("f"), b"x").unwrap_err();
    assert_eq!(errno(&e), libc::ENOSPC);
    let log = std::fs::read_to_string(s.log_path()).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("ENOSPC") && l.contains("FREE_RESERVE") && l.contains("'small'")),
        "the log does not say why:\n{log}"
    );
    m.unmount();
}

/// The small tier is a tmpfs of 84 MiB (tierfs keeps 64 MiB of a tier's filesystem back
/// from new files, so 20 MiB are placeable). A file placed there is filled by 4 O_DIRECT
/// threads while the tmpfs runs out of space under it: the write that hits ENOSPC moves
/// the file to the other tier and succeeds, and every byte written before is intact.
#[test]
fn enospc_mid_write_moves_the_file() {
    require!(tmpfs_tier());
    let s = Setup::two("whole-file");
    let tmp = Tmpfs::mount(&s.tier_path(0), "84m");
    let m = s.mount();
    std::fs::create_dir(m.path("rank0")).unwrap();
    let rel = "rank0/grow.tensor.swp";
    let data = pattern(32 * MIB, 7);
    let f = open_flags(
        &m.path(rel),
        libc::O_WRONLY | libc::O_CREAT | libc::O_DIRECT,
        0o600,
    )
    .unwrap();
    assert_eq!(
        s.tiers_holding(rel),
        vec![0],
        "the first file should be placed on the faster, tmpfs tier"
    );
    for off in (0..4 * MIB).step_by(MIB) {
        pwrite_exact(&f, &aligned(&data[off..off + MIB]), off as u64).unwrap();
    }
    set_xattr(&m.path(rel), "user.kept", b"across the move").unwrap();
    let filler = tmp.fill();
    // The rest in 4 threads of contiguous chunks, as DeepSpeed's intra-op threads do.
    let rest = &data[4 * MIB..];
    let chunk = rest.len() / 4;
    std::thread::scope(|sc| {
        for t in 0..4 {
            let (f, data) = (&f, &data);
            sc.spawn(move || {
                for k in (0..chunk).step_by(MIB) {
                    let off = 4 * MIB + t * chunk + k;
                    pwrite_exact(f, &aligned(&data[off..off + MIB]), off as u64)
                        .unwrap_or_else(|e| panic!("write at {off} after ENOSPC: {e}"));
                }
            });
        }
    });
    drop(f);
    assert_eq!(
        std::fs::metadata(m.path(rel)).unwrap().len(),
        data.len() as u64
    );
    assert!(
        read_direct_threads(&m.path(rel), 4) == data,
        "data after the move"
    );
    assert_eq!(
        s.tiers_holding(rel),
        vec![1],
        "the file moved to the other tier"
    );
    assert_eq!(m.file_entry(rel).unwrap()["tiers"][0], "slow");
    assert_eq!(
        get_xattr(&m.path(rel), "user.kept").unwrap(),
        b"across the move"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(m.path(rel)).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "mode kept across the move");
    let log = std::fs::read_to_string(s.log_path()).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| (l.contains("moved") || l.contains("moving")) && l.contains("'fast'")),
        "the move is logged:\n{log}"
    );
    let used = settled_used(&m);
    let real: Vec<u64> = (0..2).map(|i| s.backing_bytes(i)).collect();
    assert_eq!(used, real);
    assert_eq!(used, vec![0, data.len() as u64]);
    assert_no_stale(&m);
    // New files avoid the full tier meanwhile.
    write_direct_threads(&m.path("rank0/next"), &pattern(2 * MIB, 8), 2, 0);
    assert_eq!(s.tiers_holding("rank0/next"), vec![1]);
    std::fs::remove_file(filler).unwrap();
    m.unmount();
    // And a remount finds the file where it went.
    let m = s.mount();
    assert!(read_direct_threads(&m.path(rel), 2) == data);
    assert_eq!(s.tiers_holding(rel), vec![1]);
    m.unmount();
    drop(tmp);
}

/// The same for a striped file: when the tmpfs tier fills up under its writers, the file
/// is re-laid out over the tiers that have room (here the other tier alone) with every
/// byte it held, and the writes succeed.
#[test]
fn enospc_mid_write_moves_a_striped_file() {
    require!(tmpfs_tier());
    let s = Setup::two("stripe");
    let tmp = Tmpfs::mount(&s.tier_path(0), "84m");
    let m = s.mount();
    let rel = "striped.tensor.swp";
    let data = pattern(24 * MIB, 11);
    let f = open_flags(
        &m.path(rel),
        libc::O_WRONLY | libc::O_CREAT | libc::O_DIRECT,
        0o600,
    )
    .unwrap();
    for off in (0..4 * MIB).step_by(MIB) {
        pwrite_exact(&f, &aligned(&data[off..off + MIB]), off as u64).unwrap();
    }
    assert_eq!(s.tiers_holding(rel), vec![0, 1], "striped over both tiers");
    let filler = tmp.fill();
    let rest = &data[4 * MIB..];
    let chunk = rest.len() / 4;
    std::thread::scope(|sc| {
        for t in 0..4 {
            let (f, data) = (&f, &data);
            sc.spawn(move || {
                for k in (0..chunk).step_by(MIB) {
                    let off = 4 * MIB + t * chunk + k;
                    pwrite_exact(f, &aligned(&data[off..off + MIB]), off as u64)
                        .unwrap_or_else(|e| panic!("write at {off} after ENOSPC: {e}"));
                }
            });
        }
    });
    drop(f);
    assert!(
        read_direct_threads(&m.path(rel), 4) == data,
        "data after the move"
    );
    assert_eq!(s.tiers_holding(rel), vec![1], "the file left the full tier");
    let used = settled_used(&m);
    assert_eq!(used, vec![0, data.len() as u64]);
    assert_no_stale(&m);
    std::fs::remove_file(filler).unwrap();
    m.unmount();
    let m = s.mount();
    assert!(
        read_direct_threads(&m.path(rel), 2) == data,
        "after a remount"
    );
    m.unmount();
    drop(tmp);
}

/// With no tier able to take the file, the writer gets ENOSPC (never a short write), and
/// the bytes written before are still there.
#[test]
fn enospc_everywhere_fails_loudly() {
    require!(tmpfs_tier());
    let s = Setup::new(
        vec![
            TierSpec::new("small", "2GB/s"),
            TierSpec::new("tiny", "1GB/s").capacity("4MiB"),
        ],
        "whole-file",
    );
    let tmp = Tmpfs::mount(&s.tier_path(0), "84m");
    let m = s.mount();
    let data = pattern(8 * MIB, 9);
    let f = open_flags(
        &m.path("f"),
        libc::O_WRONLY | libc::O_CREAT | libc::O_DIRECT,
        0o600,
    )
    .unwrap();
    assert_eq!(s.tiers_holding("f"), vec![0]);
    for off in (0..4 * MIB).step_by(MIB) {
        pwrite_exact(&f, &aligned(&data[off..off + MIB]), off as u64).unwrap();
    }
    let filler = tmp.fill();
    let e = pwrite_exact(&f, &aligned(&data[4 * MIB..5 * MIB]), 4 * MIB as u64)
        .expect_err("a write with no space on any tier must fail");
    assert_eq!(errno(&e), libc::ENOSPC, "{e}");
    drop(f);
    assert_eq!(
        std::fs::metadata(m.path("f")).unwrap().len(),
        4 * MIB as u64
    );
    assert!(read_direct_threads(&m.path("f"), 2) == data[..4 * MIB]);
    assert_eq!(s.tiers_holding("f"), vec![0]);
    std::fs::remove_file(filler).unwrap();
    // With room again, writing resumes on the same file.
    let f = open_flags(&m.path("f"), libc::O_WRONLY | libc::O_DIRECT, 0).unwrap();
    for off in (4 * MIB..8 * MIB).step_by(MIB) {
        pwrite_exact(&f, &aligned(&data[off..off + MIB]), off as u64).unwrap();
    }
    drop(f);
    assert!(read_direct_threads(&m.path("f"), 2) == data);
    assert_no_stale(&m);
    m.unmount();
    drop(tmp);
}

/// With the host-memory cache: a file's bytes are in memory when its tier fills up, and the
/// write-back (here forced by fsync) gets ENOSPC: the file moves to the other tier with
/// every byte, memory's included, and the fsync succeeds.
#[test]
fn enospc_at_write_back_moves_a_cached_file() {
    require!(tmpfs_tier());
    let mut s = Setup::two("whole-file");
    // No passthrough: placement then counts no staging memory for the slower tier, and
    // the first file lands on the fast one.
    s.extra = "passthrough = \"off\"\n[cache]\nsize = \"64MiB\"\nwriteback_delay = 600.0\n".into();
    let tmp = Tmpfs::mount(&s.tier_path(0), "84m");
    let m = s.mount();
    std::fs::create_dir(m.path("rank0")).unwrap();
    let rel = "rank0/exp_avg-0_0.tensor.swp";
    let data = pattern(12 * MIB, 11);
    write_ds(&m.path(rel), &data, 4, 0);
    assert_eq!(s.tiers_holding(rel), vec![0], "placed on the tmpfs tier");
    assert_eq!(
        std::fs::metadata(s.backing(0, rel)).unwrap().len(),
        0,
        "the bytes should still be only in memory"
    );
    let filler = tmp.fill();
    let f = open_flags(&m.path(rel), libc::O_RDONLY, 0).unwrap();
    f.sync_all().expect("fsync after the tier filled up");
    drop(f);
    assert_eq!(s.tiers_holding(rel), vec![1], "the file moved");
    assert!(
        std::fs::read(s.backing(1, rel)).unwrap() == data,
        "the other tier's copy"
    );
    assert!(read_direct_threads(&m.path(rel), 2) == data);
    std::fs::remove_file(filler).unwrap();
    m.unmount();
    drop(tmp);
}
