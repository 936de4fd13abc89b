//! `tierfs fsck`: walks the tiers offline (under every tier's lock), lists each problem
//! the mount's rules find ([`super::issues`]) and, with `--repair`, applies the safe fixes
//! as it goes; a striped file split over two paths, and the names of files with several
//! (hard links), are settled once every file is known.

use super::issues::{resolve, same_bytes, Action, FileView, Issue, Item};
use super::{list, tier_dirs, EntKind, Failure, TierDir};
use crate::config::MountConfig;
use crate::layout::{conflict_path, FileLayout, Part, LAYOUT_XATTR};
use crate::sys::{self, SetTime};
use crate::tier::resolve::{backing_ids, plan_links, read_layout, BackingId, LayoutRead};
use crate::tier::{DATA_DIR, META_DIR};
use crate::vfs::TMP_PREFIX;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What `fsck` found (and repaired).
#[derive(Debug, Default)]
pub struct FsckReport {
    pub folders: u64,
    pub files: u64,
    pub bytes: u64,
    pub symlinks: u64,
    pub others: u64,
    /// Names beyond the first of files with several (hard links): `files`, `bytes`,
    /// `symlinks` and `others` count each such file once.
    pub links: u64,
    /// Every problem, with the outcome of its repair when one was tried: `Ok(what was
    /// done)` or `Err(why not)`.
    pub issues: Vec<(Issue, Option<Result<String, String>>)>,
    /// Tiers that were never mounted (no `data/` and no `.tierfs-meta/`): not a problem.
    pub fresh: Vec<String>,
}

impl FsckReport {
    pub fn problems(&self) -> usize {
        self.issues.len()
    }
    pub fn repaired(&self) -> usize {
        self.issues
            .iter()
            .filter(|(_, r)| matches!(r, Some(Ok(_))))
            .count()
    }
}

/// Holds every tier's lock for the length of a check, so no daemon mounts the tiers
/// meanwhile; fails when a daemon holds one.
pub struct TierLocks(#[allow(dead_code)] Vec<crate::tier::lock::TierLock>);

/// Takes the lock a daemon takes in `Tier::open` ([`crate::tier::lock`]), on every tier that has
/// been mounted before. A stale lock of this host (its daemon was killed) is taken over, as a
/// mount would; another host's is refused.
pub fn lock_tiers(tiers: &[TierDir]) -> Result<TierLocks, Failure> {
    let mut locks = Vec::new();
    for t in tiers {
        let meta = t.root.join(META_DIR);
        if !meta.is_dir() {
            continue;
        }
        let format = meta.join("format");
        if let Ok(text) = fs::read_to_string(&format) {
            let v = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("tierfs tier format "))
                .and_then(|v| v.trim().parse::<u32>().ok());
            if v != Some(crate::layout::FORMAT_VERSION) {
                return Err(Failure::runtime(format!(
                    "tier '{}': {} says format {v:?}; this tierfs reads format {} only",
                    t.name,
                    format.display(),
                    crate::layout::FORMAT_VERSION
                )));
            }
        }
        let me = crate::tier::lock::Holder::me("fsck", None, false);
        match crate::tier::lock::TierLock::acquire(&t.root, &meta, me, false) {
            Ok((lock, _)) => locks.push(lock),
            Err(crate::tier::lock::LockError::Held { holder, .. }) => {
                return Err(Failure::runtime(format!(
                    "tier '{}' ({}) is in use by a tierfs daemon ({}); fsck checks the tiers \
                     offline: unmount first (`tierfs unmount MOUNTPOINT`), or use `tierfs \
                     export`, which works while mounted",
                    t.name,
                    t.root.display(),
                    holder.describe()
                )));
            }
            Err(e) => return Err(Failure::runtime(format!("tier '{}': {e}", t.name))),
        }
    }
    Ok(TierLocks(locks))
}

