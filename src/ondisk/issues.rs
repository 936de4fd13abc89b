//! The problems `fsck` lists: each name of a folder resolved with the mount's rules
//! ([`crate::tier::resolve`]) into what the mount shows (an [`Item`]) and one [`Issue`] for each
//! thing the mount would change or could not settle, with the repair that does it.

use super::{EntKind, TierDir};
use crate::layout::{conflict_path, FileLayout, LAYOUT_XATTR};
use crate::tier::resolve::{
    files_equal, plan_file, plan_name, read_pieces, Aside, FilePlan, Step, Stray, Winner,
};
use std::path::{Path, PathBuf};

/// A fix `fsck --repair` may apply; each keeps every byte of user data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Rename the tier's entry to `NAME.tierfs-conflict-TIER` (a fresh name if taken).
    SetAside { tier: usize },
    /// Remove a whole-file copy that is byte for byte the one kept on `keep`.
    RemoveIdentical { tier: usize, keep: usize },
    /// Create an empty stripe piece with the file's layout xattr (and id), mode and owner
    /// of the piece on `like`.
    CreatePiece {
        tier: usize,
        layout: FileLayout,
        id: Option<u64>,
        like: Option<usize>,
    },
    /// Write the layout xattr (and file id) of a piece.
    SetLayout {
        tier: usize,
        layout: FileLayout,
        id: Option<u64>,
    },
    /// Move the file's piece on `tier` back from `from`, where a rename that did not reach
    /// every tier left it (the same file id).
    Rejoin { tier: usize, from: PathBuf },
    /// Create the folder on a tier, mode and owner of the folder on `like`.
    Mkdir { tier: usize, like: Option<usize> },
    /// Remove a leftover temporary file.
    RemoveTemp { tier: usize },
    /// Move a symlink or special file to the first tier.
    MoveToFirst { tier: usize },
    /// Remove this entry of a partial name (an interrupted hard link or unlink): the
    /// name `of` holds the same backing inode on this tier.
    RemoveLinkTrace { tier: usize, of: PathBuf },
    /// Carry out the re-link journal `journal` (in tier `tier`'s `.tierfs-meta/`) of a
    /// move a crash cut short: the file's other names become links of its new pieces
    /// ([`crate::relink`]), then the journal goes.
    FinishRelink {
        tier: usize,
        journal: PathBuf,
        /// The file's other names; 0 for a file with one name (a keep journal).
        names: usize,
    },
}

impl Action {
    pub(super) fn tier(&self) -> usize {
        match self {
            Action::SetAside { tier }
            | Action::RemoveIdentical { tier, .. }
            | Action::CreatePiece { tier, .. }
            | Action::SetLayout { tier, .. }
            | Action::Mkdir { tier, .. }
            | Action::RemoveTemp { tier }
            | Action::Rejoin { tier, .. }
            | Action::MoveToFirst { tier }
            | Action::RemoveLinkTrace { tier, .. }
            | Action::FinishRelink { tier, .. } => *tier,
        }
    }

    /// What `--repair` would do, in words.
    pub(super) fn describe(&self, tiers: &[TierDir], rel: &Path) -> String {
        match self {
            Action::SetAside { tier } => format!(
                "rename it to {} (kept, visible in the mount)",
                conflict_path(rel, &tiers[*tier].name, 1).display()
            ),
            Action::RemoveIdentical { keep, .. } => format!(
                "remove this byte-identical copy (the one on tier '{}' stays)",
                tiers[*keep].name
            ),
            Action::CreatePiece { .. } => {
                "create an empty piece with the file's layout (the lost stripes read as zeros)"
                    .into()
            }
            Action::SetLayout { layout, .. } => {
                format!("set its layout xattr to {:?}", layout.encode())
            }
            Action::Mkdir { .. } => "create the folder".into(),
            Action::Rejoin { from, .. } => {
                format!("move the piece back here from /{}", from.display())
            }
            Action::RemoveTemp { .. } => "remove it".into(),
            Action::MoveToFirst { .. } => {
                format!("move it to the first tier '{}'", tiers[0].name)
            }
            Action::RemoveLinkTrace { of, .. } => {
                format!("remove this name (its bytes stay under /{})", of.display())
            }
            Action::FinishRelink { names: 0, .. } => "finish the move if all its new \
                pieces are in place, else put back its old pieces from the links it kept"
                .into(),
            Action::FinishRelink { names, .. } => format!(
                "make its {names} other names links of its new pieces, as the move meant to"
            ),
        }
    }
}

/// One problem found on the tiers.
#[derive(Debug, Clone)]
pub struct Issue {
    /// Mount-relative path of the entry concerned.
    pub rel: PathBuf,
    /// The tier whose entry is concerned, if one.
    pub tier: Option<usize>,
    pub what: String,
    /// What `--repair` does about it, or `None` with `manual` saying what to do by hand.
    pub action: Option<Action>,
    pub manual: String,
}

