//! `[cache]`: the host-memory tier (staging). What the file says ([`CacheSection`]) is
//! validated here; the size may still be `auto`, which the daemon settles at mount from the
//! memory the job may use, making the cache's settings ([`CacheConfig`]).

use super::effective::toml_str;
use super::problems::Problems;
use super::raw::RawCache;
use crate::units;

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

/// Validates `[cache]`; `None` after reporting a problem.
pub(super) fn parse_cache(c: &RawCache, p: &mut Problems) -> Option<CacheSection> {
    let before = p.count();
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
    let policy = p.one_of(
        "cache.policy",
        c.policy.as_deref(),
        &[("learned", CachePolicy::Learned), ("lru", CachePolicy::Lru)],
    );
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
    (p.count() == before).then_some(CacheSection {
        size,
        policy,
        prefetch,
        writeback_delay,
        max_file,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{parse, TWO};
    use super::*;

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
}
