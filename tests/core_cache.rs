//! The host-memory cache on the core, without a mount: what a cyclic scan larger than the
//! cache gets from the learned order against LRU, that a cached file is never served behind
//! the cache's back, write-back, and what gradient files save.
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tierfs::config::MountConfig;
use tierfs::vfs::{Ctx, TierFs, ROOT_INO};

const MIB: usize = 1 << 20;
const CTX: Ctx = Ctx { uid: 0, gid: 0 };

fn content(file: usize, version: u32, len: usize) -> Vec<u8> {
    let seed = (file as u32).wrapping_mul(2654435761) ^ version.wrapping_mul(40503);
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed).to_le_bytes()[1])
        .collect()
}

struct Bed {
    _dir: tempfile::TempDir,
    tier: PathBuf,
    fs: Arc<TierFs>,
}

fn bed(cache: &str, layout: &str) -> Bed {
    let d = tempfile::tempdir().unwrap();
    let text = format!(
        "[[tier]]\nname = \"nvme\"\npath = \"{0}/a\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [placement]\nlayout = \"{layout}\"\n[cache]\n{cache}\n",
        d.path().display()
    );
    let config = MountConfig::parse(&text, Path::new("cache.toml")).unwrap();
    config.prepare_tier_dirs().unwrap();
    let tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
    let fs = Arc::new(TierFs::new(&config, tiers).unwrap());
    Bed {
        tier: d.path().join("a").join("data"),
        _dir: d,
        fs,
    }
}

fn write_file(fs: &TierFs, ino: u64, data: &[u8]) {
    let (fh, _) = fs.open(ino, libc::O_WRONLY).unwrap();
    for (i, chunk) in data.chunks(MIB).enumerate() {
        assert_eq!(
            fs.write(fh, (i * MIB) as u64, chunk).unwrap() as usize,
            chunk.len()
        );
    }
    fs.release(fh).unwrap();
}

fn read_file(fs: &TierFs, ino: u64, len: usize) -> Vec<u8> {
    let (fh, _) = fs.open(ino, libc::O_RDONLY).unwrap();
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let chunk = fs
            .read_with(fh, out.len() as u64, MIB as u32, |b| b.to_vec())
            .unwrap();
        assert!(!chunk.is_empty(), "early end of file");
        out.extend(chunk);
    }
    fs.release(fh).unwrap();
    out
}

/// DeepSpeed's optimizer step on one rank: each step reads every file whole in `order`
/// and rewrites it. Returns the share of read bytes served from memory in each step.
fn cyclic(b: &Bed, files: usize, len: usize, steps: usize, alternate: bool) -> Vec<f64> {
    let fs = &b.fs;
    let threads = TierFs::start_cache_threads(fs).unwrap();
    let mut inos = Vec::new();
    for f in 0..files {
        let (a, fh, _) = fs
            .create(
                ROOT_INO,
                OsStr::new(&format!("{f}.tensor.swp")),
                0o600,
                libc::O_WRONLY,
                CTX,
            )
            .unwrap();
        fs.release(fh).unwrap();
        write_file(fs, a.ino, &content(f, 0, len));
        inos.push(a.ino);
    }
    let mut shares = Vec::new();
    for step in 1..=steps as u32 {
        let v0 = fs.cache_view();
        let mut order: Vec<usize> = (0..files).collect();
        if alternate && step % 2 == 0 {
            order.reverse();
        }
        for f in order {
            let got = read_file(fs, inos[f], len);
            assert!(
                got == content(f, step - 1, len),
                "file {f} step {step}: wrong bytes"
            );
            write_file(fs, inos[f], &content(f, step, len));
        }
        let v1 = fs.cache_view();
        let hit = v1.hit_bytes - v0.hit_bytes;
        shares.push(hit as f64 / (files * len) as f64);
    }
    // Everything reaches the tier at unmount, with the last step's bytes.
    fs.shutdown();
    for t in threads {
        t.join().unwrap();
    }
    for (f, _) in inos.iter().enumerate() {
        let on_tier = std::fs::read(b.tier.join(format!("{f}.tensor.swp"))).unwrap();
        assert!(
            on_tier == content(f, steps as u32, len),
            "file {f}: tier copy is not the last version"
        );
    }
    shares
}

