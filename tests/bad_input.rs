//! Every row of docs/ERRORS.md, checked: each malformed config, bad command line, bad tier
//! folder and unsupported operation gets the message (and exit code) or errno the table
//! says. The table is the one source: this file provokes each row (its id, "C01", "L03",
//! "T02", "O05", as a string literal) and reads what tierfs must say from docs/ERRORS.md, so
//! a message changed in the code or in the docs alone fails here.
//!
//! What a row promises: every code span in its message column appears in the output (one
//! line each), with the row's placeholders (`FILE`, `DIR`, `MNT`, ... as the test binds them
//! for that row; `N` a number where bound) filled in and `...` standing for any text. The
//! exit column (or exit 2 for config rows) is the exit code; for operations, the errno
//! named in the errno column. Prose outside code spans is not checked.
//! `every_row_of_errors_md_is_tested` fails when the table and this file list other ids.
mod common;
use common::*;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn tierfs(args: &[&str]) -> Output {
    Command::new(tierfs_bin()).args(args).output().unwrap()
}

// ---------------------------------------------------------------------------------------
// docs/ERRORS.md, parsed.

/// One row of docs/ERRORS.md's tables.
#[derive(Debug, Clone)]
struct Row {
    /// The exit column, where the table has one.
    exit: Option<i32>,
    /// The code spans of the message (or errno) column, as written.
    spans: Vec<String>,
}

/// The cells of a Markdown table line, split at `|` that is not escaped, `\|` unescaped.
fn cells(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.trim().trim_start_matches('|').chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    if out.last().is_some_and(|c| c.trim().is_empty()) {
        out.pop();
    }
    out.iter().map(|c| c.trim().to_string()).collect()
}

/// The code spans of a Markdown text: a run of n backticks up to the next run of exactly n;
/// one space is stripped from each end of a span that begins and ends with one.
fn code_spans(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let run = |i: usize| b[i..].iter().take_while(|c| **c == b'`').count();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let n = run(i);
        let start = i + n;
        let mut j = start;
        let mut close = None;
        while j < b.len() {
            if b[j] == b'`' {
                let m = run(j);
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        let Some(end) = close else {
            panic!("docs/ERRORS.md: an unclosed code span in {text:?}");
        };
        let mut span = &text[start..end];
        if span.len() > 2 && span.starts_with(' ') && span.ends_with(' ') && !span.trim().is_empty()
        {
            span = &span[1..span.len() - 1];
        }
        spans.push(span.to_string());
        i = end + n;
    }
    spans
}

fn is_id(s: &str) -> bool {
    s.len() == 3
        && matches!(s.as_bytes()[0], b'C' | b'L' | b'T' | b'O' | b'D')
        && s[1..].bytes().all(|b| b.is_ascii_digit())
}

/// docs/ERRORS.md's rows by id.
fn doc() -> &'static HashMap<String, Row> {
    static DOC: std::sync::OnceLock<HashMap<String, Row>> = std::sync::OnceLock::new();
    DOC.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ERRORS.md");
        let md = std::fs::read_to_string(path).unwrap();
        let mut rows = HashMap::new();
        for line in md.lines().filter(|l| l.starts_with("| ")) {
            let c = cells(line);
            if !is_id(&c[0]) {
                continue;
            }
            let (exit, msg) = match c.len() {
                3 => (None, &c[2]),
                4 => (
                    Some(c[2].parse().unwrap_or_else(|_| {
                        panic!("docs/ERRORS.md {}: exit {:?} is not a number", c[0], c[2])
                    })),
                    &c[3],
                ),
                n => panic!("docs/ERRORS.md {}: {n} columns", c[0]),
            };
            let spans = code_spans(msg);
            assert!(
                !spans.is_empty(),
                "docs/ERRORS.md {}: no message in `...`",
                c[0]
            );
            let old = rows.insert(c[0].clone(), Row { exit, spans });
            assert!(old.is_none(), "docs/ERRORS.md: {} appears twice", c[0]);
        }
        rows
    })
}

fn row(id: &str) -> &'static Row {
    doc()
        .get(id)
        .unwrap_or_else(|| panic!("docs/ERRORS.md has no row {id}"))
}

/// A placeholder value that stands for any number.
const NUM: &str = "\0number";

/// A piece of a message pattern.
#[derive(Debug)]
enum Seg {
    Lit(String),
    /// `...`: any text.
    Any,
    /// A number.
    Num,
}

/// A row's message with the placeholders in `vars` (whole words) filled in.
fn segments(span: &str, vars: &[(&str, &str)]) -> Vec<Seg> {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut out = Vec::new();
    let mut lit = String::new();
    let mut i = 0;
    'outer: while i < span.len() {
        let rest = &span[i..];
        if rest.starts_with("...") {
            out.push(Seg::Lit(std::mem::take(&mut lit)));
            out.push(Seg::Any);
            i += 3;
            continue;
        }
        if !word(span[..i].chars().next_back()) {
            for (name, value) in vars {
                if rest.starts_with(name) && !word(rest[name.len()..].chars().next()) {
                    if *value == NUM {
                        out.push(Seg::Lit(std::mem::take(&mut lit)));
                        out.push(Seg::Num);
                    } else {
                        lit.push_str(value);
                    }
                    i += name.len();
                    continue 'outer;
                }
            }
        }
        let c = rest.chars().next().unwrap();
        lit.push(c);
        i += c.len_utf8();
    }
    out.push(Seg::Lit(lit));
    out.retain(|s| !matches!(s, Seg::Lit(l) if l.is_empty()));
    out
}

/// Whether `segs` match a prefix of `t`.
fn match_prefix(segs: &[Seg], t: &str) -> bool {
    match segs.split_first() {
        None => true,
        Some((Seg::Lit(l), rest)) => t.starts_with(l.as_str()) && match_prefix(rest, &t[l.len()..]),
        Some((Seg::Any, rest)) => (0..=t.len())
            .filter(|j| t.is_char_boundary(*j))
            .any(|j| match_prefix(rest, &t[j..])),
        Some((Seg::Num, rest)) => {
            let n = t.bytes().take_while(u8::is_ascii_digit).count();
            (1..=n).any(|k| match_prefix(rest, &t[k..]))
        }
    }
}

/// Whether a line of `out` holds the message.
fn says(out: &str, segs: &[Seg]) -> bool {
    out.lines().any(|line| {
        (0..=line.len())
            .filter(|i| line.is_char_boundary(*i))
            .any(|i| match_prefix(segs, &line[i..]))
    })
}

/// Asserts that `o` is what row `id` of docs/ERRORS.md says: its exit code (2 for config
/// rows, which have no exit column) and every message of the row, with `vars` filled in.
#[track_caller]
fn expect(id: &str, what: &str, o: &Output, vars: &[(&str, &str)]) {
    let r = row(id);
    let t = text(o);
    eprintln!(
        "{id} `{what}` -> exit {:?}:\n{}",
        o.status.code(),
        t.trim_end()
    );
    let code = r.exit.unwrap_or(2);
    assert_eq!(
        o.status.code(),
        Some(code),
        "{id}: `{what}` exit code (docs/ERRORS.md says {code}):\n{t}"
    );
    for span in &r.spans {
        assert!(
            says(&t, &segments(span, vars)),
            "{id}: `{what}` does not say what docs/ERRORS.md says:\n  docs: {span}\n  \
             with: {vars:?}\n  said: {}",
            t.trim_end().replace('\n', "\n        ")
        );
    }
    assert!(
        !t.contains("panicked"),
        "{id}: `{what}` panicked instead of saying what is wrong:\n{t}"
    );
}

