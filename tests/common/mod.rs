//! Shared harness for tests that really mount tierfs: temp tier folders, a config, the
//! `tierfs` binary in the background, and an unmount on drop.
//!
//! Mount tests need /dev/fuse (and fusermount3 when not root). Where it is missing they
//! print why and return early; CI runs as root with /dev/fuse, so there they run.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The tierfs binary under test.
pub fn tierfs_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tierfs"))
}

/// Whether this machine can mount FUSE; prints the reason when it cannot.
pub fn fuse_available() -> bool {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP: /dev/fuse is missing on this machine; mount tests need FUSE");
        return false;
    }
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root && which("fusermount3").is_none() {
        eprintln!("SKIP: not root and fusermount3 is not installed (apt-get install fuse3)");
        return false;
    }
    true
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
}

impl Setup {
    pub fn new(tiers: Vec<TierSpec>, layout: &str) -> Setup {
        let dir = tempfile::Builder::new()
            .prefix("tierfs-test-")
            .tempdir_in(std::env::var_os("TIERFS_TEST_DIR").unwrap_or_else(|| "/tmp".into()))
            .expect("temp dir");
        Setup {
            dir,
            tiers,
            layout: layout.into(),
            extra: String::new(),
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
        let out = Command::new(tierfs_bin())
            .arg("mount")
            .arg("--config")
            .arg(&cfg)
            .arg(self.mountpoint())
            .output()
            .expect("run tierfs mount");
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
        let out = Command::new(tierfs_bin())
            .arg("unmount")
            .arg(self.setup.mountpoint())
            .output()
            .expect("run tierfs unmount");
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
