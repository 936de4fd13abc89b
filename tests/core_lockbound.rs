//! A long copy holds no lock the namespace needs: while a file's bytes are copied to a new
//! layout for seconds (a lazy migration's commit, an eager move off a full tier), `lookup`
//! and `getattr` of other names answer within [`BOUND`] (issue #16).
//!
//! The tier is throttled by an engine in place of the mount's, not by a slow device: it
//! sleeps [`MS_PER_MIB`] before each MiB written at [`Class::Migration`] and counts it, so
//! the copy lasts about six seconds and the test knows how far it is; demand I/O passes
//! straight through. Each probe's latency is checked only while the copy is between 10 %
//! and 90 % done (a bound on a lock, not a benchmark), and the test insists that enough
//! probes fell in that window and that the copy did last, so it cannot pass vacuously.
//! `getattr` of the file being moved is measured once the window is over and printed, not
//! checked: it may wait for the file's own state.
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tierfs::config::MountConfig;
use tierfs::layout::FileLayout;
use tierfs::tierio::{Class, Engine, Op, Psync};
use tierfs::vfs::{Ctx, TierFs, ROOT_INO};

const MIB: usize = 1 << 20;
/// The file that moves: 64 copies of [`MS_PER_MIB`] make a copy of about six seconds.
const SIZE: usize = 64 * MIB;
const MS_PER_MIB: u64 = 90;
/// What issue #16 allows a `lookup` or `getattr` while a copy runs.
const BOUND: Duration = Duration::from_millis(100);
/// The pause between two rounds of probes.
const PERIOD: Duration = Duration::from_millis(20);
/// The share of the copy during which probes are checked.
const WINDOW: (f64, f64) = (0.10, 0.90);
const CTX: Ctx = Ctx { uid: 0, gid: 0 };

/// How far the migration copies are: bytes written at [`Class::Migration`], and when the
/// first and the last of them were.
#[derive(Debug, Default)]
struct Progress {
    done: AtomicU64,
    first: Mutex<Option<Instant>>,
    last: Mutex<Option<Instant>>,
}

impl Progress {
    fn reset(&self) {
        self.done.store(0, Ordering::SeqCst);
        *self.first.lock().unwrap() = None;
        *self.last.lock().unwrap() = None;
    }

    fn fraction(&self, total: u64) -> f64 {
        self.done.load(Ordering::SeqCst) as f64 / total as f64
    }

    fn span(&self) -> Duration {
        match (*self.first.lock().unwrap(), *self.last.lock().unwrap()) {
            (Some(a), Some(b)) => b - a,
            _ => Duration::ZERO,
        }
    }
}

/// Psync with a slow migration path, and an ENOSPC to inject into the next demand write.
#[derive(Debug)]
struct Throttled {
    progress: Arc<Progress>,
    enospc: Arc<AtomicBool>,
}

impl Engine for Throttled {
    fn name(&self) -> &'static str {
        "throttled"
    }

    fn run(&self, class: Class, ops: &mut [Op<'_>]) -> Vec<std::io::Result<usize>> {
        if class == Class::DemandWrite && self.enospc.swap(false, Ordering::SeqCst) {
            return ops
                .iter()
                .map(|_| Err(std::io::Error::from_raw_os_error(libc::ENOSPC)))
                .collect();
        }
        if class == Class::Migration {
            let p = &self.progress;
            p.first.lock().unwrap().get_or_insert_with(Instant::now);
            let mut left: usize = ops.iter().filter(|o| o.is_write()).map(|o| o.len()).sum();
            while left > 0 {
                let n = left.min(MIB);
                std::thread::sleep(Duration::from_millis(MS_PER_MIB) * n as u32 / MIB as u32);
                p.done.fetch_add(n as u64, Ordering::SeqCst);
                left -= n;
            }
            let r = Psync.run(class, ops);
            *p.last.lock().unwrap() = Some(Instant::now());
            return r;
        }
        Psync.run(class, ops)
    }
}

struct Bed {
    fs: TierFs,
    progress: Arc<Progress>,
    enospc: Arc<AtomicBool>,
    /// The other names the probes ask for: a sibling file, a folder and a file in it.
    sib: u64,
    dir: u64,
    inner: u64,
}

