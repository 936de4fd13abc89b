//! A moved file's other names (hard links): the re-link rule, how a move re-links them
//! and how a journal found after a crash is settled ([`plan`], [`carry_out`], [`finish`]).
//! The journal itself (its format, and its file: written, read, listed, set aside) is
//! `journal.rs`'s, re-exported here; kept apart so that the format can be read (by
//! `tierfs export` too) without the rule, and the rule changed without touching the format.
//!
//! Every move of a file's bytes (a re-layout, a lazy migration's commit, a move off a full
//! or failing tier) makes new pieces and renames them in under the file's primary name. A
//! file with several names also needs each other name's entries replaced by links of the
//! new pieces, and its entries on tiers the move left removed. The move first links every
//! new piece under a temporary name beside each other name ([`link_as_temp`]; a failure
//! there leaves the file as it was), then writes a [`Journal`] into the new primary tier's
//! `.tierfs-meta/` (synced): the names, and the backing inode of each new and each old
//! piece. Then it renames: the primary's pieces, then each temporary over its name (one
//! step each: a name never lacks an entry), syncs those folders, removes the old entries,
//! and last the journal.
//!
//! A journal found at mount (the scan, before it reads any folder) or by `tierfs fsck`
//! is settled by one rule, [`finish`] with [`plan`]:
//! - the primary name holds every new piece: the move took effect, and each other name's
//!   entry that is an old piece (or missing, where the name still has an entry of the
//!   file somewhere) becomes a link of the new one; old pieces on tiers the move left go.
//!   An entry that is neither old nor new is not the file's and is left alone (reported),
//!   as is a name with no entry of the file at all (removed since);
//! - the primary holds every old piece and no new one: the move never took effect, the
//!   names keep their pieces, and the journal goes;
//! - some new pieces but not all (a crash or a failed rename between the primary's own
//!   renames), each one missing still at the temporary the journal names (`pending`;
//!   limbo is emptied only once the journals are settled): finished, those renamed in
//!   ([`Step::Install`]), then as above. The new pieces were whole and synced before the
//!   journal, and hold a lazy migration's writes the old pieces never saw;
//! - otherwise, some new pieces but not all, each of the primary's entries old or new, and
//!   every old piece it lost still held by another name (no name is re-linked before the
//!   primary has all its new pieces): the move is undone: each old piece linked back over
//!   the primary, each new piece on a tier the old layout did not use removed, and the
//!   file reads as before the move under every name. Left to the mount's other rules,
//!   the primary would be a mix of new and old stripes;
//! - anything else (neither old nor new: the name moved since; an old piece no name
//!   holds): the journal is held (below). A journal whose other names are no longer where
//!   it says, once the rest is done, is set aside as `*.unfinished` with a warning.
//!
//! A file with one name uses the same journal for a move with more than one rename
//! (`crate::data::moves`): before the first rename, each entry a rename will replace is
//! linked under one temporary name beside the primary (a *keep*, in the data folder, which
//! the mount settles journals in before it removes temporaries), and the journal, with
//! `keeps` set, names that as its one name. Keeps are never re-linked: the rule above
//! undoes a torn move from them (they hold every old piece the primary lost), and on every
//! verdict they are removed last ([`Step::Unlink`]). A journal without the `keeps` line
//! (written before it existed) reads as one of other names.
//!
//! A journal that cannot be carried out (a tier left out of a degraded mount, an I/O
//! error, or neither finished nor undone by the rule) is *held*: it stays in place for the
//! next mount or `fsck --repair`, and its names may be a mix of old and new pieces, so the
//! mount serves none of them (EIO, the scan leaves their entries and keeps untouched) until
//! it is settled or a person removes it ([`NotSettled::held`]). Served on their own, a later
//! replay would throw away what was written to them; set aside, the mix would be served
//! as a file. Only a journal whose primary is whole is set aside as `*.unfinished` (its
//! other names no longer where it says), and one that does not parse. A stat of an entry
//! that fails (but for its absence) holds the journal too. One that cannot be read (but
//! for its being gone), or does not parse, leaves what it names untold: the mount's scan
//! and `fsck` are cautious (no temporary removed, no file whose pieces disagree resolved)
//! while it is there, set aside or not ([`NotSettled::cautious`]). `tierfs export`
//! only reads, so it refuses to copy while a journal is pending; past one set aside it
//! copies, and warns that the file it names may be mixed.

mod journal;

