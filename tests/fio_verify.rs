//! fio with `--verify=crc32c` through a two-tier mount: `O_DIRECT` random writes at queue
//! depth 32 from 4 jobs, with both the libaio and the io_uring engine, for both layouts;
//! every block read back must carry its checksum (fio's exit status 0, `error` and
//! `total_err` 0 in its JSON for every job, and the whole size written and verified).
//!
//! Needs fio (CI installs it; `apt-get install fio`); without it the test skips (`require!`).
//! `FIO_VERIFY_SIZE` sets the size per job (default `64M`).
mod common;
use common::*;

use std::process::Command;

const JOBS: u64 = 4;

fn size_per_job() -> String {
    std::env::var("FIO_VERIFY_SIZE").unwrap_or_else(|_| "64M".into())
}

fn parse_size(s: &str) -> u64 {
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 1 << 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .expect("FIO_VERIFY_SIZE: a number with k/M/G")
        * mult
}

/// Runs one fio verify job set in `dir`; panics on any error.
fn run_fio(dir: &std::path::Path, engine: &str, layout: &str) {
    let size = size_per_job();
    let out = Command::new("fio")
        .arg(format!("--name=verify-{engine}"))
        .arg(format!("--directory={}", dir.display()))
        .arg("--rw=randwrite")
        .arg("--bs=128k")
        .arg(format!("--size={size}"))
        .arg(format!("--numjobs={JOBS}"))
        .arg("--iodepth=32")
        .arg("--direct=1")
        .arg(format!("--ioengine={engine}"))
        .arg("--verify=crc32c")
        .arg("--continue_on_error=verify")
        // No verify state files in the working directory.
        .arg("--verify_state_save=0")
        .arg("--output-format=json")
        .output()
        .expect("run fio");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{layout}/{engine}: fio failed ({}):\n{stderr}\n{stdout}",
        out.status
    );
    // fio may print notes before the JSON object.
    let json = &stdout[stdout.find('{').expect("fio printed no JSON")..];
    let v: serde_json::Value = serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("{layout}/{engine}: fio JSON: {e}\n{stdout}"));
    let jobs = v["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len() as u64, JOBS, "{layout}/{engine}: {stdout}");
    let want = parse_size(&size);
    for (i, j) in jobs.iter().enumerate() {
        let error = j["error"].as_i64().unwrap_or(-1);
        let total_err = j["total_err"].as_i64().unwrap_or(-1);
        let written = j["write"]["io_bytes"].as_u64().unwrap_or(0);
        let verified = j["read"]["io_bytes"].as_u64().unwrap_or(0);
        eprintln!(
            "{layout}/{engine} job {i}: error {error}, total_err {total_err}, \
             written {written}, verified {verified}"
        );
        assert_eq!(error, 0, "{layout}/{engine} job {i}: {stderr}");
        assert_eq!(total_err, 0, "{layout}/{engine} job {i}: verify errors");
        assert_eq!(written, want, "{layout}/{engine} job {i}: bytes written");
        assert_eq!(verified, want, "{layout}/{engine} job {i}: bytes verified");
    }
}

#[test]
fn fio_crc32c_verify_libaio_and_io_uring_both_layouts() {
    require!(fuse());
    require!(tool("fio", "apt-get install fio"));
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        for engine in ["libaio", "io_uring"] {
            let dir = m.path(engine);
            std::fs::create_dir(&dir).unwrap();
            let t = std::time::Instant::now();
            run_fio(&dir, engine, layout);
            let used = m.used_per_tier();
            eprintln!(
                "{layout}/{engine}: ok in {:.1} s; bytes per tier {used:?}",
                t.elapsed().as_secs_f64()
            );
            assert!(
                used.iter().all(|&u| u > 0),
                "{layout}/{engine}: a tier got nothing: {used:?}"
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }
        m.unmount();
    }
}