/// One check in progress: the tiers, the report so far, where the problems go.
struct Check<'a> {
    cfg: &'a MountConfig,
    tiers: &'a [TierDir],
    repair: bool,
    out: &'a mut dyn Write,
    rep: FsckReport,
    /// `CreatePiece` issues of files with an id, held back until every file is known
    /// (the piece may sit at another path; see [`rejoin_issues`]).
    deferred: Vec<Issue>,
    /// Files with an id that lack some pieces, for [`rejoin_issues`].
    incomplete: Vec<(PathBuf, FileView)>,
    /// Names whose entries have other links, for [`link_issues`].
    linked: Vec<Linked>,
    /// What the journals still pending after [`Check::relink_journals`] hold: their
    /// names are not resolved (a fix could destroy the pieces a later settle needs), and
    /// their keeps are not temporaries to remove.
    held: crate::relink::Held,
    /// Why no repair but a journal's may be made, if so: a journal that cannot be told
    /// (unreadable, or not parsing) may name any temporary or torn file, as at a cautious
    /// mount ([`crate::vfs`]'s scan).
    untold: Option<String>,
}

/// Checks the tiers of `cfg` (which the caller has locked with [`lock_tiers`]); with
/// `repair`, applies each safe fix as it is found. `out` gets one line per problem.
pub fn fsck(
    cfg: &MountConfig,
    tiers: &[TierDir],
    repair: bool,
    out: &mut dyn Write,
) -> io::Result<FsckReport> {
    let mut c = Check {
        cfg,
        tiers,
        repair,
        out,
        rep: FsckReport::default(),
        deferred: Vec::new(),
        incomplete: Vec::new(),
        linked: Vec::new(),
        held: Default::default(),
        untold: None,
    };
    c.data_dirs()?;
    c.relink_journals()?;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        c.folder(&rel, &mut stack)?;
    }
    let mut deferred = std::mem::take(&mut c.deferred);
    let rejoins = rejoin_issues(&c.incomplete, &mut deferred);
    // A name a rejoin moves pieces to or from is settled by the rejoin first (as the
    // mount's scan does); the link rule sees it at the next check.
    let mut rejoined: Vec<PathBuf> = Vec::new();
    for issue in &rejoins {
        if let Some(Action::Rejoin { from, .. }) = &issue.action {
            rejoined.extend([issue.rel.clone(), from.clone()]);
        }
    }
    for issue in rejoins {
        c.record(issue)?;
    }
    let linked = std::mem::take(&mut c.linked);
    for issue in link_issues(&mut c.rep, linked, &rejoined, &mut deferred) {
        c.record(issue)?;
    }
    for issue in deferred {
        c.record(issue)?;
    }
    Ok(c.rep)
}

