//! Model-based test of file semantics through a real mount, with shrinking (proptest).
//!
//! proptest generates sequences of operations over a small fixed set of paths (so names
//! collide: creates hit existing files and folders, renames land on existing files, across
//! folders and into their own subtree). Each operation runs through std::fs / libc on the
//! tierfs mount and on a plain temp directory, the reference; results, errnos and bytes
//! must agree. The reference is opened without O_DIRECT (ext4 refuses the unaligned direct
//! I/O that tierfs accepts). Through the mount a handle may be opened with O_DIRECT: its
//! page-aligned reads and writes go through that descriptor, and unaligned ones through a
//! plain descriptor of the same file opened beside it, so direct and buffered I/O mix on
//! one file.
//!
//! Operations: create (O_CREAT, O_EXCL, O_TRUNC), open (read-only or read-write, with and
//! without O_DIRECT), close, pwrite and pread at random offsets and lengths (unaligned,
//! page-aligned, next to stripe boundaries, up to 3 MiB), truncate and ftruncate up and
//! down, fallocate (allocate, keep size, punch hole), rename (files and folders, over
//! existing files, across folders), unlink (also of open files, which stay readable and
//! writable through their handles), hard links (link counts in stat and fstat, which
//! names are one file, bytes written through one name read through another), mkdir,
//! rmdir, fsync/fdatasync, stat, fstat, and
//! remount (close everything, unmount, mount again). After every sequence, and at every
//! remount, the two trees are compared byte for byte, and each tier folder is checked to
//! hold only folders and pieces of files that exist (no stray piece or temporary).
//!
//! Configurations: whole-file over 2 tiers with the default kernel passthrough (where the
//! kernel and privileges allow it) and with passthrough off, stripe with a 64 KiB unit (the
//! minimum) over 2 and over 3 tiers, and stripe with the harness's 1 MiB unit over 2 tiers.
//!
//! Size of the run, from the environment (the defaults are a quick CI run):
//! - `TIERFS_MODEL_CASES`: sequences per configuration (default 6)
//! - `TIERFS_MODEL_OPS`: longest sequence, in operations (default 60)
//! - `TIERFS_MODEL_SEED`: RNG seed (default: random; printed either way)
//!
//! Long run (>= 100,000 operations):
//! `TIERFS_MODEL_CASES=200 TIERFS_MODEL_OPS=400 cargo test --release --test model -- --nocapture`
//! On 2 cores this ran 157,438 operations in 1,000 sequences (5 configurations x 200),
//! 0 mismatches, in 23 minutes. cargo holds the build lock while tests run: to leave it
//! free, build with `--no-run` and start the printed test binary with the same variables.
//!
//! Each test prints `model[CONFIG]: N ops in C cases, M mismatches (seed S)` to stderr,
//! uncaptured, and the last one to finish adds the total. Needs FUSE; where it is missing
//! the tests skip (`require!`), and fail under `TIERFS_REQUIRE_ALL=1`.

mod common;
#[path = "common/model_ops.rs"]
mod model_ops;

use common::*;
use model_ops::{env_num, op, seed, Mix, Op, PATHS};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use tierfs::tierio::{AlignedBuf, ALIGN};

/// The mount test draws everything, O_TRUNC, O_DIRECT and page alignment included.
const MIX: Mix = Mix {
    create: 8,
    open: 6,
    close: 4,
    write: 16,
    read: 10,
    truncate: 4,
    ftruncate: 4,
    fallocate: 4,
    rename: 8,
    unlink: 4,
    link: 4,
    mkdir: 6,
    rmdir: 4,
    fsync: 2,
    stat: 4,
    fstat: 2,
    // Remounts are the slowest step (an unmount waits for the daemon to exit): rarer here.
    remount: 1,
    mount_fields: true,
};

// ----- the two sides -------------------------------------------------------------------

