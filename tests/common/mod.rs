//! Shared harness for tests that really mount tierfs: temp tier folders, a config, the
//! `tierfs` binary in the background, and an unmount on drop.
//!
//! Skipping: [`require!`] (and [`have`], for a part of a test) is the only way a test may
//! skip. Where something a test needs is missing (/dev/fuse, root, fio, a user...) it prints
//! `SKIP: <test>: <reason>` and the test returns; with `TIERFS_REQUIRE_ALL=1` (CI sets it)
//! it panics instead, so a CI run that passes ran everything. `tools/check-skips.sh` fails
//! on any other early return or SKIP line in the tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The tierfs binary under test.
pub fn tierfs_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tierfs"))
}

/// Whether `TIERFS_REQUIRE_ALL=1`: nothing may be skipped.
pub fn require_all() -> bool {
    std::env::var_os("TIERFS_REQUIRE_ALL").is_some_and(|v| v == "1")
}

/// The one skip: true when `ok`; otherwise prints `SKIP: <test>: <why>` and returns false,
/// or panics under `TIERFS_REQUIRE_ALL=1`. `require!` returns from the test on false; use
/// `have` directly only to leave out one part of a test (`if have(..) { .. }`).
#[track_caller]
pub fn have(ok: bool, why: &str) -> bool {
    if ok {
        return true;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    if require_all() {
        panic!("{test}: {why} (TIERFS_REQUIRE_ALL=1: nothing may be skipped)");
    }
    eprintln!("SKIP: {test}: {why}");
    false
}

/// Returns from the calling test (after `SKIP: <test>: <reason>`, or a panic under
/// `TIERFS_REQUIRE_ALL=1`) unless a prerequisite holds:
///
/// - `require!(fuse())`: a check returning `Result<(), String>` (the reason);
/// - `require!(cond, "reason {}", args)`: a condition and the reason it is needed.
macro_rules! require {
    ($check:expr) => {
        if let Err(why) = $check {
            $crate::common::have(false, &why);
            return;
        }
    };
    ($cond:expr, $($why:tt)+) => {
        if !$crate::common::have($cond, &format!($($why)+)) {
            return;
        }
    };
}
pub(crate) use require;

/// Whether this machine can mount FUSE: /dev/fuse, and fusermount3 when not root.
pub fn fuse() -> Result<(), String> {
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse is missing on this machine; mount tests need FUSE".into());
    }
    if !is_root() && which("fusermount3").is_none() {
        return Err("not root and fusermount3 is not installed (apt-get install fuse3)".into());
    }
    Ok(())
}

/// Root, which `what` needs.
pub fn root(what: &str) -> Result<(), String> {
    if is_root() {
        Ok(())
    } else {
        Err(format!("needs root ({what})"))
    }
}

/// A program on PATH (`hint`: how to install it).
pub fn tool(prog: &str, hint: &str) -> Result<(), String> {
    match which(prog) {
        Some(_) => Ok(()),
        None => Err(format!("{prog} is not installed ({hint})")),
    }
}

/// A user account (`.ci/run` creates the test users).
pub fn user(name: &str) -> Result<(), String> {
    match user_ids(name) {
        Some(_) => Ok(()),
        None => Err(format!(
            "no user {name} (.ci/run creates it: useradd -m {name})"
        )),
    }
}

pub fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(prog))
            .find(|c| c.is_file())
    })
}

/// One tier of a test mount.
#[derive(Clone, Debug)]
pub struct TierSpec {
    pub name: String,
    /// e.g. "2GB/s"; None leaves bandwidths out (then the probe runs).
    pub bandwidth: Option<String>,
    pub capacity: Option<String>,
}

impl TierSpec {
    pub fn new(name: &str, bw: &str) -> TierSpec {
        TierSpec {
            name: name.into(),
            bandwidth: Some(bw.into()),
            capacity: None,
        }
    }
    pub fn capacity(mut self, c: &str) -> TierSpec {
        self.capacity = Some(c.into());
        self
    }
}