impl Issue {
    pub(super) fn repair(rel: &Path, tier: usize, what: String, action: Action) -> Issue {
        Issue {
            rel: rel.to_path_buf(),
            tier: Some(tier),
            what,
            action: Some(action),
            manual: String::new(),
        }
    }

    pub(super) fn manual(rel: &Path, tier: Option<usize>, what: String, manual: String) -> Issue {
        Issue {
            rel: rel.to_path_buf(),
            tier,
            what,
            action: None,
            manual,
        }
    }

    /// `/rel on tier 'x' (backing path)`.
    pub(super) fn place(&self, tiers: &[TierDir]) -> String {
        let shown = format!("/{}", self.rel.display());
        match self.tier {
            Some(t) => format!(
                "{shown} on tier '{}' ({})",
                tiers[t].name,
                tiers[t].path(&self.rel).display()
            ),
            None => shown,
        }
    }
}

/// A file as the mount presents it.
#[derive(Debug, Clone)]
pub struct FileView {
    pub layout: FileLayout,
    /// A striped file's id (see `layout::new_file_id`), which all its pieces carry.
    pub id: Option<u64>,
    /// Logical size, derived from the pieces as the mount derives it.
    pub size: u64,
    /// Tiers whose piece belongs to the file (a stripe file may lack some: holes).
    pub pieces: Vec<usize>,
}

impl FileView {
    /// The tier whose piece carries mode, owner, times and user xattrs.
    pub fn meta_tier(&self) -> Option<usize> {
        let p = self.layout.primary();
        if self.pieces.contains(&p) {
            Some(p)
        } else {
            self.pieces.first().copied()
        }
    }
}

/// What one name of a folder resolves to.
#[derive(Debug)]
pub(super) enum Item {
    /// A folder; the tiers on which it is a folder.
    Dir(Vec<usize>),
    File(FileView),
    /// A file one of whose pieces cannot be read: the tiers of its pieces, and why.
    /// Nothing is planned for it (a guess could serve it torn or set a piece aside).
    Unreadable(Vec<usize>, String),
    /// A symlink or special file, on `tier`.
    Other(usize, EntKind),
}

/// Resolves one name found on the `on` tiers as the mount's scan does, with the problems
/// that resolution implies. Reads the tiers, changes nothing.
pub(super) fn resolve(
    tiers: &[TierDir],
    rel: &Path,
    on: &[(usize, EntKind)],
    parent_missing: &[usize],
) -> (Item, Vec<Issue>) {
    let plan = plan_name(on, EntKind::class);
    let why = match plan.winner {
        Winner::Dir(_) => "where other tiers have a folder of the same name",
        Winner::File(_) => "where other tiers have a file of the same name",
        Winner::Other(..) => "that duplicates one on another tier",
    };
    let mut issues: Vec<Issue> = plan
        .aside
        .iter()
        .map(|(t, k)| {
            Issue::repair(
                rel,
                *t,
                format!("a {} {why}; the mount renames it aside", k.word()),
                Action::SetAside { tier: *t },
            )
        })
        .collect();
    match plan.winner {
        Winner::Dir(dirs) => {
            let like = dirs.first().copied();
            for t in 0..tiers.len() {
                if !dirs.contains(&t) && !parent_missing.contains(&t) {
                    issues.push(Issue::repair(
                        rel,
                        t,
                        "folder missing on this tier (folders are mirrored on every tier)".into(),
                        Action::Mkdir { tier: t, like },
                    ));
                }
            }
            (Item::Dir(dirs), issues)
        }
        Winner::File(on) => match resolve_file(tiers, rel, &on) {
            Ok((view, more)) => {
                issues.extend(more);
                (Item::File(view), issues)
            }
            Err((t, e)) => {
                let why = format!("its piece on tier '{}' cannot be read ({e})", tiers[t].name);
                issues.push(Issue::manual(
                    rel,
                    Some(t),
                    format!("a piece that cannot be read ({e})"),
                    "nothing is repaired for this file: fix the tier's permissions or device, \
                     then run fsck again"
                        .to_string(),
                ));
                (Item::Unreadable(on, why), issues)
            }
        },
        Winner::Other(t, k) => {
            if t != 0 {
                issues.push(Issue::repair(
                    rel,
                    t,
                    format!(
                        "a {} outside the first tier (symlinks and special files live on tier \
                         '{}')",
                        k.word(),
                        tiers[0].name
                    ),
                    Action::MoveToFirst { tier: t },
                ));
            }
            (Item::Other(t, k), issues)
        }
    }
}

/// Works out a file from its pieces on `on` (not empty) with the mount's plan, and what is
/// wrong with them; the first piece that cannot be read, with its error, instead.
fn resolve_file(
    tiers: &[TierDir],
    rel: &Path,
    on: &[usize],
) -> Result<(FileView, Vec<Issue>), (usize, std::io::Error)> {
    let found = read_pieces(on, |t| (tiers[t].fs(), tiers[t].path(rel)))?;
    let plan = plan_file(&found, tiers.len(), |a, b| {
        same_bytes(&tiers[a], &tiers[b], rel)
    })
    .expect("a file name resolves to at least one piece");
    let issues = plan
        .steps
        .iter()
        .map(|s| step_issue(tiers, rel, &plan, s))
        .collect();
    let view = FileView {
        layout: plan.layout,
        id: plan.id,
        size: plan.size,
        pieces: plan.pieces,
    };
    Ok((view, issues))
}

