//! The `.tierfs/control` command parser (`control::parse`) on any text: never a panic, an
//! error names a line of the input, and no accepted command names a path outside the mount
//! (no `..`, no root, no NUL; `prefetch`, `drop` and `debug-panic` name something below
//! the root).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::{Component, Path};
use tierfs::control::{self, Command};

fn inside(p: &Path) {
    assert!(
        p.components().all(|c| matches!(c, Component::Normal(_))),
        "{p:?} is not a plain relative path"
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
