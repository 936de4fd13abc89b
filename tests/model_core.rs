//! Model-based test of file semantics on the FUSE-free core, `tierfs::vfs::TierFs`, with
//! shrinking (proptest).
//!
//! proptest generates sequences of namespace and data operations over a small fixed set of
//! paths, so names collide: creates hit existing files and folders, renames land on
//! existing files, across folders and into their own subtree, lookups walk through files.
//! Each operation runs on a `TierFs` built over 2 or 3 temp tier folders (whole-file, with
//! and without kernel passthrough handles, and stripe layouts, the stripe unit at the
//! config's 64 KiB minimum so writes of up to 3 MiB cross many stripes) and on an
//! in-memory model (path -> folder or bytes); results, errnos (ENOENT, EEXIST, ENOTEMPTY,
//! EISDIR, ENOTDIR, EINVAL, EBADF) and bytes must agree.
//! Open handles survive unlink and rename of their file, as POSIX says.
//!
//! The test drives the core as the kernel would: it walks paths with `lookup` (ENOENT and
//! ENOTDIR on the way come from there), keeps a lookup reference per open handle and gives
//! it back at close, and does the VFS's own rename ancestor checks (EINVAL, ENOTEMPTY)
//! that never reach a filesystem.
//!
//! After every sequence (and at every `Remount`, which drops the `TierFs`, re-opens the
//! tiers and rebuilds it from them) the whole tree and every byte are compared with the
//! model, and the tier folders are checked: folders are on every tier, each file's pieces
//! sit exactly on the tiers of its layout with its layout xattr and piece sizes that add up
//! to its size, and nothing else is there (no stray piece after rename, unlink or
//! truncate). A remount must keep every file's layout. A failing sequence is shrunk to a
//! minimal one and printed with the seed.
//!
//! Size of the run, from the environment (the defaults are a quick CI run):
//! - `TIERFS_MODEL_CASES`: sequences per configuration (default 48)
//! - `TIERFS_MODEL_OPS`: longest sequence, in operations (default 64)
//! - `TIERFS_MODEL_SEED`: RNG seed (default: random; printed either way)
//!
//! Long run:
//! `TIERFS_MODEL_CASES=400 TIERFS_MODEL_OPS=200 cargo test --release --test model_core -- --nocapture`
//! On 2 cores this ran 142,127 operations in 2,000 sequences, 0 mismatches, in 90 s.
//!
//! Each test prints `model_core[CONFIG]: N ops in C cases, M mismatches (seed S)` to stderr,
//! uncaptured, and the last one to finish adds the total.

#[path = "common/model_ops.rs"]
mod model_ops;

use model_ops::{env_num, op, seed, Falloc, Mix, Op, MIB, PATHS, UNIT};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::io::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use tierfs::config::MountConfig;
use tierfs::layout::{FileLayout, LAYOUT_XATTR};
use tierfs::vfs::{Ctx, Kind, SetAttr, TierFs, ROOT_INO};

const KIB: u64 = 1 << 10;

/// The core draws no mount fields: O_TRUNC reaches it as a setattr (`Truncate`), O_DIRECT
/// and alignment stop at the kernel.
const MIX: Mix = Mix {
    create: 4,
    open: 3,
    close: 2,
    write: 8,
    read: 5,
    truncate: 2,
    ftruncate: 2,
    fallocate: 2,
    rename: 4,
    unlink: 2,
    link: 5,
    mkdir: 3,
    rmdir: 2,
    fsync: 1,
    stat: 2,
    fstat: 1,
    remount: 1,
    mount_fields: false,
};

/// Deterministic pseudo-random bytes (xorshift), as in tests/common.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

// ----- the model -----------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Ent {
    Dir,
    /// A file, by id into `Model::data` (ids outlive unlink while handles remain).
    File(u64),
}

type MRes<T> = Result<T, i32>;

/// POSIX file semantics over a map: path -> folder or file, file id -> bytes.
#[derive(Default, Debug)]
struct Model {
    tree: BTreeMap<PathBuf, Ent>,
    data: HashMap<u64, Vec<u8>>,
    next: u64,
}

impl Model {
    fn get(&self, p: &Path) -> Option<Ent> {
        self.tree.get(p).copied()
    }

    /// Path resolution of `p`'s ancestors: ENOENT for a missing one, ENOTDIR for a file.
    fn parent_ok(&self, p: &Path) -> MRes<()> {
        let mut cur = PathBuf::new();
        if let Some(parent) = p.parent() {
            for c in parent.components() {
                cur.push(c);
                match self.get(&cur) {
                    None => return Err(libc::ENOENT),
                    Some(Ent::File(_)) => return Err(libc::ENOTDIR),
                    Some(Ent::Dir) => {}
                }
            }
        }
        Ok(())
    }

    fn lookup(&self, p: &Path) -> MRes<Ent> {
        self.parent_ok(p)?;
        self.get(p).ok_or(libc::ENOENT)
    }