#[test]
fn learned_order_keeps_the_head_of_a_cyclic_scan() {
    // 32 files of 2 MiB = 64 MiB a step; the cache holds a quarter.
    let b = bed(
        "size = \"16MiB\"\nprefetch = 0\nwriteback_delay = 0.0\n",
        "whole-file",
    );
    let shares = cyclic(&b, 32, 2 * MIB, 4, false);
    eprintln!("learned, ascending: {shares:?}");
    for s in &shares[1..] {
        assert!(*s >= 0.22, "served from memory per step: {shares:?}");
    }
    let v = b.fs.cache_view();
    assert!(v.used <= 16 << 20, "over budget: {}", v.used);
    assert_eq!(v.orders[0].order.mode, "ascending");
}

#[test]
fn lru_keeps_nothing_useful_on_the_same_scan() {
    let b = bed(
        "size = \"16MiB\"\nprefetch = 0\nwriteback_delay = 0.0\npolicy = \"lru\"\n",
        "whole-file",
    );
    let shares = cyclic(&b, 32, 2 * MIB, 4, false);
    eprintln!("lru, ascending: {shares:?}");
    for s in &shares[1..] {
        assert!(*s < 0.05, "LRU should miss a cyclic scan: {shares:?}");
    }
}

#[test]
fn alternating_order_is_learned_too() {
    let b = bed(
        "size = \"16MiB\"\nprefetch = 0\nwriteback_delay = 0.0\n",
        "stripe",
    );
    let shares = cyclic(&b, 32, 2 * MIB, 5, true);
    eprintln!("learned, alternating: {shares:?}");
    for s in &shares[1..] {
        assert!(*s >= 0.22, "served from memory per step: {shares:?}");
    }
    assert_eq!(b.fs.cache_view().orders[0].order.mode, "alternate");
}

#[test]
fn a_cached_file_is_never_opened_in_passthrough() {
    let b = bed("size = \"16MiB\"\n", "whole-file");
    let fs = &b.fs;
    let (a, fh, info) = fs
        .create(ROOT_INO, OsStr::new("f"), 0o600, libc::O_WRONLY, CTX)
        .unwrap();
    assert!(
        info.passthrough.is_none(),
        "cached at creation (free memory)"
    );
    let data = content(1, 1, 3 * MIB + 1000);
    for (i, chunk) in data.chunks(MIB).enumerate() {
        fs.write(fh, (i * MIB) as u64, chunk).unwrap();
    }
    fs.release(fh).unwrap();
    // Dirty in memory, not on the tier yet.
    let backing = b.tier.join("f");
    assert_eq!(std::fs::metadata(&backing).unwrap().len(), 0);
    assert_eq!(fs.getattr(a.ino).unwrap().size, data.len() as u64);
    let (fh, info) = fs.open(a.ino, libc::O_RDONLY).unwrap();
    assert!(
        info.passthrough.is_none(),
        "passthrough would read the stale tier copy"
    );
    fs.release(fh).unwrap();
    assert!(read_file(fs, a.ino, data.len()) == data);
    // fsync makes it durable on the tier.
    let (fh, _) = fs.open(a.ino, libc::O_RDONLY).unwrap();
    fs.fsync(fh, false).unwrap();
    fs.release(fh).unwrap();
    assert!(std::fs::read(&backing).unwrap() == data);
    // A file the cache does not take (over max_file, a quarter of 16 MiB) may use it.
    let (big, fh, info) = fs
        .create(ROOT_INO, OsStr::new("big"), 0o600, libc::O_WRONLY, CTX)
        .unwrap();
    assert!(info.passthrough.is_none());
    let five = content(2, 1, 5 * MIB);
    for (i, chunk) in five.chunks(MIB).enumerate() {
        fs.write(fh, (i * MIB) as u64, chunk).unwrap();
    }
    fs.release(fh).unwrap();
    fs.control(b"drop big\n").unwrap();
    let (fh, info) = fs.open(big.ino, libc::O_RDONLY).unwrap();
    assert!(
        info.passthrough.is_some(),
        "uncached whole file: passthrough"
    );
    fs.release(fh).unwrap();
    assert!(std::fs::read(b.tier.join("big")).unwrap() == five);
}

