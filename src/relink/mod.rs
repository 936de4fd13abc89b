//! A moved file's other names (hard links), and the journal that carries their re-linking
//! across a crash.
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

mod files;

pub use files::{list, list_set_aside, read, remove_torn_writes, set_aside, write, Listed};

use crate::beneath::Beneath;
use crate::vfs::types::TMP_PREFIX;
use files::sync_folder;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Journal files' names begin so, in a tier's `.tierfs-meta/` folder.
pub const JOURNAL_PREFIX: &str = "relink-";
const MAGIC: &str = "tierfs-relink v1";

/// A move's re-linking, as written before its first rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    /// The file's primary name, relative to the tiers' data folders.
    pub primary: PathBuf,
    /// Its other names.
    pub names: Vec<PathBuf>,
    /// (tier, backing inode) of each new piece.
    pub new: Vec<(usize, u64)>,
    /// (tier, backing inode) of each old piece.
    pub old: Vec<(usize, u64)>,
    /// `names` are not the user's but the move's keeps: second names (temporaries beside
    /// the primary) of the old entries its renames replace, for a file with one name. On
    /// every verdict they are removed, never re-linked; a torn move is undone from them.
    pub keeps: bool,
    /// (tier, path from the tier's folder) of each new piece's temporary (in limbo): what
    /// finishes a move torn between the primary's renames. Empty in older journals.
    pub pending: Vec<(usize, PathBuf)>,
}

