//! `tierfs export`: copies the tree the tiers hold into an ordinary folder, as a mount
//! would show it (striped files reassembled, conflict copies under the names a mount gives
//! them), reading only, so it works while mounted. A file with several names (hard links)
//! is copied once and linked under its other names; a partial name an interrupted link
//! left is not exported, as the mount removes it ([`crate::tier::resolve::plan_links`]). A
//! pending re-link journal stops it (its move is settled by a mount or `fsck --repair`);
//! one set aside as never to be replayed does not, but the file it names is reported as
//! possibly mixed from before and after its move.

use super::issues::{resolve, Action, FileView, Item};
use super::{list, tier_dirs, EntKind, Failure, TierDir};
use crate::config::MountConfig;
use crate::layout::{conflict_path, FileLayout};
use crate::sys::{self, SetTime};
use crate::tier::beneath::Beneath;
use crate::tier::resolve::{backing_ids, plan_links, BackingId};
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Bytes moved per read or write while exporting.
const CHUNK: usize = 1 << 20;

/// What `export` copied.
#[derive(Debug, Default)]
pub struct ExportReport {
    pub folders: u64,
    pub files: u64,
    pub bytes: u64,
    pub symlinks: u64,
    pub others: u64,
    /// Pieces the mount would rename aside, exported under their conflict names.
    pub conflicts: u64,
    /// Entries not exported (sockets, device nodes as non-root), with why.
    pub skipped: Vec<String>,
    /// Entries that failed, with why.
    pub errors: Vec<String>,
    /// Names made as hard links of a file exported under another name.
    pub links: u64,
    /// Inconsistencies seen on the tiers (see `tierfs fsck`).
    pub issues: u64,
    /// Files exported whose bytes may be mixed from before and after a move: the primary
    /// name of each re-link journal set aside unfinished (`relink-*.unfinished`), with why.
    /// Each also counts in `issues`.
    pub mixed: Vec<String>,
}

/// Removes a non-folder entry at `p` so a new one can take its place (never follows it).
fn clear_entry(p: &Path) -> io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} is a folder", p.display()),
        )),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// A new file at `dest`, written sparsely: all-zero chunks are skipped, the size is set at
/// the end.
struct SparseOut {
    file: File,
    len: u64,
}

impl SparseOut {
    fn create(dest: &Path) -> io::Result<SparseOut> {
        clear_entry(dest)?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dest)?;
        Ok(SparseOut { file, len: 0 })
    }
    fn put(&mut self, buf: &[u8], off: u64) -> io::Result<()> {
        if buf.iter().any(|b| *b != 0) {
            self.file.write_all_at(buf, off)?;
        }
        self.len = self.len.max(off + buf.len() as u64);
        Ok(())
    }
    fn finish(self) -> io::Result<u64> {
        self.file.set_len(self.len)?;
        Ok(self.len)
    }
}

/// Copies the bytes of a plain file (a whole-file piece at `src` on the tier `on`) to
/// `dest`; returns its size.
fn copy_plain(on: Beneath<'_>, src: &Path, dest: &Path) -> io::Result<u64> {
    let f = on.open(src, libc::O_RDONLY, 0)?;
    let mut out = SparseOut::create(dest)?;
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    loop {
        let n = crate::tierio::piece::read_full(&f, &mut buf, off)?;
        if n == 0 {
            break;
        }
        out.put(&buf[..n], off)?;
        off += n as u64;
    }
    out.finish()
}

