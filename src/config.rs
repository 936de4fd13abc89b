//! The mount configuration: a TOML file parsed into raw serde structs, then validated into
//! [`MountConfig`], the only form the rest of tierfs sees.
//!
//! Two stages, as in ripgrep's low-level/high-level arguments: the `Raw*` structs mirror the
//! file exactly (`deny_unknown_fields`, so a misspelt key is an error rather than a silently
//! ignored default) and keep sizes and bandwidths as the strings the user wrote; validation
//! then turns them into numbers, expands `${NAME}` in paths, fills in the
//! defaults and checks everything it can without touching the disk. Every problem found is
//! reported at once, one line each, naming the file, the key (`tier[1].write_bandwidth`) and
//! the fix. [`MountConfig::prepare_tier_dirs`] is the separate, disk-touching step run just
//! before mounting.
//!
//! The file format:
//!
//! ```toml
//! [[tier]]                            # one or more, fastest first is customary
//! name = "nvme"                       # [A-Za-z0-9_.-]{1,32}, unique
//! path = "/local/scratch/tierfs"      # absolute; ${NAME} expands (any environment variable)
//! create = true                       # default false: create the last path component
//! write_bandwidth = "2GB/s"           # default: probed at mount
//! read_bandwidth = "3GB/s"            # default: probed at mount
//! capacity = "800GiB"                 # default: the device's free space
//! shared_ledger = "/lus/proj/ledger"  # a tier the job's nodes share: where they meet
//! shared_job = "${SLURM_JOB_ID}"      # with shared_ledger: the job, same on every node
//! shared_node = "${HOSTNAME}"         # this node's name in the ledger (the default)
//!
//! [placement]
//! layout = "whole-file"               # or "stripe"
//! stripe_unit = "1MiB"                # multiple of 4096, 64KiB..=1GiB
//! adapt = true                        # follow online estimates (default: only if all probed)
//! min_share = 0.10                    # with adapt: pause a tier worth less than this (0..=0.5)
//!
//! [mount]
//! stats_dir = ".tierfs"               # virtual folder at the mount root
//! allow_other = false
//! log_file = "/tmp/tierfs-${USER}.log"
//! threads = 64                        # 1..=256
//! passthrough = "auto"                # "auto" | "direct" | "off": kernel passthrough for whole files
//! degraded = false                    # mount without a tier whose folder is missing or unusable
//! transport = "auto"                  # "auto" | "uring" | "dev": FUSE over io_uring or /dev/fuse
//! scratch = false                     # unmount discards the data and removes the tier folders
//! ```

use std::ffi::{CStr, CString};
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::units;

/// Errors a user can cause with a config file. Each names the file, the key and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
}

/// How a file's bytes are laid out over the tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Each file lives whole on one tier.
    WholeFile,
    /// Each file is cut into `stripe_unit` pieces spread by weighted round-robin.
    Stripe,
}

impl Layout {
    /// The spelling used in the config file: `"whole-file"` or `"stripe"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::WholeFile => "whole-file",
            Layout::Stripe => "stripe",
        }
    }
}

/// One validated `[[tier]]`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TierConfig {
    pub name: String,
    /// Absolute, with `${HOSTNAME}` and `${USER}` expanded.
    pub path: PathBuf,
    pub create: bool,
    /// Bytes per second; `None` means "probe it".
    pub read_bandwidth: Option<f64>,
    pub write_bandwidth: Option<f64>,
    /// Bytes; `None` means "the device's free space".
    pub capacity: Option<u64>,
    /// Requests in flight on this tier at most, across all ranks; `None`: the FUSE threads
    /// divided evenly among the tiers, so a slow tier can never hold every thread.
    pub max_in_flight: Option<usize>,
    /// The tier is shared by the nodes of a job, which coordinate their shares of it
    /// through a ledger ([`crate::coord`]); `None`: node-local estimates only.
    pub shared: Option<SharedConfig>,
}

/// A tier's `shared_ledger`, `shared_job` and `shared_node`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SharedConfig {
    /// The ledger folder on the shared file system (absolute, `${NAME}` expanded); the
    /// job's entries go in `<ledger>/<job>/<tier name>/`.
    pub ledger: PathBuf,
    pub job: String,
    /// This node's name in the ledger: unique within the job. Default `${HOSTNAME}`.
    pub node: String,
}

/// The validated `[placement]` section.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlacementConfig {
    pub layout: Layout,
    pub stripe_unit: u64,
    /// Move the Eq. 1 shares with the online bandwidth estimates; false keeps the
    /// configured or probed figures. Default: true when every tier is probed, false when the
    /// config states any tier's bandwidth (stated figures are the user's decision).
    pub adapt: bool,
    /// With `adapt`: a tier that would get less than this share of the work next to the
    /// fastest tier alone gets none until it measures 1.5 times that
    /// ([`crate::placement::shares_with_pause`]). 0 never pauses. Default 0.10.
    pub min_share: f64,
}

/// The validated `[mount]` section (all optional in the file).
#[derive(Debug, Clone, serde::Serialize)]
pub struct MountSection {
    /// Name of the virtual stats folder at the mount root. Default `.tierfs`.
    pub stats_dir: String,
    /// Let other users see the mount (needs `user_allow_other` in /etc/fuse.conf for non-root).
    pub allow_other: bool,
    /// Daemon log file; `None` means stderr (or `<first tier>/.tierfs-meta/daemon.log` when
    /// the daemon runs in the background).
    pub log_file: Option<PathBuf>,
    /// FUSE worker threads. Default: 64 (each blocks on one backing request; fewer than the
    /// requests in flight lets a slow tier hold up a fast one).
    pub threads: usize,
    /// Kernel FUSE passthrough for whole files. Default `auto`.
    pub passthrough: Passthrough,
    /// Each tier serves one file at a time (the MLP-Offload paper's node-local lock around
    /// swap-in and swap-out). Default `false`.
    pub exclusive_tiers: bool,
    /// Mount even when a tier's folder is missing or unusable (not the first tier): that
    /// tier is left out, files with pieces on it answer EIO. Default `false` (an error).
    pub degraded: bool,
    /// How batches of backing requests are issued. Default `io_uring`.
    pub engine: EngineKind,
    /// The data is scratch (swap files): unmount discards it, dirty cache and unfinished
    /// moves included, and removes the tier folders. Default `false`.
    pub scratch: bool,
    /// How requests travel between the kernel and the daemon. Default `auto`.
    pub transport: Transport,
}

/// `mount.transport`: how FUSE requests reach the daemon (`crate::fuse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// FUSE over io_uring where the kernel offers it (Linux >= 6.14 with the fuse module's
    /// `enable_uring` on), else /dev/fuse, saying why in the log.
    Auto,
    /// FUSE over io_uring or no mount at all.
    Uring,
    /// `read`/`write` on /dev/fuse, whatever the kernel offers.
    Dev,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Uring => "uring",
            Transport::Dev => "dev",
        }
    }
}

/// `mount.engine`: how batches of backing requests are issued (`crate::tierio::engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum EngineKind {
    /// All requests of a batch at once on a per-thread io_uring (psync where not allowed).
    #[serde(rename = "io_uring")]
    IoUring,
    /// One `pread`/`pwrite` after another.
    #[serde(rename = "psync")]
    Psync,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::IoUring => "io_uring",
            EngineKind::Psync => "psync",
        }
    }
}

/// `mount.passthrough`: let the kernel do a whole file's I/O on its backing file itself
/// (Linux >= 6.9, daemon with CAP_SYS_ADMIN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Passthrough {
    /// For whole files opened without O_DIRECT, where the kernel and privileges allow, and
    /// for DeepSpeed's swap files (`*.tensor.swp`) opened with it. Other O_DIRECT opens stay
    /// with the daemon: the kernel gives a passthrough open its own backing file with the
    /// open's flags, so a later `fcntl(F_SETFL)` that clears O_DIRECT (GNU dd's last partial
    /// block with `oflag=direct`) would not take effect and the unaligned write would fail
    /// with EINVAL. DeepSpeed opens its swap files O_DIRECT for every read and write and
    /// never clears the flag, so they take the kernel's path.
    Auto,
    /// Also O_DIRECT opens (on tiers that take 1 KiB-aligned direct I/O): the fast path for
    /// DeepSpeed, which never changes O_DIRECT on an open file.
    Direct,
    /// Never: every byte goes through the daemon.
    Off,
}

impl Passthrough {
    pub fn as_str(self) -> &'static str {
        match self {
            Passthrough::Auto => "auto",
            Passthrough::Direct => "direct",
            Passthrough::Off => "off",
        }
    }
}

/// A whole validated configuration.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MountConfig {
    /// The file it came from (for messages).
    pub source: PathBuf,
    pub tiers: Vec<TierConfig>,
    pub placement: PlacementConfig,
    pub mount: MountSection,
    /// `[cache]`: the host-memory tier (staging). No section is `size = "auto"`.
    pub cache: CacheSection,
}

