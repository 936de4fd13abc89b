//! A tier shared by the nodes of a job (issue #17, docs/SHARED-TIER.md), with real mounts:
//! two daemons ("nodes") on this machine, each with a fast tier of its own and a per-node
//! folder of one shared slow tier, meet in one ledger folder. Each must take half of the
//! shared tier while both live, take it all back within 30 s of the other's kill -9 (whose
//! clock runs an hour ahead, so its ledger file's mtime says "fresh" all along), ignore
//! garbage in the ledger with a warning, and run on its own figures with one warning when
//! the ledger cannot be written.
mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

/// One simulated node: its own temp dir (fast tier, mountpoint, log), a per-node folder in
/// the shared tier, and a name in the ledger.
struct Node {
    s: Setup,
    name: String,
}

impl Node {
    fn new(name: &str) -> Node {
        Node {
            s: Setup::new(Vec::new(), "whole-file"),
            name: name.into(),
        }
    }

    fn config(&self, shared: &Path, ledger: &Path) -> String {
        format!(
            "[[tier]]\nname = \"nvme\"\npath = \"{d}/nvme\"\ncreate = true\n\
             read_bandwidth = \"2GB/s\"\nwrite_bandwidth = \"2GB/s\"\n\
             [[tier]]\nname = \"pfs\"\npath = \"{shared}/{n}\"\ncreate = true\n\
             read_bandwidth = \"1GB/s\"\nwrite_bandwidth = \"1GB/s\"\n\
             shared_ledger = \"{ledger}\"\nshared_job = \"${{TIERFS_TEST_JOB}}\"\n\
             shared_node = \"{n}\"\n\
             [mount]\nlog_file = \"{log}\"\n[cache]\nsize = \"off\"\n",
            d = self.s.dir.path().display(),
            shared = shared.display(),
            n = self.name,
            ledger = ledger.display(),
            log = self.s.log_path().display(),
        )
    }

    /// Mounts with `env` set for the daemon.
    fn mount(&self, shared: &Path, ledger: &Path, env: &[(&str, &str)]) -> Mount<'_> {
        let cfg = self.s.config_path();
        std::fs::write(&cfg, self.config(shared, ledger)).unwrap();
        std::fs::create_dir_all(self.s.mountpoint()).unwrap();
        let out = Command::new(tierfs_bin())
            .args(["mount", "--config"])
            .arg(&cfg)
            .arg(self.s.mountpoint())
            .env("TIERFS_TEST_JOB", "job42")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount {}: {}\nlog:\n{}",
            self.name,
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        self.s.adopt()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.s.log_path()).unwrap_or_default()
    }
}

/// The shared tier's entry in stats.json: (live nodes, this node's part in bytes/s, the
/// tier's Eq. 1 share, coordinated).
type View = (u64, f64, f64, bool);

fn shared_view(m: &Mount<'_>) -> View {
    let st = m.stats_json();
    let t = &st["tiers"][1];
    let sh = &t["shared"];
    (
        sh["live_nodes"].as_u64().unwrap_or(0),
        sh["allot_bps"].as_f64().unwrap_or(0.0),
        t["share"].as_f64().unwrap(),
        sh["coordinated"].as_bool().unwrap_or(false),
    )
}