impl Check<'_> {
    /// Moves a crash cut short ([`crate::relink`]): one problem per journal, repaired (as
    /// the mount's scan would) before the walk, so the walk sees the names settled; what
    /// stays pending is held from the walk.
    fn relink_journals(&mut self) -> io::Result<()> {
        for issue in super::journals::issues(self.tiers) {
            self.record(issue)?;
        }
        (self.held, self.untold) = super::journals::held(self.tiers);
        Ok(())
    }

    /// Tiers without their `data/` folder: fresh ones are noted, emptied ones a problem.
    fn data_dirs(&mut self) -> io::Result<()> {
        let tiers = self.tiers;
        let mut missing_root = Vec::new();
        for (i, t) in tiers.iter().enumerate() {
            if !t.data.is_dir() {
                if t.root.join(META_DIR).is_dir() {
                    missing_root.push(i);
                } else {
                    self.rep.fresh.push(t.name.clone());
                }
            }
        }
        let like = (0..tiers.len()).find(|i| tiers[*i].data.is_dir());
        for i in missing_root {
            let issue = Issue::repair(
                Path::new(""),
                i,
                format!(
                    "the tier has no {DATA_DIR}/ folder although it was mounted before (was \
                     it emptied?)"
                ),
                Action::Mkdir { tier: i, like },
            );
            self.record(issue)?;
        }
        Ok(())
    }

    /// Checks one folder's entries over the tiers; pushes its subfolders on `stack`.
    fn folder(&mut self, rel: &Path, stack: &mut Vec<PathBuf>) -> io::Result<()> {
        let l = list(self.tiers, rel);
        for (t, dir, e) in &l.errors {
            let issue = Issue::manual(
                rel,
                Some(*t),
                format!("cannot read {}: {e}", dir.display()),
                "check the tier's file system and permissions".into(),
            );
            self.record(issue)?;
        }
        for (t, name, kind) in &l.temps {
            if !self.held.keeps.contains(&rel.join(name)) {
                self.record(temp_issue(&rel.join(name), *t, name, *kind))?;
            }
        }
        for (name, on) in &l.entries {
            let child = rel.join(name);
            if self.held.names.contains_key(&child) {
                continue;
            }
            if rel.as_os_str().is_empty() && name.as_os_str() == self.cfg.mount.stats_dir.as_str() {
                let issue = Issue::manual(
                    &child,
                    Some(on[0].0),
                    format!(
                        "the stats folder {:?} hides this {} in the mount",
                        self.cfg.mount.stats_dir,
                        on[0].1.word()
                    ),
                    "rename it on every tier that has it".into(),
                );
                self.record(issue)?;
                continue;
            }
            self.entry(child, on, &l.missing, stack)?;
        }
        Ok(())
    }

    /// Checks one name of a folder and counts what it is.
    fn entry(
        &mut self,
        child: PathBuf,
        on: &[(usize, EntKind)],
        parent_missing: &[usize],
        stack: &mut Vec<PathBuf>,
    ) -> io::Result<()> {
        let (item, issues) = resolve(self.tiers, &child, on, parent_missing);
        // A missing piece of a file with an id may sit at another path: decided (and
        // repaired) once every file is known, see `rejoin_issues`.
        let split_candidate = matches!(&item, Item::File(v) if v.id.is_some());
        for issue in issues {
            if split_candidate && matches!(issue.action, Some(Action::CreatePiece { .. })) {
                self.deferred.push(issue);
            } else {
                self.record(issue)?;
            }
        }
        let backing: Option<(Vec<usize>, Count, u64)> = match &item {
            Item::Dir(_) => None,
            Item::File(v) => Some((v.pieces.clone(), Count::File, v.size)),
            Item::Unreadable(on, _) => Some((on.clone(), Count::File, 0)),
            Item::Other(t, EntKind::Symlink) => Some((vec![*t], Count::Symlink, 0)),
            Item::Other(t, _) => Some((vec![*t], Count::Other, 0)),
        };
        if let Some((on, count, size)) = backing {
            let tiers = self.tiers;
            let (ids, shared) = backing_ids(|t| (tiers[t].fs(), tiers[t].path(&child)), &on);
            if shared && !ids.is_empty() {
                self.linked.push(Linked {
                    rel: child.clone(),
                    ids,
                    count,
                    size,
                });
            }
        }
        match item {
            Item::Dir(_) => {
                self.rep.folders += 1;
                stack.push(child);
            }
            Item::File(v) => {
                self.rep.files += 1;
                self.rep.bytes += v.size;
                if split_candidate && v.pieces.len() < v.layout.tiers().len() {
                    self.incomplete.push((child, v));
                }
            }
            Item::Unreadable(..) => self.rep.files += 1,
            Item::Other(_, EntKind::Symlink) => self.rep.symlinks += 1,
            Item::Other(..) => self.rep.others += 1,
        }
        Ok(())
    }

    /// Prints one problem (and applies its fix with `repair`).
    fn record(&mut self, mut issue: Issue) -> io::Result<()> {
        let tiers = self.tiers;
        if let (Some(why), Some(a)) = (&self.untold, &issue.action) {
            if !matches!(a, Action::FinishRelink { .. } | Action::Mkdir { .. }) {
                issue.manual = format!(
                    "none while {why}; once it reads (or is removed), `tierfs fsck --repair` \
                     will {}",
                    a.describe(tiers, &issue.rel)
                );
                issue.action = None;
            }
        }
        let out = &mut *self.out;
        let place = issue.place(tiers);
        let outcome = match (&issue.action, self.repair) {
            (Some(a), true) => Some(apply(tiers, &issue.rel, a)),
            _ => None,
        };
        match (&issue.action, &outcome) {
            (_, Some(Ok(done))) => writeln!(out, "REPAIRED {place}: {}; {done}", issue.what)?,
            (_, Some(Err(why))) => {
                writeln!(out, "PROBLEM {place}: {}; repair failed: {why}", issue.what)?
            }
            (Some(a), None) => writeln!(
                out,
                "PROBLEM {place}: {}; fix: `tierfs fsck --repair` will {}",
                issue.what,
                a.describe(tiers, &issue.rel)
            )?,
            (None, None) => writeln!(
                out,
                "PROBLEM {place}: {}; fix: {}",
                issue.what, issue.manual
            )?,
        }
        self.rep.issues.push((issue, outcome));
        Ok(())
    }
}