/// The pseudo-name [`plan`]'s `ino` takes for a new piece's temporary ([`Journal::pending`]).
pub const PENDING: usize = usize::MAX;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Journal {
    /// The text form: one field a line, paths hex-encoded (a name may hold any byte but
    /// `/` and NUL, newlines included).
    pub fn encode(&self) -> String {
        let mut s = format!(
            "{MAGIC}\nprimary {}\n",
            hex(self.primary.as_os_str().as_bytes())
        );
        if self.keeps {
            s += "keeps\n";
        }
        for n in &self.names {
            s += &format!("name {}\n", hex(n.as_os_str().as_bytes()));
        }
        for (t, ino) in &self.new {
            s += &format!("new {t} {ino}\n");
        }
        for (t, ino) in &self.old {
            s += &format!("old {t} {ino}\n");
        }
        for (t, p) in &self.pending {
            s += &format!("pending {t} {}\n", hex(p.as_os_str().as_bytes()));
        }
        s + "end\n"
    }

    /// Parses [`Journal::encode`]'s output; `None` for anything else, a torn write
    /// included (it ends with `end`).
    pub fn decode(s: &str) -> Option<Journal> {
        let mut lines = s.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let path = |v: &str| Some(PathBuf::from(OsString::from_vec(unhex(v)?)));
        let (mut primary, mut names, mut new, mut old) = (None, vec![], vec![], vec![]);
        let (mut keeps, mut pending) = (false, vec![]);
        for l in lines {
            let mut w = l.split(' ');
            match (w.next()?, w.next(), w.next()) {
                ("primary", Some(v), None) => primary = Some(path(v)?),
                ("keeps", None, None) => keeps = true,
                ("name", Some(v), None) => names.push(path(v)?),
                ("new", Some(t), Some(i)) => new.push((t.parse().ok()?, i.parse().ok()?)),
                ("old", Some(t), Some(i)) => old.push((t.parse().ok()?, i.parse().ok()?)),
                ("pending", Some(t), Some(p)) => pending.push((t.parse().ok()?, path(p)?)),
                ("end", None, None) => {
                    return Some(Journal {
                        primary: primary?,
                        names,
                        new,
                        old,
                        keeps,
                        pending,
                    })
                }
                _ => return None,
            }
        }
        None
    }

    fn old_ino(&self, t: usize) -> Option<u64> {
        self.old.iter().find(|(u, _)| *u == t).map(|(_, i)| *i)
    }

    fn new_ino(&self, t: usize) -> Option<u64> {
        self.new.iter().find(|(u, _)| *u == t).map(|(_, i)| *i)
    }

    /// The new piece's temporary on tier `t`, from the tier's folder.
    pub fn pending_on(&self, t: usize) -> Option<&Path> {
        self.pending
            .iter()
            .find(|(u, _)| *u == t)
            .map(|(_, p)| p.as_path())
    }

    /// Every tier it names.
    pub fn tiers(&self) -> Vec<usize> {
        self.new.iter().chain(&self.old).map(|(t, _)| *t).collect()
    }
}

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
    let j = match files::read(path) {
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
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Primary `d/a` moves from tiers 0 and 1 (old pieces 10, 11) to tiers 1 and 2 (new
    /// pieces 21, 22); other names `b` and one with a newline and a non-UTF-8 byte.
    fn journal() -> Journal {
        Journal {
            primary: "d/a".into(),
            names: vec![
                "b".into(),
                PathBuf::from(OsString::from_vec(b"c\nx\xff".to_vec())),
            ],
            new: vec![(1, 21), (2, 22)],
            old: vec![(0, 10), (1, 11)],
            keeps: false,
            pending: vec![],
        }
    }

    #[test]
    fn the_journal_round_trips_and_a_torn_one_is_refused() {
        let j = journal();
        let s = j.encode();
        assert_eq!(Journal::decode(&s), Some(j));
        let torn = &s[..s.len() - 4];
        assert_eq!(Journal::decode(torn), None);
        assert_eq!(Journal::decode("garbage"), None);
        assert_eq!(Journal::decode(&s.replace("new 1 21", "new x 21")), None);
    }

    type State = HashMap<(Option<usize>, usize), u64>;

    fn plan_of(j: &Journal, state: &State) -> Verdict {
        plan(j, |n, t| state.get(&(n, t)).copied())
    }

    #[test]
    fn a_move_cut_short_after_the_primary_relinks_every_name() {
        let j = journal();
        // The primary's old piece on tier 0 is still there; b is done on tier 1 and has
        // its old piece on tier 0; c has its old pieces only.
        let state: State = [
            ((None, 0), 10),
            ((None, 1), 21),
            ((None, 2), 22),
            ((Some(0), 0), 10),
            ((Some(0), 1), 21),
            ((Some(1), 0), 10),
            ((Some(1), 1), 11),
        ]
        .into();
        let Verdict::Finish(p) = plan_of(&j, &state) else {
            panic!("not finished")
        };
        assert_eq!(
            p.steps,
            vec![
                Step::Link { name: 0, tier: 2 },
                Step::Unlink { name: 0, tier: 0 },
                Step::Link { name: 1, tier: 1 },
                Step::Link { name: 1, tier: 2 },
                Step::Unlink { name: 1, tier: 0 },
                Step::UnlinkPrimary { tier: 0 },
            ]
        );
        assert!(p.foreign.is_empty());
    }

    #[test]
    fn a_move_not_begun_or_torn_is_not_finished() {
        let j = journal();
        // The primary holds its old pieces: the move never took effect.
        let state: State = [((None, 0), 10), ((None, 1), 11), ((Some(0), 1), 11)].into();
        assert_eq!(plan_of(&j, &state), Verdict::NotStarted(Plan::default()));
        // Neither old nor new pieces (the primary moved since): cannot be settled.
        let state: State = [((None, 1), 31), ((None, 2), 32)].into();
        assert_eq!(plan_of(&j, &state), Verdict::Unsettled);
        // The primary gone: not "never took effect" either.
        let state: State = [((Some(0), 0), 10), ((Some(0), 1), 11)].into();
        assert_eq!(plan_of(&j, &state), Verdict::Unsettled);
        // New on tier 1, not on tier 2: torn between the primary's own renames, and no
        // other name holds the old piece it lost on tier 1.
        let state: State = [((None, 0), 10), ((None, 1), 21)].into();
        assert_eq!(plan_of(&j, &state), Verdict::Unsettled);
    }

    #[test]
    fn a_move_torn_between_the_primarys_pieces_is_undone_from_the_other_names() {
        let j = journal();
        let names_old = [
            ((Some(0), 0), 10),
            ((Some(0), 1), 11),
            ((Some(1), 0), 10),
            ((Some(1), 1), 11),
        ];
        // The new piece renamed in on tier 1 (over the old one), not yet on tier 2.
        let state: State = names_old
            .into_iter()
            .chain([((None, 0), 10), ((None, 1), 21)])
            .collect();
        let Verdict::RollBack(p) = plan_of(&j, &state) else {
            panic!("not undone")
        };
        assert_eq!(p.steps, vec![Step::RestorePrimary { name: 0, tier: 1 }]);
        // On tier 2 first (a tier the old layout did not use): that entry goes.
        let state: State = names_old
            .into_iter()
            .chain([((None, 0), 10), ((None, 1), 11), ((None, 2), 22)])
            .collect();
        let Verdict::RollBack(p) = plan_of(&j, &state) else {
            panic!("not undone")
        };
        assert_eq!(p.steps, vec![Step::UnlinkPrimary { tier: 2 }]);
        // An entry of the primary that is neither old nor new: not the move's to undo.
        let state: State = names_old
            .into_iter()
            .chain([((None, 0), 77), ((None, 1), 21)])
            .collect();
        assert_eq!(plan_of(&j, &state), Verdict::Unsettled);
    }

    /// The same tears with the move's temporaries still where the journal says: finished
    /// instead (each temporary renamed in first, then every name re-linked), as the new
    /// pieces hold writes the old ones never saw. A temporary that is not the new piece
    /// (gone, or another file since), or a primary entry that is neither old nor new, and
    /// the rule is the one above.
    #[test]
    fn a_torn_move_whose_temporaries_are_left_is_finished_from_them() {
        let j = Journal {
            pending: vec![(1, "m/t1".into()), (2, "m/t2".into())],
            ..journal()
        };
        let names_old = [
            ((Some(0), 0), 10),
            ((Some(0), 1), 11),
            ((Some(1), 0), 10),
            ((Some(1), 1), 11),
        ];
        let tmps = [((Some(PENDING), 1), 21), ((Some(PENDING), 2), 22)];
        let state = |primary: &[((Option<usize>, usize), u64)], tmps: &[_]| -> State {
            names_old
                .into_iter()
                .chain(primary.iter().copied())
                .chain(tmps.iter().copied())
                .collect()
        };
        let relinked = |first: Vec<Step>| {
            let mut steps = first;
            for name in 0..2 {
                steps.push(Step::Link { name, tier: 1 });
                steps.push(Step::Link { name, tier: 2 });
                steps.push(Step::Unlink { name, tier: 0 });
            }
            steps.push(Step::UnlinkPrimary { tier: 0 });
            steps
        };
        // Tier 1 renamed in; tier 2's temporary still in limbo.
        let s = state(&[((None, 0), 10), ((None, 1), 21)], &tmps[1..]);
        let Verdict::Finish(p) = plan_of(&j, &s) else {
            panic!("not finished")
        };
        assert_eq!(p.steps, relinked(vec![Step::Install { tier: 2 }]));
        // Nothing renamed yet (a crash right after the journal): both go in.
        let s = state(&[((None, 0), 10), ((None, 1), 11)], &tmps);
        let Verdict::Finish(p) = plan_of(&j, &s) else {
            panic!("not finished")
        };
        let both = vec![Step::Install { tier: 1 }, Step::Install { tier: 2 }];
        assert_eq!(p.steps, relinked(both));
        // Tier 2's temporary gone, or another file's: undone as before.
        let s = state(&[((None, 0), 10), ((None, 1), 21)], &[]);
        assert!(matches!(plan_of(&j, &s), Verdict::RollBack(_)));
        let s = state(
            &[((None, 0), 10), ((None, 1), 21)],
            &[((Some(PENDING), 2), 99)],
        );
        assert!(matches!(plan_of(&j, &s), Verdict::RollBack(_)));
        // The primary's entry on tier 2 is neither old nor new: not installed over.
        let s = state(&[((None, 0), 10), ((None, 1), 21), ((None, 2), 77)], &tmps);
        assert_eq!(plan_of(&j, &s), Verdict::Unsettled);
        // The primary gone from a tier of the old layout (unlinked or renamed since: a
        // journal that outlived its move): nothing brought back under its name.
        let s = state(&[((None, 1), 21)], &tmps);
        assert_eq!(plan_of(&j, &s), Verdict::Unsettled);
        let s = state(&[], &tmps);
        assert!(!matches!(plan_of(&j, &s), Verdict::Finish(_)));
        // A keep journal the same: installed, then the keep goes.
        let k = Journal {
            pending: j.pending.clone(),
            ..keep_journal()
        };
        let s: State = [((None, 0), 10), ((None, 1), 21), ((Some(0), 1), 11)]
            .into_iter()
            .chain(tmps[1..].iter().copied())
            .collect();
        let Verdict::Finish(p) = plan_of(&k, &s) else {
            panic!("not finished")
        };
        let want = [
            Step::Install { tier: 2 },
            Step::UnlinkPrimary { tier: 0 },
            Step::Unlink { name: 0, tier: 1 },
        ];
        assert_eq!(p.steps, want);
        // The journal carries them.
        assert_eq!(Journal::decode(&k.encode()), Some(k));
    }

    /// A file with one name, `d/a`, moving from tiers 0 and 1 (old pieces 10, 11) to
    /// tiers 1 and 2 (new 21, 22): the move kept its old entry on tier 1 (the only one a
    /// rename replaces) as `d/.tierfs-tmp-1`.
    fn keep_journal() -> Journal {
        Journal {
            primary: "d/a".into(),
            names: vec![format!("d/{TMP_PREFIX}1").into()],
            keeps: true,
            pending: vec![],
            ..journal()
        }
    }

    #[test]
    fn a_keep_journal_round_trips_and_an_old_one_still_parses() {
        let j = keep_journal();
        assert_eq!(Journal::decode(&j.encode()), Some(j));
        // As the version before keeps wrote it.
        let old = format!(
            "{MAGIC}\nprimary {}\nname 62\nnew 1 21\nold 0 10\nend\n",
            hex(b"d/a")
        );
        let j = Journal::decode(&old).expect("an old journal parses");
        assert!(!j.keeps && j.names == [PathBuf::from("b")]);
    }

    /// Each state a crash can leave a keep journal's move in: the keeps never become
    /// names, and go on every verdict.
    #[test]
    fn a_keep_journal_undoes_or_finishes_the_move_and_removes_its_keeps() {
        let j = keep_journal();
        let keep = ((Some(0), 1), 11);
        let drop_keep = Step::Unlink { name: 0, tier: 1 };
        // Before the first rename: nothing to do but remove the keep.
        let state: State = [((None, 0), 10), ((None, 1), 11), keep].into();
        let want = Plan {
            steps: vec![drop_keep.clone()],
            ..Plan::default()
        };
        assert_eq!(plan_of(&j, &state), Verdict::NotStarted(want));
        // Torn after tier 1's rename: its old entry back from the keep, then the keep goes.
        let state: State = [((None, 0), 10), ((None, 1), 21), keep].into();
        let Verdict::RollBack(p) = plan_of(&j, &state) else {
            panic!("not undone")
        };
        assert_eq!(
            p.steps,
            vec![Step::RestorePrimary { name: 0, tier: 1 }, drop_keep.clone()]
        );
        // Torn after tier 2's rename, where the file had no entry: that new piece goes.
        let state: State = [((None, 0), 10), ((None, 1), 11), ((None, 2), 22), keep].into();
        let Verdict::RollBack(p) = plan_of(&j, &state) else {
            panic!("not undone")
        };
        assert_eq!(
            p.steps,
            vec![Step::UnlinkPrimary { tier: 2 }, drop_keep.clone()]
        );
        // Every rename done: the old piece on the tier left, and the keep, go; nothing is
        // linked under the keep's name.
        let done = [((None, 0), 10), ((None, 1), 21), ((None, 2), 22)];
        let state: State = done.into_iter().chain([keep]).collect();
        let Verdict::Finish(p) = plan_of(&j, &state) else {
            panic!("not finished")
        };
        assert_eq!(p.steps, vec![Step::UnlinkPrimary { tier: 0 }, drop_keep]);
        assert!(p.missing.is_empty() && p.foreign.is_empty());
        // The keep removed already (a crash after the move's own removal of it).
        let state: State = done.into();
        let Verdict::Finish(p) = plan_of(&j, &state) else {
            panic!("not finished")
        };
        assert_eq!(p.steps, vec![Step::UnlinkPrimary { tier: 0 }]);
        // Torn, and the keep lost (or never made): neither finished nor undone.
        let state: State = [((None, 0), 10), ((None, 1), 21)].into();
        assert_eq!(plan_of(&j, &state), Verdict::Unsettled);
    }

    #[test]
    fn entries_that_are_not_the_files_and_names_removed_since_are_left_alone() {
        let j = journal();
        let state: State = [
            ((None, 1), 21),
            ((None, 2), 22),
            // b: another file's entry on tier 1 (not old, not new), new on tier 2, and
            // something else on tier 0, which is not removed.
            ((Some(0), 1), 99),
            ((Some(0), 2), 22),
            ((Some(0), 0), 98),
            // c: nothing of the file anywhere (its folder renamed since): not brought back.
            ((Some(1), 0), 97),
        ]
        .into();
        let Verdict::Finish(p) = plan_of(&j, &state) else {
            panic!("not finished")
        };
        assert!(p.steps.is_empty(), "{:?}", p.steps);
        assert_eq!(p.foreign, vec![(0, 1)]);
        assert_eq!(p.missing, vec![1]);
    }

    /// `finish` on real folders: a torn move is undone from the other name and its journal
    /// removed; a finished one is removed; one naming a tier that is not there, or torn
    /// beyond undoing, is held in place; one that does not parse is set aside and never
    /// listed again; one whose primary has its old pieces still (never took effect) is
    /// removed.
    #[test]
    fn finish_removes_or_sets_aside_the_journal() {
        let d = tempfile::tempdir().unwrap();
        let roots: Vec<PathBuf> = (0..2).map(|t| d.path().join(format!("t{t}"))).collect();
        for r in &roots {
            std::fs::create_dir_all(r.join("data")).unwrap();
        }
        let ino = |t: usize, n: &str| {
            std::fs::metadata(roots[t].join("data").join(n))
                .unwrap()
                .ino()
        };
        // Old pieces of "a" on tiers 0 and 1, the name "b" linked to them; the move's new
        // piece on tier 1 is in place, on tier 0 it is not: torn.
        for r in &roots {
            std::fs::write(r.join("data/a"), b"old").unwrap();
            std::fs::hard_link(r.join("data/a"), r.join("data/b")).unwrap();
        }
        let old = vec![(0, ino(0, "a")), (1, ino(1, "a"))];
        std::fs::write(roots[1].join("data/new"), b"new").unwrap();
        std::fs::rename(roots[1].join("data/new"), roots[1].join("data/a")).unwrap();
        let j = Journal {
            primary: "a".into(),
            names: vec!["b".into()],
            new: vec![(0, 12345678), (1, ino(1, "a"))],
            old,
            keeps: false,
            pending: vec![],
        };
        let meta = d.path().join("meta");
        std::fs::create_dir(&meta).unwrap();
        let on = |t: usize| roots.get(t).map(|r| (Beneath::new(r), r.join("data")));
        let p = write(&meta, "torn", &j).unwrap();
        let done = finish(&p, on).unwrap();
        assert!(done.contains("undone"), "{done}");
        assert!(!p.exists());
        assert_eq!(std::fs::read(roots[1].join("data/a")).unwrap(), b"old");
        assert_eq!(ino(1, "a"), ino(1, "b"));
        // The same move finished on tier 1 only: b follows a there.
        std::fs::write(roots[1].join("data/new"), b"new").unwrap();
        std::fs::rename(roots[1].join("data/new"), roots[1].join("data/a")).unwrap();
        let j = Journal {
            new: vec![(1, ino(1, "a"))],
            ..j
        };
        let p = write(&meta, "done", &j).unwrap();
        let done = finish(&p, on).unwrap();
        assert!(done.contains("finished"), "{done}");
        assert_eq!(ino(1, "b"), ino(1, "a"));
        assert!(
            !roots[0].join("data/b").exists(),
            "the old piece of b on tier 0 stayed"
        );
        assert!(!p.exists());
        // A journal naming a tier that is not there.
        let j = Journal {
            new: vec![(5, 1)],
            ..j
        };
        let p = write(&meta, "missing", &j).unwrap();
        let not = finish(&p, on).unwrap_err();
        assert!(
            not.why.contains("tier 5") && not.why.contains("EIO"),
            "{not}"
        );
        assert_eq!(not.held.as_deref(), Some(&j), "not held");
        assert_eq!(
            list(&meta).unwrap().len(),
            1,
            "a held journal is not kept for later"
        );
        std::fs::remove_file(&p).unwrap();
        // Its primary torn with an old piece no name holds: held too, never set aside.
        std::fs::write(roots[0].join("data/c"), b"x").unwrap();
        let j = Journal {
            primary: "c".into(),
            new: vec![(0, 12345678), (1, 23456789)],
            old: vec![(0, 34567890)],
            ..j
        };
        let p = write(&meta, "torn-alone", &j).unwrap();
        let not = finish(&p, on).unwrap_err();
        assert!(not.held.is_some() && p.exists(), "{not}");
        std::fs::remove_file(&p).unwrap();
        // A journal that does not parse is set aside and never listed again.
        let p = meta.join(format!("{JOURNAL_PREFIX}garbage"));
        std::fs::write(&p, "not a journal").unwrap();
        let not = finish(&p, on).unwrap_err();
        assert!(
            not.held.is_none() && not.why.contains("unfinished"),
            "{not}"
        );
        assert!(
            list(&meta).unwrap().is_empty(),
            "a set-aside journal is listed again"
        );
        // The primary holds its (now) only piece, the old one of a move not begun.
        let j = Journal {
            primary: "a".into(),
            new: vec![(0, 12345678)],
            old: vec![(1, ino(1, "a"))],
            ..j
        };
        let p = write(&meta, "notbegun", &j).unwrap();
        assert!(finish(&p, on).unwrap().contains("never took effect"));
        assert!(!p.exists());
    }

    /// A move torn between its own renames (tier 0 renamed, tier 1 not), its keep journal
    /// naming tier 1's new piece at its temporary; at the next mount that temporary cannot
    /// be stat-ed (here a symlink on its path: ELOOP; on a failing tier EIO or ESTALE).
    /// What it holds cannot be told: the journal is held in place, nothing is changed.
    ///
    /// Found (issue 38, point 4): a stat error counted as no entry, so the move was undone
    /// from the keep and its journal removed; the mount then emptied limbo, and the writes
    /// only the temporaries held (a lazy migration's) were lost.
    #[test]
    fn a_journal_whose_temporary_cannot_be_stat_ed_is_held() {
        let d = tempfile::tempdir().unwrap();
        let roots: Vec<PathBuf> = (0..2).map(|t| d.path().join(format!("t{t}"))).collect();
        let ino = |p: PathBuf| std::fs::symlink_metadata(p).unwrap().ino();
        for r in &roots {
            std::fs::create_dir_all(r.join("data")).unwrap();
            std::fs::create_dir_all(r.join("meta/real")).unwrap();
            std::fs::write(r.join("data/a"), b"old").unwrap();
            std::fs::hard_link(r.join("data/a"), r.join("data/k")).unwrap();
        }
        let old = vec![
            (0, ino(roots[0].join("data/a"))),
            (1, ino(roots[1].join("data/a"))),
        ];
        std::fs::write(roots[0].join("data/n"), b"new").unwrap();
        std::fs::rename(roots[0].join("data/n"), roots[0].join("data/a")).unwrap();
        std::fs::write(roots[1].join("meta/real/p"), b"new").unwrap();
        std::os::unix::fs::symlink("real", roots[1].join("meta/limbo")).unwrap();
        let new = vec![
            (0, ino(roots[0].join("data/a"))),
            (1, ino(roots[1].join("meta/real/p"))),
        ];
        let j = Journal {
            primary: "a".into(),
            names: vec!["k".into()],
            new: new.clone(),
            old,
            keeps: true,
            pending: vec![(1, "meta/limbo/p".into())],
        };
        let meta = d.path().join("journals");
        std::fs::create_dir(&meta).unwrap();
        let p = write(&meta, "torn", &j).unwrap();
        let on = |t: usize| roots.get(t).map(|r| (Beneath::new(r), r.join("data")));
        let not = finish(&p, on).unwrap_err();
        assert!(not.held.is_some() && p.exists(), "{not}");
        assert_eq!(ino(roots[0].join("data/a")), new[0].1, "undone");
        assert!(roots[0].join("data/k").exists(), "the keep went");
        // Its path readable again: finished from the temporary.
        std::fs::remove_file(roots[1].join("meta/limbo")).unwrap();
        std::fs::rename(roots[1].join("meta/real"), roots[1].join("meta/limbo")).unwrap();
        assert!(finish(&p, on).unwrap().contains("renamed in"));
        assert_eq!(ino(roots[1].join("data/a")), new[1].1, "not finished");
        assert!(!p.exists() && !roots[0].join("data/k").exists());
    }
}