/// Waits up to `secs` for `m`'s view to show `live` nodes and the Eq. 1 share of the
/// shared tier to follow (the estimator recomputes the shares a period after the ledger
/// thread's view changed); returns the view, or the last one seen as the error.
fn wait_live(m: &Mount<'_>, live: u64, share: f64, secs: u64) -> Result<View, View> {
    let mut last = shared_view(m);
    if wait_for(secs, || {
        last = shared_view(m);
        last.0 == live && close(last.2, share)
    }) {
        Ok(last)
    } else {
        Err(last)
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.01
}

#[test]
fn two_nodes_split_the_shared_tier_and_survive_a_kill_garbage_and_skewed_clocks() {
    require!(fuse());
    let shared_dir = tempfile::Builder::new()
        .prefix("tierfs-test-pfs-")
        .tempdir_in(std::env::var_os("TIERFS_TEST_DIR").unwrap_or_else(|| "/tmp".into()))
        .unwrap();
    let shared = shared_dir.path().join("pfs");
    let ledger = shared_dir.path().join("ledger");
    std::fs::create_dir_all(&shared).unwrap();
    let dir = ledger.join("job42").join("pfs");

    let a = Node::new("alpha");
    let b = Node::new("beta");
    let ma = a.mount(&shared, &ledger, &[]);
    // Alone: the whole shared tier (1 GB/s next to 2 GB/s: a third of the bytes).
    let v = wait_live(&ma, 1, 1.0 / 3.0, 10).expect("alpha never saw itself in the ledger");
    assert!(v.3 && close(v.1, 1e9) && close(v.2, 1.0 / 3.0), "{v:?}");

    // beta's clock runs an hour ahead: its ledger file's mtime is in the future.
    let mb = b.mount(
        &shared,
        &ledger,
        &[(tierfs::coord::CLOCK_OFFSET_ENV, "3600")],
    );
    let va = wait_live(&ma, 2, 0.2, 15).expect("alpha never saw beta");
    let vb = wait_live(&mb, 2, 0.2, 15).expect("beta never saw alpha");
    for v in [va, vb] {
        // Half the tier each: 0.5 GB/s next to 2 GB/s is a fifth of the bytes.
        assert!(close(v.1 / 1e9, 0.5) && close(v.2, 0.2), "{v:?}");
    }
    let b_file = dir.join("node-beta.json");
    let mtime = std::fs::metadata(&b_file).unwrap().modified().unwrap();
    assert!(
        mtime > SystemTime::now() + Duration::from_secs(3000),
        "the injected clock offset did not reach beta's ledger file"
    );

    // Garbage and a torn entry in the ledger: warned about, never read, nobody crashes.
    std::fs::write(dir.join("node-junk.json"), b"\x00\x01 not an entry").unwrap();
    let torn = std::fs::read_to_string(dir.join("node-alpha.json")).unwrap();
    std::fs::write(dir.join("node-torn.json"), &torn[..torn.len() / 2]).unwrap();
    assert!(
        wait_for(10, || {
            let l = a.log();
            l.contains("node-junk.json ignored") && l.contains("node-torn.json ignored")
        }),
        "alpha did not warn about the garbage:\n{}",
        a.log()
    );
    std::thread::sleep(Duration::from_secs(2));
    let warned = a.log().matches("node-junk.json ignored").count();
    assert_eq!(warned, 1, "one warning per bad file, not one per period");
    assert!(a.log().contains("WARN"));
    assert_eq!(shared_view(&ma).0, 2);
    assert_eq!(shared_view(&mb).0, 2);

    // kill -9 beta: alpha takes the whole tier back within 30 s, although beta's file
    // stays there with an mtime an hour ahead (only the sequence number counts).
    let pid = mb.daemon_pid();
    mb.disarm();
    // SAFETY: kill(2) with a pid and a signal number has no memory effects.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let killed = Instant::now();
    let v = wait_live(&ma, 1, 1.0 / 3.0, 30).expect("alpha did not take beta's share back in 30 s");
    let took = killed.elapsed();
    assert!(close(v.1 / 1e9, 1.0), "{v:?}");
    eprintln!("alpha took the shared tier back {took:?} after kill -9 of beta");
    assert!(b_file.exists(), "nobody deletes another node's entry");

    // The daemon still serves files, on both tiers.
    for i in 0..6 {
        std::fs::write(ma.path(&format!("f{i}")), pattern(1 << 20, i)).unwrap();
    }
    for i in 0..6 {
        assert_eq!(
            std::fs::read(ma.path(&format!("f{i}"))).unwrap(),
            pattern(1 << 20, i)
        );
    }
    // The dead mount is cleared; a clean unmount takes alpha out of the ledger.
    let out = b.s.tierfs(&["unmount", b.s.mountpoint().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ma.unmount();
    assert!(!dir.join("node-alpha.json").exists());
}

#[test]
fn an_unwritable_ledger_leaves_the_node_on_its_own_figures_with_one_warning() {
    require!(fuse());
    let a = Node::new("alpha");
    let shared: PathBuf = a.s.dir.path().join("pfs");
    std::fs::create_dir_all(&shared).unwrap();
    // A file where the ledger folder should be: no one can write there, root included.
    let blocker = a.s.dir.path().join("blocker");
    std::fs::write(&blocker, b"").unwrap();
    let m = a.mount(&shared, &blocker.join("ledger"), &[]);
    std::thread::sleep(Duration::from_secs(4));
    let v = shared_view(&m);
    assert!(!v.3 && v.0 == 0, "{v:?}");
    // Its own figures: a third of the bytes on the 1 GB/s tier.
    assert!(close(v.2, 1.0 / 3.0), "{v:?}");
    assert_eq!(
        a.log().matches("cannot be written").count(),
        1,
        "one warning, not one per period:\n{}",
        a.log()
    );
    std::fs::write(m.path("f"), b"still works").unwrap();
    assert_eq!(std::fs::read(m.path("f")).unwrap(), b"still works");
    m.unmount();
}