/// Tier folders, a config file and a mountpoint in one temp dir.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub tiers: Vec<TierSpec>,
    pub layout: String,
    pub extra: String,
    /// Leave the staging memory at its default (automatic, sized from the memory limit).
    /// False (the default here) adds `[cache] size = "off"` unless `extra` has a `[cache]`:
    /// most tests check what reaches the tiers, which pieces hold what and which opens go
    /// to kernel passthrough, and a cache holding writes for `writeback_delay` seconds (and
    /// keeping its files out of passthrough) changes all three; the cache's own tests say
    /// what cache they mean.
    pub auto_staging: bool,
}

impl Setup {
    pub fn new(tiers: Vec<TierSpec>, layout: &str) -> Setup {
        let parent = std::env::var_os("TIERFS_TEST_DIR").unwrap_or_else(|| "/tmp".into());
        Setup::new_in(Path::new(&parent), tiers, layout)
    }

    /// [`Setup::new`] with its folders (tiers included) under `parent`.
    pub fn new_in(parent: &Path, tiers: Vec<TierSpec>, layout: &str) -> Setup {
        let dir = tempfile::Builder::new()
            .prefix("tierfs-test-")
            .tempdir_in(parent)
            .expect("temp dir");
        Setup {
            dir,
            tiers,
            layout: layout.into(),
            extra: String::new(),
            auto_staging: false,
        }
    }

    /// Two tiers, 2GB/s and 1GB/s.
    pub fn two(layout: &str) -> Setup {
        Setup::new(
            vec![
                TierSpec::new("fast", "2GB/s"),
                TierSpec::new("slow", "1GB/s"),
            ],
            layout,
        )
    }

    pub fn tier_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("tier-{}", self.tiers[i].name))
    }

    /// Where file `rel` of the mount would sit on tier `i`.
    pub fn backing(&self, i: usize, rel: &str) -> PathBuf {
        self.tier_path(i).join("data").join(rel)
    }

    pub fn mountpoint(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("daemon.log")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("tierfs.toml")
    }

    pub fn config_text(&self) -> String {
        let mut s = String::new();
        for (i, t) in self.tiers.iter().enumerate() {
            s.push_str(&format!(
                "[[tier]]\nname = \"{}\"\npath = \"{}\"\ncreate = true\n",
                t.name,
                self.tier_path(i).display()
            ));
            if let Some(bw) = &t.bandwidth {
                s.push_str(&format!(
                    "read_bandwidth = \"{bw}\"\nwrite_bandwidth = \"{bw}\"\n"
                ));
            }
            if let Some(c) = &t.capacity {
                s.push_str(&format!("capacity = \"{c}\"\n"));
            }
        }
        s.push_str(&format!(
            "[placement]\nlayout = \"{}\"\nstripe_unit = \"1MiB\"\n[mount]\nlog_file = \"{}\"\n",
            self.layout,
            self.log_path().display()
        ));
        s.push_str(&self.extra);
        if !self.auto_staging && !self.extra.contains("[cache]") {
            s.push_str("\n[cache]\nsize = \"off\"\n");
        }
        s
    }

    pub fn write_config(&self) -> PathBuf {
        std::fs::write(self.config_path(), self.config_text()).unwrap();
        let _ = std::fs::create_dir_all(self.mountpoint());
        self.config_path()
    }

    /// Runs `tierfs ARGS`.
    pub fn tierfs(&self, args: &[&str]) -> Output {
        Command::new(tierfs_bin())
            .args(args)
            .output()
            .expect("run tierfs")
    }

    /// Mounts (panics with the daemon's message on failure).
    pub fn mount(&self) -> Mount<'_> {
        let cfg = self.write_config();
        let mut cmd = Command::new(tierfs_bin());
        cmd.arg("mount")
            .arg("--config")
            .arg(&cfg)
            .arg(self.mountpoint());
        self.mount_by(cmd)
    }

    /// Mounts with `tierfs mount` started in the cgroup whose `cgroup.procs` is `procs`, so
    /// the daemon runs there (panics with the daemon's message on failure).
    pub fn mount_in_cgroup(&self, procs: &Path) -> Mount<'_> {
        let cfg = self.write_config();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"echo $$ > "$1" && exec "$2" mount --config "$3" "$4""#)
            .arg("sh")
            .arg(procs)
            .arg(tierfs_bin())
            .arg(&cfg)
            .arg(self.mountpoint());
        self.mount_by(cmd)
    }

    fn mount_by(&self, mut cmd: Command) -> Mount<'_> {
        let out = cmd.output().expect("run tierfs mount");
        assert!(
            out.status.success(),
            "tierfs mount failed: {}\nlog:\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.log_path()).unwrap_or_default()
        );
        Mount {
            setup: self,
            mounted: true,
        }
    }
}