/// A `.tierfs-tmp-*` name on tier `t`: ours (a plain file, digits after the prefix) is
/// removed; anything else is left for its owner to rename.
fn temp_issue(child: &Path, t: usize, name: &OsString, kind: EntKind) -> Issue {
    let ours = kind == EntKind::File
        && name.as_bytes()[TMP_PREFIX.len()..]
            .iter()
            .all(u8::is_ascii_digit)
        && name.len() > TMP_PREFIX.len();
    if ours {
        Issue::repair(
            child,
            t,
            "leftover temporary of an interrupted move (the file's own copy is intact, \
             unless a cut-short move's journal reported above names it: --repair settles \
             that first)"
                .into(),
            Action::RemoveTemp { tier: t },
        )
    } else {
        Issue::manual(
            child,
            Some(t),
            format!(
                "a {} whose name starts with {TMP_PREFIX}: the mount deletes (or hides) such \
                 names as leftover temporaries",
                kind.word()
            ),
            "rename it on the tier if it is yours".into(),
        )
    }
}

/// Striped files split over several paths (pieces with one file id, none of the paths
/// complete: a rename that reached only some tiers): one issue per piece that belongs back
/// with the rest, as the mount's scan would move it (`layout::plan_rejoin`). The
/// `CreatePiece` issues the moves make moot are taken out of `deferred`.
fn rejoin_issues(incomplete: &[(PathBuf, FileView)], deferred: &mut Vec<Issue>) -> Vec<Issue> {
    let mut by_id: BTreeMap<u64, Vec<&(PathBuf, FileView)>> = BTreeMap::new();
    for f in incomplete {
        if let Some(id) = f.1.id {
            by_id.entry(id).or_default().push(f);
        }
    }
    let mut out = Vec::new();
    for group in by_id.values_mut().filter(|g| g.len() > 1) {
        group.sort_by(|a, b| a.0.cmp(&b.0));
        let FileLayout::Stripe(m) = &group[0].1.layout else {
            continue;
        };
        if group.iter().any(|f| f.1.layout != group[0].1.layout) {
            continue;
        }
        let parts: Vec<Part> = group
            .iter()
            .map(|(rel, v)| Part {
                rel: rel.clone(),
                tiers: v.pieces.clone(),
            })
            .collect();
        let Some((keep, moves)) = crate::layout::plan_rejoin(m, &parts) else {
            continue;
        };
        let kept = &parts[keep].rel;
        for (from, t) in &moves {
            let src = &parts[*from].rel;
            out.push(Issue::repair(
                kept,
                *t,
                format!(
                    "stripe piece missing here, but the file's piece on this tier is at /{} \
                     (it carries this file's id {:016x}: a rename that did not reach every \
                     tier split the file, and each half reads zeros where the other holds \
                     the bytes)",
                    src.display(),
                    group[0].1.id.unwrap_or(0)
                ),
                Action::Rejoin {
                    tier: *t,
                    from: src.clone(),
                },
            ));
            deferred.retain(|i| !(i.rel == *kept && i.tier == Some(*t)));
        }
        // A half that gives away every piece it has is gone after the moves: no empty
        // pieces for it.
        for (p, part) in parts.iter().enumerate() {
            let given = moves.iter().filter(|(f, _)| *f == p).count();
            if p != keep && given > 0 && given == part.tiers.len() {
                deferred.retain(|i| i.rel != part.rel);
            }
        }
    }
    out
}

