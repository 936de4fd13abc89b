//! The host-memory cache through a real mount: data written into memory reaches the tiers
//! at unmount (`tierfs unmount` and a plain `umount` alike), a cached file is never served
//! behind the cache's back (kernel passthrough on), the control file, and what a daemon
//! crash may lose (only what was neither fsynced nor written back).
mod common;
use common::*;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;

const MIB: usize = 1 << 20;

/// One tier; the cache keeps dirty data a long time, so the tests see it in memory.
fn setup(extra_mount: &str) -> Setup {
    let mut s = Setup::new(vec![TierSpec::new("nvme", "2GB/s")], "whole-file");
    s.extra = format!("{extra_mount}[cache]\nsize = \"64MiB\"\nwriteback_delay = 600.0\n");
    s
}

fn cache_json(m: &Mount) -> serde_json::Value {
    let t = std::fs::read_to_string(m.path(".tierfs/cache")).unwrap();
    serde_json::from_str(&t).unwrap()
}

fn wait_exit(pid: u32) {
    assert!(
        wait_for(30, || !std::path::Path::new(&format!("/proc/{pid}"))
            .exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true)),
        "daemon {pid} did not exit"
    );
}

#[test]
fn dirty_data_reaches_the_tier_at_unmount_and_plain_umount() {
    require!(fuse());
    for plain in [false, true] {
        let s = setup("");
        let m = s.mount();
        let data = pattern(5 * MIB + 6 * 1024, 3);
        write_ds(&m.path("0_9.tensor.swp"), &data, 4, 0);
        assert_eq!(read_direct_threads(&m.path("0_9.tensor.swp"), 4), data);
        let c = cache_json(&m);
        assert!(c["dirty"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(c["files"][0]["path"], "0_9.tensor.swp", "{c}");
        let backing = s.backing(0, "0_9.tensor.swp");
        assert_eq!(
            std::fs::metadata(&backing).unwrap().len(),
            0,
            "written back already: the test needs it in memory"
        );
        if plain {
            let pid = m.daemon_pid();
            let st = Command::new("umount").arg(s.mountpoint()).status().unwrap();
            assert!(st.success());
            m.disarm();
            wait_exit(pid);
        } else {
            m.unmount();
        }
        assert!(
            std::fs::read(&backing).unwrap() == data,
            "plain umount: {plain}: the tier copy differs"
        );
    }
}

#[test]
fn cached_file_is_coherent_with_kernel_passthrough_on() {
    require!(fuse());
    let s = setup("passthrough = \"direct\"\n");
    let m = s.mount();
    let data = pattern(3 * MIB, 9);
    write_ds(&m.path("f"), &data, 2, 0);
    // Only the cache has the bytes; a passthrough open would read the empty tier file.
    assert_eq!(std::fs::metadata(s.backing(0, "f")).unwrap().len(), 0);
    for _ in 0..2 {
        assert_eq!(read_direct_threads(&m.path("f"), 2), data);
        assert_eq!(std::fs::read(m.path("f")).unwrap(), data);
    }
    let pt_opens = |m: &Mount| -> u64 {
        m.stats_json()["tiers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["passthrough_opens"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(pt_opens(&m), 0, "a cached file was opened in passthrough");
    // The control file: drop writes it back and evicts it.
    std::fs::write(m.path(".tierfs/control"), b"drop f\n").unwrap();
    assert!(std::fs::read(s.backing(0, "f")).unwrap() == data);
    assert_eq!(cache_json(&m)["files"].as_array().unwrap().len(), 0);
    // A file the cache does not take (over max_file, a quarter of the cache) is opened in
    // passthrough: the 0 above was the cache's rule, not a mount without passthrough.
    if have(
        m.stats_json()["passthrough"].as_bool().unwrap(),
        "kernel passthrough is not offered here (root and Linux >= 6.9)",
    ) {
        let big = pattern(17 * MIB, 10);
        write_direct_threads(&m.path("big"), &big, 2, 0);
        // The writers' RELEASE reaches the daemon after close(2) returns, and while a
        // non-passthrough open is there none may be passthrough: under load the first
        // reads can come before it. Read until the writers' handles are gone.
        assert!(
            wait_for(10, || {
                assert_eq!(read_direct_threads(&m.path("big"), 2), big);
                pt_opens(&m) > 0
            }),
            "an uncached file was not opened in passthrough"
        );
    }
    let e = std::fs::write(m.path(".tierfs/control"), b"prefetch nothing-here\n").unwrap_err();
    assert_eq!(errno(&e), libc::ENOENT);
    let e = std::fs::write(m.path(".tierfs/control"), b"drop f\nfrobnicate\n").unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    // The Python helper a training script imports sends the same commands.
    let helper = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/tierfs_hints.py");
    if have(
        which("python3").is_some(),
        "python3 is not installed; the Python helper is left out (apt-get install python3)",
    ) {
        let run = |args: &[&str]| {
            Command::new("python3")
                .arg(helper)
                .arg(s.mountpoint())
                .args(args)
                .output()
                .unwrap()
        };
        let o = run(&["order", "alternate"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = run(&["order", "sideways"]);
        assert_eq!(o.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&o.stderr).contains("Invalid argument"));
    }
    // prefetch loads it back (in the background).
    std::fs::write(m.path(".tierfs/control"), b"prefetch f\n").unwrap();
    assert!(
        wait_for(20, || cache_json(&m)["files"][0]["valid_blocks"].as_u64()
            == Some(3)),
        "{}",
        cache_json(&m)
    );
    assert_eq!(read_direct_threads(&m.path("f"), 2), data);
    m.unmount();
}

#[test]
fn a_crash_loses_only_data_neither_fsynced_nor_written_back() {
    require!(fuse());
    let s = setup("");
    let m = s.mount();
    let synced = pattern(2 * MIB, 1);
    let unsynced = pattern(2 * MIB, 2);
    {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .custom_flags(libc::O_DIRECT)
            .open(m.path("synced"))
            .unwrap();
        pwrite_exact(&f, &aligned(&synced), 0).unwrap();
        f.sync_all().unwrap();
    }
    write_ds(&m.path("unsynced"), &unsynced, 2, 0);
    assert!(cache_json(&m)["dirty"].as_u64().unwrap() > 0);
    let pid = m.daemon_pid();
    let st = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    m.disarm();
    wait_exit(pid);
    let o = s.mount_output(&["--force"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = s.adopt();
    assert!(std::fs::read(m.path("synced")).unwrap() == synced);
    // The unsynced file exists (created on the tier) but its bytes were only in memory.
    let len = std::fs::metadata(m.path("unsynced")).unwrap().len();
    assert!(len == 0 || len == unsynced.len() as u64, "{len}");
    m.unmount();
}

/// Issue #21 bug 3: with a cache, writes were absorbed in memory whether or not any tier
/// could hold them; the unmount then could not write them back, said nothing and exited
/// 0, and after a remount files were empty or cut. Now the cache promises tier space for
/// the bytes it holds (`Tier::try_reserve`): a write no tier can take fails with ENOSPC
/// when it is made, and every write that was acknowledged is on the tiers after the
/// unmount.
#[test]
fn bug_cache_accepts_writes_no_tier_can_hold() {
    require!(tmpfs_tier());
    let mut s = Setup::two("whole-file");
    s.extra = "[cache]\nsize = \"512MiB\"\nmax_file = \"64MiB\"\nwriteback_delay = 30.0\n".into();
    // 96 + 80 MiB of tmpfs, 64 MiB of each kept back: far less than the 200 MB written.
    let _t0 = Tmpfs::mount(&s.tier_path(0), "96m");
    let _t1 = Tmpfs::mount(&s.tier_path(1), "80m");
    let m = s.mount();
    let mut ok = Vec::new();
    let mut refused = 0;
    for i in 0..20u64 {
        let data = pattern(10_000_000, i);
        let name = format!("f{i}");
        match std::fs::write(m.path(&name), &data) {
            Ok(()) => ok.push((name, data)),
            Err(e) => {
                assert_eq!(errno(&e), libc::ENOSPC, "{name}: {e}");
                refused += 1;
            }
        }
    }
    assert!(
        refused > 0,
        "all 200 MB were accepted, though the tiers hold at most 176 MiB"
    );
    let o = s.tierfs(&["unmount", s.mountpoint().to_str().unwrap()]);
    m.disarm();
    assert!(
        o.status.success(),
        "unmount: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let m = s.mount();
    for (name, data) in &ok {
        assert!(
            std::fs::read(m.path(name)).unwrap() == *data,
            "{name} was acknowledged but differs after the unmount"
        );
    }
    m.unmount();
}

/// Issue #21 bug 3, the other half: an unmount that cannot write everything back (here
/// the tier filled up behind tierfs's back) must fail and name the files, `tierfs
/// unmount` and a plain `umount` (the daemon's log) alike; it used to exit 0 in silence.
#[test]
fn bug_unmount_that_loses_data_exits_zero() {
    require!(tmpfs_tier());
    for plain in [false, true] {
        let mut s = Setup::new(vec![TierSpec::new("nvme", "2GB/s")], "whole-file");
        s.extra = "[cache]\nsize = \"64MiB\"\nwriteback_delay = 600.0\n".into();
        let tmp = Tmpfs::mount(&s.tier_path(0), "84m");
        let m = s.mount();
        write_ds(&m.path("kept"), &pattern(2 * MIB, 1), 2, 0);
        std::fs::write(m.path(".tierfs/control"), b"flush kept\n").unwrap();
        write_ds(&m.path("only-in-memory"), &pattern(6 * MIB, 2), 2, 0);
        assert_eq!(
            std::fs::metadata(s.backing(0, "only-in-memory"))
                .unwrap()
                .len(),
            0,
            "written back already: the test needs it in memory"
        );
        let filler = tmp.fill();
        let pid = m.daemon_pid();
        m.disarm();
        if plain {
            let st = Command::new("umount").arg(s.mountpoint()).status().unwrap();
            assert!(st.success());
            wait_exit(pid);
        } else {
            let o = s.tierfs(&["unmount", s.mountpoint().to_str().unwrap()]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(
                o.status.code(),
                Some(1),
                "unmount lost data yet: {err}\n{}",
                std::fs::read_to_string(s.log_path()).unwrap_or_default()
            );
            assert!(
                err.contains("lost") && err.contains("/only-in-memory") && !err.contains("/kept"),
                "{err}"
            );
        }
        let log = std::fs::read_to_string(s.log_path()).unwrap();
        assert!(
            log.lines().any(|l| l.contains("ERROR")
                && l.contains("LOST")
                && l.contains("/only-in-memory")),
            "plain umount: {plain}: the log does not name the lost file:\n{log}"
        );
        std::fs::remove_file(filler).unwrap();
        drop(tmp);
    }
}

fn mtime_of(p: &std::path::Path) -> i64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().mtime()
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Issue #21 bug 4: with a cache, a time set by the user (`cp -p`, `rsync -a`, `tar x`
/// set them after writing) showed until the write-back, which then stamped the present
/// time for good; and a write left mtime unchanged until its write-back (`make`, `rsync`
/// saw nothing new). Now both show at once and survive the write-back and a remount.
#[test]
fn bug_cache_overwrites_timestamps_set_by_the_user() {
    require!(fuse());
    let s = setup("");
    let m = s.mount();
    const OLD: i64 = 1_000_000_000; // 2001
                                    // `cp -p`: the data, then the times.
    std::fs::write(m.path("copied"), pattern(3 * MIB, 1)).unwrap();
    set_times(&m.path("copied"), (OLD, 0), (OLD, 0)).unwrap();
    assert_eq!(
        std::fs::metadata(s.backing(0, "copied")).unwrap().len(),
        0,
        "written back already: the test needs it in memory"
    );
    assert_eq!(mtime_of(&m.path("copied")), OLD);
    // A write to an old file shows at once.
    std::fs::write(m.path("edited"), pattern(MIB, 2)).unwrap();
    set_times(&m.path("edited"), (OLD, 0), (OLD, 0)).unwrap();
    let before = now_secs();
    {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(m.path("edited"))
            .unwrap();
        pwrite_exact(&f, b"new", 10).unwrap();
    }
    assert!(
        wait_for(3, || mtime_of(&m.path("edited")) >= before),
        "a write to a cached file left its mtime at {}",
        mtime_of(&m.path("edited"))
    );
    // The write-back keeps both.
    std::fs::write(m.path(".tierfs/control"), b"flush\n").unwrap();
    assert!(std::fs::metadata(s.backing(0, "copied")).unwrap().len() > 0);
    assert_eq!(mtime_of(&m.path("copied")), OLD, "after the write-back");
    let edited = mtime_of(&m.path("edited"));
    assert!(edited >= before && edited <= now_secs(), "{edited}");
    // More writes after a time was set, then the unmount's write-back.
    std::fs::write(m.path("late"), pattern(MIB, 3)).unwrap();
    set_times(&m.path("late"), (OLD, 0), (OLD + 5, 0)).unwrap();
    m.unmount();
    assert_eq!(mtime_of(&s.backing(0, "copied")), OLD, "on the tier");
    assert_eq!(mtime_of(&s.backing(0, "late")), OLD + 5, "on the tier");
    let m = s.mount();
    assert_eq!(mtime_of(&m.path("copied")), OLD, "after a remount");
    assert_eq!(mtime_of(&m.path("late")), OLD + 5, "after a remount");
    assert_eq!(mtime_of(&m.path("edited")), edited, "after a remount");
    m.unmount();
}

/// Over /dev/fuse, a whole 1 MiB block written at a block boundary becomes the cache's
/// memory (the transport keeps the block's old buffer for its next request) and a read
/// within one block is sent from it, with no copy by the daemon. Every byte must survive
/// the buffer swaps: rewrites of blocks already in memory, reads in between, the write
/// back and a read from the tier. FUSE over io_uring copies (its replies live in the
/// ring's buffers), so there the counter stays at 0.
#[test]
fn whole_blocks_pass_through_the_cache_uncopied_and_intact() {
    require!(fuse());
    let s = setup("");
    let m = s.mount();
    let name = "0_1.tensor.swp";
    let p = m.path(name);
    let mut data = Vec::new();
    for round in 0..3 {
        data = pattern(8 * MIB, 40 + round);
        write_ds(&p, &data, 4, 0);
        assert_eq!(read_direct_threads(&p, 4), data, "round {round}");
        // Reads across block boundaries are copied, and must agree.
        assert_eq!(std::fs::read(&p).unwrap(), data, "round {round}, buffered");
    }
    let c = cache_json(&m);
    assert_eq!(c["files"][0]["path"], name, "not cached: {c}");
    let zero_copy = c["zero_copy_bytes"].as_u64().unwrap();
    match m.stats_json()["fuse"]["transport"].as_str().unwrap() {
        // 3 rounds of 8 blocks written and read whole.
        "dev" => assert!(
            zero_copy >= (3 * 2 * 8 * MIB) as u64,
            "{zero_copy} bytes uncopied: {c}"
        ),
        t => assert_eq!(zero_copy, 0, "{t}: {c}"),
    }
    std::fs::write(m.path(".tierfs/control"), format!("drop {name}\n")).unwrap();
    assert!(
        std::fs::read(s.backing(0, name)).unwrap() == data,
        "the tier's copy differs"
    );
    assert_eq!(read_direct_threads(&p, 4), data, "read from the tier");
    m.unmount();
}
