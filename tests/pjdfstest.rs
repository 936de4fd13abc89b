//! pjdfstest (the Rust rewrite, crate `pjdfstest`) as root on a two-tier mount with
//! `allow_other = true`, for both layouts: exactly the tests listed in
//! `docs/pjdfstest-expected.md` must fail. A new failure, or a listed test that now
//! passes, fails this test (then update the list, with the reason).
//!
//! The binary is `$PJDFSTEST` or `/opt/pjdfstest/bin/pjdfstest` (CI:
//! `cargo install pjdfstest --locked --root /opt/pjdfstest`, with `libacl1-dev`); it needs
//! root and the users `nobody` and `tests`. Without any of these the test skips (`require!`).
mod common;
use common::*;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EXPECTED: &str = include_str!("../docs/pjdfstest-expected.md");

fn pjdfstest_bin() -> Option<PathBuf> {
    let p = std::env::var_os("PJDFSTEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/pjdfstest/bin/pjdfstest"));
    p.is_file().then_some(p)
}

fn user_exists(name: &str) -> bool {
    Command::new("id")
        .arg(name)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The test names listed in the docs file: lines "- `name` ...".
fn expected_failures() -> BTreeSet<String> {
    parse_list(EXPECTED)
}

fn parse_list(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[derive(Default, Debug)]
struct Outcome {
    passed: BTreeSet<String>,
    failed: BTreeSet<String>,
    skipped: BTreeSet<String>,
}

fn parse(output: &str) -> Outcome {
    let mut o = Outcome::default();
    for line in output.lines().map(strip_ansi) {
        if line.starts_with(char::is_whitespace) {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(name), Some(last)) = (words.next(), line.split_whitespace().last()) else {
            continue;
        };
        if !name.contains("::") {
            continue;
        }
        match last {
            "ok" => o.passed.insert(name.into()),
            "FAILED" | "UNEXPECTEDLY" => o.failed.insert(name.into()),
            "skipped" => o.skipped.insert(name.into()),
            _ => false,
        };
    }
    o
}

fn run_layout(bin: &PathBuf, layout: &str) -> Outcome {
    let mut s = Setup::two(layout);
    s.extra = "allow_other = true\n".into();
    let cfg = s.dir.path().join("pjdfstest.toml");
    std::fs::write(
        &cfg,
        "[features]\nposix_fallocate = {}\n\n[settings]\nnaptime = 0.001\n\
         allow_remount = false\n\n[dummy_auth]\nentries = [\n  [\"nobody\", \"nogroup\"],\n  \
         [\"tests\", \"tests\"],\n]\n",
    )
    .unwrap();
    let m = s.mount();
    let out_path = s.dir.path().join("pjdfstest.out");
    let out_file = std::fs::File::create(&out_path).unwrap();
    let t = Instant::now();
    let mut child = Command::new(bin)
        .arg("-c")
        .arg(&cfg)
        .arg("-p")
        .arg(m.root())
        .env("NO_COLOR", "1")
        .stdout(out_file.try_clone().unwrap())
        .stderr(out_file)
        .spawn()
        .expect("run pjdfstest");
    let deadline = t + Duration::from_secs(600);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{layout}: pjdfstest hung for 600 s; output so far:\n{}",
                std::fs::read_to_string(&out_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&out_path).unwrap();
    let o = parse(&text);
    let summary = text
        .lines()
        .map(strip_ansi)
        .find(|l| l.starts_with("Summary"))
        .unwrap_or_default();
    eprintln!(
        "{layout}: pjdfstest {status} in {:.1} s: {} passed, {} failed, {} skipped ({summary})",
        t.elapsed().as_secs_f64(),
        o.passed.len(),
        o.failed.len(),
        o.skipped.len()
    );
    let expected = expected_failures();
    let new_failures: Vec<_> = o.failed.difference(&expected).collect();
    let now_passing: Vec<_> = expected.intersection(&o.passed).collect();
    let mut details = String::new();
    for name in &new_failures {
        // The panic message is on the indented lines after the name.
        let mut lines = text.lines().skip_while(|l| !l.starts_with(name.as_str()));
        lines.next();
        if let Some(msg) = lines.next() {
            details.push_str(&format!("  {name}: {}\n", strip_ansi(msg).trim()));
        }
    }
    assert!(
        new_failures.is_empty() && now_passing.is_empty(),
        "{layout}: pjdfstest differs from docs/pjdfstest-expected.md\n\
         new failures (not listed): {new_failures:?}\n{details}\
         listed but now passing (remove from the list): {now_passing:?}"
    );
    // A run that did little (a broken setup) must not look green.
    assert!(
        o.passed.len() >= 200,
        "{layout}: only {} tests passed:\n{text}",
        o.passed.len()
    );
    let missing: Vec<_> = expected
        .iter()
        .filter(|n| !o.failed.contains(*n) && !o.passed.contains(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "{layout}: listed tests pjdfstest did not run (renamed or skipped?): {missing:?}"
    );
    m.unmount();
    o
}

#[test]
fn expected_list_parses() {
    // The list is empty today; the parser must still find names written as the doc
    // says, and take nothing else for one.
    assert!(EXPECTED.contains("## Expected failures"));
    let e = expected_failures();
    assert!(e.iter().all(|n| n.contains("::")), "{e:?}");
    let names = parse_list("x\n- `link::a::b` why\n  - `nested` no\n- `c::d`\n");
    assert_eq!(names, ["c::d", "link::a::b"].map(String::from).into());
}

#[test]
fn pjdfstest_fails_exactly_the_listed_tests() {
    require!(fuse());
    require!(
        pjdfstest_bin().is_some(),
        "pjdfstest is not installed (set PJDFSTEST or \
         cargo install pjdfstest --locked --root /opt/pjdfstest)"
    );
    let bin = pjdfstest_bin().unwrap();
    require!(root("pjdfstest switches users and makes device nodes"));
    require!(
        user_exists("nobody"),
        "user nobody is missing (useradd -U nobody)"
    );
    require!(
        user_exists("tests"),
        "user tests is missing (useradd -U tests)"
    );
    for layout in ["whole-file", "stripe"] {
        run_layout(&bin, layout);
    }
}
