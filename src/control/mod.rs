//! The command language of the write-only `.tierfs/control` file.
//!
//! A training script (or `tools/tierfs_hints.py`) tells the cache what it knows about its
//! own access order: one command per line. Parsing is separate from acting so that a write
//! with any bad line is refused whole (the caller gets `EINVAL` and nothing changes), and so
//! the parser can be fuzzed without a mount.
//!
//! ```text
//! order ascending|descending|alternate|learned [DIR]   how the next steps walk DIR's files
//! step [DIR]                                           a training step starts now
//! prefetch PATH                                        load PATH into the cache
//! drop PATH                                            write PATH back and evict it
//! flush [PATH]                                         write back dirty data (all, or PATH)
//! # comment                                            ignored, as are blank lines
//! ```
//!
//! and the operator's commands on tiers ([`tiers`]: `pause`, `resume`, `drain`, `weight`,
//! `status`).
//!
//! The reply: a writer that opened the file read-write reads back, from the same handle,
//! the answer to its last write: `ok ...` lines, or one `error: ...` line saying which line
//! was refused and why, while the write itself fails with the errno (`crate::vfs::tierctl`
//! and docs/CONFIG.md, "Live control").
//!
//! Paths are relative to the mount root (a leading `/` means the mount root too); `..`
//! components are refused so a command can never name anything outside the mount.
//!
//! Debug builds only (the tests' builds), for the panic-containment tests: `debug-panic
//! PATH` makes the next request on PATH panic inside its handler (see `vfs::contain`).
//! Release builds refuse it as an unknown command.

use std::fmt;
use std::path::{Component, Path, PathBuf};

mod tiers;
pub use tiers::{TierCommand, MAX_WEIGHT};

/// The longest control write accepted (a script listing many files stays far below it).
pub const MAX_WRITE: usize = 1 << 20;

/// How a directory's files will be walked in the coming steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderHint {
    /// Every step in the same order as the learned one (or by name before one is learned).
    Ascending,
    /// Every step in the reverse of that order.
    Descending,
    /// Steps alternate between the two.
    Alternate,
    /// Forget earlier hints: follow what is observed.
    Learned,
}

impl OrderHint {
    pub fn name(self) -> &'static str {
        match self {
            OrderHint::Ascending => "ascending",
            OrderHint::Descending => "descending",
            OrderHint::Alternate => "alternate",
            OrderHint::Learned => "learned",
        }
    }
}

/// One parsed command. Paths are relative to the mount root; an empty path is the root.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Order {
        hint: OrderHint,
        dir: PathBuf,
    },
    Step {
        dir: Option<PathBuf>,
    },
    Prefetch {
        path: PathBuf,
    },
    Drop {
        path: PathBuf,
    },
    Flush {
        path: Option<PathBuf>,
    },
    /// Debug builds only: the next request on `path` panics (tests of `vfs::contain`).
    DebugPanic {
        path: PathBuf,
    },
    /// An operator's command on a tier (or `status`).
    Tier(TierCommand),
}

/// A refused control write: which line and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlError {
    /// 1-based line number.
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "control line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for ControlError {}

/// The most of a refused control write's reason the daemon log gets: the reason quotes
/// the bad line, which may be a whole megabyte of garbage.
pub const LOG_EXCERPT: usize = 200;

/// `text` cut to [`LOG_EXCERPT`] bytes (at a character boundary) for the log, saying how
/// many bytes were left out.
pub fn log_excerpt(text: &str) -> String {
    if text.len() <= LOG_EXCERPT {
        return text.to_string();
    }
    let mut cut = LOG_EXCERPT;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}... ({} more bytes not logged)",
        &text[..cut],
        text.len() - cut
    )
}

/// Parses a whole control write; any bad line refuses all of it.
pub fn parse(text: &str) -> Result<Vec<Command>, ControlError> {
    Ok(parse_lines(text)?.into_iter().map(|(_, c)| c).collect())
}

/// [`parse`], each command with its 1-based line number (for the reply to name it).
pub fn parse_lines(text: &str) -> Result<Vec<(usize, Command)>, ControlError> {
    if text.len() > MAX_WRITE {
        return Err(ControlError {
            line: 0,
            reason: format!("write of {} bytes is over {MAX_WRITE}", text.len()),
        });
    }
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cmd = parse_line(line).map_err(|reason| ControlError {
            line: i + 1,
            reason,
        })?;
        out.push((i + 1, cmd));
    }
    Ok(out)
}

/// The word at the start of `s` and the trimmed rest.
fn split_word(s: &str) -> (&str, &str) {
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, ""),
    }
}