    fn has_children(&self, p: &Path) -> bool {
        self.tree.keys().any(|k| k.parent() == Some(p))
    }

    fn create(&mut self, p: &Path, excl: bool) -> MRes<u64> {
        self.parent_ok(p)?;
        match self.get(p) {
            Some(_) if excl => Err(libc::EEXIST),
            Some(Ent::Dir) => Err(libc::EISDIR),
            Some(Ent::File(id)) => Ok(id),
            None => {
                let id = self.next;
                self.next += 1;
                self.tree.insert(p.to_path_buf(), Ent::File(id));
                self.data.insert(id, Vec::new());
                Ok(id)
            }
        }
    }

    fn open(&self, p: &Path) -> MRes<u64> {
        match self.lookup(p)? {
            Ent::Dir => Err(libc::EISDIR),
            Ent::File(id) => Ok(id),
        }
    }

    fn bytes(&self, id: u64) -> &Vec<u8> {
        &self.data[&id]
    }

    fn write(&mut self, id: u64, off: u64, data: &[u8]) {
        let v = self.data.get_mut(&id).unwrap();
        if data.is_empty() {
            return; // not a skip: POSIX: a zero-length write changes nothing, not even the size
        }
        let end = off as usize + data.len();
        if v.len() < end {
            v.resize(end, 0);
        }
        v[off as usize..end].copy_from_slice(data);
    }

    fn read(&self, id: u64, off: u64, len: usize) -> Vec<u8> {
        let v = self.bytes(id);
        let start = (off as usize).min(v.len());
        let end = (start + len).min(v.len());
        v[start..end].to_vec()
    }

    fn set_size(&mut self, id: u64, size: u64) {
        self.data.get_mut(&id).unwrap().resize(size as usize, 0);
    }

    fn truncate(&mut self, p: &Path, size: u64) -> MRes<()> {
        match self.lookup(p)? {
            Ent::Dir => Err(libc::EISDIR),
            Ent::File(id) => {
                self.set_size(id, size);
                Ok(())
            }
        }
    }

    fn fallocate(&mut self, id: u64, off: u64, len: u64, mode: Falloc) {
        let v = self.data.get_mut(&id).unwrap();
        let end = (off + len) as usize;
        match mode {
            Falloc::Alloc => {
                if v.len() < end {
                    v.resize(end, 0);
                }
            }
            Falloc::KeepSize => {}
            Falloc::PunchHole => {
                let e = end.min(v.len());
                let s = (off as usize).min(e);
                v[s..e].fill(0);
            }
        }
    }

    /// rename(2) as Linux orders its checks: path walks, source exists, the VFS ancestor
    /// checks (source above target: EINVAL; target above source: ENOTEMPTY), same object,
    /// then the kinds and emptiness of an existing target.
    fn rename(&mut self, from: &Path, to: &Path) -> MRes<()> {
        self.parent_ok(from)?;
        self.parent_ok(to)?;
        let src = self.get(from).ok_or(libc::ENOENT)?;
        if to != from && to.starts_with(from) {
            return Err(libc::EINVAL);
        }
        if to != from && from.starts_with(to) {
            return Err(libc::ENOTEMPTY);
        }
        if from == to || matches!(self.get(to), Some(Ent::File(id)) if src == Ent::File(id)) {
            // The same name, or two names of one file: nothing happens.
            return Ok(());
        }
        if let Some(t) = self.get(to) {
            match (src, t) {
                (Ent::Dir, Ent::File(_)) => return Err(libc::ENOTDIR),
                (Ent::File(_), Ent::Dir) => return Err(libc::EISDIR),
                (Ent::Dir, Ent::Dir) if self.has_children(to) => return Err(libc::ENOTEMPTY),
                _ => {}
            }
            self.tree.remove(to);
        }
        let moved: Vec<(PathBuf, Ent)> = self
            .tree
            .iter()
            .filter(|(k, _)| k.starts_with(from))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for (k, _) in &moved {
            self.tree.remove(k);
        }
        for (k, v) in moved {
            let rest = k.strip_prefix(from).unwrap();
            let nk = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.tree.insert(nk, v);
        }
        Ok(())
    }

    fn unlink(&mut self, p: &Path) -> MRes<()> {
        match self.lookup(p)? {
            Ent::Dir => Err(libc::EISDIR),
            Ent::File(_) => {
                self.tree.remove(p);
                Ok(())
            }
        }
    }

    /// link(2) as Linux orders its checks: the source's walk, the target's parent, an
    /// existing target, then a folder source.
    fn link(&mut self, from: &Path, to: &Path) -> MRes<()> {
        let src = self.lookup(from)?;
        self.parent_ok(to)?;
        if self.get(to).is_some() {
            return Err(libc::EEXIST);
        }
        if src == Ent::Dir {
            return Err(libc::EPERM);
        }
        self.tree.insert(to.to_path_buf(), src);
        Ok(())
    }

