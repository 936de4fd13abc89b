//! Every kind of I/O the core does reaches the tiers through `tierio` with its class: a
//! counting engine, installed in place of the mount's, records the class of each request
//! for demand reads and writes (striped and whole-file), a cache's write-back and prefetch,
//! and a re-layout's copies. (Recovery probes: `tierio::tests`, on a tier of their own.)
use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tierfs::config::MountConfig;
use tierfs::tierio::{Class, Engine, Op, Psync};
use tierfs::vfs::{Ctx, TierFs, ROOT_INO};

const MIB: usize = 1 << 20;
const CTX: Ctx = Ctx { uid: 0, gid: 0 };

/// Runs every batch on psync and records `(class, write, bytes)` of each request.
#[derive(Debug, Default)]
struct Counting(Arc<Mutex<Vec<(Class, bool, usize)>>>);

impl Engine for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }

    fn run(&self, class: Class, ops: &mut [Op<'_>]) -> Vec<std::io::Result<usize>> {
        let mut seen = self.0.lock().unwrap();
        seen.extend(ops.iter().map(|op| (class, op.is_write(), op.len())));
        Psync.run(class, ops)
    }
}

type Seen = Arc<Mutex<Vec<(Class, bool, usize)>>>;

/// A core over two tiers of equal bandwidth (`[placement]` and `[cache]` as given), with
/// the counting engine; returns what it records. `old`: a file already on the first tier.
fn bed(d: &Path, placement: &str, cache: &str, old: Option<(&str, &[u8])>) -> (TierFs, Seen) {
    let text = format!(
        "[[tier]]\nname = \"a\"\npath = \"{0}/a\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [[tier]]\nname = \"b\"\npath = \"{0}/b\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [placement]\n{placement}\n{cache}",
        d.display()
    );
    let config = MountConfig::parse(&text, Path::new("tierio.toml")).unwrap();
    config.prepare_tier_dirs().unwrap();
    if let Some((name, bytes)) = old {
        std::fs::create_dir_all(d.join("a/data")).unwrap();
        std::fs::write(d.join("a/data").join(name), bytes).unwrap();
    }
    let tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
    let mut fs = TierFs::new(&config, tiers).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    fs.set_engine(Box::new(Counting(seen.clone())));
    (fs, seen)
}

/// The classes recorded since the last call, and how many bytes each moved (reads, writes).
fn take(seen: &Mutex<Vec<(Class, bool, usize)>>) -> Vec<(Class, usize, usize)> {
    let mut by: Vec<(Class, usize, usize)> = Vec::new();
    for (c, write, n) in seen.lock().unwrap().drain(..) {
        let i = match by.iter().position(|b| b.0 == c) {
            Some(i) => i,
            None => {
                by.push((c, 0, 0));
                by.len() - 1
            }
        };
        if write {
            by[i].2 += n;
        } else {
            by[i].1 += n;
        }
    }
    by.sort_by_key(|b| b.0);
    by
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 20) as u8)
        .collect()
}

fn create(fs: &TierFs, name: &str, bytes: &[u8]) -> u64 {
    let (attr, fh, _) = fs
        .create(ROOT_INO, OsStr::new(name), 0o600, libc::O_WRONLY, CTX)
        .unwrap();
    for (i, chunk) in bytes.chunks(MIB).enumerate() {
        fs.write(fh, (i * MIB) as u64, chunk).unwrap();
    }
    fs.release(fh).unwrap();
    attr.ino
}

fn read_all(fs: &TierFs, ino: u64, len: usize) -> Vec<u8> {
    let (fh, _) = fs.open(ino, libc::O_RDONLY).unwrap();
    let mut got = Vec::new();
    while got.len() < len {
        let chunk = fs
            .read_with(fh, got.len() as u64, MIB as u32, |b| b.to_vec())
            .unwrap();
        assert!(!chunk.is_empty());
        got.extend(chunk);
    }
    fs.release(fh).unwrap();
    got
}

#[test]
fn demand_io_arrives_as_demand_striped_and_whole() {
    for layout in ["stripe", "whole-file"] {
        let d = tempfile::tempdir().unwrap();
        let (fs, seen) = bed(
            d.path(),
            &format!("layout = \"{layout}\"\nstripe_unit = \"1MiB\"\n"),
            "",
            None,
        );
        let bytes = data(4 * MIB + 300, 1);
        let ino = create(&fs, "f.bin", &bytes);
        assert_eq!(
            take(&seen),
            vec![(Class::DemandWrite, 0, bytes.len())],
            "{layout}"
        );
        assert_eq!(read_all(&fs, ino, bytes.len()), bytes);
        assert_eq!(
            take(&seen),
            vec![(Class::DemandRead, bytes.len(), 0)],
            "{layout}"
        );
    }
}

#[test]
fn cache_io_arrives_as_write_back_and_prefetch() {
    let d = tempfile::tempdir().unwrap();
    let cold = data(2 * MIB, 3);
    let (fs, seen) = bed(
        d.path(),
        "layout = \"stripe\"\nstripe_unit = \"1MiB\"\n",
        "[cache]\nsize = \"64MiB\"\nwriteback_delay = 0.0\n",
        Some(("p.bin", &cold)),
    );
    let bytes = data(3 * MIB, 2);
    let (attr, fh, _) = fs
        .create(ROOT_INO, OsStr::new("w.bin"), 0o600, libc::O_WRONLY, CTX)
        .unwrap();
    fs.write(fh, 0, &bytes).unwrap();
    let absorbed = take(&seen);
    assert!(
        absorbed.is_empty(),
        "the cache takes the write: {absorbed:?}"
    );
    fs.fsync(fh, false).unwrap();
    assert_eq!(take(&seen), vec![(Class::WriteBack, 0, bytes.len())]);
    fs.release(fh).unwrap();
    take(&seen);

    // A file the cache does not hold (it was on the tier at mount), loaded on request.
    let ino = fs.lookup(ROOT_INO, OsStr::new("p.bin")).unwrap().ino;
    assert_ne!(attr.ino, ino);
    fs.prefetch(ino, true).unwrap();
    assert_eq!(take(&seen), vec![(Class::Prefetch, cold.len(), 0)]);
}

#[test]
fn a_relayout_copies_as_a_migration() {
    let d = tempfile::tempdir().unwrap();
    let (fs, seen) = bed(
        d.path(),
        "layout = \"stripe\"\nstripe_unit = \"1MiB\"\nadapt = true\n",
        "",
        None,
    );
    let bytes = data(6 * MIB, 4);
    let ino = create(&fs, "f.swp", &bytes);
    take(&seen);
    // The second tier slows to a tenth: the file drifts, and moves as it is rewritten.
    fs.placer().set_shares(vec![10.0 / 11.0, 1.0 / 11.0]);
    let (fh, _) = fs.open(ino, libc::O_WRONLY).unwrap();
    assert!(take(&seen).is_empty(), "nothing is copied at open");
    // Part of a block: its old bytes are copied first, at the migration's class; the
    // caller's bytes are a demand write.
    fs.write(fh, 100, b"new").unwrap();
    assert_eq!(
        take(&seen),
        vec![(Class::DemandWrite, 0, 3), (Class::Migration, MIB, MIB)]
    );
    // At the close the blocks that never moved are copied, all at the migration's class.
    fs.release(fh).unwrap();
    assert_eq!(take(&seen), vec![(Class::Migration, 5 * MIB, 5 * MIB)]);
    let mut want = bytes.clone();
    want[100..103].copy_from_slice(b"new");
    assert!(read_all(&fs, ino, want.len()) == want);
}