/// A live mount; unmounted (and the daemon awaited) on drop.
pub struct Mount<'a> {
    pub setup: &'a Setup,
    mounted: bool,
}

impl Mount<'_> {
    pub fn path(&self, rel: &str) -> PathBuf {
        // An absolute `rel` would silently point outside the mount.
        assert!(
            !rel.starts_with('/'),
            "Mount::path takes a relative path, got {rel:?}"
        );
        self.setup.mountpoint().join(rel)
    }

    pub fn root(&self) -> PathBuf {
        self.setup.mountpoint()
    }

    pub fn stats_json(&self) -> serde_json::Value {
        let s = std::fs::read_to_string(self.path(".tierfs/stats.json")).unwrap();
        serde_json::from_str(&s).unwrap()
    }

    /// Bytes written to each tier according to stats.json, in tier order.
    pub fn used_per_tier(&self) -> Vec<u64> {
        self.stats_json()["tiers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["used"].as_u64().unwrap())
            .collect()
    }

    pub fn unmount(mut self) {
        self.do_unmount();
    }

    fn do_unmount(&mut self) {
        if !self.mounted {
            return;
        }
        self.mounted = false;
        let unmount = || {
            Command::new(tierfs_bin())
                .arg("unmount")
                .arg(self.setup.mountpoint())
                .output()
                .expect("run tierfs unmount")
        };
        // EBUSY for a moment is not a leak: another test of this binary that forks a child
        // (Command::spawn) copies every open descriptor into it until its exec, so a file
        // this test just closed can still be open there. Retry for a few seconds; a real
        // leak stays busy and fails.
        let mut out = unmount();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("Device or resource busy")
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(200));
            out = unmount();
        }
        if !out.status.success() {
            // Last resort so a failed test does not leave a mount behind.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.setup.mountpoint())
                .status();
            if !std::thread::panicking() {
                panic!(
                    "tierfs unmount failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

impl Drop for Mount<'_> {
    fn drop(&mut self) {
        self.do_unmount();
    }
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Waits until `f` is true or `secs` pass.
pub fn wait_for(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

// ----- extensions for the mount_* tests ------------------------------------------------

use std::ffi::{CString, OsStr};
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The errno of an I/O error (0 when it has none).
pub fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// One MiB, DeepSpeed's aio block size.
pub const MIB: usize = 1 << 20;

/// A page-aligned buffer holding `data` (for O_DIRECT).
pub fn aligned(data: &[u8]) -> tierfs::tierio::AlignedBuf {
    let mut b = tierfs::tierio::AlignedBuf::zeroed(data.len());
    b.copy_from_slice(data);
    b
}

/// Opens `path` with raw open(2) flags (O_DIRECT, O_APPEND, ...) and `mode` for creation.
pub fn open_flags(path: &Path, flags: i32, mode: u32) -> std::io::Result<File> {
    let acc = flags & libc::O_ACCMODE;
    let mut o = OpenOptions::new();
    o.read(acc == libc::O_RDONLY || acc == libc::O_RDWR)
        .write(acc == libc::O_WRONLY || acc == libc::O_RDWR)
        .mode(mode)
        .custom_flags(flags & !libc::O_ACCMODE);
    if flags & libc::O_APPEND != 0 {
        o.append(true);
    }
    o.open(path)
}

/// One pwrite(2) of all of `buf` at `off` that must not be short: a short write is the
/// bug DeepSpeed cannot see (it never checks `io_event.res`), so it fails the test.
pub fn pwrite_exact(f: &File, buf: &[u8], off: u64) -> std::io::Result<()> {
    let n = f.write_at(buf, off)?;
    assert_eq!(
        n,
        buf.len(),
        "short write: {n} of {} bytes at offset {off}",
        buf.len()
    );
    Ok(())
}

/// Reads `len` bytes at `off` with as many pread(2) calls as it takes; returns what was
/// read (shorter only at end of file).
pub fn pread_upto(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

/// Writes `data` to `path` the way DeepSpeed's aio handle does: one descriptor opened
/// `O_WRONLY|O_CREAT|O_DIRECT` (mode 0600, no O_TRUNC, plus `extra` flags), `threads`
/// threads each writing a contiguous chunk in `MIB` requests from page-aligned buffers.
/// `data.len()` must be a multiple of 1 KiB, as DeepSpeed pads its tensors (an O_DIRECT
/// write of any other length may fail with EINVAL, as on a local filesystem).
pub fn write_direct_threads(path: &Path, data: &[u8], threads: usize, extra: i32) {
    assert!(
        data.len() % 1024 == 0,
        "write_direct_threads: {} bytes is not a multiple of 1 KiB; use write_ds",
        data.len()
    );
    let f = open_flags(
        path,
        libc::O_WRONLY | libc::O_CREAT | libc::O_DIRECT | extra,
        0o600,
    )
    .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let chunk = data.len().div_ceil(threads).div_ceil(4096) * 4096;
    std::thread::scope(|s| {
        for t in 0..threads {
            let start = (t * chunk).min(data.len());
            let end = ((t + 1) * chunk).min(data.len());
            let f = &f;
            s.spawn(move || {
                let mut buf = tierfs::tierio::AlignedBuf::zeroed(MIB);
                let mut off = start;
                while off < end {
                    let n = (end - off).min(MIB);
                    buf.resize(n);
                    buf.copy_from_slice(&data[off..off + n]);
                    pwrite_exact(f, &buf, off as u64)
                        .unwrap_or_else(|e| panic!("{}: pwrite at {off}: {e}", path.display()));
                    off += n;
                }
            });
        }
    });
}

/// Writes `data` (any length) like a DeepSpeed swap file with an odd tail: the 4 KiB-aligned
/// body with O_DIRECT by `threads` threads (see [`write_direct_threads`]), the rest through a
/// second, buffered descriptor. No O_TRUNC unless `extra` has it.
pub fn write_ds(path: &Path, data: &[u8], threads: usize, extra: i32) {
    let body = data.len() / 4096 * 4096;
    write_direct_threads(path, &data[..body], threads, extra);
    if body < data.len() {
        let f = open_flags(path, libc::O_WRONLY | libc::O_CREAT, 0o600).unwrap();
        pwrite_exact(&f, &data[body..], body as u64)
            .unwrap_or_else(|e| panic!("{}: tail write: {e}", path.display()));
    }
}

/// Reads `path` whole the way DeepSpeed does: fstat for the size, then `threads` threads
/// reading contiguous chunks with `O_RDONLY|O_DIRECT` in `MIB` requests into page-aligned
/// buffers (a tail request rounded up to 4 KiB must come back exactly as long as the file).
pub fn read_direct_threads(path: &Path, threads: usize) -> Vec<u8> {
    let f = open_flags(path, libc::O_RDONLY | libc::O_DIRECT, 0)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let size = f.metadata().unwrap().len() as usize;
    let mut out = vec![0u8; size];
    let chunk = size.div_ceil(threads).div_ceil(MIB) * MIB;
    std::thread::scope(|s| {
        for (t, part) in out.chunks_mut(chunk.max(1)).enumerate() {
            let f = &f;
            s.spawn(move || {
                let mut buf = tierfs::tierio::AlignedBuf::zeroed(MIB);
                let mut done = 0;
                while done < part.len() {
                    let want = (part.len() - done).min(MIB);
                    buf.resize(want.div_ceil(4096) * 4096);
                    let off = (t * chunk + done) as u64;
                    let n = pread_upto(f, &mut buf, off)
                        .unwrap_or_else(|e| panic!("{}: pread at {off}: {e}", path.display()));
                    assert_eq!(
                        n,
                        want,
                        "{}: read at {off} of a {size}-byte file",
                        path.display()
                    );
                    part[done..done + n].copy_from_slice(&buf[..n]);
                    done += n;
                }
            });
        }
    });
    out
}

/// Sum of the sizes of the regular files under `dir` (recursively), and their count.
pub fn dir_file_bytes(dir: &Path) -> (u64, usize) {
    let mut total = (0, 0);
    let Ok(rd) = std::fs::read_dir(dir) else {
        return total;
    };
    for e in rd.flatten() {
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        if m.is_dir() {
            let (b, n) = dir_file_bytes(&e.path());
            total.0 += b;
            total.1 += n;
        } else if m.is_file() {
            total.0 += m.len();
            total.1 += 1;
        }
    }
    total
}

/// Every regular file under `dir`, as paths relative to `dir`.
pub fn dir_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

impl Setup {
    /// Bytes of the backing files in tier `i`'s `data/` folder (their real sizes).
    pub fn backing_bytes(&self, i: usize) -> u64 {
        dir_file_bytes(&self.tier_path(i).join("data")).0
    }

    /// Which tiers hold a backing file for `rel`.
    pub fn tiers_holding(&self, rel: &str) -> Vec<usize> {
        (0..self.tiers.len())
            .filter(|i| {
                std::fs::symlink_metadata(self.backing(*i, rel))
                    .map(|m| m.is_file())
                    .unwrap_or(false)
            })
            .collect()
    }

    /// Runs `tierfs mount [extra] --config CONFIG MOUNTPOINT` (config written first) and
    /// returns its output without judging it.
    pub fn mount_output(&self, extra: &[&str]) -> Output {
        let cfg = self.write_config();
        Command::new(tierfs_bin())
            .arg("mount")
            .args(extra)
            .arg("--config")
            .arg(&cfg)
            .arg(self.mountpoint())
            .output()
            .expect("run tierfs mount")
    }

    /// Takes charge of a mount made by hand (e.g. with `mount_output`), so it is unmounted
    /// on drop.
    pub fn adopt(&self) -> Mount<'_> {
        Mount {
            setup: self,
            mounted: true,
        }
    }
}

impl Mount<'_> {
    /// The daemon's pid, from stats.json.
    pub fn daemon_pid(&self) -> u32 {
        self.stats_json()["pid"].as_u64().unwrap() as u32
    }

    /// Forgets the mount: drop no longer unmounts it (after the test killed the daemon,
    /// or unmounted it another way).
    pub fn disarm(mut self) {
        self.mounted = false;
    }

    /// stats.json's entry for file `rel` (path as "/rel").
    pub fn file_entry(&self, rel: &str) -> Option<serde_json::Value> {
        let want = format!("/{rel}");
        self.stats_json()["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == want.as_str())
            .cloned()
    }
}

/// Waits (up to 20 s) until the daemon knows every file's size: with kernel passthrough it
/// learns a file's size at RELEASE, which the kernel sends after close() has returned, so
/// stats.json may count a just-closed file late. Settled means every file's size in
/// stats.json equals what stat(2) through the mount says.
pub fn settle(m: &Mount<'_>) {
    let settled = || {
        m.stats_json()["files"].as_array().unwrap().iter().all(|f| {
            let rel = f["path"].as_str().unwrap().trim_start_matches('/');
            std::fs::metadata(m.path(rel))
                .map(|md| Some(md.len()) == f["size"].as_u64())
                .unwrap_or(true)
        })
    };
    wait_for(20, settled);
}

/// stats.json's bytes per tier once the daemon knows every file's size (see [`settle`]).
pub fn settled_used(m: &Mount<'_>) -> Vec<u64> {
    settle(m);
    m.used_per_tier()
}

/// Asserts that each tier's bytes, from stats.json and from the backing folders, agree,
/// and that tier 0 holds a share in `range` of them. Returns the per-tier bytes.
pub fn assert_split(m: &Mount<'_>, range: std::ops::RangeInclusive<f64>, what: &str) -> Vec<u64> {
    let used = settled_used(m);
    let real: Vec<u64> = (0..used.len()).map(|i| m.setup.backing_bytes(i)).collect();
    assert_eq!(
        used,
        real,
        "{what}: stats.json used vs backing file sizes\n{}",
        piece_report(m)
    );
    let total: u64 = used.iter().sum();
    assert!(total > 0, "{what}: nothing written");
    let frac = used[0] as f64 / total as f64;
    eprintln!("{what}: bytes per tier {used:?}, tier 0 holds {frac:.3}");
    let shares: Vec<String> = m.stats_json()["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| format!("{}={}", t["name"], t["share"]))
        .collect();
    assert!(
        range.contains(&frac),
        "{what}: tier 0 holds {frac:.3} of the bytes ({used:?}); want {range:?} \
         (stats.json shares now: {})",
        shares.join(" ")
    );
    used
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn cname(n: &str) -> CString {
    CString::new(n).unwrap()
}

fn check(r: libc::c_int) -> std::io::Result<libc::c_int> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// setxattr(2).
pub fn set_xattr(p: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let (cp, cn) = (cpath(p), cname(name));
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    check(unsafe {
        libc::setxattr(
            cp.as_ptr(),
            cn.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
    .map(|_| ())
}

/// getxattr(2).
pub fn get_xattr(p: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let (cp, cn) = (cpath(p), cname(name));
    let mut buf = vec![0u8; 65536];
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let n = unsafe { libc::getxattr(cp.as_ptr(), cn.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// listxattr(2), as names.
pub fn list_xattr(p: &Path) -> std::io::Result<Vec<String>> {
    let cp = cpath(p);
    let mut buf = vec![0u8; 65536];
    // SAFETY: a valid NUL-terminated path and a buffer of the given length.
    let n = unsafe { libc::listxattr(cp.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(buf[..n as usize]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect())
}

/// removexattr(2).
pub fn remove_xattr(p: &Path, name: &str) -> std::io::Result<()> {
    let (cp, cn) = (cpath(p), cname(name));
    // SAFETY: valid NUL-terminated strings.
    check(unsafe { libc::removexattr(cp.as_ptr(), cn.as_ptr()) }).map(|_| ())
}

/// fallocate(2) on an open file.
pub fn fallocate(f: &File, mode: i32, off: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor.
    check(unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) }).map(|_| ())
}

/// statvfs(2): (f_blocks, f_bavail, f_frsize).
pub fn statvfs(p: &Path) -> (u64, u64, u64) {
    let cp = cpath(p);
    // SAFETY: zeroed is a valid statvfs; the call fills it.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a valid out-pointer.
    check(unsafe { libc::statvfs(cp.as_ptr(), &mut s) }).expect("statvfs");
    (s.f_blocks as u64, s.f_bavail as u64, s.f_frsize as u64)
}

/// Runs a shell command line; panics with its output when it fails.
pub fn sh(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(
        out.status.success(),
        "`{cmd}` failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Shell-quotes a path.
pub fn q(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// Whether `name` is a file name of `p`'s folder listing.
pub fn listed(dir: &Path, name: &str) -> bool {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .any(|e| e.file_name() == OsStr::new(name))
}

/// utimensat(2) with explicit (seconds, nanoseconds) times, not following a symlink.
pub fn set_times(p: &Path, atime: (i64, i64), mtime: (i64, i64)) -> std::io::Result<()> {
    let cp = cpath(p);
    let ts = [
        libc::timespec {
            tv_sec: atime.0,
            tv_nsec: atime.1,
        },
        libc::timespec {
            tv_sec: mtime.0,
            tv_nsec: mtime.1,
        },
    ];
    // SAFETY: a valid path and an array of two timespecs.
    check(unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            cp.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(|_| ())
}

/// renameat2(2) with `flags` (RENAME_NOREPLACE, ...).
pub fn rename2(from: &Path, to: &Path, flags: u32) -> std::io::Result<()> {
    let (a, b) = (cpath(from), cpath(to));
    // SAFETY: valid NUL-terminated paths.
    check(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    })
    .map(|_| ())
}

/// What a node of the mounted tree looks like, for before/after comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSnap {
    pub rel: PathBuf,
    /// "dir", "file", "symlink" or "other".
    pub kind: &'static str,
    pub size: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: (i64, i64),
    /// File contents, or the symlink target.
    pub data: Vec<u8>,
    /// user.* xattrs, sorted, with values.
    pub xattrs: Vec<(String, Vec<u8>)>,
}

/// Walks the mounted tree (without the stats folder) and records every node.
pub fn snapshot_tree(root: &Path) -> Vec<NodeSnap> {
    use std::os::unix::fs::MetadataExt;
    fn walk(root: &Path, dir: &Path, out: &mut Vec<NodeSnap>) {
        let mut ents: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        ents.sort_by_key(|e| e.file_name());
        for e in ents {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if rel == Path::new(".tierfs") {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let ft = m.file_type();
            let (kind, data) = if ft.is_dir() {
                ("dir", Vec::new())
            } else if ft.is_file() {
                ("file", std::fs::read(&p).unwrap())
            } else if ft.is_symlink() {
                (
                    "symlink",
                    std::fs::read_link(&p)
                        .unwrap()
                        .as_os_str()
                        .as_bytes()
                        .to_vec(),
                )
            } else {
                ("other", Vec::new())
            };
            let mut xattrs = Vec::new();
            if kind != "symlink" {
                for n in list_xattr(&p).unwrap() {
                    let v = get_xattr(&p, &n).unwrap();
                    xattrs.push((n, v));
                }
                xattrs.sort();
            }
            out.push(NodeSnap {
                rel,
                kind,
                size: if kind == "dir" { 0 } else { m.len() },
                mode: m.mode() & 0o7777,
                uid: m.uid(),
                gid: m.gid(),
                mtime: (m.mtime(), m.mtime_nsec()),
                data,
                xattrs,
            });
            if kind == "dir" {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// Checks that the tier folders hold exactly the pieces the mount says it has: each file's
/// piece on each tier its stats.json entry names, symlinks and special files on the first
/// tier, and nothing else (no stale piece, no leftover temporary).
pub fn assert_no_stale(m: &Mount<'_>) {
    let st = m.stats_json();
    let names: Vec<String> = st["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    let mut want: Vec<Vec<PathBuf>> = vec![Vec::new(); names.len()];
    for f in st["files"].as_array().unwrap() {
        let rel = PathBuf::from(f["path"].as_str().unwrap().trim_start_matches('/'));
        for t in f["tiers"].as_array().unwrap() {
            let i = names.iter().position(|n| n == t.as_str().unwrap()).unwrap();
            want[i].push(rel.clone());
        }
    }
    for n in snapshot_tree(&m.root()) {
        if n.kind == "symlink" || n.kind == "other" {
            want[0].push(n.rel);
        }
    }
    for (i, w) in want.iter_mut().enumerate() {
        w.sort();
        let have = dir_files(&m.setup.tier_path(i).join("data"));
        assert_eq!(
            &have, w,
            "tier {i} ({}) holds other pieces than the mount shows",
            names[i]
        );
    }
}

/// Every file's stats.json entry and its backing pieces' sizes, for failure messages.
pub fn piece_report(m: &Mount<'_>) -> String {
    let mut out = String::new();
    for f in m.stats_json()["files"].as_array().unwrap() {
        let rel = f["path"].as_str().unwrap().trim_start_matches('/');
        let pieces: Vec<String> = (0..m.setup.tiers.len())
            .filter_map(|i| {
                std::fs::symlink_metadata(m.setup.backing(i, rel))
                    .ok()
                    .map(|md| format!("tier {i}: {}", md.len()))
            })
            .collect();
        out.push_str(&format!(
            "  {rel}: size {} {} on {} -> {}\n",
            f["size"],
            f["layout"],
            f["tiers"],
            pieces.join(", ")
        ));
    }
    out
}

/// A user's uid and gid, if the user exists.
pub fn user_ids(user: &str) -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let o = Command::new("id").arg(flag).arg(user).output().ok()?;
        if !o.status.success() {
            return None;
        }
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

/// Runs a shell command line as `user` (setpriv, else runuser), in the C locale.
pub fn as_user(user: &str, cmd: &str) -> Output {
    let mut c = if which("setpriv").is_some() {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={user}"))
            .arg(format!("--regid={user}"))
            .arg("--init-groups")
            .arg("--");
        c
    } else {
        let mut c = Command::new("runuser");
        c.args(["-u", user, "--"]);
        c
    };
    c.args(["sh", "-c", cmd])
        .env("HOME", "/tmp")
        .env("LC_ALL", "C")
        .output()
        .unwrap()
}

/// A tmpfs mounted at a tier folder, unmounted on drop.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs at {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }

    /// Fills the tmpfs with a file outside tierfs's folders until ENOSPC.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let p = self.0.join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        let chunk = vec![0xAAu8; 256 << 10];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(errno(&e), libc::ENOSPC, "filling the tmpfs: {e}");
                    break;
                }
            }
        }
        p
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// A small tmpfs mounted as a tier (a real ENOSPC): FUSE and root.
pub fn tmpfs_tier() -> Result<(), String> {
    fuse()?;
    root("a real ENOSPC needs a small tmpfs tier, and mounting one needs root")
}
