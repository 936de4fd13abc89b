//! The operator's commands of the control language: a tier paused, resumed, drained or
//! weighted, and the status of every tier. Parsed here without knowing the mount's tiers:
//! the name is looked up when the command runs (`crate::vfs::tierctl`), which answers
//! `ENOENT` for a tier the mount does not have.
//!
//! ```text
//! pause TIER        no new data goes to TIER; what it holds stays usable where it is
//! resume TIER       TIER takes new data again (and a drain of it stops)
//! drain TIER        no new data goes to TIER, and its files move to the other tiers
//! weight TIER N     TIER's bandwidth counts N times in Eq. 1 (1 at mount, 0 to 1000)
//! status            one line per tier: state, weight, share, files and bytes, a drain's progress
//! ```

/// The largest weight `weight TIER N` takes: far beyond any real ratio of bandwidths.
pub const MAX_WEIGHT: f64 = 1000.0;

/// An operator's command, by tier name.
#[derive(Debug, Clone, PartialEq)]
pub enum TierCommand {
    Pause(String),
    Resume(String),
    Drain(String),
    Weight(String, f64),
    Status,
}

/// Parses one operator command: `word` is the command's first word, `rest` the trimmed
/// remainder of its line. `None` when `word` is not an operator's command.
pub fn parse(word: &str, rest: &str) -> Option<Result<TierCommand, String>> {
    let args: Vec<&str> = rest.split_whitespace().collect();
    let one = |word: &str| match args.as_slice() {
        [name] => Ok(name.to_string()),
        [] => Err(format!("`{word}` needs a tier name, e.g. `{word} nvme`")),
        _ => Err(format!(
            "`{word}` takes one tier name, not '{}'",
            rest.escape_debug()
        )),
    };
    Some(match word {
        "pause" => one(word).map(TierCommand::Pause),
        "resume" => one(word).map(TierCommand::Resume),
        "drain" => one(word).map(TierCommand::Drain),
        "weight" => match args.as_slice() {
            [name, n] => weight(n).map(|w| TierCommand::Weight(name.to_string(), w)),
            _ => Err("`weight` needs a tier name and a number, e.g. `weight nvme 2`".into()),
        },
        "status" if args.is_empty() => Ok(TierCommand::Status),
        "status" => Err("`status` takes no argument".into()),
        _ => return None,
    })
}

fn weight(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(w) if w.is_finite() && (0.0..=MAX_WEIGHT).contains(&w) => Ok(w),
        _ => Err(format!(
            "'{}' is not a weight: use a number from 0 to {MAX_WEIGHT} (1 is the weight at \
             mount; 0 gives the tier no share of new data)",
            s.escape_debug()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> TierCommand {
        let (w, rest) = line.split_once(' ').unwrap_or((line, ""));
        parse(w, rest.trim()).expect("a tier command").unwrap()
    }

    fn err(line: &str) -> String {
        let (w, rest) = line.split_once(' ').unwrap_or((line, ""));
        parse(w, rest.trim()).expect("a tier command").unwrap_err()
    }

    #[test]
    fn parses_each_command() {
        assert_eq!(ok("pause nvme"), TierCommand::Pause("nvme".into()));
        assert_eq!(ok("resume pfs"), TierCommand::Resume("pfs".into()));
        assert_eq!(ok("drain a.b-c_1"), TierCommand::Drain("a.b-c_1".into()));
        assert_eq!(
            ok("weight nvme 2.5"),
            TierCommand::Weight("nvme".into(), 2.5)
        );
        assert_eq!(ok("weight nvme 0"), TierCommand::Weight("nvme".into(), 0.0));
        assert_eq!(
            ok("weight nvme 1000"),
            TierCommand::Weight("nvme".into(), 1000.0)
        );
        assert_eq!(ok("status"), TierCommand::Status);
        assert!(
            parse("order", "ascending").is_none(),
            "not an operator command"
        );
    }

    #[test]
    fn refuses_what_is_malformed_and_says_why() {
        assert!(err("pause").contains("needs a tier name"));
        assert!(err("drain a b").contains("takes one tier name, not 'a b'"));
        assert!(err("weight nvme").contains("needs a tier name and a number"));
        assert!(err("weight nvme 1 2").contains("needs a tier name and a number"));
        for bad in ["lots", "-1", "1001", "nan", "inf", "1e9"] {
            let e = err(&format!("weight nvme {bad}"));
            assert!(
                e.contains(&format!("'{bad}' is not a weight")),
                "{bad}: {e}"
            );
        }
        assert!(err("status now").contains("takes no argument"));
    }
}