    /// A file's names (0 once the last is gone).
    fn nlink(&self, id: u64) -> u64 {
        self.tree.values().filter(|e| **e == Ent::File(id)).count() as u64
    }

    /// The names of file `id`.
    fn names(&self, id: u64) -> Vec<PathBuf> {
        self.tree
            .iter()
            .filter(|(_, e)| **e == Ent::File(id))
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn mkdir(&mut self, p: &Path) -> MRes<()> {
        self.parent_ok(p)?;
        if self.get(p).is_some() {
            return Err(libc::EEXIST);
        }
        self.tree.insert(p.to_path_buf(), Ent::Dir);
        Ok(())
    }

    fn rmdir(&mut self, p: &Path) -> MRes<()> {
        match self.lookup(p)? {
            Ent::File(_) => Err(libc::ENOTDIR),
            Ent::Dir if self.has_children(p) => Err(libc::ENOTEMPTY),
            Ent::Dir => {
                self.tree.remove(p);
                Ok(())
            }
        }
    }

    /// What the whole tree should read as: path -> (kind, size, a file's link count).
    fn listing(&self) -> BTreeMap<PathBuf, (Kind, u64, u64)> {
        self.tree
            .iter()
            .map(|(p, e)| match e {
                Ent::Dir => (p.clone(), (Kind::Dir, 0, 0)),
                Ent::File(id) => (
                    p.clone(),
                    (Kind::File, self.bytes(*id).len() as u64, self.nlink(*id)),
                ),
            })
            .collect()
    }
}

// ----- the filesystem under test -------------------------------------------------------

/// One configuration: layout and tier bandwidths.
#[derive(Clone, Copy, Debug)]
struct Spec {
    name: &'static str,
    layout: &'static str,
    bandwidths: &'static [&'static str],
    /// Lines for the config's `[mount]` section.
    mount: &'static str,
}

/// Temp tier folders, their config and the `TierFs` over them.
struct Rig {
    dir: tempfile::TempDir,
    config: MountConfig,
    fs: Option<TierFs>,
    ctx: Ctx,
}

fn build_fs(config: &MountConfig) -> Result<TierFs, String> {
    let tiers = tierfs::daemon::open_tiers(config, false, |_| {})
        .map_err(|e| format!("open_tiers: {e}"))?;
    TierFs::new(config, tiers).map_err(|e| format!("TierFs::new: {e}"))
}

impl Rig {
    fn new(spec: &Spec) -> Result<Rig, String> {
        let dir = tempfile::Builder::new()
            .prefix("tierfs-model-core-")
            .tempdir_in(std::env::var_os("TIERFS_TEST_DIR").unwrap_or_else(|| "/tmp".into()))
            .map_err(|e| e.to_string())?;
        let mut text = String::new();
        for (i, bw) in spec.bandwidths.iter().enumerate() {
            text.push_str(&format!(
                "[[tier]]\nname = \"t{i}\"\npath = \"{}\"\ncreate = true\n\
                 read_bandwidth = \"{bw}\"\nwrite_bandwidth = \"{bw}\"\n",
                dir.path().join(format!("t{i}")).display()
            ));
        }
        text.push_str(&format!(
            "[placement]\nlayout = \"{}\"\nstripe_unit = \"{}KiB\"\n",
            spec.layout,
            UNIT / KIB
        ));
        text.push_str(&format!("[mount]\n{}", spec.mount));
        let config = MountConfig::parse(&text, Path::new("model_core.toml"))
            .map_err(|e| format!("config: {e}"))?;
        config
            .prepare_tier_dirs()
            .map_err(|e| format!("tier dirs: {e}"))?;
        let fs = build_fs(&config)?;
        let m = std::fs::metadata(dir.path()).map_err(|e| e.to_string())?;
        Ok(Rig {
            dir,
            config,
            fs: Some(fs),
            ctx: Ctx {
                uid: m.uid(),
                gid: m.gid(),
            },
        })
    }

    fn fs(&self) -> &TierFs {
        self.fs.as_ref().expect("mounted")
    }

    fn remount(&mut self) -> Result<(), String> {
        self.fs = None; // closes every piece and releases the tier locks
        self.fs = Some(build_fs(&self.config)?);
        Ok(())
    }
}

/// An open handle: the core's, and the model's file it stands for.
#[derive(Debug)]
struct H {
    fh: u64,
    ino: u64,
    id: u64,
    write: bool,
}

fn errno(e: tierfs::error::Error) -> i32 {
    e.errno()
}

/// Walks `p` with lookups, as the kernel does; the references are given back at once.
fn walk(fs: &TierFs, p: &Path) -> MRes<u64> {
    let mut ino = ROOT_INO;
    for c in p.components() {
        let a = fs.lookup(ino, c.as_os_str()).map_err(errno)?;
        fs.forget(a.ino, 1);
        ino = a.ino;
    }
    Ok(ino)
}