/// How the cache chooses what to keep when it is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CachePolicy {
    /// Keep the files whose next read is predicted soonest (the learned order): on a cyclic
    /// scan larger than the cache that is the head of the next pass, not the most recent.
    Learned,
    /// Least recently used, for comparison (it keeps nothing useful on a cyclic scan).
    Lru,
}

impl CachePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            CachePolicy::Learned => "learned",
            CachePolicy::Lru => "lru",
        }
    }
}

/// `cache.size`: how much host memory staging may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheSize {
    /// Sized at mount from the memory the job may use ([`crate::cache::memory`]): 1/8 of the
    /// memory cgroup's limit (else of the host's available memory), at most 8 GiB, none when
    /// that is under 16 MiB. The default, also with no `[cache]` section.
    Auto,
    /// No host-memory cache (`"off"` or `0`).
    Off,
    /// Exactly this many bytes, at least [`MIN_CACHE`].
    Bytes(u64),
}

impl CacheSize {
    /// As the config file writes it.
    pub fn to_toml_value(self) -> String {
        match self {
            CacheSize::Auto => "\"auto\"".into(),
            CacheSize::Off => "\"off\"".into(),
            CacheSize::Bytes(n) => toml_str(&units::fmt_size_exact(n)),
        }
    }
}

/// The validated `[cache]` section, every key optional: what the file says, before an
/// automatic size is known ([`CacheSection::with_size`] makes the cache's settings).
#[derive(Debug, Clone, serde::Serialize)]
pub struct CacheSection {
    pub size: CacheSize,
    pub policy: CachePolicy,
    pub prefetch: usize,
    pub writeback_delay: f64,
    /// `None`: a quarter of the size.
    pub max_file: Option<u64>,
}

impl Default for CacheSection {
    fn default() -> Self {
        CacheSection {
            size: CacheSize::Auto,
            policy: CachePolicy::Learned,
            prefetch: DEFAULT_PREFETCH,
            writeback_delay: DEFAULT_WRITEBACK_DELAY,
            max_file: None,
        }
    }
}

impl CacheSection {
    /// The cache's settings for `size` bytes of memory; a stated `max_file` above an
    /// automatic size is held to the size (a stated size was checked against it already).
    pub fn with_size(&self, size: u64) -> CacheConfig {
        CacheConfig {
            size,
            policy: self.policy,
            prefetch: self.prefetch,
            writeback_delay: self.writeback_delay,
            max_file: self.max_file.unwrap_or(size / 4).min(size),
        }
    }

    /// The cache's settings when the file states the size; `None` for `auto` (the daemon
    /// sizes it at mount) and `off`.
    pub fn fixed(&self) -> Option<CacheConfig> {
        match self.size {
            CacheSize::Bytes(n) => Some(self.with_size(n)),
            CacheSize::Auto | CacheSize::Off => None,
        }
    }
}

/// The host-memory cache's settings, its size known.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CacheConfig {
    /// Bytes of host memory the cache may hold, at most.
    pub size: u64,
    pub policy: CachePolicy,
    /// Predicted files loaded ahead of the reader, per directory, at most.
    pub prefetch: usize,
    /// Seconds dirty data may stay in memory before it is written back (gradient files,
    /// which are rewritten or deleted before their next read, stay until memory is needed).
    pub writeback_delay: f64,
    /// Largest file the cache takes; larger files always go to their tiers.
    pub max_file: u64,
}

/// `cache.prefetch` when the file does not say.
pub const DEFAULT_PREFETCH: usize = 2;
/// `cache.writeback_delay` when the file does not say, in seconds.
pub const DEFAULT_WRITEBACK_DELAY: f64 = 5.0;
/// Smallest accepted `cache.size`.
pub const MIN_CACHE: u64 = 16 << 20;

/// `placement.layout` when the file does not say and the daemon cannot use kernel
/// passthrough (not root, or `passthrough = "off"`): stripes, because DeepSpeed's swapper
/// moves one file at a time per handle, and only stripes put every tier to work on it
/// (docs/PERFORMANCE.md: the replay's optimizer step at the pooled floor with stripes).
pub const DEFAULT_LAYOUT: Layout = Layout::Stripe;

/// `placement.layout` when the file does not say: whole files where the daemon can hand
/// them to the kernel (root, passthrough not off), else [`DEFAULT_LAYOUT`]. Real DeepSpeed
/// is CPU-bound beside its swap I/O, and a whole file in passthrough costs the daemon no
/// CPU while a stripe's every byte crosses it: as root, whole files ran 0.85-0.89x the nvme
/// tier's step time against 0.93-1.00x for stripes (docs/PERFORMANCE.md, issue #14).
pub fn default_layout(passthrough: Passthrough) -> Layout {
    default_layout_for(passthrough, crate::sys::euid() == 0)
}

/// [`default_layout`] for a daemon that is root or not.
pub fn default_layout_for(passthrough: Passthrough, root: bool) -> Layout {
    if passthrough != Passthrough::Off && root {
        Layout::WholeFile
    } else {
        DEFAULT_LAYOUT
    }
}
/// `placement.stripe_unit` when the file does not say: 1 MiB.
pub const DEFAULT_STRIPE_UNIT: u64 = 1 << 20;
/// Smallest accepted `placement.stripe_unit`: 64 KiB.
pub const MIN_STRIPE_UNIT: u64 = 64 << 10;
/// Largest accepted `placement.stripe_unit`: 1 GiB.
pub const MAX_STRIPE_UNIT: u64 = 1 << 30;
/// `placement.stripe_unit` must be a multiple of this (the page size O_DIRECT needs).
pub const STRIPE_ALIGN: u64 = 4096;
/// `mount.stats_dir` when the file does not say.
pub const DEFAULT_STATS_DIR: &str = ".tierfs";
/// `mount.threads` when the file does not say.
pub const DEFAULT_THREADS: usize = 64;
/// Largest accepted `mount.threads`.
pub const MAX_THREADS: usize = 256;
/// Longest accepted tier name.
pub const MAX_TIER_NAME: usize = 32;

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            layout: DEFAULT_LAYOUT,
            stripe_unit: DEFAULT_STRIPE_UNIT,
            adapt: true,
            min_share: crate::placement::DEFAULT_MIN_SHARE,
        }
    }
}