#[test]
fn gradient_files_deleted_before_write_back_never_reach_a_tier() {
    let b = bed("size = \"64MiB\"\nwriteback_delay = 0.0\n", "whole-file");
    let fs = &b.fs;
    let threads = TierFs::start_cache_threads(fs).unwrap();
    let name = "0_99_gradient_0_100.tensor.swp";
    let (a, fh, _) = fs
        .create(ROOT_INO, OsStr::new(name), 0o600, libc::O_WRONLY, CTX)
        .unwrap();
    let data = content(7, 1, 4 * MIB);
    for (i, chunk) in data.chunks(MIB).enumerate() {
        fs.write(fh, (i * MIB) as u64, chunk).unwrap();
    }
    fs.release(fh).unwrap();
    // An ordinary file is written back at once (writeback_delay 0) ...
    let (o, fh, _) = fs
        .create(
            ROOT_INO,
            OsStr::new("exp_avg-0_99.tensor.swp"),
            0o600,
            libc::O_WRONLY,
            CTX,
        )
        .unwrap();
    fs.write(fh, 0, &data[..MIB]).unwrap();
    fs.release(fh).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::metadata(b.tier.join("exp_avg-0_99.tensor.swp"))
        .unwrap()
        .len()
        == 0
    {
        assert!(std::time::Instant::now() < deadline, "no write-back");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // ... the gradient stays in memory, is read from there, and is deleted unwritten.
    assert!(read_file(fs, a.ino, data.len()) == data);
    assert_eq!(std::fs::metadata(b.tier.join(name)).unwrap().len(), 0);
    fs.unlink(ROOT_INO, OsStr::new(name)).unwrap();
    fs.forget(a.ino, 1);
    let v = fs.cache_view();
    assert_eq!(v.discarded_dirty_bytes, 4 << 20, "{v:?}");
    assert!(v.files.iter().all(|f| !f.path.contains("gradient")));
    let _ = o;
    fs.shutdown();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn control_commands_are_checked_before_any_runs() {
    let b = bed("size = \"16MiB\"\n", "whole-file");
    let fs = &b.fs;
    let (_, fh, _) = fs
        .create(ROOT_INO, OsStr::new("x"), 0o600, libc::O_WRONLY, CTX)
        .unwrap();
    fs.release(fh).unwrap();
    assert!(fs
        .control(b"order alternate\nstep\nprefetch x\nflush\n")
        .is_ok());
    // A bad second line: the first does nothing either.
    let before = fs.cache_view().orders.len();
    let e = fs.control(b"order ascending sub\nbogus\n").unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    let e = fs.control(b"drop missing-file\n").unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT);
    assert_eq!(fs.cache_view().orders.len(), before);
}

#[test]
fn gradients_stay_in_memory_across_steps() {
    // 8 subgroups: a 2 MiB state file and a 2 MiB gradient each; the cache (16 MiB) holds
    // all gradients, and the learned policy gives them the memory first.
    let b = bed("size = \"16MiB\"\nwriteback_delay = 0.0\n", "stripe");
    let fs = &b.fs;
    let threads = TierFs::start_cache_threads(fs).unwrap();
    let mk = |name: &str| {
        let (a, fh, _) = fs
            .create(ROOT_INO, OsStr::new(name), 0o600, libc::O_WRONLY, CTX)
            .unwrap();
        fs.release(fh).unwrap();
        a.ino
    };
    let state: Vec<u64> = (0..8).map(|i| mk(&format!("{i}.swp"))).collect();
    let grads: Vec<u64> = (0..8)
        .map(|i| mk(&format!("{i}_gradient_0_1.swp")))
        .collect();
    for (i, ino) in state.iter().enumerate() {
        write_file(fs, *ino, &content(i, 0, 2 * MIB));
    }
    for step in 1..=4u32 {
        // backward: gradients, descending
        for i in (0..8).rev() {
            write_file(fs, grads[i], &content(100 + i, step, 2 * MIB));
        }
        // optimizer step: each subgroup's state and gradient read, the state rewritten
        for i in 0..8 {
            assert!(read_file(fs, state[i], 2 * MIB) == content(i, step - 1, 2 * MIB));
            assert!(read_file(fs, grads[i], 2 * MIB) == content(100 + i, step, 2 * MIB));
            write_file(fs, state[i], &content(i, step, 2 * MIB));
        }
    }
    let v = fs.cache_view();
    let cached_grads = v.files.iter().filter(|f| f.gradient).count();
    assert_eq!(cached_grads, 8, "{v:?}");
    // No gradient byte ever reached a tier: their pieces are still empty.
    for i in 0..8 {
        let p = b.tier.join(format!("{i}_gradient_0_1.swp"));
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            0,
            "gradient {i} was written back"
        );
    }
    // Unmount writes them back like anything else.
    fs.shutdown();
    for t in threads {
        t.join().unwrap();
    }
    for i in 0..8 {
        let p = b.tier.join(format!("{i}_gradient_0_1.swp"));
        assert!(std::fs::read(&p).unwrap() == content(100 + i, 4, 2 * MIB));
    }
}

