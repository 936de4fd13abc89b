//! `[mount]`: how the daemon serves the mount (threads, kernel passthrough, the FUSE
//! transport, the I/O engine, scratch data), every key optional.

use std::path::PathBuf;

use super::problems::Problems;
use super::raw::RawMount;
use super::vars::expand_path;

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
    /// Which opens of programs under `tierfs run` get the tier files' own descriptors.
    /// Default `auto`.
    pub direct: Direct,
}

/// `mount.direct`: which opens of a program run under `tierfs run` (the preload library,
/// `crate::direct`) get the pieces' own descriptors, so their bytes never cross FUSE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direct {
    /// `O_DIRECT` opens and DeepSpeed's swap files (`*.tensor.swp`), where the daemon can
    /// keep them exact; everything else stays on FUSE.
    Auto,
    /// None: programs under `tierfs run` go through FUSE as any other.
    Off,
}

impl Direct {
    pub fn as_str(self) -> &'static str {
        match self {
            Direct::Auto => "auto",
            Direct::Off => "off",
        }
    }
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

/// `mount.stats_dir` when the file does not say.
pub const DEFAULT_STATS_DIR: &str = ".tierfs";
/// `mount.threads` when the file does not say.
pub const DEFAULT_THREADS: usize = 64;
/// Largest accepted `mount.threads`.
pub const MAX_THREADS: usize = 256;

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
            direct: Direct::Auto,
        }
    }
}

/// Validates `[mount]`; a key with a problem gets its default.
pub(super) fn parse_mount(
    m: &RawMount,
    vars: &dyn Fn(&str) -> Option<String>,
    p: &mut Problems,
) -> MountSection {
    let stats_dir = parse_stats_dir(m.stats_dir.as_deref(), p);
    let log_file = m
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
    let threads = match m.threads {
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
    let passthrough = p.one_of(
        "mount.passthrough",
        m.passthrough.as_deref(),
        &[
            ("auto", Passthrough::Auto),
            ("direct", Passthrough::Direct),
            ("off", Passthrough::Off),
        ],
    );
    let engine = p.one_of(
        "mount.engine",
        m.engine.as_deref(),
        &[
            ("io_uring", EngineKind::IoUring),
            ("psync", EngineKind::Psync),
        ],
    );
    let transport = p.one_of(
        "mount.transport",
        m.transport.as_deref(),
        &[
            ("auto", Transport::Auto),
            ("uring", Transport::Uring),
            ("dev", Transport::Dev),
        ],
    );
    let direct = p.one_of(
        "mount.direct",
        m.direct.as_deref(),
        &[("auto", Direct::Auto), ("off", Direct::Off)],
    );
    MountSection {
        direct,
        stats_dir,
        allow_other: m.allow_other,
        log_file,
        threads,
        passthrough,
        exclusive_tiers: m.exclusive_tiers,
        degraded: m.degraded,
        engine,
        transport,
        scratch: m.scratch,
    }
}

/// `mount.stats_dir`: one folder name, since it appears at the mount root.
fn parse_stats_dir(given: Option<&str>, p: &mut Problems) -> String {
    let stats_dir = given.unwrap_or(DEFAULT_STATS_DIR).to_string();
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
    stats_dir
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{parse, TWO};
    use super::*;

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
    fn scratch_key() {
        let base = "[[tier]]\nname='a'\npath='/a'\n";
        assert!(!parse(base).unwrap().mount.scratch);
        let c = parse(&format!("{base}[mount]\nscratch = true\n")).unwrap();
        assert!(c.mount.scratch);
        assert!(c.to_toml().contains("scratch = true"));
        assert!(parse(&c.to_toml()).unwrap().mount.scratch);
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
}
