//! Live control of a real mount (`tierfs ctl`, `.tierfs/control`): a paused tier gets no
//! new file and keeps serving what it holds, a drain moves every file off its tier with
//! the bytes unchanged, a weight moves the split, and every refusal reaches the caller:
//! the errno of the write, the reason read back from the same handle, and `tierfs ctl`'s
//! exit status and stderr.
mod common;
use common::*;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::process::Output;

fn ctl(m: &Mount<'_>, args: &[&str]) -> Output {
    let mp = m.root();
    let mut a = vec!["ctl", mp.to_str().unwrap()];
    a.extend_from_slice(args);
    m.setup.tierfs(&a)
}

/// `tierfs ctl` that must succeed; its stdout.
#[track_caller]
fn ctl_ok(m: &Mount<'_>, args: &[&str]) -> String {
    let o = ctl(m, args);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "tierfs ctl {args:?}: exit {:?}\n{out}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.starts_with("ok"), "tierfs ctl {args:?}: {out}");
    out
}

/// stats.json's entry for tier `name`.
fn tier(m: &Mount<'_>, name: &str) -> serde_json::Value {
    m.stats_json()["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .cloned()
        .unwrap()
}

/// Writes `n` files `prefix0..` of about 1.5 MiB (each its own bytes) and returns their
/// names and contents.
fn write_files(m: &Mount<'_>, prefix: &str, n: usize) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let name = format!("{prefix}{i}");
            let data = pattern(3 * MIB / 2 + i * 4099, (i + prefix.len() * 100) as u64);
            std::fs::write(m.path(&name), &data).unwrap();
            (name, data)
        })
        .collect()
}

#[test]
fn a_paused_tier_gets_no_new_file_and_keeps_serving_its_own() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let before = write_files(&m, "before", 6);
        let on_slow: Vec<&String> = before
            .iter()
            .map(|(n, _)| n)
            .filter(|n| s.tiers_holding(n).contains(&1))
            .collect();
        assert!(
            !on_slow.is_empty(),
            "{layout}: the slow tier got nothing at all"
        );
        let out = ctl_ok(&m, &["pause", "slow"]);
        assert!(out.contains("tier 'slow' paused"), "{out}");
        assert_eq!(tier(&m, "slow")["control"], "paused");
        assert_eq!(tier(&m, "slow")["share"], 0.0);
        let during = write_files(&m, "during", 8);
        for (n, _) in &during {
            assert_eq!(
                s.tiers_holding(n),
                vec![0],
                "{layout}: {n} while slow is paused"
            );
        }
        // What the paused tier holds stays readable and writable where it is.
        for (n, data) in &before {
            assert_eq!(&std::fs::read(m.path(n)).unwrap(), data, "{layout}: {n}");
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(m.path(on_slow[0]))
            .unwrap();
        f.write_all_at(b"still writable", 100).unwrap();
        drop(f);
        assert!(
            s.tiers_holding(on_slow[0]).contains(&1),
            "{layout}: it moved"
        );
        assert_eq!(
            &std::fs::read(m.path(on_slow[0])).unwrap()[100..114],
            b"still writable"
        );
        let out = ctl_ok(&m, &["resume", "slow"]);
        assert!(out.contains("tier 'slow' resumed"), "{out}");
        assert_eq!(tier(&m, "slow")["control"], "active");
        let after = write_files(&m, "after", 8);
        assert!(
            after.iter().any(|(n, _)| s.tiers_holding(n).contains(&1)),
            "{layout}: nothing reached the resumed tier"
        );
        m.unmount();
    }
}