/// The errnos row `id` allows (the errno column's `E...` code spans).
fn doc_errnos(id: &str) -> Vec<i32> {
    let names: Vec<&String> = row(id)
        .spans
        .iter()
        .filter(|s| s.starts_with('E') && s.bytes().all(|b| b.is_ascii_uppercase()))
        .collect();
    assert!(!names.is_empty(), "docs/ERRORS.md {id}: no errno");
    names
        .iter()
        .map(|n| match n.as_str() {
            "EPERM" => libc::EPERM,
            "EACCES" => libc::EACCES,
            "EOPNOTSUPP" => libc::EOPNOTSUPP,
            "ENAMETOOLONG" => libc::ENAMETOOLONG,
            "EINVAL" => libc::EINVAL,
            "ENOTTY" => libc::ENOTTY,
            "EBADF" => libc::EBADF,
            "ENOENT" => libc::ENOENT,
            "EIO" => libc::EIO,
            "EBUSY" => libc::EBUSY,
            "ENOSPC" => libc::ENOSPC,
            other => panic!("docs/ERRORS.md {id}: unknown errno {other} (add it here)"),
        })
        .collect()
}

/// Asserts `o` exited with `code` and that its output has every needle (for checks that
/// are not rows of the table).
#[track_caller]
fn expect_text(what: &str, o: &Output, code: i32, needles: &[&str]) {
    let t = text(o);
    assert_eq!(o.status.code(), Some(code), "`{what}` exit code:\n{t}");
    for n in needles {
        assert!(t.contains(n), "`{what}` lacks {n:?}:\n{t}");
    }
}

#[test]
fn the_message_matcher_fills_placeholders_and_ellipses() {
    let segs = segments(
        "FILE: tier[1].path: DIR/a is ... ('a'); N",
        &[("FILE", "/t/c.toml"), ("DIR", "/t"), ("N", NUM)],
    );
    assert!(says(
        "x\n/t/c.toml: tier[1].path: /t/a is also it ('a'); 42\n",
        &segs
    ));
    assert!(!says(
        "/t/c.toml: tier[1].path: /t/b is also it ('a'); 42",
        &segs
    ));
    assert!(!says(
        "/t/c.toml: tier[1].path: /t/a is also it ('a'); x",
        &segs
    ));
    // A placeholder is a whole word: FILENAME stays as written.
    assert!(says("FILENAME", &segments("FILENAME", &[("FILE", "/x")])));
    assert_eq!(
        code_spans("a `` x `y` z `` and `w` and `` `q` ``"),
        vec!["x `y` z", "w", "`q`"]
    );
    assert_eq!(
        cells("| C01 | a | `x \\| y` |"),
        vec!["C01", "a", "`x | y`"]
    );
}

/// A temp dir with two existing tier folders `a` and `b` and a mountpoint `mnt`.
struct Dir {
    d: tempfile::TempDir,
}

impl Dir {
    fn new() -> Dir {
        let d = tempfile::Builder::new()
            .prefix("tierfs-bad-")
            .tempdir_in(std::env::var_os("TIERFS_TEST_DIR").unwrap_or_else(|| "/tmp".into()))
            .unwrap();
        for s in ["a", "b", "mnt"] {
            std::fs::create_dir(d.path().join(s)).unwrap();
        }
        Dir { d }
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.d.path().join(rel)
    }
    fn s(&self, rel: &str) -> String {
        self.p(rel).to_str().unwrap().to_string()
    }
    /// `[[tier]]` sections for (name, folder) with a stated bandwidth (no probe).
    fn tiers(&self, list: &[(&str, &str)]) -> String {
        list.iter()
            .map(|(n, rel)| {
                format!(
                    "[[tier]]\nname = \"{n}\"\npath = \"{}\"\nwrite_bandwidth = \"1GB/s\"\n",
                    self.s(rel)
                )
            })
            .collect()
    }
    fn two(&self) -> String {
        self.tiers(&[("a", "a"), ("b", "b")])
    }
    fn write(&self, name: &str, toml: &str) -> String {
        let p = self.p(name);
        std::fs::write(&p, toml).unwrap();
        p.to_str().unwrap().to_string()
    }
}

/// A config row: `check-config` and `mount` both exit 2 with the row's messages (FILE: the
/// config file, DIR: the temp folder), and nothing is mounted.
#[track_caller]
fn config_row(id: &str, toml: &str) {
    config_row_env(id, toml, &[])
}

