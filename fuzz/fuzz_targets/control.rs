//! The `.tierfs/control` command parser (`control::parse`) on any text: never a panic, an
//! error names a line of the input, and no accepted command names a path outside the mount
//! (no `..`, no root, no NUL; `prefetch`, `drop` and `debug-panic` name something below
//! the root); an operator's command names one tier (a single word) and a weight within
//! 0..=MAX_WEIGHT.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::{Component, Path};
use tierfs::control::{self, Command, TierCommand, MAX_WEIGHT};

fn inside(p: &Path) {
    assert!(
        p.components().all(|c| matches!(c, Component::Normal(_))),
        "{p:?} is not a plain relative path"
    );
}

fn one_word(name: &str) {
    assert!(
        !name.is_empty() && !name.chars().any(char::is_whitespace),
        "tier name {name:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match control::parse(text) {
        Ok(cmds) => {
            assert!(cmds.len() <= text.lines().count());
            for c in &cmds {
                match c {
                    Command::Order { dir, .. } => inside(dir),
                    Command::Step { dir } | Command::Flush { path: dir } => {
                        if let Some(d) = dir {
                            inside(d);
                        }
                    }
                    Command::Prefetch { path }
                    | Command::Drop { path }
                    | Command::DebugPanic { path } => {
                        inside(path);
                        assert!(!path.as_os_str().is_empty(), "{c:?} names the root");
                    }
                    Command::Tier(t) => match t {
                        TierCommand::Pause(n) | TierCommand::Resume(n) | TierCommand::Drain(n) => {
                            one_word(n)
                        }
                        TierCommand::Weight(n, w) => {
                            one_word(n);
                            assert!(
                                w.is_finite() && (0.0..=MAX_WEIGHT).contains(w),
                                "weight {w}"
                            );
                        }
                        TierCommand::Status => {}
                    },
                }
            }
        }
        Err(e) => {
            assert!(
                e.line <= text.lines().count().max(1),
                "line {} of a {}-line input",
                e.line,
                text.lines().count()
            );
            assert!(!e.reason.is_empty());
        }
    }
});