#[test]
fn a_drain_moves_every_file_off_and_the_bytes_stay() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        std::fs::create_dir(m.path("d")).unwrap();
        let mut files = write_files(&m, "f", 6);
        files.extend(write_files(&m, "d/g", 4));
        let held = s.backing_bytes(1);
        assert!(held > 0, "{layout}: nothing on the slow tier to drain");
        // A file open while its tier drains: through the daemon it moves while open and
        // reads the same bytes; in kernel passthrough (opened before the drain) it cannot
        // move until closed, which the drain says and waits for.
        let (open_name, open_data) = files
            .iter()
            .find(|(n, _)| s.tiers_holding(n).contains(&1))
            .cloned()
            .unwrap();
        let mut open = std::fs::File::open(m.path(&open_name)).unwrap();
        let out = ctl_ok(&m, &["drain", "slow"]);
        assert!(out.contains("tier 'slow' draining"), "{out}");
        let mut back = Vec::new();
        open.read_to_end(&mut back).unwrap();
        assert!(back == open_data, "{layout}: the open file's bytes changed");
        let passthrough = tier(&m, "slow")["passthrough_open"].as_u64().unwrap() > 0;
        if passthrough {
            assert!(
                wait_for(20, || {
                    let t = tier(&m, "slow");
                    t["files"] == 1 && t["drain"]["failures"].as_u64().unwrap() > 0
                }),
                "{layout}: the drain did not come to the file held in passthrough: {}",
                tier(&m, "slow")
            );
            let t = tier(&m, "slow");
            let last = t["drain"]["last_error"].as_str().unwrap();
            assert!(last.starts_with(&format!("/{open_name}: ")), "{t}");
            assert!(ctl_ok(&m, &["status"]).contains("failures="));
        }
        drop(open);
        let o = ctl(&m, &["--wait", "drain", "slow"]);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(o.status.success(), "{layout}: drain --wait: {out}{err}");
        assert!(err.contains("tier 'slow' drained: 0 files"), "{err}");
        assert_eq!(
            dir_files(&s.tier_path(1).join("data")),
            Vec::<std::path::PathBuf>::new(),
            "{layout}: pieces left on the drained tier\n{}",
            piece_report(&m)
        );
        let t = tier(&m, "slow");
        assert_eq!(t["control"], "drained");
        assert_eq!(
            (t["files"].as_u64(), t["used"].as_u64()),
            (Some(0), Some(0))
        );
        assert!(t["drain"]["moved_files"].as_u64().unwrap() > 0, "{t}");
        assert_eq!(t["drain"]["moved_bytes"].as_u64().unwrap(), held, "{t}");
        for (n, data) in &files {
            assert_eq!(&std::fs::read(m.path(n)).unwrap(), data, "{layout}: {n}");
            assert_eq!(s.tiers_holding(n), vec![0], "{layout}: {n}");
        }
        // Drained: no new file lands there until resumed.
        for (n, _) in write_files(&m, "new", 4) {
            assert_eq!(s.tiers_holding(&n), vec![0], "{layout}: {n}");
        }
        let status = ctl_ok(&m, &["status"]);
        assert!(
            status.contains("tier slow state=drained") && status.contains("files=0 bytes=0"),
            "{status}"
        );
        m.unmount();
    }
}

#[test]
fn a_weight_moves_the_split_of_new_files() {
    require!(fuse());
    let s = Setup::new(
        vec![TierSpec::new("a", "1GB/s"), TierSpec::new("b", "1GB/s")],
        "whole-file",
    );
    let m = s.mount();
    assert_eq!(tier(&m, "b")["share"], 0.5);
    let out = ctl_ok(&m, &["weight", "b", "0"]);
    assert!(out.contains("tier 'b' weight 0"), "{out}");
    assert_eq!(tier(&m, "b")["weight"], 0.0);
    for (n, _) in write_files(&m, "zero", 6) {
        assert_eq!(s.tiers_holding(&n), vec![0], "{n} with b at weight 0");
    }
    ctl_ok(&m, &["weight", "b", "3"]);
    let share = tier(&m, "b")["share"].as_f64().unwrap();
    assert!(
        (share - 0.75).abs() < 1e-9,
        "b's share at weight 3: {share}"
    );
    let on_b = write_files(&m, "three", 12)
        .iter()
        .filter(|(n, _)| s.tiers_holding(n) == vec![1])
        .count();
    assert!(
        on_b >= 9,
        "{on_b} of 12 new files on b at weight 3 (a holds 6 already)"
    );
    m.unmount();
}