/// [`config_row`] with tierfs run with environment variables set (`Some`) or removed
/// (`None`), for the `${NAME}` rows.
#[track_caller]
fn config_row_env(id: &str, toml: &str, env: &[(&str, Option<&str>)]) {
    let tierfs = |args: &[&str]| -> Output {
        let mut c = Command::new(tierfs_bin());
        c.args(args);
        for (k, v) in env {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.output().unwrap()
    };
    let d = Dir::new();
    let toml = toml.replace("@DIR@", d.d.path().to_str().unwrap());
    let cfg = d.write("bad.toml", &toml);
    let vars = [
        ("FILE", cfg.as_str()),
        ("DIR", d.d.path().to_str().unwrap()),
        ("N", NUM),
    ];
    expect(id, "check-config", &tierfs(&["check-config", &cfg]), &vars);
    let mnt = d.s("mnt");
    expect(
        id,
        "mount",
        &tierfs(&["mount", "--config", &cfg, &mnt]),
        &vars,
    );
    assert!(!tierfs::daemon::is_mountpoint(&d.p("mnt")), "{id}: mounted");
}

const T: &str = "[[tier]]\nname = \"a\"\npath = \"@DIR@/a\"\n";

#[test]
fn config_rows() {
    config_row("C01", "[[tier]]\nname = \"a\"\npath = /a\n");
    config_row("C02", &format!("{T}speed = \"2GB/s\"\n"));
    config_row("C03", "[tier]\nname = \"a\"\npath = \"/a\"\n");
    config_row("C04", "[placement]\nlayout = \"stripe\"\n");
    config_row("C05", "[[tier]]\nname = \"my tier\"\npath = \"@DIR@/a\"\n");
    config_row(
        "C06",
        &format!("{T}[[tier]]\nname = \"a\"\npath = \"@DIR@/b\"\n"),
    );
    config_row("C07", "[[tier]]\nname = \"a\"\npath = \"rel/dir\"\n");
    config_row("C08", "[[tier]]\nname = \"a\"\npath = \"/x/../etc\"\n");
    config_row("C09", "[[tier]]\nname = \"a\"\npath = \"/\"\n");
    // Any variable of the environment expands (${SLURM_JOB_ID}, ${TMPDIR}, ...); one that
    // is not set is named, with the key.
    config_row_env(
        "C10",
        "[[tier]]\nname = \"a\"\npath = \"/lus/${PROJECT}/t\"\n",
        &[("PROJECT", None)],
    );
    config_row_env(
        "C42",
        "[[tier]]\nname = \"a\"\npath = \"@DIR@/a\"\n[mount]\nlog_file = \"${TMPDIR}/log\"\n",
        &[("TMPDIR", Some(""))],
    );
    config_row(
        "C43",
        "[[tier]]\nname = \"a\"\npath = \"/lus/${SLURM-JOB}/t\"\n",
    );
    config_row("C11", "[[tier]]\nname = \"a\"\npath = \"/lus/${USER/t\"\n");
    config_row(
        "C12",
        &format!("{T}[[tier]]\nname = \"b\"\npath = \"@DIR@//a/\"\n"),
    );
    config_row(
        "C13",
        &format!("{T}[[tier]]\nname = \"b\"\npath = \"@DIR@/a/b\"\n"),
    );
    config_row("C14", &format!("{T}write_bandwidth = \"2GB\"\n"));
    config_row("C15", &format!("{T}read_bandwidth = \"0GB/s\"\n"));
    config_row("C16", &format!("{T}write_bandwidth = \"2Gb/s\"\n"));
    config_row("C17", &format!("{T}write_bandwidth = \"-1GB/s\"\n"));
    config_row("C18", &format!("{T}capacity = \"lots\"\n"));
    config_row("C19", &format!("{T}capacity = \"0\"\n"));
    config_row("C20", &format!("{T}capacity = \"0.1KiB\"\n"));
    config_row("C21", &format!("{T}capacity = \"20000000T\"\n"));
    config_row("C22", &format!("{T}max_in_flight = 0\n"));
    config_row("C23", &format!("{T}[placement]\nlayout = \"raid0\"\n"));
    config_row("C24", &format!("{T}[placement]\nstripe_unit = \"1000\"\n"));
    config_row("C25", &format!("{T}[mount]\nstats_dir = \"a/b\"\n"));
    config_row("C26", &format!("{T}[mount]\nthreads = 0\n"));
    config_row("C27", &format!("{T}[mount]\nlog_file = \"tierfs.log\"\n"));
    config_row("C28", &format!("{T}[mount]\npassthrough = \"yes\"\n"));
    config_row("C29", &format!("{T}create = \"yes\"\n"));
    let cache = |body: &str| format!("{T}[cache]\n{body}\n");
    config_row("C34", &cache("size = \"lots\""));
    config_row("C35", &cache("size = \"1MiB\""));
    config_row("C36", &cache("size = \"1GiB\"\npolicy = \"mru\""));
    config_row("C37", &cache("size = \"1GiB\"\nprefetch = 65"));
    config_row("C38", &cache("size = \"1GiB\"\nwriteback_delay = -1.0"));
    config_row("C39", &cache("size = \"1GiB\"\nmax_file = \"2GiB\""));
    config_row("C40", &format!("{T}[mount]\nengine = \"aio\"\n"));
    config_row("C41", &format!("{T}[placement]\nmin_share = 0.7\n"));
    config_row("C44", &format!("{T}shared_job = \"j1\"\n"));
    config_row("C45", &format!("{T}shared_ledger = \"/lus/ledger\"\n"));
    config_row(
        "C46",
        &format!("{T}shared_ledger = \"/lus/ledger\"\nshared_job = \"a/b\"\n"),
    );
    config_row("C47", &format!("{T}shared_node = \"n1\"\n"));
    config_row(
        "C48",
        &format!("{T}shared_ledger = \"@DIR@/a/ledger\"\nshared_job = \"j1\"\n"),
    );
    // Several problems: all reported at once.
    config_row(
        "C30",
        "[[tier]]\nname = \"a b\"\npath = \"rel\"\n[mount]\nthreads = 0\n",
    );
}

#[test]
fn config_file_rows() {
    let d = Dir::new();
    let mnt = d.s("mnt");
    let missing = d.s("nope.toml");
    for args in [
        vec!["check-config", missing.as_str()],
        vec!["mount", "--config", &missing, &mnt],
    ] {
        expect(
            "C31",
            &args.join(" "),
            &tierfs(&args),
            &[("FILE", &missing)],
        );
    }
    let dir = d.s("a");
    expect(
        "C32",
        "check-config DIR",
        &tierfs(&["check-config", &dir]),
        &[("FILE", &dir)],
    );
    let bin = d.p("latin1.toml");
    std::fs::write(&bin, b"[[tier]]\nname = \"caf\xe9\"\n").unwrap();
    expect(
        "C33",
        "check-config latin1.toml",
        &tierfs(&["check-config", bin.to_str().unwrap()]),
        &[("FILE", bin.to_str().unwrap()), ("N", NUM)],
    );
}

// ---------------------------------------------------------------------------------------
// Tier folders: checked by check-config and by mount before anything is mounted.

/// A tier-folder row: `check-config` and `mount` both give the row's exit code and
/// messages (FILE: the config file; the caller binds the rest).
#[track_caller]
fn tier_row(id: &str, d: &Dir, toml: &str, vars: &[(&str, &str)]) {
    let cfg = d.write(&format!("{id}.toml"), toml);
    let mut all = vec![("FILE", cfg.as_str())];
    all.extend_from_slice(vars);
    expect(id, "check-config", &tierfs(&["check-config", &cfg]), &all);
    let mnt = d.s("mnt");
    expect(
        id,
        "mount",
        &tierfs(&["mount", "--config", &cfg, &mnt]),
        &all,
    );
    assert!(!tierfs::daemon::is_mountpoint(&d.p("mnt")), "{id}: mounted");
}

#[test]
fn tier_folder_rows() {
    let d = Dir::new();
    let gone = d.s("gone");
    tier_row("T01", &d, &d.tiers(&[("a", "gone")]), &[("DIR", &gone)]);
    assert!(!d.p("gone").exists());
    let orphan = d.s("no-parent/t");
    tier_row(
        "T02",
        &d,
        &format!("{}create = true\n", d.tiers(&[("a", "no-parent/t")])),
        &[("DIR", &orphan), ("P", &d.s("no-parent"))],
    );
    assert!(!d.p("no-parent").exists());
    std::fs::write(d.p("file"), b"").unwrap();
    tier_row(
        "T03",
        &d,
        &d.tiers(&[("a", "file")]),
        &[("DIR", &d.s("file"))],
    );
    std::os::unix::fs::symlink(d.p("a"), d.p("link-to-a")).unwrap();
    let real = std::fs::canonicalize(d.p("a")).unwrap();
    tier_row(
        "T05",
        &d,
        &d.tiers(&[("a", "a"), ("b", "link-to-a")]),
        &[("LINK", &d.s("link-to-a")), ("DIR", real.to_str().unwrap())],
    );
    // A good config says what it would do, and creates nothing.
    let cfg = d.write(
        "good.toml",
        &format!("{}create = true\n", d.tiers(&[("a", "a"), ("n", "new")])),
    );
    let o = tierfs(&["check-config", &cfg]);
    expect_text("check-config", &o, 0, &["will be created", "ok"]);
    assert!(!d.p("new").exists());
}

/// Writes a tier folder's format file as a mount of pool `pool` with `tiers` leaves it.
fn formatted(dir: &Path, name: &str, pool: &str, tiers: &str) {
    std::fs::create_dir_all(dir.join(".tierfs-meta")).unwrap();
    std::fs::write(
        dir.join(".tierfs-meta/format"),
        format!(
            "tierfs tier format {}\nname {name}\npool {pool}\ntiers {tiers}\n",
            tierfs::layout::FORMAT_VERSION
        ),
    )
    .unwrap();
}

/// Issue 38, points 2 and 3: folders a mount must not take as they are (no FUSE needed:
/// each is refused before anything is mounted).
#[test]
fn tier_identity_and_scratch_rows() {
    let d = Dir::new();
    std::fs::create_dir_all(d.p("a/data")).unwrap();
    std::fs::write(d.p("a/data/old.txt"), b"keep").unwrap();
    tier_row(
        "T13",
        &d,
        &format!("{}[mount]\nscratch = true\n", d.two()),
        &[("DIR", &d.s("a"))],
    );
    assert_eq!(std::fs::read(d.p("a/data/old.txt")).unwrap(), b"keep");
    formatted(&d.p("a"), "a", "p1", "a b");
    tier_row(
        "T14",
        &d,
        &d.two(),
        &[("DIR", &d.s("b")), ("OTHER", &d.s("a"))],
    );
    assert!(
        !d.p("b/.tierfs-meta").exists(),
        "T14: the blank folder was written"
    );
    formatted(&d.p("b"), "b", "p2", "x b");
    tier_row(
        "T15",
        &d,
        &d.two(),
        &[("DIR", &d.s("b")), ("POOL", "p1"), ("OTHERPOOL", "p2")],
    );
    formatted(&d.p("b"), "b", "p1", "a b");
    tier_row(
        "T16",
        &d,
        &d.tiers(&[("a", "b"), ("b", "a")]),
        &[("DIR", &d.s("b"))],
    );
}

/// A mountpoint row: `check-config FILE MNT` and `mount --config FILE MNT` both say what
/// row `id` says (FILE and MNT bound, and `vars`), and nothing is mounted (issue #21 bug 6:
/// such a mount hung).
#[track_caller]
fn mountpoint_row(id: &str, d: &Dir, toml: &str, mnt: &Path, vars: &[(&str, &str)]) {
    let cfg = d.write(&format!("{id}.toml"), toml);
    let m = mnt.to_str().unwrap();
    let mut all = vec![("FILE", cfg.as_str()), ("MNT", m)];
    all.extend_from_slice(vars);
    expect(
        id,
        "check-config",
        &tierfs(&["check-config", &cfg, m]),
        &all,
    );
    expect(id, "mount", &tierfs(&["mount", "--config", &cfg, m]), &all);
    assert!(!tierfs::daemon::is_mountpoint(mnt), "{id}: mounted");
}

/// Issue #21 bug 6: a mountpoint and a tier folder inside one another made the daemon go
/// through its own mount to reach the tier: the first `cp` hung in D state (a tier inside
/// the mountpoint), the mount command hung (mounting on a tier folder), `ls` hung (a
/// mountpoint inside a tier's `data/`). `check-config` and `mount` accepted all three.
#[test]
fn bug_mountpoint_overlapping_a_tier_is_accepted() {
    let d = Dir::new();
    std::fs::create_dir(d.p("mnt/a")).unwrap();
    mountpoint_row(
        "T08",
        &d,
        &d.tiers(&[("a", "mnt/a"), ("b", "b")]),
        &d.p("mnt"),
        &[],
    );
    std::os::unix::fs::symlink(d.p("a"), d.p("link-to-a")).unwrap();
    mountpoint_row(
        "T09",
        &d,
        &d.two(),
        &d.p("link-to-a"),
        &[("DIR", &d.s("a"))],
    );
    std::fs::create_dir_all(d.p("b/data/mnt")).unwrap();
    mountpoint_row(
        "T10",
        &d,
        &d.two(),
        &d.p("b/data/mnt"),
        &[("DIR", &d.s("b"))],
    );
    // Side by side is fine.
    let cfg = d.write("good.toml", &d.two());
    let o = tierfs(&["check-config", &cfg, &d.s("mnt")]);
    expect_text("check-config with a mountpoint", &o, 0, &["ok"]);
}

/// Runs `f` with a folder that this process cannot write: a read-only tmpfs as root, a
/// 0555 folder otherwise.
fn with_read_only_dir(d: &Dir, f: impl FnOnce(&Path)) {
    let ro = d.p("ro");
    std::fs::create_dir(&ro).unwrap();
    if is_root() {
        sh(&format!(
            "mount -t tmpfs -o ro,size=1m tierfs-ro {}",
            q(&ro)
        ));
        f(&ro);
        let _ = Command::new("umount").arg(&ro).status();
    } else {
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        f(&ro);
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn unwritable_tier_row() {
    let d = Dir::new();
    let why = if is_root() {
        "Read-only file system (os error 30)"
    } else {
        "Permission denied (os error 13)"
    };
    with_read_only_dir(&d, |ro| {
        let ro_s = ro.to_str().unwrap().to_string();
        tier_row(
            "T04",
            &d,
            &d.tiers(&[("a", "ro")]),
            &[("DIR", &ro_s), ("WHY", why)],
        );
        // A folder to be created in it: the parent refuses.
        tier_row(
            "T12",
            &d,
            &format!("{}create = true\n", d.tiers(&[("a", "ro/t")])),
            &[("DIR", &ro_s), ("WHY", why)],
        );
    });
}

/// Stripes need user xattrs on every tier; a ramfs tier (no user xattrs) is refused with
/// advice. Needs root (to mount ramfs) and FUSE (the check is made by the daemon).
#[test]
fn tier_without_user_xattrs_row() {
    require!(fuse());
    require!(root("T06 mounts a ramfs tier"));
    let d = Dir::new();
    sh(&format!("mount -t ramfs tierfs-ramfs {}", q(&d.p("b"))));
    let cfg = d.write(
        "T06.toml",
        &format!("{}[placement]\nlayout = \"stripe\"\n", d.two()),
    );
    let o = tierfs(&["mount", "--config", &cfg, &d.s("mnt")]);
    let mounted = tierfs::daemon::is_mountpoint(&d.p("mnt"));
    if mounted {
        let _ = tierfs(&["unmount", &d.s("mnt")]);
    }
    let _ = Command::new("umount").arg(d.p("b")).status();
    expect("T06", "mount", &o, &[("FILE", &cfg), ("DIR", &d.s("b"))]);
    assert!(!mounted);
}

// ---------------------------------------------------------------------------------------
// The command line.

#[test]
fn command_line_rows() {
    let d = Dir::new();
    let cfg = d.write("good.toml", &d.two());
    expect("L01", "tierfs", &tierfs(&[]), &[]);
    expect("L02", "tierfs mnt", &tierfs(&["mnt"]), &[]);
    expect("L03", "mount MNT", &tierfs(&["mount", &d.s("mnt")]), &[]);
    let nodir = d.s("no-such-dir");
    expect(
        "L04",
        "mount --config good.toml NODIR",
        &tierfs(&["mount", "--config", &cfg, &nodir]),
        &[("MNT", &nodir)],
    );
    std::fs::write(d.p("plain"), b"").unwrap();
    expect(
        "L05",
        "mount --config good.toml FILE",
        &tierfs(&["mount", "--config", &cfg, &d.s("plain")]),
        &[("MNT", &d.s("plain"))],
    );
    // A mountpoint with a file in it: refused; --nonempty mounts over it, hiding the file
    // until the unmount.
    let busy = d.p("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("a.txt"), b"mine").unwrap();
    expect(
        "L21",
        "mount over a non-empty folder",
        &tierfs(&["mount", "--config", &cfg, &d.s("busy")]),
        &[("MNT", &d.s("busy"))],
    );
    assert!(!tierfs::daemon::is_mountpoint(&busy), "L21: mounted anyway");
    if have(fuse().is_ok(), "L21 --nonempty mounts FUSE") {
        let o = tierfs(&["mount", "--nonempty", "--config", &cfg, &d.s("busy")]);
        assert!(
            o.status.success(),
            "L21 --nonempty: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            !busy.join("a.txt").exists(),
            "the mount does not cover the folder"
        );
        let o = tierfs(&["unmount", &d.s("busy")]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(std::fs::read(busy.join("a.txt")).unwrap(), b"mine");
    expect(
        "L07",
        "unmount DIR",
        &tierfs(&["unmount", &d.s("mnt")]),
        &[("MNT", &d.s("mnt"))],
    );
    // Another file system's mount point is refused before anything is unmounted: a tmpfs of
    // our own where we may mount one, else /proc (which must stay mounted either way).
    let tmpfs = is_root()
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(d.p("mnt"))
            .status()
            .is_ok_and(|s| s.success());
    let (other, kind) = if tmpfs {
        (d.s("mnt"), "tmpfs")
    } else {
        ("/proc".to_string(), "proc")
    };
    expect(
        "L18",
        "unmount of another file system",
        &tierfs(&["unmount", &other]),
        &[("MNT", &other), ("KIND", kind)],
    );
    assert!(
        tierfs::daemon::is_mountpoint(Path::new(&other)),
        "L18: {other} was unmounted"
    );
    if tmpfs {
        assert!(Command::new("umount")
            .arg(d.p("mnt"))
            .status()
            .unwrap()
            .success());
    }
    expect(
        "L08",
        "stat DIR",
        &tierfs(&["stat", &d.s("mnt")]),
        &[("MNT", &d.s("mnt"))],
    );
    expect("L09", "probe", &tierfs(&["probe"]), &[]);
    expect(
        "L10",
        "probe --size lots DIR",
        &tierfs(&["probe", "--size", "lots", &d.s("a")]),
        &[],
    );
    expect(
        "L11",
        "probe FILE",
        &tierfs(&["probe", &d.s("plain")]),
        &[("FILE", &d.s("plain"))],
    );
    expect(
        "L12",
        "stat --watch 0",
        &tierfs(&["stat", &d.s("mnt"), "--watch", "0"]),
        &[],
    );
    expect(
        "L13",
        "ds-config --ranks 0",
        &tierfs(&["ds-config", &d.s("mnt"), "--ranks", "0"]),
        &[],
    );
    std::fs::write(d.p("notes.txt"), b"hello\n").unwrap();
    expect(
        "L14",
        "plot notes.txt",
        &tierfs(&["plot", &d.s("notes.txt"), "--out", &d.s("x.png")]),
        &[("FILE", &d.s("notes.txt"))],
    );
    assert!(!d.p("x.png").exists());
    expect(
        "L15",
        "export --config good.toml TIER",
        &tierfs(&["export", "--config", &cfg, &d.s("a")]),
        &[("DIR", &d.s("a"))],
    );
    std::fs::create_dir(d.p("full")).unwrap();
    std::fs::write(d.p("full/x"), b"").unwrap();
    expect(
        "L17",
        "export --config good.toml NONEMPTY",
        &tierfs(&["export", "--config", &cfg, &d.s("full")]),
        &[("DEST", &d.s("full"))],
    );
    // A re-link journal left by a crash (any content: export refuses before reading it).
    std::fs::create_dir_all(d.p("a/.tierfs-meta")).unwrap();
    let journal = d.p("a/.tierfs-meta/relink-7-crash");
    std::fs::write(&journal, b"tierfs-relink v1\n").unwrap();
    expect(
        "L19",
        "export with a re-link journal pending",
        &tierfs(&["export", "--config", &cfg, &d.s("out")]),
        &[("TIER", "a"), ("JOURNAL", journal.to_str().unwrap())],
    );
    assert!(!d.p("out").exists(), "export copied something");
    std::fs::remove_file(&journal).unwrap();
    // A tier's .tierfs-meta/ that cannot be listed (a symlink to itself: ELOOP, as EIO
    // or ESTALE would): a journal there would go unseen.
    let meta = d.p("a/.tierfs-meta");
    std::fs::remove_dir_all(&meta).unwrap();
    std::os::unix::fs::symlink(".tierfs-meta", &meta).unwrap();
    expect(
        "L20",
        "export while a tier's .tierfs-meta/ cannot be listed",
        &tierfs(&["export", "--config", &cfg, &d.s("out")]),
        &[("TIER", "a"), ("META", meta.to_str().unwrap())],
    );
    assert!(!d.p("out").exists(), "export copied something");
    std::fs::remove_file(&meta).unwrap();
}

/// `tierfs tune`: what it refuses before writing anything.
#[test]
fn tune_rows() {
    let d = Dir::new();
    std::fs::create_dir(d.p("plain")).unwrap();
    let plain = d.s("plain");
    let tune = |extra: &[&str]| {
        let mut a = vec!["tune", plain.as_str(), "--ranks", "1"];
        a.extend_from_slice(extra);
        tierfs(&a)
    };
    expect("L51", "tune DIR", &tune(&["--quick"]), &[("MNT", &plain)]);
    expect(
        "L52",
        "tune --block-sizes 1000",
        &tune(&["--block-sizes", "1000"]),
        &[],
    );
    expect(
        "L53",
        "tune --size 1MiB --threads 1,3",
        &tune(&["--size", "1MiB", "--threads", "1,3"]),
        &[],
    );
    assert_eq!(std::fs::read_dir(d.p("plain")).unwrap().count(), 0);
    if have(fuse().is_ok(), "L54 needs a mount") {
        let s = Setup::new(
            vec![TierSpec::new("a", "1GB/s").capacity("512MiB")],
            "whole-file",
        );
        let m = s.mount();
        let mp = s.mountpoint();
        expect(
            "L54",
            "tune with 1GiB files on a 512 MiB tier",
            &tierfs(&[
                "tune",
                mp.to_str().unwrap(),
                "--ranks",
                "1",
                "--size",
                "1GiB",
            ]),
            &[("MNT", mp.to_str().unwrap())],
        );
        let made: Vec<_> = std::fs::read_dir(&mp)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != ".tierfs")
            .collect();
        assert!(made.is_empty(), "L54 wrote {made:?}");
        m.unmount();
    }
}

/// Rows that need a live mount: a mounted mountpoint, tiers in use.
#[test]
fn command_line_rows_with_a_mount() {
    require!(fuse());
    let s = Setup::two("whole-file");
    let m = s.mount();
    let other = Setup::two("whole-file");
    let cfg = other.write_config();
    let mp = s.mountpoint();
    let tier0 = s.tier_path(0);
    expect(
        "L06",
        "mount on a mount",
        &tierfs(&[
            "mount",
            "--config",
            cfg.to_str().unwrap(),
            mp.to_str().unwrap(),
        ]),
        &[("MNT", mp.to_str().unwrap())],
    );
    expect(
        "T07",
        "mount of tiers in use",
        &tierfs(&[
            "mount",
            "--config",
            s.config_path().to_str().unwrap(),
            other.mountpoint().to_str().unwrap(),
        ]),
        &[
            ("DIR", tier0.to_str().unwrap()),
            ("N", &m.daemon_pid().to_string()),
            ("MNT", mp.to_str().unwrap()),
        ],
    );
    expect(
        "L16",
        "fsck of mounted tiers",
        &tierfs(&["fsck", "--config", s.config_path().to_str().unwrap()]),
        &[
            ("DIR", tier0.to_str().unwrap()),
            ("N", &m.daemon_pid().to_string()),
            ("MNT", mp.to_str().unwrap()),
        ],
    );
    m.unmount();

    // A tier whose lock file names a daemon on another host (a node of the cluster that
    // shares the file system): this host cannot tell whether it runs, so it is refused,
    // naming host and pid, unless --break-lock.
    let held = Setup::two("whole-file");
    let meta = held.tier_path(1).join(".tierfs-meta");
    std::fs::create_dir_all(&meta).unwrap();
    let record = "tierfs tier lock v1\nhost node0042\npid 4242\nboot b\nstart 1\nwhat mount\n\
                  scratch no\nmountpoint /local/tierfs\n";
    std::fs::write(meta.join("lock"), record).unwrap();
    let hcfg = held.write_config();
    let hmp = held.mountpoint();
    expect(
        "T11",
        "mount of a tier another host holds",
        &tierfs(&[
            "mount",
            "--config",
            hcfg.to_str().unwrap(),
            hmp.to_str().unwrap(),
        ]),
        &[
            ("DIR", held.tier_path(1).to_str().unwrap()),
            ("N", "4242"),
            ("H", "node0042"),
            ("MNT", "/local/tierfs"),
        ],
    );
    assert_eq!(
        std::fs::read_to_string(meta.join("lock")).unwrap(),
        record,
        "T11: a refused mount changes nobody's lock"
    );
    assert!(!tierfs::daemon::is_mountpoint(&hmp), "T11: mounted");
    let o = held.mount_output(&["--break-lock"]);
    assert!(o.status.success(), "T11: --break-lock: {}", text(&o));
    let broken = held.adopt();
    let log = std::fs::read_to_string(held.log_path()).unwrap_or_default();
    assert!(
        log.contains("broke the lock of pid 4242 on host node0042"),
        "T11: the log says whose lock was broken:\n{log}"
    );
    broken.unmount();
    assert!(
        !meta.join("lock").exists(),
        "T11: the lock is released at unmount"
    );
}

// ---------------------------------------------------------------------------------------
// Operations through a mount.

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => errno(&e),
    }
}

#[track_caller]
fn op_row(id: &str, what: &str, got: i32) {
    let want = doc_errnos(id);
    assert!(
        want.contains(&got),
        "{id}: {what}: errno {got} ({}), want one of {want:?}",
        std::io::Error::from_raw_os_error(got)
    );
}

fn mknod(p: &Path, mode: u32) -> i32 {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mknod(c.as_ptr(), mode, libc::makedev(1, 3)) } == 0 {
        0
    } else {
        errno(&std::io::Error::last_os_error())
    }
}

/// Drops CAP_MKNOD from the calling thread's effective set (capabilities are per thread).
fn drop_cap_mknod() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_MKNOD: u32 = 27;
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: the header and two data structs are what capget's version 3 reads and writes.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) };
    assert_eq!(r, 0, "capget: {}", std::io::Error::last_os_error());
    d[0].effective &= !(1 << CAP_MKNOD);
    // SAFETY: as above; capset only reads them.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) };
    assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
}

fn ioctl_getflags(f: &std::fs::File) -> i32 {
    use std::os::fd::AsRawFd;
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one long into `flags`.
    if unsafe { libc::ioctl(f.as_raw_fd(), 0x8008_6601u64 as _, &mut flags) } == 0 {
        0
    } else {
        errno(&std::io::Error::last_os_error())
    }
}

#[test]
fn operation_rows() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let s = Setup::two(layout);
        let m = s.mount();
        let f = m.path("f");
        std::fs::write(&f, pattern(5000, 1)).unwrap();
        std::fs::create_dir(m.path("dir")).unwrap();
        op_row(
            "O01",
            "link of a folder",
            errno_of(std::fs::hard_link(m.path("dir"), m.path("g"))),
        );
        if have(is_root(), "O02: dropping CAP_MKNOD needs it first (root)") {
            let (c, b) = (m.path("c"), m.path("b"));
            let (chr, blk) = std::thread::spawn(move || {
                drop_cap_mknod();
                (
                    mknod(&c, libc::S_IFCHR | 0o600),
                    mknod(&b, libc::S_IFBLK | 0o600),
                )
            })
            .join()
            .unwrap();
            op_row("O02", "mknod chr without CAP_MKNOD", chr);
            op_row("O02", "mknod blk without CAP_MKNOD", blk);
            assert!(!m.path("c").exists() && !m.path("b").exists());
        }
        let h = open_flags(&f, libc::O_RDWR, 0).unwrap();
        for (mode, name) in [
            (libc::FALLOC_FL_ZERO_RANGE, "ZERO_RANGE"),
            (libc::FALLOC_FL_COLLAPSE_RANGE, "COLLAPSE_RANGE"),
            (libc::FALLOC_FL_INSERT_RANGE, "INSERT_RANGE"),
        ] {
            op_row(
                "O03",
                &format!("fallocate {name}"),
                errno_of(fallocate(&h, mode, 0, 4096)),
            );
        }
        op_row(
            "O04",
            "fallocate PUNCH_HOLE without KEEP_SIZE",
            errno_of(fallocate(&h, libc::FALLOC_FL_PUNCH_HOLE, 0, 4096)),
        );
        // What was refused changed nothing.
        assert_eq!(std::fs::read(&f).unwrap(), pattern(5000, 1));
        let stats = m.path(".tierfs/stats.json");
        for flags in [libc::O_WRONLY, libc::O_RDWR, libc::O_WRONLY | libc::O_TRUNC] {
            op_row(
                "O05",
                &format!("open .tierfs/stats.json flags {flags:#o}"),
                errno_of(open_flags(&stats, flags, 0)),
            );
        }
        op_row(
            "O06",
            "create in .tierfs",
            errno_of(std::fs::write(m.path(".tierfs/new"), b"x")),
        );
        op_row(
            "O06",
            "mkdir in .tierfs",
            errno_of(std::fs::create_dir(m.path(".tierfs/d"))),
        );
        op_row(
            "O07",
            "unlink .tierfs/stats.json",
            errno_of(std::fs::remove_file(&stats)),
        );
        op_row(
            "O07",
            "rename .tierfs/stats.json",
            errno_of(std::fs::rename(&stats, m.path("stolen"))),
        );
        op_row(
            "O07",
            "chmod .tierfs/stats.json",
            errno_of(std::fs::set_permissions(
                &stats,
                std::fs::Permissions::from_mode(0o666),
            )),
        );
        op_row(
            "O07",
            "rmdir .tierfs",
            errno_of(std::fs::remove_dir(m.path(".tierfs"))),
        );
        op_row(
            "O08",
            "setxattr on .tierfs/stats.json",
            errno_of(set_xattr(&stats, "user.x", b"1")),
        );
        op_row(
            "O08",
            "removexattr on .tierfs/stats.json",
            errno_of(remove_xattr(&stats, "user.x")),
        );
        op_row(
            "O09",
            "create .tierfs-tmp-x",
            errno_of(std::fs::write(m.path(".tierfs-tmp-x"), b"x")),
        );
        op_row(
            "O09",
            "mkdir .tierfs-tmp-d",
            errno_of(std::fs::create_dir(m.path(".tierfs-tmp-d"))),
        );
        op_row(
            "O10",
            "create a 256-byte name",
            errno_of(std::fs::write(m.path(&"n".repeat(256)), b"x")),
        );
        std::fs::write(m.path("g2"), b"g").unwrap();
        op_row(
            "O11",
            "renameat2 RENAME_EXCHANGE",
            errno_of(rename2(&f, &m.path("g2"), libc::RENAME_EXCHANGE)),
        );
        op_row(
            "O11",
            "renameat2 RENAME_WHITEOUT",
            errno_of(rename2(&f, &m.path("g3"), libc::RENAME_WHITEOUT)),
        );
        assert_eq!(std::fs::read(m.path("g2")).unwrap(), b"g");
        if have(is_root(), "O12: a trusted.* xattr needs root") {
            op_row(
                "O12",
                "setxattr trusted.x",
                errno_of(set_xattr(&f, "trusted.x", b"1")),
            );
        }
        op_row(
            "O13",
            "setxattr user.tierfs.layout",
            errno_of(set_xattr(&f, "user.tierfs.layout", b"evil")),
        );
        std::os::unix::fs::symlink("f", m.path("ln")).unwrap();
        let cp = std::ffi::CString::new(m.path("ln").to_str().unwrap()).unwrap();
        // SAFETY: valid NUL-terminated strings and a one-byte buffer.
        let r =
            unsafe { libc::lsetxattr(cp.as_ptr(), c"user.x".as_ptr(), c"1".as_ptr().cast(), 1, 0) };
        op_row(
            "O14",
            "lsetxattr user.x on a symlink",
            if r == 0 {
                0
            } else {
                errno(&std::io::Error::last_os_error())
            },
        );
        op_row("O15", "ioctl FS_IOC_GETFLAGS", ioctl_getflags(&h));
        op_row(
            "O16",
            "write through an O_RDONLY descriptor",
            errno_of(
                open_flags(&f, libc::O_RDONLY, 0)
                    .unwrap()
                    .write_at_all(b"x", 0),
            ),
        );
        let control = m.path(".tierfs/control");
        for bad in [
            "frobnicate\n",
            "step\norder sideways\n",
            "drop ../../etc/passwd\n",
            "weight fast lots\n",
            "pause\n",
        ] {
            op_row(
                "O17",
                "a bad control line",
                errno_of(std::fs::write(&control, bad)),
            );
        }
        op_row(
            "O18",
            "a control path that does not exist",
            errno_of(std::fs::write(&control, "prefetch nothing-here\n")),
        );
        op_row(
            "O19",
            "read .tierfs/control",
            errno_of(std::fs::read(&control)),
        );
        assert_eq!(std::fs::read(&f).unwrap(), pattern(5000, 1));
        drop(h);
        m.unmount();
    }
}