/// Regression (found by the replay, 1 MiB of a 32 MiB swap file wrong after set-up): a
/// write-back racing with writers that grow the file skipped blocks past the size it had
/// read at its start and marked them clean, so they never reached the tier.
#[test]
fn concurrent_growing_writes_and_write_back_lose_nothing() {
    let b = bed("size = \"256MiB\"\nwriteback_delay = 0.0\n", "stripe");
    let fs = &b.fs;
    let threads = TierFs::start_cache_threads(fs).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        // Write-backs as often as possible, racing the writers.
        sc.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                fs.control(b"flush\n").unwrap();
            }
        });
        for f in 0..12usize {
            let name = format!("grow{f}.swp");
            let (a, fh, _) = fs
                .create(ROOT_INO, OsStr::new(&name), 0o600, libc::O_WRONLY, CTX)
                .unwrap();
            let data = content(f, 1, 12 * MIB + 6 * 1024);
            // 6 writers, each every 6th 1 MiB block in order, so the file keeps growing
            // while write-backs run.
            std::thread::scope(|w| {
                for t in 0..6usize {
                    let data = &data;
                    w.spawn(move || {
                        let blocks = data.len().div_ceil(MIB);
                        for i in (0..blocks).filter(|i| i % 6 == t) {
                            let end = ((i + 1) * MIB).min(data.len());
                            fs.write(fh, (i * MIB) as u64, &data[i * MIB..end]).unwrap();
                        }
                    });
                }
            });
            fs.release(fh).unwrap();
            // Written back and dropped: what the tier holds is all there is.
            fs.control(format!("drop {name}\n").as_bytes()).unwrap();
            assert!(
                read_file(fs, a.ino, data.len()) == data,
                "file {f}: bytes lost between the cache and the tier"
            );
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    fs.shutdown();
    for t in threads {
        t.join().unwrap();
    }
}

