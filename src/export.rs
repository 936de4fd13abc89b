//! Offline tools over the tier folders, with no daemon and no FUSE: `tierfs fsck` checks
//! that the pieces on the tiers agree (and with `--repair` fixes what is safe to fix), and
//! `tierfs export` copies the whole tree out into an ordinary folder, reassembling striped
//! files, so no one's data depends on the daemon.
//!
//! Both read the tiers the way a mount's scan does (see `TierFs::scan` in `fs.rs`): every
//! folder is mirrored on every tier, a file's pieces sit at its own path on the tiers of its
//! layout, a piece without a layout xattr is a whole file on the tier it sits on, symlinks
//! and special files live on the first tier, and `.tierfs-tmp-*` names are leftovers of an
//! interrupted move. Where the tiers disagree, both resolve it as the mount would (a folder
//! wins over a file, a file over a symlink, the first stripe layout in tier order, the newest
//! whole copy), so what `export` writes is what a mount would show, and `fsck --repair` leaves
//! the tiers as the next mount would (pieces of one striped file found at two paths are
//! moved back together, by their file id) — except that it never deletes anything but a leftover
//! temporary or a byte-identical duplicate, never overwrites (a second conflict gets a new
//! name), and the empty stripe pieces it makes carry the file's layout xattr.

use crate::beneath::Beneath;
use crate::config::MountConfig;
use crate::daemon::Failure;
use crate::fs::TMP_PREFIX;
use crate::layout::{conflict_path, FileLayout, LAYOUT_XATTR};
use crate::sys::{self, SetTime};
use crate::tier::{DATA_DIR, META_DIR};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Bytes moved per read or write while exporting.
const CHUNK: usize = 1 << 20;

/// One tier folder of a config, not opened by a daemon.
#[derive(Debug, Clone)]
pub struct TierDir {
    pub name: String,
    pub root: PathBuf,
    pub data: PathBuf,
}

impl TierDir {
    /// Calls on this tier's paths, relative to its folder and never through a symlink in
    /// it, at any depth (as the daemon's, see [`crate::beneath`]).
    pub fn fs(&self) -> Beneath<'_> {
        Beneath::new(&self.root)
    }

    /// The backing path of mount-relative `rel` on this tier.
    pub fn path(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.data.clone()
        } else {
            self.data.join(rel)
        }
    }
}

/// The tier folders of a config; each must exist (a missing one is a config error: tierfs
/// never guesses where a tier went).
pub fn tier_dirs(cfg: &MountConfig) -> Result<Vec<TierDir>, Failure> {
    let mut out = Vec::new();
    for t in &cfg.tiers {
        match fs::metadata(&t.path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Failure::usage(format!(
                    "tier '{}': {} is not a directory",
                    t.name,
                    t.path.display()
                )))
            }
            Err(e) => {
                return Err(Failure::usage(format!(
                    "tier '{}': {}: {e} (is its file system mounted on this node?)",
                    t.name,
                    t.path.display()
                )))
            }
        }
        out.push(TierDir {
            name: t.name.clone(),
            root: t.path.clone(),
            data: t.path.join(DATA_DIR),
        });
    }
    Ok(out)
}

/// What a backing directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntKind {
    Dir,
    File,
    Symlink,
    Fifo,
    Socket,
    Device,
}

impl EntKind {
    fn of(ft: fs::FileType) -> Option<EntKind> {
        use std::os::unix::fs::FileTypeExt;
        Some(if ft.is_dir() {
            EntKind::Dir
        } else if ft.is_file() {
            EntKind::File
        } else if ft.is_symlink() {
            EntKind::Symlink
        } else if ft.is_fifo() {
            EntKind::Fifo
        } else if ft.is_socket() {
            EntKind::Socket
        } else if ft.is_char_device() || ft.is_block_device() {
            EntKind::Device
        } else {
            return None;
        })
    }

    fn word(self) -> &'static str {
        match self {
            EntKind::Dir => "folder",
            EntKind::File => "file",
            EntKind::Symlink => "symlink",
            EntKind::Fifo => "FIFO",
            EntKind::Socket => "socket",
            EntKind::Device => "device node",
        }
    }
}

