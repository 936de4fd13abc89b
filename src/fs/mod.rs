//! The filesystem core: the namespace, open files and the data path over the tiers, with no
//! FUSE types in sight. Every operation returns `Result`, so the whole filesystem is tested
//! without a mount; `fuse.rs` only decodes requests, calls in here and replies.
//!
//! State and its persistence:
//! - The tree lives in memory (`Tree`), rebuilt at mount by walking every tier's `data/`
//!   folder; the tiers themselves are the only persistent copy. Directories are mirrored on
//!   every tier; a file's pieces sit at the file's own path on the tiers of its layout;
//!   symlinks and special files live on the first tier.
//! - A file's size is kept in memory, exact at all times, and on disk as its piece sizes.
//! - Mode, owner, times and user xattrs are the primary piece's own (no second copy).
//!
//! Locking: the tree lock is taken before any file's state lock, never the other way. The
//! data path (read, write) does not take the tree lock at all: an open handle holds its
//! file's state, so metadata traffic never stalls I/O.
//!
//! Submodules: `scan` rebuilds the tree from the tiers at mount; `relocate` moves a file's
//! bytes to a new layout (off a full or failed tier, or to follow the shares).

mod cached;
mod contain;
mod relocate;
mod scan;

pub use relocate::RelayoutCounters;

use crate::config::{Layout, MountConfig};
use crate::error::{Error, Result};
use crate::layout::{FileLayout, StripeMap, LAYOUT_XATTR, NAME_MAX};
use crate::placement::{self, Charge, Placer};
use crate::sys::{self, SetTime};
use crate::tier::Tier;
use crate::tierio::{AlignedBuf, Class, Op, Piece};
use parking_lot::{Mutex, RwLock};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::{self, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// Inode of the mount root (FUSE's fixed root id).
pub const ROOT_INO: u64 = 1;
/// Inodes 2..FIRST_INO are the virtual stats files; see [`Virtual`].
pub const FIRST_INO: u64 = 64;
/// Prefix of the temporary names tierfs uses inside tier folders (cleaned at mount).
pub const TMP_PREFIX: &str = ".tierfs-tmp-";

/// The virtual, read-only files under the stats folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Virtual {
    Dir,
    Tiers,
    Files,
    Config,
    StatsJson,
    /// Prometheus text exposition format (see `crate::metrics`).
    Metrics,
    /// The host-memory cache: totals, learned orders, cached files (JSON).
    Cache,
    /// Write-only hints for the cache (`crate::control`).
    Control,
}

impl Virtual {
    pub const FILES: [Virtual; 7] = [
        Virtual::Tiers,
        Virtual::Files,
        Virtual::Config,
        Virtual::StatsJson,
        Virtual::Metrics,
        Virtual::Cache,
        Virtual::Control,
    ];

    pub fn ino(self) -> u64 {
        match self {
            Virtual::Dir => 2,
            Virtual::Tiers => 3,
            Virtual::Files => 4,
            Virtual::Config => 5,
            Virtual::StatsJson => 6,
            Virtual::Metrics => 7,
            Virtual::Cache => 8,
            Virtual::Control => 9,
        }
    }

    pub fn from_ino(ino: u64) -> Option<Virtual> {
        Some(match ino {
            2 => Virtual::Dir,
            3 => Virtual::Tiers,
            4 => Virtual::Files,
            5 => Virtual::Config,
            6 => Virtual::StatsJson,
            7 => Virtual::Metrics,
            8 => Virtual::Cache,
            9 => Virtual::Control,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Virtual::Dir => "",
            Virtual::Tiers => "tiers",
            Virtual::Files => "files",
            Virtual::Config => "config",
            Virtual::StatsJson => "stats.json",
            Virtual::Metrics => "metrics",
            Virtual::Cache => "cache",
            Virtual::Control => "control",
        }
    }
}

/// What kind of object a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

/// Attributes of a node as the caller sees them.
#[derive(Debug, Clone, Copy)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub blocks: u64,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
}

/// Who is asking (for ownership of new objects).
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    pub uid: u32,
    pub gid: u32,
}

/// Attribute changes of a setattr; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// One directory entry for readdir.
#[derive(Debug, Clone)]
pub struct DirEntry {
    pub ino: u64,
    pub kind: Kind,
    pub name: OsString,
}

/// Filesystem totals for statfs.
#[derive(Debug, Clone, Copy)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
}

/// How the adapter should open a handle.
#[derive(Debug, Clone, Default)]
pub struct OpenInfo {
    /// Bypass the kernel page cache (virtual files, whose size is not known in advance).
    pub direct_io: bool,
    /// Open in kernel passthrough on this backing piece: the kernel then does the handle's
    /// reads and writes itself. The adapter registers the piece once per inode and calls
    /// [`TierFs::passthrough_refused`] if the kernel will not take it.
    pub passthrough: Option<Arc<Piece>>,
}

/// Headroom a tier must have beyond a file's size before the file may be opened in
/// passthrough: passthrough writes bypass the daemon, so the move-on-ENOSPC rescue cannot
/// run for them and a full tier would fail the caller.
pub const PASSTHROUGH_HEADROOM: u64 = 1 << 30;

/// A regular file's state while the mount runs.
#[derive(Debug)]
pub struct FileNode {
    size: AtomicU64,
    state: RwLock<FileState>,
    /// Placement charge, settled with the real size when the last writer closes.
    charge: Mutex<Option<Charge>>,
    /// Written since the last settle.
    dirty: AtomicBool,
    /// Unlinked: its bytes need never reach a tier again.
    pub(crate) gone: AtomicBool,
    /// While cached: the file's mtime when its primary piece does not have it yet (a write
    /// absorbed in memory, or a time set by the user that the next write-back would
    /// overwrite). Shown by getattr; stamped on the primary piece after each write-back.
    mtime: Mutex<Option<SystemTime>>,
}

#[derive(Debug)]
struct FileState {
    layout: FileLayout,
    /// Open pieces by tier index, present while `opens > 0`.
    pieces: Vec<Option<Arc<Piece>>>,
    opens: u32,
    /// How many of `opens` are kernel passthrough handles. The kernel keeps an inode either
    /// in passthrough or in cached mode, so while this is non-zero every open must be
    /// passthrough, and while other opens exist none may be.
    pt_opens: u32,
    /// Held in the host-memory cache: every read and write goes through it, and the pieces
    /// stay open while it is (for write-back).
    cache: Option<Arc<crate::cache::Entry>>,
    /// How many of `opens` may write (a migration commits when the last one closes).
    writers: u32,
    /// A lazy re-layout under way (see `relocate`): writes go to its new pieces, reads
    /// take each block from where it is. Never together with `cache`.
    migration: Option<relocate::Migration>,
}

impl FileNode {
    fn new(layout: FileLayout, size: u64, ntiers: usize) -> FileNode {
        FileNode {
            size: AtomicU64::new(size),
            state: RwLock::new(FileState {
                layout,
                pieces: vec![None; ntiers],
                opens: 0,
                pt_opens: 0,
                cache: None,
                writers: 0,
                migration: None,
            }),
            charge: Mutex::new(None),
            dirty: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            mtime: Mutex::new(None),
        }
    }

    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    pub fn layout(&self) -> FileLayout {
        self.state.read().layout.clone()
    }
}

#[derive(Debug)]
enum NodeData {
    Dir {
        children: BTreeMap<OsString, u64>,
    },
    File(Arc<FileNode>),
    /// Symlinks and special files, which live on the first tier only.
    Other(Kind),
}

#[derive(Debug)]
struct Node {
    parent: u64,
    name: OsString,
    data: NodeData,
    /// Kernel references (lookups not yet forgotten).
    nlookup: u64,
    /// Still reachable by name.
    linked: bool,
    /// For folders and special files: their attributes when they were removed, since an
    /// open handle may still fstat them and the backing object is gone.
    removed_attr: Option<Attr>,
    /// An unlinked file whose pieces wait in the tiers' limbo folders until the kernel
    /// forgets it.
    limbo: bool,
    /// A folder made while a tier was left out of a degraded mount: it has no copy there,
    /// so renaming it needs no missing tier.
    degraded_new: bool,
}

impl Node {
    fn kind(&self) -> Kind {
        match &self.data {
            NodeData::Dir { .. } => Kind::Dir,
            NodeData::File(_) => Kind::File,
            NodeData::Other(k) => *k,
        }
    }
}

#[derive(Debug)]
struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
}

impl Tree {
    fn get(&self, ino: u64) -> Result<&Node> {
        self.nodes.get(&ino).ok_or(Error::NotFound)
    }

    fn children(&self, ino: u64) -> Result<&BTreeMap<OsString, u64>> {
        match &self.get(ino)?.data {
            NodeData::Dir { children } => Ok(children),
            _ => Err(Error::NotDir),
        }
    }

    fn children_mut(&mut self, ino: u64) -> Result<&mut BTreeMap<OsString, u64>> {
        match &mut self.nodes.get_mut(&ino).ok_or(Error::NotFound)?.data {
            NodeData::Dir { children } => Ok(children),
            _ => Err(Error::NotDir),
        }
    }

    fn child(&self, parent: u64, name: &OsStr) -> Result<u64> {
        self.children(parent)?
            .get(name)
            .copied()
            .ok_or(Error::NotFound)
    }

    /// The node's path relative to the mount root; `None` once it is unlinked.
    fn rel(&self, ino: u64) -> Option<PathBuf> {
        let mut parts = Vec::new();
        let mut cur = ino;
        while cur != ROOT_INO {
            let n = self.nodes.get(&cur)?;
            if !n.linked {
                return None;
            }
            parts.push(n.name.clone());
            cur = n.parent;
        }
        let mut p = PathBuf::new();
        for part in parts.iter().rev() {
            p.push(part);
        }
        Some(p)
    }

    fn insert(&mut self, parent: u64, name: &OsStr, data: NodeData) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(
            ino,
            Node {
                parent,
                name: name.to_os_string(),
                data,
                nlookup: 0,
                linked: true,
                removed_attr: None,
                limbo: false,
                degraded_new: false,
            },
        );
        if let Ok(c) = self.children_mut(parent) {
            c.insert(name.to_os_string(), ino);
        }
        ino
    }
}

/// An open handle.
#[derive(Debug, Clone)]
enum Handle {
    File {
        node: Arc<FileNode>,
        ino: u64,
        write: bool,
        passthrough: bool,
    },
    Virtual(Arc<Vec<u8>>),
    /// `.tierfs/control`, open for writing.
    Control,
    Dir(Arc<Vec<DirEntry>>),
}

thread_local! {
    static READ_BUF: RefCell<AlignedBuf> = RefCell::new(AlignedBuf::zeroed(1 << 20));
}

/// The filesystem core.
#[derive(Debug)]
pub struct TierFs {
    tiers: Vec<Tier>,
    placer: Placer,
    layout: Layout,
    stripe_unit: u64,
    tree: RwLock<Tree>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    stats_dir: OsString,
    config_text: String,
    started: SystemTime,
    euid: u32,
    xattr_warned: AtomicBool,
    /// Kernel passthrough may be offered (config allows it and the kernel has not refused).
    passthrough: AtomicBool,
    passthrough_mode: crate::config::Passthrough,
    /// `[placement] adapt`: shares follow the online estimates.
    adapt: bool,
    /// `placement.min_share` (with `adapt`).
    min_share: f64,
    /// Conflict copies renamed aside by the running scan: (new relative path, tier).
    aside: Mutex<Vec<(PathBuf, usize)>>,
    /// `[cache]`: the host-memory tier.
    cache: Option<Arc<crate::cache::Cache>>,
    /// Where the cache's size comes from, or why there is none (`.tierfs/cache`).
    staging_from: String,
    /// How batches of backing requests are issued (`[mount] engine`).
    engine: Box<dyn crate::tierio::Engine>,
    /// FUSE threads (each holds a 1 MiB read buffer: part of the memory bound).
    threads: usize,
    /// Bytes moved by re-layouts (`stats.json`).
    relayout: RelayoutCounters,
    /// What the kernel asked of us, counted by the FUSE layer (`stats.json`).
    requests: Arc<crate::reqstats::RequestStats>,
    /// The daemon's CPU per class of work and the bytes it moved (`stats.json` `cpu`).
    ledger: crate::ledger::CpuLedger,
    /// What [`TierFs::shutdown`] could not put on the tiers, once it has run.
    shut: Mutex<Option<Vec<String>>>,
    /// `[mount] scratch`: the data is thrown away at unmount, so [`TierFs::shutdown`]
    /// writes nothing back.
    scratch: bool,
    /// Inodes failed by a panic in a request, and the panic count (`contain`).
    contain: contain::Containment,
    /// Per tier: its coordination with the job's other nodes (`shared_ledger`), if shared.
    shared: Vec<Option<crate::coord::SharedTier>>,
}