/// Regressions found by the model test with the cache on: a block first written while the
/// file was small holds a short buffer; after the file grew past it, reads of the rest of
/// that block (a hole) must give zeros, and a truncate must write it all back.
#[test]
fn a_block_written_small_then_grown_past_reads_as_a_hole() {
    for layout in ["whole-file", "stripe"] {
        let b = bed("size = \"64MiB\"\n", layout);
        let fs = &b.fs;
        let mut model = Vec::new();
        let (a, fh, _) = fs
            .create(ROOT_INO, OsStr::new("f"), 0o600, libc::O_RDWR, CTX)
            .unwrap();
        for (off, len, seed) in [(327683usize, 14110usize, 1usize), (1474560, 246, 2)] {
            let d = content(seed, 1, len);
            fs.write(fh, off as u64, &d).unwrap();
            if model.len() < off + len {
                model.resize(off + len, 0);
            }
            model[off..off + len].copy_from_slice(&d);
        }
        fs.release(fh).unwrap();
        assert!(read_file(fs, a.ino, model.len()) == model, "{layout}: read");
        // Truncate (drops the file from the cache, writing it back) and read the tier's copy.
        let size = 3407872usize;
        fs.setattr(
            a.ino,
            tierfs::vfs::SetAttr {
                size: Some(size as u64),
                ..Default::default()
            },
        )
        .unwrap();
        model.resize(size, 0);
        assert!(
            read_file(fs, a.ino, size) == model,
            "{layout}: after truncate"
        );
    }
}

/// With a cache and `passthrough = "direct"`, a whole file on the fastest tier opens in
/// kernel passthrough (and is never prefetched: the kernel serves it with no daemon CPU),
/// while a whole file on a slower tier is staged: no passthrough, so its reads come from
/// what the prefetcher loaded and its writes land in memory first.
/// Two tiers (the first three times as fast), whole files, `passthrough = "direct"` and
/// 16 MiB of staging memory.
fn staged_fs(d: &Path) -> Arc<TierFs> {
    staged_fs_with(d, true)
}

/// [`staged_fs`] whose fast tier accepts 1 KiB-aligned `O_DIRECT` (DeepSpeed's tails) or
/// not, as a 4Kn drive or Lustre would not.
fn staged_fs_with(d: &Path, small_direct_io: bool) -> Arc<TierFs> {
    let text = format!(
        "[[tier]]\nname = \"fast\"\npath = \"{0}/a\"\ncreate = true\nread_bandwidth = \"3GB/s\"\n\
         write_bandwidth = \"2GB/s\"\n[[tier]]\nname = \"slow\"\npath = \"{0}/b\"\ncreate = true\n\
         read_bandwidth = \"1GB/s\"\nwrite_bandwidth = \"1GB/s\"\n[placement]\nlayout = \"whole-file\"\n\
         [mount]\npassthrough = \"direct\"\n[cache]\nsize = \"16MiB\"\n",
        d.display()
    );
    let config = MountConfig::parse(&text, Path::new("staging.toml")).unwrap();
    config.prepare_tier_dirs().unwrap();
    let mut tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
    assert!(
        tiers[0].small_direct_io,
        "the test folder takes 1 KiB O_DIRECT"
    );
    tiers[0].small_direct_io = small_direct_io;
    Arc::new(TierFs::new(&config, tiers).unwrap())
}

#[test]
fn only_the_fastest_tiers_files_open_in_passthrough_with_a_cache() {
    let d = tempfile::tempdir().unwrap();
    let fs = staged_fs(d.path());
    let data = content(7, 1, 3 * MIB);
    let mut on = Vec::new();
    for i in 0..6 {
        let name = format!("f{i}");
        let (a, fh, _) = fs
            .create(ROOT_INO, OsStr::new(&name), 0o600, libc::O_WRONLY, CTX)
            .unwrap();
        for (k, chunk) in data.chunks(MIB).enumerate() {
            fs.write(fh, (k * MIB) as u64, chunk).unwrap();
        }
        fs.release(fh).unwrap();
        // Written back and out of memory, so the next open decides afresh.
        fs.control(format!("drop {name}\n").as_bytes()).unwrap();
        let fast = d.path().join("a/data").join(&name).exists();
        let slow = d.path().join("b/data").join(&name).exists();
        assert!(fast != slow, "{name}: a whole file is on one tier");
        on.push((a.ino, name, fast));
    }
    assert!(
        on.iter().any(|f| f.2) && on.iter().any(|f| !f.2),
        "both tiers used: {on:?}"
    );
    for (ino, name, fast) in &on {
        let (fh, info) = fs.open(*ino, libc::O_RDONLY | libc::O_DIRECT).unwrap();
        assert_eq!(
            info.passthrough.is_some(),
            *fast,
            "{name}: passthrough exactly for the fastest tier's files"
        );
        fs.release(fh).unwrap();
    }
    // Asked prefetches: the slow tier's file is loaded, the fast tier's left to the kernel.
    let slow = on.iter().find(|f| !f.2).unwrap().0;
    let fast = on.iter().find(|f| f.2).unwrap().0;
    let before = fs.cache_view().prefetch_files;
    fs.prefetch(fast, true).unwrap();
    assert_eq!(
        fs.cache_view().prefetch_files,
        before,
        "the fast tier's file was prefetched"
    );
    fs.prefetch(slow, true).unwrap();
    assert_eq!(
        fs.cache_view().prefetch_files,
        before + 1,
        "the slow tier's file was not prefetched"
    );
    assert!(read_file(&fs, slow, data.len()) == data);
    assert!(read_file(&fs, fast, data.len()) == data);
}

