//! The programs' side of every read and write the daemon answers: the bytes, the request
//! and its time go to the tiers the bytes belong to ([`crate::tier::app`]), whichever
//! served them, the tier or staging memory. The façade wraps its read and write
//! operations in [`Request`], so each FUSE READ or WRITE counts once, however the data
//! path serves it.

use crate::inodes::file::FileNode;
use crate::inodes::types::Handle;
use crate::tier::app;
use crate::vfs::handles;
use crate::vfs::state::TierFs;
use std::sync::Arc;
use std::time::Instant;

/// A read or write being served.
pub(crate) struct Request {
    start: Instant,
    /// The file, taken before the request runs: a read's reply goes out from inside the
    /// data path, and the program may close the file (and the handle leave the table)
    /// before the request is counted.
    node: Option<Arc<FileNode>>,
}

impl Request {
    /// Starts timing a request on handle `fh` on this thread.
    pub(crate) fn start(fs: &TierFs, fh: u64) -> Request {
        // What an earlier request of this thread left uncounted (one that failed).
        app::take_from_memory();
        let node = match handles::handle(fs, fh) {
            Ok(Handle::File { node, .. }) => Some(node),
            _ => None, // the stats files, the control file, a bad handle
        };
        Request {
            start: Instant::now(),
            node,
        }
    }

    /// Whether the handle is an open file's, whose bytes the data path serves; else it is
    /// a `.tierfs/` file's (`crate::vfs::statsdir`), a folder's or none. Known from the
    /// lookup [`Self::start`] made, so telling the two apart costs the hot path nothing.
    pub(crate) fn is_file(&self) -> bool {
        self.node.is_some()
    }

    /// Counts the request: `done` bytes at `off`, `None` when it failed. Call it before
    /// the reply goes out, so the stats have it by the time the program does.
    pub(crate) fn done(self, fs: &TierFs, off: u64, done: Option<u64>, write: bool) {
        let ns = self.start.elapsed().as_nanos() as u64;
        let memory = app::take_from_memory();
        let (Some(n), Some(node)) = (done.filter(|n| *n > 0), self.node) else {
            return;
        };
        // Recursive: a read's reply (and so this count) may run inside the data path with
        // this thread holding the state already (a cached block handed out in place).
        let st = node.state.read_recursive();
        // New bytes of a file moving to a new layout land in that layout.
        let layout = match (&st.migration, write) {
            (Some(m), true) => &m.layout,
            _ => &st.layout,
        };
        let mut per_tier: Vec<(usize, u64)> = Vec::new();
        for e in layout.extents(off, n as usize) {
            match per_tier.iter_mut().find(|(t, _)| *t == e.tier) {
                Some(p) => p.1 += e.len as u64,
                None => per_tier.push((e.tier, e.len as u64)),
            }
        }
        for (tier, bytes, mem) in split_memory(&per_tier, n, memory) {
            if let Some(t) = fs.tiers.get(tier) {
                t.counters.app.fuse(write, bytes, mem, ns);
            }
        }
    }
}

/// `memory` bytes of an `n`-byte request split over its tiers in proportion to their
/// bytes, whole bytes, summing to `memory` (capped at `n`): the cache does not say which
/// of a request's bytes it held, and a request within one tier's stripe (the usual case)
/// is exact. Returns (tier, bytes, of those from memory).
fn split_memory(per_tier: &[(usize, u64)], n: u64, memory: u64) -> Vec<(usize, u64, u64)> {
    let memory = memory.min(n);
    let mut left = memory;
    per_tier
        .iter()
        .enumerate()
        .map(|(i, &(tier, bytes))| {
            let m = if i + 1 == per_tier.len() {
                left
            } else {
                ((memory as u128 * bytes as u128) / n.max(1) as u128) as u64
            };
            let m = m.min(left).min(bytes);
            left -= m;
            (tier, bytes, m)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_split_by_the_tiers_bytes_and_sums_up() {
        assert_eq!(split_memory(&[(1, 100)], 100, 100), vec![(1, 100, 100)]);
        assert_eq!(split_memory(&[(1, 100)], 100, 0), vec![(1, 100, 0)]);
        let s = split_memory(&[(0, 300), (1, 100)], 400, 200);
        assert_eq!(s, vec![(0, 300, 150), (1, 100, 50)]);
        // More noted than the request moved (it cannot be): capped, never more than a
        // tier's bytes.
        let s = split_memory(&[(0, 3), (1, 1)], 4, 99);
        assert_eq!(s.iter().map(|x| x.2).sum::<u64>(), 4);
        assert!(s.iter().all(|x| x.2 <= x.1));
    }
}
