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
                    0 => fs.control(b"flush f\n").unwrap(),
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