/// A gradient file is held in memory even on the fastest tier, whose other swap files the
/// kernel serves: DeepSpeed writes it in the backward pass and reads it once in the
/// optimizer step, so kept in memory it costs its tier neither the write nor the read.
/// Not at its creation (its size is not known yet, so its memory could not be reserved
/// whole) and not at a read of it uncached (it would only be copied in by the daemon).
#[test]
fn gradient_files_on_the_fastest_tier_are_staged_not_passed_through() {
    let d = tempfile::tempdir().unwrap();
    let fs = staged_fs(d.path());
    let v1 = content(3, 1, 2 * MIB);
    let v2 = content(3, 2, 2 * MIB);
    let wdirect = libc::O_WRONLY | libc::O_DIRECT;
    let rdirect = libc::O_RDONLY | libc::O_DIRECT;
    let write = |ino: u64, data: &[u8], passthrough: bool| {
        let (fh, info) = fs.open(ino, wdirect).unwrap();
        assert_eq!(
            info.passthrough.is_some(),
            passthrough,
            "write open of {ino}"
        );
        for (k, chunk) in data.chunks(MIB).enumerate() {
            fs.write(fh, (k * MIB) as u64, chunk).unwrap();
        }
        fs.release(fh).unwrap();
    };
    let mut on_fast = 0;
    for i in 0..20 {
        let name = format!("{i}_gradient_0_524288.tensor.swp");
        let (a, fh, info) = fs
            .create(ROOT_INO, OsStr::new(&name), 0o600, wdirect, CTX)
            .unwrap();
        fs.release(fh).unwrap();
        let fast = d.path().join("a/data").join(&name);
        if !fast.exists() {
            continue;
        }
        on_fast += 1;
        assert!(
            info.passthrough.is_some(),
            "{name}: created, not in passthrough"
        );
        // The first step: the kernel writes it, and reads it back.
        write(a.ino, &v1, true);
        let (fh, info) = fs.open(a.ino, rdirect).unwrap();
        assert!(
            info.passthrough.is_some(),
            "{name}: uncached read not in passthrough"
        );
        fs.release(fh).unwrap();
        assert_eq!(std::fs::read(&fast).unwrap(), v1);
        // The next step: its size is known, it is written to memory and read from there.
        write(a.ino, &v2, false);
        let (fh, info) = fs.open(a.ino, rdirect).unwrap();
        assert!(info.passthrough.is_none(), "{name}: read in passthrough");
        fs.release(fh).unwrap();
        assert!(read_file(&fs, a.ino, v2.len()) == v2);
        assert_eq!(
            std::fs::read(&fast).unwrap(),
            v1,
            "{name}: the next step's bytes reached the fast tier"
        );
        // Out of memory again, so the next one finds room.
        fs.control(format!("drop {name}\n").as_bytes()).unwrap();
    }
    assert!(on_fast > 0, "no gradient file was placed on the fast tier");
    // Another swap file on the fast tier still goes to the kernel.
    let mut others_on_fast = 0;
    for i in 0..20 {
        let name = format!("{i}.tensor.swp");
        let (_, fh, info) = fs
            .create(ROOT_INO, OsStr::new(&name), 0o600, wdirect, CTX)
            .unwrap();
        fs.release(fh).unwrap();
        if d.path().join("a/data").join(&name).exists() {
            others_on_fast += 1;
            assert!(info.passthrough.is_some(), "{name}: not in passthrough");
        }
    }
    assert!(
        others_on_fast > 0,
        "no other swap file was placed on the fast tier"
    );
}

