//! The probe's unit tests on temporary folders: its figures and the files it leaves, the
//! refusals and their messages (bad options, a missing, unwritable or full folder), the
//! verification, the cache (round trip, a corrupt one re-probed), the busy rule and the table.

use super::cache::valid_rate;
use super::*;
use crate::units::fmt_rate;

/// Small and quick; cached whatever the load (tests run side by side on few cores).
fn small() -> ProbeOptions {
    ProbeOptions {
        file_size: 8 << 20,
        min_time: Duration::from_millis(100),
        cpu_wait_limit: 1.0,
        ..ProbeOptions::default()
    }
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tierfs-probe-"))
        .collect()
}

#[test]
fn probe_measures_positive_bandwidth_and_cleans_up() {
    let d = tempfile::tempdir().unwrap();
    let r = probe_dir(d.path(), &small()).unwrap();
    assert!(valid_rate(r.read_bps), "{r:?}");
    assert!(valid_rate(r.write_bps), "{r:?}");
    assert!(r.bytes >= 8 << 20, "{r:?}");
    assert!(r.measured_at > 1_600_000_000);
    assert!(leftovers(d.path()).is_empty());
}

#[test]
fn unaligned_block_size_falls_back_to_buffered() {
    // O_DIRECT rejects a request size that is no multiple of the sector size.
    let d = tempfile::tempdir().unwrap();
    let opts = ProbeOptions {
        file_size: 1 << 20,
        min_time: Duration::from_millis(20),
        queue_depth: 3,
        block_size: 100_001,
        ..ProbeOptions::default()
    };
    let r = probe_dir(d.path(), &opts).unwrap();
    assert!(!r.direct_io);
    assert!(valid_rate(r.read_bps) && valid_rate(r.write_bps));
    assert_eq!(r.bytes % 100_001, 0);
    assert!(leftovers(d.path()).is_empty());
}

#[test]
fn more_threads_than_blocks_and_tiny_blocks() {
    let d = tempfile::tempdir().unwrap();
    let opts = ProbeOptions {
        file_size: 5,
        min_time: Duration::ZERO,
        queue_depth: 8,
        block_size: 3,
        ..ProbeOptions::default()
    };
    let r = probe_dir(d.path(), &opts).unwrap();
    assert_eq!(r.bytes, 6);
    assert!(!r.direct_io);
}

#[test]
fn invalid_options_are_rejected() {
    let d = tempfile::tempdir().unwrap();
    for opts in [
        ProbeOptions {
            block_size: 0,
            ..small()
        },
        ProbeOptions {
            queue_depth: 0,
            ..small()
        },
        ProbeOptions {
            file_size: 0,
            ..small()
        },
    ] {
        let e = probe_dir(d.path(), &opts).unwrap_err();
        assert!(matches!(e, ProbeError::InvalidOptions { .. }), "{e}");
    }
}

#[test]
fn missing_dir_gives_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nope");
    let e = probe_dir(&missing, &small()).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("probe of {}: ", missing.display())),
        "{e}"
    );
    assert!(e.contains("No such file or directory"), "{e}");
}

#[test]
fn file_instead_of_dir_gives_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("file");
    std::fs::write(&f, b"x").unwrap();
    let e = probe_dir(&f, &small()).unwrap_err().to_string();
    assert!(e.contains("not a directory"), "{e}");
}