/// Walks to the folder that holds `p`'s last name: ENOTDIR where it is no folder.
fn walk_parent(fs: &TierFs, p: &Path) -> MRes<u64> {
    let ino = walk(fs, p.parent().unwrap())?;
    if fs.getattr(ino).map_err(errno)?.kind != Kind::Dir {
        return Err(libc::ENOTDIR);
    }
    Ok(ino)
}

fn same<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: MRes<T>,
    want: MRes<T>,
) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{what}: tierfs gave {}, the model {}",
            show(&got),
            show(&want)
        ))
    }
}

fn show<T: std::fmt::Debug>(r: &MRes<T>) -> String {
    match r {
        Ok(v) => {
            let s = format!("Ok({v:?})");
            if s.len() > 200 {
                format!("{}...", &s[..200])
            } else {
                s
            }
        }
        Err(e) => format!("Err({})", std::io::Error::from_raw_os_error(*e)),
    }
}

fn diff_bytes(got: &[u8], want: &[u8]) -> Option<String> {
    if got == want {
        return None; // not a skip: no difference
    }
    let first = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Some(format!(
        "{} bytes where the model has {}; first difference at byte {first}",
        got.len(),
        want.len()
    ))
}

fn core_read(fs: &TierFs, fh: u64, off: u64, len: usize) -> MRes<Vec<u8>> {
    fs.read_with(fh, off, len as u32, |d| d.to_vec())
        .map_err(errno)
}