/// What a name counts as in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Count {
    File,
    Symlink,
    Other,
}

/// A name whose backing entries have other links.
struct Linked {
    rel: PathBuf,
    ids: Vec<BackingId>,
    count: Count,
    size: u64,
}

/// Hard links, by the rule the mount's scan applies ([`crate::tier::resolve::plan_links`]):
/// names of one file are no problem (the report counts the file once); a partial name is
/// removed, its `CreatePiece` issues (taken out of `deferred`) moot; names sharing only
/// some backing inodes are listed for a person to settle. Names in `rejoined` are left to
/// their rejoin.
fn link_issues(
    rep: &mut FsckReport,
    mut linked: Vec<Linked>,
    rejoined: &[PathBuf],
    deferred: &mut Vec<Issue>,
) -> Vec<Issue> {
    linked.retain(|l| !rejoined.contains(&l.rel));
    linked.sort_by(|a, b| a.rel.cmp(&b.rel));
    let ids: Vec<Vec<BackingId>> = linked.iter().map(|l| l.ids.clone()).collect();
    let plan = plan_links(&ids);
    let mut uncount = |l: &Linked| match l.count {
        Count::File => {
            rep.files = rep.files.saturating_sub(1);
            rep.bytes = rep.bytes.saturating_sub(l.size);
        }
        Count::Symlink => rep.symlinks = rep.symlinks.saturating_sub(1),
        Count::Other => rep.others = rep.others.saturating_sub(1),
    };
    let mut out = Vec::new();
    for (i, of) in &plan.partial {
        let (l, full) = (&linked[*i], &linked[*of]);
        uncount(l);
        deferred.retain(|d| d.rel != l.rel);
        for (t, _, _) in &l.ids {
            out.push(Issue::repair(
                &l.rel,
                *t,
                format!(
                    "its pieces are some of /{}'s, not all (a hard link or unlink cut short                      between the tiers); the mount removes this name",
                    full.rel.display()
                ),
                Action::RemoveLinkTrace {
                    tier: *t,
                    of: full.rel.clone(),
                },
            ));
        }
    }
    for g in &plan.groups {
        for i in &g[1..] {
            uncount(&linked[*i]);
            rep.links += 1;
        }
    }
    for (a, b) in &plan.tangled {
        out.push(Issue::manual(
            &linked[*a].rel,
            None,
            format!(
                "shares some pieces with /{} but not all (hard links made on the tiers by                  hand?): the two names change each other's bytes",
                linked[*b].rel.display()
            ),
            "copy one of them out through a mount, remove it and copy it back".into(),
        ));
    }
    out
}

