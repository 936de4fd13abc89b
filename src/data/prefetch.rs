//! The cache's background threads: prefetching the files DeepSpeed will read next,
//! writing dirty blocks back, and watching memory pressure.

use crate::cache::entry::Entry;
use crate::cache::{BLOCK, SPARE_RANK};
use crate::data::cached;
use crate::data::passthrough;
use crate::data::Parts;
use crate::error::{Error, Result};
use crate::inodes::file::FileNode;
use crate::inodes::pieces;
use crate::inodes::tree::NodeData;
use crate::inodes::types::*;
use crate::layout::FileLayout;
use crate::tierio::Class;
use crate::tierio::Piece;
use parking_lot::Mutex;
use std::os::unix::ffi::OsStrExt;

use crate::data::cached::PREFETCH_FILL_THREADS;
use crate::data::writeback;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(crate) fn writeback_loop(fs: &Parts<'_>) {
    let Some(c) = &fs.cache else { return };
    let delay = c.cfg.writeback_delay;
    loop {
        let (pressed, all) = c.wait_writeback(std::time::Duration::from_millis(100));
        let stopping = c.stop.load(Ordering::Relaxed);
        if stopping && fs.scratch {
            // Scratch data is thrown away at unmount: nothing to write back.
            return;
        }
        #[allow(clippy::type_complexity)]
        let mut work: Vec<(u64, u64, bool, Arc<FileNode>, Arc<Entry>)> = c
            .residents()
            .into_iter()
            // An inode failed by a panic is never written back (the unmount reports its
            // bytes lost): tried, it would log its refusal every round.
            .filter(|(n, e)| {
                e.dirty_blocks() > 0
                    && !n.gone.load(Ordering::Relaxed)
                    && fs.contain.writes_back(e.ino)
            })
            .filter_map(|(n, e)| {
                let rank = c.rank_of_entry(&e);
                let old = !e.gradient && e.dirty_age().is_some_and(|a| a >= delay);
                let must = all || stopping || old;
                let pressed = pressed.is_some_and(|(r, _)| rank > r);
                (must || pressed).then_some((rank, e.last_use(), must, n, e))
            })
            .collect();
        // Needed last first: the files the cache will give up first; of equal rank the
        // least recently used (DeepSpeed reads gradients in the reverse of their writes).
        work.sort_by_key(|w| (std::cmp::Reverse(w.0), w.1));
        // Files written back only because memory is short: as many bytes as was short.
        let mut short = pressed.map_or(0, |(_, b)| b);
        for (_, _, must, n, e) in work {
            if !must {
                if short == 0 {
                    continue;
                }
                short = short.saturating_sub(e.reserved());
            }
            if let Err(err) = writeback::write_back(fs, &n, &e, e.ino) {
                log::error!(
                    "write-back of inode {} failed (kept in memory): {err}",
                    e.ino
                );
            }
        }
        if stopping {
            return;
        }
    }
}

pub(crate) fn prefetch_loop(fs: &Parts<'_>) {
    let Some(c) = &fs.cache else { return };
    while let Ok((ino, asked)) = c.prefetch_rx.recv() {
        if c.stop.load(Ordering::Relaxed) {
            return;
        }
        if ino == 0 {
            continue;
        }
        c.dequeued(ino);
        if let Err(e) = prefetch(fs, ino, asked) {
            log::debug!("prefetch of inode {ino}: {e}");
        }
    }
}

pub(crate) fn prefetch(fs: &Parts<'_>, ino: u64, asked: bool) -> Result<()> {
    fs.ledger.charge(crate::stats::ledger::Class::Prefetch, || {
        prefetch_file(fs, ino, asked)
    })
}

