//! `tierfs stat` and `--watch` in the programs' terms, checked against fio: a known number
//! of bytes written and read through a real mount must show in `stats.json`'s per-tier
//! `app` counters (and the table's APP_WRITTEN) whichever path served them: staging memory
//! (where the tiers' own counters still say 0), kernel passthrough (counted from the tier's
//! own block device: two ext4 loop devices here, so each tier has one), and the direct path
//! under `tierfs run`.
//!
//! Needs fio; the passthrough case also root and loop devices (`require!`).
mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

/// Runs fio (`prefix` first, e.g. `tierfs run --`) with `args`; returns the bytes its jobs
/// moved (read, written) after checking every job succeeded.
fn fio(prefix: &[&str], dir: &Path, args: &[&str]) -> (u64, u64) {
    let mut cmd = match prefix.split_first() {
        Some((p, rest)) => {
            let mut c = Command::new(p);
            c.args(rest).arg("fio");
            c
        }
        None => Command::new("fio"),
    };
    let out = cmd
        .arg(format!("--directory={}", dir.display()))
        .args(["--direct=1", "--bs=1M", "--output-format=json"])
        .args(args)
        .output()
        .expect("run fio");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fio {args:?}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&stdout[stdout.find('{').expect("fio JSON")..]).unwrap();
    let jobs = v["jobs"].as_array().unwrap();
    jobs.iter().fold((0, 0), |(r, w), j| {
        assert_eq!(j["error"].as_i64(), Some(0), "{j}");
        (
            r + j["read"]["io_bytes"].as_u64().unwrap(),
            w + j["write"]["io_bytes"].as_u64().unwrap(),
        )
    })
}

/// `key` of every tier's `app` object in stats.json, in tier order.
fn app(m: &Mount<'_>, key: &str) -> Vec<u64> {
    m.stats_json()["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["app"][key]
                .as_u64()
                .unwrap_or_else(|| panic!("app.{key}: {t}"))
        })
        .collect()
}