#[test]
fn refusals_reach_the_caller_with_errno_and_reason() {
    require!(fuse());
    let s = Setup::two("whole-file");
    let m = s.mount();
    // Through `tierfs ctl`: exit status and stderr.
    for (args, code, needles) in [
        (
            &["pause", "nosuch"][..],
            1,
            &["tierfs: error: line 1: no tier 'nosuch' in this mount (its tiers: fast, slow) (ENOENT)"][..],
        ),
        (&["weight", "fast", "lots"], 2, &["'lots' is not a weight", "(EINVAL)"]),
        (&["frobnicate"], 2, &["unknown command 'frobnicate'", "(EINVAL)"]),
    ] {
        let o = ctl(&m, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{args:?}: {err}");
        }
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    // --wait with anything but a drain is refused before the command is sent.
    let o = ctl(&m, &["--wait", "pause", "slow"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        tier(&m, "slow")["control"],
        "active",
        "a refused --wait paused the tier"
    );
    ctl_ok(&m, &["pause", "slow"]);
    let o = ctl(&m, &["pause", "fast"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("it is the last tier taking new data") && err.contains("(EBUSY)"),
        "{err}"
    );
    let o = ctl(&m, &["drain", "fast"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no other tier takes new data") && err.contains("(EBUSY)"),
        "{err}"
    );
    assert_eq!(
        tier(&m, "fast")["control"],
        "active",
        "a refusal changed nothing"
    );

    // Through a plain handle opened read-write: the write's errno, then the reason read
    // back from the same handle; the next write's reply replaces it.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path(".tierfs/control"))
        .unwrap();
    let e = f.write(b"weight slow 2\ndrain fast\n").unwrap_err();
    assert_eq!(errno(&e), libc::EBUSY);
    let mut reply = String::new();
    f.read_to_string(&mut reply).unwrap();
    assert!(
        reply.starts_with("error: line 2: cannot drain tier 'fast'"),
        "{reply}"
    );
    assert_eq!(tier(&m, "slow")["weight"], 1.0, "line 1 was not applied");
    let e = f.write(b"drain nosuch\n").unwrap_err();
    assert_eq!(errno(&e), libc::ENOENT);
    let mut reply = String::new();
    f.read_to_string(&mut reply).unwrap();
    assert!(
        reply.starts_with("error: line 1: no tier 'nosuch'"),
        "{reply}"
    );
    // Each line is checked against what the lines before it leave: a resume first makes
    // the drain possible.
    assert_eq!(f.write(b"resume slow\ndrain fast\n").unwrap(), 23);
    let mut reply = String::new();
    f.read_to_string(&mut reply).unwrap();
    assert!(reply.contains("\nok tier 'fast' draining"), "{reply}");
    assert_eq!(f.write(b"resume fast\npause slow\n").unwrap(), 23);
    let mut reply = String::new();
    f.read_to_string(&mut reply).unwrap();
    assert!(reply.contains("ok tier 'slow' paused"), "{reply}");
    assert_eq!(f.write(b"resume slow\nstatus\n").unwrap(), 19);
    let mut reply = String::new();
    f.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("ok tier 'slow' resumed"), "{reply}");
    assert!(
        reply.contains("\nok 2 tiers\ntier fast state=active"),
        "{reply}"
    );
    let mut again = String::new();
    f.read_to_string(&mut again).unwrap();
    assert_eq!(again, "", "a reply is read once");
    drop(f);
    // A write-only open (`echo cmd > .tierfs/control`) still runs commands.
    std::fs::write(m.path(".tierfs/control"), b"weight slow 2\n").unwrap();
    assert_eq!(tier(&m, "slow")["weight"], 2.0);
    m.unmount();
}

/// What `tierfs stat` (table, `--watch`, `--prom`) and `.tierfs/tiers` say of tier `slow`.
struct Views {
    table: String,
    tiers_file: String,
    watch: String,
    prom: String,
}

fn views(m: &Mount<'_>) -> Views {
    let mp = m.root();
    let mp = mp.to_str().unwrap();
    let run = |args: &[&str]| {
        let o = m.setup.tierfs(args);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "tierfs {args:?}: {out}{:?}", o.stderr);
        out
    };
    Views {
        table: run(&["stat", mp]),
        tiers_file: std::fs::read_to_string(m.path(".tierfs/tiers")).unwrap(),
        watch: run(&["stat", mp, "--watch", "0.1", "--count", "1"]),
        prom: run(&["stat", "--prom", mp]),
    }
}

/// The STATE column of `--watch`'s row for tier `slow` (the row with a SHARE).
fn watch_state(watch: &str) -> String {
    let row = watch
        .lines()
        .find(|l| l.starts_with("slow ") && l.contains('%'))
        .unwrap_or_else(|| panic!("no row for slow:\n{watch}"));
    row.rsplit_once("  ").unwrap().1.to_string()
}

/// The value of the sample of metric `name` whose labels end with `tail` (after the
/// `mountpoint` label `--prom` puts first), e.g. `tier="slow"}`; None without one.
fn prom_value(prom: &str, name: &str, tail: &str) -> Option<f64> {
    prom.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&format!(",{tail} ")))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
}