/// The problem one step of a file's plan is, and its repair.
fn step_issue(tiers: &[TierDir], rel: &Path, plan: &FilePlan, step: &Step) -> Issue {
    let (layout, id, size) = (&plan.layout, plan.id, plan.size);
    let shown = layout.encode();
    match step {
        Step::Unusable { tier, raw, why } => Issue::manual(
            rel,
            Some(*tier),
            format!(
                "layout xattr {LAYOUT_XATTR}={raw:?} is not usable ({why}); the mount treats \
                 this piece as a whole file on its tier"
            ),
            format!(
                "if the config lost a tier, restore it; otherwise fix the xattr by hand \
                 (`setfattr -x {LAYOUT_XATTR} PATH` makes it a whole file)"
            ),
        ),
        Step::WrongTier { tier, says } => Issue::repair(
            rel,
            *tier,
            format!(
                "layout xattr says tier '{}' but the piece sits on tier '{}'",
                tiers.get(*says).map(|x| x.name.as_str()).unwrap_or("?"),
                tiers[*tier].name
            ),
            Action::SetLayout {
                tier: *tier,
                layout: FileLayout::Whole { tier: *tier },
                id: None,
            },
        ),
        Step::Adopt { tier } => Issue::repair(
            rel,
            *tier,
            "empty stripe piece without a layout xattr (a creation cut short before it was \
             labelled); the mount adopts it"
                .into(),
            Action::SetLayout {
                tier: *tier,
                layout: layout.clone(),
                id,
            },
        ),
        Step::SetAside {
            tier,
            why: Aside::NotOfStripe(stray),
        } => {
            let has = match stray {
                Stray::Unlabelled => "no layout xattr (a whole file)".to_string(),
                Stray::OtherId(other) => {
                    format!("the id {:016x} of another file", other.unwrap_or(0))
                }
                Stray::OtherLayout(l) => format!("layout {l:?}"),
                Stray::Unusable(raw) => format!("an unusable layout {raw:?}"),
                Stray::OffPattern => {
                    "the file's layout, on a tier its pattern does not name".to_string()
                }
            };
            Issue::repair(
                rel,
                *tier,
                format!(
                    "piece does not belong to the file's stripe layout {shown:?}: it has \
                     {has}; the mount renames it aside"
                ),
                Action::SetAside { tier: *tier },
            )
        }
        Step::SetAside {
            tier,
            why: Aside::OlderCopy { len },
        } => Issue::repair(
            rel,
            *tier,
            format!(
                "an older, different copy of a whole file ({len} bytes) whose newer copy \
                 ({size} bytes) is on tier '{}'; the mount shows the newer one",
                tiers[layout.primary()].name
            ),
            Action::SetAside { tier: *tier },
        ),
        Step::RemoveCopy { tier } => Issue::repair(
            rel,
            *tier,
            format!(
                "a second, identical copy of a whole file kept on tier '{}'",
                tiers[layout.primary()].name
            ),
            Action::RemoveIdentical {
                tier: *tier,
                keep: layout.primary(),
            },
        ),
        Step::Missing { tier } => missing_issue(rel, plan, *tier),
        Step::TooLong { tier, len, share } => Issue::manual(
            rel,
            Some(*tier),
            format!(
                "piece is {len} bytes, longer than its share {share} of the file's {size} bytes"
            ),
            "report this as a tierfs bug; export the file to keep its bytes".into(),
        ),
    }
}

/// A stripe piece missing on `tier`: recreated empty, mode and owner of the primary piece
/// (or the first one there is).
fn missing_issue(rel: &Path, plan: &FilePlan, tier: usize) -> Issue {
    let (layout, size) = (&plan.layout, plan.size);
    let like = plan
        .pieces
        .contains(&layout.primary())
        .then_some(layout.primary())
        .or(plan.pieces.first().copied());
    Issue::repair(
        rel,
        tier,
        match layout.piece_len(tier, size) {
            0 => "stripe piece missing (the other pieces say it held no bytes yet)".to_string(),
            n => format!(
                "stripe piece missing: {n} of the file's {size} bytes now read as zeros (and \
                 the file may have been longer)"
            ),
        },
        Action::CreatePiece {
            tier,
            layout: layout.clone(),
            id: plan.id,
            like,
        },
    )
}

/// Whether the pieces at `rel` on tiers `a` and `b` have the same bytes.
pub(super) fn same_bytes(a: &TierDir, b: &TierDir, rel: &Path) -> bool {
    let open = |t: &TierDir| t.fs().open(&t.path(rel), libc::O_RDONLY, 0);
    match (open(a), open(b)) {
        (Ok(fa), Ok(fb)) => files_equal(fa, fb),
        _ => false,
    }
}