/// A core over two tiers of equal stated bandwidth with `placement`, the throttled engine,
/// and the names to probe beside the file that will move.
fn bed(d: &Path, placement: &str) -> Bed {
    let text = format!(
        "[[tier]]\nname = \"a\"\npath = \"{0}/a\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [[tier]]\nname = \"b\"\npath = \"{0}/b\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [placement]\n{placement}\n",
        d.display()
    );
    let config = MountConfig::parse(&text, Path::new("lockbound.toml")).unwrap();
    config.prepare_tier_dirs().unwrap();
    let tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
    let mut fs = TierFs::new(&config, tiers).unwrap();
    let progress = Arc::new(Progress::default());
    let enospc = Arc::new(AtomicBool::new(false));
    fs.set_engine(Box::new(Throttled {
        progress: progress.clone(),
        enospc: enospc.clone(),
    }));
    let sib = create(&fs, ROOT_INO, "sib.bin", &pattern(4096, 9));
    let dir = fs
        .mkdir(ROOT_INO, OsStr::new("dir"), 0o755, CTX)
        .unwrap()
        .ino;
    let inner = create(&fs, dir, "inner.bin", &pattern(4096, 8));
    Bed {
        fs,
        progress,
        enospc,
        sib,
        dir,
        inner,
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(41).wrapping_add(seed) ^ (i >> 20) as u8)
        .collect()
}

fn create(fs: &TierFs, parent: u64, name: &str, bytes: &[u8]) -> u64 {
    let (attr, fh, _) = fs
        .create(parent, OsStr::new(name), 0o600, libc::O_WRONLY, CTX)
        .unwrap();
    for (i, chunk) in bytes.chunks(MIB).enumerate() {
        fs.write(fh, (i * MIB) as u64, chunk).unwrap();
    }
    fs.release(fh).unwrap();
    attr.ino
}

/// One request a probe makes.
#[derive(Clone, Copy)]
enum Ask {
    Lookup(u64, &'static str),
    Getattr(u64),
}

/// What the probes saw over one copy.
#[derive(Default)]
struct Seen {
    /// Per probe: its label, how many fell in the window, and the worst latency there.
    window: Vec<(String, usize, Duration)>,
    /// Probes in the window that took longer than [`BOUND`]: label, progress when it
    /// began and when it answered, latency.
    late: Vec<(String, f64, f64, Duration)>,
    /// Full rounds of probes that began in the window.
    rounds: usize,
    /// `getattr` of the moving file once past the window: calls, and the worst latency.
    moving: (usize, Duration),
}

/// Runs `copy` in a thread and probes `asks` every [`PERIOD`] until it returns; `total`
/// is the bytes the copy will write at the migration class.
fn watch<T: Send>(
    b: &Bed,
    moving: u64,
    total: u64,
    asks: &[(&str, Ask)],
    copy: impl FnOnce() -> T + Send,
) -> (T, Seen) {
    let fs = &b.fs;
    let mut seen = Seen {
        window: asks
            .iter()
            .map(|(l, _)| (l.to_string(), 0, Duration::ZERO))
            .collect(),
        ..Seen::default()
    };
    let finished = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        let copier = s.spawn(|| {
            let r = copy();
            finished.store(true, Ordering::SeqCst);
            r
        });
        while !finished.load(Ordering::SeqCst) {
            let at = b.progress.fraction(total);
            let in_window = (WINDOW.0..=WINDOW.1).contains(&at);
            for (i, (label, ask)) in asks.iter().enumerate() {
                let p = b.progress.fraction(total);
                let t = Instant::now();
                let r = match *ask {
                    Ask::Lookup(parent, name) => fs.lookup(parent, OsStr::new(name)),
                    Ask::Getattr(ino) => fs.getattr(ino),
                };
                let took = t.elapsed();
                let q = b.progress.fraction(total);
                if let Err(e) = r {
                    panic!("{label} failed during the copy: {e}");
                }
                // In the window if the copy was there at any time of the call: one that
                // began before 10 % and waited past it counts.
                if p <= WINDOW.1 && q >= WINDOW.0 {
                    let w = &mut seen.window[i];
                    w.1 += 1;
                    w.2 = w.2.max(took);
                    if took > BOUND {
                        seen.late.push((label.to_string(), p, q, took));
                    }
                }
            }
            if in_window {
                seen.rounds += 1;
            }
            if at > WINDOW.1 && !finished.load(Ordering::SeqCst) {
                let t = Instant::now();
                fs.getattr(moving).expect("getattr of the moving file");
                seen.moving.0 += 1;
                seen.moving.1 = seen.moving.1.max(t.elapsed());
            }
            std::thread::sleep(PERIOD);
        }
        copier.join().expect("the copy's thread")
    });
    (out, seen)
}