/// Writes `text` to the control file through a handle opened read-write; the write's
/// errno (0 when it succeeded) and the reply read back through the same handle.
fn control_rw(m: &Mount<'_>, text: &str) -> (i32, String) {
    use std::io::{Read, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path(".tierfs/control"))
        .unwrap();
    let e = errno_of(f.write(text.as_bytes()));
    let mut reply = String::new();
    f.read_to_string(&mut reply).unwrap();
    (e, reply)
}

/// The operator's commands on tiers (`.tierfs/control`, `tierfs ctl`): each refusal's
/// errno and the reason read back, and `tierfs ctl`'s exit status and message.
#[test]
fn ctl_rows() {
    let d = Dir::new();
    std::fs::create_dir(d.p("plain")).unwrap();
    expect(
        "L57",
        "ctl of a plain folder",
        &tierfs(&["ctl", &d.s("plain"), "status"]),
        &[("MNT", &d.s("plain"))],
    );
    require!(fuse());
    let s = Setup::new(
        vec![
            TierSpec::new("fast", "2GB/s").capacity("4MiB"),
            TierSpec::new("slow", "1GB/s"),
        ],
        "whole-file",
    );
    let m = s.mount();
    let mp = s.mountpoint();
    let mp = mp.to_str().unwrap();
    let (e, reply) = control_rw(&m, "pause nosuch\n");
    op_row("O20", "pause of a tier the mount does not have", e);
    assert!(
        reply.starts_with("error: line 1: no tier 'nosuch'"),
        "{reply}"
    );
    expect(
        "L55",
        "ctl pause nosuch",
        &tierfs(&["ctl", mp, "pause", "nosuch"]),
        &[],
    );
    expect(
        "L56",
        "ctl weight fast lots",
        &tierfs(&["ctl", mp, "weight", "fast", "lots"]),
        &[],
    );
    // 6 MiB on slow: more than fast's capacity.
    let (e, reply) = control_rw(&m, "pause fast\n");
    assert_eq!(e, 0, "{reply}");
    std::fs::write(m.path("big"), pattern(6 * MIB, 3)).unwrap();
    assert_eq!(s.tiers_holding("big"), vec![1]);
    let (e, reply) = control_rw(&m, "drain slow\n");
    op_row("O21", "drain while no other tier takes new data", e);
    assert!(reply.contains("no other tier takes new data"), "{reply}");
    let (e, reply) = control_rw(&m, "pause slow\n");
    op_row("O21", "pause of the last tier taking new data", e);
    assert!(
        reply.contains("it is the last tier taking new data"),
        "{reply}"
    );
    let (e, reply) = control_rw(&m, "resume fast\ndrain slow\n");
    op_row("O22", "drain that does not fit", e);
    assert!(
        reply.starts_with("error: line 2: cannot drain tier 'slow': its"),
        "{reply}"
    );
    assert!(reply.contains("the other tiers have free"), "{reply}");
    let status = control_rw(&m, "status\n").1;
    assert!(
        status.contains("tier fast state=paused"),
        "nothing applied:\n{status}"
    );
    assert_eq!(std::fs::read(m.path("big")).unwrap(), pattern(6 * MIB, 3));
    m.unmount();
}