/// Runs one operation on both sides; `Ok(false)` when it did not apply (no open handle).
fn step(rig: &mut Rig, model: &mut Model, hs: &mut Vec<H>, op: &Op) -> Result<bool, String> {
    let path = |i: usize| Path::new(PATHS[i]);
    let pick = |hs: &Vec<H>, h: usize| (!hs.is_empty()).then(|| h % hs.len());
    if let Op::Remount = op {
        close_all(rig.fs(), hs)?;
        let before = rig.fs().file_list();
        rig.remount()?;
        check_after_remount(rig, model, &before)?;
        return Ok(true);
    }
    let fs = rig.fs.as_ref().expect("mounted");
    match *op {
        // `..`: the mount's fields, which MIX leaves false.
        Op::Create {
            path: i,
            excl,
            write,
            ..
        } => {
            let p = path(i);
            let name = p.file_name().unwrap();
            let mut flags = libc::O_CREAT | if write { libc::O_RDWR } else { libc::O_RDONLY };
            if excl {
                flags |= libc::O_EXCL;
            }
            let got = walk_parent(fs, p)
                .and_then(|pino| fs.create(pino, name, 0o644, flags, rig.ctx).map_err(errno));
            let want = model.create(p, excl);
            same(
                &format!("create {p:?}"),
                got.as_ref().map(|_| ()).map_err(|e| *e),
                want.map(|_| ()),
            )?;
            if let (Ok((attr, fh, _)), Ok(id)) = (got, want) {
                hs.push(H {
                    fh,
                    ino: attr.ino,
                    id,
                    write,
                });
                same(
                    &format!("size of created {p:?}"),
                    Ok((attr.kind, attr.size)),
                    Ok((Kind::File, model.bytes(id).len() as u64)),
                )?;
            }
        }
        Op::Open { path: i, write, .. } => {
            let p = path(i);
            let name = p.file_name().unwrap();
            let flags = if write { libc::O_RDWR } else { libc::O_RDONLY };
            // The lookup reference is kept while the handle is open, as the kernel does.
            let got = walk_parent(fs, p).and_then(|pino| {
                let a = fs.lookup(pino, name).map_err(errno)?;
                fs.open(a.ino, flags)
                    .map(|(fh, _)| (a.ino, fh))
                    .map_err(|e| {
                        fs.forget(a.ino, 1);
                        errno(e)
                    })
            });
            let want = model.open(p);
            same(&format!("open {p:?}"), got.map(|_| ()), want.map(|_| ()))?;
            if let (Ok((ino, fh)), Ok(id)) = (got, want) {
                hs.push(H { fh, ino, id, write });
            }
        }
        Op::Close { h } => {
            let Some(k) = pick(hs, h) else {
                return Ok(false);
            };
            let hd = hs.remove(k);
            same("release", fs.release(hd.fh).map_err(errno), Ok(()))?;
            fs.forget(hd.ino, 1);
        }
        Op::Write {
            h, off, len, seed, ..
        } => {
            let Some(k) = pick(hs, h) else {
                return Ok(false);
            };
            let data = pattern(len, seed);
            let got = fs.write(hs[k].fh, off, &data).map_err(errno);
            let want = if hs[k].write {
                model.write(hs[k].id, off, &data);
                Ok(len as u32)
            } else {
                Err(libc::EBADF)
            };
            same(&format!("write {len} at {off}"), got, want)?;
        }
        Op::Read { h, off, len, .. } => {
            let Some(k) = pick(hs, h) else {
                return Ok(false);
            };
            let got = core_read(fs, hs[k].fh, off, len);
            let want = model.read(hs[k].id, off, len);
            match got {
                Ok(g) => {
                    if let Some(d) = diff_bytes(&g, &want) {
                        return Err(format!("read {len} at {off}: {d}"));
                    }
                }
                Err(e) => return Err(format!("read {len} at {off}: {}", show::<()>(&Err(e)))),
            }
        }
        Op::Truncate { path: i, size } => {
            let p = path(i);
            let got = walk(fs, p).and_then(|ino| {
                fs.setattr(
                    ino,
                    SetAttr {
                        size: Some(size),
                        ..Default::default()
                    },
                )
                .map(|a| a.size)
                .map_err(errno)
            });
            let want = model.truncate(p, size).map(|_| size);
            same(&format!("truncate {p:?} to {size}"), got, want)?;
        }
        Op::FTruncate { h, size } => {
            let Some(k) = pick(hs, h) else {
                return Ok(false);
            };
            if !hs[k].write {
                return Ok(false); // the kernel refuses ftruncate on a read-only descriptor
            }
            let got = fs
                .setattr(
                    hs[k].ino,
                    SetAttr {
                        size: Some(size),
                        ..Default::default()
                    },
                )
                .map(|a| a.size)
                .map_err(errno);
            model.set_size(hs[k].id, size);
            same(&format!("ftruncate to {size}"), got, Ok(size))?;
        }
        Op::Fallocate { h, off, len, mode } => {
            let Some(k) = pick(hs, h) else {
                return Ok(false);
            };
            let got = fs.fallocate(hs[k].fh, off, len, mode.mode()).map_err(errno);
            let want = if hs[k].write {
                model.fallocate(hs[k].id, off, len, mode);
                Ok(())
            } else {
                Err(libc::EBADF)
            };
            same(&format!("fallocate {mode:?} {len} at {off}"), got, want)?;
        }
        Op::Rename { from, to } => {
            let (f, t) = (path(from), path(to));
            let fname = f.file_name().unwrap();
            let tname = t.file_name().unwrap();
            let got = (|| {
                let fpi = walk_parent(fs, f)?;
                let tpi = walk_parent(fs, t)?;
                // The VFS's own checks, made before any filesystem is asked.
                let a = fs.lookup(fpi, fname).map_err(errno)?;
                fs.forget(a.ino, 1);
                if t != f && t.starts_with(f) {
                    return Err(libc::EINVAL);
                }
                if t != f && f.starts_with(t) {
                    return Err(libc::ENOTEMPTY);
                }
                fs.rename(fpi, fname, tpi, tname, 0).map_err(errno)
            })();
            let want = model.rename(f, t);
            same(&format!("rename {f:?} -> {t:?}"), got, want)?;
        }
        Op::Unlink { path: i } => {
            let p = path(i);
            let name = p.file_name().unwrap();
            let got = walk_parent(fs, p).and_then(|pino| fs.unlink(pino, name).map_err(errno));
            same(&format!("unlink {p:?}"), got, model.unlink(p))?;
        }
        Op::Link { from, to } => {
            let (f, t) = (path(from), path(to));
            let tname = t.file_name().unwrap();
            // As the kernel: the source's walk, the target's parent, an existing target
            // (the VFS's own check), then the filesystem.
            let got = (|| {
                let ino = walk(fs, f)?;
                let tpi = walk_parent(fs, t)?;
                if let Ok(a) = fs.lookup(tpi, tname) {
                    fs.forget(a.ino, 1);
                    return Err(libc::EEXIST);
                }
                let a = fs.link(ino, tpi, tname).map_err(errno)?;
                fs.forget(a.ino, 1);
                Ok(a.nlink as u64)
            })();
            let want = model.link(f, t).map(|()| match model.get(t) {
                Some(Ent::File(id)) => model.nlink(id),
                _ => 0,
            });
            same(&format!("link {f:?} -> {t:?}"), got, want)?;
        }
        Op::Mkdir { path: i } => {
            let p = path(i);
            let name = p.file_name().unwrap();
            let got = walk_parent(fs, p).and_then(|pino| {
                let a = fs.mkdir(pino, name, 0o755, rig.ctx).map_err(errno)?;
                fs.forget(a.ino, 1);
                Ok(a.kind)
            });
            let want = model.mkdir(p).map(|_| Kind::Dir);
            same(&format!("mkdir {p:?}"), got, want)?;
        }
        Op::Rmdir { path: i } => {
            let p = path(i);
            let name = p.file_name().unwrap();
            let got = walk_parent(fs, p).and_then(|pino| fs.rmdir(pino, name).map_err(errno));
            same(&format!("rmdir {p:?}"), got, model.rmdir(p))?;
        }
        Op::Fsync { h, datasync } => {
            let Some(k) = pick(hs, h) else {
                return Ok(false);
            };
            same("fsync", fs.fsync(hs[k].fh, datasync).map_err(errno), Ok(()))?;
        }
        Op::Stat { path: i } => {
            let p = path(i);
            let got = walk(fs, p).and_then(|ino| {
                let a = fs.getattr(ino).map_err(errno)?;
                Ok(if a.kind == Kind::File {
                    (a.kind, a.size, a.nlink as u64)
                } else {
                    (a.kind, 0, 0)
                })
            });
            let want = model.lookup(p).map(|e| match e {
                Ent::Dir => (Kind::Dir, 0, 0),
                Ent::File(id) => (Kind::File, model.bytes(id).len() as u64, model.nlink(id)),
            });
            same(&format!("stat {p:?}"), got, want)?;
        }
        Op::FStat { h } => {
            let Some(k) = pick(hs, h) else {
                return Ok(false);
            };
            let got = fs
                .getattr(hs[k].ino)
                .map(|a| (a.kind, a.size, a.nlink as u64))
                .map_err(errno);
            let id = hs[k].id;
            let want = Ok((Kind::File, model.bytes(id).len() as u64, model.nlink(id)));
            same("fstat", got, want)?;
        }
        Op::Remount => unreachable!(),
    }
    Ok(true)
}