/// One configuration.
#[derive(Clone, Copy, Debug)]
struct Spec {
    name: &'static str,
    layout: &'static str,
    /// (tier name, bandwidth)
    tiers: &'static [(&'static str, &'static str)],
    stripe_unit: &'static str,
    /// Lines added to the config's `[mount]` section.
    mount: &'static str,
    /// Kernel passthrough must serve some of the opens (checked where the kernel offers
    /// it, and always under TIERFS_REQUIRE_ALL=1), so the configuration tests it at all.
    passthrough: bool,
}

/// Per configuration: passthrough opens seen through all its mounts, and whether any mount
/// offered passthrough (stats.json, read just before each unmount).
static PASSTHROUGH: std::sync::Mutex<BTreeMap<&'static str, (u64, bool)>> =
    std::sync::Mutex::new(BTreeMap::new());

/// Adds a mount's passthrough figures to its configuration's totals.
fn count_passthrough(name: &'static str, setup: &Setup) {
    let Ok(text) = std::fs::read_to_string(setup.mountpoint().join(".tierfs/stats.json")) else {
        return; // not a skip: the mount is gone; the comparison reports that
    };
    let st: serde_json::Value = serde_json::from_str(&text).unwrap();
    let opens: u64 = st["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["passthrough_opens"].as_u64().unwrap())
        .sum();
    let mut all = PASSTHROUGH.lock().unwrap();
    let e = all.entry(name).or_default();
    e.0 += opens;
    e.1 |= st["passthrough"].as_bool().unwrap();
}

/// A live mount of `setup` with `spec`'s stripe unit; unmounted on drop.
struct Mounted<'a> {
    setup: &'a Setup,
    spec: &'static str,
    up: bool,
}

fn mount<'a>(setup: &'a Setup, spec: &Spec) -> Result<Mounted<'a>, String> {
    let text = setup.config_text();
    let from = "stripe_unit = \"1MiB\"";
    assert!(text.contains(from), "the harness config changed: {text}");
    let text = text.replace(from, &format!("stripe_unit = \"{}\"", spec.stripe_unit));
    std::fs::write(setup.config_path(), text).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(setup.mountpoint()).map_err(|e| e.to_string())?;
    let cfg = setup.config_path();
    let mnt = setup.mountpoint();
    let out = setup.tierfs(&[
        "mount",
        "--config",
        cfg.to_str().unwrap(),
        mnt.to_str().unwrap(),
    ]);
    if !out.status.success() {
        return Err(format!(
            "tierfs mount failed: {}\nlog:\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(setup.log_path()).unwrap_or_default()
        ));
    }
    Ok(Mounted {
        setup,
        spec: spec.name,
        up: true,
    })
}