pub(crate) fn prefetch_file(fs: &Parts<'_>, ino: u64, asked: bool) -> Result<()> {
    let c = fs
        .cache
        .as_ref()
        .ok_or(Error::NotSupported("prefetch without a cache"))?;
    let node = {
        let tree = fs.tree.read();
        let n = tree.get(ino)?;
        let NodeData::File(f) = &n.data else {
            return Err(Error::Invalid("prefetch of something not a file"));
        };
        let f = f.clone();
        let mut st = f.state.write();
        if st.cache.is_none() {
            // A whole file on the fastest tier opens in kernel passthrough (DeepSpeed's
            // O_DIRECT opens too, with "direct"): memory would only take the kernel's
            // place, and spend the daemon's CPU, for it.
            let direct_in_kernel = match fs.passthrough_mode {
                crate::config::Passthrough::Direct => true,
                crate::config::Passthrough::Auto => is_deepspeed_swap(n.name.as_ref()),
                crate::config::Passthrough::Off => false,
            };
            let passthrough_serves = passthrough::enabled(fs)
                && direct_in_kernel
                && matches!(st.layout, FileLayout::Whole { tier } if passthrough::kernel_first(fs, tier));
            if st.bypassed()
                || passthrough_serves
                || st.migration.is_some()
                || st.layout.tiers().iter().any(|t| fs.tiers[*t].missing)
            {
                return Ok(());
            }
            let rank = if asked {
                1
            } else {
                c.rank_of(n.parent, ino, n.name.as_bytes())
            };
            if st.opens == 0 {
                for t in st.layout.tiers() {
                    let p = pieces::piece_path(fs.tiers, &tree, ino, t)?;
                    let piece = Piece::open_in(&fs.tiers[t].root, &p, fs.tiers[t].direct_io)
                        .map_err(|e| pieces::tier_err(fs.tiers, t, "open", &p, e))?;
                    st.pieces[t] = Some(Arc::new(piece));
                }
            }
            // The reader may have passed it while it waited in the queue: then it is not
            // needed soon any more, and loading it would only displace what is.
            if rank > c.cfg.prefetch as u64 + 1 {
                return Ok(());
            }
            // A predicted file is read once whether prefetched or not, so displacing a
            // file that will be read again would only add a read: prediction fills free
            // memory (or that of files with no known next use, or spare ones) and nothing else.
            let rank = if asked { rank } else { SPARE_RANK - 1 };
            let name = n.name.clone();
            if !cached::admit(
                fs,
                c,
                ino,
                n.parent,
                name.as_bytes(),
                &f,
                &mut st,
                rank,
                false,
            ) {
                if st.opens == 0 {
                    st.pieces.iter_mut().for_each(|p| *p = None);
                }
                return Ok(());
            }
        }
        drop(st);
        f
    };
    let st = node.state.read();
    let Some(e) = st.cache.clone() else {
        return Ok(());
    };
    let blocks = node.size().div_ceil(BLOCK).min(e.blocks());
    let next = AtomicU64::new(0);
    let loaded = AtomicU64::new(0);
    let err: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..PREFETCH_FILL_THREADS.min(blocks as usize) {
            scope.spawn(|| loop {
                let b = next.fetch_add(1, Ordering::Relaxed);
                if b >= blocks || c.stop.load(Ordering::Relaxed) {
                    return;
                }
                let Some(slot) = e.slot(b) else { return };
                let mut s = slot.lock();
                if s.valid {
                    continue;
                }
                match cached::fill(fs, &node, &st, &e, b, &mut s, Class::Prefetch) {
                    Ok(()) => {
                        s.prefetched = true;
                        loaded.fetch_add(s.len() as u64, Ordering::Relaxed);
                    }
                    Err(x) => {
                        *err.lock() = Some(x);
                        return;
                    }
                }
            });
        }
    });
    let n = loaded.load(Ordering::Relaxed);
    if n > 0 {
        c.counters.prefetch_files.fetch_add(1, Ordering::Relaxed);
        c.counters.prefetch_bytes.fetch_add(n, Ordering::Relaxed);
        fs.ledger.moved(crate::stats::ledger::Class::Prefetch, n);
    }
    match err.into_inner() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

pub(crate) fn memory_watch_loop(fs: &Parts<'_>) {
    use crate::cache::memory;
    let Some(c) = &fs.cache else { return };
    let Some(limit) = &c.watch else { return };
    let reserve = memory::reserve_for(limit.bytes);
    let mut low = false;
    while !c.stop.load(Ordering::Relaxed) {
        std::thread::sleep(memory::POLL);
        let Some(in_use) = limit.in_use() else {
            continue;
        };
        let free = limit.bytes.saturating_sub(in_use);
        let cur = c.budget();
        let next = memory::next_budget(cur, c.used(), c.cfg.size, free, reserve);
        if next < cur {
            // Staging giving way is what it is for, not a fault: INFO, once a spell.
            if !low {
                log::info!(
                    "memory pressure: {} free of {} (keeping {} free); staging budget \
                     {} -> {}",
                    crate::units::fmt_bytes(free),
                    limit.describe(),
                    crate::units::fmt_bytes(reserve),
                    crate::units::fmt_bytes(cur),
                    crate::units::fmt_bytes(next)
                );
            }
            low = true;
            fs.ledger
                .charge(crate::stats::ledger::Class::WriteBack, || {
                    writeback::shrink_cache(fs, next)
                });
        } else if next > cur {
            c.set_budget(next);
            if next == c.cfg.size && low {
                log::info!(
                    "memory pressure over: staging budget back to {}",
                    crate::units::fmt_bytes(next)
                );
                low = false;
            }
        }
    }
}