/// Reassembles a striped file from its pieces into `dest`; missing stripes read as zeros.
fn copy_stripes(
    tiers: &[TierDir],
    rel: &Path,
    v: &FileView,
    m: &crate::layout::StripeMap,
    dest: &Path,
) -> io::Result<u64> {
    let mut pieces: Vec<Option<File>> = (0..tiers.len()).map(|_| None).collect();
    for t in &v.pieces {
        pieces[*t] = Some(
            tiers[*t]
                .fs()
                .open(&tiers[*t].path(rel), libc::O_RDONLY, 0)?,
        );
    }
    let mut out = SparseOut::create(dest)?;
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    while off < v.size {
        let n = ((v.size - off) as usize).min(CHUNK);
        let b = &mut buf[..n];
        for ex in m.extents(off, n) {
            let dst = &mut b[ex.buf..ex.buf + ex.len];
            let got = match &pieces[ex.tier] {
                Some(f) => crate::tierio::piece::read_full(f, dst, ex.local)?,
                None => 0,
            };
            dst[got..].fill(0);
        }
        out.put(b, off)?;
        off += n as u64;
    }
    // The size is the logical size even where the last stripes are holes.
    out.len = out.len.max(v.size);
    out.finish()
}

struct Exporter<'a> {
    tiers: &'a [TierDir],
    dest: &'a Path,
    stats_dir: &'a str,
    root: bool,
    rep: ExportReport,
    xattr_warned: bool,
    /// Folders made, with the tier and backing folder whose attributes they get at the end.
    dirs: Vec<(PathBuf, usize, PathBuf)>,
    /// Names whose backing entries have other links, exported once every name is known.
    linked: Vec<(PathBuf, Entry, Vec<BackingId>)>,
}

/// A non-folder name to export.
enum Entry {
    File(FileView),
    Other(usize, EntKind),
}