/// One folder's entries over all tiers.
#[derive(Debug, Default)]
struct Listing {
    /// name -> (tier, kind) for every tier that has it, in tier order.
    entries: BTreeMap<OsString, Vec<(usize, EntKind)>>,
    /// Names starting with [`TMP_PREFIX`], per tier.
    temps: Vec<(usize, OsString, EntKind)>,
    /// Tiers on which the folder does not exist.
    missing: Vec<usize>,
    /// Tiers whose folder could not be read.
    errors: Vec<(usize, PathBuf, io::Error)>,
}

fn list(tiers: &[TierDir], rel: &Path) -> Listing {
    let mut l = Listing::default();
    for (i, t) in tiers.iter().enumerate() {
        let dir = t.path(rel);
        let rd = match t.fs().read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                l.missing.push(i);
                continue;
            }
            Err(e) => {
                l.errors.push((i, dir, e));
                continue;
            }
        };
        for (name, ft) in rd {
            let Some(kind) = EntKind::of(ft) else {
                continue;
            };
            if name.as_bytes().starts_with(TMP_PREFIX.as_bytes()) {
                l.temps.push((i, name, kind));
            } else {
                l.entries.entry(name).or_default().push((i, kind));
            }
        }
    }
    l
}

/// A piece's `user.tierfs.layout` xattr, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutRead {
    /// No xattr (or no xattrs on that filesystem): a whole file on its tier.
    Absent,
    Valid(FileLayout),
    /// The raw value and why it does not parse.
    Bad(String, String),
}

/// The file id in a piece's layout xattr (see `layout::new_file_id`), if it has one.
fn read_id(on: Beneath<'_>, path: &Path) -> Option<u64> {
    let v = on.getxattr(path, OsStr::new(LAYOUT_XATTR)).ok()?;
    crate::layout::decode_id(&String::from_utf8_lossy(&v))
}

fn read_layout(on: Beneath<'_>, path: &Path, ntiers: usize) -> LayoutRead {
    match on.getxattr(path, OsStr::new(LAYOUT_XATTR)) {
        Ok(v) => {
            let s = String::from_utf8_lossy(&v).into_owned();
            match FileLayout::decode(&s, ntiers) {
                Ok(l) => LayoutRead::Valid(l),
                Err(e) => LayoutRead::Bad(s, e),
            }
        }
        Err(_) => LayoutRead::Absent,
    }
}

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
}

impl Action {
    fn tier(&self) -> usize {
        match self {
            Action::SetAside { tier }
            | Action::RemoveIdentical { tier, .. }
            | Action::CreatePiece { tier, .. }
            | Action::SetLayout { tier, .. }
            | Action::Mkdir { tier, .. }
            | Action::RemoveTemp { tier }
            | Action::Rejoin { tier, .. }
            | Action::MoveToFirst { tier } => *tier,
        }
    }

