//! `tierfs fsck`'s view of the re-link journals ([`crate::relink`]) in the tiers'
//! `.tierfs-meta/` folders: one problem per journal (pending ones repaired by the mount's
//! own rule, set-aside ones for a person), and what the journals still pending hold back
//! from the walk, as the mount's scan holds it.

use super::issues::{Action, Issue};
use super::TierDir;
use crate::relink::Held;
use crate::tier::META_DIR;
use std::path::Path;

/// The problems the journals on `tiers` make, in tier order: each pending journal (to
/// settle with `--repair`), one that does not parse, and each set aside.
pub(super) fn issues(tiers: &[TierDir]) -> Vec<Issue> {
    let mut out = Vec::new();
    for (t, tier) in tiers.iter().enumerate() {
        let meta = tier.root.join(META_DIR);
        for (path, j) in crate::relink::list(&meta) {
            out.push(match j {
                Some(j) => {
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
                None => Issue::manual(
                    Path::new(""),
                    Some(t),
                    format!(
                        "{} is not a re-link journal this tierfs reads",
                        path.display()
                    ),
                    "mount once (the scan sets it aside as *.unfinished and removes no \
                     temporary) or remove it"
                        .into(),
                ),
            });
        }
        for (path, _) in crate::relink::list_set_aside(&meta) {
            out.push(Issue::manual(
                Path::new(""),
                Some(t),
                format!(
                    "{} is a re-link journal that could not be finished: the other names \
                     of the file it lists may hold the bytes from before its last move",
                    path.display()
                ),
                "compare those names with the file's primary name, keep the right \
                 bytes, then remove the journal"
                    .into(),
            ));
        }
    }
    out
}

/// What the journals still pending on `tiers` hold: their names are not resolved (a fix
/// could destroy the pieces a later settle needs), their keeps are not temporaries.
pub(super) fn held(tiers: &[TierDir]) -> Held {
    let mut held = Held::default();
    for t in tiers {
        for (path, j) in crate::relink::list(&t.root.join(META_DIR)) {
            if let Some(j) = j {
                held.hold(j, &path);
            }
        }
    }
    held
}

/// Settles a re-link journal by the mount's rule ([`crate::relink::finish`]).
pub(super) fn finish(tiers: &[TierDir], journal: &Path) -> Result<String, String> {
    crate::relink::finish(journal, |t| tiers.get(t).map(|d| (d.fs(), d.data.clone())))
        .map_err(|not| not.why)
}