/// Where the kernel cannot serve DeepSpeed's opens of the fast tier (no 1 KiB-aligned
/// `O_DIRECT`), the daemon serves its gradient files, so they are ranked as any file the
/// daemon serves, not held spare on memory nobody else wants.
#[test]
fn a_gradient_the_kernel_cannot_serve_is_ranked_not_spare() {
    let d = tempfile::tempdir().unwrap();
    let fs = staged_fs_with(d.path(), false);
    let data = content(4, 1, 2 * MIB);
    let (ino, _) = fast_gradients(&fs, d.path(), 1, &data)[0].clone();
    let (fh, info) = fs.open(ino, libc::O_WRONLY | libc::O_DIRECT).unwrap();
    assert!(info.passthrough.is_none(), "opened in passthrough");
    fs.release(fh).unwrap();
    let v = fs.cache_view();
    let f = v
        .files
        .iter()
        .find(|f| f.path.contains("_gradient_") && f.size == data.len() as u64)
        .unwrap_or_else(|| panic!("the gradient is not in memory: {v:?}"));
    assert_eq!(f.next_use, Some(0), "held spare, not ranked first: {f:?}");
}

/// Creates `count` gradient files placed on the fast tier of a [`staged_fs`] (and no
/// others), each written once (so its size is known) with `data`; returns their inodes
/// and tier paths.
fn fast_gradients(fs: &TierFs, d: &Path, count: usize, data: &[u8]) -> Vec<(u64, PathBuf)> {
    let mut out = Vec::new();
    for i in 0..60 {
        let name = format!("{i}_gradient_0_524288.tensor.swp");
        let (a, fh, _) = fs
            .create(ROOT_INO, OsStr::new(&name), 0o600, libc::O_WRONLY, CTX)
            .unwrap();
        fs.release(fh).unwrap();
        let path = d.join("a/data").join(&name);
        if path.exists() {
            write_file(fs, a.ino, data);
            out.push((a.ino, path));
        } else {
            // Placed on the slower tier: written, then out of memory.
            write_file(fs, a.ino, data);
            fs.control(format!("drop {name}\n").as_bytes()).unwrap();
        }
        if out.len() == count {
            return out;
        }
    }
    panic!("the fast tier got {} gradient files of 60", out.len());
}