trait WriteAll {
    fn write_at_all(&self, buf: &[u8], off: u64) -> std::io::Result<()>;
}

impl WriteAll for std::fs::File {
    fn write_at_all(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, off)
    }
}

// ---------------------------------------------------------------------------------------
// The direct path (`tierfs run`).

/// Runs a binary the test has just copied. Another test's child may hold the copy open for
/// writing for a moment (the copy's descriptor is inherited between that child's fork and
/// its exec, close-on-exec or not), and exec then fails with ETXTBSY: retried.
fn output_of_copy(cmd: &mut Command) -> Output {
    for _ in 0..100 {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            r => return r.unwrap(),
        }
    }
    cmd.output().unwrap()
}

#[test]
fn direct_path_rows() {
    let d = Dir::new();
    // A copy of the binary with no library beside it.
    let lone = d.p("lone");
    std::fs::create_dir(&lone).unwrap();
    std::fs::copy(tierfs_bin(), lone.join("tierfs")).unwrap();
    let o = output_of_copy(
        Command::new(lone.join("tierfs"))
            .args(["run", "--", "true"])
            .env_remove("TIERFS_PRELOAD"),
    );
    expect(
        "D01",
        "run without the library",
        &o,
        &[("DIR", lone.to_str().unwrap())],
    );
    let nothing = d.s("nothing");
    let o = Command::new(tierfs_bin())
        .args(["run", "--", "true"])
        .env("TIERFS_PRELOAD", &nothing)
        .output()
        .unwrap();
    expect(
        "D02",
        "TIERFS_PRELOAD of nothing",
        &o,
        &[("PATH", &nothing)],
    );
    expect("D03", "run", &tierfs(&["run"]), &[]);
    expect(
        "D04",
        "run -- no-such-program",
        &tierfs(&["run", "--", "no-such-program"]),
        &[],
    );
    config_row("C49", &format!("{T}[mount]\ndirect = \"yes\"\n"));
}