fn close_all(fs: &TierFs, hs: &mut Vec<H>) -> Result<(), String> {
    for hd in hs.drain(..) {
        fs.release(hd.fh).map_err(|e| format!("release: {e}"))?;
        fs.forget(hd.ino, 1);
    }
    Ok(())
}

/// The whole tree through the core: path -> (kind, size, a file's link count, inode).
type CoreListing = BTreeMap<PathBuf, (Kind, u64, u64, u64)>;

fn core_listing(fs: &TierFs) -> Result<CoreListing, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(ROOT_INO, PathBuf::new())];
    while let Some((ino, rel)) = stack.pop() {
        let dh = fs
            .opendir(ino)
            .map_err(|e| format!("opendir {rel:?}: {e}"))?;
        let entries = fs
            .readdir(dh, 0)
            .map_err(|e| format!("readdir {rel:?}: {e}"))?;
        fs.releasedir(dh);
        for e in entries.iter() {
            if e.name == "." || e.name == ".." || (ino == ROOT_INO && e.name == fs.stats_dir_name())
            {
                continue;
            }
            let p = rel.join(&e.name);
            let a = fs
                .getattr(e.ino)
                .map_err(|err| format!("getattr {p:?}: {err}"))?;
            if a.kind != e.kind {
                return Err(format!(
                    "{p:?}: readdir says {:?}, getattr {:?}",
                    e.kind, a.kind
                ));
            }
            if a.kind == Kind::Dir {
                stack.push((e.ino, p.clone()));
                out.insert(p, (Kind::Dir, 0, 0, e.ino));
            } else {
                out.insert(p, (a.kind, a.size, u64::from(a.nlink), e.ino));
            }
        }
    }
    Ok(out)
}

/// Compares the whole tree and every byte with the model.
fn compare_tree(fs: &TierFs, model: &Model) -> Result<(), String> {
    let got = core_listing(fs)?;
    let shown: BTreeMap<PathBuf, (Kind, u64, u64)> = got
        .iter()
        .map(|(p, (k, s, n, _))| (p.clone(), (*k, *s, *n)))
        .collect();
    let want = model.listing();
    if shown != want {
        return Err(format!(
            "tree differs:\n tierfs {shown:?}\n model  {want:?}"
        ));
    }
    // Names of one file are one inode, names of different files are not.
    let mut ino_of: HashMap<u64, u64> = HashMap::new();
    let mut id_of: HashMap<u64, u64> = HashMap::new();
    for (p, (k, _, _, ino)) in &got {
        if let (Kind::File, Some(Ent::File(id))) = (k, model.get(p)) {
            if *ino_of.entry(id).or_insert(*ino) != *ino || *id_of.entry(*ino).or_insert(id) != id {
                return Err(format!(
                    "{p:?}: inode {ino}, but the model's names of its file are {:?}",
                    model.names(id)
                ));
            }
        }
    }
    for (p, (k, size, _, ino)) in &got {
        if *k != Kind::File {
            continue;
        }
        let Some(Ent::File(id)) = model.get(p) else {
            unreachable!()
        };
        let (fh, _) = fs
            .open(*ino, libc::O_RDONLY)
            .map_err(|e| format!("open {p:?}: {e}"))?;
        let mut data = Vec::with_capacity(*size as usize);
        loop {
            let chunk = core_read(fs, fh, data.len() as u64, MIB as usize)
                .map_err(|e| format!("read {p:?}: {}", show::<()>(&Err(e))))?;
            if chunk.is_empty() {
                break;
            }
            data.extend_from_slice(&chunk);
        }
        fs.release(fh).map_err(|e| format!("release {p:?}: {e}"))?;
        if let Some(d) = diff_bytes(&data, model.bytes(id)) {
            return Err(format!("content of {p:?}: {d}"));
        }
    }
    // The file list has one entry per file, under one of its names.
    let files: BTreeMap<u64, u64> = fs
        .file_list()
        .into_iter()
        .map(|(p, s, _)| match model.get(&p) {
            Some(Ent::File(id)) => (id, s),
            _ => (u64::MAX, s),
        })
        .collect();
    let want_files: BTreeMap<u64, u64> = model
        .tree
        .values()
        .filter_map(|e| match e {
            Ent::File(id) => Some((*id, model.bytes(*id).len() as u64)),
            Ent::Dir => None,
        })
        .collect();
    if files != want_files {
        return Err(format!(
            "file_list differs:\n tierfs {files:?}\n model  {want_files:?}"
        ));
    }
    Ok(())
}