/// Whether a table or tiers file says anything of what an operator set for `slow`.
fn says_control(text: &str) -> bool {
    text.lines().any(|l| {
        l.starts_with("  slow: ")
            && (l.contains("by the operator") || l.contains("DRAIN") || l.contains("weight "))
    })
}

#[test]
fn the_state_shows_in_stat_the_tiers_file_and_the_metrics() {
    require!(fuse());
    let s = Setup::two("whole-file");
    let m = s.mount();
    write_files(&m, "f", 6);
    let state = |st: &str| format!("tier=\"slow\",state=\"{st}\"}}");
    let ctl_state =
        |prom: &str, st: &str| prom_value(prom, "tierfs_tier_control_state", &state(st));
    let of_slow = |prom: &str, name: &str| prom_value(prom, name, "tier=\"slow\"}");
    let v = views(&m);
    for text in [&v.table, &v.tiers_file] {
        assert!(
            !says_control(text),
            "a tier as at mount has no note:\n{text}"
        );
    }
    assert_eq!(watch_state(&v.watch), "ok");
    assert_eq!(ctl_state(&v.prom, "active"), Some(1.0), "{}", v.prom);
    assert_eq!(ctl_state(&v.prom, "paused"), Some(0.0));
    assert_eq!(of_slow(&v.prom, "tierfs_tier_weight"), Some(1.0));
    assert!(!v.prom.contains("tierfs_tier_drain_"), "{}", v.prom);

    ctl_ok(&m, &["pause", "slow"]);
    ctl_ok(&m, &["weight", "slow", "2"]);
    let v = views(&m);
    for text in [&v.table, &v.tiers_file] {
        let note = text
            .lines()
            .find(|l| l.starts_with("  slow: "))
            .unwrap_or_else(|| panic!("no note for slow:\n{text}"));
        assert!(
            note.contains("PAUSED by the operator: takes no new data")
                && note.contains("`tierfs ctl MOUNT resume slow` lifts it")
                && note.contains("weight 2: its bandwidth counts 2 times"),
            "{note}"
        );
        assert!(!text.contains("  fast: PAUSED"), "{text}");
    }
    assert_eq!(watch_state(&v.watch), "paused w=2", "{}", v.watch);
    assert!(
        v.watch.contains("\nslow: PAUSED by the operator"),
        "{}",
        v.watch
    );
    assert_eq!(ctl_state(&v.prom, "paused"), Some(1.0), "{}", v.prom);
    assert_eq!(ctl_state(&v.prom, "active"), Some(0.0));
    assert_eq!(of_slow(&v.prom, "tierfs_tier_weight"), Some(2.0));
    assert_eq!(
        prom_value(&v.prom, "tierfs_tier_weight", "tier=\"fast\"}"),
        Some(1.0)
    );

    // A drain: its progress, then drained with nothing left.
    let held = tier(&m, "slow")["used"].as_u64().unwrap();
    assert!(held > 0, "nothing on slow to drain");
    let o = ctl(&m, &["--wait", "drain", "slow"]);
    assert!(o.status.success(), "{:?}", o);
    let v = views(&m);
    for text in [&v.table, &v.tiers_file] {
        assert!(
            text.contains("  slow: DRAINED, ")
                && text
                    .contains(" moved off; takes no new data until `tierfs ctl MOUNT resume slow`"),
            "{text}"
        );
    }
    assert_eq!(watch_state(&v.watch), "drained w=2");
    assert_eq!(ctl_state(&v.prom, "drained"), Some(1.0));
    assert_eq!(of_slow(&v.prom, "tierfs_tier_drain_left_files"), Some(0.0));
    assert_eq!(
        of_slow(&v.prom, "tierfs_tier_drain_moved_bytes_total"),
        Some(held as f64),
        "{}",
        v.prom
    );

    // Resumed at weight 1: as at mount again.
    ctl_ok(&m, &["resume", "slow"]);
    ctl_ok(&m, &["weight", "slow", "1"]);
    let v = views(&m);
    for text in [&v.table, &v.tiers_file] {
        assert!(!says_control(text), "{text}");
    }
    assert_eq!(watch_state(&v.watch), "ok");
    assert_eq!(ctl_state(&v.prom, "active"), Some(1.0));
    assert_eq!(ctl_state(&v.prom, "drained"), Some(0.0));
    m.unmount();
}
