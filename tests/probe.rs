//! Probe checks through the public API.
//!
//! `probe_real_tier` measures a real tier when asked:
//!
//! ```text
//! TIERFS_PROBE_DIR=/mnt/tb-probe TIERFS_PROBE_EXPECT=400,300 \
//!     cargo test --release --test probe -- --nocapture
//! ```
//!
//! `TIERFS_PROBE_EXPECT=READ,WRITE` (MB/s) makes it fail when a measurement is off by more
//! than 10%; `TIERFS_PROBE_SIZE` (bytes, default 1 GiB), `TIERFS_PROBE_SECS` (default 3) and
//! `TIERFS_PROBE_BS` (bytes, default 1 MiB; one that is no multiple of 512, such as 1000000,
//! forces the buffered + fsync fallback) size the probe.

mod common;
use common::*;

use std::path::Path;
use std::time::Duration;

use tierfs::probe::{probe_cached, probe_dir, render_table, ProbeOptions};

#[test]
fn probe_dev_shm_with_or_without_o_direct() {
    // tmpfs accepts O_DIRECT only on newer kernels; either way the probe must work.
    let shm = Path::new("/dev/shm");
    require!(shm.is_dir(), "/dev/shm is missing on this machine");
    let d = tempfile::tempdir_in(shm).expect("a temp folder in /dev/shm");
    let opts = ProbeOptions {
        file_size: 4 << 20,
        min_time: Duration::from_millis(50),
        ..ProbeOptions::default()
    };
    let r = probe_dir(d.path(), &opts).unwrap();
    assert!(r.read_bps > 0.0 && r.write_bps > 0.0, "{r:?}");
    let cache = d.path().join("c/probe.json");
    let c = probe_cached(d.path(), &cache, false, &opts).unwrap();
    let table = render_table(&[("shm".into(), d.path().display().to_string(), c)]);
    assert_eq!(table.lines().count(), 2, "{table}");
}

/// Probes a real tier when `TIERFS_PROBE_DIR` names one (e.g. a tierbed tier; CI sets it);
/// skips otherwise, so the default test run stays fast.
#[test]
fn probe_real_tier() {
    let dir = std::env::var("TIERFS_PROBE_DIR").unwrap_or_default();
    require!(
        !dir.is_empty(),
        "set TIERFS_PROBE_DIR (and TIERFS_PROBE_EXPECT=READ,WRITE in MB/s) to probe a real tier"
    );
    let env_num = |k: &str, default: f64| {
        std::env::var(k)
            .ok()
            .map(|v| v.parse::<f64>().expect(k))
            .unwrap_or(default)
    };
    let opts = ProbeOptions {
        file_size: env_num("TIERFS_PROBE_SIZE", (1u64 << 30) as f64) as u64,
        min_time: Duration::from_secs_f64(env_num("TIERFS_PROBE_SECS", 3.0)),
        block_size: env_num("TIERFS_PROBE_BS", (1u64 << 20) as f64) as usize,
        ..ProbeOptions::default()
    };
    let r = probe_dir(Path::new(&dir), &opts).unwrap();
    println!(
        "{dir}: read {:.1} MB/s, write {:.1} MB/s, direct_io {}, {} bytes each way",
        r.read_bps / 1e6,
        r.write_bps / 1e6,
        r.direct_io,
        r.bytes
    );
    print!(
        "{}",
        render_table(&[("tier".into(), dir.clone(), r.clone())])
    );
    let expect = std::env::var("TIERFS_PROBE_EXPECT").unwrap_or_default();
    if have(
        !expect.is_empty(),
        "set TIERFS_PROBE_EXPECT=READ,WRITE (MB/s) to check the measurement against the caps",
    ) {
        let (er, ew) = expect.split_once(',').expect("READ,WRITE");
        let (er, ew): (f64, f64) = (er.parse().unwrap(), ew.parse().unwrap());
        let off = |got: f64, want: f64| (got / 1e6 - want).abs() / want;
        assert!(
            off(r.read_bps, er) <= 0.10,
            "read {:.1} MB/s, want {er} MB/s within 10 %",
            r.read_bps / 1e6
        );
        assert!(
            off(r.write_bps, ew) <= 0.10,
            "write {:.1} MB/s, want {ew} MB/s within 10 %",
            r.write_bps / 1e6
        );
    }
}

/// A probe taken while every core is busy is returned, flagged, and not cached: the cache
/// written before it stays, so one busy moment cannot set every later mount's layout.
#[test]
fn a_probe_beside_spinning_threads_is_used_but_not_cached() {
    require!(
        std::path::Path::new("/proc/pressure/cpu").exists(),
        "this kernel keeps no CPU pressure figures (/proc/pressure/cpu: CONFIG_PSI)"
    );
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("c/probe.json");
    let opts = ProbeOptions {
        file_size: 8 << 20,
        min_time: Duration::from_millis(400),
        ..ProbeOptions::default()
    };
    let quiet = r#"{"read_bps":1.5e9,"write_bps":1.0e9,"direct_io":true,"measured_at":1700000000,"bytes":1073741824}"#;
    std::fs::create_dir_all(cache.parent().unwrap()).unwrap();
    std::fs::write(&cache, quiet).unwrap();

    // Twice as many spinners as cores: some task waits for a core all the time.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = (0..cores * 2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let r = probe_cached(d.path(), &cache, true, &opts);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in spinners {
        s.join().unwrap();
    }
    let r = r.unwrap();
    let w = r.cpu_wait.expect("the probe reports its waits for a core");
    assert!(w.busy(), "{w:?}");
    assert!(r.read_bps > 0.0 && r.write_bps > 0.0, "{r:?}");
    assert_eq!(std::fs::read_to_string(&cache).unwrap(), quiet);
}