/// Every entry under `root`, relative: path -> is a folder.
fn walk_backing(root: &Path) -> Result<BTreeMap<PathBuf, bool>, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let rd = std::fs::read_dir(root.join(&rel)).map_err(|e| format!("{rel:?}: {e}"))?;
        for ent in rd {
            let ent = ent.map_err(|e| e.to_string())?;
            let p = rel.join(ent.file_name());
            let is_dir = ent.file_type().map_err(|e| e.to_string())?.is_dir();
            if is_dir {
                stack.push(p.clone());
            }
            out.insert(p, is_dir);
        }
    }
    Ok(out)
}

/// The tier folders hold exactly what the layouts say: folders on every tier, each file's
/// pieces on its layout's tiers (with the layout xattr, sizes adding up to the file's),
/// and nothing else.
fn check_tiers(fs: &TierFs, model: &Model) -> Result<(), String> {
    let files = fs.file_list();
    for tier in fs.tiers() {
        let mut want: BTreeMap<PathBuf, bool> = model
            .tree
            .iter()
            .filter(|(_, e)| **e == Ent::Dir)
            .map(|(p, _)| (p.clone(), true))
            .collect();
        for (p, _, l) in &files {
            if l.tiers().contains(&tier.index) {
                // Every name of the file has its pieces (links of the same inodes).
                let Some(Ent::File(id)) = model.get(p) else {
                    return Err(format!("file_list names {p:?}, not a file of the model"));
                };
                let primary = std::fs::symlink_metadata(tier.path(p))
                    .map_err(|e| format!("{p:?} on '{}': {e}", tier.name))?
                    .ino();
                for q in model.names(id) {
                    want.insert(q.clone(), false);
                    let other = std::fs::symlink_metadata(tier.path(&q)).map(|m| m.ino());
                    if other.as_ref().ok() != Some(&primary) {
                        return Err(format!(
                            "{q:?} on '{}' is not a link of {p:?}'s piece: {other:?}",
                            tier.name
                        ));
                    }
                }
            }
        }
        let got = walk_backing(&tier.data)?;
        if got != want {
            let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
            let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
            return Err(format!(
                "tier '{}' holds the wrong entries: stray {extra:?}, missing {missing:?}, \
                 all {got:?}",
                tier.name
            ));
        }
    }
    for (p, size, l) in &files {
        let mut end = 0;
        for t in l.tiers() {
            let path = fs.tiers()[t].path(p);
            let len = std::fs::symlink_metadata(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .len();
            let x = tierfs::sys::lgetxattr(&path, OsStr::new(LAYOUT_XATTR))
                .map_err(|e| format!("{}: layout xattr: {e}", path.display()))?;
            let decoded = FileLayout::decode(&String::from_utf8_lossy(&x), fs.tiers().len())?;
            if decoded != *l {
                return Err(format!(
                    "{}: xattr says {decoded:?}, file_list {l:?}",
                    path.display()
                ));
            }
            match l {
                FileLayout::Whole { .. } => {
                    if len != *size {
                        return Err(format!(
                            "{}: piece of {len} bytes, file of {size}",
                            path.display()
                        ));
                    }
                    end = len;
                }
                FileLayout::Stripe(m) => {
                    if len > m.piece_len(t, *size) {
                        return Err(format!(
                            "{}: piece of {len} bytes, longer than its share {} of {size}",
                            path.display(),
                            m.piece_len(t, *size)
                        ));
                    }
                    end = end.max(m.logical_end(t, len));
                }
            }
        }
        if end != *size {
            return Err(format!(
                "{p:?}: pieces give size {end}, the file has {size}"
            ));
        }
    }
    Ok(())
}

fn check_after_remount(
    rig: &Rig,
    model: &Model,
    before: &[(PathBuf, u64, FileLayout)],
) -> Result<(), String> {
    // The same files with the same layouts; a file with several names may be listed under
    // another of them (the scan takes the first in path order as the primary one).
    let by_file = |l: &[(PathBuf, u64, FileLayout)]| -> BTreeMap<Option<u64>, (u64, String)> {
        l.iter()
            .map(|(p, s, lay)| {
                let id = match model.get(p) {
                    Some(Ent::File(id)) => Some(id),
                    _ => None,
                };
                (id, (*s, lay.encode()))
            })
            .collect()
    };
    let after = rig.fs().file_list();
    if by_file(&after) != by_file(before) {
        return Err(format!(
            "remount changed the files:\n before {before:?}\n after  {after:?}"
        ));
    }
    compare_tree(rig.fs(), model).map_err(|e| format!("after remount: {e}"))?;
    check_tiers(rig.fs(), model).map_err(|e| format!("after remount: {e}"))
}

fn run_case(spec: &Spec, ops: &[Op], count: &AtomicU64) -> Result<(), TestCaseError> {
    let mut rig = Rig::new(spec).map_err(TestCaseError::fail)?;
    let mut model = Model::default();
    let mut hs: Vec<H> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match step(&mut rig, &mut model, &mut hs, op) {
            Ok(true) => {
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {}
            Err(m) => return Err(TestCaseError::fail(format!("op #{i} {op:?}: {m}"))),
        }
    }
    let end = |m: String| TestCaseError::fail(format!("at the end: {m}"));
    compare_tree(rig.fs(), &model).map_err(end)?;
    close_all(rig.fs(), &mut hs).map_err(end)?;
    compare_tree(rig.fs(), &model).map_err(end)?;
    check_tiers(rig.fs(), &model).map_err(end)?;
    let before = rig.fs().file_list();
    rig.remount().map_err(end)?;
    count.fetch_add(1, Ordering::Relaxed);
    check_after_remount(&rig, &model, &before).map_err(end)?;
    drop(rig.dir);
    Ok(())
}

// ----- the runs ------------------------------------------------------------------------

const TESTS: u64 = 5;
static TOTAL_OPS: AtomicU64 = AtomicU64::new(0);
static TOTAL_MISMATCHES: AtomicU64 = AtomicU64::new(0);
static FINISHED: AtomicU64 = AtomicU64::new(0);

fn run(spec: Spec) {
    let cases = env_num("TIERFS_MODEL_CASES", 48) as u32;
    let max_ops = env_num("TIERFS_MODEL_OPS", 64).max(1) as usize;
    let seed = seed();
    let mut cfg = Config::with_cases(cases);
    cfg.failure_persistence = None;
    cfg.rng_seed = RngSeed::Fixed(seed);
    cfg.max_shrink_iters = 4000;
    let mut runner = TestRunner::new(cfg);
    let count = AtomicU64::new(0);
    let strategy = prop::collection::vec(op(MIX), 1..=max_ops);
    let result = runner.run(&strategy, |ops| run_case(&spec, &ops, &count));
    let ops = count.load(Ordering::Relaxed);
    let mismatches = u64::from(result.is_err());
    let total = TOTAL_OPS.fetch_add(ops, Ordering::Relaxed) + ops;
    let total_mm = TOTAL_MISMATCHES.fetch_add(mismatches, Ordering::Relaxed) + mismatches;
    let mut err = std::io::stderr();
    let _ = writeln!(
        err,
        "model_core[{}]: {ops} ops in {cases} cases (up to {max_ops} ops each), {mismatches} mismatches (seed {seed})",
        spec.name
    );
    if FINISHED.fetch_add(1, Ordering::Relaxed) + 1 == TESTS {
        let _ = writeln!(err, "model_core: {total} ops, {total_mm} mismatches");
    }
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, ops)) => panic!(
            "model_core[{}] (TIERFS_MODEL_SEED={seed}): {why}\nminimal failing sequence ({} ops):\n{ops:#?}",
            spec.name,
            ops.len()
        ),
        Err(TestError::Abort(why)) => panic!("model_core[{}]: aborted: {why}", spec.name),
    }
}