fn name_ok(name: &OsStr) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong);
    }
    if name.is_empty() || name == "." || name == ".." || name.as_bytes().contains(&b'/') {
        return Err(Error::Invalid("bad name"));
    }
    // Our own temporaries carry this prefix and the mount-time scan removes them, so a
    // user file of that name would be lost: refuse it up front.
    if name.as_bytes().starts_with(TMP_PREFIX.as_bytes()) {
        return Err(Error::NotPermitted(
            "names starting with .tierfs-tmp- are reserved",
        ));
    }
    Ok(())
}

fn kind_of(ft: fs::FileType) -> Option<Kind> {
    Some(if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_socket() {
        Kind::Socket
    } else if ft.is_char_device() {
        Kind::CharDevice
    } else if ft.is_block_device() {
        Kind::BlockDevice
    } else {
        return None;
    })
}

fn is_no_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Write failures a whole file survives by moving to another tier: the tier is full, or it
/// has turned read-only or failing (what it holds is copied while reads still work).
fn is_rescuable(e: &std::io::Error) -> bool {
    is_no_space(e) || matches!(e.raw_os_error(), Some(libc::EROFS) | Some(libc::EIO))
}

impl TierFs {
    /// Builds the filesystem over opened tiers and rebuilds the tree from what they hold,
    /// with a cache only where the config states its size (an automatic size is the
    /// mount's to choose: [`TierFs::with_staging`]).
    pub fn new(config: &MountConfig, tiers: Vec<Tier>) -> Result<TierFs> {
        Self::with_staging(
            config,
            tiers,
            crate::cache::memory::Plan::stated(&config.cache),
        )
    }