impl Exporter<'_> {
    /// Re-link journals set aside unfinished ([`crate::relink::set_aside`]): never replayed,
    /// so the file each names is copied as the tiers hold it, possibly a mix of the bytes
    /// from before and after its move. A pending journal is refused earlier
    /// ([`run_export`]); this one no mount or fsck will settle, so the copy goes on, but
    /// never silently.
    fn set_aside_journals(&mut self) {
        for t in self.tiers {
            let meta = t.root.join(crate::tier::META_DIR);
            let listed = match crate::relink::list_set_aside(&meta) {
                Ok(l) => l,
                // `run_export` refused already; a direct caller gets the warning.
                Err(e) => vec![(meta, Err(e))],
            };
            for (path, j) in listed {
                let file = match &j {
                    Ok(Some(j)) => format!("/{}", j.primary.display()),
                    Ok(None) => "a file (the journal does not parse)".to_string(),
                    Err(e) => format!("a file (the journal cannot be read: {e})"),
                };
                let why = format!(
                    "{file}: its bytes may be mixed from before and after a move that could not \
                     be finished (the re-link journal {} on tier '{}' was set aside); compare \
                     it with a copy (see `tierfs fsck`)",
                    path.display(),
                    t.name
                );
                eprintln!("tierfs export: WARNING: {why}");
                self.rep.mixed.push(why);
                self.rep.issues += 1;
            }
        }
    }

    fn fail(&mut self, rel: &Path, what: &str, e: impl std::fmt::Display) {
        let line = format!("/{}: {what}: {e}", rel.display());
        eprintln!("tierfs export: error: {line}");
        self.rep.errors.push(line);
    }

    fn xattrs(&mut self, rel: &Path, tier: usize, from: &Path, to: &Path) {
        if let Err(e) = copy_user_xattrs(self.tiers[tier].fs(), from, to) {
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                if !self.xattr_warned {
                    self.xattr_warned = true;
                    eprintln!(
                        "tierfs export: warning: {} has no user xattrs; user.* xattrs are not \
                         copied",
                        self.dest.display()
                    );
                }
            } else {
                self.fail(rel, "copying xattrs", e);
            }
        }
    }

    fn file(&mut self, rel: &Path, v: &FileView, to: &Path) {
        let r = match &v.layout {
            FileLayout::Whole { tier } => {
                copy_plain(self.tiers[*tier].fs(), &self.tiers[*tier].path(rel), to)
            }
            FileLayout::Stripe(m) => copy_stripes(self.tiers, rel, v, m, to),
        };
        match r {
            Ok(n) => {
                self.rep.files += 1;
                self.rep.bytes += n;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A live mount removed or moved it after the folder was listed.
                let why = format!("/{}: gone while exporting ({e})", rel.display());
                eprintln!("tierfs export: skipped {why}");
                self.rep.skipped.push(why);
                return;
            }
            Err(e) => return self.fail(rel, "copying", e),
        }
        let Some(mt) = v.meta_tier() else { return };
        let from = self.tiers[mt].path(rel);
        self.xattrs(rel, mt, &from, to);
        match self.tiers[mt].fs().stat(&from) {
            Ok(m) => {
                if let Err(e) = copy_attrs(&m, to, false) {
                    self.fail(rel, "setting owner, mode and times", e);
                }
            }
            Err(e) => self.fail(rel, "stat", e),
        }
    }

    fn other(&mut self, rel: &Path, tier: usize, from: &Path, kind: EntKind, to: &Path) {
        let on = self.tiers[tier].fs();
        let m = match on.stat(from) {
            Ok(m) => m,
            Err(e) => return self.fail(rel, "stat", e),
        };
        let made = match kind {
            EntKind::Symlink => on.readlink(from).and_then(|target| {
                clear_entry(to)?;
                std::os::unix::fs::symlink(target, to)
            }),
            EntKind::Fifo => {
                clear_entry(to).and_then(|_| sys::mknod(to, libc::S_IFIFO | (m.mode() & 0o7777), 0))
            }
            EntKind::Device if self.root => {
                clear_entry(to).and_then(|_| sys::mknod(to, m.mode(), m.rdev()))
            }
            _ => {
                let why = format!("/{}: a {} is not exported", rel.display(), kind.word());
                eprintln!("tierfs export: skipped {why}");
                self.rep.skipped.push(why);
                return;
            }
        };
        if let Err(e) = made {
            return self.fail(rel, &format!("creating the {}", kind.word()), e);
        }
        if kind == EntKind::Symlink {
            self.rep.symlinks += 1;
        } else {
            self.rep.others += 1;
            self.xattrs(rel, tier, from, to);
        }
        if let Err(e) = copy_attrs(&m, to, kind == EntKind::Symlink) {
            self.fail(rel, "setting owner, mode and times", e);
        }
    }

    /// Exports a piece the mount would rename aside, under the name it would get.
    fn conflict(&mut self, rel: &Path, tier: usize, taken: &mut BTreeSet<OsString>) {
        let from = self.tiers[tier].path(rel);
        let Ok(m) = self.tiers[tier].fs().stat(&from) else {
            return;
        };
        let mut i = 1;
        let mut name = conflict_path(rel, &self.tiers[tier].name, i);
        while taken.contains(name.file_name().unwrap_or_default()) {
            i += 1;
            name = conflict_path(rel, &self.tiers[tier].name, i);
        }
        taken.insert(name.file_name().unwrap_or_default().to_os_string());
        let to = self.dest.join(&name);
        eprintln!(
            "tierfs export: warning: /{}: the copy on tier '{}' conflicts with the one a mount \
             shows; exported as /{} (see `tierfs fsck`)",
            rel.display(),
            self.tiers[tier].name,
            name.display()
        );
        if m.is_file() {
            match copy_plain(self.tiers[tier].fs(), &from, &to) {
                Ok(n) => {
                    self.rep.conflicts += 1;
                    self.rep.bytes += n;
                    self.xattrs(&name, tier, &from, &to);
                    if let Err(e) = copy_attrs(&m, &to, false) {
                        self.fail(&name, "setting owner, mode and times", e);
                    }
                }
                Err(e) => self.fail(&name, "copying", e),
            }
        } else if !m.is_dir() {
            if let Some(k) = EntKind::of(m.file_type()) {
                self.rep.conflicts += 1;
                self.other(&name, tier, &from, k, &to);
            }
        }
    }

    fn dir(&mut self, rel: &Path, on: &[usize]) {
        let to = self.dest.join(rel);
        let made = match fs::symlink_metadata(&to) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => fs::remove_file(&to).and_then(|_| fs::create_dir(&to)),
            Err(_) => fs::create_dir(&to),
        };
        if let Err(e) = made {
            return self.fail(rel, "creating the folder", e);
        }
        // Folders take their attributes from the first tier, as in the mount.
        let src = if on.contains(&0) { 0 } else { on[0] };
        let from = self.tiers[src].path(rel);
        self.xattrs(rel, src, &from, &to);
        self.dirs.push((to, src, from));
        self.rep.folders += 1;
    }

    fn entry(&mut self, rel: &Path, e: &Entry) {
        let to = self.dest.join(rel);
        match e {
            Entry::File(v) => self.file(rel, v, &to),
            Entry::Other(t, k) => {
                let from = self.tiers[*t].path(rel);
                self.other(rel, *t, &from, *k, &to)
            }
        }
    }

    /// The names held back for sharing backing inodes: each file copied under its first
    /// name and linked under the others; partial names left out.
    fn links(&mut self) {
        let mut linked = std::mem::take(&mut self.linked);
        linked.sort_by(|a, b| a.0.cmp(&b.0));
        let ids: Vec<Vec<BackingId>> = linked.iter().map(|l| l.2.clone()).collect();
        let plan = plan_links(&ids);
        let mut done = vec![false; linked.len()];
        for (i, of) in &plan.partial {
            done[*i] = true;
            let why = format!(
                "/{}: the trace of a hard link or unlink cut short (its pieces are some of                  /{}'s); the mount removes it",
                linked[*i].0.display(),
                linked[*of].0.display()
            );
            eprintln!("tierfs export: skipped {why}");
            self.rep.skipped.push(why);
            self.rep.issues += 1;
        }
        for g in &plan.groups {
            let first = &linked[g[0]].0;
            self.entry(first, &linked[g[0]].1);
            done[g[0]] = true;
            let src = self.dest.join(first);
            let made = fs::symlink_metadata(&src).is_ok();
            for i in &g[1..] {
                done[*i] = true;
                let rel = &linked[*i].0;
                if !made {
                    // Not exported under its first name (a socket, a failed copy): said.
                    let why = format!(
                        "/{}: a name of /{}, not exported",
                        rel.display(),
                        first.display()
                    );
                    self.rep.skipped.push(why);
                    continue;
                }
                let to = self.dest.join(rel);
                match clear_entry(&to).and_then(|_| fs::hard_link(&src, &to)) {
                    Ok(()) => self.rep.links += 1,
                    Err(e) => self.fail(rel, &format!("linking to /{}", first.display()), e),
                }
            }
        }
        for (i, (rel, e, _)) in linked.iter().enumerate() {
            if !done[i] {
                self.entry(rel, e);
            }
        }
    }

    fn run(&mut self) {
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let l = list(self.tiers, &rel);
            for (t, dir, e) in &l.errors {
                self.fail(
                    &rel,
                    &format!("reading tier '{}' ({})", self.tiers[*t].name, dir.display()),
                    e,
                );
            }
            let mut taken: BTreeSet<OsString> = l.entries.keys().cloned().collect();
            for (name, on) in &l.entries {
                let child = rel.join(name);
                if rel.as_os_str().is_empty() && name.as_os_str() == self.stats_dir {
                    let why = format!(
                        "/{}: hidden by the stats folder in the mount",
                        child.display()
                    );
                    eprintln!("tierfs export: skipped {why}");
                    self.rep.skipped.push(why);
                    continue;
                }
                let (item, issues) = resolve(self.tiers, &child, on, &l.missing);
                self.rep.issues += issues.len() as u64;
                for i in &issues {
                    if let Some(Action::SetAside { tier }) = &i.action {
                        self.conflict(&child, *tier, &mut taken);
                    }
                }
                let (entry, on) = match item {
                    Item::Dir(on) => {
                        self.dir(&child, &on);
                        stack.push(child);
                        continue;
                    }
                    Item::File(v) => {
                        let on = v.pieces.clone();
                        (Entry::File(v), on)
                    }
                    Item::Other(t, k) => (Entry::Other(t, k), vec![t]),
                    Item::Unreadable(_, why) => {
                        self.fail(&child, "not exported", why);
                        continue;
                    }
                };
                let tiers = self.tiers;
                let (ids, shared) = backing_ids(|t| (tiers[t].fs(), tiers[t].path(&child)), &on);
                if shared && !ids.is_empty() {
                    self.linked.push((child, entry, ids));
                } else {
                    self.entry(&child, &entry);
                }
            }
        }
        self.links();
        // Folder modes and times last, deepest first: writing inside a folder changes its
        // mtime, and a read-only folder would refuse its children.
        for (to, t, from) in std::mem::take(&mut self.dirs).into_iter().rev() {
            match self.tiers[t].fs().stat(&from) {
                Ok(m) => {
                    if let Err(e) = copy_attrs(&m, &to, false) {
                        let rel = to.strip_prefix(self.dest).unwrap_or(&to).to_path_buf();
                        self.fail(&rel, "setting owner, mode and times", e);
                    }
                }
                Err(e) => {
                    let rel = to.strip_prefix(self.dest).unwrap_or(&to).to_path_buf();
                    self.fail(&rel, "stat", e)
                }
            }
        }
    }
}

