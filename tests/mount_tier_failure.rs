//! A tier whose filesystem turns read-only mid-run (a real fault below tierfs, made with
//! ../shared/tierbed's `fail`): files on it stay readable, a rewrite moves the file to the
//! healthy tier with every byte, new files avoid it, and the stats show it failed.
//! Needs root, loop devices and ../shared/tierbed; says SKIP otherwise.
mod common;
use common::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tierbed() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tierbed/tierbed.sh");
    p.exists().then_some(p)
}

struct Tb {
    script: PathBuf,
    name: String,
}

impl Tb {
    fn up(script: &Path, name: &str, mnt: &Path) -> Option<Tb> {
        // A tier left by an interrupted earlier run would refuse `up`.
        let _ = Command::new("bash")
            .arg(script)
            .args(["down", name, "--purge"])
            .env("TIERBED_HOME", "/var/lib/tierbed-tests")
            .output();
        let out = Command::new("bash")
            .arg(script)
            .args(["up", name, "1", "0", "0"])
            .arg(mnt)
            .args(["--ram", "--force"])
            .env("TIERBED_HOME", "/var/lib/tierbed-tests")
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "SKIP: tierbed up failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        Some(Tb {
            script: script.to_path_buf(),
            name: name.into(),
        })
    }
    fn fail(&self) {
        let st = Command::new("bash")
            .arg(&self.script)
            .args(["fail", &self.name])
            .env("TIERBED_HOME", "/var/lib/tierbed-tests")
            .status()
            .unwrap();
        assert!(st.success(), "tierbed fail");
    }
}

impl Drop for Tb {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .args(["down", &self.name, "--purge"])
            .env("TIERBED_HOME", "/var/lib/tierbed-tests")
            .output();
    }
}

#[test]
fn read_only_tier_keeps_data_and_moves_rewrites() {
    if !fuse_available() {
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: needs root (loop devices for a real failing tier)");
        return;
    }
    let Some(script) = tierbed() else {
        eprintln!("SKIP: ../shared/tierbed/tierbed.sh not found");
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let (ma, mb) = (base.path().join("a"), base.path().join("b"));
    let Some(_ta) = Tb::up(&script, "tfs-test-a", &ma) else {
        return;
    };
    let Some(tb) = Tb::up(&script, "tfs-test-b", &mb) else {
        return;
    };

    // The harness only provides the temp dir, log and mountpoint: the tiers' folders are
    // on the loop-mounted filesystems.
    let s = Setup::two("whole-file");
    let cfg = format!(
        "[[tier]]\nname = \"fast\"\npath = \"{}/t\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [[tier]]\nname = \"slow\"\npath = \"{}/t\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [placement]\nlayout = \"whole-file\"\n\
         [mount]\nlog_file = \"{}\"\npassthrough = \"off\"\n",
        ma.display(),
        mb.display(),
        s.log_path().display()
    );
    std::fs::create_dir_all(s.mountpoint()).unwrap();
    std::fs::write(s.config_path(), &cfg).unwrap();
    let out = Command::new(tierfs_bin())
        .args(["mount", "--config"])
        .arg(s.config_path())
        .arg(s.mountpoint())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mnt = s.mountpoint();
    // Declared after the tiers, so it is dropped (unmounted) before they are taken down,
    // also when an assertion fails.
    let _mounted = Unmount(mnt.clone());

    let mut content = Vec::new();
    for i in 0..4u64 {
        let d = pattern(3_000_000, i);
        std::fs::write(mnt.join(format!("f{i}")), &d).unwrap();
        content.push(d);
    }
    let on_slow: Vec<usize> = (0..4)
        .filter(|i| mb.join("t/data").join(format!("f{i}")).exists())
        .collect();
    assert!(
        !on_slow.is_empty(),
        "placement put nothing on the second tier"
    );

    tb.fail();

    // Every file still reads back whole.
    for (i, d) in content.iter().enumerate() {
        assert_eq!(
            &std::fs::read(mnt.join(format!("f{i}"))).unwrap(),
            d,
            "f{i} after the fault"
        );
    }
    // Appending to a file on the failed tier succeeds: the file moves with its bytes.
    for &i in &on_slow {
        let extra = pattern(1_000_000, 100 + i as u64);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(mnt.join(format!("f{i}")))
            .unwrap();
        f.write_all(&extra).unwrap();
        drop(f);
        content[i].extend_from_slice(&extra);
        assert_eq!(
            std::fs::read(mnt.join(format!("f{i}"))).unwrap(),
            content[i],
            "f{i} after the move"
        );
    }
    // New files avoid the failed tier; the stats say it failed.
    for i in 0..4 {
        std::fs::write(mnt.join(format!("new{i}")), b"fresh").unwrap();
        assert!(!mb.join("t/data").join(format!("new{i}")).exists());
    }
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(mnt.join(".tierfs/stats.json")).unwrap())
            .unwrap();
    assert_eq!(stats["tiers"][1]["healthy"], serde_json::Value::Bool(false));
    assert_eq!(stats["tiers"][0]["healthy"], serde_json::Value::Bool(true));
    assert!(stats["tiers"][1]["errors"].as_u64().unwrap() > 0);
    let log = std::fs::read_to_string(s.log_path()).unwrap_or_default();
    assert!(
        log.contains("moving the file to another tier"),
        "log: {log}"
    );
}

struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let ok = Command::new(tierfs_bin())
            .arg("unmount")
            .arg(&self.0)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}
