//! Staging memory sized from the job's memory limit, through real mounts inside a memory
//! cgroup made for the test (root only): the automatic size and where it comes from, a
//! limit too small for any staging, a stated size winning, and memory pressure from a
//! second process in the cgroup: staging shrinks within a second, nobody is OOM-killed, the
//! daemon stays within its stated bound, and every byte reads back.
//!
//! The tiers are on a disk folder (/var/tmp): a RAM tier's pages would be charged to the
//! cgroup and make the test measure the tier, not the staging.
mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A memory cgroup of the test's own, removed on drop (after its processes are gone).
struct Cgroup {
    dir: PathBuf,
    v2: bool,
}

impl Cgroup {
    /// A new memory cgroup limited to `limit` bytes: v1 where the `memory` controller is
    /// mounted as v1 (it is the one that limits then), else v2 with the memory controller.
    fn new(limit: u64) -> Result<Cgroup, String> {
        root("creating a memory cgroup")?;
        let name = format!(
            "tierfs-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let v2 = Path::new("/sys/fs/cgroup");
        let (dir, v2) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(name), false)
        } else if std::fs::read_to_string(v2.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"))
        {
            (v2.join(name), true)
        } else {
            return Err("no memory cgroup controller (v1 or v2) on this machine".into());
        };
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cg = Cgroup { dir, v2 };
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::write(cg.dir.join(file), limit.to_string())
            .map_err(|e| format!("cannot set {file}: {e}"))?;
        if v2 {
            // No swap, so the limit is on memory alone.
            let _ = std::fs::write(cg.dir.join("memory.swap.max"), "0");
        }
        Ok(cg)
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// OOM kills in the cgroup so far.
    fn oom_kills(&self) -> u64 {
        let (file, key) = if self.v2 {
            ("memory.events", "oom_kill")
        } else {
            ("memory.oom_control", "oom_kill")
        };
        let t = std::fs::read_to_string(self.dir.join(file)).unwrap();
        t.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {file}: {t}"))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The daemon may still be exiting after its unmount.
        wait_for(10, || std::fs::remove_dir(&self.dir).is_ok());
    }
}

/// A process in `cg` that touches `bytes` of memory and holds them until dropped.
struct Hog(std::process::Child);

impl Hog {
    fn start(cg: &Cgroup, bytes: u64) -> Hog {
        let script = "import sys\n\
                      n = int(sys.argv[1])\n\
                      b = bytearray(n)\n\
                      b[::4096] = b'\\x01' * (n // 4096)\n\
                      print('ready', flush=True)\n\
                      sys.stdin.read()\n";
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"echo $$ > "$1" && exec python3 -c "$2" "$3""#)
            .arg("sh")
            .arg(cg.procs())
            .arg(script)
            .arg(bytes.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            line.trim(),
            "ready",
            "the memory hog died before touching its memory"
        );
        Hog(child)
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

fn cache_json(m: &Mount) -> serde_json::Value {
    let t = std::fs::read_to_string(m.path(".tierfs/cache")).unwrap();
    serde_json::from_str(&t).unwrap()
}

fn limit_words(cg: &Cgroup) -> &'static str {
    if cg.v2 {
        "memory cgroup v2 limit"
    } else {
        "memory cgroup v1 limit"
    }
}

/// One tier on disk, everything else default: no `[cache]` section.
fn disk_setup() -> Setup {
    let mut s = Setup::new_in(
        Path::new("/var/tmp"),
        vec![TierSpec::new("disk", "1GB/s")],
        "whole-file",
    );
    s.auto_staging = true;
    s
}

#[test]
fn staging_shrinks_first_under_memory_pressure_in_a_2_gib_cgroup() {
    require!(fuse());
    require!(tool("python3", "apt-get install python3"));
    require!(Cgroup::new(2 * GIB).map(drop));
    let cg = Cgroup::new(2 * GIB).unwrap();
    let s = disk_setup();
    let m = s.mount_in_cgroup(&cg.procs());

    // Sized at mount: 1/8 of the limit, said in the log and in .tierfs/cache.
    let c = cache_json(&m);
    assert_eq!(c["enabled"], true, "{c}");
    assert_eq!(c["config"]["size"].as_u64(), Some(256 * MIB), "{c}");
    let from = c["size_from"].as_str().unwrap();
    assert!(
        from.contains(&format!("1/8 of the {} 2.0 GiB", limit_words(&cg))),
        "{from}"
    );
    let log = std::fs::read_to_string(s.log_path()).unwrap();
    assert!(
        log.lines().any(|l| l.contains("INFO")
            && l.contains("staging memory: 256.0 MiB, automatic: 1/8 of the")),
        "{log}"
    );
    assert_eq!(m.stats_json()["cache"]["size"].as_u64(), Some(256 * MIB));

    // Fill staging: 12 files of 32 MiB, more than it holds; read them back.
    let files: Vec<(String, Vec<u8>)> = (0..12)
        .map(|i| (format!("{i}_opt.tensor.swp"), pattern(32 * MIB as usize, i)))
        .collect();
    for (name, data) in &files {
        write_ds(&m.path(name), data, 4, 0);
    }
    for (name, data) in &files[..6] {
        assert!(read_direct_threads(&m.path(name), 4) == *data, "{name}");
    }
    // Staging nearly full, so the 1.5 GiB below leaves less than the watch's reserve (1/8
    // of the limit, 256 MiB) free: 2 GiB - 1.5 GiB - staging - the daemon's own.
    let c = cache_json(&m);
    let used_before = c["used"].as_u64().unwrap();
    assert!(
        c["allocated"].as_u64().unwrap() >= 224 * MIB,
        "staging holds too little for the test: {c}"
    );

    // A second process in the cgroup takes 1.5 GiB.
    let mut hog = Hog::start(&cg, 3 * GIB / 2);
    let ready = Instant::now();
    let mut shrunk = None;
    while ready.elapsed() < Duration::from_secs(5) {
        let c = cache_json(&m);
        let (used, budget) = (c["used"].as_u64().unwrap(), c["budget"].as_u64().unwrap());
        if c["pressure_shrinks"].as_u64().unwrap() > 0 && budget < 256 * MIB && used <= budget {
            shrunk = Some((ready.elapsed(), used, budget));
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (took, used, budget) = shrunk.unwrap_or_else(|| {
        panic!(
            "staging did not shrink under pressure: {}\nlog:\n{}",
            cache_json(&m),
            std::fs::read_to_string(s.log_path()).unwrap()
        )
    });
    eprintln!("staging shrank to {used} bytes under a budget of {budget} in {took:?}");
    assert!(
        took <= Duration::from_secs(1),
        "staging took {took:?} to get under {budget} (holds {used})"
    );
    assert!(used < used_before, "{used} >= {used_before}");

    // The mount keeps working under pressure: more writes, and every byte reads back.
    let more: Vec<(String, Vec<u8>)> = (12..16)
        .map(|i| (format!("{i}_opt.tensor.swp"), pattern(32 * MIB as usize, i)))
        .collect();
    for (name, data) in &more {
        write_ds(&m.path(name), data, 4, 0);
    }
    for (name, data) in files.iter().chain(&more) {
        assert!(read_direct_threads(&m.path(name), 4) == *data, "{name}");
    }
    let c = cache_json(&m);
    let mem = &c["memory"];
    assert!(
        mem["rss"].as_u64().unwrap() <= mem["bound"].as_u64().unwrap(),
        "daemon RSS over its stated bound: {mem}"
    );
    assert_eq!(mem["job_limit"].as_u64(), Some(2 * GIB), "{mem}");
    assert!(hog.alive(), "the memory hog is gone");
    assert_eq!(cg.oom_kills(), 0, "OOM kill in the cgroup");

    // The job gives the memory back: staging grows back to its size.
    drop(hog);
    assert!(
        wait_for(10, || cache_json(&m)["budget"].as_u64() == Some(256 * MIB)),
        "{}",
        cache_json(&m)
    );
    let pid = m.daemon_pid();
    assert!(std::fs::read_to_string(cg.procs())
        .unwrap()
        .lines()
        .any(|l| l == pid.to_string()));
    m.unmount();
    assert_eq!(cg.oom_kills(), 0, "OOM kill in the cgroup");
    let log = std::fs::read_to_string(s.log_path()).unwrap();
    assert!(log.contains("memory pressure:"), "{log}");
}

#[test]
fn a_limit_too_small_for_staging_mounts_without_it_and_a_stated_size_wins() {
    require!(fuse());
    require!(Cgroup::new(100 * MIB).map(drop));
    let cg = Cgroup::new(100 * MIB).unwrap();
    let s = disk_setup();
    let m = s.mount_in_cgroup(&cg.procs());
    let c = cache_json(&m);
    assert_eq!(c["enabled"], false, "{c}");
    let from = c["size_from"].as_str().unwrap();
    assert!(
        from.starts_with(&format!("off: 1/8 of the {} 100.0 MiB (", limit_words(&cg)))
            && from.contains(") is under the 16.0 MiB staging needs at least"),
        "{from}"
    );
    assert!(m.stats_json()["cache"].is_null());
    let data = pattern(8 * MIB as usize, 5);
    write_ds(&m.path("f"), &data, 2, 0);
    assert!(read_direct_threads(&m.path("f"), 2) == data);
    m.unmount();
    let log = std::fs::read_to_string(s.log_path()).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("staging memory off: 1/8 of the")),
        "{log}"
    );

    // The user's size wins over the automatic one (and the watch still follows the limit).
    let mut s = disk_setup();
    s.extra = "[cache]\nsize = \"32MiB\"\n".into();
    let m = s.mount_in_cgroup(&cg.procs());
    let c = cache_json(&m);
    assert_eq!(c["config"]["size"].as_u64(), Some(32 * MIB), "{c}");
    assert_eq!(
        c["size_from"], "cache.size = \"32MiB\" in the config",
        "{c}"
    );
    assert_eq!(c["memory"]["job_limit"].as_u64(), Some(100 * MIB), "{c}");
    write_ds(&m.path("f"), &data, 2, 0);
    assert!(read_direct_threads(&m.path("f"), 2) == data);
    m.unmount();
    assert_eq!(cg.oom_kills(), 0, "OOM kill in the cgroup");
}