/// When memory is short for a file to load, the writer writes back as many dirty spare
/// gradients as memory was short, the least recently used first, not every one of them:
/// each written back costs its tier the write the spare rule is there to save.
#[test]
fn a_refused_load_writes_back_only_the_memory_it_lacked() {
    let d = tempfile::tempdir().unwrap();
    let fs = staged_fs(d.path()); // 16 MiB of staging
    let threads = TierFs::start_cache_threads(&fs).unwrap();
    // A 4 MiB file of the slower tier, on its tier and out of memory.
    let big = content(9, 1, 4 * MIB);
    let mut slow = None;
    for i in 0..40 {
        let name = format!("{i}.tensor.swp");
        let (a, fh, _) = fs
            .create(ROOT_INO, OsStr::new(&name), 0o600, libc::O_WRONLY, CTX)
            .unwrap();
        fs.release(fh).unwrap();
        if d.path().join("b/data").join(&name).exists() {
            write_file(&fs, a.ino, &big);
            fs.control(format!("drop {name}\n").as_bytes()).unwrap();
            slow = Some(a.ino);
            break;
        }
    }
    let slow = slow.expect("a file on the slower tier");
    let v1 = content(8, 1, 3 * MIB);
    let v2 = content(8, 2, 3 * MIB);
    let grads = fast_gradients(&fs, d.path(), 5, &v1);
    // The next step: all five in memory, dirty, 15 MiB of the 16.
    for (ino, _) in &grads {
        write_file(&fs, *ino, &v2);
    }
    let dirty = || {
        fs.cache_view()
            .files
            .iter()
            .filter(|f| f.dirty_blocks > 0)
            .count()
    };
    let v = fs.cache_view();
    assert_eq!(v.used, 15 * MIB as u64, "{v:?}");
    assert_eq!(dirty(), 5, "{v:?}");

    // The slower tier's file asked to be loaded: 3 MiB short.
    fs.prefetch(slow, true).unwrap();
    let t0 = std::time::Instant::now();
    while dirty() == 5 && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Give the writer time to go on, were it to write back more than asked.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let v = fs.cache_view();
    assert_eq!(dirty(), 4, "one 3 MiB gradient covers 3 MiB short: {v:?}");
    // The one written back is the least recently used: the first written.
    assert_eq!(std::fs::read(&grads[0].1).unwrap(), v2);
    for (_, path) in &grads[1..] {
        assert_eq!(std::fs::read(path).unwrap(), v1, "{}", path.display());
    }
    for (ino, _) in &grads {
        assert!(read_file(&fs, *ino, v2.len()) == v2);
    }
    assert!(read_file(&fs, slow, big.len()) == big);
    fs.shutdown();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_spare_gradient_grows_only_into_memory_no_ranked_file_wants() {
    let d = tempfile::tempdir().unwrap();
    let fs = staged_fs(d.path()); // 16 MiB of staging, files up to 4 MiB
                                  // A gradient on the tier the kernel serves, written once at 1 MiB (the first step).
    let small = content(6, 1, MIB);
    let (spare, _) = fast_gradients(&fs, d.path(), 1, &small)[0].clone();
    fs.control(b"flush\n").unwrap();
    let data = content(5, 1, 3 * MIB);
    // Five of the slower tier's files, 15 MiB in memory, read in a cycle so that each has a
    // rank (its next use) that a spare file must not take memory from.
    let mut slow = Vec::new();
    for i in 0..40 {
        let name = format!("{i}.tensor.swp");
        let (a, fh, _) = fs
            .create(ROOT_INO, OsStr::new(&name), 0o600, libc::O_WRONLY, CTX)
            .unwrap();
        fs.release(fh).unwrap();
        if d.path().join("b/data").join(&name).exists() {
            write_file(&fs, a.ino, &data);
            slow.push(a.ino);
        }
        if slow.len() == 5 {
            break;
        }
    }
    assert_eq!(slow.len(), 5, "the slower tier got five files of 40");
    fs.control(b"flush\n").unwrap();
    // Two passes: the first is what the order learns, the second walks it.
    for ino in slow.iter().chain(&slow) {
        assert!(read_file(&fs, *ino, data.len()) == data);
    }
    let v = fs.cache_view();
    assert_eq!(
        v.used,
        15 * MIB as u64,
        "the five files fill staging: {v:?}"
    );
    assert!(
        v.files
            .iter()
            .all(|f| f.next_use.is_some() && f.dirty_blocks == 0),
        "{:?}",
        v.files
    );

    // The next step writes it larger than the 1 MiB left free.
    let admitted = v.admissions;
    let grad = content(6, 2, 4 * MIB);
    write_file(&fs, spare, &grad);
    let v = fs.cache_view();
    assert_eq!(
        v.admissions,
        admitted + 1,
        "the gradient was not held spare: {v:?}"
    );
    assert_eq!(
        v.evictions, 0,
        "a spare file took a ranked file's memory: {v:?}"
    );
    assert_eq!(
        v.files.iter().filter(|f| f.next_use.is_some()).count(),
        5,
        "the ranked files stay: {v:?}"
    );
    assert!(read_file(&fs, spare, grad.len()) == grad);
}
