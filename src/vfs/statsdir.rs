//! The `.tierfs/` folder: its files' handles (opened, read and written here, beside one
//! another and never by the data path: the façade sends every handle that is not an open
//! file's here), the control file's commands (the tier commands' effects in
//! [`crate::vfs::tierctl`]) and the views the stats files render (cache, memory, files).

use crate::cache::{Cache, Totals, BLOCK};
use crate::control::{Command, TierCommand};
use crate::data::cached;
use crate::error::{Error, Result};
use crate::inodes::tree::{NodeData, Tree};
use crate::inodes::types::*;
use crate::layout::FileLayout;
use crate::vfs::contain;
use crate::vfs::handles;
use crate::vfs::state::TierFs;
use crate::vfs::tierctl;

use crate::data::writeback;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `.tierfs/cache`.
#[derive(Debug, serde::Serialize)]
pub struct CacheView {
    pub enabled: bool,
    pub config: Option<crate::config::CacheConfig>,
    /// Where the size comes from (the config, or the memory limit and the rule), or why
    /// there is no cache.
    pub size_from: String,
    /// Bytes the cache may hold now: the size, lower while the job needs the memory.
    pub budget: u64,
    /// Times memory pressure lowered the budget.
    pub pressure_shrinks: u64,
    /// Bytes of cached files evicted to get under a lowered budget.
    pub pressure_evicted_bytes: u64,
    /// Budget held by cached files (whole files, rounded up to blocks).
    pub used: u64,
    /// Memory really allocated for blocks.
    pub allocated: u64,
    pub dirty: u64,
    pub hit_bytes: u64,
    pub miss_bytes: u64,
    /// Of the bytes read from cached files, the share served from memory.
    pub hit_ratio: f64,
    pub absorbed_bytes: u64,
    /// Of the bytes written to and read from cached blocks, those the daemon did not
    /// copy (whole blocks over /dev/fuse).
    pub zero_copy_bytes: u64,
    pub writeback_bytes: u64,
    pub writeback_errors: u64,
    pub prefetch_files: u64,
    pub prefetch_bytes: u64,
    pub prefetch_used_bytes: u64,
    pub prefetch_wasted_bytes: u64,
    pub admissions: u64,
    pub refusals: u64,
    pub evictions: u64,
    pub evicted_bytes: u64,
    pub discarded_dirty_bytes: u64,
    pub memory: MemoryView,
    pub orders: Vec<OrderEntry>,
    pub files: Vec<CachedFile>,
}

/// The daemon's memory: what it may use at most, and what it uses.
#[derive(Debug, serde::Serialize)]
pub struct MemoryView {
    pub cache_limit: u64,
    /// Per-thread request, reply and bounce buffers, at most.
    pub buffers_bound: u64,
    /// Cache plus buffers (metadata, a few hundred bytes per file, comes on top).
    pub bound: u64,
    /// Resident set size of the daemon now.
    pub rss: u64,
    /// The job's memory limit the pressure watch follows (null: no watch).
    pub job_limit: Option<u64>,
    /// Of it, in use now and not droppable by the kernel (usage less inactive page cache).
    pub job_in_use: Option<u64>,
}

#[derive(Debug, serde::Serialize)]
pub struct OrderEntry {
    pub dir: String,
    #[serde(flatten)]
    pub order: crate::cache::order::OrderView,
}

#[derive(Debug, serde::Serialize)]
pub struct CachedFile {
    pub path: String,
    pub size: u64,
    pub blocks: u64,
    pub valid_blocks: u64,
    pub dirty_blocks: u64,
    /// Reads until its predicted next use (the policy's rank; null when unknown).
    pub next_use: Option<u64>,
    pub gradient: bool,
    pub dirty_age_s: Option<f64>,
    pub last_error: Option<String>,
}

pub(crate) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