pub use journal::{
    list, list_set_aside, read, remove_torn_writes, set_aside, write, Journal, Listed,
    JOURNAL_PREFIX,
};

use crate::inodes::types::TMP_PREFIX;
use crate::tier::beneath::Beneath;
use journal::sync_folder;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The pseudo-name [`plan`]'s `ino` takes for a new piece's temporary ([`Journal::pending`]).
pub const PENDING: usize = usize::MAX;

/// One change [`plan`] asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Make `names[name]`'s entry on `tier` a link of the primary's (replacing an old
    /// piece, or where it has none).
    Link { name: usize, tier: usize },
    /// Remove `names[name]`'s old piece on `tier`: one the new layout left, or a keep
    /// (a keep journal's, on every verdict).
    Unlink { name: usize, tier: usize },
    /// Remove the primary name's entry on `tier`: an old piece the new layout left, or,
    /// undoing a torn move, a new piece on a tier the old layout did not use.
    UnlinkPrimary { tier: usize },
    /// Undoing a torn move: make the primary's entry on `tier` a link of `names[name]`'s
    /// (the old piece), replacing the new piece.
    RestorePrimary { name: usize, tier: usize },
    /// Finishing a torn move: rename the new piece's temporary on `tier` over the
    /// primary's entry there (done first, before any other name is touched).
    Install { tier: usize },
}

/// What [`plan`] asks for: the steps, and the entries left alone as not the file's
/// (name, tier).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub foreign: Vec<(usize, usize)>,
    /// Names with no entry of the file anywhere: a folder above them renamed by hand on
    /// the tiers (the mount refuses it while the file is failed); left as they are.
    pub missing: Vec<usize>,
}

/// What a journal's move came to (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It took effect: these steps finish it.
    Finish(Plan),
    /// It never took effect (the primary holds every old piece): nothing to do but remove
    /// a keep journal's keeps (the steps).
    NotStarted(Plan),
    /// It stopped between the primary's own pieces while the other names held every old
    /// piece it lost: these steps put the file back as it was before the move.
    RollBack(Plan),
    /// None of these: the primary holds neither its old nor its new pieces (moved
    /// since), or some new pieces and an old piece no name holds any more. It can be
    /// neither finished nor undone.
    Unsettled,
}

/// The rule (module docs): `ino(name, tier)` gives the backing inode of a name's entry on
/// a tier, `None` where it has none; name `None` is the primary, [`PENDING`] the move's
/// temporary there.
pub fn plan(j: &Journal, ino: impl Fn(Option<usize>, usize) -> Option<u64>) -> Verdict {
    // New pieces the primary lacks still at their temporaries, where it holds its old
    // piece (or none, as before): not where a file was made, unlinked or renamed since.
    let install: Vec<usize> = j
        .new
        .iter()
        .filter(|&&(t, new)| {
            let now = ino(None, t);
            now != Some(new) && now == j.old_ino(t) && ino(Some(PENDING), t) == Some(new)
        })
        .map(|&(t, _)| t)
        .collect();
    let whole = |t: usize, new: u64| ino(None, t) == Some(new) || install.contains(&t);
    let unmoved =
        |t: usize, old: u64| matches!(ino(None, t), Some(i) if i == old || Some(i) == j.new_ino(t));
    if !install.is_empty()
        && j.new.iter().all(|&(t, new)| whole(t, new))
        && j.old.iter().all(|&(t, old)| unmoved(t, old))
    {
        let after = |n: Option<usize>, t: usize| match n {
            None if install.contains(&t) => j.new_ino(t),
            _ => ino(n, t),
        };
        let Verdict::Finish(mut p) = plan_switched(j, &after) else {
            unreachable!("every new piece is the primary's")
        };
        let first = install.iter().map(|&tier| Step::Install { tier });
        p.steps = first.chain(p.steps).collect();
        return Verdict::Finish(p);
    }
    plan_switched(j, &ino)
}