#[test]
fn model_core_whole_file_2_tiers() {
    run(Spec {
        name: "whole-file, 2 tiers",
        layout: "whole-file",
        bandwidths: &["2GB/s", "1GB/s"],
        mount: "",
    });
}

#[test]
fn model_core_whole_file_3_tiers() {
    run(Spec {
        name: "whole-file, 3 tiers",
        layout: "whole-file",
        bandwidths: &["3GB/s", "2GB/s", "1GB/s"],
        mount: "",
    });
}

#[test]
fn model_core_stripe_2_tiers() {
    run(Spec {
        name: "stripe 64KiB, 2 tiers",
        layout: "stripe",
        bandwidths: &["2GB/s", "1GB/s"],
        mount: "",
    });
}

#[test]
fn model_core_stripe_3_tiers() {
    run(Spec {
        name: "stripe 64KiB, 3 tiers",
        layout: "stripe",
        bandwidths: &["3GB/s", "2GB/s", "1GB/s"],
        mount: "",
    });
}

#[test]
fn model_core_whole_file_2_tiers_no_passthrough() {
    run(Spec {
        name: "whole-file, 2 tiers, passthrough off",
        layout: "whole-file",
        bandwidths: &["2GB/s", "1GB/s"],
        mount: "passthrough = \"off\"\n",
    });
}
