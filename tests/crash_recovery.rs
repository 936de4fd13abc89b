//! Crash recovery: `kill -9` the daemon while threads and a separate process write files
//! through the mount (O_DIRECT and buffered, striped and whole files, some fsynced), then
//! `tierfs mount` must report the dead mount, `tierfs mount --force` must bring it back
//! without manual repair, every fsynced (and every completed) file must be intact, every
//! file caught mid-write must hold only its own bytes (a prefix for sequential writers,
//! its own bytes or zeros per sector for parallel O_DIRECT writers), and `tierfs fsck` must
//! find the tiers consistent after the unmount. Three rounds, killed at different points.

mod common;

use common::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// How a writer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// O_DIRECT, 1 MiB requests from two threads on one descriptor (DeepSpeed's way), odd
    /// tail through a buffered descriptor. Bytes may land out of order.
    Direct,
    /// One buffered descriptor, sequential odd-sized writes: what lands is a prefix.
    Buffered,
}

/// A file some writer began.
#[derive(Debug, Clone)]
struct Job {
    rel: String,
    seed: u64,
    len: usize,
    how: How,
}

impl Job {
    fn data(&self) -> Vec<u8> {
        pattern(self.len, self.seed)
    }
}

#[derive(Default)]
struct Log {
    /// Every file a writer began, in order.
    started: Mutex<Vec<Job>>,
    /// Files whose writes and close returned: every byte acknowledged.
    completed: Mutex<Vec<Job>>,
    /// Files completed and fsynced.
    fsynced: Mutex<Vec<Job>>,
    stop: AtomicBool,
}