/// Prints what the probes saw, then holds the copy to the bound.
fn check(case: &str, b: &Bed, seen: &Seen) {
    let span = b.progress.span();
    eprintln!(
        "{case}: copy at class Migration took {:.2} s; {} rounds of probes in the {:.0}-{:.0} % window",
        span.as_secs_f64(),
        seen.rounds,
        WINDOW.0 * 100.0,
        WINDOW.1 * 100.0
    );
    for (label, n, worst) in &seen.window {
        eprintln!("{case}:   {label:<28} {n:>4} in window, worst {worst:?}");
    }
    match seen.moving {
        (0, _) => eprintln!(
            "{case}: getattr of the moving file: not probed (the copy ended before a probe past {:.0} %)",
            WINDOW.1 * 100.0
        ),
        (n, worst) => eprintln!(
            "{case}: getattr of the moving file (past {:.0} %, not checked): {n} calls, worst {worst:?}",
            WINDOW.1 * 100.0
        ),
    }
    let worst: Vec<String> = seen
        .window
        .iter()
        .map(|(l, _, w)| format!("{l}: {w:?}"))
        .collect();
    assert!(
        seen.late.is_empty(),
        "{case}: {} probes in the window took longer than {BOUND:?} (worst per probe: {}; \
         first late: {:?} from {:.0} % to {:.0} % done, {:?})",
        seen.late.len(),
        worst.join(", "),
        seen.late[0].0,
        seen.late[0].1 * 100.0,
        seen.late[0].2 * 100.0,
        seen.late[0].3,
    );
    assert!(
        seen.rounds >= 20,
        "{case}: only {} rounds of probes fell in the window: the test proved nothing",
        seen.rounds
    );
    assert!(
        span >= Duration::from_secs(5),
        "{case}: the copy took {span:?}, not the 5 s the bound is meant for"
    );
}

/// The probes of names other than the moving file's, in the folder it is in and another
/// (`getattr` first: a `lookup` that waits for the whole copy hides what follows it).
fn asks(b: &Bed) -> Vec<(&'static str, Ask)> {
    vec![
        ("getattr sib.bin", Ask::Getattr(b.sib)),
        ("getattr dir", Ask::Getattr(b.dir)),
        ("getattr dir/inner.bin", Ask::Getattr(b.inner)),
        ("getattr / (its folder)", Ask::Getattr(ROOT_INO)),
        ("lookup sib.bin", Ask::Lookup(ROOT_INO, "sib.bin")),
        ("lookup dir", Ask::Lookup(ROOT_INO, "dir")),
        ("lookup dir/inner.bin", Ask::Lookup(b.dir, "inner.bin")),
    ]
}

/// A drifted striped file, opened for writing, one block rewritten: the release copies
/// the other 63 blocks at the commit.
#[test]
fn a_migration_commit_leaves_lookup_and_getattr_alone() {
    let d = tempfile::tempdir().unwrap();
    let b = bed(
        d.path(),
        "layout = \"stripe\"\nstripe_unit = \"1MiB\"\nadapt = true",
    );
    let fs = &b.fs;
    let ino = create(fs, ROOT_INO, "f.swp", &pattern(SIZE, 1));
    // The second tier slows to a tenth, as the online estimator would set: the file drifts.
    fs.placer().set_shares(vec![10.0 / 11.0, 1.0 / 11.0]);
    let (fh, _) = fs.open(ino, libc::O_WRONLY).unwrap();
    // A whole block: marked moved, nothing copied.
    fs.write(fh, 0, &pattern(MIB, 2)).unwrap();
    b.progress.reset();
    let total = (SIZE - MIB) as u64;
    let (r, seen) = watch(&b, ino, total, &asks(&b), || fs.release(fh));
    r.expect("release commits the migration");
    let counters = fs.relayout_counters();
    assert_eq!(counters.migrations_committed.load(Ordering::Relaxed), 1);
    assert_eq!(
        counters.migration_copied_bytes.load(Ordering::Relaxed),
        total,
        "the commit copied the unmoved blocks"
    );
    check("migration commit", &b, &seen);
}

/// A whole file whose tier answers a write with ENOSPC: the write moves it to the other
/// tier at once (every byte, at the migration class), then succeeds there.
#[test]
fn an_eager_move_off_a_full_tier_leaves_lookup_and_getattr_alone() {
    let d = tempfile::tempdir().unwrap();
    // Off: a file the kernel writes through passthrough cannot move under it.
    let b = bed(
        d.path(),
        "layout = \"whole-file\"\n[mount]\npassthrough = \"off\"",
    );
    let fs = &b.fs;
    let ino = create(fs, ROOT_INO, "big.bin", &pattern(SIZE, 3));
    let tier_of = |fs: &TierFs| {
        let files = fs.file_list();
        let (_, _, l) = files
            .iter()
            .find(|f| f.0.ends_with("big.bin"))
            .expect("big.bin listed");
        match l {
            FileLayout::Whole { tier } => *tier,
            other => panic!("not a whole file: {other:?}"),
        }
    };
    let before = tier_of(fs);
    let (fh, _) = fs.open(ino, libc::O_WRONLY).unwrap();
    b.progress.reset();
    b.enospc.store(true, Ordering::SeqCst);
    let (r, seen) = watch(&b, ino, SIZE as u64, &asks(&b), || {
        fs.write(fh, SIZE as u64, b"tail")
    });
    assert_eq!(r.expect("the write succeeds after the move"), 4);
    fs.release(fh).unwrap();
    assert!(!b.enospc.load(Ordering::SeqCst), "the fault was injected");
    assert_eq!(
        fs.relayout_counters().eager_moves.load(Ordering::Relaxed),
        1
    );
    assert_ne!(tier_of(fs), before, "the file left the full tier");
    check("eager move", &b, &seen);
}