fn tier_counter(m: &Mount<'_>, key: &str) -> Vec<u64> {
    m.stats_json()["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t[key].as_u64().unwrap())
        .collect()
}

/// The APP_WRITTEN cell of each tier row of `tierfs stat`.
fn table_app_written(s: &Setup) -> Vec<String> {
    let out = s.tierfs(&["stat", s.mountpoint().to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let head: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(head.get(5), Some(&"APP_WRITTEN"), "{text}");
    // Sizes and rates print as two fields ("60.0 MiB", "2000 MB/s"): TIER, READ_BW,
    // WRITE_BW, SHARE, APP_READ come first.
    text.lines()
        .skip(1)
        .take(s.tiers.len())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            format!("{} {}", f[8], f[9])
        })
        .collect()
}

#[test]
fn staged_writes_count_as_the_programs_bytes() {
    require!(fuse());
    require!(tool("fio", "apt-get install fio"));
    let mut s = Setup::two("stripe");
    // Staging memory large enough for every byte, writing back only after a minute: the
    // tiers' own counters stay at 0 while the programs wrote 64 MiB.
    s.extra = "[cache]\nsize = \"256MiB\"\nwriteback_delay = 60\n".into();
    let m = s.mount();
    let dir = m.path("fio");
    std::fs::create_dir(&dir).unwrap();
    let (_, wrote) = fio(
        &[],
        &dir,
        &[
            "--name=w",
            "--rw=write",
            "--size=32M",
            "--numjobs=2",
            "--ioengine=libaio",
            "--iodepth=8",
        ],
    );
    assert_eq!(wrote, 64 * MIB, "fio's own count");
    let written = app(&m, "written_bytes");
    assert_eq!(
        written.iter().sum::<u64>(),
        wrote,
        "programs' bytes: {written:?}"
    );
    // Per tier, what the stripes put there: the pieces' sizes.
    assert_eq!(written, m.used_per_tier(), "per tier vs the pieces");
    let mem = app(&m, "memory_written_bytes");
    assert_eq!(mem, written, "all taken in by staging memory");
    assert_eq!(
        tier_counter(&m, "bytes_written"),
        vec![0, 0],
        "nothing on the tiers yet"
    );
    let cells = table_app_written(&s);
    assert!(cells.iter().all(|c| c != "0 B"), "the table: {cells:?}");
    assert_eq!(app(&m, "writes").iter().sum::<u64>(), 64, "1 MiB requests");
    // Read back: every byte counted once, the hits as memory's.
    let (read, _) = fio(
        &[],
        &dir,
        &[
            "--name=w",
            "--rw=read",
            "--size=32M",
            "--numjobs=2",
            "--ioengine=psync",
        ],
    );
    assert_eq!(read, 64 * MIB);
    assert_eq!(app(&m, "read_bytes").iter().sum::<u64>(), read);
    assert_eq!(app(&m, "memory_read_bytes"), app(&m, "read_bytes"));
    // The live view runs and names both views and the cache.
    let w = s.tierfs(&[
        "stat",
        s.mountpoint().to_str().unwrap(),
        "--watch",
        "0.2",
        "--count",
        "1",
    ]);
    let text = String::from_utf8_lossy(&w.stdout);
    assert!(w.status.success(), "{text}");
    for want in [
        "PROGRAMS",
        "TIERS",
        "staging memory: read hits",
        "64.0 MiB dirty",
    ] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
    m.unmount();
}

#[test]
fn the_direct_paths_bytes_count_once() {
    require!(fuse());
    require!(tool("fio", "apt-get install fio"));
    let mut s = Setup::two("stripe");
    s.extra = "passthrough = \"off\"\n".into();
    let m = s.mount();
    let dir = m.path("fio");
    std::fs::create_dir(&dir).unwrap();
    let run = tierfs_bin();
    let (_, wrote) = fio(
        &[run.to_str().unwrap(), "run", "--"],
        &dir,
        &[
            "--name=d",
            "--rw=write",
            "--size=24M",
            "--numjobs=2",
            "--ioengine=libaio",
            "--iodepth=8",
        ],
    );
    assert_eq!(wrote, 48 * MIB);
    let direct = app(&m, "direct_written_bytes").iter().sum::<u64>();
    assert!(direct > 0, "no byte went the direct path");
    assert_eq!(app(&m, "written_bytes").iter().sum::<u64>(), wrote);
    assert_eq!(
        direct + app(&m, "fuse_written_bytes").iter().sum::<u64>(),
        wrote,
        "each byte on one path"
    );
    m.unmount();
}

/// An ext4 file system on a loop device over a file in /dev/shm, mounted at `mnt`: a tier
/// with a block device of its own. Taken down on drop.
struct LoopFs {
    mnt: PathBuf,
    dev: String,
    image: PathBuf,
}

impl LoopFs {
    fn up(mnt: &Path, mib: u64) -> LoopFs {
        let image = PathBuf::from(format!(
            "/dev/shm/tierfs-statwatch-{}-{}.img",
            std::process::id(),
            mnt.file_name().unwrap().to_string_lossy()
        ));
        std::fs::File::create(&image)
            .unwrap()
            .set_len(mib * MIB)
            .unwrap();
        let dev = sh(&format!("losetup -f --show {}", q(&image)));
        let dev = dev.trim().to_string();
        assert!(dev.starts_with("/dev/loop"), "losetup: {dev}");
        let fs = LoopFs {
            mnt: mnt.to_path_buf(),
            dev,
            image,
        };
        // No lazy initialisation: its background writes would count as passthrough's.
        sh(&format!(
            "mkfs.ext4 -q -i 1048576 -J size=8 -E lazy_itable_init=0,lazy_journal_init=0 {} && mkdir -p {} && mount {} {}",
            fs.dev,
            q(mnt),
            fs.dev,
            q(mnt)
        ));
        fs
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        let _ = std::fs::remove_file(&self.image);
    }
}

fn loop_devices() -> Result<(), String> {
    fuse()?;
    root("loop devices and kernel passthrough")?;
    if !Path::new("/dev/loop-control").exists() {
        return Err("no loop devices (/dev/loop-control)".into());
    }
    tool("mkfs.ext4", "apt-get install e2fsprogs")?;
    tool("losetup", "apt-get install mount")
}

#[test]
fn passthrough_bytes_count_from_each_tiers_own_device() {
    require!(loop_devices());
    require!(tool("fio", "apt-get install fio"));
    let mut s = Setup::two("whole-file");
    s.extra = "passthrough = \"direct\"\n".into();
    // 2 GiB each: passthrough wants a file's size plus 1 GiB free on its tier.
    let _fast = LoopFs::up(&s.tier_path(0), 2048);
    let _slow = LoopFs::up(&s.tier_path(1), 2048);
    let m = s.mount();
    let dir = m.path("fio");
    std::fs::create_dir(&dir).unwrap();
    let (_, wrote) = fio(
        &[],
        &dir,
        &[
            "--name=p",
            "--rw=write",
            "--size=32M",
            "--numjobs=3",
            "--ioengine=libaio",
            "--iodepth=8",
        ],
    );
    assert_eq!(wrote, 96 * MIB);
    // fio opens each file twice (to lay it out, then for the job).
    let opens = tier_counter(&m, "passthrough_opens").iter().sum::<u64>();
    assert!(opens >= 3, "{opens} passthrough opens for 3 files");
    assert_eq!(
        app(&m, "fuse_written_bytes"),
        vec![0, 0],
        "nothing through the daemon"
    );
    // Each tier's device bytes while its files were open: its files' bytes, and ext4's
    // metadata and journal besides (under 2 %).
    let used = m.used_per_tier();
    let pt = app(&m, "passthrough_written_bytes");
    eprintln!("passthrough written per tier {pt:?}, files' bytes {used:?}");
    for (i, (p, u)) in pt.iter().zip(&used).enumerate() {
        assert!(
            *p >= *u && *p <= *u + u / 50 + MIB,
            "tier {i}: passthrough {p} bytes for {u} bytes of files ({pt:?} {used:?})"
        );
    }
    assert_eq!(app(&m, "written_bytes"), pt, "the totals are passthrough's");
    let (read, _) = fio(
        &[],
        &dir,
        &[
            "--name=p",
            "--rw=read",
            "--size=32M",
            "--numjobs=3",
            "--ioengine=libaio",
            "--iodepth=8",
        ],
    );
    assert_eq!(read, 96 * MIB);
    let ptr = app(&m, "passthrough_read_bytes");
    eprintln!("passthrough read per tier {ptr:?}");
    for (i, (p, u)) in ptr.iter().zip(&used).enumerate() {
        assert!(
            *p >= *u && *p <= *u + u / 50 + MIB,
            "tier {i}: passthrough read {p} bytes of {u} ({ptr:?} {used:?})"
        );
    }
    m.unmount();
}