/// D05: a program that cannot reach the mount's daemon (in a network namespace of its
/// own: abstract sockets are per namespace) runs through FUSE, warned once.
#[test]
fn direct_path_warning_row() {
    require!(fuse());
    require!(root("a network namespace of its own (unshare -n)"));
    require!(tool("unshare", "apt-get install util-linux"));
    require!(tool("python3", "apt-get install python3"));
    let mut s = Setup::two("whole-file");
    s.extra = "passthrough = \"off\"\n".into();
    let m = s.mount();
    let dir = m.path("ns").to_str().unwrap().to_string();
    let prog = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/direct/prog.py");
    let o = Command::new(tierfs_bin())
        .args(["run", "--", "unshare", "-n", "python3"])
        .arg(&prog)
        .args(["ds", &dir, "3"])
        .output()
        .unwrap();
    let first = format!("{dir}/0_param.tensor.swp");
    expect(
        "D05",
        "a program out of its daemon's reach",
        &o,
        &[("PATH", &first)],
    );
    let t = text(&o);
    assert!(t.contains("ok"), "the program failed:\n{t}");
    assert_eq!(
        t.matches("WARNING").count(),
        1,
        "warned more than once:\n{t}"
    );
    m.unmount();
}

// ---------------------------------------------------------------------------------------
// Issue 42: mount options, permissions that keep a user out, a mount the system refused,
// the metrics textfile.