/// Renames `rel` on tier `t` to its first free conflict name (the one the mount's scan
/// would give it, `layout::conflict_name`); returns the new backing path.
fn rename_aside(tiers: &[TierDir], t: usize, rel: &Path) -> io::Result<PathBuf> {
    const RENAME_NOREPLACE: u32 = 1;
    let from = tiers[t].path(rel);
    let on = tiers[t].fs();
    for n in 1..1000 {
        let target = tiers[t].path(&conflict_path(rel, &tiers[t].name, n));
        match on.rename(&from, &target, RENAME_NOREPLACE) {
            Ok(()) => return Ok(target),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // No RENAME_NOREPLACE on this file system: check, then rename.
                if on.exists(&target) {
                    continue;
                }
                on.rename(&from, &target, 0)?;
                return Ok(target);
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no free conflict name"))
}

/// Applies one fix; `Ok` says what was done.
fn apply(tiers: &[TierDir], rel: &Path, a: &Action) -> Result<String, String> {
    let t = a.tier();
    let p = tiers[t].path(rel);
    let on = tiers[t].fs();
    let e = |e: io::Error| e.to_string();
    match a {
        Action::SetAside { .. } => {
            let got = rename_aside(tiers, t, rel).map_err(e)?;
            // A stripe piece set aside on a tier its own pattern does not name would be set
            // aside again by every mount: make it a plain whole file.
            if let LayoutRead::Valid(FileLayout::Stripe(m)) = read_layout(on, &got, tiers.len()) {
                if !m.tiers.contains(&t) {
                    let _ = on.removexattr(&got, OsStr::new(LAYOUT_XATTR));
                }
            }
            Ok(format!("renamed to {}", got.display()))
        }
        Action::RemoveIdentical { keep, .. } => {
            if !same_bytes(&tiers[t], &tiers[*keep], rel) {
                return Err("the copies differ now; not removed".into());
            }
            on.unlink(&p).map_err(e)?;
            Ok("removed the identical copy".into())
        }
        Action::CreatePiece {
            layout, id, like, ..
        } => create_piece(tiers, rel, t, layout, *id, *like),
        Action::SetLayout { layout, id, .. } => {
            let encoded = layout.encode_with_id(*id);
            on.setxattr(&p, OsStr::new(LAYOUT_XATTR), encoded.as_bytes(), 0)
                .map_err(e)?;
            Ok(format!("set its layout xattr to {encoded:?}"))
        }
        Action::Rejoin { from, .. } => {
            const RENAME_NOREPLACE: u32 = 1;
            let src = tiers[t].path(from);
            on.rename(&src, &p, RENAME_NOREPLACE).map_err(e)?;
            Ok(format!("moved it back from {}", src.display()))
        }
        Action::Mkdir { like, .. } => {
            on.mkdir_all(&p).map_err(e)?;
            if let Some(m) = like.and_then(|l| tiers[l].fs().stat(&tiers[l].path(rel)).ok()) {
                on.chmod(&p, m.mode() & 0o7777).map_err(e)?;
                if sys::euid() == 0 {
                    on.chown(&p, Some(m.uid()), Some(m.gid())).map_err(e)?;
                }
            }
            Ok("created the folder".into())
        }
        Action::RemoveTemp { .. } => {
            on.unlink(&p).map_err(e)?;
            Ok("removed".into())
        }
        Action::MoveToFirst { .. } => move_to_first(tiers, rel, t),
        Action::RemoveLinkTrace { of, .. } => {
            // Only while the other name still holds this very inode.
            let other = tiers[t].path(of);
            let (a, b) = (on.stat(&p).map_err(e)?, on.stat(&other).map_err(e)?);
            if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
                return Err(format!(
                    "{} holds another inode now; not removed",
                    other.display()
                ));
            }
            on.unlink(&p).map_err(e)?;
            Ok(format!(
                "removed (the bytes stay under {})",
                other.display()
            ))
        }
        Action::FinishRelink { journal, .. } => super::journals::finish(tiers, journal),
    }
}

/// Creates the empty piece of `rel` on tier `t` with the file's label, mode and owner of
/// the piece on `like`; removes it again if it cannot be given them.
fn create_piece(
    tiers: &[TierDir],
    rel: &Path,
    t: usize,
    layout: &FileLayout,
    id: Option<u64>,
    like: Option<usize>,
) -> Result<String, String> {
    let p = tiers[t].path(rel);
    let on = tiers[t].fs();
    let like_meta = like.and_then(|l| tiers[l].fs().stat(&tiers[l].path(rel)).ok());
    let mode = like_meta
        .as_ref()
        .map(|m| m.mode() & 0o7777)
        .unwrap_or(0o600);
    let f = on
        .open(&p, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, mode)
        .map_err(|e| e.to_string())?;
    drop(f);
    let r = (|| -> io::Result<()> {
        let encoded = layout.encode_with_id(id);
        on.setxattr(&p, OsStr::new(LAYOUT_XATTR), encoded.as_bytes(), 0)?;
        on.chmod(&p, mode)?;
        if let Some(m) = &like_meta {
            if sys::euid() == 0 {
                on.chown(&p, Some(m.uid()), Some(m.gid()))?;
            }
        }
        Ok(())
    })();
    if let Err(err) = r {
        let _ = on.unlink(&p);
        return Err(err.to_string());
    }
    Ok("created an empty piece with the file's layout".into())
}

/// Moves the symlink or special file `rel` from tier `t` to the first tier.
fn move_to_first(tiers: &[TierDir], rel: &Path, t: usize) -> Result<String, String> {
    let e = |e: io::Error| e.to_string();
    let p = tiers[t].path(rel);
    let on = tiers[t].fs();
    let to = tiers[0].path(rel);
    let first = tiers[0].fs();
    if first.exists(&to) {
        return Err(format!("{} exists", to.display()));
    }
    match on.rename_into(&p, first, &to, 0) {
        Ok(()) => Ok(format!("moved to {}", to.display())),
        Err(err) if err.raw_os_error() == Some(libc::EXDEV) => {
            // Another file system: a symlink is recreated exactly; others are left.
            let m = on.stat(&p).map_err(e)?;
            if !m.file_type().is_symlink() {
                return Err(format!(
                    "{} is on another file system; move it by hand",
                    to.display()
                ));
            }
            let target = on.readlink(&p).map_err(e)?;
            first.symlink(&target, &to).map_err(e)?;
            if sys::euid() == 0 {
                let _ = first.chown(&to, Some(m.uid()), Some(m.gid()));
            }
            let _ = first.utimens(
                &to,
                SetTime::At(crate::sys::time_of(m.atime(), m.atime_nsec())),
                SetTime::At(crate::sys::time_of(m.mtime(), m.mtime_nsec())),
            );
            on.unlink(&p).map_err(e)?;
            Ok(format!("recreated at {}", to.display()))
        }
        Err(err) => Err(err.to_string()),
    }
}

/// `tierfs fsck`: prints the problems and a summary; exit 1 when there were any.
pub fn run_fsck(config: &Path, repair: bool) -> Result<(), Failure> {
    let cfg = MountConfig::load(config).map_err(|e| Failure::usage(e.to_string()))?;
    let tiers = tier_dirs(&cfg)?;
    let _locks = lock_tiers(&tiers)?;
    let mut out = io::stdout().lock();
    let rep = fsck(&cfg, &tiers, repair, &mut out)
        .map_err(|e| Failure::runtime(format!("writing the report: {e}")))?;
    for f in &rep.fresh {
        let _ = writeln!(
            out,
            "note: tier '{f}' was never mounted (nothing on it yet)"
        );
    }
    let mut counts = format!(
        "{} tiers, {} folders, {} files ({}), {} symlinks, {} other",
        tiers.len(),
        rep.folders,
        rep.files,
        crate::units::fmt_bytes(rep.bytes),
        rep.symlinks,
        rep.others
    );
    if rep.links > 0 {
        counts.push_str(&format!(", {} more names (hard links)", rep.links));
    }
    if rep.problems() == 0 {
        let _ = writeln!(out, "tierfs fsck: {counts}: clean");
        return Ok(());
    }
    let left = rep.problems() - rep.repaired();
    let _ = writeln!(
        out,
        "tierfs fsck: {counts}: {} problems, {} repaired, {left} left{}",
        rep.problems(),
        rep.repaired(),
        if repair || left == 0 {
            ""
        } else {
            " (run with --repair to fix the ones marked `tierfs fsck --repair`)"
        }
    );
    let _ = out.flush();
    Err(Failure::runtime(if left == 0 {
        format!(
            "{} problems found and repaired; run `tierfs fsck` again to confirm",
            rep.problems()
        )
    } else {
        format!("{} problems found, {left} not repaired", rep.problems())
    }))
}