/// `tierfs unmount`, retried while the mount is busy: another test thread's fork, between
/// fork and exec, briefly holds copies of this thread's just-closed descriptors.
fn unmount_retrying(setup: &Setup) -> Result<(), String> {
    let mnt = setup.mountpoint();
    let mut tries = 0;
    loop {
        let out = setup.tierfs(&["unmount", mnt.to_str().unwrap()]);
        if out.status.success() {
            return Ok(());
        }
        let msg = String::from_utf8_lossy(&out.stderr).to_string();
        tries += 1;
        if !msg.contains("busy") || tries >= 50 {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&mnt)
                .status();
            return Err(format!("tierfs unmount failed ({tries} tries): {msg}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

impl Mounted<'_> {
    fn unmount(mut self) -> Result<(), String> {
        self.up = false;
        count_passthrough(self.spec, self.setup);
        unmount_retrying(self.setup)
    }
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        if self.up {
            self.up = false;
            let _ = unmount_retrying(self.setup);
        }
    }
}

/// An open file on both sides; `direct`: the mount's descriptor has O_DIRECT.
struct Pair {
    /// The mount's plain descriptor: unaligned I/O and everything but aligned I/O.
    m: File,
    /// For a handle opened with O_DIRECT: that descriptor, which does the aligned I/O.
    d: Option<File>,
    /// The reference's descriptor.
    r: File,
}

type Res<T> = Result<T, i32>;

fn res<T>(r: std::io::Result<T>) -> Res<T> {
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

fn show<T: std::fmt::Debug>(r: &Res<T>) -> String {
    match r {
        Ok(v) => {
            let s = format!("Ok({v:?})");
            if s.len() > 200 {
                format!("{}...", &s[..200])
            } else {
                s
            }
        }
        Err(e) => format!("Err({})", std::io::Error::from_raw_os_error(*e)),
    }
}

fn same<T: PartialEq + std::fmt::Debug>(what: &str, m: Res<T>, r: Res<T>) -> Result<(), String> {
    if m == r {
        Ok(())
    } else {
        Err(format!(
            "{what}: the mount gave {}, the reference {}",
            show(&m),
            show(&r)
        ))
    }
}

fn diff_bytes(got: &[u8], want: &[u8]) -> Option<String> {
    if got == want {
        return None; // not a skip: no difference
    }
    let first = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Some(format!(
        "{} bytes where the reference has {}; first difference at byte {first}",
        got.len(),
        want.len()
    ))
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn truncate_path(p: &Path, size: u64) -> std::io::Result<()> {
    let c = cpath(p);
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::truncate(c.as_ptr(), size as libc::off_t) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn fallocate(f: &File, mode: i32, off: u64, len: u64) -> std::io::Result<()> {
    // SAFETY: fallocate only acts on the descriptor, which `f` keeps open.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as libc::off_t, len as libc::off_t) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sets or clears O_DIRECT on an open descriptor.
fn set_direct(f: &File, on: bool) -> std::io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL only read and set the status flags of a descriptor `f` owns.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        if fl < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fl = if on {
            fl | libc::O_DIRECT
        } else {
            fl & !libc::O_DIRECT
        };
        if libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn is_aligned(off: u64, len: usize) -> bool {
    off % ALIGN as u64 == 0 && len % ALIGN == 0 && len > 0
}

/// Reads until `buf` is full or the file ends.
fn read_full(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

fn m_write(p: &Pair, data: &[u8], off: u64) -> std::io::Result<()> {
    match &p.d {
        Some(d) if is_aligned(off, data.len()) => {
            let mut b = AlignedBuf::zeroed(data.len());
            b.copy_from_slice(data);
            d.write_all_at(&b, off)
        }
        _ => p.m.write_all_at(data, off),
    }
}

fn m_read(p: &Pair, off: u64, len: usize) -> std::io::Result<Vec<u8>> {
    match &p.d {
        Some(d) if is_aligned(off, len) => {
            let mut b = AlignedBuf::zeroed(len);
            let n = read_full(d, &mut b, off)?;
            Ok(b[..n].to_vec())
        }
        _ => r_read(&p.m, off, len),
    }
}

fn r_read(f: &File, off: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut v = vec![0u8; len];
    let n = read_full(f, &mut v, off)?;
    v.truncate(n);
    Ok(v)
}

/// What stat shows that both sides must agree on: folder or file, and a file's size and
/// link count.
fn shape(m: std::io::Result<std::fs::Metadata>) -> Res<(bool, u64, u64)> {
    res(m).map(|m| {
        if m.is_dir() {
            (true, 0, 0)
        } else {
            (false, m.len(), m.nlink())
        }
    })
}

struct World<'a> {
    setup: &'a Setup,
    spec: Spec,
    mounted: Option<Mounted<'a>>,
    refdir: PathBuf,
    hs: Vec<Pair>,
}

impl World<'_> {
    fn m(&self, i: usize) -> PathBuf {
        self.setup.mountpoint().join(PATHS[i])
    }
    fn r(&self, i: usize) -> PathBuf {
        self.refdir.join(PATHS[i])
    }

    fn open_pair(&mut self, i: usize, write: bool, extra: i32, direct: bool) -> Result<(), String> {
        let (mp, rp) = (self.m(i), self.r(i));
        // O_DIRECT on a folder is refused by FUSE and not by ext4: ask only for files.
        let direct = direct && !rp.is_dir();
        let opts = |flags: i32| {
            let mut o = OpenOptions::new();
            o.read(true).write(write).mode(0o644).custom_flags(flags);
            o
        };
        // A direct handle is the O_DIRECT open (with the O_CREAT, O_EXCL, O_TRUNC asked
        // for) plus a plain open of the same file for the unaligned requests.
        let first = res(opts(extra | if direct { libc::O_DIRECT } else { 0 }).open(&mp));
        let r = res(opts(extra).open(&rp));
        let what = format!(
            "open {:?} (write {write}, flags {extra:#o}, direct {direct})",
            PATHS[i]
        );
        match (first, r) {
            (Ok(first), Ok(r)) => {
                let pair = if direct {
                    let m = opts(0)
                        .open(&mp)
                        .map_err(|e| format!("{what}: plain open beside O_DIRECT: {e}"))?;
                    Pair {
                        m,
                        d: Some(first),
                        r,
                    }
                } else {
                    Pair {
                        m: first,
                        d: None,
                        r,
                    }
                };
                self.hs.push(pair);
                Ok(())
            }
            (m, r) => same(&what, m.map(|_| ()), r.map(|_| ())),
        }
    }

    fn remount(&mut self) -> Result<(), String> {
        self.hs.clear();
        if let Some(m) = self.mounted.take() {
            m.unmount()?;
        }
        self.mounted = Some(mount(self.setup, &self.spec)?);
        self.compare().map_err(|e| format!("after remount: {e}"))
    }

    /// Runs one operation on both sides; `Ok(false)` when it did not apply.
    fn step(&mut self, op: &Op) -> Result<bool, String> {
        let pick = |hs: &Vec<Pair>, h: usize| (!hs.is_empty()).then(|| h % hs.len());
        match *op {
            Op::Create {
                path,
                excl,
                trunc,
                write,
                direct,
            } => {
                let mut flags = libc::O_CREAT;
                if excl {
                    flags |= libc::O_EXCL;
                }
                if trunc && write {
                    flags |= libc::O_TRUNC;
                }
                self.open_pair(path, write, flags, direct)?;
            }
            Op::Open {
                path,
                write,
                trunc,
                direct,
            } => {
                let flags = if trunc && write { libc::O_TRUNC } else { 0 };
                self.open_pair(path, write, flags, direct)?;
            }
            Op::Close { h } => {
                let Some(k) = pick(&self.hs, h) else {
                    return Ok(false);
                };
                self.hs.remove(k);
            }
            Op::Write {
                h,
                off,
                len,
                aligned,
                seed,
            } => {
                let Some(k) = pick(&self.hs, h) else {
                    return Ok(false);
                };
                let (off, len) = if aligned {
                    (off / 4096 * 4096, len.div_ceil(4096).max(1) * 4096)
                } else {
                    (off, len)
                };
                let data = pattern(len, seed);
                let p = &self.hs[k];
                let m = res(m_write(p, &data, off));
                let r = res(p.r.write_all_at(&data, off));
                same(
                    &format!("write {len} at {off} (direct {})", p.d.is_some()),
                    m,
                    r,
                )?;
            }
            Op::Read {
                h,
                off,
                len,
                aligned,
            } => {
                let Some(k) = pick(&self.hs, h) else {
                    return Ok(false);
                };
                let (off, len) = if aligned {
                    (off / 4096 * 4096, len.div_ceil(4096).max(1) * 4096)
                } else {
                    (off, len)
                };
                let p = &self.hs[k];
                let what = format!("read {len} at {off} (direct {})", p.d.is_some());
                match (res(m_read(p, off, len)), res(r_read(&p.r, off, len))) {
                    (Ok(m), Ok(r)) => {
                        if let Some(d) = diff_bytes(&m, &r) {
                            return Err(format!("{what}: {d}"));
                        }
                    }
                    (m, r) => same(&what, m.map(|_| ()), r.map(|_| ()))?,
                }
            }
            Op::Truncate { path, size } => {
                let m = res(truncate_path(&self.m(path), size));
                let r = res(truncate_path(&self.r(path), size));
                same(&format!("truncate {:?} to {size}", PATHS[path]), m, r)?;
            }
            Op::FTruncate { h, size } => {
                let Some(k) = pick(&self.hs, h) else {
                    return Ok(false);
                };
                let p = &self.hs[k];
                same(
                    &format!("ftruncate to {size}"),
                    res(p.m.set_len(size)),
                    res(p.r.set_len(size)),
                )?;
            }
            Op::Fallocate { h, off, len, mode } => {
                let Some(k) = pick(&self.hs, h) else {
                    return Ok(false);
                };
                let p = &self.hs[k];
                same(
                    &format!("fallocate {mode:?} {len} at {off}"),
                    res(fallocate(&p.m, mode.mode(), off, len)),
                    res(fallocate(&p.r, mode.mode(), off, len)),
                )?;
            }
            Op::Rename { from, to } => {
                let m = res(std::fs::rename(self.m(from), self.m(to)));
                let r = res(std::fs::rename(self.r(from), self.r(to)));
                same(
                    &format!("rename {:?} -> {:?}", PATHS[from], PATHS[to]),
                    m,
                    r,
                )?;
            }
            Op::Unlink { path } => {
                let m = res(std::fs::remove_file(self.m(path)));
                let r = res(std::fs::remove_file(self.r(path)));
                same(&format!("unlink {:?}", PATHS[path]), m, r)?;
            }
            Op::Link { from, to } => {
                let m = res(std::fs::hard_link(self.m(from), self.m(to)));
                let r = res(std::fs::hard_link(self.r(from), self.r(to)));
                same(&format!("link {:?} -> {:?}", PATHS[from], PATHS[to]), m, r)?;
            }
            Op::Mkdir { path } => {
                let m = res(std::fs::create_dir(self.m(path)));
                let r = res(std::fs::create_dir(self.r(path)));
                same(&format!("mkdir {:?}", PATHS[path]), m, r)?;
            }
            Op::Rmdir { path } => {
                let m = res(std::fs::remove_dir(self.m(path)));
                let r = res(std::fs::remove_dir(self.r(path)));
                same(&format!("rmdir {:?}", PATHS[path]), m, r)?;
            }
            Op::Fsync { h, datasync } => {
                let Some(k) = pick(&self.hs, h) else {
                    return Ok(false);
                };
                let p = &self.hs[k];
                let (m, r) = if datasync {
                    (p.m.sync_data(), p.r.sync_data())
                } else {
                    (p.m.sync_all(), p.r.sync_all())
                };
                same("fsync", res(m), res(r))?;
            }
            Op::Stat { path } => {
                let m = shape(std::fs::symlink_metadata(self.m(path)));
                let r = shape(std::fs::symlink_metadata(self.r(path)));
                same(&format!("stat {:?}", PATHS[path]), m, r)?;
            }
            Op::FStat { h } => {
                let Some(k) = pick(&self.hs, h) else {
                    return Ok(false);
                };
                let p = &self.hs[k];
                same("fstat", shape(p.m.metadata()), shape(p.r.metadata()))?;
            }
            Op::Remount => self.remount()?,
        }
        Ok(true)
    }

    /// Both trees, byte for byte, and the tier folders.
    fn compare(&self) -> Result<(), String> {
        let m = listing(&self.setup.mountpoint(), true)?;
        let r = listing(&self.refdir, false)?;
        if m != r {
            return Err(format!("trees differ:\n mount     {m:?}\n reference {r:?}"));
        }
        for (p, (is_dir, ..)) in &r {
            if *is_dir {
                continue;
            }
            let mb = std::fs::read(self.setup.mountpoint().join(p))
                .map_err(|e| format!("read {p:?} on the mount: {e}"))?;
            let rb = std::fs::read(self.refdir.join(p)).map_err(|e| e.to_string())?;
            if let Some(d) = diff_bytes(&mb, &rb) {
                return Err(format!("content of {p:?}: {d}"));
            }
        }
        // Each tier holds every folder, and only folders and pieces of existing files.
        for i in 0..self.setup.tiers.len() {
            let data = self.setup.tier_path(i).join("data");
            let t = plain_listing(&data, false)?;
            for (p, (is_dir, ..)) in &t {
                match r.get(p) {
                    Some((d, ..)) if d == is_dir => {}
                    _ => {
                        return Err(format!(
                            "tier {i} holds a stray {} {p:?}",
                            if *is_dir { "folder" } else { "file" }
                        ))
                    }
                }
            }
            for (p, (is_dir, ..)) in &r {
                if *is_dir && !t.contains_key(p) {
                    return Err(format!("tier {i} lacks folder {p:?}"));
                }
            }
        }
        for (p, (is_dir, ..)) in &r {
            let on = (0..self.setup.tiers.len())
                .filter(|i| self.setup.backing(*i, p.to_str().unwrap()).is_file())
                .count();
            if !*is_dir && on == 0 {
                return Err(format!("file {p:?} has no piece on any tier"));
            }
        }
        Ok(())
    }
}

/// Every entry under `root`: relative path -> (is a folder, file size, a file's link
/// count and, by the path of its first name, which names are one file).
type Listing = BTreeMap<PathBuf, (bool, u64, u64, PathBuf)>;

fn listing(root: &Path, is_mount: bool) -> Result<Listing, String> {
    let mut first: BTreeMap<u64, PathBuf> = BTreeMap::new();
    let mut out = plain_listing(root, is_mount)?;
    for (p, (is_dir, _, n, same_as)) in out.iter_mut() {
        if *is_dir {
            continue;
        }
        let md = std::fs::symlink_metadata(root.join(p)).map_err(|e| e.to_string())?;
        *n = md.nlink();
        *same_as = first.entry(md.ino()).or_insert_with(|| p.clone()).clone();
    }
    Ok(out)
}

fn plain_listing(root: &Path, is_mount: bool) -> Result<Listing, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let rd = std::fs::read_dir(root.join(&rel))
            .map_err(|e| format!("readdir {}: {e}", root.join(&rel).display()))?;
        for ent in rd {
            let ent = ent.map_err(|e| e.to_string())?;
            if is_mount && rel.as_os_str().is_empty() && ent.file_name() == ".tierfs" {
                continue;
            }
            let p = rel.join(ent.file_name());
            let md = std::fs::symlink_metadata(root.join(&p))
                .map_err(|e| format!("stat {}: {e}", root.join(&p).display()))?;
            if md.is_dir() {
                stack.push(p.clone());
                out.insert(p, (true, 0, 0, PathBuf::new()));
            } else {
                out.insert(p, (false, md.len(), 0, PathBuf::new()));
            }
        }
    }
    Ok(out)
}

fn run_case(spec: &Spec, ops: &[Op], count: &AtomicU64) -> Result<(), TestCaseError> {
    let tiers = spec
        .tiers
        .iter()
        .map(|(n, bw)| TierSpec::new(n, bw))
        .collect();
    let mut setup = Setup::new(tiers, spec.layout);
    setup.extra = spec.mount.to_string();
    let refdir = setup.dir.path().join("ref");
    std::fs::create_dir(&refdir).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut w = World {
        setup: &setup,
        spec: *spec,
        mounted: Some(mount(&setup, spec).map_err(TestCaseError::fail)?),
        refdir,
        hs: Vec::new(),
    };
    for (i, op) in ops.iter().enumerate() {
        match w.step(op) {
            Ok(true) => {
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {}
            Err(m) => return Err(TestCaseError::fail(format!("op #{i} {op:?}: {m}"))),
        }
    }
    let end = |m: String| TestCaseError::fail(format!("at the end: {m}"));
    w.compare().map_err(end)?;
    w.remount().map_err(end)?;
    count.fetch_add(1, Ordering::Relaxed);
    w.hs.clear();
    if let Some(m) = w.mounted.take() {
        m.unmount().map_err(end)?;
    }
    Ok(())
}

// ----- the runs ------------------------------------------------------------------------

/// The configurations (`model_mount_*` tests): the last to finish prints the totals.
const TESTS: u64 = 7;
static TOTAL_OPS: AtomicU64 = AtomicU64::new(0);
static TOTAL_MISMATCHES: AtomicU64 = AtomicU64::new(0);
static FINISHED: AtomicU64 = AtomicU64::new(0);

fn run(spec: Spec) {
    require!(fuse());
    let cases = env_num("TIERFS_MODEL_CASES", 6) as u32;
    let max_ops = env_num("TIERFS_MODEL_OPS", 60).max(1) as usize;
    let seed = seed();
    let mut cfg = Config::with_cases(cases);
    cfg.failure_persistence = None;
    cfg.rng_seed = RngSeed::Fixed(seed);
    // Each try mounts twice: keep shrinking bounded.
    cfg.max_shrink_iters = 400;
    let mut runner = TestRunner::new(cfg);
    let count = AtomicU64::new(0);
    let strategy = prop::collection::vec(op(MIX), 1..=max_ops);
    let started = std::time::Instant::now();
    let result = runner.run(&strategy, |ops| run_case(&spec, &ops, &count));
    let ops = count.load(Ordering::Relaxed);
    let mismatches = u64::from(result.is_err());
    let total = TOTAL_OPS.fetch_add(ops, Ordering::Relaxed) + ops;
    let total_mm = TOTAL_MISMATCHES.fetch_add(mismatches, Ordering::Relaxed) + mismatches;
    let mut err = std::io::stderr();
    let _ = writeln!(
        err,
        "model[{}]: {ops} ops in {cases} cases (up to {max_ops} ops each), {mismatches} mismatches, {:.1} s (seed {seed})",
        spec.name,
        started.elapsed().as_secs_f64()
    );
    if FINISHED.fetch_add(1, Ordering::Relaxed) + 1 == TESTS {
        let _ = writeln!(err, "model: {total} ops, {total_mm} mismatches");
    }
    if spec.passthrough && result.is_ok() {
        let (opens, offered) = PASSTHROUGH
            .lock()
            .unwrap()
            .get(spec.name)
            .copied()
            .unwrap_or_default();
        if have(
            offered,
            "kernel passthrough is not offered here (root and Linux >= 6.9)",
        ) {
            assert!(
                opens > 0,
                "model[{}]: no open was served by kernel passthrough in {cases} cases",
                spec.name
            );
        }
    }
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, ops)) => panic!(
            "model[{}] (TIERFS_MODEL_SEED={seed}): {why}\nminimal failing sequence ({} ops):\n{ops:#?}",
            spec.name,
            ops.len()
        ),
        Err(TestError::Abort(why)) => panic!("model[{}]: aborted: {why}", spec.name),
    }
}

#[test]
fn model_mount_whole_file_2_tiers() {
    run(Spec {
        name: "mount, whole-file, 2 tiers",
        layout: "whole-file",
        tiers: &[("fast", "2GB/s"), ("slow", "1GB/s")],
        stripe_unit: "1MiB",
        mount: "",
        passthrough: true,
    });
}

#[test]
fn model_mount_whole_file_2_tiers_no_passthrough() {
    run(Spec {
        name: "mount, whole-file, 2 tiers, passthrough off",
        layout: "whole-file",
        tiers: &[("fast", "2GB/s"), ("slow", "1GB/s")],
        stripe_unit: "1MiB",
        mount: "passthrough = \"off\"\n",
        passthrough: false,
    });
}

#[test]
fn model_mount_stripe_64k_2_tiers() {
    run(Spec {
        name: "mount, stripe 64KiB, 2 tiers",
        layout: "stripe",
        tiers: &[("fast", "2GB/s"), ("slow", "1GB/s")],
        stripe_unit: "64KiB",
        mount: "",
        passthrough: false,
    });
}

#[test]
fn model_mount_stripe_64k_3_tiers() {
    run(Spec {
        name: "mount, stripe 64KiB, 3 tiers, psync engine",
        layout: "stripe",
        tiers: &[("nvme0", "3GB/s"), ("nvme1", "2GB/s"), ("pfs", "1GB/s")],
        stripe_unit: "64KiB",
        mount: "engine = \"psync\"\n",
        passthrough: false,
    });
}

#[test]
fn model_mount_stripe_1m_2_tiers() {
    run(Spec {
        name: "mount, stripe 1MiB, 2 tiers",
        layout: "stripe",
        tiers: &[("fast", "2GB/s"), ("slow", "1GB/s")],
        stripe_unit: "1MiB",
        mount: "",
        passthrough: false,
    });
}

/// The host-memory cache in the data path: a small cache (files move in and out of it),
/// quick write-back, and kernel passthrough for whatever is not cached.
#[test]
fn model_mount_whole_file_2_tiers_cache() {
    run(Spec {
        name: "mount, whole-file, 2 tiers, cache",
        layout: "whole-file",
        tiers: &[("fast", "2GB/s"), ("slow", "1GB/s")],
        stripe_unit: "1MiB",
        mount: "passthrough = \"direct\"\n[cache]\nsize = \"16MiB\"\nwriteback_delay = 0.05\n\
                max_file = \"2MiB\"\nprefetch = 1\n",
        passthrough: false,
    });
}

#[test]
fn model_mount_stripe_64k_2_tiers_cache() {
    run(Spec {
        name: "mount, stripe 64KiB, 2 tiers, cache",
        layout: "stripe",
        tiers: &[("fast", "2GB/s"), ("slow", "1GB/s")],
        stripe_unit: "64KiB",
        mount: "[cache]\nsize = \"16MiB\"\nwriteback_delay = 5.0\nmax_file = \"4MiB\"\n",
        passthrough: false,
    });
}

/// Regression (found by the model run): with kernel passthrough for O_DIRECT opens, a
/// handle opened with O_DIRECT stayed direct after fcntl(F_SETFL) cleared O_DIRECT (the
/// kernel opens the backing file with the open's flags and never sees the change), so the
/// unaligned write that follows failed with EINVAL; GNU dd `oflag=direct` writes its last
/// partial block this way. Since d7ebbcb the default `passthrough = "auto"` keeps O_DIRECT
/// opens with the daemon (only `"direct"` passes them through).
#[test]
fn bug_passthrough_ignores_fcntl_clearing_o_direct() {
    require!(fuse());
    for layout in ["stripe", "whole-file"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let p = m.path("f");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .custom_flags(libc::O_DIRECT)
            .open(&p)
            .unwrap();
        let data = pattern(4096 + 5, 7);
        let mut block = AlignedBuf::zeroed(4096);
        block.copy_from_slice(&data[..4096]);
        f.write_all_at(&block, 0).unwrap();
        set_direct(&f, false).unwrap();
        let r = f.write_all_at(&data[4096..], 4096);
        assert!(
            r.is_ok(),
            "{layout}: an unaligned write after fcntl cleared O_DIRECT failed: {r:?}"
        );
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), data, "{layout}");
        m.unmount();
    }
}

/// Regression (found by the model run): fstat of an open folder after rmdir failed with
/// ENOENT, since the core's getattr looked the removed folder up by path. POSIX (and ext4)
/// still give the open folder's attributes, with nlink 0; `find` and `rm -r` racing each
/// other see this. Fixed in ced2394.
#[test]
fn bug_fstat_of_removed_open_folder_is_enoent() {
    require!(fuse());
    let s = Setup::two("stripe");
    let m = s.mount();
    std::fs::create_dir(m.path("d")).unwrap();
    let f = File::open(m.path("d")).unwrap();
    std::fs::remove_dir(m.path("d")).unwrap();
    let md = f.metadata();
    assert!(
        md.as_ref().is_ok_and(|md| md.is_dir()),
        "fstat of a removed, still open folder: {md:?}"
    );
    drop(f);
    m.unmount();
}