fn write_direct(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let body = data.len() / 4096 * 4096;
    let f = open_flags(path, libc::O_WRONLY | libc::O_CREAT | libc::O_DIRECT, 0o644)?;
    let half = (body / 2).div_ceil(4096) * 4096;
    std::thread::scope(|s| -> std::io::Result<()> {
        let parts = [(0, half.min(body)), (half.min(body), body)];
        let hs: Vec<_> = parts
            .iter()
            .map(|&(start, end)| {
                let f = &f;
                s.spawn(move || -> std::io::Result<()> {
                    let mut off = start;
                    while off < end {
                        let n = (end - off).min(MIB);
                        let buf = aligned(&data[off..off + n]);
                        let w = std::os::unix::fs::FileExt::write_at(f, &buf, off as u64)?;
                        if w != n {
                            return Err(std::io::Error::other(format!("short write {w} of {n}")));
                        }
                        off += n;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap()?;
        }
        Ok(())
    })?;
    if body < data.len() {
        let t = open_flags(path, libc::O_WRONLY, 0)?;
        std::os::unix::fs::FileExt::write_all_at(&t, &data[body..], body as u64)?;
    }
    Ok(())
}

fn write_buffered(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    for chunk in data.chunks(256 * 1024 + 13) {
        f.write_all(chunk)?;
    }
    Ok(())
}

/// Writes files under `dir` until the mount dies (or `stop`): every other one fsynced.
fn writer(root: &Path, dir: &str, how: How, seed0: u64, log: &Log) {
    if std::fs::create_dir_all(root.join(dir)).is_err() {
        return; // not a skip: the mount died before the first file
    }
    let sizes = [
        MIB + 4096,
        2 * MIB + 123,
        512 * 1024 + 7,
        3 * MIB,
        64 * 1024 + 1,
    ];
    for n in 0.. {
        if log.stop.load(Ordering::Relaxed) {
            return; // not a skip: stopped
        }
        let job = Job {
            rel: format!("{dir}/f{n}"),
            seed: seed0 + n as u64,
            len: sizes[n % sizes.len()],
            how,
        };
        log.started.lock().unwrap().push(job.clone());
        let path = root.join(&job.rel);
        let data = job.data();
        let r = match how {
            How::Direct => write_direct(&path, &data),
            How::Buffered => write_buffered(&path, &data),
        };
        if r.is_err() {
            return; // not a skip: the mount died mid-write
        }
        log.completed.lock().unwrap().push(job.clone());
        if n % 2 == 0 {
            let synced = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|f| f.sync_all());
            if synced.is_err() {
                return; // not a skip: the mount died at fsync
            }
            log.fsynced.lock().unwrap().push(job);
        }
    }
}

fn kill9(pid: u32) {
    let st = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -9 {pid}");
    assert!(
        wait_for(60, || !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.contains(") Z"))
                .unwrap_or(true)),
        "daemon {pid} did not die"
    );
}

/// The errno of statfs(2) on `p` (0 when it succeeds).
fn statfs_errno(p: &Path) -> i32 {
    match tierfs::sys::statvfs(p) {
        Ok(_) => 0,
        Err(e) => errno(&e),
    }
}

/// What a file caught by the crash may hold: its own bytes, as a prefix (sequential
/// writers) or per 512-byte sector its own bytes or zeros (parallel O_DIRECT writers).
fn check_partial(job: &Job, got: &[u8]) {
    let want = job.data();
    assert!(
        got.len() <= want.len(),
        "{}: {} bytes, longer than the {} written",
        job.rel,
        got.len(),
        want.len()
    );
    match job.how {
        How::Buffered => assert!(
            got == &want[..got.len()],
            "{}: {} bytes that are not a prefix of what was written",
            job.rel,
            got.len()
        ),
        How::Direct => {
            for (k, sector) in got.chunks(512).enumerate() {
                let w = &want[k * 512..k * 512 + sector.len()];
                assert!(
                    sector == w || sector.iter().all(|b| *b == 0),
                    "{}: sector {k} holds neither its own bytes nor zeros",
                    job.rel
                );
            }
        }
    }
}

#[test]
fn kill_9_mid_write_then_force_mount_recovers_every_synced_byte() {
    require!(fuse());
    let mut s = Setup::two("stripe");
    // (layout, fsynced files to wait for before the kill, extra delay)
    let rounds = [
        ("stripe", 1, 0u64),
        ("whole-file", 6, 0),
        ("stripe", 12, 30),
    ];
    // Every file that must survive whole, over all rounds.
    let mut must_survive: Vec<Job> = Vec::new();
    // Every file begun, over all rounds.
    let mut begun: Vec<Job> = Vec::new();
    for (round, (layout, kill_after, delay_ms)) in rounds.into_iter().enumerate() {
        s.layout = layout.into();
        let m = s.mount();
        let root = m.root();
        let log = Log::default();
        // A separate process copies files with dd ... conv=fsync; it prints each one's
        // number once dd has fsynced and exited.
        let top = format!("r{round}");
        std::fs::create_dir_all(m.path(&top)).unwrap();
        let src_dir = s.dir.path().join(format!("src{round}"));
        std::fs::create_dir_all(&src_dir).unwrap();
        let mut dd_jobs = Vec::new();
        for i in 0..24 {
            let job = Job {
                rel: format!("{top}/dd{i}"),
                seed: 900_000 + round as u64 * 1000 + i,
                len: MIB + 333 * i as usize,
                how: How::Buffered,
            };
            std::fs::write(src_dir.join(format!("{i}")), job.data()).unwrap();
            dd_jobs.push(job);
        }
        let script = format!(
            "for i in $(seq 0 23); do dd if={src}/$i of={dst}/dd$i bs=256k conv=fsync status=none || exit 0; echo $i; done",
            src = q(&src_dir),
            dst = q(&m.path(&top))
        );
        let dd = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = m.daemon_pid();
        std::thread::scope(|sc| {
            let writers = [How::Direct, How::Direct, How::Buffered, How::Buffered];
            for (w, how) in writers.into_iter().enumerate() {
                let (root, log, top) = (&root, &log, &top);
                sc.spawn(move || {
                    writer(
                        root,
                        &format!("{top}/w{w}"),
                        how,
                        (round as u64 * 100 + w as u64) * 10_000,
                        log,
                    )
                });
            }
            assert!(
                wait_for(300, || log.fsynced.lock().unwrap().len() >= kill_after),
                "round {round}: writers did not fsync {kill_after} files"
            );
            std::thread::sleep(Duration::from_millis(delay_ms));
            kill9(pid);
            log.stop.store(true, Ordering::Relaxed);
        });
        m.disarm();
        let dd_out = dd.wait_with_output().unwrap();
        let dd_done: Vec<usize> = String::from_utf8_lossy(&dd_out.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        let completed = log.completed.lock().unwrap().clone();
        let fsynced = log.fsynced.lock().unwrap().len();
        let started = log.started.lock().unwrap().clone();
        eprintln!(
            "round {round} ({layout}): killed after {fsynced} fsynced, {} completed, {} started \
             by threads; dd finished {}",
            completed.len(),
            started.len(),
            dd_done.len()
        );

        // The dead mount is reported, with the way out.
        assert!(
            wait_for(60, || statfs_errno(&s.mountpoint()) == libc::ENOTCONN),
            "round {round}: the dead mount does not answer ENOTCONN"
        );
        let o = s.mount_output(&[]);
        assert_eq!(o.status.code(), Some(1), "round {round}:\n{}", text(&o));
        assert!(text(&o).contains("--force"), "{}", text(&o));
        let o = s.mount_output(&["--force"]);
        assert!(
            o.status.success(),
            "round {round}: mount --force:\n{}",
            text(&o)
        );
        let m = s.adopt();
        assert_ne!(m.daemon_pid(), pid);

        // Completed files (fsynced or not: the daemon keeps no write-back cache) are whole,
        // this round's and every earlier round's.
        must_survive.extend(completed.iter().cloned());
        must_survive.extend(dd_done.iter().map(|i| dd_jobs[*i].clone()));
        for job in &must_survive {
            let got = std::fs::read(m.path(&job.rel))
                .unwrap_or_else(|e| panic!("round {round}: {}: {e}", job.rel));
            assert!(
                got == job.data(),
                "round {round}: {} ({:?}) acknowledged before the kill: {} bytes, want {}",
                job.rel,
                job.how,
                got.len(),
                job.len
            );
        }
        // Files caught mid-write hold only their own bytes; nothing else appeared.
        begun.extend(started.iter().cloned());
        begun.extend(dd_jobs.iter().cloned());
        let mut torn = 0;
        for n in snapshot_tree(&m.root()) {
            let rel = n.rel.to_string_lossy().into_owned();
            if n.kind == "dir" {
                continue;
            }
            let Some(job) = begun.iter().find(|j| j.rel == rel) else {
                panic!("round {round}: unexpected {} {rel} after the crash", n.kind);
            };
            assert_eq!(n.kind, "file", "round {round}: {rel}");
            check_partial(job, &n.data);
            if !n.data.is_empty() && n.data.len() < job.len {
                torn += 1;
            }
        }
        eprintln!("round {round}: {torn} files caught mid-write hold part of their bytes");
        assert_no_stale(&m);
        m.unmount();
        let cfg = s.write_config();
        let o = s.tierfs(&["fsck", "--config", cfg.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "round {round}: fsck after recovery:\n{}",
            text(&o)
        );
    }
    // The recovered tiers export to the same bytes.
    let dest: PathBuf = s.dir.path().join("export");
    let cfg = s.write_config();
    let o = s.tierfs(&[
        "export",
        "--config",
        cfg.to_str().unwrap(),
        dest.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "export:\n{}", text(&o));
    for job in &must_survive {
        assert!(
            std::fs::read(dest.join(&job.rel)).unwrap() == job.data(),
            "export: {}",
            job.rel
        );
    }
}