/// Sets or clears a folder's immutable flag (`chattr +i`; root, on ext4, xfs, btrfs or
/// tmpfs).
fn set_immutable(dir: &Path, on: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
    const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
    const FS_IMMUTABLE_FL: libc::c_long = 0x10;
    let f = std::fs::File::open(dir)?;
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes at most one long into `flags`.
    if unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_GETFLAGS as _, &mut flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if on {
        flags |= FS_IMMUTABLE_FL;
    } else {
        flags &= !FS_IMMUTABLE_FL;
    }
    // SAFETY: FS_IOC_SETFLAGS reads one long from `flags`.
    if unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_SETFLAGS as _, &flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[test]
fn unwritable_dir_names_the_failure() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let ro = d.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    // Root ignores permission bits, not an immutable folder.
    let root = crate::sys::euid() == 0;
    if root {
        set_immutable(&ro, true).expect("chattr +i on a temp folder (as root)");
    } else {
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
    }
    let e = probe_dir(&ro, &small()).unwrap_err().to_string();
    if root {
        set_immutable(&ro, false).unwrap();
    }
    assert!(e.contains("cannot create test file"), "{e}");
    let why = if root {
        "Operation not permitted"
    } else {
        "Permission denied"
    };
    assert!(e.contains(why), "{e}");
}

#[test]
fn no_space_message_says_what_is_needed() {
    let e = op_error(
        "/x",
        1 << 30,
        "/x/.tierfs-probe-1-2",
        "write",
        4096,
        io::Error::from_raw_os_error(libc::ENOSPC),
    );
    assert!(matches!(e, ProbeError::NoSpace { needed, .. } if needed == 1 << 30));
    let s = e.to_string();
    assert!(s.starts_with("probe of /x: not enough space"), "{s}");
    assert!(s.contains("lower file_size"), "{s}");
    assert!(s.contains(&fmt_bytes(1 << 30)), "{s}");
    assert!(s.contains("os error 28"), "{s}");
}

#[test]
fn too_large_file_fails_before_writing() {
    let d = tempfile::tempdir().unwrap();
    let opts = ProbeOptions {
        file_size: 1 << 60,
        ..small()
    };
    let e = probe_dir(d.path(), &opts).unwrap_err();
    assert!(
        matches!(e, ProbeError::NoSpace { needed, .. } if needed == 1 << 60),
        "{e}"
    );
    assert!(e.to_string().contains("lower file_size"), "{e}");
    assert!(leftovers(d.path()).is_empty());
}

#[test]
fn verify_catches_wrong_data() {
    let mut b = pattern_buf(4096);
    assert_eq!(b.as_ptr() as usize % ALIGN, 0);
    stamp(&mut b, 8192);
    assert!(verify(&b, 8192).is_ok());
    assert!(verify(&b, 4096).is_err());
    clobber(&mut b, 8192);
    assert!(verify(&b, 8192).is_err());
    stamp(&mut b, 8192);
    assert!(verify(&b, 8192).is_err(), "samples still clobbered");
}

#[test]
fn cache_round_trip() {
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("sub/dir/probe.json");
    let first = probe_cached(d.path(), &cache, false, &small()).unwrap();
    assert!(cache.exists());
    // Make the cached value recognisable.
    let mut doctored = first.clone();
    doctored.measured_at = 12345;
    std::fs::write(&cache, serde_json::to_vec(&doctored).unwrap()).unwrap();
    let second = probe_cached(d.path(), &cache, false, &small()).unwrap();
    assert_eq!(second.measured_at, 12345);
    assert_eq!(second.read_bps, first.read_bps);
    let fresh = probe_cached(d.path(), &cache, true, &small()).unwrap();
    assert_ne!(fresh.measured_at, 12345);
    let again = probe_cached(d.path(), &cache, false, &small()).unwrap();
    assert_eq!(again.measured_at, fresh.measured_at);
    assert_eq!(again.write_bps, fresh.write_bps);
    // No temporary files left beside the cache.
    let names: Vec<_> = std::fs::read_dir(cache.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("probe.json")]);
}

#[test]
fn corrupt_cache_is_reprobed() {
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("probe.json");
    for junk in [
        &b"{not json"[..],
        b"",
        br#"{"read_bps":0,"write_bps":1,"direct_io":true,"measured_at":5,"bytes":1}"#,
    ] {
        std::fs::write(&cache, junk).unwrap();
        let r = probe_cached(d.path(), &cache, false, &small()).unwrap();
        assert!(valid_rate(r.read_bps) && r.measured_at > 5);
        let back: ProbeResult = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
        assert_eq!(back.measured_at, r.measured_at);
    }
}