pub(crate) fn file_list(fs: &TierFs) -> Vec<(PathBuf, u64, FileLayout)> {
    let tree = fs.tree.read();
    let mut out = Vec::new();
    let mut stack = vec![ROOT_INO];
    while let Some(ino) = stack.pop() {
        if let Ok(children) = tree.children(ino) {
            for (name, c) in children {
                // A file with several names (hard links) is listed once, by its primary.
                let Some(n) = tree.nodes.get(c).filter(|n| n.is_primary(ino, name)) else {
                    continue;
                };
                match &n.data {
                    NodeData::Dir { .. } => stack.push(*c),
                    NodeData::File(f) => {
                        if let Some(rel) = tree.rel(*c) {
                            out.push((rel, f.size(), f.layout()));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Opens the `.tierfs/` file `v` for the user `uid`: a stats file's content is rendered
/// now, once per open (names only for those [`crate::vfs::snapshot::shows_names_to`]); the
/// control file's handle holds the reply to its last write.
pub(crate) fn open(fs: &TierFs, v: Virtual, write: bool, uid: u32) -> Result<(u64, OpenInfo)> {
    if v == Virtual::Control {
        // Read-only there is nothing to read: a reply belongs to the handle that wrote.
        if !write {
            return Err(Error::Access(
                "the control file is opened for writing (read-write to read the replies)",
            ));
        }
        return Ok((
            handles::new_fh(fs, Handle::Control(Arc::default())),
            OpenInfo {
                direct_io: true,
                keep_cache: false,
                no_flush: false,
                passthrough: None,
            },
        ));
    }
    if write {
        return Err(Error::Access("the stats files are read-only"));
    }
    if v == Virtual::Dir {
        return Err(Error::IsDir);
    }
    let names = crate::vfs::snapshot::shows_names_to(fs, uid);
    let content = crate::vfs::snapshot::render(fs, v, names);
    Ok((
        handles::new_fh(fs, Handle::Virtual(Arc::new(content))),
        OpenInfo {
            direct_io: true,
            keep_cache: false,
            no_flush: true,
            passthrough: None,
        },
    ))
}

/// Reads up to `len` bytes at `off` of the handle `fh`, one that is not an open file's, and
/// hands them to `reply`: a stats file's content rendered at open (from its own memory), or
/// the unread rest of the control file's last reply (which ignores `off`: see
/// [`Reply`]).
pub(crate) fn read_with<R>(
    fs: &TierFs,
    fh: u64,
    off: u64,
    len: usize,
    reply: impl FnOnce(&[u8]) -> R,
) -> Result<R> {
    match handles::handle(fs, fh)? {
        Handle::Virtual(content) => {
            let start = usize::try_from(off).map_or(content.len(), |o| o.min(content.len()));
            let end = start + len.min(content.len() - start);
            Ok(reply(&content[start..end]))
        }
        Handle::Control(r) => {
            let mut buf = vec![0; len.min(Reply::MAX)];
            let n = r.read(&mut buf);
            Ok(reply(&buf[..n]))
        }
        Handle::Dir(_) => Err(Error::IsDir),
        // Not reached: the façade sends an open file's reads to the data path, and a
        // handle's number is never reused for another kind.
        Handle::File { .. } => Err(Error::BadHandle),
    }
}

/// [`read_with`] into `buf`; returns how many bytes.
pub(crate) fn read_into(fs: &TierFs, fh: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
    read_with(fs, fh, off, buf.len(), |d| {
        buf[..d.len()].copy_from_slice(d);
        d.len()
    })
}

/// Writes `data` to the handle `fh`, one that is not an open file's: the control file runs
/// it as commands ([`control`]) and keeps the reply (or the refusal's reason) for the
/// handle's next read; the stats files are read-only.
pub(crate) fn write(fs: &TierFs, fh: u64, data: &[u8]) -> Result<u32> {
    match handles::handle(fs, fh)? {
        Handle::Control(reply) => {
            let r = control(fs, data);
            reply.set(match &r {
                Ok(text) => text.clone(),
                Err(e) => format!("error: {e}\n"),
            });
            r.map(|_| data.len() as u32)
        }
        Handle::Virtual(_) => Err(Error::Access("the stats files are read-only")),
        Handle::Dir(_) => Err(Error::IsDir),
        // Not reached: the façade sends an open file's writes to the data path.
        Handle::File { .. } => Err(Error::BadHandle),
    }
}

/// Resolves a control path to an inode.
pub(crate) fn resolve(fs: &TierFs, path: &Path) -> Result<(u64, u64)> {
    let tree = fs.tree.read();
    let mut ino = ROOT_INO;
    let mut parent = ROOT_INO;
    for c in path.components() {
        parent = ino;
        ino = tree.child(ino, c.as_os_str())?;
    }
    Ok((parent, ino))
}

/// A refused control write: `errno` and the reason its writer reads back.
fn refused(errno: i32, reason: String) -> Error {
    Error::Refused { errno, reason }
}

/// Runs a `.tierfs/control` write: every line is parsed, every path resolved and every
/// tier command checked before any acts, so a refused write changes nothing. Returns the
/// reply (one `ok ...` line per command, several for `status`); a refusal is an
/// [`Error::Refused`] naming the line, with the errno the write fails with.
pub(crate) fn control(fs: &TierFs, text: &[u8]) -> Result<String> {
    let text = std::str::from_utf8(text)
        .map_err(|_| refused(libc::EINVAL, "control text is not UTF-8".into()))?;
    let cmds = crate::control::parse_lines(text).map_err(|e| {
        log::warn!(
            "refused a control write of {} bytes: {}",
            text.len(),
            crate::control::log_excerpt(&e.to_string())
        );
        let reason = match e.line {
            0 => e.reason,
            n => format!("line {n}: {}", e.reason),
        };
        refused(libc::EINVAL, crate::control::log_excerpt(&reason))
    })?;
    let tier_cmds: Vec<(usize, &TierCommand)> = cmds
        .iter()
        .filter_map(|(l, c)| match c {
            Command::Tier(t) => Some((*l, t)),
            _ => None,
        })
        .collect();
    let _ops = (!tier_cmds.is_empty()).then(tierctl::serialize);
    let mut tiers = tierctl::plan(fs, &tier_cmds)
        .inspect_err(|e| log::warn!("control: refused: {e}"))?
        .into_iter();
    // Resolve every path before acting on any.
    let mut plan = Vec::with_capacity(cmds.len());
    for (line, cmd) in cmds {
        // A tier command's tier, or the inode a hint names.
        let (tier, ino) = match &cmd {
            Command::Tier(_) => (tiers.next().expect("one per tier command"), None),
            _ => (
                None,
                resolve_target(fs, &cmd).map_err(|e| {
                    let raw = text.lines().nth(line - 1).unwrap_or("").trim();
                    refused(
                        e.errno(),
                        crate::control::log_excerpt(&format!("line {line}: '{raw}': {e}")),
                    )
                })?,
            ),
        };
        plan.push((line, cmd, tier, ino));
    }
    // The hints first: one may fail (a flush's write-back), and the tier commands, checked
    // above and sure to apply, then have changed nothing.
    let mut replies = vec![String::new(); plan.len()];
    for (i, (line, cmd, _, ino)) in plan.iter().enumerate() {
        if !matches!(cmd, Command::Tier(_)) {
            hint(fs, cmd, *ino).inspect_err(|e| log::warn!("control: line {line}: {e}"))?;
            replies[i] = format!("ok {}\n", text.lines().nth(line - 1).unwrap_or("").trim());
        }
    }
    for (i, (_, cmd, tier, _)) in plan.iter().enumerate() {
        if let Command::Tier(t) = cmd {
            replies[i] = tierctl::apply(fs, t, *tier);
        }
    }
    let mut reply = replies.concat();
    if reply.is_empty() {
        reply.push_str("ok (no command)\n");
    }
    Ok(reply)
}

/// The inode a hint names (None for one that names none).
fn resolve_target(fs: &TierFs, cmd: &Command) -> Result<Option<u64>> {
    Ok(match cmd {
        Command::Order { dir, .. } => Some(resolve(fs, dir)?.1),
        Command::Step { dir: Some(d) } => Some(resolve(fs, d)?.1),
        Command::Prefetch { path } | Command::Drop { path } => {
            let (_, ino) = resolve(fs, path)?;
            if !matches!(fs.tree.read().get(ino)?.data, NodeData::File(_)) {
                return Err(Error::Invalid("prefetch/drop of something not a file"));
            }
            Some(ino)
        }
        Command::Flush { path: Some(p) } => Some(resolve(fs, p)?.1),
        Command::DebugPanic { path } => Some(resolve(fs, path)?.1),
        _ => None,
    })
}

/// Acts on one hint (or `flush`, `debug-panic`); without a cache the cache's hints are
/// no-ops.
fn hint(fs: &TierFs, cmd: &Command, target: Option<u64>) -> Result<()> {
    if let (Command::DebugPanic { .. }, Some(ino)) = (cmd, target) {
        // Not a cache hint: armed with or without a cache.
        contain::arm_panic(fs, ino);
        return Ok(());
    }
    let Some(c) = &fs.cache else {
        return Ok(());
    };
    match cmd {
        Command::Order { hint, dir } => c.hint(
            (!dir.as_os_str().is_empty()).then_some(target.unwrap_or(ROOT_INO)),
            *hint,
        ),
        Command::Step { .. } => c.mark_step(target),
        Command::Prefetch { .. } => c.queue_prefetch(target.expect("resolved"), true),
        Command::Drop { .. } | Command::Flush { path: Some(_) } => {
            let ino = target.expect("resolved");
            let node = match &fs.tree.read().get(ino)?.data {
                NodeData::File(f) => f.clone(),
                _ => return Ok(()),
            };
            if matches!(cmd, Command::Drop { .. }) {
                let mut st = node.state.write();
                cached::uncache_locked(&fs.parts(), &node, &mut st)?;
            } else {
                // Not in the `if let`: its temporaries live through the block, and
                // write-back takes the file's lock again, which deadlocked behind a
                // writer queued for it (an open) between the two.
                let e = node.state.read().cache.clone();
                if let Some(e) = e {
                    writeback::write_back(&fs.parts(), &node, &e, ino)?;
                }
            }
        }
        Command::Flush { path: None } => writeback::flush_cache(&fs.parts())?,
        Command::DebugPanic { .. } | Command::Tier(_) => {}
    }
    Ok(())
}

pub(crate) fn cache_view(fs: &TierFs) -> CacheView {
    // Per FUSE thread: fuser's request buffer, the read reply buffer and an unaligned-write
    // bounce buffer, 1 MiB each at most; per prefetch fill thread nothing (blocks are
    // counted in the cache).
    let buffers_bound = fs.threads as u64 * 3 * BLOCK;
    let Some(c) = &fs.cache else {
        let memory = MemoryView {
            cache_limit: 0,
            buffers_bound,
            bound: buffers_bound,
            rss: rss_bytes(),
            job_limit: None,
            job_in_use: None,
        };
        return CacheView::of_totals(&Totals::default(), fs.staging_from.clone(), memory);
    };
    let tree = fs.tree.read();
    let (files, allocated) = resident_files(c, &tree);
    let orders = c
        .orders()
        .into_iter()
        .map(|(d, o)| OrderEntry {
            dir: if d == ROOT_INO {
                "/".into()
            } else {
                path_of(&tree, d)
            },
            order: o,
        })
        .collect();
    let memory = MemoryView {
        cache_limit: c.cfg.size,
        buffers_bound,
        bound: c.cfg.size + buffers_bound,
        rss: rss_bytes(),
        job_limit: c.watch.as_ref().map(|l| l.bytes),
        job_in_use: c.watch.as_ref().and_then(|l| l.in_use()),
    };
    CacheView {
        enabled: true,
        config: Some(c.cfg.clone()),
        budget: c.budget(),
        used: c.used(),
        allocated,
        orders,
        files,
        ..CacheView::of_totals(&c.counters.totals(), c.size_from.clone(), memory)
    }
}

impl CacheView {
    /// The view of a cache whose counters read `t`, with nothing configured, held or
    /// learned: a disabled cache's whole view, and the base an enabled one's is built on.
    fn of_totals(t: &Totals, size_from: String, memory: MemoryView) -> CacheView {
        CacheView {
            enabled: false,
            config: None,
            size_from,
            budget: 0,
            pressure_shrinks: t.pressure_shrinks,
            pressure_evicted_bytes: t.pressure_evicted_bytes,
            used: 0,
            allocated: 0,
            dirty: t.dirty_bytes,
            hit_bytes: t.hit_bytes,
            miss_bytes: t.miss_bytes,
            hit_ratio: t.hit_ratio(),
            absorbed_bytes: t.absorbed_bytes,
            zero_copy_bytes: t.zero_copy_bytes,
            writeback_bytes: t.writeback_bytes,
            writeback_errors: t.writeback_errors,
            prefetch_files: t.prefetch_files,
            prefetch_bytes: t.prefetch_bytes,
            prefetch_used_bytes: t.prefetch_used_bytes,
            prefetch_wasted_bytes: t.prefetch_wasted_bytes,
            admissions: t.admissions,
            refusals: t.refusals,
            evictions: t.evictions,
            evicted_bytes: t.evicted_bytes,
            discarded_dirty_bytes: t.discarded_dirty_bytes,
            memory,
            orders: Vec::new(),
            files: Vec::new(),
        }
    }
}

/// A path for the cache view: escaped, without the leading `/`.
fn path_of(tree: &Tree, ino: u64) -> String {
    tree.rel(ino)
        .map(|p| crate::stats::escape_path(&p))
        .unwrap_or_else(|| format!("(inode {ino}, deleted)"))
}

/// The files the cache holds, by path, and the memory their blocks really take.
fn resident_files(c: &Cache<crate::inodes::file::FileNode>, tree: &Tree) -> (Vec<CachedFile>, u64) {
    let mut allocated = 0;
    let mut files: Vec<CachedFile> = c
        .residents()
        .into_iter()
        .map(|(n, e)| {
            let slots = e.all_slots();
            let mut valid = 0;
            for s in &slots {
                let s = s.lock();
                valid += s.valid as u64;
                allocated += s.len() as u64;
            }
            let rank = c.rank_of_entry(&e);
            CachedFile {
                path: path_of(tree, e.ino),
                size: n.size(),
                blocks: slots.len() as u64,
                valid_blocks: valid,
                dirty_blocks: e.dirty_blocks(),
                next_use: (c.cfg.policy == crate::config::CachePolicy::Learned && rank != u64::MAX)
                    .then_some(rank),
                gradient: e.gradient,
                dirty_age_s: e.dirty_age(),
                last_error: e.last_error.lock().clone(),
            }
        })
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    (files, allocated)
}