/// [`plan`] once no new piece is to be installed.
fn plan_switched(j: &Journal, ino: &impl Fn(Option<usize>, usize) -> Option<u64>) -> Verdict {
    let switched = j
        .new
        .iter()
        .filter(|(t, new)| ino(None, *t) == Some(*new))
        .count();
    if switched < j.new.len() {
        let unmoved = j.old.iter().all(|(t, old)| ino(None, *t) == Some(*old));
        if switched == 0 && unmoved {
            return Verdict::NotStarted(Plan {
                steps: drop_keeps(j, ino),
                ..Plan::default()
            });
        }
        return roll_back(j, ino).map_or(Verdict::Unsettled, |mut p| {
            p.steps.extend(drop_keeps(j, ino));
            Verdict::RollBack(p)
        });
    }
    if j.keeps {
        // No user name to re-link: the primary's old pieces the move left, then the keeps.
        let mut steps = unlink_left(j, ino);
        steps.extend(drop_keeps(j, ino));
        return Verdict::Finish(Plan {
            steps,
            ..Plan::default()
        });
    }
    let ours = |t: usize, i: u64| Some(i) == j.old_ino(t) || Some(i) == j.new_ino(t);
    let mut steps = Vec::new();
    let mut foreign = Vec::new();
    let mut missing = Vec::new();
    for n in 0..j.names.len() {
        if !j
            .tiers()
            .iter()
            .any(|t| ino(Some(n), *t).is_some_and(|i| ours(*t, i)))
        {
            missing.push(n);
            continue;
        }
        for &(t, new) in &j.new {
            match ino(Some(n), t) {
                Some(i) if i == new => {}
                None => steps.push(Step::Link { name: n, tier: t }),
                Some(i) if Some(i) == j.old_ino(t) => steps.push(Step::Link { name: n, tier: t }),
                Some(_) => foreign.push((n, t)),
            }
        }
        for &(t, old) in &j.old {
            if j.new_ino(t).is_none() && ino(Some(n), t) == Some(old) {
                steps.push(Step::Unlink { name: n, tier: t });
            }
        }
    }
    steps.extend(unlink_left(j, ino));
    Verdict::Finish(Plan {
        steps,
        foreign,
        missing,
    })
}

/// The primary's old pieces on tiers the new layout left, to remove once it holds every
/// new piece.
fn unlink_left(j: &Journal, ino: &impl Fn(Option<usize>, usize) -> Option<u64>) -> Vec<Step> {
    j.old
        .iter()
        .filter(|&&(t, old)| j.new_ino(t).is_none() && ino(None, t) == Some(old))
        .map(|&(t, _)| Step::UnlinkPrimary { tier: t })
        .collect()
}

/// A keep journal's keeps that still hold an old piece, to remove last (after a
/// `RestorePrimary` made the primary's entry a link of one). Nothing for other journals;
/// an entry under a keep's name that is not an old piece is not the move's and stays.
fn drop_keeps(j: &Journal, ino: &impl Fn(Option<usize>, usize) -> Option<u64>) -> Vec<Step> {
    if !j.keeps {
        return Vec::new();
    }
    let mut steps = Vec::new();
    for name in 0..j.names.len() {
        for &(tier, old) in &j.old {
            if ino(Some(name), tier) == Some(old) {
                steps.push(Step::Unlink { name, tier });
            }
        }
    }
    steps
}

/// The steps that undo a move torn between the primary's own pieces (module docs): each
/// primary entry must be its old or its new piece, and each old piece it lost must still
/// be some other name's entry on that tier; `None` otherwise.
fn roll_back(j: &Journal, ino: &impl Fn(Option<usize>, usize) -> Option<u64>) -> Option<Plan> {
    let mut steps = Vec::new();
    for &(t, old) in &j.old {
        match ino(None, t) {
            Some(i) if i == old => {}
            Some(i) if Some(i) == j.new_ino(t) => {
                let name = (0..j.names.len()).find(|n| ino(Some(*n), t) == Some(old))?;
                steps.push(Step::RestorePrimary { name, tier: t });
            }
            _ => return None,
        }
    }
    for &(t, new) in &j.new {
        if j.old_ino(t).is_none() {
            match ino(None, t) {
                None => {}
                Some(i) if i == new => steps.push(Step::UnlinkPrimary { tier: t }),
                Some(_) => return None,
            }
        }
    }
    Some(Plan {
        steps,
        ..Plan::default()
    })
}

/// A fresh temporary name in `dir`: the prefix the scan and `fsck` know as ours, then
/// digits only: the process id, a random number drawn once per process and a counter.
/// A held journal's keep outlives its process, and a daemon may well get the same pid at
/// every start (pid 1 in a container): the random part keeps a later move's temporary
/// from landing on it.
pub fn temp_name(dir: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static DRAWN: OnceLock<u64> = OnceLock::new();
    let r = DRAWN.get_or_init(crate::layout::new_file_id);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{TMP_PREFIX}{}{r:020}{n:08}", std::process::id()))
}

