//! The tools around a mount, run as a user would on a real mount: `ds-config`,
//! `.tierfs/metrics`, `stat --watch`, `record` and `plot`.
mod common;
use common::*;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A small validator for the Prometheus text exposition format (what node_exporter's
/// textfile collector accepts): `# HELP`/`# TYPE` before a family's samples, each family
/// once and contiguous, `name{label="value",...} value` with no timestamp, counters named
/// `_total`, no duplicate series, a final newline. Returns series -> value.
fn parse_exposition(t: &str) -> Result<HashMap<String, f64>, String> {
    let name_ok = |s: &str| {
        let mut c = s.chars();
        c.next()
            .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
            && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
    };
    if !t.ends_with('\n') {
        return Err("no final newline".into());
    }
    let mut types: HashMap<String, String> = HashMap::new();
    let mut done: HashSet<String> = HashSet::new();
    let mut cur = String::new();
    let mut series = HashMap::new();
    for line in t.lines() {
        if let Some(c) = line.strip_prefix("# ") {
            let f: Vec<&str> = c.splitn(3, ' ').collect();
            if f[0] == "TYPE" {
                if f.len() != 3 || !name_ok(f[1]) || !["counter", "gauge"].contains(&f[2]) {
                    return Err(format!("bad TYPE: {line}"));
                }
                if types.insert(f[1].into(), f[2].into()).is_some() {
                    return Err(format!("TYPE twice: {line}"));
                }
            } else if f[0] == "HELP" && (f.len() < 2 || !name_ok(f[1])) {
                return Err(format!("bad HELP: {line}"));
            }
            continue;
        }
        let end = line.find(['{', ' ']).ok_or(format!("no value: {line}"))?;
        let name = &line[..end];
        if !name_ok(name) {
            return Err(format!("bad name: {line}"));
        }
        let kind = types.get(name).ok_or(format!("no TYPE before: {line}"))?;
        if kind == "counter" && !name.ends_with("_total") {
            return Err(format!("counter without _total: {line}"));
        }
        let mut rest = &line[end..];
        let mut labels = Vec::new();
        if let Some(r) = rest.strip_prefix('{') {
            let close = r.find('}').ok_or(format!("unclosed labels: {line}"))?;
            for pair in r[..close].split(',') {
                let (k, v) = pair.split_once('=').ok_or(format!("bad label: {line}"))?;
                if !name_ok(k)
                    || k.contains(':')
                    || !(v.len() >= 2 && v.starts_with('"') && v.ends_with('"'))
                {
                    return Err(format!("bad label {pair}: {line}"));
                }
                labels.push(format!("{k}={v}"));
            }
            rest = &r[close + 1..];
        }
        let v = rest
            .strip_prefix(' ')
            .ok_or(format!("no space before value: {line}"))?;
        if v.contains(' ') {
            return Err(format!("timestamp or junk after value: {line}"));
        }
        let v: f64 = v.parse().map_err(|_| format!("bad value: {line}"))?;
        if name != cur {
            if done.contains(name) {
                return Err(format!("family split: {line}"));
            }
            done.insert(std::mem::replace(&mut cur, name.into()));
        }
        labels.sort();
        if series
            .insert(format!("{name}{{{}}}", labels.join(",")), v)
            .is_some()
        {
            return Err(format!("duplicate series: {line}"));
        }
    }
    Ok(series)
}

fn write_files(m: &Mount<'_>, prefix: &str, n: u64, size: usize) {
    for i in 0..n {
        std::fs::write(m.path(&format!("{prefix}{i}")), pattern(size, i)).unwrap();
    }
}

#[test]
fn exposition_validator_catches_mistakes() {
    parse_exposition("# TYPE a_total counter\na_total{tier=\"x\"} 1\n").unwrap();
    for bad in [
        "a 1\n",
        "# TYPE a counter\na 1\n",
        "# TYPE a gauge\na 1 123\n",
        "# TYPE a gauge\na{t=x} 1\n",
        "# TYPE a gauge\na 1\na 1\n",
        "# TYPE a gauge\na 1",
    ] {
        assert!(parse_exposition(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn ds_config_metrics_watch_record_plot() {
    require!(fuse());
    let s = Setup::two("whole-file");
    let m = s.mount();
    let mp = m.root();
    let mps = mp.to_str().unwrap().to_string();
    write_files(&m, "before-", 6, 3 << 20);

    // ds-config: pure JSON on stdout, reasons on stderr.
    let out = s.tierfs(&["ds-config", &mps, "--ranks", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)));
    let z = &j["zero_optimization"];
    for block in ["offload_param", "offload_optimizer"] {
        assert_eq!(z[block]["device"], "nvme", "{j}");
        assert_eq!(z[block]["nvme_path"].as_str(), Some(mps.as_str()), "{j}");
    }
    let aio = &j["aio"];
    assert_eq!(aio["block_size"], 1048576);
    assert_eq!(aio["single_submit"], false);
    assert_eq!(aio["overlap_events"], true);
    let qd = aio["queue_depth"].as_u64().unwrap();
    let intra = aio["intra_op_parallelism"].as_u64().unwrap();
    assert!(qd >= 1 && intra >= 1);
    // Two ranks, two busy handles each (pipelined), below the 64 FUSE threads.
    assert!(2 * 2 * qd * intra < 64, "{j}");
    let notes = text(&out.stderr);
    assert!(
        notes.lines().all(|l| l.starts_with("# ")),
        "stderr: {notes}"
    );
    assert!(
        notes.contains("queue_depth") && notes.contains("64 FUSE threads"),
        "{notes}"
    );
    // The pinned buffers fit a quarter of the job's memory, and the notes say what capped
    // them: here Slurm's allocation, 8000 MB, less than any test machine's own memory.
    let out = std::process::Command::new(tierfs_bin())
        .args(["ds-config", &mps, "--ranks", "1"])
        .env("SLURM_MEM_PER_NODE", "8000")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let z = &j["zero_optimization"];
    let per_rank = z["offload_param"]["buffer_count"].as_u64().unwrap()
        * z["offload_param"]["buffer_size"].as_u64().unwrap()
        * 2
        + z["offload_optimizer"]["buffer_count"].as_u64().unwrap()
            * z["sub_group_size"].as_u64().unwrap()
            * 4;
    let notes = text(&out.stderr);
    assert!(
        notes.contains("Capped by Slurm's SLURM_MEM_PER_NODE=8000 (MB)"),
        "{notes}"
    );
    assert_eq!(z["offload_optimizer"]["pin_memory"], true, "{j}");
    assert!(per_rank <= (8000u64 << 20) / 4, "{per_rank}: {j}");
    assert!(z["sub_group_size"].as_u64().unwrap() < 100_000_000, "{j}");
    // Not a mount: a runtime error, nothing on stdout.
    let out = s.tierfs(&["ds-config", s.dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());

    // .tierfs/metrics parses and agrees with stats.json.
    let metrics = std::fs::read_to_string(m.path(".tierfs/metrics")).unwrap();
    let series = parse_exposition(&metrics).unwrap_or_else(|e| panic!("{e}\n{metrics}"));
    let stats = m.stats_json();
    for t in stats["tiers"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let key = |metric: &str| format!("{metric}{{tier=\"{name}\"}}");
        let written = series[&key("tierfs_tier_written_bytes_total")];
        // Counters only grow between the two reads.
        assert!(written <= t["bytes_written"].as_f64().unwrap(), "{name}");
        assert_eq!(
            series[&key("tierfs_tier_used_bytes")],
            t["used"].as_f64().unwrap()
        );
        assert_eq!(series[&key("tierfs_tier_healthy")], 1.0);
        assert!(series.contains_key(&key("tierfs_tier_share_ratio")));
    }
    // Passthrough writes bypass the daemon's byte counters; used bytes see every file.
    let used: f64 = ["fast", "slow"]
        .iter()
        .map(|t| series[&format!("tierfs_tier_used_bytes{{tier=\"{t}\"}}")])
        .sum();
    assert_eq!(used, (18 << 20) as f64);
    assert_eq!(series["tierfs_files{}"], 6.0);

    // stat --watch: two screens, one per interval, then exit.
    let t0 = Instant::now();
    let out = s.tierfs(&["stat", &mps, "--watch", "0.2", "--count", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(t0.elapsed() >= Duration::from_millis(380));
    let screen = text(&out.stdout);
    assert_eq!(
        screen.lines().filter(|l| l.starts_with("TIERS")).count(),
        2,
        "{screen}"
    );
    for col in [
        "PROGRAMS", "rMB/s", "wMB/s", "wareq-sz", "w_await", "ptMB/s", "INFL", "SHARE", "ERR",
    ] {
        assert!(screen.contains(col), "{col}: {screen}");
    }
    assert!(
        screen.lines().any(|l| l.starts_with("fast"))
            && screen.lines().any(|l| l.starts_with("slow")),
        "{screen}"
    );
    // Not piped to a terminal: no screen-clearing escapes.
    assert!(!screen.contains('\x1b'));

    // record while files are written, in both formats; then plot each.
    let dir = s.dir.path();
    let jsonl = dir.join("rec.jsonl");
    let csv = dir.join("rec.csv");
    std::thread::scope(|sc| {
        let writer = sc.spawn(|| {
            let t = Instant::now();
            let mut i = 0;
            while t.elapsed() < Duration::from_millis(900) {
                std::fs::write(m.path(&format!("during-{i}")), pattern(2 << 20, i)).unwrap();
                i += 1;
            }
        });
        let a = sc.spawn(|| {
            s.tierfs(&[
                "record",
                &mps,
                "--out",
                jsonl.to_str().unwrap(),
                "--interval",
                "0.2",
                "--duration",
                "1",
            ])
        });
        let b = s.tierfs(&[
            "record",
            &mps,
            "--out",
            csv.to_str().unwrap(),
            "--interval",
            "0.25",
            "--duration",
            "1",
        ]);
        assert!(b.status.success(), "{}", text(&b.stderr));
        let a = a.join().unwrap();
        assert!(a.status.success(), "{}", text(&a.stderr));
        writer.join().unwrap();
    });
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6, "samples at 0, 0.2, ..., 1.0 s");
    assert!(lines[0]["tiers"][0]["write_mbps"].is_null());
    // Rates are there from the second sample on; the files written meanwhile show in the
    // used bytes (passthrough writes bypass the daemon's byte counters).
    assert!(lines[1]["tiers"][0]["write_mbps"].is_f64(), "{}", lines[1]);
    let used = |l: &serde_json::Value| -> u64 {
        l["tiers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["used"].as_u64().unwrap())
            .sum()
    };
    assert!(used(&lines[5]) > used(&lines[0]), "no growth recorded");
    let last = &lines[5]["tiers"];
    assert_eq!(last.as_array().unwrap().len(), 2);
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    assert!(csv_text.starts_with("time,elapsed_s,"));
    assert_eq!(csv_text.lines().count(), 1 + 5 * 2, "{csv_text}");

    for rec in [&jsonl, &csv] {
        let png = rec.with_extension("png");
        let out = s.tierfs(&[
            "plot",
            rec.to_str().unwrap(),
            "--out",
            png.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(bytes.len() > 5000, "{} bytes", bytes.len());
    }
    // A file that is not a recording is a usage error.
    let out = s.tierfs(&[
        "plot",
        s.config_path().to_str().unwrap(),
        "--out",
        dir.join("x.png").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    m.unmount();
}
