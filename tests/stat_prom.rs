//! `tierfs stat --prom` on a real mount: the mount's metrics with a mountpoint label (and
//! the --label ones) on every sample, written to a node_exporter textfile whole and readable
//! by another user even under umask 077; refusals for a label clash and a non-mount.
mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn stat_prom_labels_every_sample_and_writes_the_file_whole() {
    if !fuse_available() {
        return;
    }
    let s = Setup::two("stripe");
    let m = s.mount();
    std::fs::write(m.path("a.bin"), pattern(3 << 20, 1)).unwrap();
    let mnt = m.root();
    let mnt_s = mnt.to_str().unwrap();

    // To stdout: the same families as .tierfs/metrics, each sample labelled.
    let o = s.tierfs(&["stat", "--prom", mnt_s]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let raw = std::fs::read_to_string(m.path(".tierfs/metrics")).unwrap();
    let names = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.starts_with("# TYPE "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(names(&out), names(&raw));
    let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(samples.len() > 10, "{out}");
    let label = format!("mountpoint=\"{mnt_s}\"");
    for l in &samples {
        assert!(l.contains(&label), "unlabelled sample: {l}");
    }
    assert!(
        out.contains(&format!(
            "tierfs_tier_written_bytes_total{{{label},tier=\"fast\"}}"
        )),
        "{out}"
    );

    // To a textfile, as a timer would (umask 077, as on many clusters).
    let dir = s.dir.path().join("textfile");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("tierfs-someone.prom");
    let o = Command::new("sh")
        .arg("-c")
        .arg(
            "umask 077; exec \"$0\" stat --prom \"$1\" --label job=42 --label node=n1 --out \"$2\"",
        )
        .arg(tierfs_bin())
        .arg(&mnt)
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty());
    let text = std::fs::read_to_string(&file).unwrap();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(
            l.contains(&format!("{{{label},job=\"42\",node=\"n1\"")),
            "{l}"
        );
    }
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "{mode:o}");
    let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(entries.len(), 1, "a temporary file was left behind");

    // A label every sample already has is refused, and nothing is written.
    let o = s.tierfs(&[
        "stat",
        "--prom",
        mnt_s,
        "--label",
        "tier=x",
        "--out",
        "/nonexistent/x",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already has a label \"tier\""),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = s.tierfs(&["stat", "--prom", mnt_s, "--label", "mountpoint=x"]);
    assert_eq!(o.status.code(), Some(2));
    let o = s.tierfs(&["stat", mnt_s, "--label", "job=1"]);
    assert_eq!(o.status.code(), Some(2), "--label without --prom");
    m.unmount();

    // The mount is gone: exit 1 and the old file stays as it was (a timer loop stops on it).
    let before = std::fs::read(&file).unwrap();
    let o = s.tierfs(&["stat", "--prom", mnt_s, "--out", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("a tierfs mount?"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read(&file).unwrap(), before);
}