/// Links `from` under a temporary name in the folder of `name` (made if missing: a
/// failed mirror), to be renamed over `name` later; returns the temporary's path.
pub fn link_as_temp(b: Beneath<'_>, from: &Path, name: &Path) -> io::Result<PathBuf> {
    let dir = name.parent().unwrap_or(Path::new(""));
    let tmp = temp_name(dir);
    if let Err(e) = b.link(from, &tmp) {
        if e.kind() != io::ErrorKind::NotFound || !b.exists(from) {
            return Err(e);
        }
        b.mkdir_all(dir)?;
        b.link(from, &tmp)?;
    }
    Ok(tmp)
}

/// Carries `j` out on the tiers `on(t)` gives (a tier's calls and its data folder):
/// [`plan`], then each step when the move took effect. Stops at the first failure.
pub fn carry_out<'a>(
    j: &Journal,
    on: impl Fn(usize) -> (Beneath<'a>, PathBuf),
) -> io::Result<Verdict> {
    let entry = |name: Option<usize>, t: usize| -> PathBuf {
        let data = on(t).1;
        match (name, j.pending_on(t)) {
            // The temporary is in the tier's `.tierfs-meta/`, beside its data folder.
            (Some(PENDING), Some(p)) => data.parent().unwrap_or(Path::new("")).join(p),
            (Some(PENDING), None) => PathBuf::new(),
            (name, _) => data.join(name.map_or(&j.primary, |n| &j.names[n])),
        }
    };
    // Every entry the rule may look at, stat-ed once. One that cannot be (anything but
    // its absence: EIO, ESTALE) leaves the journal unsettled: taken for missing, a torn
    // move would be undone while its temporaries hold writes the old pieces never saw.
    let mut seen = std::collections::HashMap::new();
    let names = (0..j.names.len()).map(Some).chain([None, Some(PENDING)]);
    for (name, t) in names.flat_map(|n| j.tiers().into_iter().map(move |t| (n, t))) {
        let e = entry(name, t);
        let i = match on(t).0.stat(&e) {
            _ if e.as_os_str().is_empty() => None,
            Ok(m) => Some(m.ino()),
            Err(x) if x.kind() == io::ErrorKind::NotFound => None,
            Err(x) => return Err(io::Error::new(x.kind(), format!("{}: {x}", e.display()))),
        };
        seen.insert((name, t), i);
    }
    let ino = |name: Option<usize>, t: usize| seen.get(&(name, t)).copied().flatten();
    let v = plan(j, ino);
    let (Verdict::Finish(p) | Verdict::RollBack(p) | Verdict::NotStarted(p)) = &v else {
        return Ok(v);
    };
    // Replaces an entry in one step: the name is never without one.
    let link_over = |b: Beneath<'_>, from: &Path, to: &Path| -> io::Result<()> {
        let tmp = link_as_temp(b, from, to)?;
        b.rename(&tmp, to, 0).inspect_err(|_| {
            let _ = b.unlink(&tmp);
        })
    };
    let mut changed: Vec<(usize, PathBuf)> = Vec::new();
    for s in &p.steps {
        let (tier, e) = match *s {
            Step::Link { name, tier } => {
                let e = entry(Some(name), tier);
                link_over(on(tier).0, &entry(None, tier), &e)?;
                (tier, e)
            }
            Step::RestorePrimary { name, tier } => {
                let e = entry(None, tier);
                link_over(on(tier).0, &entry(Some(name), tier), &e)?;
                (tier, e)
            }
            Step::Unlink { name, tier } => {
                let e = entry(Some(name), tier);
                on(tier).0.unlink(&e)?;
                (tier, e)
            }
            Step::UnlinkPrimary { tier } => {
                let e = entry(None, tier);
                on(tier).0.unlink(&e)?;
                (tier, e)
            }
            Step::Install { tier } => {
                let e = entry(None, tier);
                on(tier).0.rename(&entry(Some(PENDING), tier), &e, 0)?;
                (tier, e)
            }
        };
        changed.push((tier, e.parent().unwrap_or(Path::new("")).to_path_buf()));
    }
    // Durable before the caller removes the journal: the steps touch other tiers'
    // filesystems than the journal's, and a power cut that kept the removal but lost a
    // step would leave a name mixed with no journal to settle it.
    changed.sort();
    changed.dedup();
    for (t, d) in changed {
        on(t).0.sync_dir(&d)?;
    }
    Ok(v)
}

