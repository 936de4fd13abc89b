//! The programs' view of a tier in `stats.json` (`app` in each tier): what programs read
//! and wrote at the mount for files with a piece on it, by the path that served them. The
//! tier's own counters (`bytes_read`, `bytes_written`, ...) are what reached the tier
//! folder, which staging memory delays or saves and passthrough never passes: see
//! [`crate::tier::app`] for how each path is counted.

use serde::{Deserialize, Serialize};

/// One tier's `app` object in `stats.json`, counters since mount.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AppStats {
    /// Everything programs read and wrote: the FUSE requests, the direct path and
    /// passthrough together.
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// Requests counted one by one (FUSE and the direct path; passthrough's are not seen)
    /// and their time summed, nanoseconds.
    pub reads: u64,
    pub writes: u64,
    pub read_ns: u64,
    pub write_ns: u64,
    /// By path: the FUSE requests the daemon answered ...
    pub fuse_read_bytes: u64,
    pub fuse_written_bytes: u64,
    /// ... of those, what staging memory served (read hits, writes taken in) ...
    pub memory_read_bytes: u64,
    pub memory_written_bytes: u64,
    /// ... the direct path (`tierfs run`), as programs reported it ...
    pub direct_read_bytes: u64,
    pub direct_written_bytes: u64,
    /// ... and kernel passthrough, from the tier's block device.
    pub passthrough_read_bytes: u64,
    pub passthrough_written_bytes: u64,
    /// Passthrough bytes of this tier and others on its block device that could not be
    /// split between them (not in the totals above).
    pub unsplit_read_bytes: u64,
    pub unsplit_written_bytes: u64,
}

impl AppStats {
    /// The object from the counters by path, the totals summed from them.
    #[allow(clippy::too_many_arguments)]
    pub fn from_paths(
        fuse: (u64, u64),
        fuse_requests: (u64, u64),
        fuse_ns: (u64, u64),
        memory: (u64, u64),
        direct: (u64, u64),
        direct_requests: (u64, u64),
        direct_ns: (u64, u64),
        passthrough: (u64, u64),
        unsplit: (u64, u64),
    ) -> AppStats {
        AppStats {
            read_bytes: fuse.0 + direct.0 + passthrough.0,
            written_bytes: fuse.1 + direct.1 + passthrough.1,
            reads: fuse_requests.0 + direct_requests.0,
            writes: fuse_requests.1 + direct_requests.1,
            read_ns: fuse_ns.0 + direct_ns.0,
            write_ns: fuse_ns.1 + direct_ns.1,
            fuse_read_bytes: fuse.0,
            fuse_written_bytes: fuse.1,
            memory_read_bytes: memory.0,
            memory_written_bytes: memory.1,
            direct_read_bytes: direct.0,
            direct_written_bytes: direct.1,
            passthrough_read_bytes: passthrough.0,
            passthrough_written_bytes: passthrough.1,
            unsplit_read_bytes: unsplit.0,
            unsplit_written_bytes: unsplit.1,
        }
    }

    /// Bytes of requests the daemon or the direct path saw one by one (request sizes and
    /// times are theirs): all but passthrough's.
    pub fn counted_read_bytes(&self) -> u64 {
        self.fuse_read_bytes + self.direct_read_bytes
    }

    pub fn counted_written_bytes(&self) -> u64 {
        self.fuse_written_bytes + self.direct_written_bytes
    }
}

/// The `tierfs stat` note on how programs' bytes reached a tier, when any path but the
/// daemon's own served them; `None` when the daemon served them all from the tier.
pub fn paths_note(a: &AppStats) -> Option<String> {
    let b = crate::units::fmt_bytes;
    let mut paths = Vec::new();
    let mut say = |what: &str, r: u64, w: u64| {
        if r + w > 0 {
            paths.push(format!("{what} {} read, {} written", b(r), b(w)));
        }
    };
    say(
        "staging memory",
        a.memory_read_bytes,
        a.memory_written_bytes,
    );
    say(
        "kernel passthrough",
        a.passthrough_read_bytes,
        a.passthrough_written_bytes,
    );
    say(
        "the direct path",
        a.direct_read_bytes,
        a.direct_written_bytes,
    );
    say(
        "passthrough not split from the device's other tiers",
        a.unsplit_read_bytes,
        a.unsplit_written_bytes,
    );
    (!paths.is_empty()).then(|| format!("programs' bytes through {}", paths.join("; ")))
}

/// The `tierfs stat` line on staging memory: what it holds, what of that is not on a tier
/// yet, and what it served; empty without staging memory.
pub fn staging_line(c: Option<&super::CacheStats>) -> String {
    let Some(c) = c else {
        return String::new();
    };
    let b = crate::units::fmt_bytes;
    format!(
        "staging memory: holds {} of {} ({} dirty: written by programs, not on a tier yet); \
         since mount {} of reads served from it, {} of writes taken in, {} written back\n",
        b(c.used),
        b(c.size),
        b(c.dirty),
        b(c.hit_bytes),
        b(c.absorbed_bytes),
        b(c.writeback_bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_are_the_paths_summed_and_requests_leave_passthrough_out() {
        let a = AppStats::from_paths(
            (10, 20),
            (1, 2),
            (100, 200),
            (5, 20),
            (1000, 2000),
            (3, 4),
            (7, 8),
            (40_000, 50_000),
            (9, 9),
        );
        assert_eq!((a.read_bytes, a.written_bytes), (41_010, 52_020));
        assert_eq!((a.reads, a.writes, a.read_ns, a.write_ns), (4, 6, 107, 208));
        assert_eq!(
            (a.counted_read_bytes(), a.counted_written_bytes()),
            (1010, 2020)
        );
        // Unsplit bytes are in no tier's total.
        assert_eq!(a.unsplit_read_bytes, 9);
        // An older daemon's stats.json has no `app`: all zeros, not an error.
        let t: AppStats = serde_json::from_str("{}").unwrap();
        assert_eq!(t, AppStats::default());
    }

    #[test]
    fn the_table_notes_name_each_path_that_served_bytes() {
        assert_eq!(paths_note(&AppStats::default()), None);
        let a = AppStats {
            memory_written_bytes: 96 << 20,
            passthrough_read_bytes: 1 << 20,
            ..AppStats::default()
        };
        let n = paths_note(&a).unwrap();
        assert!(
            n.contains("staging memory 0 B read, 96.0 MiB written"),
            "{n}"
        );
        assert!(n.contains("kernel passthrough 1.0 MiB read"), "{n}");
        assert!(!n.contains("direct"), "{n}");
        assert_eq!(staging_line(None), "");
    }
}