/// A drifted striped file held in the host-memory cache, opened for writing: the open moves
/// it at once (a cached file is never migrated lazily), copying from memory at the
/// migration class, and every byte reads back afterwards.
#[test]
fn a_cached_files_move_leaves_lookup_and_getattr_alone() {
    let d = tempfile::tempdir().unwrap();
    let b = bed(
        d.path(),
        "layout = \"stripe\"\nstripe_unit = \"1MiB\"\nadapt = true\n\
         [cache]\nsize = \"256MiB\"\n[mount]\npassthrough = \"off\"",
    );
    let fs = &b.fs;
    let bytes = pattern(SIZE, 5);
    let ino = create(fs, ROOT_INO, "c.swp", &bytes);
    // Read once through a handle, so the file is held in memory.
    let (fh, _) = fs.open(ino, libc::O_RDONLY).unwrap();
    let mut buf = vec![0u8; MIB];
    fs.read_into(fh, 0, &mut buf).unwrap();
    fs.release(fh).unwrap();
    fs.placer().set_shares(vec![10.0 / 11.0, 1.0 / 11.0]);
    b.progress.reset();
    let (r, seen) = watch(&b, ino, SIZE as u64, &asks(&b), || {
        fs.open(ino, libc::O_RDWR)
    });
    let (fh, _) = r.expect("the open moves the cached file");
    assert_eq!(
        fs.relayout_counters().eager_moves.load(Ordering::Relaxed),
        1,
        "the cached file moved at once"
    );
    let mut back = vec![0u8; SIZE];
    let mut off = 0;
    while off < SIZE {
        let n = fs
            .read_into(fh, off as u64, &mut back[off..off + MIB])
            .unwrap();
        assert!(n > 0);
        off += n;
    }
    fs.release(fh).unwrap();
    assert!(back == bytes, "the moved file reads back as written");
    check("cached move", &b, &seen);
}

/// A file unlinked while open, whose tier then answers a write with ENOSPC: the move goes
/// into limbo, where the open handle still finds every byte, the retried write included.
#[test]
fn an_unlinked_open_files_move_keeps_its_bytes() {
    let d = tempfile::tempdir().unwrap();
    let b = bed(
        d.path(),
        "layout = \"whole-file\"\n[mount]\npassthrough = \"off\"",
    );
    let fs = &b.fs;
    let books = fs.placer().assigned();
    let bytes = pattern(4 * MIB, 7);
    let ino = create(fs, ROOT_INO, "gone.bin", &bytes);
    let (fh, _) = fs.open(ino, libc::O_RDWR).unwrap();
    fs.unlink(ROOT_INO, OsStr::new("gone.bin")).unwrap();
    b.enospc.store(true, Ordering::SeqCst);
    assert_eq!(fs.write(fh, bytes.len() as u64, b"tail").unwrap(), 4);
    assert!(!b.enospc.load(Ordering::SeqCst), "the fault was injected");
    let counters = fs.relayout_counters();
    assert_eq!(counters.eager_moves.load(Ordering::Relaxed), 1);
    assert_eq!(
        counters.migrations_dropped.load(Ordering::Relaxed),
        0,
        "the move switched into limbo, not dropped because the file is unlinked"
    );
    let mut back = vec![0u8; bytes.len() + 4];
    let mut off = 0;
    while off < back.len() {
        let end = (off + MIB).min(back.len());
        let n = fs.read_into(fh, off as u64, &mut back[off..end]).unwrap();
        assert!(n > 0, "short file at {off}");
        off += n;
    }
    assert!(
        back[..bytes.len()] == bytes[..],
        "the old bytes survive the move"
    );
    assert_eq!(&back[bytes.len()..], b"tail");
    fs.release(fh).unwrap();
    // Its bytes left placement's books when it was removed; its move must not put them back.
    assert!(
        fs.placer().assigned() == books,
        "placement charges {:?}, {books:?} before the file",
        fs.placer().assigned()
    );
}