/// Why [`finish`] did not settle a journal.
#[derive(Debug)]
pub struct NotSettled {
    /// What was found, what was done and what a person may do, for the log.
    pub why: String,
    /// The journal when it stays in place: its names may be a mix of old and new pieces
    /// and must not be served, nor their entries and keeps changed, until it is settled.
    /// `None` when it was set aside or could not be read.
    pub held: Option<Box<Journal>>,
    /// The scan must be cautious (remove no temporary, hold a file whose pieces
    /// disagree): what the journal names cannot be told (it could not be read, or does
    /// not parse), or it stays in place although carried out.
    pub cautious: bool,
}

impl std::fmt::Display for NotSettled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// What held journals ([`NotSettled::held`]) keep from the mount's and `fsck`'s walks.
#[derive(Debug, Default)]
pub struct Held {
    /// Names that may be a mix of old and new pieces, with the journal that holds them:
    /// neither served nor resolved.
    pub names: std::collections::BTreeMap<PathBuf, PathBuf>,
    /// Keeps (temporary names holding old pieces): not removed.
    pub keeps: std::collections::BTreeSet<PathBuf>,
    /// The new pieces' temporaries (tier, path from the tier's folder): kept in limbo.
    pub pending: std::collections::BTreeSet<(usize, PathBuf)>,
}

impl Held {
    /// Holds the names of `j`, the journal at `path`.
    pub fn hold(&mut self, j: Journal, path: &Path) {
        self.pending.extend(j.pending);
        if j.keeps {
            self.keeps.extend(j.names);
        } else {
            for n in j.names {
                self.names.insert(n, path.to_path_buf());
            }
        }
        self.names.insert(j.primary, path.to_path_buf());
    }
}

/// What a held journal's names answer, and how a person ends it.
const HELD: &str = "the journal stays, and the mount answers EIO for its names until a \
                    mount or `tierfs fsck --repair` settles it; to serve the pieces as the \
                    tiers hold them instead (they may mix bytes from before and after the \
                    move), remove the journal";

/// What a journal that cannot be read leaves undecided, and until when.
const UNTOLD: &str = "what it names cannot be told, so no move's temporary or kept old \
                      piece is removed and a file whose pieces disagree answers EIO until a \
                      mount (or `tierfs fsck --repair`) can read it or a person removes it";

/// The same for one that does not parse, set aside: never read again.
const NO_PARSE: &str = "it does not parse (a newer tierfs's, or bytes gone bad): what it names \
                        cannot be told, so while it is there no mount removes a move's \
                        temporary or kept old piece, and a file whose pieces disagree answers \
                        EIO; settle those by hand, then remove it";

