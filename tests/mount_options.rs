//! Issue 42: `tierfs mount -o` and the daemon's own metrics textfile, on real mounts.
//!
//! Mount options are config keys (`threads=12`, `tier.NAME.path=DIR`) applied over the
//! config file, or standing in for it; each mount here checks that the keys took effect
//! where the mount shows them (`.tierfs/config`, `.tierfs/stats.json`, the tiers holding a
//! file's stripes). `[metrics] textfile` makes the daemon write `tierfs stat --prom`'s text
//! to a file: it is there once the mount returns, parses as Prometheus text with every
//! sample labelled, follows the mount's I/O, is replaced whole (a reader never sees a part)
//! and written once more at unmount; also for a mount by an ordinary user.
mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Output};

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `-o` items that give `s`'s tiers, as its config file would (bandwidths stated, the
/// folders created), with its log file and no staging memory.
fn tier_options(s: &Setup) -> String {
    let mut items = Vec::new();
    for (i, t) in s.tiers.iter().enumerate() {
        let n = &t.name;
        items.push(format!("tier.{n}.path={}", s.tier_path(i).display()));
        items.push(format!("tier.{n}.create=true"));
        if let Some(bw) = &t.bandwidth {
            items.push(format!("tier.{n}.write_bandwidth={bw}"));
            items.push(format!("tier.{n}.read_bandwidth={bw}"));
        }
    }
    items.push(format!("log_file={}", s.log_path().display()));
    items.push("size=off".into());
    items.join(",")
}

/// The mount's effective config (`.tierfs/config`).
fn effective(m: &Mount) -> String {
    std::fs::read_to_string(m.path(".tierfs/config")).unwrap()
}

#[test]
fn options_alone_mount_without_a_config_file() {
    require!(fuse());
    let s = Setup::two("stripe");
    std::fs::create_dir_all(s.mountpoint()).unwrap();
    let o = Command::new(tierfs_bin())
        .arg("mount")
        .args(["-o", &tier_options(&s)])
        .args(["-o", "layout=stripe,stripe_unit=256KiB,mount.threads=12"])
        .arg(s.mountpoint())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!s.config_path().exists());
    let m = s.adopt();
    let cfg = effective(&m);
    for line in [
        "# Source: \"mount options\"",
        "threads = 12",
        "layout = \"stripe\"",
        "stripe_unit = \"256KiB\"",
        "size = \"off\"",
    ] {
        assert!(cfg.lines().any(|l| l == line), "{line} not in:\n{cfg}");
    }
    let st = m.stats_json();
    let names: Vec<&str> = st["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fast", "slow"]);
    // 256 KiB stripes over both tiers: a 3 MiB file has pieces on each.
    let data = pattern(3 << 20, 7);
    std::fs::write(m.path("a.bin"), &data).unwrap();
    assert!(std::fs::read(m.path("a.bin")).unwrap() == data);
    assert_eq!(s.tiers_holding("a.bin"), [0, 1]);
    // mount(8) and fstab see the source an fstab line without a file gives.
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mp = std::fs::canonicalize(s.mountpoint()).unwrap();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == mp.to_str())
        .unwrap();
    assert!(line.contains(" - fuse.tierfs tierfs "), "{line}");
    m.unmount();
}