fn parse_line(line: &str) -> Result<Command, String> {
    let (word, rest) = split_word(line);
    if let Some(cmd) = tiers::parse(word, rest) {
        return cmd.map(Command::Tier);
    }
    match word {
        "order" => {
            let (h, dir) = split_word(rest);
            let hint = match h {
                "ascending" => OrderHint::Ascending,
                "descending" => OrderHint::Descending,
                "alternate" | "alternating" => OrderHint::Alternate,
                "learned" => OrderHint::Learned,
                "" => {
                    return Err("`order` needs ascending, descending, alternate or learned".into())
                }
                other => {
                    return Err(format!(
                        "unknown order '{other}' (ascending, descending, alternate or learned)"
                    ))
                }
            };
            Ok(Command::Order {
                hint,
                dir: mount_path(dir)?,
            })
        }
        "step" => Ok(Command::Step {
            dir: optional(rest)?,
        }),
        "prefetch" => Ok(Command::Prefetch {
            path: required(word, rest)?,
        }),
        "drop" => Ok(Command::Drop {
            path: required(word, rest)?,
        }),
        "flush" => Ok(Command::Flush {
            path: optional(rest)?,
        }),
        "debug-panic" if cfg!(debug_assertions) => Ok(Command::DebugPanic {
            path: required(word, rest)?,
        }),
        other => Err(format!(
            "unknown command '{}' (order, step, prefetch, drop, flush, pause, resume, drain, \
             weight, status)",
            other.escape_debug()
        )),
    }
}

fn required(word: &str, rest: &str) -> Result<PathBuf, String> {
    if rest.is_empty() {
        return Err(format!("`{word}` needs a path"));
    }
    let p = mount_path(rest)?;
    if p.as_os_str().is_empty() {
        return Err(format!("`{word}` needs a file, not the mount root"));
    }
    Ok(p)
}

fn optional(rest: &str) -> Result<Option<PathBuf>, String> {
    if rest.is_empty() {
        Ok(None)
    } else {
        mount_path(rest).map(Some)
    }
}

/// A path inside the mount, relative to its root.
fn mount_path(s: &str) -> Result<PathBuf, String> {
    if s.contains('\0') {
        return Err("a path may not contain NUL".into());
    }
    let mut out = PathBuf::new();
    for c in Path::new(s).components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                return Err(format!("'{s}': `..` may not appear in a control path"))
            }
            Component::Prefix(_) => return Err(format!("'{s}': not a mount path")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_excerpt_cuts_long_reasons_and_says_how_much() {
        assert_eq!(log_excerpt("short"), "short");
        let long = "é".repeat(1000);
        let got = log_excerpt(&long);
        assert!(got.len() < LOG_EXCERPT + 64, "{}", got.len());
        assert!(got.ends_with("(1800 more bytes not logged)"), "{got}");
    }

    #[test]
    fn parses_every_command() {
        let cmds = parse(
            "# hints from train.py\n\norder alternate zero_stage_3/optimizer/rank0\n\
             step\nstep /a/b\nprefetch a/b c.swp\ndrop ./x\nflush\nflush y\norder learned\n",
        )
        .unwrap();
        assert_eq!(
            cmds,
            vec![
                Command::Order {
                    hint: OrderHint::Alternate,
                    dir: "zero_stage_3/optimizer/rank0".into()
                },
                Command::Step { dir: None },
                Command::Step {
                    dir: Some("a/b".into())
                },
                Command::Prefetch {
                    path: "a/b c.swp".into()
                },
                Command::Drop { path: "x".into() },
                Command::Flush { path: None },
                Command::Flush {
                    path: Some("y".into())
                },
                Command::Order {
                    hint: OrderHint::Learned,
                    dir: PathBuf::new()
                },
            ]
        );
    }

    /// Only the tests' (debug) builds take `debug-panic`; a release build calls it unknown.
    #[test]
    fn debug_panic_only_in_debug_builds() {
        let r = parse("debug-panic a/b\n");
        if cfg!(debug_assertions) {
            assert_eq!(r.unwrap(), vec![Command::DebugPanic { path: "a/b".into() }]);
            assert!(parse("debug-panic /\n").is_err(), "the root");
            assert!(parse("debug-panic ../x\n").is_err());
        } else {
            assert!(r.unwrap_err().reason.contains("unknown command"));
        }
    }

    #[test]
    fn tier_commands_mix_with_hints_and_keep_their_line_numbers() {
        let cmds = parse_lines("# ops\nstep\n\npause slow\nweight fast 3\nstatus\n").unwrap();
        let lines: Vec<usize> = cmds.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, vec![2, 4, 5, 6]);
        assert_eq!(cmds[1].1, Command::Tier(TierCommand::Pause("slow".into())));
        assert_eq!(
            cmds[2].1,
            Command::Tier(TierCommand::Weight("fast".into(), 3.0))
        );
        let e = parse("step\nweight fast lots\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.reason.contains("'lots' is not a weight"), "{e}");
        let e = parse("drain\n").unwrap_err();
        assert!(e.reason.contains("needs a tier name"), "{e}");
    }

    #[test]
    fn one_bad_line_refuses_the_whole_write() {
        let e = parse("step\nprefetch\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.reason.contains("needs a path"), "{e}");
        let e = parse("order sideways\n").unwrap_err();
        assert!(e.reason.contains("unknown order 'sideways'"), "{e}");
        let e = parse("jump x\n").unwrap_err();
        assert!(e.reason.contains("unknown command 'jump'"), "{e}");
        let e = parse("drop ../../etc/passwd").unwrap_err();
        assert!(e.reason.contains(".."), "{e}");
        assert!(parse("prefetch /").is_err(), "the root is not a file");
        assert!(parse(&"#".repeat(MAX_WRITE + 1)).is_err());
    }
}