/// Copies every file, folder, symlink and FIFO of the tiers into `dest` (which exists),
/// as a mount would show them. Reads only; safe while mounted (in-flight writes of a live
/// mount may be missing from the copy). `root_attrs`: give `dest` itself the attributes
/// of the mount's root.
pub fn export(cfg: &MountConfig, tiers: &[TierDir], dest: &Path, root_attrs: bool) -> ExportReport {
    let mut x = Exporter {
        tiers,
        dest,
        stats_dir: &cfg.mount.stats_dir,
        root: sys::euid() == 0,
        rep: ExportReport::default(),
        xattr_warned: false,
        dirs: Vec::new(),
        linked: Vec::new(),
    };
    if root_attrs {
        if let Some(t) = tiers.iter().position(|t| t.data.is_dir()) {
            let from = tiers[t].data.clone();
            x.xattrs(Path::new(""), t, &from, dest);
            x.dirs.push((dest.to_path_buf(), t, from));
        }
    }
    x.set_aside_journals();
    x.run();
    x.rep
}

/// `tierfs export`: checks DEST, copies, prints the counts.
pub fn run_export(config: &Path, dest: &Path, force: bool) -> Result<(), Failure> {
    let cfg = MountConfig::load(config).map_err(|e| Failure::usage(e.to_string()))?;
    let tiers = tier_dirs(&cfg)?;
    // A move of a file with several names that a crash cut short leaves names on older
    // pieces until a mount or `fsck --repair` finishes it; export only reads, so it waits.
    for t in &tiers {
        let meta = t.root.join(crate::tier::META_DIR);
        let listed = crate::relink::list(&meta).and_then(|l| {
            crate::relink::list_set_aside(&meta)?;
            Ok(l)
        });
        let listed = listed.map_err(|e| {
            Failure::runtime(format!(
                "tier '{}': cannot list {} ({e}): a re-link journal of a move a crash cut \
                 short may be there, unseen; export only reads, so it waits until the \
                 folder can be read (check the tier's file system)",
                t.name,
                meta.display()
            ))
        })?;
        if let Some((path, _)) = listed.into_iter().next() {
            return Err(Failure::runtime(format!(
                "tier '{}' holds the re-link journal {} of a move a crash cut short; run \
                 `tierfs fsck --repair` on the unmounted tiers (or mount once) to settle \
                 it, then export",
                t.name,
                path.display()
            )));
        }
    }
    // Where DEST is (or will be), with symlinks resolved: never inside a tier, nor around one.
    let canon = match fs::canonicalize(dest) {
        Ok(c) => c,
        Err(_) => {
            let parent = match dest.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let parent = fs::canonicalize(parent).map_err(|e| {
                Failure::usage(format!(
                    "cannot export to {}: {}: {e} (its parent folder must exist)",
                    dest.display(),
                    parent.display()
                ))
            })?;
            parent.join(dest.file_name().unwrap_or_default())
        }
    };
    for t in &tiers {
        let root = fs::canonicalize(&t.root).unwrap_or_else(|_| t.root.clone());
        if canon.starts_with(&root) || root.starts_with(&canon) {
            return Err(Failure::usage(format!(
                "{} and tier '{}' ({}) overlap; export to a folder outside every tier",
                dest.display(),
                t.name,
                t.root.display()
            )));
        }
    }
    let fresh = match fs::symlink_metadata(dest) {
        Ok(m) if m.is_dir() => {
            let empty = fs::read_dir(dest)
                .map_err(|e| Failure::runtime(format!("{}: {e}", dest.display())))?
                .next()
                .is_none();
            if !empty && !force {
                return Err(Failure::usage(format!(
                    "{} is not empty; export into a new or empty folder, or add --force to \
                     write over what is there",
                    dest.display()
                )));
            }
            empty
        }
        Ok(_) => {
            return Err(Failure::usage(format!(
                "{} exists and is not a folder",
                dest.display()
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir(dest).map_err(|e| {
                Failure::usage(format!(
                    "cannot create {}: {e} (its parent folder must exist)",
                    dest.display()
                ))
            })?;
            true
        }
        Err(e) => return Err(Failure::runtime(format!("{}: {e}", dest.display()))),
    };
    let rep = export(&cfg, &tiers, dest, fresh);
    println!("{} -> {}", summary(&rep), dest.display());
    if rep.issues > 0 {
        eprintln!(
            "tierfs export: the tiers have {} inconsistencies; the copy shows what a mount would \
             (run `tierfs fsck --config {}` while unmounted)",
            rep.issues,
            config.display()
        );
    }
    if rep.errors.is_empty() {
        Ok(())
    } else {
        Err(Failure::runtime(format!(
            "{} entries could not be exported (listed above)",
            rep.errors.len()
        )))
    }
}

/// `tierfs export`'s line of counts.
fn summary(rep: &ExportReport) -> String {
    let mut line = format!(
        "tierfs export: {} files ({}), {} folders, {} symlinks, {} other",
        rep.files,
        crate::units::fmt_bytes(rep.bytes),
        rep.folders,
        rep.symlinks,
        rep.others
    );
    if rep.links > 0 {
        line.push_str(&format!(", {} more names (hard links)", rep.links));
    }
    if rep.conflicts > 0 {
        line.push_str(&format!(", {} conflicting copies", rep.conflicts));
    }
    if !rep.skipped.is_empty() {
        line.push_str(&format!(", {} skipped", rep.skipped.len()));
    }
    if !rep.mixed.is_empty() {
        line.push_str(&format!(
            ", {} possibly mixed from before and after a move (listed above)",
            rep.mixed.len()
        ));
    }
    line
}

/// Copies user xattrs (not `user.tierfs.*`) from `from` (on the tier `on`) to `to`;
/// returns the names that could not be set.
fn copy_user_xattrs(on: Beneath<'_>, from: &Path, to: &Path) -> io::Result<usize> {
    let names = match on.listxattr(from) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut n = 0;
    for name in names {
        if !name.starts_with(b"user.") || name.starts_with(b"user.tierfs.") {
            continue;
        }
        let name = OsStr::from_bytes(&name);
        let v = on.getxattr(from, name)?;
        sys::lsetxattr(to, name, &v, 0)?;
        n += 1;
    }
    Ok(n)
}

/// Gives `to` the owner (when root), mode and times of `m`; mode is skipped for symlinks.
fn copy_attrs(m: &Metadata, to: &Path, symlink: bool) -> io::Result<()> {
    if sys::euid() == 0 {
        std::os::unix::fs::lchown(to, Some(m.uid()), Some(m.gid()))?;
    }
    if !symlink {
        fs::set_permissions(to, fs::Permissions::from_mode(m.mode() & 0o7777))?;
    }
    sys::lutimens(
        to,
        SetTime::At(crate::sys::time_of(m.atime(), m.atime_nsec())),
        SetTime::At(crate::sys::time_of(m.mtime(), m.mtime_nsec())),
    )
}