    /// What `--repair` would do, in words.
    fn describe(&self, tiers: &[TierDir], rel: &Path) -> String {
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
    fn repair(rel: &Path, tier: usize, what: String, action: Action) -> Issue {
        Issue {
            rel: rel.to_path_buf(),
            tier: Some(tier),
            what,
            action: Some(action),
            manual: String::new(),
        }
    }
    fn manual(rel: &Path, tier: Option<usize>, what: String, manual: String) -> Issue {
        Issue {
            rel: rel.to_path_buf(),
            tier,
            what,
            action: None,
            manual,
        }
    }

    /// `/rel on tier 'x' (backing path)`.
    fn place(&self, tiers: &[TierDir]) -> String {
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
enum Item {
    /// A folder; the tiers on which it is a folder.
    Dir(Vec<usize>),
    File(FileView),
    /// A symlink or special file, on `tier`.
    Other(usize, EntKind),
}

/// Resolves one name found on the `on` tiers the way the mount's scan does, with the
/// problems that resolution implies. Reads the tiers, changes nothing.
fn resolve(
    tiers: &[TierDir],
    rel: &Path,
    on: &[(usize, EntKind)],
    parent_missing: &[usize],
) -> (Item, Vec<Issue>) {
    let mut issues = Vec::new();
    let set_aside = |t: usize, k: EntKind, why: &str| {
        Issue::repair(
            rel,
            t,
            format!("a {} {why}; the mount renames it aside", k.word()),
            Action::SetAside { tier: t },
        )
    };
    if on.iter().any(|(_, k)| *k == EntKind::Dir) {
        for (t, k) in on {
            if *k != EntKind::Dir {
                issues.push(set_aside(
                    *t,
                    *k,
                    "where other tiers have a folder of the same name",
                ));
            }
        }
        let dirs: Vec<usize> = on
            .iter()
            .filter(|(_, k)| *k == EntKind::Dir)
            .map(|(t, _)| *t)
            .collect();
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
        return (Item::Dir(dirs), issues);
    }
    if on.iter().any(|(_, k)| *k == EntKind::File) {
        for (t, k) in on {
            if *k != EntKind::File {
                issues.push(set_aside(
                    *t,
                    *k,
                    "where other tiers have a file of the same name",
                ));
            }
        }
        let file_tiers: Vec<usize> = on
            .iter()
            .filter(|(_, k)| *k == EntKind::File)
            .map(|(t, _)| *t)
            .collect();
        let (view, mut more) = resolve_file(tiers, rel, &file_tiers);
        issues.append(&mut more);
        return (Item::File(view), issues);
    }
    let (t, k) = on[0];
    for (other, ok) in &on[1..] {
        issues.push(set_aside(
            *other,
            *ok,
            "that duplicates one on another tier",
        ));
    }
    if t != 0 {
        issues.push(Issue::repair(
            rel,
            t,
            format!(
                "a {} outside the first tier (symlinks and special files live on tier '{}')",
                k.word(),
                tiers[0].name
            ),
            Action::MoveToFirst { tier: t },
        ));
    }
    (Item::Other(t, k), issues)
}

/// One piece of a file as found on a tier.
struct PieceRead {
    tier: usize,
    /// The layout xattr as read.
    read: LayoutRead,
    id: Option<u64>,
    /// The layout the mount takes the piece to have.
    taken: FileLayout,
    len: u64,
    mtime: (i64, i64),
}

/// Works out a file's layout and size from its pieces on `on`, as the mount's
/// `adopt_file` does, and what is wrong with them.
fn resolve_file(tiers: &[TierDir], rel: &Path, on: &[usize]) -> (FileView, Vec<Issue>) {
    let n = tiers.len();
    let mut issues = Vec::new();
    let mut pieces: Vec<PieceRead> = Vec::new();
    for &t in on {
        let p = tiers[t].path(rel);
        let read = read_layout(tiers[t].fs(), &p, n);
        let (len, mtime) = tiers[t]
            .fs()
            .stat(&p)
            .map(|m| (m.len(), (m.mtime(), m.mtime_nsec())))
            .unwrap_or((0, (0, 0)));
        let taken = match &read {
            LayoutRead::Valid(l) => l.clone(),
            LayoutRead::Absent => FileLayout::Whole { tier: t },
            LayoutRead::Bad(raw, e) => {
                issues.push(Issue::manual(
                    rel,
                    Some(t),
                    format!(
                        "layout xattr {LAYOUT_XATTR}={raw:?} is not usable ({e}); the mount \
                         treats this piece as a whole file on its tier"
                    ),
                    format!(
                        "if the config lost a tier, restore it; otherwise fix the xattr by hand \
                         (`setfattr -x {LAYOUT_XATTR} PATH` makes it a whole file)"
                    ),
                ));
                FileLayout::Whole { tier: t }
            }
        };
        pieces.push(PieceRead {
            tier: t,
            read,
            id: read_id(tiers[t].fs(), &p),
            taken,
            len,
            mtime,
        });
    }
    let stripe = pieces.iter().find_map(|p| match &p.taken {
        FileLayout::Stripe(m) => Some((m.clone(), p.id)),
        _ => None,
    });
    if let Some((m, id)) = stripe {
        let layout = FileLayout::Stripe(m.clone());
        let mut good = Vec::new();
        let mut size = 0u64;
        for PieceRead {
            tier: t,
            read,
            id: piece_id,
            taken,
            len,
            ..
        } in &pieces
        {
            if m.tiers.contains(t) && *taken == layout && *piece_id == id {
                good.push(*t);
                size = size.max(m.logical_end(*t, *len));
                continue;
            }
            if m.tiers.contains(t) && *read == LayoutRead::Absent && *len == 0 {
                // An empty piece without the xattr (a mount recreated a missing piece):
                // giving it the layout loses nothing.
                issues.push(Issue::repair(
                    rel,
                    *t,
                    "empty stripe piece without a layout xattr; the mount would rename it \
                     aside and recreate it"
                        .into(),
                    Action::SetLayout {
                        tier: *t,
                        layout: layout.clone(),
                        id,
                    },
                ));
                good.push(*t);
                continue;
            }
            let has = match read {
                LayoutRead::Absent => "no layout xattr (a whole file)".to_string(),
                LayoutRead::Valid(_) if *taken == layout => {
                    format!("the id {:016x} of another file", piece_id.unwrap_or(0))
                }
                LayoutRead::Valid(l) => format!("layout {:?}", l.encode()),
                LayoutRead::Bad(raw, _) => format!("an unusable layout {raw:?}"),
            };
            issues.push(Issue::repair(
                rel,
                *t,
                format!(
                    "piece does not belong to the file's stripe layout {:?}: it has {has}; \
                     the mount renames it aside",
                    layout.encode()
                ),
                Action::SetAside { tier: *t },
            ));
        }
        good.sort_unstable();
        let like = good
            .contains(&layout.primary())
            .then_some(layout.primary())
            .or(good.first().copied());
        for t in &m.tiers {
            if !good.contains(t) {
                issues.push(Issue::repair(
                    rel,
                    *t,
                    match m.piece_len(*t, size) {
                        0 => "stripe piece missing (the other pieces say it held no bytes yet)"
                            .to_string(),
                        n => format!(
                            "stripe piece missing: {n} of the file's {size} bytes now read as \
                             zeros (and the file may have been longer)"
                        ),
                    },
                    Action::CreatePiece {
                        tier: *t,
                        layout: layout.clone(),
                        id,
                        like,
                    },
                ));
            }
        }
        for PieceRead { tier: t, len, .. } in &pieces {
            if good.contains(t) && *len > m.piece_len(*t, size) {
                issues.push(Issue::manual(
                    rel,
                    Some(*t),
                    format!(
                        "piece is {len} bytes, longer than its share {} of the file's {size} \
                         bytes",
                        m.piece_len(*t, size)
                    ),
                    "report this as a tierfs bug; export the file to keep its bytes".into(),
                ));
            }
        }
        let view = FileView {
            layout,
            id,
            size,
            pieces: good,
        };
        return (view, issues);
    }
    for PieceRead { tier: t, read, .. } in &pieces {
        if let LayoutRead::Valid(FileLayout::Whole { tier }) = read {
            if tier != t {
                issues.push(Issue::repair(
                    rel,
                    *t,
                    format!(
                        "layout xattr says tier '{}' but the piece sits on tier '{}'",
                        tiers.get(*tier).map(|x| x.name.as_str()).unwrap_or("?"),
                        tiers[*t].name
                    ),
                    Action::SetLayout {
                        tier: *t,
                        layout: FileLayout::Whole { tier: *t },
                        id: None,
                    },
                ));
            }
        }
    }
    // Whole copies on several tiers: the mount keeps the newest (the last one of equal
    // times in tier order, as `max_by_key` picks).
    let keep = pieces
        .iter()
        .max_by_key(|p| p.mtime)
        .map(|p| (p.tier, p.len))
        .unwrap_or((on[0], 0));
    for PieceRead { tier: t, len, .. } in &pieces {
        if *t == keep.0 {
            continue;
        }
        let same = *len == keep.1 && files_equal(&tiers[*t], &tiers[keep.0], rel);
        if same {
            issues.push(Issue::repair(
                rel,
                *t,
                format!(
                    "a second, identical copy of a whole file kept on tier '{}'",
                    tiers[keep.0].name
                ),
                Action::RemoveIdentical {
                    tier: *t,
                    keep: keep.0,
                },
            ));
        } else {
            issues.push(Issue::repair(
                rel,
                *t,
                format!(
                    "an older, different copy of a whole file ({len} bytes) whose newer copy \
                     ({} bytes) is on tier '{}'; the mount shows the newer one",
                    keep.1, tiers[keep.0].name
                ),
                Action::SetAside { tier: *t },
            ));
        }
    }
    let view = FileView {
        layout: FileLayout::Whole { tier: keep.0 },
        id: None,
        size: keep.1,
        pieces: vec![keep.0],
    };
    (view, issues)
}

/// Whether the pieces at `rel` on tiers `a` and `b` have the same bytes.
fn files_equal(a: &TierDir, b: &TierDir, rel: &Path) -> bool {
    let open = |t: &TierDir| t.fs().open(&t.path(rel), libc::O_RDONLY, 0);
    let (Ok(mut fa), Ok(mut fb)) = (open(a), open(b)) else {
        return false;
    };
    let mut ba = vec![0u8; CHUNK];
    let mut bb = vec![0u8; CHUNK];
    loop {
        let na = match read_full(&mut fa, &mut ba) {
            Ok(n) => n,
            Err(_) => return false,
        };
        let nb = match read_full(&mut fb, &mut bb) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

/// Reads until `buf` is full or the end of the file; returns the bytes read.
fn read_full(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read(&mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
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

// ----- fsck --------------------------------------------------------------------------

/// What `fsck` found (and repaired).
#[derive(Debug, Default)]
pub struct FsckReport {
    pub folders: u64,
    pub files: u64,
    pub bytes: u64,
    pub symlinks: u64,
    pub others: u64,
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
pub struct TierLocks(#[allow(dead_code)] Vec<crate::lock::TierLock>);

/// Takes the lock a daemon takes in `Tier::open` ([`crate::lock`]), on every tier that has
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
        let me = crate::lock::Holder::me("fsck", None, false);
        match crate::lock::TierLock::acquire(&t.root, &meta, me, false) {
            Ok((lock, _)) => locks.push(lock),
            Err(crate::lock::LockError::Held { holder, .. }) => {
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

/// Checks the tiers of `cfg` (which the caller has locked with [`lock_tiers`]); with
/// `repair`, applies each safe fix as it is found. `out` gets one line per problem.
pub fn fsck(
    cfg: &MountConfig,
    tiers: &[TierDir],
    repair: bool,
    out: &mut dyn Write,
) -> io::Result<FsckReport> {
    let mut rep = FsckReport::default();
    let mut missing_root = Vec::new();
    for (i, t) in tiers.iter().enumerate() {
        if !t.data.is_dir() {
            if t.root.join(META_DIR).is_dir() {
                missing_root.push(i);
            } else {
                rep.fresh.push(t.name.clone());
            }
        }
    }
    let like = (0..tiers.len()).find(|i| tiers[*i].data.is_dir());
    for i in missing_root {
        let issue = Issue::repair(
            Path::new(""),
            i,
            format!(
                "the tier has no {DATA_DIR}/ folder although it was mounted before (was it \
                 emptied?)"
            ),
            Action::Mkdir { tier: i, like },
        );
        record(tiers, &mut rep, issue, repair, out)?;
    }
    let mut stack = vec![PathBuf::new()];
    let mut deferred: Vec<Issue> = Vec::new();
    let mut incomplete: Vec<(PathBuf, FileView)> = Vec::new();
    while let Some(rel) = stack.pop() {
        let l = list(tiers, &rel);
        for (t, dir, e) in &l.errors {
            let issue = Issue::manual(
                &rel,
                Some(*t),
                format!("cannot read {}: {e}", dir.display()),
                "check the tier's file system and permissions".into(),
            );
            record(tiers, &mut rep, issue, repair, out)?;
        }
        for (t, name, kind) in &l.temps {
            let child = rel.join(name);
            let ours = *kind == EntKind::File
                && name.as_bytes()[TMP_PREFIX.len()..]
                    .iter()
                    .all(u8::is_ascii_digit)
                && name.len() > TMP_PREFIX.len();
            let issue = if ours {
                Issue::repair(
                    &child,
                    *t,
                    "leftover temporary of an interrupted move (the file's own copy is intact)"
                        .into(),
                    Action::RemoveTemp { tier: *t },
                )
            } else {
                Issue::manual(
                    &child,
                    Some(*t),
                    format!(
                        "a {} whose name starts with {TMP_PREFIX}: the mount deletes (or hides) \
                         such names as leftover temporaries",
                        kind.word()
                    ),
                    "rename it on the tier if it is yours".into(),
                )
            };
            record(tiers, &mut rep, issue, repair, out)?;
        }
        for (name, on) in &l.entries {
            let child = rel.join(name);
            if rel.as_os_str().is_empty() && name.as_os_str() == cfg.mount.stats_dir.as_str() {
                let issue = Issue::manual(
                    &child,
                    Some(on[0].0),
                    format!(
                        "the stats folder {:?} hides this {} in the mount",
                        cfg.mount.stats_dir,
                        on[0].1.word()
                    ),
                    "rename it on every tier that has it".into(),
                );
                record(tiers, &mut rep, issue, repair, out)?;
                continue;
            }
            let (item, issues) = resolve(tiers, &child, on, &l.missing);
            // A missing piece of a file with an id may sit at another path: decided (and
            // repaired) once every file is known, see `rejoin_issues`.
            let split_candidate = matches!(&item, Item::File(v) if v.id.is_some());
            for issue in issues {
                if split_candidate && matches!(issue.action, Some(Action::CreatePiece { .. })) {
                    deferred.push(issue);
                } else {
                    record(tiers, &mut rep, issue, repair, out)?;
                }
            }
            match item {
                Item::Dir(_) => {
                    rep.folders += 1;
                    stack.push(child);
                }
                Item::File(v) => {
                    rep.files += 1;
                    rep.bytes += v.size;
                    if split_candidate && v.pieces.len() < v.layout.tiers().len() {
                        incomplete.push((child, v));
                    }
                }
                Item::Other(_, EntKind::Symlink) => rep.symlinks += 1,
                Item::Other(..) => rep.others += 1,
            }
        }
    }
    for issue in rejoin_issues(&incomplete, &mut deferred) {
        record(tiers, &mut rep, issue, repair, out)?;
    }
    for issue in deferred {
        record(tiers, &mut rep, issue, repair, out)?;
    }
    Ok(rep)
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
        let parts: Vec<crate::layout::Part> = group
            .iter()
            .map(|(rel, v)| crate::layout::Part {
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

/// Prints one problem (and applies its fix with `repair`).
fn record(
    tiers: &[TierDir],
    rep: &mut FsckReport,
    issue: Issue,
    repair: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    let place = issue.place(tiers);
    let outcome = match (&issue.action, repair) {
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
    rep.issues.push((issue, outcome));
    Ok(())
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
            if !files_equal(&tiers[t], &tiers[*keep], rel) {
                return Err("the copies differ now; not removed".into());
            }
            on.unlink(&p).map_err(e)?;
            Ok("removed the identical copy".into())
        }
        Action::CreatePiece {
            layout, id, like, ..
        } => {
            let like_meta = like.and_then(|l| tiers[l].fs().stat(&tiers[l].path(rel)).ok());
            let mode = like_meta
                .as_ref()
                .map(|m| m.mode() & 0o7777)
                .unwrap_or(0o600);
            let f = on
                .open(&p, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, mode)
                .map_err(e)?;
            drop(f);
            let r = (|| -> io::Result<()> {
                let encoded = layout.encode_with_id(*id);
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
        Action::MoveToFirst { .. } => {
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
    let counts = format!(
        "{} tiers, {} folders, {} files ({}), {} symlinks, {} other",
        tiers.len(),
        rep.folders,
        rep.files,
        crate::units::fmt_bytes(rep.bytes),
        rep.symlinks,
        rep.others
    );
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

// ----- export ------------------------------------------------------------------------

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
    /// Inconsistencies seen on the tiers (see `tierfs fsck`).
    pub issues: u64,
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
    let mut f = on.open(src, libc::O_RDONLY, 0)?;
    let mut out = SparseOut::create(dest)?;
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    loop {
        let n = read_full(&mut f, &mut buf)?;
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
}

impl Exporter<'_> {
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
                let to = self.dest.join(&child);
                match item {
                    Item::Dir(on) => {
                        self.dir(&child, &on);
                        stack.push(child);
                    }
                    Item::File(v) => self.file(&child, &v, &to),
                    Item::Other(t, k) => {
                        let from = self.tiers[t].path(&child);
                        self.other(&child, t, &from, k, &to)
                    }
                }
            }
        }
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
    };
    if root_attrs {
        if let Some(t) = tiers.iter().position(|t| t.data.is_dir()) {
            let from = tiers[t].data.clone();
            x.xattrs(Path::new(""), t, &from, dest);
            x.dirs.push((dest.to_path_buf(), t, from));
        }
    }
    x.run();
    x.rep
}

/// `tierfs export`: checks DEST, copies, prints the counts.
pub fn run_export(config: &Path, dest: &Path, force: bool) -> Result<(), Failure> {
    let cfg = MountConfig::load(config).map_err(|e| Failure::usage(e.to_string()))?;
    let tiers = tier_dirs(&cfg)?;
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
    let mut line = format!(
        "tierfs export: {} files ({}), {} folders, {} symlinks, {} other",
        rep.files,
        crate::units::fmt_bytes(rep.bytes),
        rep.folders,
        rep.symlinks,
        rep.others
    );
    if rep.conflicts > 0 {
        line.push_str(&format!(", {} conflicting copies", rep.conflicts));
    }
    if !rep.skipped.is_empty() {
        line.push_str(&format!(", {} skipped", rep.skipped.len()));
    }
    println!("{line} -> {}", dest.display());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::StripeMap;

    fn setup(n: usize) -> (tempfile::TempDir, MountConfig, Vec<TierDir>) {
        let d = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for i in 0..n {
            let p = d.path().join(format!("t{i}"));
            fs::create_dir_all(p.join(DATA_DIR)).unwrap();
            fs::create_dir_all(p.join(META_DIR)).unwrap();
            text.push_str(&format!(
                "[[tier]]\nname = \"t{i}\"\npath = \"{}\"\nread_bandwidth = \"1GB/s\"\n",
                p.display()
            ));
        }
        let cfg = MountConfig::parse(&text, &d.path().join("c.toml")).unwrap();
        let tiers = tier_dirs(&cfg).unwrap();
        (d, cfg, tiers)
    }

    fn xattrs_work(dir: &Path) -> bool {
        let f = dir.join("probe");
        fs::write(&f, b"").unwrap();
        let ok = sys::lsetxattr(&f, OsStr::new("user.x"), b"1", 0).is_ok();
        fs::remove_file(&f).unwrap();
        ok
    }

    fn check(cfg: &MountConfig, tiers: &[TierDir], repair: bool) -> (FsckReport, String) {
        let mut out = Vec::new();
        let r = fsck(cfg, tiers, repair, &mut out).unwrap();
        (r, String::from_utf8(out).unwrap())
    }

    #[test]
    fn clean_tree_and_whole_file_duplicates() {
        let (_d, cfg, tiers) = setup(2);
        fs::create_dir(tiers[0].data.join("a")).unwrap();
        fs::create_dir(tiers[1].data.join("a")).unwrap();
        fs::write(tiers[0].data.join("a/f"), b"hello").unwrap();
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
        assert_eq!((r.folders, r.files, r.bytes), (1, 1, 5));
        // An identical copy and a different older one.
        fs::write(tiers[1].data.join("a/f"), b"hello").unwrap();
        fs::write(tiers[0].data.join("g"), b"new").unwrap();
        fs::write(tiers[1].data.join("g"), b"old!").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
        sys::lutimens(&tiers[1].data.join("g"), SetTime::At(old), SetTime::At(old)).unwrap();
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 2, "{out}");
        let (r, out) = check(&cfg, &tiers, true);
        assert_eq!(r.repaired(), r.problems(), "{out}");
        assert_eq!(
            fs::read(tiers[1].data.join("g.tierfs-conflict-t1")).unwrap(),
            b"old!"
        );
        assert_eq!(fs::read(tiers[0].data.join("g")).unwrap(), b"new");
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
    }

    #[test]
    fn stripe_pieces_are_checked_and_exported() {
        let (d, cfg, tiers) = setup(2);
        crate::testutil::require!(
            xattrs_work(&tiers[0].data),
            "no user xattrs on the temp file system"
        );
        let m = StripeMap::new(4096, vec![0, 1, 0]);
        let layout = FileLayout::Stripe(m.clone());
        let data: Vec<u8> = (0..20000u32).map(|i| (i % 251) as u8 + 1).collect();
        for (t, tier) in tiers.iter().enumerate() {
            let p = tier.data.join("s");
            let mut piece = vec![0u8; m.piece_len(t, data.len() as u64) as usize];
            for ex in m.extents(0, data.len()) {
                if ex.tier == t {
                    piece[ex.local as usize..ex.local as usize + ex.len]
                        .copy_from_slice(&data[ex.buf..ex.buf + ex.len]);
                }
            }
            fs::write(&p, &piece).unwrap();
            sys::lsetxattr(&p, OsStr::new(LAYOUT_XATTR), layout.encode().as_bytes(), 0).unwrap();
        }
        sys::lsetxattr(&tiers[0].data.join("s"), OsStr::new("user.k"), b"v", 0).unwrap();
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
        assert_eq!(r.bytes, data.len() as u64);
        let dest = d.path().join("out");
        fs::create_dir(&dest).unwrap();
        let rep = export(&cfg, &tiers, &dest, true);
        assert!(rep.errors.is_empty(), "{:?}", rep.errors);
        assert_eq!(fs::read(dest.join("s")).unwrap(), data);
        assert_eq!(
            sys::lgetxattr(&dest.join("s"), OsStr::new("user.k")).unwrap(),
            b"v"
        );
        assert!(sys::lgetxattr(&dest.join("s"), OsStr::new(LAYOUT_XATTR)).is_err());
        // A lost piece: reported, recreated empty with the layout.
        fs::remove_file(tiers[1].data.join("s")).unwrap();
        let (r, out) = check(&cfg, &tiers, true);
        assert_eq!((r.problems(), r.repaired()), (1, 1), "{out}");
        assert_eq!(
            read_layout(tiers[1].fs(), &tiers[1].data.join("s"), 2),
            LayoutRead::Valid(layout)
        );
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
    }

    #[test]
    fn temporaries_and_missing_folders() {
        let (_d, cfg, tiers) = setup(3);
        fs::create_dir_all(tiers[0].data.join("x/y")).unwrap();
        fs::create_dir_all(tiers[1].data.join("x")).unwrap();
        fs::write(tiers[2].data.join(format!("{TMP_PREFIX}77")), b"t").unwrap();
        let (r, out) = check(&cfg, &tiers, false);
        // x on t2, x/y on t1 (x/y on t2 is implied by x), the temporary.
        assert_eq!(r.problems(), 3, "{out}");
        let (r, out) = check(&cfg, &tiers, true);
        // With repair, x is made on t2 first, so x/y on t2 is found missing too.
        assert_eq!(r.repaired(), 4, "{out}");
        assert!(tiers[2].data.join("x/y").is_dir());
        let (r, out) = check(&cfg, &tiers, false);
        assert_eq!(r.problems(), 0, "{out}");
    }

    #[test]
    fn a_held_lock_is_refused() {
        let (_d, _cfg, tiers) = setup(2);
        let held = lock_tiers(&tiers).unwrap();
        assert!(lock_tiers(&tiers).is_err());
        drop(held);
        assert!(lock_tiers(&tiers).is_ok());
    }
}
