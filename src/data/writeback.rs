//! Writing a cached file's dirty blocks back to its tiers: one file, every file (control
//! `flush`, unmount), and down to a lowered memory budget. A write-back that finds its
//! tier full moves the file off it ([`crate::data::migrate::relocate`]) and retries.

use crate::data::{cached, migrate};
use crate::inodes::file::FileNode;
use crate::sys;

use crate::cache::entry::Entry;
use crate::data::cached::SHRINK_WITHIN;
use crate::data::Parts;
use crate::error::{Error, Result};
use crate::inodes::types::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Writes one cached file back now. A tier that refuses (full, failed) gets the file
/// moved off it with its bytes, memory included, as a failed write would.
pub(crate) fn write_back(
    fs: &Parts<'_>,
    node: &Arc<FileNode>,
    e: &Arc<Entry>,
    ino: u64,
) -> Result<()> {
    let before = fs
        .cache
        .as_ref()
        .map_or(0, |c| c.counters.writeback_bytes.load(Ordering::Relaxed));
    let r = fs
        .ledger
        .charge(crate::stats::ledger::Class::WriteBack, || {
            write_back_batches(fs, node, e, ino)
        });
    let after = fs
        .cache
        .as_ref()
        .map_or(0, |c| c.counters.writeback_bytes.load(Ordering::Relaxed));
    // Other threads' write-backs may land in between: close enough for a ratio.
    fs.ledger.moved(
        crate::stats::ledger::Class::WriteBack,
        after.saturating_sub(before),
    );
    r
}

pub(crate) fn write_back_batches(
    fs: &Parts<'_>,
    node: &Arc<FileNode>,
    e: &Arc<Entry>,
    ino: u64,
) -> Result<()> {
    let c = fs.cache.as_ref().expect("write-back without a cache");
    // A batch at a time, the file's lock let go in between: an open or a demand request
    // of this file waits for one batch at most, not for the whole file.
    let r = loop {
        let st = node.state.read();
        if !st.cache.as_ref().is_some_and(|x| Arc::ptr_eq(x, e)) {
            return Ok(());
        }
        let _wb = e.writeback.lock();
        match cached::write_back_locked(fs, c, node, &st, e, Some(1)) {
            Ok(true) => continue,
            Ok(false) => break Ok(()),
            Err(x) => break Err(x),
        }
    };
    match r {
        Err(Error::Tier {
            ref tier,
            ref source,
            ..
        }) if is_rescuable(source) => {
            let bad = fs.tiers.iter().position(|t| &t.name == tier);
            log::warn!(
                "tier '{tier}' refused the write-back of inode {ino} ({source}); moving the file"
            );
            migrate::relocate(fs, ino, node, bad, node.size())
        }
        r => r,
    }
}

/// Writes every dirty cached file back; the ones that could not be: (inode, dirty
/// bytes, why). An inode failed by a panic is among them, with [`Error::Failed`]: no write-back
/// writes one (`cached::write_back_locked`), so its bytes in memory are lost and the
/// caller must say so.
pub(crate) fn write_back_all(fs: &Parts<'_>) -> Vec<(u64, u64, Error)> {
    let Some(c) = &fs.cache else {
        return Vec::new();
    };
    let mut failed = Vec::new();
    for (n, e) in c.residents() {
        if e.dirty_blocks() == 0 || n.gone.load(Ordering::Relaxed) {
            continue;
        }
        if let Err(err) = self::write_back(fs, &n, &e, e.ino) {
            log::error!("write-back of inode {} failed: {err}", e.ino);
            failed.push((e.ino, dirty_bytes(&e), err));
        }
    }
    failed
}

/// The bytes of a cached file's dirty blocks.
fn dirty_bytes(e: &Entry) -> u64 {
    e.all_slots()
        .iter()
        .map(|s| s.lock())
        .filter(|s| s.dirty)
        .map(|s| s.len() as u64)
        .sum()
}

pub(crate) fn flush_cache(fs: &Parts<'_>) -> Result<()> {
    match write_back_all(fs).into_iter().next() {
        Some((_, _, err)) => Err(err),
        None => Ok(()),
    }
}

pub(crate) fn shrink_cache(fs: &Parts<'_>, target: u64) {
    let Some(c) = &fs.cache else { return };
    c.set_budget(target);
    let deadline = Instant::now() + SHRINK_WITHIN;
    let over = || c.used() > c.budget() && Instant::now() < deadline;
    let mut freed = false;
    while over() {
        for write_back in [false, true] {
            for (node, e) in c.residents_by_rank() {
                if !over() {
                    break;
                }
                if e.dirty_blocks() > 0 {
                    // An inode failed by a panic is never written back, so never evicted.
                    if !write_back
                        || node.gone.load(Ordering::Relaxed)
                        || !fs.contain.writes_back(e.ino)
                    {
                        continue;
                    }
                    if let Err(err) = self::write_back(fs, &node, &e, e.ino) {
                        log::warn!(
                            "memory pressure: write-back of inode {} failed (kept): {err}",
                            e.ino
                        );
                        continue;
                    }
                }
                let bytes = e.reserved();
                if cached::evict(fs, c, &node, &e) {
                    freed = true;
                    c.counters
                        .pressure_evicted_bytes
                        .fetch_add(bytes, Ordering::Relaxed);
                }
            }
        }
        if over() {
            // Files held by a request or written to meanwhile: let them go first.
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    if freed {
        sys::trim_heap();
    }
}
