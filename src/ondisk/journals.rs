//! `tierfs fsck`'s view of the re-link journals ([`crate::relink`]) in the tiers'
//! `.tierfs-meta/` folders: one problem per journal (pending ones repaired by the mount's
//! own rule, set-aside ones for a person), and what the journals still pending hold back
//! from the walk, as the mount's scan holds it.

use super::issues::{Action, Issue};
use super::TierDir;
use crate::relink::{Held, Journal};
use crate::tier::META_DIR;
use std::path::{Path, PathBuf};

/// What fsck does while a journal cannot be told, as the mount's cautious scan.
const UNTOLD: &str = "what it names cannot be told: until it can be read (or is removed), \
                      the mount removes no temporary and answers EIO for a file whose pieces \
                      disagree, and `fsck --repair` repairs nothing but the journals it can read";

/// The problems the journals on `tiers` make, in tier order: a `.tierfs-meta/` that cannot
/// be listed, each pending journal (to settle with `--repair`), one that cannot be read or
/// does not parse, and each set aside.
pub(super) fn issues(tiers: &[TierDir]) -> Vec<Issue> {
    let mut out = Vec::new();
    for (t, tier) in tiers.iter().enumerate() {
        let meta = tier.root.join(META_DIR);
        let (pending, aside) = match (
            crate::relink::list(&meta),
            crate::relink::list_set_aside(&meta),
        ) {
            (Ok(p), Ok(a)) => (p, a),
            (Err(e), _) | (_, Err(e)) => {
                out.push(Issue::manual(
                    Path::new(""),
                    Some(t),
                    format!(
                        "cannot list {} ({e}): a re-link journal there would go unseen; {UNTOLD}",
                        meta.display()
                    ),
                    "check the tier's file system".into(),
                ));
                continue;
            }
        };
        out.extend(
            pending
                .into_iter()
                .map(|(path, j)| pending_issue(t, path, j)),
        );
        for (path, j) in aside {
            let (what, fix) = match j {
                Ok(Some(_)) => (
                    "is a re-link journal that could not be finished: the other names of the \
                     file it lists may hold the bytes from before its last move"
                        .to_string(),
                    "compare those names with the file's primary name, keep the right bytes, \
                     then remove the journal",
                ),
                Ok(None) => (
                    format!(
                        "is a re-link journal that could not be finished and does not parse; \
                         {UNTOLD}"
                    ),
                    "settle by hand the files whose pieces disagree, then remove the journal",
                ),
                Err(e) => (
                    format!(
                        "is a re-link journal that could not be finished and cannot be read \
                         ({e}); {UNTOLD}"
                    ),
                    "check the tier's file system",
                ),
            };
            let what = format!("{} {what}", path.display());
            out.push(Issue::manual(Path::new(""), Some(t), what, fix.into()));
        }
    }
    out
}

/// The problem a pending journal makes: settled by `--repair` where it reads.
fn pending_issue(t: usize, path: PathBuf, j: std::io::Result<Option<Journal>>) -> Issue {
    match j {
        Ok(Some(j)) => {
            // A keep journal's names are the move's, not the user's.
            let names = if j.keeps { 0 } else { j.names.len() };
            let whose = if j.keeps {
                "a move of this file (its old pieces kept beside it)".to_string()
            } else {
                format!("a move of this file with {names} other names")
            };
            Issue::repair(
                &j.primary,
                t,
                format!("{whose} was cut short (journal {})", path.display()),
                Action::FinishRelink {
                    tier: t,
                    journal: path,
                    names,
                },
            )
        }
        Ok(None) => Issue::manual(
            Path::new(""),
            Some(t),
            format!(
                "{} is not a re-link journal this tierfs reads; {UNTOLD}",
                path.display()
            ),
            "mount with the tierfs that wrote it, or settle by hand the files whose pieces \
             disagree and remove it (a mount sets it aside as *.unfinished)"
                .into(),
        ),
        Err(e) => Issue::manual(
            Path::new(""),
            Some(t),
            format!("{}: cannot read it ({e}); {UNTOLD}", path.display()),
            "check the tier's file system".into(),
        ),
    }
}

/// What the journals still pending on `tiers` hold: their names are not resolved (a fix
/// could destroy the pieces a later settle needs), their keeps are not temporaries. With
/// it, why fsck must be as cautious as the mount's scan, if it must: a journal (pending or
/// set aside) or `.tierfs-meta/` that cannot be read, or a journal that does not parse.
pub(super) fn held(tiers: &[TierDir]) -> (Held, Option<String>) {
    let mut held = Held::default();
    let mut untold = None;
    for t in tiers {
        let meta = t.root.join(META_DIR);
        for (list, pending) in [
            (crate::relink::list as fn(&Path) -> _, true),
            (crate::relink::list_set_aside, false),
        ] {
            let listed = match list(&meta) {
                Ok(l) => l,
                Err(e) => {
                    untold = Some(format!("folder {} cannot be listed ({e})", meta.display()));
                    continue;
                }
            };
            for (path, j) in listed {
                match j {
                    Ok(Some(j)) if pending => held.hold(j, &path),
                    Ok(Some(_)) => {}
                    Ok(None) => untold = Some(format!("{} does not parse", path.display())),
                    Err(e) => untold = Some(format!("{} cannot be read ({e})", path.display())),
                }
            }
        }
    }
    (held, untold.map(|u| format!("the re-link journal {u}")))
}

/// Settles a re-link journal by the mount's rule ([`crate::relink::finish`]).
pub(super) fn finish(tiers: &[TierDir], journal: &Path) -> Result<String, String> {
    crate::relink::finish(journal, |t| tiers.get(t).map(|d| (d.fs(), d.data.clone())))
        .map_err(|not| not.why)
}