#[test]
fn mount_option_rows() {
    let d = Dir::new();
    let cfg = d.write("good.toml", &d.two());
    let mnt = d.s("mnt");
    let mount_o = |opts: &str| tierfs(&["mount", "--config", &cfg, "-o", opts, &mnt]);
    expect(
        "L22",
        "mount -o bogus_key=1",
        &mount_o("rw,bogus_key=1"),
        &[],
    );
    expect(
        "L23",
        "mount -o threads=lots",
        &mount_o("threads=lots"),
        &[],
    );
    expect("L24", "mount -o threads=0", &mount_o("threads=0"), &[]);
    expect(
        "L25",
        "mount -o tier.c.create=true",
        &mount_o("tier.c.create=true"),
        &[("FILE", &cfg)],
    );
    // The helper says the same, with mount(8)'s exit code for a wrong option.
    let o = tierfs(&[&cfg, &mnt, "-o", "bogus_key=1"]);
    expect_text(
        "helper -o bogus_key=1",
        &o,
        1,
        &["refused mount option: bogus_key=1: not a tierfs mount option"],
    );
    assert!(!tierfs::daemon::is_mountpoint(&d.p("mnt")));
    assert!(
        !d.p("a/.tierfs-meta").exists(),
        "a refused option touched a tier"
    );
}

/// An ordinary user to run tierfs as: this process's own where it is not root, else the
/// test user `tierfs-test` with a copy of the binary (the build folder may be closed to it).
struct Ordinary {
    name: String,
    bin: PathBuf,
    /// (uid, gid) to switch to; `None`: this process is that user.
    ids: Option<(u32, u32)>,
}

impl Ordinary {
    const USER: &'static str = "tierfs-test";

    /// Whether there is one: always where we are not root, else the test user and setpriv.
    fn available() -> Result<(), String> {
        if is_root() {
            user(Self::USER)?;
            tool("setpriv", "util-linux")?;
        }
        Ok(())
    }

    /// The user ([`Ordinary::available`] first), owning `d`'s folder (so it may work there).
    fn get(d: &Dir) -> Ordinary {
        if !is_root() {
            let o = Command::new("id").arg("-un").output().unwrap();
            let name = String::from_utf8_lossy(&o.stdout).trim().to_string();
            return Ordinary {
                name,
                bin: tierfs_bin(),
                ids: None,
            };
        }
        // A hard link where it can be (a copy just written may be busy for exec a moment,
        // see `output_of_copy`), else a copy.
        let bin = d.p("tierfs");
        if std::fs::hard_link(tierfs_bin(), &bin).is_err() {
            std::fs::copy(tierfs_bin(), &bin).unwrap();
        }
        let (uid, gid) = user_ids(Self::USER).unwrap();
        sh(&format!("chown -R {uid}:{gid} {}", q(d.d.path())));
        Ordinary {
            name: Self::USER.to_string(),
            bin,
            ids: Some((uid, gid)),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = match self.ids {
            None => Command::new(&self.bin),
            Some((uid, gid)) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--init-groups")
                    .arg("--")
                    .arg(&self.bin);
                c
            }
        };
        c.args(args).env("LC_ALL", "C").output().unwrap()
    }

