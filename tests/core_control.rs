//! Control commands on the core racing the file's own traffic, in a test binary of their
//! own: the test keeps three threads busy for seconds, which in `core_cache` starved the
//! write-back thread of a test beside it that counts on write-back keeping up.
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use tierfs::config::MountConfig;
use tierfs::vfs::{Ctx, TierFs, ROOT_INO};

const MIB: usize = 1 << 20;
const CTX: Ctx = Ctx { uid: 0, gid: 0 };

fn content(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed).to_le_bytes()[1])
        .collect()
}

/// `flush PATH` on the control file while the same file is written and opened for writing
/// by others: the flush took the file's lock for reading twice (once in an `if let` that
/// kept it through the write-back), and an open queued for it in between deadlocked all
/// three (the concurrent model test hung on it). The threads must all finish.
#[test]
fn control_flush_of_a_file_being_opened_and_written_does_not_deadlock() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let d = tempfile::tempdir().unwrap();
    let text = format!(
        "[[tier]]\nname = \"nvme\"\npath = \"{0}/a\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [placement]\nlayout = \"whole-file\"\n[cache]\nsize = \"64MiB\"\nwriteback_delay = 10\n",
        d.path().display()
    );
    let config = MountConfig::parse(&text, Path::new("control.toml")).unwrap();
    config.prepare_tier_dirs().unwrap();
    let tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
    let fs = &Arc::new(TierFs::new(&config, tiers).unwrap());
    let (attr, fh, _) = fs
        .create(ROOT_INO, OsStr::new("f"), 0o644, libc::O_RDWR, CTX)
        .unwrap();
    fs.write(fh, 0, &content(0, 4 * MIB)).unwrap();
    fs.release(fh).unwrap();
    let ino = attr.ino;
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let mut threads = Vec::new();
    for role in 0..3 {
        let (fs, stop, done) = (fs.clone(), stop.clone(), done_tx.clone());
        threads.push(std::thread::spawn(move || {
            let mut v = 1;
            while !stop.load(Ordering::Relaxed) {
                match role {
                    0 => {
                        fs.control(b"flush f\n").unwrap();
                    }
                    1 => {
                        let (fh, _) = fs.open(ino, libc::O_WRONLY).unwrap();
                        fs.release(fh).unwrap();
                    }
                    _ => {
                        let (fh, _) = fs.open(ino, libc::O_WRONLY).unwrap();
                        for i in 0..4 {
                            fs.write(fh, (i * MIB) as u64, &content(v, MIB)).unwrap();
                        }
                        fs.release(fh).unwrap();
                        v += 1;
                    }
                }
            }
            done.send(role).unwrap();
        }));
    }
    std::thread::sleep(std::time::Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    for _ in 0..3 {
        // Generous: each round takes milliseconds; a deadlock never ends.
        done_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("deadlock: a thread did not finish within 60 s of the stop");
    }
    for t in threads {
        t.join().unwrap();
    }
}

/// The operator's commands on the core, with no mount and no drain thread: a refusal is
/// `Error::Refused` with its errno and reason and changes nothing, and a drain's steps
/// move every file off its tier with the bytes unchanged.
#[test]
fn a_drain_on_the_core_moves_every_file_and_refusals_carry_their_errno() {
    let d = tempfile::tempdir().unwrap();
    let text = format!(
        "[[tier]]\nname = \"a\"\npath = \"{0}/a\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [[tier]]\nname = \"b\"\npath = \"{0}/b\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [placement]\nlayout = \"whole-file\"\n[cache]\nsize = \"off\"\n",
        d.path().display()
    );
    let config = MountConfig::parse(&text, Path::new("drain.toml")).unwrap();
    config.prepare_tier_dirs().unwrap();
    let tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
    let fs = TierFs::new(&config, tiers).unwrap();
    let mut files = Vec::new();
    for i in 0..6u32 {
        let data = content(i, MIB + 4096 * i as usize);
        let (attr, fh, _) = fs
            .create(
                ROOT_INO,
                OsStr::new(&format!("f{i}")),
                0o644,
                libc::O_RDWR,
                CTX,
            )
            .unwrap();
        fs.write(fh, 0, &data).unwrap();
        fs.release(fh).unwrap();
        files.push((attr.ino, data));
    }
    let on_b = |fs: &TierFs| {
        fs.tiers()[1]
            .counters
            .files
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert!(on_b(&fs) > 0, "nothing on b");
    let refused = |text: &[u8]| match fs.control(text).unwrap_err() {
        tierfs::error::Error::Refused { errno, reason } => (errno, reason),
        e => panic!("not a refusal: {e}"),
    };
    let (errno, reason) = refused(b"pause nosuch\n");
    assert_eq!(errno, libc::ENOENT);
    assert_eq!(
        reason,
        "line 1: no tier 'nosuch' in this mount (its tiers: a, b)"
    );
    let (errno, reason) = refused(b"pause b\npause a\n");
    assert_eq!(errno, libc::EBUSY);
    assert!(
        reason.starts_with("line 2: cannot pause tier 'a'"),
        "{reason}"
    );
    assert!(fs
        .control(b"status\n")
        .unwrap()
        .contains("tier b state=active"));
    let (errno, reason) = refused(b"weight a x\n");
    assert_eq!(errno, libc::EINVAL);
    assert!(reason.contains("'x' is not a weight"), "{reason}");
    let reply = fs.control(b"drain b\n").unwrap();
    assert!(reply.starts_with("ok tier 'b' draining"), "{reply}");
    assert_eq!(fs.placer().shares(), vec![1.0, 0.0]);
    let mut steps = 0;
    while fs.drain_step(&|| true).draining > 0 {
        steps += 1;
        assert!(steps < 10, "the drain did not finish");
    }
    assert_eq!(on_b(&fs), 0);
    let status = fs.control(b"status\n").unwrap();
    assert!(status.contains("tier b state=drained"), "{status}");
    assert!(status.contains("failures=0"), "{status}");
    for (ino, data) in &files {
        let (fh, _) = fs.open(*ino, libc::O_RDONLY).unwrap();
        let mut back = vec![0u8; data.len() + 1];
        let n = fs.read_into(fh, 0, &mut back).unwrap();
        fs.release(fh).unwrap();
        assert!(&back[..n] == data.as_slice(), "inode {ino} changed");
    }
    assert!(std::fs::read_dir(d.path().join("b/data"))
        .unwrap()
        .next()
        .is_none());
}