    /// [`TierFs::new`] with the staging memory the mount chose ([`crate::cache::memory`]).
    pub fn with_staging(
        config: &MountConfig,
        tiers: Vec<Tier>,
        staging: crate::cache::memory::Plan,
    ) -> Result<TierFs> {
        let bws: Vec<f64> = tiers
            .iter()
            .map(|t| placement::effective_bandwidth(t.read_bps, t.write_bps))
            .collect();
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT_INO,
            Node {
                parent: ROOT_INO,
                name: OsString::new(),
                data: NodeData::Dir {
                    children: BTreeMap::new(),
                },
                nlookup: 1,
                linked: true,
                removed_attr: None,
                limbo: false,
                degraded_new: false,
            },
        );
        let fs = TierFs {
            placer: Placer::new(if config.placement.adapt {
                Self::paused_shares(&tiers, &bws, config.placement.min_share)
            } else {
                placement::shares(&bws)
            }),
            tiers,
            layout: config.placement.layout,
            stripe_unit: config.placement.stripe_unit,
            tree: RwLock::new(Tree {
                nodes,
                next_ino: FIRST_INO,
            }),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            stats_dir: OsString::from(&config.mount.stats_dir),
            config_text: config.to_toml(),
            started: SystemTime::now(),
            euid: sys::euid(),
            xattr_warned: AtomicBool::new(false),
            passthrough: AtomicBool::new(
                config.mount.passthrough != crate::config::Passthrough::Off,
            ),
            passthrough_mode: config.mount.passthrough,
            aside: Mutex::new(Vec::new()),
            adapt: config.placement.adapt,
            min_share: config.placement.min_share,
            cache: staging.cache.map(|c| {
                Arc::new(crate::cache::Cache::planned(
                    c,
                    staging.from.clone(),
                    staging.limit,
                ))
            }),
            staging_from: staging.from,
            threads: config.mount.threads,
            engine: crate::tierio::choose(config.mount.engine),
            relayout: RelayoutCounters::default(),
            requests: Arc::default(),
            ledger: crate::ledger::CpuLedger::default(),
            shut: Mutex::new(None),
            scratch: config.mount.scratch,
            contain: contain::Containment::default(),
            shared: Vec::new(),
        };
        let shared = config
            .tiers
            .iter()
            .zip(&fs.tiers)
            .map(|(c, t)| {
                let sh = c.shared.as_ref().filter(|_| !t.missing)?;
                Some(crate::coord::SharedTier::new(
                    crate::coord::ledger_dir(&sh.ledger, &sh.job, &t.name),
                    &sh.node,
                    placement::effective_bandwidth(t.read_bps, t.write_bps),
                ))
            })
            .collect();
        let fs = TierFs { shared, ..fs };
        fs.scan()?;
        Ok(fs)
    }

    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }

    pub fn placer(&self) -> &Placer {
        &self.placer
    }

    pub fn layout_kind(&self) -> Layout {
        self.layout
    }

    pub fn config_text(&self) -> &str {
        &self.config_text
    }

    /// The FUSE request counters (the FUSE layer counts, the stats files show).
    pub fn requests(&self) -> &Arc<crate::reqstats::RequestStats> {
        &self.requests
    }

    /// The CPU ledger (the FUSE workers and the background threads charge it).
    pub fn ledger(&self) -> &crate::ledger::CpuLedger {
        &self.ledger
    }

    /// Clears set-user-ID, and set-group-ID where the group may execute, as a write,
    /// truncate or `O_TRUNC` open by a caller without CAP_FSETID must
    /// (`FUSE_HANDLE_KILLPRIV_V2` leaves this to us; the daemon itself has CAP_FSETID as
    /// root, so the tier would not do it). Nothing happens when neither bit is set; the
    /// answer says whether the mode changed.
    pub fn kill_suidgid(&self, ino: u64) -> Result<bool> {
        let mode = self.getattr(ino)?;
        if mode.kind != Kind::File {
            return Ok(false);
        }
        let perm = mode.perm as u32;
        let mut new = perm & !libc::S_ISUID;
        if perm & libc::S_IXGRP != 0 {
            new &= !libc::S_ISGID;
        }
        if new == perm {
            return Ok(false);
        }
        self.setattr(
            ino,
            SetAttr {
                mode: Some(new),
                ..SetAttr::default()
            },
        )
        .map(|_| true)
    }

    pub fn started(&self) -> SystemTime {
        self.started
    }

    pub fn stats_dir_name(&self) -> &OsStr {
        &self.stats_dir
    }

    /// Samples every tier's online bandwidth and, when an estimate moved, recomputes the
    /// Eq. 1 shares that new files (and stripe patterns) follow. Returns the shares.
    pub fn refresh_shares(&self) -> Vec<f64> {
        let mut changed = false;
        for t in &self.tiers {
            changed |= t.sample_bandwidth();
        }
        // The job's view of a shared tier moves with the other nodes, not only with this
        // one's traffic: every period counts.
        changed |= self.shared.iter().any(Option::is_some);

        if changed {
            self.recompute_shares();
        }
        self.placer.shares()
    }

    /// Recomputes the Eq. 1 shares from the current estimates (with `adapt`; without it
    /// the configured or probed figures stay), pausing tiers too slow to be worth their
    /// risk.
    pub fn recompute_shares(&self) {
        let shared = self.shared.iter().any(Option::is_some);
        if self.adapt || shared {
            let mut bws: Vec<f64> = self
                .tiers
                .iter()
                .map(|t| {
                    let (r, w) = if self.adapt {
                        t.current_bandwidth()
                    } else {
                        (t.read_bps, t.write_bps)
                    };
                    placement::effective_bandwidth(r, w)
                })
                .collect();
            // A shared tier gives this node no more than its part of the job's view.
            for (bw, sh) in bws.iter_mut().zip(&self.shared) {
                if let Some(plan) = sh.as_ref().and_then(|s| s.plan()) {
                    *bw = bw.min(plan.allot_bps);
                }
            }
            let new = if self.adapt {
                Self::paused_shares(&self.tiers, &bws, self.min_share)
            } else {
                placement::shares(&bws)
            };
            let old = self.placer.shares();
            if new.iter().zip(&old).any(|(a, b)| (a - b).abs() > 0.02) {
                log::info!(
                    "shares now {} ({})",
                    self.tiers
                        .iter()
                        .zip(&new)
                        .map(|(t, s)| format!("{}={:.1}%", t.name, s * 100.0))
                        .collect::<Vec<_>>()
                        .join(" "),
                    match (self.adapt, shared) {
                        (true, false) => "online bandwidth",
                        (true, true) => "online bandwidth, shared tier ledger",
                        _ => "shared tier ledger",
                    }
                );
            }
            self.placer.set_shares(new);
        }
    }

    /// One period of every shared tier's ledger ([`crate::coord::SharedTier::tick`]): this
    /// node's rate, demand and saturation out, the job's view in. Runs on a thread of its
    /// own (the daemon's `tierfs-ledger`), so a PFS slow to answer holds up neither the
    /// estimator nor the stats. False when no tier is shared (no thread needed).
    pub fn tick_shared(&self) -> bool {
        if self.shared.iter().all(Option::is_none) {
            return false;
        }
        let bytes = |t: &Tier| {
            t.counters.bytes_read.load(Ordering::Relaxed)
                + t.counters.bytes_written.load(Ordering::Relaxed)
        };
        let all: u64 = self.tiers.iter().map(bytes).sum();
        let now = std::time::Instant::now();
        for (t, sh) in self.tiers.iter().zip(&self.shared) {
            if let Some(sh) = sh {
                sh.tick(now, bytes(t), all, t.queueing.saturated());
            }
        }
        true
    }

    /// A tier's coordination with the job's other nodes, if it is shared.
    pub fn shared_tier(&self, index: usize) -> Option<&crate::coord::SharedTier> {
        self.shared.get(index).and_then(Option::as_ref)
    }

    /// Takes this node out of the shared tiers' ledgers (a clean unmount).
    pub fn leave_shared(&self) {
        for sh in self.shared.iter().flatten() {
            sh.leave();
        }
    }

    /// Eq. 1 over `bws` with too-slow tiers paused; updates and logs each tier's pause.
    fn paused_shares(tiers: &[Tier], bws: &[f64], min_share: f64) -> Vec<f64> {
        let mut paused: Vec<bool> = tiers.iter().map(|t| t.is_paused()).collect();
        let new = placement::shares_with_pause(bws, min_share, &mut paused);
        for (t, p) in tiers.iter().zip(paused) {
            if p != t.is_paused() {
                let s = placement::pairwise_share(bws, t.index) * 100.0;
                if p {
                    log::warn!(
                        "tier '{}' paused: next to the fastest tier it measures {s:.1}% of the \
                         bandwidth, below min_share {:.0}%; it gets no new data (recovery \
                         probes still measure it) until it measures {:.0}%",
                        t.name,
                        min_share * 100.0,
                        min_share * placement::RESUME_FACTOR * 100.0
                    );
                } else {
                    log::info!(
                        "tier '{}' resumed: it measures {s:.1}% next to the fastest tier",
                        t.name
                    );
                }
                t.set_paused(p);
            }
        }
        new
    }

    /// Recovery probes (with `adapt`): a tier whose share fell well below its stated or
    /// probed one and whose own traffic has gone quiet is measured with a small probe on a
    /// thread of its own, so its share can return when its bandwidth does.
    pub fn probe_tiers(self: &Arc<Self>) {
        if !self.adapt {
            return;
        }
        // A shared tier's base is this node's part of it: a cut the ledger made is no
        // reason to probe it.
        let base: Vec<f64> = self
            .tiers
            .iter()
            .zip(&self.shared)
            .map(|(t, sh)| {
                let bw = placement::effective_bandwidth(t.read_bps, t.write_bps);
                match sh.as_ref().and_then(|s| s.plan()) {
                    Some(p) => bw.min(p.allot_bps),
                    None => bw,
                }
            })
            .collect();
        // A tier too slow on paper to ever resume is not probed for nothing: its base
        // share counts as paused whenever it is below the resume point.
        let base = placement::shares_with_pause(&base, self.min_share, &mut vec![true; base.len()]);
        let now = self.placer.shares();
        for (i, t) in self.tiers.iter().enumerate() {
            if t.claim_probe(now[i] < 0.8 * base[i]) {
                let fs = self.clone();
                let r = std::thread::Builder::new()
                    .name("tierfs-probe".into())
                    .spawn(move || crate::tierio::recovery::probe(&fs.tiers[i], &*fs.engine));
                if let Err(e) = r {
                    log::warn!("cannot start a probe thread: {e}");
                }
            }
        }
    }

    /// The configured passthrough mode.
    pub fn passthrough_mode(&self) -> crate::config::Passthrough {
        self.passthrough_mode
    }

    /// Whether passthrough may still be offered.
    pub fn passthrough_enabled(&self) -> bool {
        self.passthrough.load(Ordering::Relaxed)
    }

    /// Stops offering passthrough (the kernel or our privileges do not allow it).
    pub fn disable_passthrough(&self, why: &str) {
        if self.passthrough.swap(false, Ordering::Relaxed) {
            log::warn!("kernel passthrough off: {why}; all I/O goes through the daemon");
        }
    }

    /// The rule for opening a file in passthrough (state lock held): only whole files; only
    /// when the inode has no daemon-served open (the kernel keeps one mode per inode), or
    /// already has passthrough opens (then it must); on a healthy tier with room to spare,
    /// since a passthrough write that hits ENOSPC cannot be rescued by moving the file; and
    /// O_DIRECT opens only with `passthrough = "direct"`, or with `"auto"` for DeepSpeed's
    /// swap files (see [`crate::config::Passthrough`]), and on a tier that takes 1 KiB-aligned
    /// direct I/O, since DeepSpeed's tails are not 4 KiB-aligned and the kernel passes the
    /// caller's alignment straight to the tier.
    fn passthrough_piece(
        &self,
        st: &FileState,
        name: &OsStr,
        size: u64,
        flags: i32,
    ) -> Option<Arc<Piece>> {
        if !self.passthrough.load(Ordering::Relaxed) {
            return None;
        }
        let FileLayout::Whole { tier } = st.layout else {
            return None;
        };
        if st.cache.is_some() {
            // Its current bytes are in memory: the kernel must not read the tier instead.
            return None;
        }
        let piece = st.pieces[tier].clone()?;
        if st.pt_opens > 0 {
            return Some(piece);
        }
        if st.opens > 0 || self.stages_instead(tier) {
            return None;
        }
        let t = &self.tiers[tier];
        if !t.is_healthy() || t.room() < size.saturating_add(PASSTHROUGH_HEADROOM) {
            return None;
        }
        if flags & libc::O_DIRECT != 0 {
            let allowed = match self.passthrough_mode {
                crate::config::Passthrough::Direct => true,
                crate::config::Passthrough::Auto => is_deepspeed_swap(name),
                crate::config::Passthrough::Off => false,
            };
            if !allowed || !t.small_direct_io {
                return None;
            }
        }
        // The kernel writes a passthrough file with the daemon's credentials, which keep
        // set-user-ID and set-group-ID where a user's write must clear them: such files are
        // written through the daemon (FUSE_HANDLE_KILLPRIV_V2 then clears the bits).
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            use std::os::unix::fs::PermissionsExt;
            let setid = piece.file().metadata().map_or(true, |m| {
                m.permissions().mode() & (libc::S_ISUID | libc::S_ISGID) != 0
            });
            if setid {
                return None;
            }
        }
        Some(piece)
    }

    /// Whether a whole file on `tier` is staged in host memory rather than opened in kernel
    /// passthrough: with a cache, only the fastest tier's files go to the kernel. A slower
    /// tier's file opened in passthrough would be read and written at that tier's speed
    /// while DeepSpeed waits on it; through the daemon the prefetcher has read it ahead and
    /// its writes land in memory and go back behind the reader (write-behind), so every tier
    /// works at once. The fastest tier gains nothing from memory it does not gain from the
    /// kernel, which moves its bytes with no daemon CPU at all.
    pub(super) fn stages_instead(&self, tier: usize) -> bool {
        self.cache.is_some() && self.tiers.len() > 1 && Some(tier) != self.fastest_tier()
    }

    /// Whether a whole file on `tier` goes to the kernel rather than into memory when both
    /// could take it: with a cache over several tiers, the fastest tier's files do (see
    /// [`Self::stages_instead`]). With one tier the cache comes first, as configured.
    pub(super) fn kernel_first(&self, tier: usize) -> bool {
        self.cache.is_some() && self.tiers.len() > 1 && Some(tier) == self.fastest_tier()
    }

    /// Whether the cache should leave this open's file alone because kernel passthrough
    /// will serve it ([`Self::kernel_first`]); asked before the open is admitted.
    fn leave_to_kernel(&self, st: &FileState, name: &OsStr, size: u64, flags: i32) -> bool {
        match st.layout {
            FileLayout::Whole { tier } if st.cache.is_none() && self.kernel_first(tier) => {
                self.passthrough_piece(st, name, size, flags).is_some()
            }
            _ => false,
        }
    }

    /// The tier with the largest Eq. 1 share now (the first of equals).
    fn fastest_tier(&self) -> Option<usize> {
        let shares = self.placer.shares();
        let max = shares.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        shares.iter().position(|s| *s == max)
    }

    /// The adapter could not register a passthrough handle: serve it through the daemon.
    pub fn passthrough_refused(&self, fh: u64) {
        let mut handles = self.handles.lock();
        if let Some(Handle::File {
            node, passthrough, ..
        }) = handles.get_mut(&fh)
        {
            if *passthrough {
                *passthrough = false;
                let mut st = node.state.write();
                st.pt_opens = st.pt_opens.saturating_sub(1);
                if let FileLayout::Whole { tier } = st.layout {
                    self.tiers[tier]
                        .counters
                        .pt_open
                        .fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    // ----- helpers ---------------------------------------------------------------------

    /// The piece of an open file on `tier`, or EIO when the tier was left out of a degraded
    /// mount (the only way an open file lacks one).
    fn open_piece<'a>(
        &self,
        st: &'a FileState,
        tier: usize,
        op: &'static str,
    ) -> Result<&'a Piece> {
        self.piece_in(&st.pieces, tier, op)
    }

    /// The piece on `tier` among `pieces` (a file's, or a move's new ones).
    fn piece_in<'a>(
        &self,
        pieces: &'a [Option<Arc<Piece>>],
        tier: usize,
        op: &'static str,
    ) -> Result<&'a Piece> {
        match &pieces[tier] {
            Some(p) => Ok(p),
            None if self.tiers[tier].missing => Err(self.missing_err(tier, op)),
            None => Err(Error::BadHandle),
        }
    }

    /// The error for a request that needs a tier missing from a degraded mount.
    fn missing_err(&self, tier: usize, op: &'static str) -> Error {
        let t = &self.tiers[tier];
        t.counters.errors.fetch_add(1, Ordering::Relaxed);
        Error::tier(
            &t.name,
            op,
            &t.root,
            // No raw errno: the caller gets EIO, and no move is attempted.
            std::io::Error::other("the tier is missing (mounted degraded without it)"),
        )
    }

    fn tier_err(&self, tier: usize, op: &'static str, path: &Path, e: std::io::Error) -> Error {
        self.tiers[tier].note_error(&e);
        Error::tier(&self.tiers[tier].name, op, path, e)
    }

    /// Adjusts the per-tier `used` counters for a size change of a file.
    fn account_resize(&self, layout: &FileLayout, old: u64, new: u64) {
        match layout {
            FileLayout::Whole { tier } => self.tiers[*tier].add_used(new as i64 - old as i64),
            FileLayout::Stripe(m) => {
                for t in &m.tiers {
                    let d = m.piece_len(*t, new) as i64 - m.piece_len(*t, old) as i64;
                    self.tiers[*t].add_used(d);
                }
            }
        }
    }

    fn reserved(&self, parent: u64, name: &OsStr) -> bool {
        parent == ROOT_INO && name == self.stats_dir
    }

    fn check_writable_parent(&self, parent: u64, name: &OsStr) -> Result<()> {
        if Virtual::from_ino(parent).is_some() {
            return Err(Error::Access("the stats folder is read-only"));
        }
        if self.reserved(parent, name) {
            return Err(Error::Exists);
        }
        name_ok(name)
    }

    fn virtual_attr(&self, v: Virtual) -> Attr {
        let (kind, perm, nlink) = match v {
            Virtual::Dir => (Kind::Dir, 0o555, 2),
            Virtual::Control => (Kind::File, 0o200, 1),
            _ => (Kind::File, 0o444, 1),
        };
        Attr {
            ino: v.ino(),
            kind,
            size: 0,
            blocks: 0,
            perm,
            nlink,
            uid: self.euid,
            gid: sys_egid(),
            rdev: 0,
            atime: SystemTime::now(),
            mtime: SystemTime::now(),
            ctime: self.started,
        }
    }

    /// A file's 512-byte blocks: every piece's (a migration's new pieces too), and at least
    /// its size where bytes are held in memory. `tar --sparse` takes a file with fewer
    /// blocks than its size for one with holes, and stores what it guesses are holes as
    /// zeros (GNU tar stores no data at all for a file with none), so too few is never
    /// right; too many only costs `du` accuracy.
    fn file_blocks(
        &self,
        tree: &Tree,
        ino: u64,
        st: &FileState,
        primary: usize,
        m: &Metadata,
        size: u64,
    ) -> u64 {
        let piece_blocks = |pieces: &[Option<Arc<Piece>>], t: usize| -> u64 {
            match &pieces[t] {
                Some(p) => p.file().metadata().map(|m| m.blocks()).unwrap_or(0),
                None if self.tiers[t].missing => 0,
                None => self
                    .piece_path(tree, ino, t)
                    .and_then(|p| Ok(self.tiers[t].fs().stat(&p)?.blocks()))
                    .unwrap_or(0),
            }
        };
        let mut blocks = m.blocks();
        if let FileLayout::Stripe(_) = st.layout {
            for t in st.layout.tiers().into_iter().filter(|t| *t != primary) {
                blocks += piece_blocks(&st.pieces, t);
            }
        }
        if let Some(mig) = &st.migration {
            for t in mig.layout.tiers() {
                if let Some(p) = &mig.pieces[t] {
                    blocks += p.file().metadata().map(|m| m.blocks()).unwrap_or(0);
                }
            }
        }
        if st.cache.is_some() {
            blocks = blocks.max(size.div_ceil(512));
        }
        blocks
    }

    fn attr_from_meta(&self, ino: u64, kind: Kind, m: &Metadata, size: Option<u64>) -> Attr {
        let size = size.unwrap_or(m.len());
        Attr {
            ino,
            kind,
            size,
            blocks: m.blocks(),
            perm: (m.mode() & 0o7777) as u16,
            nlink: if kind == Kind::Dir {
                m.nlink() as u32
            } else {
                1
            },
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            atime: sys::time_of(m.atime(), m.atime_nsec()),
            mtime: sys::time_of(m.mtime(), m.mtime_nsec()),
            ctime: sys::time_of(m.ctime(), m.ctime_nsec()),
        }
    }

    /// Attributes of a node, read from its primary backing object; the tree lock is held.
    fn attr_locked(&self, tree: &Tree, ino: u64) -> Result<Attr> {
        if let Some(v) = Virtual::from_ino(ino) {
            return Ok(self.virtual_attr(v));
        }
        let node = tree.get(ino)?;
        let kind = node.kind();
        match &node.data {
            NodeData::File(f) => {
                let st = f.state.read();
                // The primary piece, or where a degraded mount lacks its tier, another.
                let primary = std::iter::once(st.layout.primary())
                    .chain(st.layout.tiers())
                    .find(|t| !self.tiers[*t].missing)
                    .unwrap_or(st.layout.primary());
                let size = f.size();
                let m = if let Some(p) = &st.pieces[primary] {
                    p.file()
                        .metadata()
                        .map_err(|e| self.tier_err(primary, "fstat", Path::new("(open file)"), e))?
                } else {
                    let path = self.piece_path(tree, ino, primary)?;
                    self.tiers[primary]
                        .fs()
                        .stat(&path)
                        .map_err(|e| self.tier_err(primary, "stat", &path, e))?
                };
                // While the kernel writes through passthrough, the piece's size is the truth.
                let size = if st.pt_opens > 0 { m.len() } else { size };
                let mut a = self.attr_from_meta(ino, kind, &m, Some(size));
                a.blocks = self.file_blocks(tree, ino, &st, primary, &m, size);
                if let (Some(_), Some(t)) = (&st.cache, *f.mtime.lock()) {
                    // A change the cache holds: the piece learns it at write-back.
                    a.mtime = t;
                    a.ctime = a.ctime.max(t);
                }
                if !node.linked {
                    a.nlink = 0;
                }
                Ok(a)
            }
            _ => {
                if let Some(a) = node.removed_attr {
                    return Ok(a);
                }
                let rel = tree.rel(ino).ok_or(Error::NotFound)?;
                let path = self.tiers[0].path(&rel);
                let m = self.tiers[0]
                    .fs()
                    .stat(&path)
                    .map_err(|e| self.tier_err(0, "stat", &path, e))?;
                Ok(self.attr_from_meta(ino, kind, &m, None))
            }
        }
    }

    /// Backing paths of a node: every tier for folders, the layout's tiers for files, the
    /// first tier for the rest.
    ///
    /// A file with a piece on a tier missing from a degraded mount has no complete set of
    /// paths: changing it (rename, unlink, chmod, ...) answers EIO, so the piece on the
    /// missing tier never goes out of step with the others.
    ///
    /// The paths are for the tier's [`crate::beneath`] calls, never for a path-taking call of
    /// its own: those reach nothing through a symlink in a tier, and any depth.
    fn backing_paths(&self, tree: &Tree, ino: u64) -> Result<Vec<(usize, PathBuf)>> {
        let node = tree.get(ino)?;
        if let NodeData::File(f) = &node.data {
            if let Some(t) = f
                .state
                .read()
                .layout
                .tiers()
                .into_iter()
                .find(|t| self.tiers[*t].missing)
            {
                return Err(self.missing_err(t, "change"));
            }
        }
        if let (NodeData::File(f), true) = (&node.data, node.limbo) {
            return Ok(f
                .state
                .read()
                .layout
                .tiers()
                .into_iter()
                .map(|t| (t, self.tiers[t].limbo_path(ino)))
                .collect());
        }
        let rel = tree.rel(ino).ok_or(Error::NotFound)?;
        Ok(match &node.data {
            NodeData::Dir { .. } => self
                .tiers
                .iter()
                .filter(|t| !t.missing)
                .map(|t| (t.index, t.path(&rel)))
                .collect(),
            NodeData::File(f) => f
                .state
                .read()
                .layout
                .tiers()
                .into_iter()
                .map(|t| (t, self.tiers[t].path(&rel)))
                .collect(),
            NodeData::Other(_) => vec![(0, self.tiers[0].path(&rel))],
        })
    }

    /// Where a file's piece on `tier` is: at its path, or in limbo once unlinked.
    fn piece_path(&self, tree: &Tree, ino: u64, tier: usize) -> Result<PathBuf> {
        Ok(if tree.get(ino)?.limbo {
            self.tiers[tier].limbo_path(ino)
        } else {
            self.tiers[tier].path(&tree.rel(ino).ok_or(Error::NotFound)?)
        })
    }

    /// Moves an unlinked file's pieces to limbo (the kernel may still open or stat it).
    fn to_limbo(&self, tree: &Tree, ino: u64) -> Result<()> {
        let mut moved: Vec<(usize, PathBuf, PathBuf)> = Vec::new();
        for (t, p) in self.backing_paths(tree, ino)? {
            let l = self.tiers[t].limbo_path(ino);
            match self.tiers[t].fs().rename(&p, &l, 0) {
                Ok(()) => moved.push((t, l, p)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    for (u, l, p) in moved {
                        let _ = self.tiers[u].fs().rename(&l, &p, 0);
                    }
                    return Err(self.tier_err(t, "unlink", &p, e));
                }
            }
        }
        Ok(())
    }

    /// Forgets a node that is neither linked, referenced by the kernel nor open, and
    /// deletes its pieces in limbo.
    fn drop_if_gone(&self, tree: &mut Tree, ino: u64) {
        let Some(n) = tree.nodes.get(&ino) else {
            return;
        };
        if n.linked || n.nlookup > 0 {
            return;
        }
        if let NodeData::File(f) = &n.data {
            if f.state.read().opens > 0 {
                return;
            }
            self.discard_migration(ino, &mut f.state.write());
            self.cache_forget(f);
        }
        if n.limbo {
            if let Ok(paths) = self.backing_paths(tree, ino) {
                for (t, p) in paths {
                    let _ = self.tiers[t].fs().unlink(&p);
                }
            }
        }
        tree.nodes.remove(&ino);
    }

    fn new_fh(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(fh, h);
        fh
    }

    fn handle(&self, fh: u64) -> Result<Handle> {
        self.handles
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(Error::BadHandle)
    }

    /// Gives a new backing object the caller's ownership when we are root.
    fn chown_new(&self, path: &Path, ctx: Ctx, tier: usize) -> Result<()> {
        if self.euid == 0 && (ctx.uid != 0 || ctx.gid != 0) {
            self.tiers[tier]
                .fs()
                .chown(path, Some(ctx.uid), Some(ctx.gid))
                .map_err(|e| self.tier_err(tier, "chown", path, e))?;
        }
        Ok(())
    }

    // ----- namespace -------------------------------------------------------------------

    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<Attr> {
        if self.reserved(parent, name) {
            return Ok(self.virtual_attr(Virtual::Dir));
        }
        if parent == Virtual::Dir.ino() {
            return Virtual::FILES
                .iter()
                .find(|v| name == v.name())
                .map(|v| self.virtual_attr(*v))
                .ok_or(Error::NotFound);
        }
        if name.len() > NAME_MAX {
            return Err(Error::NameTooLong);
        }
        let mut tree = self.tree.write();
        let ino = tree.child(parent, name)?;
        let a = self.attr_locked(&tree, ino)?;
        if let Some(n) = tree.nodes.get_mut(&ino) {
            n.nlookup += 1;
        }
        Ok(a)
    }

    /// Counts a reference handed to the kernel by create/mkdir/symlink/mknod.
    fn remember(&self, tree: &mut Tree, ino: u64) {
        if let Some(n) = tree.nodes.get_mut(&ino) {
            n.nlookup += 1;
        }
    }

    pub fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT_INO || Virtual::from_ino(ino).is_some() {
            return;
        }
        let mut tree = self.tree.write();
        if let Some(node) = tree.nodes.get_mut(&ino) {
            node.nlookup = node.nlookup.saturating_sub(n);
        }
        self.drop_if_gone(&mut tree, ino);
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let tree = self.tree.read();
        self.attr_locked(&tree, ino)
    }

    pub fn setattr(&self, ino: u64, s: SetAttr) -> Result<Attr> {
        if ino == Virtual::Control.ino()
            && s.size == Some(0)
            && s.mode.is_none()
            && s.uid.is_none()
            && s.gid.is_none()
        {
            // `echo cmd > .tierfs/control` opens with O_TRUNC: nothing to truncate.
            return Ok(self.virtual_attr(Virtual::Control));
        }
        if Virtual::from_ino(ino).is_some() {
            return Err(Error::Access("the stats files are read-only"));
        }
        let tree = self.tree.read();
        let node = tree.get(ino)?;
        let open_pieces: Vec<(usize, Arc<Piece>)> = match &node.data {
            NodeData::File(f) => f
                .state
                .read()
                .pieces
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.clone().map(|p| (i, p)))
                .collect(),
            _ => Vec::new(),
        };
        // An unlinked but open file has no paths: act on its descriptors.
        let paths = if node.linked {
            self.backing_paths(&tree, ino)?
        } else {
            Vec::new()
        };
        if let Some(size) = s.size {
            match &node.data {
                NodeData::File(f) => self.truncate(&tree, ino, f, size)?,
                NodeData::Dir { .. } => return Err(Error::IsDir),
                _ => return Err(Error::Invalid("truncate of a special file")),
            }
        }
        if let Some(mode) = s.mode {
            let perm = fs::Permissions::from_mode(mode & 0o7777);
            if node.kind() != Kind::Symlink {
                for (t, p) in &paths {
                    // Never through a symlink planted in place of the piece or folder.
                    self.tiers[*t]
                        .fs()
                        .chmod(p, mode & 0o7777)
                        .map_err(|e| self.tier_err(*t, "chmod", p, e))?;
                }
                for (t, p) in &open_pieces {
                    if paths.is_empty() {
                        p.file().set_permissions(perm.clone()).map_err(|e| {
                            self.tier_err(*t, "fchmod", Path::new("(open file)"), e)
                        })?;
                    }
                }
            }
        }
        if s.uid.is_some() || s.gid.is_some() {
            for (t, p) in &paths {
                self.tiers[*t]
                    .fs()
                    .chown(p, s.uid, s.gid)
                    .map_err(|e| self.tier_err(*t, "chown", p, e))?;
            }
            if paths.is_empty() {
                for (t, p) in &open_pieces {
                    std::os::unix::fs::fchown(p.file(), s.uid, s.gid)
                        .map_err(|e| self.tier_err(*t, "fchown", Path::new("(open file)"), e))?;
                }
            }
        }
        if s.atime.is_some() || s.mtime.is_some() {
            let a = s.atime.unwrap_or(SetTime::Omit);
            let m = s.mtime.unwrap_or(SetTime::Omit);
            for (t, p) in &paths {
                self.tiers[*t]
                    .fs()
                    .utimens(p, a, m)
                    .map_err(|e| self.tier_err(*t, "utimens", p, e))?;
            }
            if let NodeData::File(f) = &node.data {
                if f.state.read().cache.is_some() {
                    // Dirty bytes in memory would overwrite it at write-back (`cp -p`,
                    // `rsync -a`, `tar x` set the times after writing): keep it until then.
                    match m {
                        SetTime::At(t) => *f.mtime.lock() = Some(t),
                        SetTime::Now => *f.mtime.lock() = Some(SystemTime::now()),
                        SetTime::Omit => {}
                    }
                }
            }
        }
        self.attr_locked(&tree, ino)
    }

    pub fn readlink(&self, ino: u64) -> Result<OsString> {
        let tree = self.tree.read();
        let node = tree.get(ino)?;
        if node.kind() != Kind::Symlink {
            return Err(Error::Invalid("not a symlink"));
        }
        let rel = tree.rel(ino).ok_or(Error::NotFound)?;
        let p = self.tiers[0].path(&rel);
        self.tiers[0]
            .fs()
            .readlink(&p)
            .map(|t| t.into_os_string())
            .map_err(|e| self.tier_err(0, "readlink", &p, e))
    }

    pub fn mkdir(&self, parent: u64, name: &OsStr, mode: u32, ctx: Ctx) -> Result<Attr> {
        self.check_writable_parent(parent, name)?;
        let mut tree = self.tree.write();
        if tree.children(parent)?.contains_key(name) {
            return Err(Error::Exists);
        }
        let rel = tree.rel(parent).ok_or(Error::NotFound)?.join(name);
        let mut made: Vec<(usize, PathBuf)> = Vec::new();
        for t in self.tiers.iter().filter(|t| !t.missing) {
            let p = t.path(&rel);
            let r = t
                .fs()
                .mkdir(&p, 0o777)
                .and_then(|_| t.fs().chmod(&p, mode & 0o7777));
            if let Err(e) = r
                .map_err(|e| self.tier_err(t.index, "mkdir", &p, e))
                .and_then(|_| self.chown_new(&p, ctx, t.index))
            {
                for (u, m) in made {
                    let _ = self.tiers[u].fs().rmdir(&m);
                }
                return Err(e);
            }
            made.push((t.index, p));
        }
        let ino = tree.insert(
            parent,
            name,
            NodeData::Dir {
                children: BTreeMap::new(),
            },
        );
        if let Some(n) = tree.nodes.get_mut(&ino) {
            n.degraded_new = self.tiers.iter().any(|t| t.missing);
        }
        self.remember(&mut tree, ino);
        self.attr_locked(&tree, ino)
    }

    pub fn symlink(&self, parent: u64, name: &OsStr, target: &Path, ctx: Ctx) -> Result<Attr> {
        self.check_writable_parent(parent, name)?;
        let mut tree = self.tree.write();
        if tree.children(parent)?.contains_key(name) {
            return Err(Error::Exists);
        }
        let rel = tree.rel(parent).ok_or(Error::NotFound)?.join(name);
        let p = self.tiers[0].path(&rel);
        self.tiers[0]
            .fs()
            .symlink(target, &p)
            .map_err(|e| self.tier_err(0, "symlink", &p, e))?;
        self.chown_new(&p, ctx, 0)?;
        let ino = tree.insert(parent, name, NodeData::Other(Kind::Symlink));
        self.remember(&mut tree, ino);
        self.attr_locked(&tree, ino)
    }

    /// mknod: regular files become ordinary tierfs files; FIFOs, sockets and character
    /// and block devices live on the first tier. The kernel lets only CAP_MKNOD make a
    /// device node and the backing mknod needs it of the daemon too (EPERM otherwise);
    /// `rdev` is the kernel's 32-bit encoding, the C library's for majors below 4096.
    /// Opening a device through the mount is the kernel's affair (`nodev` refuses it).
    pub fn mknod(&self, parent: u64, name: &OsStr, mode: u32, rdev: u32, ctx: Ctx) -> Result<Attr> {
        let fmt = mode & libc::S_IFMT;
        if fmt == libc::S_IFREG || fmt == 0 {
            let (a, fh, _) = self.create(parent, name, mode, libc::O_RDWR, ctx)?;
            self.release(fh)?;
            return Ok(a);
        }
        let kind = match fmt {
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDevice,
            libc::S_IFBLK => Kind::BlockDevice,
            _ => return Err(Error::Invalid("mknod of an unknown file type")),
        };
        self.check_writable_parent(parent, name)?;
        let mut tree = self.tree.write();
        if tree.children(parent)?.contains_key(name) {
            return Err(Error::Exists);
        }
        let rel = tree.rel(parent).ok_or(Error::NotFound)?.join(name);
        let p = self.tiers[0].path(&rel);
        self.tiers[0]
            .fs()
            .mknod(&p, mode, u64::from(rdev))
            .map_err(|e| self.tier_err(0, "mknod", &p, e))?;
        self.chown_new(&p, ctx, 0)?;
        let ino = tree.insert(parent, name, NodeData::Other(kind));
        self.remember(&mut tree, ino);
        self.attr_locked(&tree, ino)
    }

    /// Unlinks a node's backing objects and detaches it from the tree (tree lock held).
    fn detach(
        &self,
        tree: &mut Tree,
        parent: u64,
        name: &OsStr,
        ino: u64,
        remove_backing: bool,
    ) -> Result<()> {
        let (is_file, referenced) = match &tree.get(ino)?.data {
            NodeData::File(f) => (true, tree.get(ino)?.nlookup > 0 || f.state.read().opens > 0),
            _ => (false, false),
        };
        let keep_attr = match tree.get(ino)?.data {
            NodeData::File(_) => None,
            _ => self.attr_locked(tree, ino).ok().map(|mut a| {
                a.nlink = 0;
                a
            }),
        };
        let mut limbo = tree.get(ino)?.limbo;
        if remove_backing && is_file && referenced && !limbo {
            // The kernel may still stat or open this inode (a racing lookup, an open
            // handle): keep its pieces in limbo until it forgets it.
            self.to_limbo(tree, ino)?;
            limbo = true;
        } else if remove_backing && !limbo {
            let paths = self.backing_paths(tree, ino)?;
            let is_dir = matches!(tree.get(ino)?.data, NodeData::Dir { .. });
            for (t, p) in paths {
                let r = if is_dir {
                    self.tiers[t].fs().rmdir(&p)
                } else {
                    self.tiers[t].fs().unlink(&p)
                };
                match r {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(self.tier_err(
                            t,
                            if is_dir { "rmdir" } else { "unlink" },
                            &p,
                            e,
                        ))
                    }
                }
            }
        }
        if let Ok(c) = tree.children_mut(parent) {
            c.remove(name);
        }
        let node = tree.nodes.get_mut(&ino).ok_or(Error::NotFound)?;
        node.linked = false;
        node.removed_attr = keep_attr;
        node.limbo = limbo;
        if let NodeData::File(f) = &node.data {
            f.gone.store(true, Ordering::Relaxed);
            let st = f.state.read();
            self.account_resize(&st.layout, f.size(), 0);
            for t in st.layout.tiers() {
                let _ = self.tiers[t].counters.files.fetch_update(
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                    |v| Some(v.saturating_sub(1)),
                );
            }
            if let Some(c) = f.charge.lock().take() {
                self.placer.release(c);
            }
        }
        self.drop_if_gone(tree, ino);
        Ok(())
    }

    pub fn unlink(&self, parent: u64, name: &OsStr) -> Result<()> {
        if Virtual::from_ino(parent).is_some() || self.reserved(parent, name) {
            return Err(Error::Access("the stats folder is read-only"));
        }
        let mut tree = self.tree.write();
        let ino = tree.child(parent, name)?;
        if tree.get(ino)?.kind() == Kind::Dir {
            return Err(Error::IsDir);
        }
        self.detach(&mut tree, parent, name, ino, true)
    }

    pub fn rmdir(&self, parent: u64, name: &OsStr) -> Result<()> {
        if Virtual::from_ino(parent).is_some() || self.reserved(parent, name) {
            return Err(Error::Access("the stats folder is read-only"));
        }
        let mut tree = self.tree.write();
        let ino = tree.child(parent, name)?;
        if !tree.children(ino)?.is_empty() {
            return Err(Error::NotEmpty);
        }
        self.detach(&mut tree, parent, name, ino, true)
    }

    /// Hard links: refused with EPERM. A file's pieces can sit on several tiers and move
    /// between them, and each tier's link would have to be made and undone together; no
    /// DeepSpeed or copy path needs them.
    pub fn link(&self) -> Result<Attr> {
        Err(Error::NotPermitted(
            "hard links are not supported by tierfs",
        ))
    }

    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> Result<()> {
        if Virtual::from_ino(parent).is_some()
            || Virtual::from_ino(newparent).is_some()
            || self.reserved(parent, name)
        {
            return Err(Error::Access("the stats folder is read-only"));
        }
        self.check_writable_parent(newparent, newname)?;
        if flags & libc::RENAME_EXCHANGE != 0 {
            return Err(Error::Invalid("RENAME_EXCHANGE is not supported"));
        }
        // RENAME_WHITEOUT (overlayfs) would need a whiteout device node left behind, which
        // tierfs cannot store: refuse it rather than rename without one.
        if flags & !libc::RENAME_NOREPLACE != 0 {
            return Err(Error::Invalid("only RENAME_NOREPLACE is supported"));
        }
        let mut tree = self.tree.write();
        let ino = tree.child(parent, name)?;
        let kind = tree.get(ino)?.kind();
        tree.children(newparent)?;
        let target = tree.children(newparent)?.get(newname).copied();
        if target == Some(ino) {
            return Ok(());
        }
        if let Some(t) = target {
            if flags & libc::RENAME_NOREPLACE != 0 {
                return Err(Error::Exists);
            }
            let tk = tree.get(t)?.kind();
            match (kind == Kind::Dir, tk == Kind::Dir) {
                (true, false) => return Err(Error::NotDir),
                (false, true) => return Err(Error::IsDir),
                (true, true) if !tree.children(t)?.is_empty() => return Err(Error::NotEmpty),
                _ => {}
            }
        }
        // A folder has a copy on every tier, the missing one of a degraded mount included,
        // and that copy may hold striped pieces and whole files no listing shows: renamed
        // on the present tiers alone, the folder would split in two, and each striped file
        // in it into two halves reading zeros where the other holds the bytes. (A file
        // with a piece on the missing tier is refused by `backing_paths` below.)
        if let Some(m) = self.tiers.iter().find(|t| t.missing) {
            for n in std::iter::once(ino).chain(target) {
                let node = tree.get(n)?;
                if node.kind() == Kind::Dir && !node.degraded_new {
                    return Err(self.missing_err(m.index, "rename"));
                }
            }
        }
        if kind == Kind::Dir {
            // Refuse to move a folder into itself.
            let mut cur = newparent;
            while cur != ROOT_INO {
                if cur == ino {
                    return Err(Error::Invalid("cannot move a folder into itself"));
                }
                cur = tree.get(cur)?.parent;
            }
        }
        let from_rel = tree.rel(ino).ok_or(Error::NotFound)?;
        let to_rel = tree.rel(newparent).ok_or(Error::NotFound)?.join(newname);
        let src: Vec<usize> = self
            .backing_paths(&tree, ino)?
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        // A file being replaced moves to limbo first, whole: the kernel may still stat or
        // open the old inode (rename(2) never lets the name go missing), and pieces on tiers
        // the source does not cover must not survive under the name. A crash here loses
        // the target, never the source.
        let mut target_in_limbo = None;
        if let Some(t) =
            target.filter(|t| matches!(tree.nodes.get(t).map(|n| &n.data), Some(NodeData::File(_))))
        {
            self.to_limbo(&tree, t)?;
            if let Some(n) = tree.nodes.get_mut(&t) {
                n.limbo = true;
            }
            target_in_limbo = Some(t);
        } else if let Some(t) = target {
            let tpaths = self.backing_paths(&tree, t)?;
            for (tier, p) in tpaths {
                if !src.contains(&tier) {
                    let r = if kind == Kind::Dir {
                        self.tiers[tier].fs().rmdir(&p)
                    } else {
                        self.tiers[tier].fs().unlink(&p)
                    };
                    if let Err(e) = r {
                        if e.kind() != std::io::ErrorKind::NotFound {
                            return Err(self.tier_err(tier, "unlink", &p, e));
                        }
                    }
                }
            }
        }
        let mut done: Vec<usize> = Vec::new();
        for &t in &src {
            let from = self.tiers[t].path(&from_rel);
            let to = self.tiers[t].path(&to_rel);
            let tfs = self.tiers[t].fs();
            let mut r = tfs.rename(&from, &to, 0);
            if let Err(e) = &r {
                if e.kind() == std::io::ErrorKind::NotFound
                    && kind == Kind::Dir
                    && !tfs.exists(&from)
                {
                    // The folder was missing on this tier: make it where it goes.
                    r = tfs.mkdir_all(&to);
                }
            }
            if let Err(e) = r {
                // Undo what moved so the tiers stay in agreement.
                for &u in &done {
                    let _ = self.tiers[u].fs().rename(
                        &self.tiers[u].path(&to_rel),
                        &self.tiers[u].path(&from_rel),
                        0,
                    );
                }
                if let Some(old) = target_in_limbo {
                    // And put the replaced file back under its name.
                    if let Ok(paths) = self.backing_paths(&tree, old) {
                        for (u, l) in paths {
                            let _ = self.tiers[u]
                                .fs()
                                .rename(&l, &self.tiers[u].path(&to_rel), 0);
                        }
                    }
                    if let Some(n) = tree.nodes.get_mut(&old) {
                        n.limbo = false;
                    }
                }
                return Err(self.tier_err(t, "rename", &from, e));
            }
            done.push(t);
        }
        if let Some(t) = target {
            self.detach(&mut tree, newparent, newname, t, false)?;
        }
        tree.children_mut(parent)?.remove(name);
        tree.children_mut(newparent)?
            .insert(newname.to_os_string(), ino);
        let n = tree.nodes.get_mut(&ino).ok_or(Error::NotFound)?;
        n.parent = newparent;
        n.name = newname.to_os_string();
        Ok(())
    }

    // ----- files -----------------------------------------------------------------------

    /// ENOSPC for a new file or a move no tier has room for, logged with each tier's
    /// account: `df` may show free space that tierfs keeps back ([`crate::tier::FREE_RESERVE`]
    /// per tier, and what the cache has promised), or the tier is at its `capacity`.
    pub(super) fn no_room(&self, want: u64) -> Error {
        use crate::units::fmt_bytes;
        let why: Vec<String> = self
            .tiers
            .iter()
            .filter(|t| !t.missing)
            .map(|t| {
                let avail = t.space().map_or(0, |s| s.avail);
                let mut w = format!(
                    "'{}' {} free on its file system, {} of it kept back (FREE_RESERVE)",
                    t.name,
                    fmt_bytes(avail),
                    fmt_bytes(avail.min(crate::tier::FREE_RESERVE))
                );
                let promised = t.counters.reserved.load(Ordering::Relaxed);
                if promised > 0 {
                    w.push_str(&format!(
                        ", {} promised to cached data",
                        fmt_bytes(promised)
                    ));
                }
                if let Some(c) = t.capacity {
                    w.push_str(&format!(
                        ", {} of its capacity {} used",
                        fmt_bytes(t.counters.used.load(Ordering::Relaxed)),
                        fmt_bytes(c)
                    ));
                }
                if !t.is_healthy() {
                    w.push_str(&format!(", {}", t.state()));
                }
                w
            })
            .collect();
        log::warn!(
            "no tier has room for {} more bytes (ENOSPC): {}",
            fmt_bytes(want),
            why.join("; ")
        );
        Error::NoSpace(want)
    }

    /// Chooses the layout of a new file in `parent` (no tree lock needed).
    fn choose_layout(&self, parent: u64) -> Result<(FileLayout, Option<Charge>)> {
        let eligible: Vec<bool> = self
            .tiers
            .iter()
            .map(|t| t.is_healthy() && t.has_room_for(1 << 20))
            .collect();
        match self.layout {
            Layout::WholeFile => {
                let c = self
                    .placer
                    .choose(parent, &eligible)
                    .ok_or_else(|| self.no_room(1 << 20))?;
                Ok((FileLayout::Whole { tier: c.tier }, Some(c)))
            }
            Layout::Stripe => {
                let pattern = placement::stripe_pattern(&self.placer.shares(), &eligible);
                if pattern.is_empty() {
                    return Err(self.no_room(1 << 20));
                }
                if pattern.len() == 1 {
                    return Ok((
                        FileLayout::Whole {
                            tier: pattern[0] as usize,
                        },
                        None,
                    ));
                }
                Ok((
                    FileLayout::Stripe(StripeMap::new(self.stripe_unit, pattern)),
                    None,
                ))
            }
        }
    }

    /// Creates the backing pieces of a new file; on failure nothing is left behind.
    fn create_pieces(
        &self,
        rel: &Path,
        layout: &FileLayout,
        mode: u32,
        ctx: Ctx,
    ) -> Result<Vec<Option<Arc<Piece>>>> {
        let mut pieces: Vec<Option<Arc<Piece>>> = vec![None; self.tiers.len()];
        let mut made = Vec::new();
        let encoded = layout.encode_with_id(Some(crate::layout::new_file_id()));
        let result = (|| {
            for t in layout.tiers() {
                let tier = &self.tiers[t];
                let p = tier.path(rel);
                let mut r = Piece::open_new_in(&tier.root, &p, mode, tier.direct_io);
                if let Err(e) = &r {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        // The folder is missing on this tier (a failed mirror): make it.
                        if let Some(dir) = p.parent() {
                            let _ = tier.fs().mkdir_all(dir);
                        }
                        r = Piece::open_new_in(&tier.root, &p, mode, tier.direct_io);
                    }
                }
                let piece = r.map_err(|e| self.tier_err(t, "create", &p, e))?;
                made.push((t, p.clone()));
                if let Err(e) =
                    tier.fs()
                        .setxattr(&p, OsStr::new(LAYOUT_XATTR), encoded.as_bytes(), 0)
                {
                    if matches!(layout, FileLayout::Stripe(_)) {
                        return Err(self.tier_err(t, "set layout xattr on", &p, e));
                    }
                    if !self.xattr_warned.swap(true, Ordering::Relaxed) {
                        log::warn!("tier '{}' has no user xattrs ({e}); whole files are recognised by where they sit", tier.name);
                    }
                }
                self.chown_new(&p, ctx, t)?;
                pieces[t] = Some(Arc::new(piece));
            }
            Ok(())
        })();
        if let Err(e) = result {
            for (t, p) in made {
                let _ = self.tiers[t].fs().unlink(&p);
            }
            return Err(e);
        }
        Ok(pieces)
    }

    pub fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        ctx: Ctx,
    ) -> Result<(Attr, u64, OpenInfo)> {
        self.check_writable_parent(parent, name)?;
        let (mut layout, mut charge) = self.choose_layout(parent)?;
        let mut tree = self.tree.write();
        if let Some(existing) = tree.children(parent)?.get(name).copied() {
            if let Some(c) = charge {
                self.placer.release(c);
            }
            if flags & libc::O_EXCL != 0 {
                return Err(Error::Exists);
            }
            drop(tree);
            let (fh, info) = self.open(existing, flags)?;
            let a = self.getattr(existing)?;
            let mut tree = self.tree.write();
            self.remember(&mut tree, existing);
            return Ok((a, fh, info));
        }
        let rel = tree.rel(parent).ok_or(Error::NotFound)?.join(name);
        let pieces = match self.create_pieces(&rel, &layout, mode & 0o7777, ctx) {
            Ok(p) => p,
            Err(e) if matches!(&e, Error::Tier { source, .. } if is_rescuable(source)) => {
                // The chosen tier filled up or failed since we looked: try the others.
                if let Some(c) = charge.take() {
                    self.placer.release(c);
                }
                let failed = layout.tiers();
                let eligible: Vec<bool> = self
                    .tiers
                    .iter()
                    .map(|t| {
                        !failed.contains(&t.index) && t.is_healthy() && t.has_room_for(1 << 20)
                    })
                    .collect();
                let c = self
                    .placer
                    .choose(parent, &eligible)
                    .ok_or_else(|| self.no_room(1 << 20))?;
                layout = FileLayout::Whole { tier: c.tier };
                charge = Some(c);
                self.create_pieces(&rel, &layout, mode & 0o7777, ctx)?
            }
            Err(e) => {
                if let Some(c) = charge {
                    self.placer.release(c);
                }
                return Err(e);
            }
        };
        for t in layout.tiers() {
            self.tiers[t].counters.files.fetch_add(1, Ordering::Relaxed);
        }
        let node = Arc::new(FileNode::new(layout, 0, self.tiers.len()));
        *node.charge.lock() = charge;
        let ino = tree.insert(parent, name, NodeData::File(node.clone()));
        let pt = {
            let mut st = node.state.write();
            st.pieces = pieces;
            let admit = !self.leave_to_kernel(&st, name, 0, flags);
            self.cache_on_open(ino, parent, name, &node, &mut st, false, admit);
            let pt = self.passthrough_piece(&st, name, 0, flags);
            st.opens = 1;
            st.writers = u32::from(flags & libc::O_ACCMODE != libc::O_RDONLY);
            if pt.is_some() {
                self.note_pt_open(&mut st);
            }
            pt
        };
        self.remember(&mut tree, ino);
        let attr = self.attr_locked(&tree, ino)?;
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let fh = self.new_fh(Handle::File {
            node,
            ino,
            write,
            passthrough: pt.is_some(),
        });
        Ok((
            attr,
            fh,
            OpenInfo {
                direct_io: false,
                passthrough: pt,
            },
        ))
    }

    fn note_pt_open(&self, st: &mut FileState) {
        st.pt_opens += 1;
        if let FileLayout::Whole { tier } = st.layout {
            let c = &self.tiers[tier].counters;
            c.pt_open.fetch_add(1, Ordering::Relaxed);
            c.pt_opens_total.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn open(&self, ino: u64, flags: i32) -> Result<(u64, OpenInfo)> {
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if let Some(v) = Virtual::from_ino(ino) {
            if v == Virtual::Control {
                if !write || flags & libc::O_ACCMODE == libc::O_RDWR {
                    return Err(Error::Access("the control file is write-only"));
                }
                return Ok((
                    self.new_fh(Handle::Control),
                    OpenInfo {
                        direct_io: true,
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
            let content = crate::stats::render(self, v);
            return Ok((
                self.new_fh(Handle::Virtual(Arc::new(content))),
                OpenInfo {
                    direct_io: true,
                    passthrough: None,
                },
            ));
        }
        let tree = self.tree.read();
        let node = tree.get(ino)?;
        let f = match &node.data {
            NodeData::File(f) => f.clone(),
            NodeData::Dir { .. } => return Err(Error::IsDir),
            NodeData::Other(_) => return Err(Error::NotSupported("open of a special file")),
        };
        let (parent, name) = (node.parent, node.name.clone());
        let (pt, relayout) = {
            let mut st = f.state.write();
            if st.opens == 0 && st.cache.is_none() && st.migration.is_none() {
                for t in st.layout.tiers() {
                    if self.tiers[t].missing {
                        // Left out of a degraded mount: requests that need it answer EIO.
                        continue;
                    }
                    // Also an unlinked file the kernel still references: its pieces are
                    // in limbo.
                    let p = self.piece_path(&tree, ino, t)?;
                    let piece = Piece::open_in(&self.tiers[t].root, &p, self.tiers[t].direct_io)
                        .map_err(|e| self.tier_err(t, "open", &p, e))?;
                    st.pieces[t] = Some(Arc::new(piece));
                }
            }
            // A drifted file is re-laid out at its next open for writing, which the daemon
            // must serve: no passthrough for any open of it, readers included (the kernel
            // keeps one mode per inode, and FUSE sends a reader's RELEASE asynchronously,
            // so DeepSpeed's write open of a file it just read can arrive while that
            // read handle is still open; in passthrough it would pin the old layout).
            let relayout = st.pt_opens == 0 && self.layout_drifted(&st.layout);
            let admit = relayout || !self.leave_to_kernel(&st, &name, f.size(), flags);
            self.cache_on_open(ino, parent, &name, &f, &mut st, !write, admit);
            let pt = if relayout {
                None
            } else {
                self.passthrough_piece(&st, &name, f.size(), flags)
            };
            st.opens += 1;
            st.writers += u32::from(write);
            if pt.is_some() {
                self.note_pt_open(&mut st);
            }
            (pt, relayout)
        };
        drop(tree);
        // DeepSpeed rewrites its swap files in place every step (no O_TRUNC), so a file
        // laid out under old shares would keep them forever: when it is opened for writing
        // and its stripes no longer follow the shares, it moves as it is rewritten (a
        // migration: rewritten blocks go to the new layout, the rest is copied when the
        // last writer closes). A failed move leaves the file as it was.
        if write && relayout {
            if let Err(e) = self.start_migration(ino, &f) {
                log::warn!("re-laying out inode {ino} failed (it stays as it is): {e}");
            }
        }
        Ok((
            self.new_fh(Handle::File {
                node: f,
                ino,
                write,
                passthrough: pt.is_some(),
            }),
            OpenInfo {
                direct_io: false,
                passthrough: pt,
            },
        ))
    }

    /// The kernel wrote a passthrough file without us: its backing file's size is the truth.
    fn sync_passthrough_size(&self, node: &FileNode, st: &FileState, tier: usize) {
        if let Some(p) = &st.pieces[tier] {
            if let Ok(m) = p.file().metadata() {
                let old = node.size.swap(m.len(), Ordering::AcqRel);
                if old != m.len() {
                    self.account_resize(&st.layout, old, m.len());
                    node.dirty.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    /// Settles a file's placement charge with its current size, if it was written.
    fn settle_charge(&self, node: &FileNode) {
        if node.dirty.swap(false, Ordering::Relaxed) {
            let mut c = node.charge.lock();
            if let Some(ch) = *c {
                *c = Some(self.placer.settle(ch, node.size()));
            }
        }
    }

    /// `close(2)` of a handle (FLUSH, which the caller waits for, unlike RELEASE): brings a
    /// passthrough file's size and the placement books up to date, so the stats are exact
    /// as soon as `close` returns.
    pub fn flush(&self, fh: u64) -> Result<()> {
        if let Handle::File {
            node,
            passthrough: true,
            ..
        } = self.handle(fh)?
        {
            let st = node.state.read();
            if let FileLayout::Whole { tier } = st.layout {
                self.sync_passthrough_size(&node, &st, tier);
            }
            drop(st);
            self.settle_charge(&node);
        }
        Ok(())
    }

    pub fn release(&self, fh: u64) -> Result<()> {
        let h = self.handles.lock().remove(&fh).ok_or(Error::BadHandle)?;
        if let Handle::File {
            node,
            passthrough,
            ino,
            write,
        } = h
        {
            let last_writer = {
                let st = node.state.read();
                write && st.writers == 1 && st.migration.is_some()
            };
            if last_writer && !node.gone.load(Ordering::Relaxed) {
                // The rewrite is over: copy what it left and switch to the new layout.
                if let Err(e) = self.commit_migration(ino, &node) {
                    log::error!(
                        "re-layout of inode {ino} could not finish (it keeps its old layout and the moved blocks): {e}"
                    );
                }
            }
            let mut st = node.state.write();
            if write {
                st.writers = st.writers.saturating_sub(1);
            }
            if passthrough {
                st.pt_opens = st.pt_opens.saturating_sub(1);
                if let FileLayout::Whole { tier } = st.layout {
                    self.tiers[tier]
                        .counters
                        .pt_open
                        .fetch_sub(1, Ordering::Relaxed);
                    self.sync_passthrough_size(&node, &st, tier);
                }
            }
            st.opens = st.opens.saturating_sub(1);
            if st.opens == 0 && node.gone.load(Ordering::Relaxed) {
                // Unlinked mid-migration: nobody will read it again.
                self.discard_migration(ino, &mut st);
            }
            if st.opens == 0 && st.cache.is_none() && st.migration.is_none() {
                for p in st.pieces.iter_mut() {
                    *p = None;
                }
            }
            let last = st.opens == 0;
            drop(st);
            self.settle_charge(&node);
            if last {
                // An unlinked file the kernel has already forgotten goes now.
                let mut tree = self.tree.write();
                self.drop_if_gone(&mut tree, ino);
            }
        }
        Ok(())
    }

    /// Reads `size` bytes at `off` and hands them to `reply` (from a per-thread aligned
    /// buffer, so the hot path allocates nothing).
    pub fn read_with<R>(
        &self,
        fh: u64,
        off: u64,
        size: u32,
        reply: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        READ_BUF.with(|b| {
            let mut b = b.borrow_mut();
            b.resize((size as usize).div_ceil(crate::tierio::ALIGN) * crate::tierio::ALIGN);
            let n = self.read_into(fh, off, &mut b[..size as usize])?;
            Ok(reply(&b[..n]))
        })
    }

    /// Reads up to `buf.len()` bytes at `off` into `buf`; returns how many (fewer only at
    /// the end of the file). A page-aligned `buf` lets the tier's direct I/O land in it
    /// with no bounce copy: the FUSE transports pass their reply buffers here.
    pub fn read_into(&self, fh: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
        match self.handle(fh)? {
            Handle::Virtual(content) => {
                let start = (off as usize).min(content.len());
                let end = (start + buf.len()).min(content.len());
                buf[..end - start].copy_from_slice(&content[start..end]);
                Ok(end - start)
            }
            Handle::Dir(_) => Err(Error::IsDir),
            Handle::Control => Err(Error::Access("the control file is write-only")),
            Handle::File { node, .. } => {
                let st = node.state.read();
                let fsize = node.size();
                if off >= fsize {
                    return Ok(0);
                }
                let len = (buf.len() as u64).min(fsize - off) as usize;
                match &st.cache {
                    Some(e) => {
                        self.cached_read(&node, &st, e, off, &mut buf[..len], Class::DemandRead)?
                    }
                    None => self.read_file(&st, off, &mut buf[..len], Class::DemandRead)?,
                }
                Ok(len)
            }
        }
    }

    fn read_pieces(&self, st: &FileState, off: u64, buf: &mut [u8], class: Class) -> Result<()> {
        self.read_layout(&st.layout, &st.pieces, off, buf, false, class)
    }

    /// Reads logical bytes through `layout` from `pieces`. A striped piece shorter than the
    /// file is a hole; a whole piece may be short only with `holes` (a move's new pieces).
    fn read_layout(
        &self,
        layout: &FileLayout,
        pieces: &[Option<Arc<Piece>>],
        off: u64,
        buf: &mut [u8],
        holes: bool,
        class: Class,
    ) -> Result<()> {
        match layout {
            FileLayout::Whole { tier } => {
                let piece = self.piece_in(pieces, *tier, "read")?;
                let got = self.piece_read_as(*tier, piece, buf, off, class)?;
                if holes {
                    buf[got..].fill(0);
                } else if got < buf.len() {
                    return Err(Error::ShortRead {
                        tier: self.tiers[*tier].name.clone(),
                        path: PathBuf::from("(open file)"),
                        offset: off,
                        got,
                        want: buf.len(),
                    });
                }
            }
            FileLayout::Stripe(_) => self.read_extents_in(layout, pieces, off, buf, class)?,
        }
        Ok(())
    }

    /// Reads a range of a file from its pieces as one engine batch (every tier at once);
    /// where a piece is shorter than the range, zeros (a hole, or a cached file's tail that
    /// is only in memory yet).
    fn read_extents(&self, st: &FileState, off: u64, buf: &mut [u8], class: Class) -> Result<()> {
        self.read_extents_in(&st.layout, &st.pieces, off, buf, class)
    }

    /// [`TierFs::read_extents`] through `layout` from `pieces` (a move's new ones, say).
    fn read_extents_in(
        &self,
        layout: &FileLayout,
        pieces: &[Option<Arc<Piece>>],
        off: u64,
        buf: &mut [u8],
        class: Class,
    ) -> Result<()> {
        let exts = layout.extents(off, buf.len());
        let mut tiers = Vec::with_capacity(exts.len());
        let mut ops = Vec::with_capacity(exts.len());
        let mut rest: &mut [u8] = buf;
        for ex in &exts {
            let (dst, tail) = std::mem::take(&mut rest).split_at_mut(ex.len);
            rest = tail;
            tiers.push(ex.tier);
            ops.push(Op::Read {
                piece: self.piece_in(pieces, ex.tier, "read")?,
                buf: dst,
                off: ex.local,
            });
        }
        let results = self.run_batch(class, &tiers, &mut ops);
        for ((op, r), t) in ops.iter_mut().zip(results).zip(tiers) {
            // Counted on its tier by `tierio`.
            let got = r.map_err(|e| Error::tier(&self.tiers[t].name, "read", "(open file)", e))?;
            if let Op::Read { buf, .. } = op {
                buf[got..].fill(0);
            }
        }
        Ok(())
    }

    /// The way to the tiers: every backing read and write goes through it with its class.
    fn io(&self) -> crate::tierio::Io<'_> {
        crate::tierio::Io::new(&*self.engine, &self.tiers)
    }

    /// Runs backing requests (`ops[i]` on tier `tiers[i]`) as one batch of `class`
    /// ([`crate::tierio::Io::submit`]: admission, engine, accounting); the caller maps errors.
    fn run_batch(
        &self,
        class: Class,
        tiers: &[usize],
        ops: &mut [Op<'_>],
    ) -> Vec<std::io::Result<usize>> {
        self.io().submit(class, tiers, ops)
    }

    /// Replaces the engine that runs the batches (before the filesystem is shared): tests
    /// install one that records what arrives.
    pub fn set_engine(&mut self, engine: Box<dyn crate::tierio::Engine>) {
        self.engine = engine;
    }

    /// Writes a range of a file to its pieces as one engine batch; the first failure with
    /// its tier (for the rescue that moves the file).
    fn write_extents(
        &self,
        st: &FileState,
        off: u64,
        data: &[u8],
        class: Class,
    ) -> std::result::Result<(), (usize, std::io::Error)> {
        let exts = st.layout.extents(off, data.len());
        let mut tiers = Vec::with_capacity(exts.len());
        let mut ops = Vec::with_capacity(exts.len());
        for ex in &exts {
            let piece = self.open_piece(st, ex.tier, "write").map_err(|_| {
                (
                    ex.tier,
                    std::io::Error::other("the tier is missing (mounted degraded without it)"),
                )
            })?;
            tiers.push(ex.tier);
            ops.push(Op::Write {
                piece,
                buf: &data[ex.buf..ex.buf + ex.len],
                off: ex.local,
            });
        }
        let results = self.run_batch(class, &tiers, &mut ops);
        for (r, t) in results.into_iter().zip(tiers) {
            r.map_err(|e| (t, e))?;
        }
        Ok(())
    }

    fn piece_read_as(
        &self,
        tier: usize,
        piece: &Piece,
        buf: &mut [u8],
        off: u64,
        class: Class,
    ) -> Result<usize> {
        self.io()
            .read(class, tier, piece, buf, off)
            .map_err(|e| Error::tier(&self.tiers[tier].name, "read", "(open file)", e))
    }

    fn piece_write(&self, tier: usize, piece: &Piece, buf: &[u8], off: u64) -> std::io::Result<()> {
        self.io().write(Class::DemandWrite, tier, piece, buf, off)
    }

    /// Writes all of `data` at `off`, or fails with the tier's errno: never a short write.
    pub fn write(&self, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
        let (node, ino) = match self.handle(fh)? {
            Handle::File {
                node, ino, write, ..
            } => {
                if !write {
                    return Err(Error::BadHandle);
                }
                (node, ino)
            }
            Handle::Virtual(_) => return Err(Error::Access("the stats files are read-only")),
            Handle::Control => {
                self.control(data)?;
                return Ok(data.len() as u32);
            }
            Handle::Dir(_) => return Err(Error::IsDir),
        };
        if data.is_empty() {
            // Writing nothing changes nothing, not even the size (POSIX).
            return Ok(0);
        }
        let end = off
            .checked_add(data.len() as u64)
            .ok_or(Error::Invalid("offset overflow"))?;
        let mut moved = false;
        loop {
            let st = node.state.read();
            if let Some(e) = &st.cache {
                if self.cached_write(&node, &st, e, off, data)? {
                    *node.mtime.lock() = Some(SystemTime::now());
                    let old = node.size.fetch_max(end, Ordering::AcqRel);
                    if end > old {
                        self.account_resize(&st.layout, old, end);
                    }
                    node.dirty.store(true, Ordering::Relaxed);
                    return Ok(data.len() as u32);
                }
                // It outgrew the cache: back to the tiers, then write there.
                drop(st);
                let mut st = node.state.write();
                self.uncache_locked(&node, &mut st)?;
                continue;
            }
            // Growth past a tier's capacity, or into space promised to cached data, is
            // refused up front like a full tier's ENOSPC: the file moves.
            let growing = st.migration.as_ref().map_or(&st.layout, |m| &m.layout);
            let r = if let Some(t) = self.refuses_growth(growing, node.size(), end) {
                Err((t, std::io::Error::from_raw_os_error(libc::ENOSPC)))
            } else {
                match (&st.migration, &st.layout) {
                    (Some(m), _) => self.migration_write(&node, &st, m, off, data)?,
                    (None, FileLayout::Whole { tier }) => {
                        let piece = self.open_piece(&st, *tier, "write")?;
                        self.piece_write(*tier, piece, data, off)
                            .map_err(|e| (*tier, e))
                    }
                    (None, FileLayout::Stripe(_)) => {
                        self.write_extents(&st, off, data, Class::DemandWrite)
                    }
                }
            };
            match r {
                Ok(()) => {
                    if st.migration.is_some() || !touches_primary(&st.layout, off, end) {
                        self.touch_primary(&st);
                    }
                    let old = node.size.fetch_max(end, Ordering::AcqRel);
                    if end > old {
                        self.account_resize(&st.layout, old, end);
                    }
                    node.dirty.store(true, Ordering::Relaxed);
                    return Ok(data.len() as u32);
                }
                Err((tier, e)) if is_rescuable(&e) && !moved => {
                    drop(st);
                    log::warn!(
                        "tier '{}' refused a write to inode {ino} ({e}); moving the file to another tier",
                        self.tiers[tier].name
                    );
                    if let Err(re) = self.relocate(ino, &node, Some(tier), end) {
                        // The caller gets the tier's own error; the log has why the move failed.
                        log::error!(
                            "moving inode {ino} off tier '{}' failed: {re}",
                            self.tiers[tier].name
                        );
                        return Err(Error::tier(
                            &self.tiers[tier].name,
                            "write",
                            "(open file)",
                            e,
                        ));
                    }
                    moved = true;
                }
                Err((tier, e)) => {
                    return Err(Error::tier(
                        &self.tiers[tier].name,
                        "write",
                        "(open file)",
                        e,
                    ));
                }
            }
        }
    }

    /// The first tier of `layout` that may not take a file's growth from `old` to `new`
    /// bytes ([`Tier::may_grow`]: its `capacity`, or free space promised to cached data).
    fn refuses_growth(&self, layout: &FileLayout, old: u64, new: u64) -> Option<usize> {
        if new <= old {
            return None;
        }
        layout.tiers().into_iter().find(|t| {
            let n = layout.piece_len(*t, new) - layout.piece_len(*t, old);
            n > 0 && !self.tiers[*t].may_grow(n)
        })
    }

    /// A write that did not reach the primary piece (other stripes only, or a migration's
    /// new pieces) still changes the file: the primary piece, which holds the file's times,
    /// gets the present mtime and ctime, as a write to it would have given it.
    fn touch_primary(&self, st: &FileState) {
        let t = st.layout.primary();
        if let Some(p) = &st.pieces[t] {
            if let Err(e) = sys::futimens(
                std::os::fd::AsFd::as_fd(p.file()),
                SetTime::Omit,
                SetTime::Now,
            ) {
                log::warn!(
                    "tier '{}': cannot update a file's mtime: {e}",
                    self.tiers[t].name
                );
                self.tiers[t].note_error(&e);
            }
        }
    }

    /// Sets a file's size, piece by piece (tree lock held for reading).
    fn truncate(&self, tree: &Tree, ino: u64, f: &Arc<FileNode>, size: u64) -> Result<()> {
        let mut st = f.state.write();
        // The cache holds whole files as they were: write back and drop, then resize.
        self.uncache_locked(f, &mut st)?;
        // A migration tracks blocks of the size it began with: finish it first.
        self.commit_migration_locked(tree, ino, f, &mut st)?;
        let st = st;
        let set = |t: usize, len: u64| -> Result<()> {
            if self.tiers[t].missing {
                return Err(self.missing_err(t, "truncate"));
            }
            if let Some(p) = &st.pieces[t] {
                return p
                    .file()
                    .set_len(len)
                    .map_err(|e| self.tier_err(t, "truncate", Path::new("(open file)"), e));
            }
            let p = self.piece_path(tree, ino, t)?;
            self.tiers[t]
                .fs()
                .open(&p, libc::O_WRONLY, 0)
                .and_then(|file| file.set_len(len))
                .map_err(|e| self.tier_err(t, "truncate", &p, e))
        };
        let old = f.size();
        match &st.layout {
            FileLayout::Whole { tier } => set(*tier, size)?,
            FileLayout::Stripe(m) => {
                for t in &m.tiers {
                    set(*t, m.piece_len(*t, size))?;
                }
            }
        }
        f.size.store(size, Ordering::Release);
        self.account_resize(&st.layout, old, size);
        f.dirty.store(true, Ordering::Relaxed);
        Ok(())
    }

    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<()> {
        let node = match self.handle(fh)? {
            Handle::File { node, ino, .. } => {
                let e = node.state.read().cache.clone();
                if let Some(e) = e {
                    self.write_back(&node, &e, ino)?;
                }
                // A migration's new bytes are in limbo temporaries until it switches over.
                if node.state.read().migration.is_some() && !node.gone.load(Ordering::Relaxed) {
                    self.commit_migration(ino, &node)?;
                }
                node
            }
            _ => return Ok(()),
        };
        let st = node.state.read();
        for (t, p) in st.pieces.iter().enumerate() {
            if let Some(p) = p {
                let r = if datasync {
                    p.file().sync_data()
                } else {
                    p.file().sync_all()
                };
                r.map_err(|e| self.tier_err(t, "fsync", Path::new("(open file)"), e))?;
            }
        }
        Ok(())
    }

    pub fn fallocate(&self, fh: u64, off: u64, len: u64, mode: i32) -> Result<()> {
        let node = match self.handle(fh)? {
            Handle::File {
                node,
                ino,
                write: true,
                ..
            } => {
                if node.state.read().migration.is_some() {
                    self.commit_migration(ino, &node)?;
                }
                node
            }
            Handle::File { .. } => return Err(Error::BadHandle),
            _ => return Err(Error::Access("the stats files are read-only")),
        };
        let allowed = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE;
        if mode & !allowed != 0 {
            return Err(Error::NotSupported("this fallocate mode"));
        }
        if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 && mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
            return Err(Error::Invalid("PUNCH_HOLE needs KEEP_SIZE"));
        }
        let end = off
            .checked_add(len)
            .ok_or(Error::Invalid("range overflow"))?;
        if node.state.read().cache.is_some() {
            let mut st = node.state.write();
            self.uncache_locked(&node, &mut st)?;
        }
        let st = node.state.read();
        // Each tier's stripes of a logical range are contiguous in its piece.
        let ranges: Vec<(usize, u64, u64)> = match &st.layout {
            FileLayout::Whole { tier } => vec![(*tier, off, len)],
            FileLayout::Stripe(m) => m
                .tiers
                .iter()
                .filter_map(|t| {
                    let a = m.piece_len(*t, off);
                    let b = m.piece_len(*t, end);
                    (b > a).then_some((*t, a, b - a))
                })
                .collect(),
        };
        for (t, a, l) in ranges {
            let p = self.open_piece(&st, t, "fallocate")?;
            sys::fallocate(std::os::fd::AsFd::as_fd(p.file()), mode, a, l)
                .map_err(|e| self.tier_err(t, "fallocate", Path::new("(open file)"), e))?;
        }
        if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
            let old = node.size.fetch_max(end, Ordering::AcqRel);
            if end > old {
                if let FileLayout::Stripe(m) = &st.layout {
                    // Pieces past their share of the new size must read as the file's end.
                    let holder = m.locate(end - 1).0;
                    if let Some(p) = &st.pieces[holder] {
                        let want = m.piece_len(holder, end);
                        let cur = p.file().metadata().map(|m| m.len()).unwrap_or(0);
                        if cur < want {
                            p.file().set_len(want).map_err(|e| {
                                self.tier_err(holder, "truncate", Path::new("(open file)"), e)
                            })?;
                        }
                    }
                }
                self.account_resize(&st.layout, old, end);
            }
        }
        Ok(())
    }

    // ----- directories -----------------------------------------------------------------

    pub fn opendir(&self, ino: u64) -> Result<u64> {
        let entries = if ino == Virtual::Dir.ino() {
            let mut v = vec![
                DirEntry {
                    ino,
                    kind: Kind::Dir,
                    name: ".".into(),
                },
                DirEntry {
                    ino: ROOT_INO,
                    kind: Kind::Dir,
                    name: "..".into(),
                },
            ];
            v.extend(Virtual::FILES.iter().map(|f| DirEntry {
                ino: f.ino(),
                kind: Kind::File,
                name: f.name().into(),
            }));
            v
        } else {
            let tree = self.tree.read();
            let node = tree.get(ino)?;
            let children = tree.children(ino)?;
            let mut v = Vec::with_capacity(children.len() + 3);
            v.push(DirEntry {
                ino,
                kind: Kind::Dir,
                name: ".".into(),
            });
            v.push(DirEntry {
                ino: node.parent,
                kind: Kind::Dir,
                name: "..".into(),
            });
            if ino == ROOT_INO {
                v.push(DirEntry {
                    ino: Virtual::Dir.ino(),
                    kind: Kind::Dir,
                    name: self.stats_dir.clone(),
                });
            }
            for (name, c) in children {
                if let Ok(n) = tree.get(*c) {
                    v.push(DirEntry {
                        ino: *c,
                        kind: n.kind(),
                        name: name.clone(),
                    });
                }
            }
            v
        };
        Ok(self.new_fh(Handle::Dir(Arc::new(entries))))
    }

    /// Entries from position `offset` of the snapshot taken at opendir.
    pub fn readdir(&self, fh: u64, offset: u64) -> Result<Arc<Vec<DirEntry>>> {
        match self.handle(fh)? {
            Handle::Dir(e) => {
                let _ = offset;
                Ok(e)
            }
            _ => Err(Error::NotDir),
        }
    }

    pub fn releasedir(&self, fh: u64) {
        self.handles.lock().remove(&fh);
    }

    pub fn fsyncdir(&self, ino: u64) -> Result<()> {
        if Virtual::from_ino(ino).is_some() {
            return Ok(());
        }
        let tree = self.tree.read();
        if tree.get(ino).is_ok_and(|n| !n.linked) {
            // A removed folder that is still open: nothing of it is left to sync.
            return Ok(());
        }
        for (t, p) in self.backing_paths(&tree, ino)? {
            self.tiers[t]
                .fs()
                .open(&p, libc::O_RDONLY, 0)
                .and_then(|d| d.sync_all())
                .map_err(|e| self.tier_err(t, "fsync", &p, e))?;
        }
        Ok(())
    }

    pub fn statfs(&self) -> StatFs {
        let bsize = 4096u64;
        let (mut blocks, mut bfree, mut bavail, mut files, mut ffree) = (0, 0, 0, 0, 0);
        for t in &self.tiers {
            let Some(s) = t.space() else { continue };
            let total = t.capacity.map_or(s.total, |c| c.min(s.total));
            let used = t.counters.used.load(Ordering::Relaxed);
            let cap_left = t.capacity.map_or(u64::MAX, |c| c.saturating_sub(used));
            blocks += total / bsize;
            bfree += s.free.min(cap_left) / bsize;
            bavail += s.avail.min(cap_left) / bsize;
            files += s.files;
            ffree += s.files_free;
        }
        StatFs {
            blocks,
            bfree,
            bavail,
            files,
            ffree,
            bsize: bsize as u32,
            namelen: NAME_MAX as u32,
        }
    }

    // ----- xattrs ----------------------------------------------------------------------

    fn xattr_path(&self, ino: u64) -> Result<(usize, PathBuf)> {
        if Virtual::from_ino(ino).is_some() {
            return Err(Error::NotSupported("xattrs on stats files"));
        }
        let tree = self.tree.read();
        let node = tree.get(ino)?;
        let t = match &node.data {
            NodeData::File(f) => f.state.read().layout.primary(),
            _ => 0,
        };
        let p = if node.limbo {
            self.tiers[t].limbo_path(ino)
        } else {
            self.tiers[t].path(&tree.rel(ino).ok_or(Error::NotFound)?)
        };
        Ok((t, p))
    }

    fn xattr_name_ok(name: &OsStr) -> Result<()> {
        if name.as_bytes().starts_with(b"user.tierfs.") {
            return Err(Error::NotPermitted(
                "user.tierfs.* names are reserved by tierfs",
            ));
        }
        if !name.as_bytes().starts_with(b"user.") {
            return Err(Error::NotSupported("only user.* xattrs are stored"));
        }
        Ok(())
    }

    pub fn setxattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> Result<()> {
        if Virtual::from_ino(ino).is_some() {
            return Err(Error::Access("the stats files are read-only"));
        }
        Self::xattr_name_ok(name)?;
        if self.tree.read().get(ino)?.kind() == Kind::Symlink {
            return Err(Error::NotPermitted("user xattrs on symlinks"));
        }
        let (t, p) = self.xattr_path(ino)?;
        self.tiers[t]
            .fs()
            .setxattr(&p, name, value, flags)
            .map_err(|e| self.tier_err(t, "setxattr", &p, e))
    }

    pub fn getxattr(&self, ino: u64, name: &OsStr) -> Result<Vec<u8>> {
        if Self::xattr_name_ok(name).is_err() {
            return Err(Error::NoAttr);
        }
        let (t, p) = self.xattr_path(ino)?;
        self.tiers[t]
            .fs()
            .getxattr(&p, name)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENODATA) => Error::NoAttr,
                Some(libc::EOPNOTSUPP) => Error::NoAttr,
                _ => self.tier_err(t, "getxattr", &p, e),
            })
    }

    pub fn listxattr(&self, ino: u64) -> Result<Vec<u8>> {
        if Virtual::from_ino(ino).is_some() {
            return Ok(Vec::new());
        }
        let (t, p) = self.xattr_path(ino)?;
        let names = match self.tiers[t].fs().listxattr(&p) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Vec::new(),
            Err(e) => return Err(self.tier_err(t, "listxattr", &p, e)),
        };
        let mut out = Vec::new();
        for n in names {
            if n.starts_with(b"user.") && !n.starts_with(b"user.tierfs.") {
                out.extend_from_slice(&n);
                out.push(0);
            }
        }
        Ok(out)
    }

    pub fn removexattr(&self, ino: u64, name: &OsStr) -> Result<()> {
        if Virtual::from_ino(ino).is_some() {
            return Err(Error::Access("the stats files are read-only"));
        }
        Self::xattr_name_ok(name).map_err(|_| Error::NoAttr)?;
        let (t, p) = self.xattr_path(ino)?;
        self.tiers[t]
            .fs()
            .removexattr(&p, name)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENODATA) => Error::NoAttr,
                _ => self.tier_err(t, "removexattr", &p, e),
            })
    }

    // ----- introspection (for the stats files) -----------------------------------------

    /// Every file: (path, size, layout), in path order.
    pub fn file_list(&self) -> Vec<(PathBuf, u64, FileLayout)> {
        let tree = self.tree.read();
        let mut out = Vec::new();
        let mut stack = vec![ROOT_INO];
        while let Some(ino) = stack.pop() {
            if let Ok(children) = tree.children(ino) {
                for c in children.values() {
                    match tree.nodes.get(c).map(|n| &n.data) {
                        Some(NodeData::Dir { .. }) => stack.push(*c),
                        Some(NodeData::File(f)) => {
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

    /// At unmount: writes the cache back, stops its threads, finishes re-layouts and syncs
    /// every open piece. Returns what did not reach a tier, one line per file (its path and
    /// why): those bytes are lost when the daemon exits, and the caller must say so.
    /// Runs once (FUSE's DESTROY and the daemon's exit both call it); later calls return the
    /// first one's answer. In scratch mode it only stops the cache threads: the data is
    /// being thrown away, so nothing counts as lost.
    pub fn shutdown(&self) -> Vec<String> {
        let mut shut = self.shut.lock();
        if let Some(lost) = &*shut {
            return lost.clone();
        }
        if self.scratch {
            // The daemon removes the tier folders next: writing dirty blocks back, finishing
            // re-layouts or syncing pieces would only delay that.
            self.stop_cache();
            *shut = Some(Vec::new());
            return Vec::new();
        }
        let mut lost = Vec::new();
        for (ino, dirty, e) in self.write_back_all() {
            lost.push(format!(
                "{}: {dirty} bytes written to it were only in memory and could not be \
                 written back: {e}",
                self.describe(ino)
            ));
        }
        self.stop_cache();
        let tree = self.tree.read();
        for (ino, n) in &tree.nodes {
            if self.is_failed(*ino) {
                // Its state is not trusted: the next mount rebuilds it from the tiers.
                continue;
            }
            if let NodeData::File(f) = &n.data {
                let mut st = f.state.write();
                if st.migration.is_some() && !f.gone.load(Ordering::Relaxed) {
                    if let Err(e) = self.commit_migration_locked(&tree, *ino, f, &mut st) {
                        lost.push(format!(
                            "{}: the writes since it was opened were being moved to a new \
                             layout, which could not finish: {e}",
                            Self::describe_in(&tree, *ino)
                        ));
                    }
                }
                for p in st.pieces.iter().flatten() {
                    let _ = p.file().sync_data();
                }
            }
        }
        drop(tree);
        for l in &lost {
            log::error!("unmount: LOST: {l}");
        }
        *shut = Some(lost.clone());
        lost
    }

    /// A file's path for messages, or its inode once it has none.
    fn describe(&self, ino: u64) -> String {
        Self::describe_in(&self.tree.read(), ino)
    }

    fn describe_in(tree: &Tree, ino: u64) -> String {
        match tree.rel(ino) {
            Some(rel) => format!("/{}", crate::stats::escape_path(&rel)),
            None => format!("(inode {ino}, deleted)"),
        }
    }
}

/// Whether writing `[off, end)` of a file reaches its primary piece.
fn touches_primary(layout: &FileLayout, off: u64, end: u64) -> bool {
    let FileLayout::Stripe(m) = layout else {
        return true;
    };
    let (first, last) = (off / m.unit, (end.max(off + 1) - 1) / m.unit);
    let period = m.pattern.len() as u64;
    last - first + 1 >= period
        || (first..=last).any(|k| m.pattern[(k % period) as usize] == m.pattern[0])
}

fn sys_egid() -> u32 {
    // SAFETY: getegid cannot fail.
    unsafe { libc::getegid() }
}
/// Whether `name` is one of DeepSpeed's swap files (`*.tensor.swp`: optimizer state,
/// gradients and parameters). DeepSpeed opens them `O_DIRECT` and never clears the flag on
/// an open file, so kernel passthrough of such an open is safe, which it is not for every
/// program (see [`crate::config::Passthrough::Auto`]).
pub fn is_deepspeed_swap(name: &OsStr) -> bool {
    name.as_bytes().ends_with(b".tensor.swp")
}