impl Default for MountSection {
    fn default() -> Self {
        MountSection {
            stats_dir: DEFAULT_STATS_DIR.to_string(),
            allow_other: false,
            log_file: None,
            threads: DEFAULT_THREADS,
            passthrough: Passthrough::Auto,
            exclusive_tiers: false,
            engine: EngineKind::IoUring,
            transport: Transport::Auto,
            degraded: false,
            scratch: false,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The raw file.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    tier: Vec<RawTier>,
    #[serde(default)]
    placement: RawPlacement,
    #[serde(default)]
    mount: RawMount,
    cache: Option<RawCache>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    size: Option<Human>,
    policy: Option<String>,
    prefetch: Option<i64>,
    writeback_delay: Option<f64>,
    max_file: Option<Human>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTier {
    name: String,
    path: String,
    #[serde(default)]
    create: bool,
    write_bandwidth: Option<Human>,
    read_bandwidth: Option<Human>,
    capacity: Option<Human>,
    max_in_flight: Option<i64>,
    shared_ledger: Option<String>,
    shared_job: Option<String>,
    shared_node: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlacement {
    layout: Option<String>,
    stripe_unit: Option<Human>,
    adapt: Option<bool>,
    min_share: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMount {
    stats_dir: Option<String>,
    #[serde(default)]
    allow_other: bool,
    log_file: Option<String>,
    /// Signed so that `threads = -1` gets our range message rather than serde's.
    threads: Option<i64>,
    passthrough: Option<String>,
    #[serde(default)]
    exclusive_tiers: bool,
    #[serde(default)]
    degraded: bool,
    engine: Option<String>,
    transport: Option<String>,
    #[serde(default)]
    scratch: bool,
}

/// A size or bandwidth as written: a string (`"1MiB"`), or a bare number (`capacity = 4096`),
/// kept as text so the unit parser gives one kind of message for both.
#[derive(Debug)]
struct Human(String);

impl<'de> Deserialize<'de> for Human {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Human;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string with a unit, such as \"1MiB\" or \"2GB/s\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Human, E> {
                Ok(Human(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Human, E> {
                Ok(Human(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Human, E> {
                Ok(Human(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Human, E> {
                Ok(Human(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------------------
// Validation.

/// Every problem found in one file, reported together.
struct Problems {
    file: String,
    list: Vec<String>,
}

impl Problems {
    fn add(&mut self, key: &str, msg: impl fmt::Display) {
        self.list.push(format!("{}: {key}: {msg}", self.file));
    }

    fn into_result<T>(self, ok: T) -> Result<T, ConfigError> {
        if self.list.is_empty() {
            Ok(ok)
        } else {
            Err(ConfigError::Invalid(self.list.join("\n")))
        }
    }
}

/// Where `offset` falls in `text`, 1-based, counting columns in characters.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
}

/// A TOML syntax or shape error as `file:line:col: message`, with the offending line.
fn toml_error(text: &str, file: &str, e: &toml::de::Error) -> ConfigError {
    // toml puts "expected ..." on a line of its own; keep the message on one line.
    let mut msg = e.message().trim().replace('\n', "; ");
    if msg.contains("expected a sequence") {
        msg.push_str(" (write each tier as a `[[tier]]` section, with double brackets)");
    }
    let Some(span) = e.span() else {
        return ConfigError::Invalid(format!("{file}: {msg}"));
    };
    let (line, col) = line_col(text, span.start);
    let src = text.lines().nth(line - 1).unwrap_or("");
    ConfigError::Invalid(format!("{file}:{line}:{col}: {msg}\n    {line} | {src}"))
}

/// Quotes `s` as a TOML string.
fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn is_valid_tier_name(name: &str) -> bool {
    (1..=MAX_TIER_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        && name != "."
        && name != ".."
}

/// Why tier `name` at `path` cannot sit beside tier[`j`] `other`: the same folder, or one
/// inside the other (compared by whole components, so /xy is not inside /x).
fn overlap(path: &Path, name: &str, j: usize, other: &TierConfig) -> Option<String> {
    if other.path == path {
        return Some(format!(
            "{} is also the path of tier[{j}] ('{}'); give each tier its own folder",
            path.display(),
            other.name
        ));
    }
    let (relation, outer) = if path.starts_with(&other.path) {
        ("is inside", &other.path)
    } else if other.path.starts_with(path) {
        ("contains", &path.to_path_buf())
    } else {
        return None;
    };
    Some(format!(
        "{} {relation} tier[{j}]'s folder {} ('{}'); tier folders must not contain each \
         other: use sibling folders such as {} and {}",
        path.display(),
        other.path.display(),
        other.name,
        outer.join(&other.name).display(),
        outer.join(name).display(),
    ))
}

/// Expands `${...}` in a path as written and checks the result with [`normalize_absolute`];
/// errors quote what was written (and what it expanded to, where that differs).
fn expand_path(written: &str, vars: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, String> {
    let expanded = expand_with(written, vars)?;
    normalize_absolute(&expanded).map_err(|why| {
        if expanded == written {
            format!("{written:?} {why}")
        } else {
            format!("{written:?} (expanded: {expanded:?}) {why}")
        }
    })
}

/// Checks an expanded path is absolute and returns it without `.` components or repeated
/// and trailing slashes, so that the nesting check compares like with like.
fn normalize_absolute(p: &str) -> Result<PathBuf, String> {
    if p.contains('\0') {
        return Err("contains a NUL character".into());
    }
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err("is not absolute; write the full path, starting with \"/\"".into());
    }
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::Normal(x) => out.push(x),
            Component::ParentDir | Component::Prefix(_) => {
                return Err("contains \"..\"; write the folder without \"..\"".into());
            }
        }
    }
    Ok(out)
}

/// Validates `[cache]`; `None` after reporting a problem.
fn parse_cache(c: &RawCache, p: &mut Problems) -> Option<CacheSection> {
    let before = p.list.len();
    let size = match c.size.as_ref().map(|v| v.0.trim()) {
        None | Some("auto") => CacheSize::Auto,
        Some("off") => CacheSize::Off,
        Some(text) => match units::parse_size(text) {
            Ok(0) => CacheSize::Off,
            Ok(n) if n < MIN_CACHE => {
                p.add(
                    "cache.size",
                    format_args!("{n} bytes is too small; use at least 16MiB"),
                );
                CacheSize::Off
            }
            Ok(n) => CacheSize::Bytes(n),
            Err(e) => {
                p.add(
                    "cache.size",
                    format_args!(
                        "{e}; or \"auto\" (the default: sized from the job's memory limit) or \
                         \"off\" (no cache)"
                    ),
                );
                CacheSize::Off
            }
        },
    };
    let policy = match c.policy.as_deref() {
        None | Some("learned") => CachePolicy::Learned,
        Some("lru") => CachePolicy::Lru,
        Some(other) => {
            p.add(
                "cache.policy",
                format_args!("{other:?} is not one of \"learned\", \"lru\""),
            );
            CachePolicy::Learned
        }
    };
    let prefetch = match c.prefetch {
        None => DEFAULT_PREFETCH,
        Some(n) if (0..=64).contains(&n) => n as usize,
        Some(n) => {
            p.add(
                "cache.prefetch",
                format_args!("{n} is out of range; use 0 (off) to 64 files"),
            );
            DEFAULT_PREFETCH
        }
    };
    let writeback_delay = match c.writeback_delay {
        None => DEFAULT_WRITEBACK_DELAY,
        Some(d) if d.is_finite() && (0.0..=3600.0).contains(&d) => d,
        Some(d) => {
            p.add(
                "cache.writeback_delay",
                format_args!("{d} is out of range; use 0 to 3600 seconds"),
            );
            DEFAULT_WRITEBACK_DELAY
        }
    };
    // Against a stated size only: an automatic one is known at mount, and a larger
    // max_file is held to it there.
    let upto = match size {
        CacheSize::Bytes(n) => n,
        CacheSize::Auto | CacheSize::Off => u64::MAX,
    };
    let max_file = match c.max_file.as_ref().map(|v| units::parse_size(&v.0)) {
        None => None,
        Some(Ok(n)) if n > 0 && n <= upto => Some(n),
        Some(Ok(n)) => {
            p.add(
                "cache.max_file",
                format_args!("{n} bytes must be above zero and at most cache.size"),
            );
            None
        }
        Some(Err(e)) => {
            p.add("cache.max_file", e);
            None
        }
    };
    (p.list.len() == before).then_some(CacheSection {
        size,
        policy,
        prefetch,
        writeback_delay,
        max_file,
    })
}

impl MountConfig {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<MountConfig, ConfigError> {
        let bytes = std::fs::read(path)
            .map_err(|e| ConfigError::Invalid(format!("{}: {e}", path.display())))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let ok = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = ok.iter().filter(|b| **b == b'\n').count() + 1;
            ConfigError::Invalid(format!(
                "{}:{line}: not UTF-8 text (byte {} of the file); TOML config files must be \
                 UTF-8",
                path.display(),
                ok.len() + 1
            ))
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates config text; `source` is only used in messages. `${NAME}` in
    /// paths takes its value from this process ([`process_var`]).
    pub fn parse(text: &str, source: &Path) -> Result<MountConfig, ConfigError> {
        Self::parse_with_vars(text, source, &process_var)
    }

    /// [`MountConfig::parse`] with `${NAME}` looked up in `vars` instead of the process
    /// environment (`None`: not set), so that what a text means can be fixed (the fuzz
    /// target, tests).
    pub fn parse_with_vars(
        text: &str,
        source: &Path,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<MountConfig, ConfigError> {
        let file = source.display().to_string();
        let raw: RawConfig = toml::from_str(text).map_err(|e| toml_error(text, &file, &e))?;
        let mut p = Problems {
            file,
            list: Vec::new(),
        };

        if raw.tier.is_empty() {
            p.add(
                "tier",
                "no [[tier]] sections; add at least one, e.g.\n    \
                 [[tier]]\n    name = \"nvme\"\n    path = \"/local/scratch/tierfs\"",
            );
        }

        // Tiers whose path is valid, with their index in the file for messages.
        let mut tiers: Vec<(usize, TierConfig)> = Vec::with_capacity(raw.tier.len());
        for (i, t) in raw.tier.iter().enumerate() {
            let key = |field: &str| format!("tier[{i}].{field}");

            if !is_valid_tier_name(&t.name) {
                p.add(
                    &key("name"),
                    format_args!(
                        "{:?} is not a valid tier name; use 1 to {MAX_TIER_NAME} letters, \
                         digits, '_', '.' or '-' (not \".\" or \"..\")",
                        t.name
                    ),
                );
            } else if let Some(j) = raw.tier[..i].iter().position(|o| o.name == t.name) {
                p.add(
                    &key("name"),
                    format_args!(
                        "{:?} is already the name of tier[{j}]; give each tier its own name",
                        t.name
                    ),
                );
            }

            let path = match expand_path(&t.path, vars) {
                Ok(path) if path == Path::new("/") => {
                    p.add(
                        &key("path"),
                        "the root folder cannot be a tier; use a folder in it",
                    );
                    None
                }
                Ok(path) => Some(path),
                Err(e) => {
                    p.add(&key("path"), e);
                    None
                }
            };

            let mut bandwidth = |field: &str, v: &Option<Human>| -> Option<f64> {
                let v = v.as_ref()?;
                units::parse_bandwidth(&v.0)
                    .map_err(|e| {
                        p.add(
                            &key(field),
                            format_args!("{e}; or remove the key to probe it"),
                        )
                    })
                    .ok()
            };
            let write_bandwidth = bandwidth("write_bandwidth", &t.write_bandwidth);
            let read_bandwidth = bandwidth("read_bandwidth", &t.read_bandwidth);

            let capacity = match t.capacity.as_ref().map(|v| units::parse_size(&v.0)) {
                None => None,
                Some(Ok(0)) => {
                    p.add(
                        &key("capacity"),
                        "must be greater than zero; \
                         remove the key to use the device's free space",
                    );
                    None
                }
                Some(Ok(n)) => Some(n),
                Some(Err(e)) => {
                    p.add(&key("capacity"), e);
                    None
                }
            };

            let max_in_flight = match t.max_in_flight {
                None => None,
                Some(n) if (1..=1024).contains(&n) => Some(n as usize),
                Some(n) => {
                    p.add(
                        &key("max_in_flight"),
                        format_args!("{n} is out of range; use 1 to 1024 or leave it out"),
                    );
                    None
                }
            };

            let shared = shared_config(t, &key, vars, &mut p);

            let Some(path) = path else { continue };
            for (j, o) in &tiers {
                if let Some(why) = overlap(&path, &t.name, *j, o) {
                    p.add(&key("path"), why);
                }
            }
            let tier = TierConfig {
                name: t.name.clone(),
                path,
                create: t.create,
                read_bandwidth,
                write_bandwidth,
                capacity,
                max_in_flight,
                shared,
            };
            tiers.push((i, tier));
        }
        // A ledger inside a tier folder would be that node's own data (or, in data/,
        // visible in the mount): it must be a folder of its own.
        for (i, t) in &tiers {
            let Some(sh) = &t.shared else { continue };
            for (j, o) in &tiers {
                if sh.ledger.starts_with(&o.path) {
                    p.add(
                        &format!("tier[{i}].shared_ledger"),
                        format_args!(
                            "{} is inside tier[{j}]'s folder {} ('{}'); put the ledger in a \
                             folder of its own on the shared file system",
                            sh.ledger.display(),
                            o.path.display(),
                            o.name
                        ),
                    );
                }
            }
        }
        let tiers: Vec<TierConfig> = tiers.into_iter().map(|(_, t)| t).collect();

        // None: the default, which depends on passthrough (below).
        let layout_given = match raw.placement.layout.as_deref() {
            None => None,
            Some("whole-file") => Some(Layout::WholeFile),
            Some("stripe") => Some(Layout::Stripe),
            Some(other) => {
                p.add(
                    "placement.layout",
                    format_args!("{other:?} is not a layout; use \"whole-file\" or \"stripe\""),
                );
                Some(DEFAULT_LAYOUT)
            }
        };
        let stripe_unit = match raw.placement.stripe_unit.as_ref() {
            None => DEFAULT_STRIPE_UNIT,
            Some(v) => match units::parse_size(&v.0) {
                Ok(n)
                    if n % STRIPE_ALIGN == 0
                        && (MIN_STRIPE_UNIT..=MAX_STRIPE_UNIT).contains(&n) =>
                {
                    n
                }
                Ok(n) => {
                    p.add(
                        "placement.stripe_unit",
                        format_args!(
                            "{:?} ({n} bytes) must be a multiple of 4096 between 64KiB and 1GiB; \
                             e.g. \"1MiB\" (the default)",
                            v.0
                        ),
                    );
                    DEFAULT_STRIPE_UNIT
                }
                Err(e) => {
                    p.add("placement.stripe_unit", e);
                    DEFAULT_STRIPE_UNIT
                }
            },
        };

        let stats_dir = raw
            .mount
            .stats_dir
            .unwrap_or_else(|| DEFAULT_STATS_DIR.to_string());
        if stats_dir.is_empty()
            || stats_dir == "."
            || stats_dir == ".."
            || stats_dir.contains(['/', '\0'])
        {
            p.add(
                "mount.stats_dir",
                format_args!(
                    "{stats_dir:?} must be a single folder name (not empty, \".\" or \"..\", \
                     no \"/\"), e.g. \"{DEFAULT_STATS_DIR}\" (the default)"
                ),
            );
        }

        let log_file =
            raw.mount
                .log_file
                .as_deref()
                .and_then(|raw_log| match expand_path(raw_log, vars) {
                    Ok(path) => Some(path),
                    Err(e) => {
                        p.add(
                            "mount.log_file",
                            format_args!("{e}; or remove the key to log to stderr"),
                        );
                        None
                    }
                });

        let threads = match raw.mount.threads {
            None => DEFAULT_THREADS,
            Some(n) if n >= 1 && n <= MAX_THREADS as i64 => n as usize,
            Some(n) => {
                p.add(
                    "mount.threads",
                    format_args!(
                        "{n} is out of range; use 1 to {MAX_THREADS} ({DEFAULT_THREADS} is the \
                         default)"
                    ),
                );
                DEFAULT_THREADS
            }
        };

        let passthrough = match raw.mount.passthrough.as_deref() {
            None | Some("auto") => Passthrough::Auto,
            Some("direct") => Passthrough::Direct,
            Some("off") => Passthrough::Off,
            Some(other) => {
                p.add(
                    "mount.passthrough",
                    format_args!("{other:?} is not one of \"auto\", \"direct\", \"off\""),
                );
                Passthrough::Auto
            }
        };

        let layout = layout_given.unwrap_or_else(|| default_layout(passthrough));

        let engine = match raw.mount.engine.as_deref() {
            None | Some("io_uring") => EngineKind::IoUring,
            Some("psync") => EngineKind::Psync,
            Some(other) => {
                p.add(
                    "mount.engine",
                    format_args!("{other:?} is not one of \"io_uring\", \"psync\""),
                );
                EngineKind::IoUring
            }
        };

        let transport = match raw.mount.transport.as_deref() {
            None | Some("auto") => Transport::Auto,
            Some("uring") => Transport::Uring,
            Some("dev") => Transport::Dev,
            Some(other) => {
                p.add(
                    "mount.transport",
                    format_args!("{other:?} is not one of \"auto\", \"uring\", \"dev\""),
                );
                Transport::Auto
            }
        };

        let cache = match &raw.cache {
            Some(c) => parse_cache(c, &mut p).unwrap_or_default(),
            None => CacheSection::default(),
        };

        let min_share = match raw.placement.min_share {
            None => crate::placement::DEFAULT_MIN_SHARE,
            Some(m) if m.is_finite() && (0.0..=0.5).contains(&m) => m,
            Some(m) => {
                p.add(
                    "placement.min_share",
                    format_args!(
                        "{m} is out of range; use 0 (never pause a slow tier) to 0.5, e.g. 0.10 (the default)"
                    ),
                );
                crate::placement::DEFAULT_MIN_SHARE
            }
        };
        let adapt_default = tiers
            .iter()
            .all(|t| t.read_bandwidth.is_none() && t.write_bandwidth.is_none());
        p.into_result(MountConfig {
            source: source.to_path_buf(),
            tiers,
            placement: PlacementConfig {
                layout,
                stripe_unit,
                adapt: raw.placement.adapt.unwrap_or(adapt_default),
                min_share,
            },
            mount: MountSection {
                stats_dir,
                allow_other: raw.mount.allow_other,
                log_file,
                threads,
                passthrough,
                exclusive_tiers: raw.mount.exclusive_tiers,
                degraded: raw.mount.degraded,
                engine,
                transport,
                scratch: raw.mount.scratch,
            },
            cache,
        })
    }

    /// The effective configuration as TOML (every default filled in), for `.tierfs/config`.
    pub fn to_toml(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let path_str = |p: &Path| toml_str(&p.to_string_lossy());
        // Writing into a String cannot fail; the results are ignored for that reason.
        let _ = writeln!(
            s,
            "# Effective tierfs configuration, every default filled in."
        );
        let _ = writeln!(s, "# Source: {:?}", self.source);
        for t in &self.tiers {
            let _ = writeln!(s, "\n[[tier]]");
            let _ = writeln!(s, "name = {}", toml_str(&t.name));
            let _ = writeln!(s, "path = {}", path_str(&t.path));
            let _ = writeln!(s, "create = {}", t.create);
            for (key, v) in [
                ("write_bandwidth", t.write_bandwidth),
                ("read_bandwidth", t.read_bandwidth),
            ] {
                match v {
                    Some(bps) => {
                        let _ =
                            writeln!(s, "{key} = {}", toml_str(&units::fmt_bandwidth_exact(bps)));
                    }
                    None => {
                        let _ = writeln!(s, "# {key}: not set, measured at mount");
                    }
                }
            }
            match t.capacity {
                Some(n) => {
                    let _ = writeln!(s, "capacity = {}", toml_str(&units::fmt_size_exact(n)));
                }
                None => {
                    let _ = writeln!(s, "# capacity: not set, the device's free space");
                }
            }
            match t.max_in_flight {
                Some(n) => {
                    let _ = writeln!(s, "max_in_flight = {n}");
                }
                None => {
                    let _ = writeln!(s, "# max_in_flight: not set, threads / number of tiers");
                }
            }
            if let Some(sh) = &t.shared {
                let _ = writeln!(s, "shared_ledger = {}", path_str(&sh.ledger));
                let _ = writeln!(s, "shared_job = {}", toml_str(&sh.job));
                let _ = writeln!(s, "shared_node = {}", toml_str(&sh.node));
            }
        }
        let _ = writeln!(s, "\n[placement]");
        let _ = writeln!(s, "layout = {}", toml_str(self.placement.layout.as_str()));
        let _ = writeln!(
            s,
            "stripe_unit = {}",
            toml_str(&units::fmt_size_exact(self.placement.stripe_unit))
        );
        let _ = writeln!(s, "adapt = {}", self.placement.adapt);
        let _ = writeln!(s, "min_share = {}", self.placement.min_share);
        let _ = writeln!(s, "\n[mount]");
        let _ = writeln!(s, "stats_dir = {}", toml_str(&self.mount.stats_dir));
        let _ = writeln!(s, "allow_other = {}", self.mount.allow_other);
        match &self.mount.log_file {
            Some(p) => {
                let _ = writeln!(s, "log_file = {}", path_str(p));
            }
            None => {
                let _ = writeln!(
                    s,
                    "# log_file: not set, stderr (or <first tier>/.tierfs-meta/daemon.log in \
                     the background)"
                );
            }
        }
        let _ = writeln!(s, "threads = {}", self.mount.threads);
        let _ = writeln!(s, "passthrough = \"{}\"", self.mount.passthrough.as_str());
        let _ = writeln!(s, "exclusive_tiers = {}", self.mount.exclusive_tiers);
        let _ = writeln!(s, "engine = \"{}\"", self.mount.engine.as_str());
        let _ = writeln!(s, "transport = \"{}\"", self.mount.transport.as_str());
        let _ = writeln!(s, "degraded = {}", self.mount.degraded);
        let _ = writeln!(s, "scratch = {}", self.mount.scratch);
        let c = &self.cache;
        let _ = writeln!(s, "\n[cache]");
        let _ = writeln!(s, "size = {}", c.size.to_toml_value());
        let _ = writeln!(s, "policy = \"{}\"", c.policy.as_str());
        let _ = writeln!(s, "prefetch = {}", c.prefetch);
        let _ = writeln!(s, "writeback_delay = {}", c.writeback_delay);
        match c.max_file {
            Some(n) => {
                let _ = writeln!(s, "max_file = {}", toml_str(&units::fmt_size_exact(n)));
            }
            None => {
                let _ = writeln!(s, "# max_file: not set, a quarter of size");
            }
        }
        s
    }

    /// Checks every tier folder exists (or creates it where `create = true`), is a directory
    /// and is writable.
    ///
    /// Only the last path component is ever created: a missing parent usually means the
    /// parallel file system is not mounted on this node, and creating the tree would quietly
    /// put the "PFS" tier on the root disk. Once all folders exist they are resolved through
    /// symlinks and checked again for two tiers sharing (or nesting) one folder.
    pub fn prepare_tier_dirs(&self) -> Result<(), ConfigError> {
        self.prepare_tier_dirs_degraded(false).map(|_| ())
    }

    /// [`Self::prepare_tier_dirs`], but with `degraded` a tier other than the first whose
    /// folder fails the checks is left out instead: returns those tiers' indexes, each with
    /// why. The first tier must pass (it holds symlinks, special files and the default log).
    pub fn prepare_tier_dirs_degraded(
        &self,
        degraded: bool,
    ) -> Result<Vec<(usize, String)>, ConfigError> {
        let mut missing = Vec::new();
        let mut resolved = Vec::with_capacity(self.tiers.len());
        for (i, t) in self.tiers.iter().enumerate() {
            match self.tier_dir(t, true).map_err(|m| self.tier_problem(t, &m)) {
                Ok(real) => resolved.push(real),
                Err(ConfigError::Invalid(msg)) if degraded && i > 0 => {
                    missing.push((i, msg));
                    // An empty path overlaps nothing in the check below.
                    resolved.push(PathBuf::new());
                }
                Err(ConfigError::Invalid(msg)) if degraded => {
                    return Err(ConfigError::Invalid(format!(
                        "{msg}\n(degraded mounts may leave out any tier but the first, which \
                         holds symlinks, special files and the default log)"
                    )))
                }
                Err(e) => return Err(e),
            }
        }
        match self.overlaps(&resolved).into_iter().next() {
            Some(p) => Err(ConfigError::Invalid(p)),
            None => Ok(missing),
        }
    }

    /// What [`MountConfig::prepare_tier_dirs`] would refuse, without creating anything:
    /// every problem, one message each, in the same words (for `tierfs check-config`).
    pub fn check_tier_dirs(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut resolved = Vec::with_capacity(self.tiers.len());
        for t in &self.tiers {
            match self.tier_dir(t, false) {
                Ok(real) => resolved.push(real),
                Err(m) => {
                    problems.push(self.tier_problem(t, &m).to_string());
                    // Keep the indexes lined up for the overlap check; an unknown folder
                    // overlaps nothing.
                    resolved.push(PathBuf::new());
                }
            }
        }
        problems.extend(self.overlaps(&resolved));
        problems
    }

    /// Why mounting at `mountpoint` would put the mount and a tier folder inside one
    /// another (every path resolved through symlinks): a tier inside the mountpoint, the
    /// mountpoint a tier's folder, or the mountpoint inside a tier's folder. The daemon
    /// would then reach its tier through its own mount (and hang there, with every caller
    /// stuck in D state until the FUSE connection is aborted), or walk into the mount while
    /// scanning the tier. One message per tier concerned; tiers not there yet are skipped.
    pub fn mountpoint_overlaps(&self, mountpoint: &Path) -> Vec<String> {
        let Some(mp) = resolve_lenient(mountpoint) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for t in &self.tiers {
            let Some(dir) = resolve_lenient(&t.path) else {
                continue;
            };
            let why = if dir == mp {
                format!(
                    "its folder {} is the mountpoint {}; mount on an empty folder outside \
                     every tier folder",
                    t.path.display(),
                    mountpoint.display()
                )
            } else if dir.starts_with(&mp) {
                format!(
                    "its folder {} is inside the mountpoint {} (the daemon would reach the tier \
                     through its own mount and hang); put the mountpoint and the tier folders \
                     side by side",
                    t.path.display(),
                    mountpoint.display()
                )
            } else if mp.starts_with(&dir) {
                format!(
                    "the mountpoint {} is inside its folder {} (the daemon would walk into its \
                     own mount and hang); choose a mountpoint outside every tier folder",
                    mountpoint.display(),
                    t.path.display()
                )
            } else {
                continue;
            };
            out.push(self.tier_problem(t, &why).to_string());
        }
        out
    }

    fn tier_problem(&self, t: &TierConfig, msg: &str) -> ConfigError {
        ConfigError::Invalid(format!(
            "{}: tier '{}': {msg}",
            self.source.display(),
            t.name
        ))
    }

    /// Checks one tier folder and returns it resolved through symlinks. With `create`, a
    /// missing last component is created (where `create = true`); without, it is only
    /// checked that it could be.
    fn tier_dir(&self, t: &TierConfig, create: bool) -> Result<PathBuf, String> {
        let dir = &t.path;
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "{} exists but is not a directory; point `path` at a folder",
                    dir.display()
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let parent = dir.parent().unwrap_or(Path::new("/"));
                if !parent.is_dir() {
                    return Err(format!(
                        "the parent folder {} of {} does not exist (is its file system \
                         mounted on this node?); tierfs creates only the last component \
                         of a tier path, even with `create = true`: create the parent \
                         first or fix `path`",
                        parent.display(),
                        dir.display()
                    ));
                }
                if !t.create {
                    return Err(format!(
                        "folder {} does not exist; create it or set `create = true`",
                        dir.display()
                    ));
                }
                if !create {
                    // Would be created: the parent must take a new folder.
                    check_writable(parent).map_err(|e| {
                        format!(
                            "cannot create {}: its parent folder {} is not writable by this \
                             user: {e}",
                            dir.display(),
                            parent.display()
                        )
                    })?;
                    let real_parent = std::fs::canonicalize(parent)
                        .map_err(|e| format!("cannot resolve {}: {e}", parent.display()))?;
                    return Ok(match dir.file_name() {
                        Some(n) => real_parent.join(n),
                        None => real_parent,
                    });
                }
                match std::fs::create_dir(dir) {
                    Ok(()) => {}
                    // Another tierfs on the same node may have just made it.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
                    // The same words as check-config's check above.
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS)
                        ) =>
                    {
                        return Err(format!(
                            "cannot create {}: its parent folder {} is not writable by this \
                             user: {e}",
                            dir.display(),
                            parent.display()
                        ))
                    }
                    Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
                }
            }
            Err(e) => return Err(format!("cannot inspect {}: {e}", dir.display())),
        }
        if let Err(e) = check_writable(dir) {
            return Err(format!(
                "folder {} is not writable and searchable by this user: {e}; fix its \
                 permissions (e.g. `chmod u+wx`) or choose another folder",
                dir.display()
            ));
        }
        std::fs::canonicalize(dir).map_err(|e| format!("cannot resolve {}: {e}", dir.display()))
    }

    /// Tiers whose resolved folders are the same or nested (empty paths are skipped).
    fn overlaps(&self, resolved: &[PathBuf]) -> Vec<String> {
        let mut out = Vec::new();
        for (i, a) in resolved.iter().enumerate() {
            for (j, b) in resolved.iter().enumerate().skip(i + 1) {
                if a.as_os_str().is_empty() || b.as_os_str().is_empty() {
                    continue;
                }
                if a.starts_with(b) || b.starts_with(a) {
                    out.push(
                        self.tier_problem(
                            &self.tiers[j],
                            &format!(
                                "{} resolves to {}, which is the same as or nested with tier \
                                 '{}' ({}); tier folders must be separate, so check the \
                                 symlinks on these paths",
                                self.tiers[j].path.display(),
                                b.display(),
                                self.tiers[i].name,
                                a.display()
                            ),
                        )
                        .to_string(),
                    );
                }
            }
        }
        out
    }
}

/// `p` resolved through symlinks; where it does not exist (yet), its parent resolved and
/// its name; `None` when neither can be.
fn resolve_lenient(p: &Path) -> Option<PathBuf> {
    if let Ok(c) = std::fs::canonicalize(p) {
        return Some(c);
    }
    let parent = std::fs::canonicalize(p.parent()?).ok()?;
    Some(parent.join(p.file_name()?))
}

/// `access(dir, W_OK | X_OK)`: can this process create files in `dir`?
fn check_writable(dir: &Path) -> io::Result<()> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call; access(2) only
    // reads it.
    let rc = unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

// ---------------------------------------------------------------------------------------
// ${VAR} expansion.

/// A tier's `shared_*` keys, validated: all or none of ledger and job, ids that fit in a
/// file name. Problems are added to `p`.
fn shared_config(
    t: &RawTier,
    key: &dyn Fn(&str) -> String,
    vars: &dyn Fn(&str) -> Option<String>,
    p: &mut Problems,
) -> Option<SharedConfig> {
    if t.shared_ledger.is_none() && t.shared_job.is_none() {
        if t.shared_node.is_some() {
            p.add(
                &key("shared_node"),
                "set without shared_ledger and shared_job; add them, or remove shared_node",
            );
        }
        return None;
    }
    let Some(ledger) = t.shared_ledger.as_deref() else {
        p.add(
            &key("shared_ledger"),
            "missing; shared_job needs a ledger folder on the shared file system, e.g. \
             shared_ledger = \"/lus/proj/tierfs-ledger\"",
        );
        return None;
    };
    let Some(job) = t.shared_job.as_deref() else {
        p.add(
            &key("shared_job"),
            "missing; a shared_ledger needs the job's id, the same on every node, e.g. \
             shared_job = \"${SLURM_JOB_ID}\"",
        );
        return None;
    };
    let ledger = expand_path(ledger, vars)
        .map_err(|e| p.add(&key("shared_ledger"), e))
        .ok();
    let mut id = |field: &str, written: &str| -> Option<String> {
        let v = expand_with(written, vars)
            .map_err(|e| p.add(&key(field), e))
            .ok()?;
        if crate::coord::is_valid_name(&v) {
            Some(v)
        } else {
            p.add(
                &key(field),
                format_args!(
                    "{v:?} is not a valid id; use 1 to 64 letters, digits, '_', '.' or '-' \
                     (not \".\" or \"..\")"
                ),
            );
            None
        }
    };
    let job = id("shared_job", job);
    let node = id(
        "shared_node",
        t.shared_node.as_deref().unwrap_or("${HOSTNAME}"),
    );
    Some(SharedConfig {
        ledger: ledger?,
        job: job?,
        node: node?,
    })
}

/// Expands `${NAME}` in `s` with the values of this process ([`process_var`]). Only the
/// braced form expands; a lone `$` (as in `$HOSTNAME`) is kept as written.
pub fn expand_vars(s: &str) -> Result<String, String> {
    expand_with(s, &process_var)
}

/// The value `${name}` has for this process, `None` when it has none.
///
/// `HOSTNAME` is always this node's name (`gethostname`), never the environment's
/// `$HOSTNAME`: Slurm and PBS copy the submitting shell's environment into the job, so there
/// `$HOSTNAME` can name the login node, and every node of a job would share one tier folder.
/// `USER` and `HOME` fall back to the passwd entry of the effective uid where the
/// environment lacks them (cron, `env -i`). Everything else comes from the environment:
/// `${SLURM_JOB_ID}`, `${PBS_JOBID}`, `${TMPDIR}`, or a variable the job script exports.
pub fn process_var(name: &str) -> Option<String> {
    match name {
        "HOSTNAME" => hostname().ok(),
        "USER" => user_name().ok(),
        "HOME" => home_dir().ok(),
        _ => std::env::var(name).ok(),
    }
}

/// Whether `name` can be a variable's name: `[A-Za-z_][A-Za-z0-9_]*`, as in the shell.
fn is_var_name(name: &str) -> bool {
    let mut b = name.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Expands every `${NAME}` of `s` through `lookup`. A variable that is not set, or set to
/// nothing, is an error naming it: a path part that silently vanishes would point the tier
/// at its parent folder, which scratch mode empties at unmount.
fn expand_with(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!(
                "{s:?} has a \"${{\" without a closing \"}}\"; write variables as ${{NAME}}"
            ));
        };
        let var = &after[..end];
        if !is_var_name(var) {
            return Err(format!(
                "{s:?} has ${{{var}}}, which is not a variable name; write ${{NAME}} with \
                 letters, digits and '_', not starting with a digit"
            ));
        }
        match lookup(var) {
            None => {
                return Err(format!(
                    "{s:?} uses ${{{var}}}, which is not set in the environment; set it \
                     (`export {var}=...`, in a batch job before tierfs runs) or write the \
                     folder out"
                ))
            }
            Some(v) if v.is_empty() => {
                return Err(format!(
                    "{s:?} uses ${{{var}}}, which is set but empty; give it a value or \
                     write the folder out"
                ))
            }
            Some(v) => out.push_str(&v),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// This node's host name, as `${HOSTNAME}` expands: `gethostname(2)`, else
/// /proc/sys/kernel/hostname.
pub fn hostname() -> io::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration of the call.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        if let Ok(name) = std::str::from_utf8(&buf[..end]) {
            if !name.is_empty() {
                return Ok(name.to_string());
            }
        }
    }
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")?
        .trim()
        .to_string();
    if name.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the host name is empty",
        ));
    }
    Ok(name)
}

/// The user name, as `${USER}` expands: `$USER`, else the passwd entry of the effective uid.
pub fn user_name() -> io::Result<String> {
    match std::env::var("USER") {
        Ok(u) if !u.is_empty() => Ok(u),
        _ => Ok(passwd_entry()?.0),
    }
}

/// The home folder, as `${HOME}` expands: `$HOME`, else the passwd entry of the effective uid.
pub fn home_dir() -> io::Result<String> {
    match std::env::var("HOME") {
        Ok(h) if !h.is_empty() => Ok(h),
        _ => Ok(passwd_entry()?.1),
    }
}

/// (name, home folder) of the effective uid, from `getpwuid_r(3)`.
fn passwd_entry() -> io::Result<(String, String)> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: `passwd` is a plain C struct of integers and pointers, for which all-zero
        // is a valid (if meaningless) value; getpwuid_r overwrites it.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: `pwd` and `result` are live locals,
        // and `buf` is writable for `buf.len()` bytes.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < (1 << 20) {
            let len = buf.len() * 4;
            buf.resize(len, 0);
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        if result.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no passwd entry for uid {uid}"),
            ));
        }
        // SAFETY: on success pw_name and pw_dir point to NUL-terminated strings inside
        // `buf`, which is alive and unmodified until the end of this block.
        let (name, dir) = unsafe {
            (
                CStr::from_ptr(pwd.pw_name).to_string_lossy().into_owned(),
                CStr::from_ptr(pwd.pw_dir).to_string_lossy().into_owned(),
            )
        };
        return Ok((name, dir));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<MountConfig, String> {
        MountConfig::parse(text, Path::new("/etc/tierfs/test.toml")).map_err(|e| e.to_string())
    }

    const TWO: &str = r#"
[[tier]]
name = "nvme"
path = "/local/scratch/tierfs"
create = true
write_bandwidth = "2GB/s"
read_bandwidth = "3GB/s"
capacity = "800GiB"
[[tier]]
name = "pfs"
path = "/lus/proj/tierfs/${HOSTNAME}"
"#;

    #[test]
    fn engine_key() {
        assert_eq!(parse(TWO).unwrap().mount.engine, EngineKind::IoUring);
        let c = parse(&format!("{TWO}\n[mount]\nengine = \"psync\"\n")).unwrap();
        assert_eq!(c.mount.engine, EngineKind::Psync);
        assert!(c.to_toml().contains("engine = \"psync\""));
        let c = parse(&format!("{TWO}\n[mount]\ntransport = \"uring\"\n")).unwrap();
        assert_eq!(c.mount.transport, Transport::Uring);
        assert!(c.to_toml().contains("transport = \"uring\""));
        let e = parse(&format!("{TWO}\n[mount]\ntransport = \"ring\"\n")).unwrap_err();
        assert!(e.to_string().contains("mount.transport"), "{e}");
        let e = parse(&format!("{TWO}\n[mount]\nengine = \"aio\"\n")).unwrap_err();
        assert!(e.contains("mount.engine") && e.contains("io_uring"), "{e}");
    }

    #[test]
    fn cache_section() {
        let auto = parse(TWO).unwrap().cache;
        assert_eq!(auto.size, CacheSize::Auto, "no section: sized at mount");
        assert!(auto.fixed().is_none());
        let a = auto.with_size(256 << 20);
        assert_eq!((a.size, a.max_file), (256 << 20, 64 << 20));
        for body in ["size = \"auto\"", "policy = \"lru\""] {
            let c = parse(&format!("{TWO}\n[cache]\n{body}\n")).unwrap().cache;
            assert_eq!(c.size, CacheSize::Auto, "{body}");
        }
        for body in ["size = \"off\"", "size = \"0\"", "size = 0"] {
            let c = parse(&format!("{TWO}\n[cache]\n{body}\n")).unwrap().cache;
            assert_eq!(c.size, CacheSize::Off, "{body}");
            assert!(c.fixed().is_none());
        }
        let c = parse(&format!("{TWO}\n[cache]\nsize = \"1GiB\"\n"))
            .unwrap()
            .cache
            .fixed()
            .unwrap();
        assert_eq!(c.size, 1 << 30);
        assert_eq!(c.max_file, 1 << 28, "a quarter of the cache by default");
        assert_eq!(c.policy, CachePolicy::Learned);
        assert_eq!(c.prefetch, DEFAULT_PREFETCH);
        // A stated max_file above an automatic size is held to it.
        let c = parse(&format!("{TWO}\n[cache]\nmax_file = \"4GiB\"\n"))
            .unwrap()
            .cache;
        assert_eq!(c.with_size(1 << 30).max_file, 1 << 30);
        for text in [
            format!(
                "{TWO}\n[cache]\nsize = \"64MiB\"\npolicy = \"lru\"\nprefetch = 0\n\
                 writeback_delay = 0.5\nmax_file = \"8MiB\"\n"
            ),
            TWO.to_string(),
            format!("{TWO}\n[cache]\nsize = \"off\"\nmax_file = \"8MiB\"\n"),
        ] {
            let a = parse(&text).unwrap();
            let printed = a.to_toml();
            assert_eq!(
                serde_json::to_value(&a).unwrap(),
                serde_json::to_value(parse(&printed).unwrap()).unwrap(),
                "{printed}"
            );
        }
        for (body, want) in [
            ("size = \"lots\"", "or \"auto\" (the default"),
            ("size = \"1MiB\"", "too small"),
            ("size = \"1GiB\"\npolicy = \"mru\"", "cache.policy"),
            ("size = \"1GiB\"\nprefetch = 65", "cache.prefetch"),
            (
                "size = \"1GiB\"\nwriteback_delay = -1.0",
                "cache.writeback_delay",
            ),
            ("size = \"1GiB\"\nmax_file = \"2GiB\"", "at most cache.size"),
            ("max_file = \"0\"", "above zero"),
            ("size = \"1GiB\"\nsizes = 1", "unknown field"),
        ] {
            let e = parse(&format!("{TWO}\n[cache]\n{body}\n")).unwrap_err();
            assert!(e.contains(want), "{body}: {e}");
        }
    }

    #[test]
    fn adapt_defaults_to_probed_tiers_only() {
        // A stated bandwidth is the user's decision: shares stay put.
        assert!(!parse(TWO).unwrap().placement.adapt);
        let probed =
            "[[tier]]\nname = \"a\"\npath = \"/x\"\n[[tier]]\nname = \"b\"\npath = \"/y\"\n";
        assert!(parse(probed).unwrap().placement.adapt);
        let forced = format!("{TWO}[placement]\nadapt = true\n");
        assert!(parse(&forced).unwrap().placement.adapt);
    }

    #[test]
    fn shared_keys_expand_and_default_the_node_to_the_host() {
        let vars = |n: &str| match n {
            "SLURM_JOB_ID" => Some("4711".to_string()),
            "HOSTNAME" => Some("nid001".to_string()),
            _ => None,
        };
        let text = "[[tier]]\nname = \"pfs\"\npath = \"/lus/t/${HOSTNAME}\"\n\
                    shared_ledger = \"/lus/ledger\"\nshared_job = \"job-${SLURM_JOB_ID}\"\n";
        let c = MountConfig::parse_with_vars(text, Path::new("/c.toml"), &vars).unwrap();
        let sh = c.tiers[0].shared.as_ref().unwrap();
        assert_eq!(sh.ledger, Path::new("/lus/ledger"));
        assert_eq!((sh.job.as_str(), sh.node.as_str()), ("job-4711", "nid001"));
        // The effective config says it, and reads back the same.
        let again =
            MountConfig::parse_with_vars(&c.to_toml(), Path::new("/c.toml"), &vars).unwrap();
        assert_eq!(again.tiers[0].shared.as_ref().unwrap().node, "nid001");
        // Without the keys: not shared.
        let plain = "[[tier]]\nname = \"a\"\npath = \"/a\"\n";
        let c = MountConfig::parse_with_vars(plain, Path::new("/c.toml"), &vars).unwrap();
        assert!(c.tiers[0].shared.is_none());
        // A job id that is not set is named.
        let e = MountConfig::parse_with_vars(text, Path::new("/c.toml"), &|n: &str| {
            (n == "HOSTNAME").then(|| "h".to_string())
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("tier[0].shared_job") && e.contains("SLURM_JOB_ID"),
            "{e}"
        );
    }

    #[test]
    fn min_share_defaults_and_range() {
        assert_eq!(parse(TWO).unwrap().placement.min_share, 0.10);
        let zero = format!("{TWO}[placement]\nmin_share = 0.0\n");
        assert_eq!(parse(&zero).unwrap().placement.min_share, 0.0);
        for bad in ["0.6", "-0.1", "nan"] {
            let c = format!("{TWO}[placement]\nmin_share = {bad}\n");
            let e = parse(&c).unwrap_err().to_string();
            assert!(e.contains("placement.min_share:"), "{e}");
        }
    }

    #[test]
    fn full_file_parses_with_defaults() {
        let c = parse(TWO).unwrap();
        assert_eq!(c.tiers.len(), 2);
        let nvme = &c.tiers[0];
        assert_eq!(nvme.name, "nvme");
        assert_eq!(nvme.path, Path::new("/local/scratch/tierfs"));
        assert!(nvme.create);
        assert_eq!(nvme.write_bandwidth, Some(2e9));
        assert_eq!(nvme.read_bandwidth, Some(3e9));
        assert_eq!(nvme.capacity, Some(800 << 30));
        let pfs = &c.tiers[1];
        assert_eq!(
            pfs.path,
            Path::new("/lus/proj/tierfs").join(hostname().unwrap())
        );
        assert!(!pfs.create);
        assert_eq!(
            (pfs.read_bandwidth, pfs.write_bandwidth, pfs.capacity),
            (None, None, None)
        );
        assert_eq!(c.placement.layout, default_layout(Passthrough::Auto));
        assert_eq!(c.placement.stripe_unit, 1 << 20);
        assert_eq!(c.mount.stats_dir, ".tierfs");
        assert!(!c.mount.allow_other);
        assert_eq!(c.mount.log_file, None);
        assert_eq!(c.mount.threads, DEFAULT_THREADS);
        assert_eq!(c.source, Path::new("/etc/tierfs/test.toml"));
    }

    #[test]
    fn default_layout_is_whole_files_where_passthrough_can_serve_them() {
        assert_eq!(
            default_layout_for(Passthrough::Auto, true),
            Layout::WholeFile
        );
        assert_eq!(
            default_layout_for(Passthrough::Direct, true),
            Layout::WholeFile
        );
        assert_eq!(default_layout_for(Passthrough::Off, true), Layout::Stripe);
        assert_eq!(default_layout_for(Passthrough::Auto, false), Layout::Stripe);
        let off = parse(&format!("{TWO}\n[mount]\npassthrough = \"off\"\n")).unwrap();
        assert_eq!(off.placement.layout, Layout::Stripe);
        let given = parse(&format!("{TWO}\n[placement]\nlayout = \"stripe\"\n")).unwrap();
        assert_eq!(given.placement.layout, Layout::Stripe);
    }

    #[test]
    fn sections_parse() {
        let c = parse(&format!(
            "{TWO}\n[placement]\nlayout = \"stripe\"\nstripe_unit = \"4MiB\"\n\
             [mount]\nstats_dir = \".stats\"\nallow_other = true\n\
             log_file = \"/tmp/tierfs-${{USER}}.log\"\nthreads = 32\n"
        ))
        .unwrap();
        assert_eq!(c.placement.layout, Layout::Stripe);
        assert_eq!(c.placement.stripe_unit, 4 << 20);
        assert_eq!(c.mount.stats_dir, ".stats");
        assert!(c.mount.allow_other);
        let log = format!("/tmp/tierfs-{}.log", user_name().unwrap());
        assert_eq!(c.mount.log_file, Some(PathBuf::from(log)));
        assert_eq!(c.mount.threads, 32);
    }

    #[test]
    fn numbers_are_accepted_for_sizes() {
        let c = parse("[[tier]]\nname='a'\npath='/a'\ncapacity = 4096\n").unwrap();
        assert_eq!(c.tiers[0].capacity, Some(4096));
    }

    #[test]
    fn round_trips_through_to_toml() {
        let text = format!(
            "{TWO}\n[placement]\nlayout = \"stripe\"\nstripe_unit = \"256KiB\"\n\
             [mount]\nlog_file = \"/tmp/x.log\"\nthreads = 3\n"
        );
        let a = parse(&text).unwrap();
        let printed = a.to_toml();
        let b = parse(&printed).unwrap();
        assert_eq!(printed, b.to_toml());
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&b).unwrap()
        );
        assert!(printed.contains("write_bandwidth = \"2GB/s\""), "{printed}");
        assert!(printed.contains("capacity = \"800GiB\""), "{printed}");
        assert!(printed.contains("stripe_unit = \"256KiB\""), "{printed}");
        assert!(printed.contains("stats_dir = \".tierfs\""), "{printed}");
    }

    #[test]
    fn all_problems_are_reported_at_once() {
        let err = parse(
            "[[tier]]\nname = 'a b'\npath = 'rel'\nwrite_bandwidth = '2GB'\n\
             [mount]\nthreads = 0\n",
        )
        .unwrap_err();
        for key in [
            "tier[0].name",
            "tier[0].path",
            "tier[0].write_bandwidth",
            "mount.threads",
        ] {
            assert!(
                err.contains(&format!("/etc/tierfs/test.toml: {key}: ")),
                "{key}: {err}"
            );
        }
        assert_eq!(err.lines().count(), 4, "{err}");
    }

    #[test]
    fn syntax_errors_have_line_and_column() {
        let err = parse("[[tier]]\nname = \"a\"\npath = /a\n").unwrap_err();
        assert!(err.starts_with("/etc/tierfs/test.toml:3:8: "), "{err}");
        let err = parse("[[tier]]\nname = \"a\"\npath = \"/a\"\nspeed = 1\n").unwrap_err();
        assert!(err.starts_with("/etc/tierfs/test.toml:4:1: "), "{err}");
        assert!(err.contains("speed"), "{err}");
        let err = parse("[tier]\nname = \"a\"\npath = \"/a\"\n").unwrap_err();
        assert!(err.contains("[[tier]]"), "{err}");
    }

    #[test]
    fn expansion() {
        let look = |v: &str| -> Option<String> {
            match v {
                "UNSET" => None,
                "EMPTY" => Some(String::new()),
                _ => Some(format!("<{v}>")),
            }
        };
        assert_eq!(
            expand_with("/a/${HOSTNAME}/${USER}", &look).unwrap(),
            "/a/<HOSTNAME>/<USER>"
        );
        assert_eq!(
            expand_with("/a/$HOSTNAME/$", &look).unwrap(),
            "/a/$HOSTNAME/$"
        );
        assert_eq!(expand_with("${HOME}", &look).unwrap(), "<HOME>");
        // Any variable of the environment, e.g. a batch system's job id.
        assert_eq!(
            expand_with("/s/${SLURM_JOB_ID}-${_x1}", &look).unwrap(),
            "/s/<SLURM_JOB_ID>-<_x1>"
        );
        let e = expand_with("/a/${UNSET}/b", &look).unwrap_err();
        assert!(e.contains("${UNSET}, which is not set"), "{e}");
        let e = expand_with("/a/${EMPTY}/b", &look).unwrap_err();
        assert!(e.contains("${EMPTY}, which is set but empty"), "{e}");
        assert!(expand_with("/a/${HOSTNAME", &look)
            .unwrap_err()
            .contains("closing"));
        for bad in ["${}", "${1A}", "${A-B}", "${A B}"] {
            let e = expand_with(bad, &look).unwrap_err();
            assert!(e.contains("is not a variable name"), "{bad}: {e}");
        }
        assert!(!hostname().unwrap().is_empty());
        assert!(!user_name().unwrap().is_empty());
        // ${HOSTNAME} is the node's own name whatever the environment says.
        assert_eq!(process_var("HOSTNAME"), hostname().ok());
        // A container may run under a uid with no passwd entry; then there is nothing to check.
        if let Ok((name, _)) = passwd_entry() {
            assert!(!name.is_empty());
        }
    }

    #[test]
    fn job_variables_in_paths_name_the_key_when_unset() {
        let text = "[[tier]]\nname = 'a'\npath = '/scratch/${SLURM_JOB_ID}/a'\n\
                    [mount]\nlog_file = '/tmp/${TMPDIR_X}/log'\n";
        let job = |v: &str| (v == "SLURM_JOB_ID").then(|| "4242".to_string());
        let e = MountConfig::parse_with_vars(text, Path::new("/j.toml"), &job)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/j.toml: mount.log_file: \"/tmp/${TMPDIR_X}/log\" uses ${TMPDIR_X}, which is not set"),
            "{e}"
        );
        assert!(!e.contains("tier[0].path"), "{e}");
        let all = |v: &str| Some(format!("v-{v}"));
        let c = MountConfig::parse_with_vars(text, Path::new("/j.toml"), &all).unwrap();
        assert_eq!(c.tiers[0].path, Path::new("/scratch/v-SLURM_JOB_ID/a"));
        assert_eq!(
            c.mount.log_file.as_deref(),
            Some(Path::new("/tmp/v-TMPDIR_X/log"))
        );
    }

    #[test]
    fn scratch_key() {
        let base = "[[tier]]\nname='a'\npath='/a'\n";
        assert!(!parse(base).unwrap().mount.scratch);
        let c = parse(&format!("{base}[mount]\nscratch = true\n")).unwrap();
        assert!(c.mount.scratch);
        assert!(c.to_toml().contains("scratch = true"));
        assert!(parse(&c.to_toml()).unwrap().mount.scratch);
    }

    #[test]
    fn paths_are_normalized_and_checked() {
        let c = parse("[[tier]]\nname='a'\npath='/x//y/./z/'\n").unwrap();
        assert_eq!(c.tiers[0].path, Path::new("/x/y/z"));
        assert!(parse("[[tier]]\nname='a'\npath='/x/../y'\n")
            .unwrap_err()
            .contains(".."));
        assert!(parse("[[tier]]\nname='a'\npath='/'\n")
            .unwrap_err()
            .contains("root"));
        let err =
            parse("[[tier]]\nname='a'\npath='/x'\n[[tier]]\nname='b'\npath='/x/'\n").unwrap_err();
        assert!(
            err.contains("tier[1].path") && err.contains("tier[0]"),
            "{err}"
        );
        // Prefixes that are not path components are not nesting.
        parse("[[tier]]\nname='a'\npath='/x'\n[[tier]]\nname='b'\npath='/xy'\n").unwrap();
    }

    #[test]
    fn stripe_unit_limits() {
        let with = |v: &str| parse(&format!("{TWO}[placement]\nstripe_unit = {v:?}\n"));
        assert_eq!(with("64KiB").unwrap().placement.stripe_unit, 64 << 10);
        assert_eq!(with("1GiB").unwrap().placement.stripe_unit, 1 << 30);
        for bad in ["32KiB", "2GiB", "100000", "1MB", "lots"] {
            let err = with(bad).unwrap_err();
            assert!(
                err.contains("placement.stripe_unit") && err.contains(bad),
                "{err}"
            );
        }
    }

    #[test]
    fn stats_dir_and_threads_limits() {
        for bad in ["", ".", "..", "a/b", "/x"] {
            let err = parse(&format!("{TWO}[mount]\nstats_dir = {bad:?}\n")).unwrap_err();
            assert!(err.contains("mount.stats_dir"), "{err}");
        }
        for bad in [0, -1, 257] {
            let err = parse(&format!("{TWO}[mount]\nthreads = {bad}\n")).unwrap_err();
            assert!(
                err.contains("mount.threads") && err.contains("1 to 256"),
                "{err}"
            );
        }
        let err = parse(&format!("{TWO}[mount]\nlog_file = \"tierfs.log\"\n")).unwrap_err();
        assert!(
            err.contains("mount.log_file") && err.contains("absolute"),
            "{err}"
        );
    }

    #[test]
    fn tier_names() {
        assert!(is_valid_tier_name("nvme0"));
        assert!(is_valid_tier_name("A-b_c.d"));
        assert!(is_valid_tier_name(&"x".repeat(32)));
        for bad in ["", ".", "..", "a b", "a/b", "é", &"x".repeat(33)] {
            assert!(!is_valid_tier_name(bad), "{bad:?}");
        }
    }
}