    /// Makes `p` (a file or folder of `mode`) one this user may not read or search: root's
    /// with `mode` where we are root, else the user's own with no permission at all.
    /// Returns the `chmod` class (u, g or o) the user's bits are in.
    fn keep_out(&self, p: &Path, mode: u32) -> &'static str {
        let mode = if self.ids.is_some() { mode } else { 0 };
        if self.ids.is_some() {
            std::os::unix::fs::chown(p, Some(0), Some(0)).unwrap();
        }
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        if self.ids.is_some() {
            "o"
        } else {
            "u"
        }
    }
}

/// Issue 42: a config file or tier folder the user may not reach says which file or folder
/// keeps it out and the chmod that would let it in (it said only "Permission denied").
#[test]
fn permission_rows() {
    let d = Dir::new();
    require!(Ordinary::available());
    let who = Ordinary::get(&d);
    let user = who.name.clone();
    // C50: the file itself.
    let cfg = d.write("secret.toml", &d.two());
    let w = who.keep_out(&d.p("secret.toml"), 0o600);
    let mnt = d.s("mnt");
    let vars = [("FILE", cfg.as_str()), ("U", &user), ("N", NUM), ("W", w)];
    expect(
        "C50",
        "check-config",
        &who.run(&["check-config", &cfg]),
        &vars,
    );
    expect(
        "C50",
        "mount",
        &who.run(&["mount", "--config", &cfg, &mnt]),
        &vars,
    );
    // C51: a folder on the way to it.
    std::fs::create_dir(d.p("closed")).unwrap();
    let inner = d.p("closed/c.toml");
    std::fs::write(&inner, d.two()).unwrap();
    let w = who.keep_out(&d.p("closed"), 0o700);
    let (inner_s, closed) = (inner.to_str().unwrap(), d.s("closed"));
    let vars = [
        ("FILE", inner_s),
        ("D", closed.as_str()),
        ("U", &user),
        ("N", NUM),
        ("W", w),
    ];
    expect(
        "C51",
        "check-config",
        &who.run(&["check-config", inner_s]),
        &vars,
    );
    expect(
        "C51",
        "mount",
        &who.run(&["mount", "--config", inner_s, &mnt]),
        &vars,
    );
    // T17: a tier folder behind it.
    let cfg = d.write(
        "t17.toml",
        &format!(
            "[[tier]]\nname = \"a\"\npath = \"{}/a\"\nwrite_bandwidth = \"1GB/s\"\n",
            closed
        ),
    );
    let dir = d.s("closed/a");
    let vars = [
        ("FILE", cfg.as_str()),
        ("DIR", dir.as_str()),
        ("D", closed.as_str()),
        ("U", &user),
        ("N", NUM),
        ("W", w),
    ];
    expect(
        "T17",
        "check-config",
        &who.run(&["check-config", &cfg]),
        &vars,
    );
    expect(
        "T17",
        "mount",
        &who.run(&["mount", "--config", &cfg, &mnt]),
        &vars,
    );
    assert!(!tierfs::daemon::is_mountpoint(&d.p("mnt")));
    std::fs::set_permissions(d.p("closed"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Issue 42: a mount that fusermount3 refused (here: the user may not write the mountpoint)
/// used to leave the tier folders initialised, `.tierfs-meta/` and `data/` in them and a
/// folder it created. Now it removes what it made, and only that.
#[test]
fn refused_mount_leaves_the_tier_folders_as_they_were() {
    require!(fuse());
    require!(tool("fusermount3", "apt-get install fuse3"));
    let d = Dir::new();
    // `a` is new (the mount creates it); `b` is there, with a file of the user's.
    std::fs::remove_dir(d.p("a")).unwrap();
    std::fs::write(d.p("b/notes.txt"), b"mine").unwrap();
    let cfg = d.write(
        "T18.toml",
        &format!(
            "{}create = true\n{}",
            d.tiers(&[("a", "a")]),
            d.tiers(&[("b", "b")])
        ),
    );
    require!(Ordinary::available());
    let who = Ordinary::get(&d);
    let ro = d.p("ro-mnt");
    std::fs::create_dir(&ro).unwrap();
    if let Some((uid, gid)) = who.ids {
        std::os::unix::fs::chown(&ro, Some(uid), Some(gid)).unwrap();
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let o = who.run(&["mount", "--config", &cfg, ro.to_str().unwrap()]);
    let mounted = tierfs::daemon::is_mountpoint(&ro);
    if mounted {
        let _ = tierfs(&["unmount", ro.to_str().unwrap()]);
    }
    expect(
        "T18",
        "mount on a mountpoint the user may not write",
        &o,
        &[("MNT", ro.to_str().unwrap())],
    );
    assert!(!mounted);
    assert!(
        !d.p("a").exists(),
        "the tier folder the mount created is still there"
    );
    let mut left: Vec<String> = std::fs::read_dir(d.p("b"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["notes.txt"], "b holds what the mount made");
    assert_eq!(std::fs::read(d.p("b/notes.txt")).unwrap(), b"mine");
}

/// Issue 42: `[metrics] textfile` in a folder the daemon could not write is refused before
/// anything is made; so is a folder that is not there, and an interval out of range.
#[test]
fn metrics_textfile_rows() {
    config_row("C52", &format!("{T}[metrics]\ntextfile_interval = 0.1\n"));
    let d = Dir::new();
    let user = if is_root() {
        "root".to_string()
    } else {
        let o = Command::new("id").arg("-un").output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let why = if is_root() {
        "Read-only file system (os error 30)"
    } else {
        "Permission denied (os error 13)"
    };
    let mnt = d.s("mnt");
    with_read_only_dir(&d, |ro| {
        let ro_s = ro.to_str().unwrap().to_string();
        let cfg = d.write(
            "T19.toml",
            &format!("{}[metrics]\ntextfile = \"{ro_s}/t.prom\"\n", d.two()),
        );
        let vars = [
            ("FILE", cfg.as_str()),
            ("DIR", ro_s.as_str()),
            ("U", user.as_str()),
            ("N", NUM),
            ("WHY", why),
        ];
        expect(
            "T19",
            "mount",
            &tierfs(&["mount", "--config", &cfg, &mnt]),
            &vars,
        );
        // The flag says the same (the config file is still what the message names).
        let plain = d.write("plain.toml", &d.two());
        let o = tierfs(&[
            "mount",
            "--config",
            &plain,
            "--metrics-textfile",
            &format!("{ro_s}/t.prom"),
            &mnt,
        ]);
        expect(
            "T19",
            "mount --metrics-textfile",
            &o,
            &[("FILE", &plain), vars[1], vars[2], vars[3], vars[4]],
        );
    });
    let gone = d.s("no-such-folder");
    let cfg = d.write(
        "T20.toml",
        &format!("{}[metrics]\ntextfile = \"{gone}/t.prom\"\n", d.two()),
    );
    expect(
        "T20",
        "mount",
        &tierfs(&["mount", "--config", &cfg, &mnt]),
        &[("FILE", &cfg), ("DIR", &gone)],
    );
    assert!(!tierfs::daemon::is_mountpoint(&d.p("mnt")));
    assert!(
        !d.p("a/.tierfs-meta").exists(),
        "the refusal came after the tiers were set up"
    );
}

/// The ids in docs/ERRORS.md's tables and the ids this file checks are the same set.
#[test]
fn every_row_of_errors_md_is_tested() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(root.join("tests/bad_input.rs")).unwrap();
    let mut in_doc: Vec<&String> = doc().keys().collect();
    in_doc.sort();
    let mut in_src: Vec<&str> = src
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| is_id(s))
        .collect();
    in_src.sort();
    in_src.dedup();
    assert_eq!(
        in_doc, in_src,
        "docs/ERRORS.md rows (left) and the rows tests/bad_input.rs checks (right) differ"
    );
}