#[test]
fn options_override_the_config_file() {
    require!(fuse());
    let s = Setup::two("whole-file");
    let o = s.mount_output(&[
        "-o",
        "threads=7,tier.slow.capacity=1GiB",
        "-o",
        "passthrough=off,cache.size=64MiB",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let m = s.adopt();
    let cfg = effective(&m);
    for line in [
        "threads = 7",
        "passthrough = \"off\"",
        "capacity = \"1GiB\"",
        "size = \"64MiB\"",
        // From the file, untouched.
        "layout = \"whole-file\"",
    ] {
        assert!(cfg.lines().any(|l| l == line), "{line} not in:\n{cfg}");
    }
    // The capacity is the slow tier's, and the daemon runs with it and without passthrough.
    let st = m.stats_json();
    assert_eq!(st["tiers"][1]["capacity"], 1u64 << 30, "{st}");
    assert!(st["tiers"][0]["capacity"].is_null(), "{st}");
    assert_eq!(st["passthrough"], false, "{st}");
    m.unmount();
}

/// Prometheus text exposition (0.0.4) as node_exporter's textfile collector reads it:
/// every sample after its family's `# TYPE`, names and label names as allowed, label values
/// quoted, a number for a value, a newline at the end. Returns the samples as
/// (name with labels, value).
fn parse_exposition(t: &str) -> Result<Vec<(String, f64)>, String> {
    if !t.ends_with('\n') {
        return Err("no newline at the end".into());
    }
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars().enumerate().all(|(i, c)| {
                c == '_' || c == ':' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut typed = Vec::new();
    let mut out = Vec::new();
    for l in t.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or(format!("bad TYPE: {l}"))?;
            if !ident(name) || !["counter", "gauge"].contains(&kind) {
                return Err(format!("bad TYPE: {l}"));
            }
            typed.push(name.to_string());
            continue;
        }
        if l.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = l.rsplit_once(' ').ok_or(format!("no value: {l}"))?;
        let v: f64 = value.parse().map_err(|_| format!("bad value: {l}"))?;
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.strip_suffix('}').ok_or(format!("bad labels: {l}"))?),
            None => (series, ""),
        };
        if !ident(name) || !typed.iter().any(|t| t == name) {
            return Err(format!("sample without its # TYPE: {l}"));
        }
        let mut rest = labels;
        while !rest.is_empty() {
            let (k, after) = rest.split_once("=\"").ok_or(format!("bad label: {l}"))?;
            if !ident(k) {
                return Err(format!("bad label name {k:?}: {l}"));
            }
            let b = after.as_bytes();
            let mut i = 0;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            rest = after.get(i + 1..).ok_or(format!("unclosed label: {l}"))?;
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
        out.push((series.to_string(), v));
    }
    Ok(out)
}

/// The value of the sample `series` in a textfile.
fn sample(samples: &[(String, f64)], series: &str) -> Option<f64> {
    samples.iter().find(|(s, _)| s == series).map(|(_, v)| *v)
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn daemon_writes_the_metrics_textfile() {
    require!(fuse());
    let mut s = Setup::two("stripe");
    let dir = s.dir.path().join("node_exporter");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("tierfs.prom");
    s.extra = format!(
        "[metrics]\ntextfile = \"{}\"\ntextfile_interval = 0.5\n",
        file.display()
    );
    let m = s.mount();
    // Written before the mount returned.
    let first = std::fs::read_to_string(&file).expect("no textfile once mounted");
    let samples = parse_exposition(&first).unwrap_or_else(|e| panic!("{e}:\n{first}"));
    let mnt = s.mountpoint();
    let label = format!("mountpoint=\"{}\"", mnt.display());
    assert!(samples.len() > 10, "{first}");
    for (series, _) in &samples {
        assert!(series.contains(&label), "unlabelled: {series}");
    }
    let files = format!("tierfs_files{{{label}}}");
    assert_eq!(sample(&samples, &files), Some(0.0), "{first}");
    // The families are the mount's own (what `tierfs stat --prom` prints).
    let types = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.starts_with("# TYPE"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        types(&first),
        types(&std::fs::read_to_string(m.path(".tierfs/metrics")).unwrap())
    );

    // A reader loop beside the daemon's rewrites: every read is a whole file.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (stop, file) = (stop.clone(), file.clone());
        std::thread::spawn(move || {
            let mut reads = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = std::fs::read_to_string(&file).expect("the textfile vanished");
                if let Err(e) = parse_exposition(&t) {
                    panic!("a reader saw a partial textfile ({e}):\n{t}");
                }
                reads += 1;
            }
            reads
        })
    };
    let data = pattern(3 << 20, 3);
    std::fs::write(m.path("a.bin"), &data).unwrap();
    let updated = wait_for(30, || {
        let t = std::fs::read_to_string(&file).unwrap();
        sample(&parse_exposition(&t).unwrap(), &files) == Some(1.0)
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().expect("the reader saw a partial file");
    assert!(updated, "the textfile never counted the new file");
    assert!(reads > 0);
    assert_eq!(entries(&dir), ["tierfs.prom"], "a temporary file was left");
    let written = format!("tierfs_tier_used_bytes{{{label},tier=\"fast\"}}");
    m.unmount();
    // Written once more at unmount, whole, and nothing else left in the folder.
    let last = std::fs::read_to_string(&file).unwrap();
    let samples = parse_exposition(&last).unwrap_or_else(|e| panic!("{e}:\n{last}"));
    assert_eq!(sample(&samples, &files), Some(1.0), "{last}");
    assert!(
        sample(&samples, &written).is_some_and(|v| v > 0.0),
        "{last}"
    );
    assert_eq!(entries(&dir), ["tierfs.prom"]);
}

/// An ordinary user's mount, with the tiers and the textfile given on the command line
/// alone: the daemon, running as that user, writes the file there.
#[test]
fn user_mount_with_options_writes_its_textfile() {
    const USER: &str = "tierfs-test";
    require!(fuse());
    require!(root(&format!("runs as root, switching to user {USER}")));
    require!(user(USER));
    require!(tool("fusermount3", "apt-get install fuse3"));
    let (uid, gid) = user_ids(USER).unwrap();
    let s = Setup::two("stripe");
    std::fs::create_dir_all(s.mountpoint()).unwrap();
    let prom = s.dir.path().join("prom");
    std::fs::create_dir(&prom).unwrap();
    // Its own link to the binary (the build folder may be closed to it); a hard link, as a
    // copy just written may still be busy for exec in a child another test forks.
    let bin = s.dir.path().join("tierfs");
    if std::fs::hard_link(tierfs_bin(), &bin).is_err() {
        std::fs::copy(tierfs_bin(), &bin).unwrap();
    }
    sh(&format!("chown -R {uid}:{gid} {}", q(s.dir.path())));
    let file = prom.join("tierfs-user.prom");
    let o = as_user(
        USER,
        &format!(
            "{} mount -o {} --metrics-textfile {} {}",
            q(&bin),
            q(Path::new(&tier_options(&s))),
            q(&file),
            q(&s.mountpoint())
        ),
    );
    assert!(o.status.success(), "{}", text(&o));
    let mp = s.mountpoint();
    let st = std::fs::metadata(&file).expect("no textfile");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(st.uid(), uid, "written by someone else");
    assert_eq!(
        st.mode() & 0o444,
        0o444,
        "the collector's user cannot read it"
    );
    let t = std::fs::read_to_string(&file).unwrap();
    parse_exposition(&t).unwrap_or_else(|e| panic!("{e}:\n{t}"));
    let o = as_user(USER, &format!("{} unmount {}", q(&bin), q(&mp)));
    assert!(o.status.success(), "{}", text(&o));
    assert!(!tierfs::daemon::is_mountpoint(&mp));
    assert_eq!(entries(&prom), ["tierfs-user.prom"]);
}
