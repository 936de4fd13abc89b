//! `tierfs tune` against real mounts: the sweep goes through the mount (the mount's own
//! counters see exactly the bytes the sweep reports), prints DeepSpeed's `aio` section in
//! the shape `ds-config` prints it, leaves no file behind (also after Ctrl-C), falls back
//! to pread/pwrite threads on request, and under `tierfs run` takes the direct path as
//! DeepSpeed's libaio calls do.
mod common;
use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A small sweep's arguments: 8 points of 2 MiB files, 2 ranks, 2 s.
const SMALL: &[&str] = &[
    "--size",
    "2MiB",
    "--block-sizes",
    "256KiB,1MiB",
    "--queue-depths",
    "2,8",
    "--threads",
    "1,2",
    "--budget",
    "2",
    "--ranks",
    "2",
];

fn tune(s: &Setup, extra: &[&str]) -> std::process::Output {
    let mp = s.mountpoint();
    let mut args = vec!["tune", mp.to_str().unwrap()];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(extra);
    s.tierfs(&args)
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The sweep folders left in the mount (none, after any run).
fn leftovers(s: &Setup) -> Vec<String> {
    std::fs::read_dir(s.mountpoint())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tierfs-tune"))
        .collect()
}

fn app_sum(m: &Mount<'_>, key: &str) -> u64 {
    m.stats_json()["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["app"][key].as_u64().unwrap())
        .sum()
}

#[test]
fn the_sweep_goes_through_the_mount_and_prints_the_aio_section() {
    require!(fuse());
    let s = Setup::two("stripe");
    let m = s.mount();
    let o = tune(&s, &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 8, "{v}");
    let (mut wrote, mut read) = (0, 0);
    for p in points {
        let (w, r) = (
            p["write_bytes"].as_u64().unwrap(),
            p["read_bytes"].as_u64().unwrap(),
        );
        // At least one file per rank, and every file written is read back.
        assert!(w >= 2 * (2 << 20) && w % (2 << 20) == 0, "{p}");
        assert_eq!(w, r, "{p}");
        assert!(p["write_GBps"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["read_GBps"].as_f64().unwrap() > 0.0, "{p}");
        wrote += w;
        read += r;
    }
    // What the sweep says it moved is what the programs moved at the mount.
    assert_eq!(app_sum(&m, "written_bytes"), wrote);
    assert_eq!(app_sum(&m, "read_bytes"), read);
    assert_eq!(v["ranks"], 2);
    assert_eq!(v["aio"]["block_size"], v["chosen"]["block_size"]);
    assert_eq!(v["aio"]["queue_depth"], v["chosen"]["queue_depth"]);
    assert_eq!(
        v["aio"]["intra_op_parallelism"],
        v["chosen"]["intra_op_parallelism"]
    );
    assert!(leftovers(&s).is_empty(), "{:?}", leftovers(&s));

    // Without --json: stdout is {"aio": ...} with ds-config's keys; the table on stderr.
    let mp = s.mountpoint();
    let o = s.tierfs(&[
        "tune",
        mp.to_str().unwrap(),
        "--size",
        "2MiB",
        "--block-sizes",
        "1MiB",
        "--queue-depths",
        "4",
        "--threads",
        "1",
        "--budget",
        "1",
        "--ranks",
        "1",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let aio: serde_json::Value = serde_json::from_slice(&o.stdout).expect("aio JSON");
    let ds = s.tierfs(&["ds-config", mp.to_str().unwrap(), "--ranks", "2"]);
    let ds: serde_json::Value = serde_json::from_slice(&ds.stdout).unwrap();
    let keys = |x: &serde_json::Value| {
        let mut k: Vec<String> = x.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&aio), vec!["aio".to_string()]);
    assert_eq!(keys(&aio["aio"]), keys(&ds["aio"]));
    assert_eq!(aio["aio"]["queue_depth"], 4);
    assert_eq!(aio["aio"]["overlap_events"], true);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("BLOCK") && err.contains("<- fastest, chosen"),
        "{err}"
    );
    assert!(err.contains("# engine: "), "{err}");
    assert!(leftovers(&s).is_empty());
    m.unmount();
}

#[test]
fn the_psync_fallback_measures_too() {
    require!(fuse());
    let s = Setup::two("whole-file");
    let m = s.mount();
    let o = tune(&s, &["--engine", "psync", "--json", "--no-overlap-events"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["engine"], "psync");
    assert_eq!(v["aio"]["overlap_events"], false);
    assert!(v["notes"].to_string().contains("--engine psync"), "{v}");
    assert!(leftovers(&s).is_empty());
    m.unmount();
}

#[test]
fn ctrl_c_removes_the_sweeps_files() {
    require!(fuse());
    let s = Setup::two("stripe");
    let m = s.mount();
    let mp = s.mountpoint();
    let child = Command::new(tierfs_bin())
        .args([
            "tune",
            mp.to_str().unwrap(),
            "--size",
            "4MiB",
            "--budget",
            "600",
        ])
        .args(["--ranks", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until its files are there: the sweep is under way.
    let t = Instant::now();
    while !leftovers(&s).iter().any(|d| {
        std::fs::read_dir(mp.join(d))
            .map(|mut r| r.next().is_some())
            .unwrap_or(false)
    }) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the sweep never wrote"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) of our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    assert!(
        text(&o).contains("interrupted; the sweep's files"),
        "{}",
        text(&o)
    );
    assert!(leftovers(&s).is_empty(), "{:?}", leftovers(&s));
    m.unmount();
}

#[test]
fn under_tierfs_run_the_sweep_takes_the_direct_path() {
    require!(fuse());
    let mut s = Setup::two("stripe");
    s.extra = "passthrough = \"off\"\n".into();
    let m = s.mount();
    let mp = s.mountpoint();
    let mut args: Vec<String> = vec!["run".into(), "--".into()];
    args.push(tierfs_bin().to_str().unwrap().into());
    args.push("tune".into());
    args.push(mp.to_str().unwrap().into());
    args.extend(SMALL.iter().map(|a| a.to_string()));
    args.push("--json".into());
    let o = Command::new(tierfs_bin()).args(&args).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["engine"], "libaio", "the library's io_submit");
    let wrote: u64 = v["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["write_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(
        app_sum(&m, "direct_written_bytes"),
        wrote,
        "every byte direct"
    );
    assert!(leftovers(&s).is_empty());
    m.unmount();
}