fn result(read: f64, write: f64, direct: bool, at: u64) -> ProbeResult {
    ProbeResult {
        read_bps: read,
        write_bps: write,
        direct_io: direct,
        measured_at: at,
        bytes: 1 << 30,
        cpu_wait: None,
    }
}

#[test]
fn a_probe_is_busy_when_either_wait_share_passes_the_limit() {
    let w = |machine, threads| CpuWait { machine, threads };
    assert!(!w(None, None).busy());
    assert!(!w(Some(0.03), Some(0.01)).busy());
    assert!(w(Some(0.25), Some(0.02)).busy());
    assert!(w(None, Some(0.5)).busy());
    assert!(w(Some(0.9), None).busy());
    assert_eq!(w(Some(0.2), Some(0.4)).worst(), Some(0.4));
    // A cache written before the field existed still reads.
    let old = r#"{"read_bps":1.0,"write_bps":2.0,"direct_io":true,"measured_at":7,"bytes":9}"#;
    let r: ProbeResult = serde_json::from_str(old).unwrap();
    assert!(r.cpu_wait.is_none());
    let busy = ProbeResult {
        cpu_wait: Some(w(Some(0.8), Some(0.05))),
        ..result(1e9, 1e9, true, 100)
    };
    let t = render_table_at(&[("n".into(), "/x".into(), busy)], 103);
    assert!(
        t.lines()
            .nth(1)
            .unwrap()
            .ends_with("3s ago, CPU busy 80 %: may be low"),
        "{t}"
    );
}

#[test]
fn table_has_header_and_one_line_per_row() {
    let now = 1_700_000_000;
    let rows = vec![
        (
            "nvme".to_string(),
            "/mnt/tb-nvme".to_string(),
            result(1_199e6, 799.4e6, true, now - 3),
        ),
        (
            "pfs".to_string(),
            "/lustre/scratch/me".to_string(),
            result(399e6, 299e6, false, now - 7300),
        ),
        (
            "old".to_string(),
            "/x".to_string(),
            result(5e9, 4e9, true, now - 3 * 86400),
        ),
    ];
    let t = render_table_at(&rows, now);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 4, "{t}");
    assert!(lines[0].starts_with("NAME"), "{t}");
    for h in ["PATH", "READ", "WRITE", "MODE", "MEASURED"] {
        assert!(lines[0].contains(h), "{t}");
    }
    assert!(lines[1].contains(&fmt_rate(1_199e6)), "{t}");
    assert!(lines[1].contains("direct"), "{t}");
    assert!(lines[1].ends_with("3s ago"), "{t}");
    assert!(lines[2].contains("buffered+fsync"), "{t}");
    assert!(lines[2].ends_with("2h ago"), "{t}");
    assert!(lines[3].ends_with("2023-11-11"), "{t}");
    // Columns line up: PATH starts at the same place on every line.
    let col = lines[0].find("PATH").unwrap();
    assert_eq!(lines[1].find("/mnt").unwrap(), col);
    assert_eq!(lines[2].find("/lustre").unwrap(), col);
    // MODE too.
    let mode = lines[0].find("MODE").unwrap();
    assert_eq!(lines[1].find("direct").unwrap(), mode);
    assert_eq!(lines[2].find("buffered").unwrap(), mode);
    assert_eq!(render_table(&[]).lines().count(), 1);
}

#[test]
fn ages_and_dates() {
    assert_eq!(format_age(100, 100), "0s ago");
    assert_eq!(format_age(100, 159), "59s ago");
    assert_eq!(format_age(100, 160), "1m ago");
    assert_eq!(format_age(0, 7200), "2h ago");
    assert_eq!(format_age(0, 86400), "1970-01-01");
    assert_eq!(format_age(200, 100), "1970-01-01");
    assert_eq!(format_age(951_782_400, 2_000_000_000), "2000-02-29");
    assert_eq!(format_age(1_735_689_599, 2_000_000_000), "2024-12-31");
}