/// Settles the journal at `path` for the mount's scan and `fsck --repair` alike, on the
/// tiers `on(t)` gives (`None` for a tier that is not there): carried out and removed, or
/// removed when its move never took effect. One that cannot be settled is held (stays in
/// place: a tier missing, an I/O error, neither finished nor undone) or, when its primary
/// is whole and only other names are in doubt, set aside as `*.unfinished`. One that
/// cannot be read (but for its being gone) or does not parse (set aside too) leaves what
/// it names untold: [`NotSettled::cautious`]. `Ok` says what was done.
pub fn finish<'a>(
    path: &Path,
    on: impl Fn(usize) -> Option<(Beneath<'a>, PathBuf)>,
) -> Result<String, NotSettled> {
    let j = match journal::read(path) {
        Ok(Some(j)) => j,
        Ok(None) => {
            return Err(NotSettled {
                why: set_aside(path, NO_PARSE),
                held: None,
                cautious: true,
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(NotSettled {
                why: "it is gone (removed since it was listed)".into(),
                held: None,
                cautious: false,
            })
        }
        Err(e) => {
            return Err(NotSettled {
                why: format!("cannot read it ({e}); {UNTOLD}"),
                held: None,
                cautious: true,
            })
        }
    };
    let hold = |why: String| NotSettled {
        why: format!("{why}; {HELD}"),
        held: Some(Box::new(j.clone())),
        cautious: false,
    };
    if let Some(t) = j.tiers().into_iter().find(|t| on(*t).is_none()) {
        return Err(hold(format!(
            "a move of /{} names tier {t}, which is not here",
            j.primary.display()
        )));
    }
    let r = carry_out(&j, |t| on(t).expect("checked above"));
    // Only a finished move leaves the primary whole; anything else may be torn.
    let whole = matches!(r, Ok(Verdict::Finish(_)));
    let done = match outcome(&j, r) {
        Ok(done) => done,
        Err(why) if whole => {
            return Err(NotSettled {
                why: set_aside(path, &why),
                held: None,
                cautious: false,
            })
        }
        Err(why) => return Err(hold(why)),
    };
    std::fs::remove_file(path).map_err(|e| NotSettled {
        why: format!("{done}, but the journal stays: {e}"),
        held: None,
        cautious: true,
    })?;
    sync_folder(path.parent());
    Ok(done)
}

/// What [`finish`] says a carried-out journal came to: `Ok` what was done, `Err` why it
/// is not settled.
fn outcome(j: &Journal, r: io::Result<Verdict>) -> Result<String, String> {
    if j.keeps {
        return keeps_outcome(j, r);
    }
    let primary = j.primary.display();
    let names = j
        .names
        .iter()
        .map(|n| format!("/{}", n.display()))
        .collect::<Vec<_>>()
        .join(", ");
    let v = r.map_err(|e| {
        format!("settling the move of /{primary} and its other names ({names}) failed ({e})")
    })?;
    match v {
        Verdict::Finish(p) if !p.missing.is_empty() => {
            let lost: Vec<String> = p
                .missing
                .iter()
                .map(|n| format!("/{}", j.names[*n].display()))
                .collect();
            Err(format!(
                "re-linked /{primary}'s other names, but {} are no longer where the journal \
                 says (a folder above them renamed since?): under their new paths they may \
                 keep the bytes from before the move",
                lost.join(", ")
            ))
        }
        Verdict::Finish(p) => Ok(format!(
            "finished the re-linking of /{primary}'s other names ({names}) after a move a \
             crash cut short{}: {} entries changed{}",
            installed(&p),
            p.steps.len(),
            if p.foreign.is_empty() {
                String::new()
            } else {
                format!("; {} entries not the file's left alone", p.foreign.len())
            }
        )),
        Verdict::NotStarted(_) => Ok(format!(
            "a move of /{primary} never took effect; its names keep their pieces"
        )),
        Verdict::RollBack(p) => Ok(format!(
            "a move of /{primary} stopped between its own pieces: undone ({} entries changed, \
             its old pieces back from its other names {names}); every name reads the bytes \
             from before the move",
            p.steps.len()
        )),
        Verdict::Unsettled => Err(format!(
            "the move of /{primary} stopped between its own pieces with an old piece no name \
             holds, or the name was moved since, so it can be neither finished nor undone \
             (other names: {names})"
        )),
    }
}

/// What a finishing plan says of the new pieces it puts in place, if any.
fn installed(p: &Plan) -> String {
    match p
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Install { .. }))
        .count()
    {
        0 => String::new(),
        n => format!(" ({n} of its new pieces renamed in from the move's temporaries)"),
    }
}

/// [`outcome`] for a keep journal (a file with one name): its keeps are not names to
/// speak of.
fn keeps_outcome(j: &Journal, r: io::Result<Verdict>) -> Result<String, String> {
    let primary = j.primary.display();
    match r {
        Ok(Verdict::Finish(p)) if !installed(&p).is_empty() => Ok(format!(
            "finished a move of /{primary} cut short between its own renames{}: {} entries \
             changed; it reads the bytes from after the move",
            installed(&p),
            p.steps.len()
        )),
        Ok(Verdict::Finish(p)) => Ok(format!(
            "finished a move of /{primary} a crash cut short after its last rename: {} \
             entries removed",
            p.steps.len()
        )),
        Ok(Verdict::NotStarted(_)) => Ok(format!(
            "a move of /{primary} never took effect; the file keeps its pieces"
        )),
        Ok(Verdict::RollBack(p)) => Ok(format!(
            "a move of /{primary} stopped between its own pieces: undone ({} entries changed, \
             its old pieces back from the links the move kept); it reads the bytes from \
             before the move",
            p.steps.len()
        )),
        Ok(Verdict::Unsettled) => Err(format!(
            "the move of /{primary} stopped between its own pieces with an old piece not kept, \
             or the file was moved since, so it can be neither finished nor undone"
        )),
        Err(e) => Err(format!(
            "undoing or finishing the move of /{primary} a crash cut short failed ({e})"
        )),
    }
}

#[cfg(test)]
mod tests;
