//! The core's side of the host-memory cache (`crate::cache`): admitting files, serving
//! their reads and writes from memory, filling blocks from the tiers, writing dirty blocks
//! back, evicting, prefetching, and the `.tierfs/control` commands.
//!
//! Coherence rests on the file's state lock: a file is admitted or dropped only with it held
//! for writing, and every read and write of a cached file goes to its blocks while it is
//! held for reading. So no request ever reads a tier behind a dirty block, and a file in
//! kernel passthrough (whose I/O the daemon never sees) is never admitted.

use crate::cache::entry::Entry;
use crate::cache::{self, Cache, Slot, BLOCK};
use crate::data::passthrough;
use crate::data::Parts;
use crate::error::{Error, Result};
use crate::inodes::file::{FileNode, FileState};
use crate::inodes::pieces;
use crate::layout::FileLayout;
use crate::sys::{self, SetTime};
use crate::tierio::AlignedBuf;
use crate::tierio::Class;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::data::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Threads that fill one prefetched file's blocks together (the tier queues bound what is
/// really in flight).
pub(crate) const PREFETCH_FILL_THREADS: usize = 4;

/// Dirty blocks written back together (one engine batch: requests in flight at once).
pub(crate) const WRITEBACK_BATCH: usize = 8;

/// How long [`crate::data::writeback::shrink_cache`] works at getting under a lowered budget.
pub(crate) const SHRINK_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// At an open (state lock held for writing, pieces open): records a read in the order,
/// queues prefetches, and admits the file if the policy wants it more than what it would
/// displace: with `admit` by its rank; a gradient file on the tier the kernel serves
/// (opened for writing, with or without `admit`) spare ([`crate::cache::SPARE_RANK`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn cache_on_open(
    fs: &Parts<'_>,
    ino: u64,
    parent: u64,
    name: &OsStr,
    node: &Arc<FileNode>,
    st: &mut FileState,
    read: bool,
    admit: bool,
) {
    let Some(c) = &fs.cache else { return };
    if read {
        let next = c.access(parent, ino, st.opens > 0);
        for f in next {
            if f != ino {
                c.queue_prefetch(f, false);
            }
        }
    }
    match &st.cache {
        Some(e) => c.touch(e),
        None if st.bypassed() => {}
        // A gradient on the tier the kernel serves saves that tier a write and a read in
        // memory: it takes memory nothing else wants, else the kernel serves it after all.
        // Decided by where the file is, not by whether this open could use passthrough
        // (a reader's late RELEASE refuses it), so it is never ranked first there. Only a
        // write of a file whose size is known: a read would only copy it in through the
        // daemon (it is rewritten before it is read again), and a new file's memory could
        // not be reserved whole, so it would be dropped part-written and its handle left
        // to the daemon, uncached.
        None if !read && node.size() > 0 && spare_gradient(fs, st, name) => {
            let rank = crate::cache::SPARE_RANK;
            self::admit(fs, c, ino, parent, name.as_bytes(), node, st, rank, true);
        }
        None if admit => {
            let rank = c.rank_of(parent, ino, name.as_bytes());
            self::admit(fs, c, ino, parent, name.as_bytes(), node, st, rank, false);
        }
        None => {}
    }
}

/// A DeepSpeed gradient swap file, whole on the tier the kernel serves with passthrough on:
/// held spare ([`crate::cache::SPARE_RANK`]) when memory has room. Not on a tier that
/// refuses DeepSpeed's 1 KiB-aligned `O_DIRECT` tails: the kernel cannot serve its opens
/// there, so the daemon does, and memory is worth its rank.
fn spare_gradient(fs: &Parts<'_>, st: &FileState, name: &OsStr) -> bool {
    passthrough::enabled(fs)
        && crate::cache::is_gradient(name.as_bytes())
        && crate::inodes::types::is_deepspeed_swap(name)
        && matches!(st.layout, crate::layout::FileLayout::Whole { tier }
            if passthrough::kernel_first(fs, tier) && fs.tiers[tier].small_direct_io)
}

/// Makes room and installs a cache entry (state lock held for writing).
#[allow(clippy::too_many_arguments)]
pub(crate) fn admit(
    fs: &Parts<'_>,
    c: &Cache<FileNode>,
    ino: u64,
    parent: u64,
    name: &[u8],
    node: &Arc<FileNode>,
    st: &mut FileState,
    rank: u64,
    spare: bool,
) -> bool {
    let size = node.size();
    if size > c.cfg.max_file || st.migration.is_some() {
        // A file mid-migration has its bytes in two layouts: it stays uncached.
        return false;
    }
    let need = cache::reserve_for(size);
    if !make_room(fs, c, need, rank, ino) {
        if !spare {
            // A spare file refused is an ordinary passthrough open, not a refusal.
            c.counters.refusals.fetch_add(1, Ordering::Relaxed);
        }
        return false;
    }
    // Its pieces have every byte, and so its times.
    *node.mtime.lock() = None;
    st.cache = Some(c.insert(ino, parent, name, node, node.size(), need, spare));
    true
}

/// Takes `need` bytes of the budget, evicting clean files ranked above `rank` if it must.
pub(crate) fn make_room(
    fs: &Parts<'_>,
    c: &Cache<FileNode>,
    need: u64,
    rank: u64,
    me: u64,
) -> bool {
    for _ in 0..3 {
        if c.try_reserve(need) {
            return true;
        }
        let Some(victims) = c.victims(need, rank, me) else {
            return false;
        };
        for v in victims {
            evict(fs, c, &v.node, &v.entry);
        }
    }
    c.try_reserve(need)
}

/// Drops a clean cached file to free its memory. Never waits for its lock (the caller
/// may hold another file's): a busy file is skipped.
pub(crate) fn evict(
    fs: &Parts<'_>,
    c: &Cache<FileNode>,
    node: &Arc<FileNode>,
    e: &Arc<Entry>,
) -> bool {
    let Some(mut st) = node.state.try_write() else {
        return false;
    };
    let mine = st.cache.as_ref().is_some_and(|x| Arc::ptr_eq(x, e));
    if !mine || e.dirty_blocks() > 0 {
        return false;
    }
    st.cache = None;
    release_space(fs, e);
    c.remove(e.ino, e, true);
    if st.opens == 0 {
        st.pieces.iter_mut().for_each(|p| *p = None);
    }
    true
}

/// Writes a cached file back and drops it from the cache (state lock held for
/// writing), before its layout or size changes behind the cache. On a write-back error
/// the file stays cached, dirty, and the error is returned.
pub(crate) fn uncache_locked(fs: &Parts<'_>, node: &FileNode, st: &mut FileState) -> Result<()> {
    let (Some(c), Some(e)) = (&fs.cache, st.cache.clone()) else {
        return Ok(());
    };
    {
        let _wb = e.writeback.lock();
        write_back_locked(fs, c, node, st, &e, None)?;
    }
    st.cache = None;
    release_space(fs, &e);
    c.remove(e.ino, &e, false);
    if st.opens == 0 {
        st.pieces.iter_mut().for_each(|p| *p = None);
    }
    Ok(())
}

/// The file is gone for good (unlinked and forgotten): its dirty bytes need no tier.
pub(crate) fn cache_forget(fs: &Parts<'_>, f: &FileNode) {
    let Some(c) = &fs.cache else { return };
    let mut st = f.state.write();
    if let Some(e) = st.cache.take() {
        release_space(fs, &e);
        c.remove(e.ino, &e, false);
    }
}

/// Promises tier space for a cached file growing to `end` bytes, whose new bytes stay
/// in memory until written back (state lock held): false when a tier of its layout
/// cannot promise it (full, or at its `capacity`). The write then goes to the tiers,
/// where a full tier moves the file and only a write no tier can take fails (ENOSPC):
/// the cache never takes bytes it could not write back.
pub(crate) fn reserve_space(fs: &Parts<'_>, st: &FileState, e: &Entry, end: u64) -> bool {
    let mut p = e.space.lock();
    if end <= p.upto {
        return true;
    }
    let l = &st.layout;
    let want: Vec<(usize, u64)> = l
        .tiers()
        .into_iter()
        .map(|t| (t, l.piece_len(t, end) - l.piece_len(t, p.upto)))
        .collect();
    for (i, (t, n)) in want.iter().enumerate() {
        if !fs.tiers[*t].try_reserve(*n) {
            for (u, m) in &want[..i] {
                fs.tiers[*u].unreserve(*m);
            }
            return false;
        }
    }
    p.per_tier.resize(fs.tiers.len(), 0);
    for (t, n) in want {
        p.per_tier[t] += n;
    }
    p.upto = end;
    true
}

/// The tiers now hold a cached file up to `written` bytes (a write-back finished):
/// gives back the space promised for them, keeping what its later growth holds.
pub(crate) fn settle_space(fs: &Parts<'_>, st: &FileState, e: &Entry, written: u64) {
    let mut p = e.space.lock();
    let l = &st.layout;
    for t in 0..p.per_tier.len() {
        let keep = if written >= p.upto {
            0
        } else {
            l.piece_len(t, p.upto) - l.piece_len(t, written)
        };
        let give = p.per_tier[t].saturating_sub(keep);
        fs.tiers[t].unreserve(give);
        p.per_tier[t] -= give;
    }
    p.upto = p.upto.max(written);
}

/// Gives back all the tier space promised to a cached file (it leaves the cache, or
/// every byte of it reached its new tiers).
pub(crate) fn release_space(fs: &Parts<'_>, e: &Entry) {
    let mut p = e.space.lock();
    for (t, n) in p.per_tier.iter_mut().enumerate() {
        fs.tiers[t].unreserve(*n);
        *n = 0;
    }
}

/// Fills one block from the tiers (its lock held). Bytes past what the tiers hold read
/// as zeros: a cached file's tail may exist only in memory yet.
pub(crate) fn fill(
    fs: &Parts<'_>,
    node: &FileNode,
    st: &FileState,
    e: &Entry,
    b: u64,
    s: &mut Slot,
    class: Class,
) -> Result<()> {
    let start = b * BLOCK;
    let size = node.size();
    let mut buf = AlignedBuf::zeroed(e.cap(b));
    if start < size {
        let n = ((size - start).min(BLOCK) as usize).min(buf.len());
        read_lenient(fs, st, start, &mut buf[..n], class)?;
    }
    s.buf = Some(buf);
    s.valid = true;
    Ok(())
}

/// Reads a range from the tiers, zeros where a piece is shorter.
pub(crate) fn read_lenient(
    fs: &Parts<'_>,
    st: &FileState,
    off: u64,
    buf: &mut [u8],
    class: Class,
) -> Result<()> {
    io::read_extents(fs.io, st, off, buf, class)
}

/// Serves a read of a cached file (state lock held for reading); a block not in memory
/// is filled at `class`.
pub(crate) fn cached_read(
    fs: &Parts<'_>,
    node: &FileNode,
    st: &FileState,
    e: &Entry,
    off: u64,
    buf: &mut [u8],
    class: Class,
) -> Result<()> {
    let mut done = 0usize;
    while done < buf.len() {
        let pos = off + done as u64;
        let at = (pos % BLOCK) as usize;
        let n = (buf.len() - done).min(BLOCK as usize - at);
        with_block(fs, node, st, e, pos, n, class, |data| {
            buf[done..done + n].copy_from_slice(data)
        })?;
        done += n;
    }
    Ok(())
}

/// Serves a read of a cached file that lies within one block straight from the block's
/// memory: `reply` gets the bytes while the block is locked, so a FUSE transport can hand
/// them to the kernel with no copy in the daemon (the copy into a reply buffer was a third
/// of the daemon's CPU on cached reads). `None`, without calling `reply`, for a read that
/// spans blocks: the caller reads it into a buffer instead.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cached_read_with<R>(
    fs: &Parts<'_>,
    node: &FileNode,
    st: &FileState,
    e: &Entry,
    off: u64,
    len: usize,
    class: Class,
    reply: impl FnOnce(&[u8]) -> R,
) -> Result<Option<R>> {
    if (off % BLOCK) as usize + len > BLOCK as usize {
        return Ok(None);
    }
    let r = with_block(fs, node, st, e, off, len, class, reply)?;
    let c = fs.cache.as_ref().expect("cached file without a cache");
    c.counters
        .zero_copy_bytes
        .fetch_add(len as u64, Ordering::Relaxed);
    Ok(Some(r))
}

/// Hands `use_bytes` the `n` bytes at `pos` of one block of a cached file (within the
/// block), the block's lock held: a hit, or a miss filled from the tiers at `class` first.
#[allow(clippy::too_many_arguments)]
fn with_block<R>(
    fs: &Parts<'_>,
    node: &FileNode,
    st: &FileState,
    e: &Entry,
    pos: u64,
    n: usize,
    class: Class,
    use_bytes: impl FnOnce(&[u8]) -> R,
) -> Result<R> {
    let c = fs.cache.as_ref().expect("cached file without a cache");
    let b = pos / BLOCK;
    let at = (pos % BLOCK) as usize;
    let slot = e
        .slot(b)
        .ok_or(Error::Invalid("read past a cached file's blocks"))?;
    let mut s = slot.lock();
    if s.valid {
        c.counters.hit_bytes.fetch_add(n as u64, Ordering::Relaxed);
        if class == Class::DemandRead {
            crate::tier::app::served_from_memory(n as u64);
        }
        if s.prefetched {
            s.prefetched = false;
            c.counters
                .prefetch_used_bytes
                .fetch_add(s.len() as u64, Ordering::Relaxed);
        }
    } else {
        fill(fs, node, st, e, b, &mut s, class)?;
        c.counters.miss_bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
    // A block filled or written before the file grew past it: the rest is a hole.
    s.ensure(at + n, &c.counters);
    let data = s.buf.as_ref().expect("valid slot has a buffer");
    Ok(use_bytes(&data[at..at + n]))
}

/// Where a write's bytes are.
pub(crate) enum WriteSrc<'a> {
    Slice(&'a [u8]),
    /// A FUSE transport's page-aligned request buffer holding exactly one block's bytes:
    /// a block-aligned write of it is taken as the block's memory, with no copy (see
    /// [`crate::cache::entry::Slot::adopt`]), and `buf` gets a buffer back in exchange.
    Block(&'a mut AlignedBuf),
}

impl WriteSrc<'_> {
    pub(crate) fn len(&self) -> usize {
        self.bytes().len()
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            WriteSrc::Slice(d) => d,
            WriteSrc::Block(b) => b,
        }
    }
}

/// Takes a write into a cached file's blocks (state lock held for reading). `Ok(false)`
/// when the file would outgrow what the cache can give it, or what its tiers can
/// promise to hold at write-back: the caller drops it from the cache and writes to the
/// tiers.
pub(crate) fn cached_write(
    fs: &Parts<'_>,
    node: &FileNode,
    st: &FileState,
    e: &Entry,
    off: u64,
    src: &mut WriteSrc<'_>,
) -> Result<bool> {
    let c = fs.cache.as_ref().expect("cached file without a cache");
    let end = off + src.len() as u64;
    if end > node.size() && !reserve_space(fs, st, e, end) {
        return Ok(false);
    }
    let want = cache::reserve_for(end);
    if want > e.reserved() {
        let extra = want - e.reserved();
        // A growing file wins memory from the others, but a spare one only free memory.
        let rank = if e.spare { cache::SPARE_RANK } else { 0 };
        if want > cache::reserve_for(c.cfg.max_file) || !make_room(fs, c, extra, rank, e.ino) {
            return Ok(false);
        }
        c.grow(e, want);
    }
    let new_size = node.size().max(end);
    let len = src.len();
    let mut done = 0usize;
    while done < len {
        let pos = off + done as u64;
        let b = pos / BLOCK;
        let at = (pos % BLOCK) as usize;
        let n = (len - done).min(BLOCK as usize - at);
        let slot = e.slot(b).expect("grown above");
        let mut s = slot.lock();
        match src {
            // The whole write is this one block: `buf` holds other bytes once taken.
            WriteSrc::Block(buf) if n == len && n == BLOCK as usize && e.cap(b) == n => {
                s.adopt(buf, &c.counters);
                c.counters
                    .zero_copy_bytes
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            _ => {
                // Covering the whole block, or all of it up to the file's end, needs no
                // read.
                let whole = at == 0 && (n as u64 == BLOCK || pos + n as u64 >= new_size);
                if !s.valid {
                    if whole {
                        s.buf = Some(AlignedBuf::zeroed(e.cap(b)));
                        s.valid = true;
                    } else {
                        fill(fs, node, st, e, b, &mut s, Class::DemandWrite)?;
                    }
                }
                // A last block the file has grown into.
                s.ensure(at + n, &c.counters);
                s.buf.as_mut().expect("valid slot has a buffer")[at..at + n]
                    .copy_from_slice(&src.bytes()[done..done + n]);
            }
        }
        s.prefetched = false;
        e.set_dirty(&mut s, &c.counters);
        // The size moves while the block is still locked: a write-back that locks it next
        // then sees every byte it holds (it writes up to the size it reads then).
        let old = node.size.fetch_max(pos + n as u64, Ordering::AcqRel);
        if pos + n as u64 > old && node.counted() {
            pieces::account_resize(fs.tiers, &st.layout, old, pos + n as u64);
        }
        done += n;
    }
    c.counters
        .absorbed_bytes
        .fetch_add(len as u64, Ordering::Relaxed);
    crate::tier::app::served_from_memory(len as u64);
    c.touch(e);
    Ok(true)
}

/// Writes a cached file's dirty blocks to its tiers, all of them or (with `batches`)
/// that many engine batches of them; the state lock held, for reading or writing, then
/// the entry's write-back lock (always in that order). Returns whether any dirty block
/// is left; those of an inode failed by a panic are never written ([`Error::Failed`]).
pub(crate) fn write_back_locked(
    fs: &Parts<'_>,
    c: &Cache<FileNode>,
    node: &FileNode,
    st: &FileState,
    e: &Entry,
    batches: Option<usize>,
) -> Result<bool> {
    if e.dirty_blocks() == 0 {
        return Ok(false);
    }
    // After a panic the inode's state is not trusted (its layout and open pieces may be
    // out of step): its data on the tiers stays as it is, and the unmount reports its
    // bytes in memory lost. A torn move's inode is written back (`contain::writes_back`).
    if !fs.contain.writes_back(e.ino) {
        return Err(Error::Failed { ino: e.ino });
    }
    let mut budget = batches.unwrap_or(usize::MAX);
    for t in st.layout.tiers() {
        pieces::open_piece(fs.tiers, st, t, "write back")?;
    }
    let slots = e.all_slots();
    let mut b = 0usize;
    while b < slots.len() {
        // Up to WRITEBACK_BATCH dirty blocks at once, locked in block order (every other
        // user locks one block at a time, so this cannot deadlock), as one engine batch.
        let mut batch = Vec::with_capacity(WRITEBACK_BATCH);
        while b < slots.len() && batch.len() < WRITEBACK_BATCH {
            let s = slots[b].lock();
            if s.dirty {
                batch.push((b as u64 * BLOCK, s));
            }
            b += 1;
        }
        if batch.is_empty() {
            continue;
        }
        if budget == 0 {
            // More to do; the caller comes back (after letting others in).
            return Ok(true);
        }
        // Read with the blocks locked: every byte written into them counts in it (a writer
        // raises the size before it lets go of a block). A shrink drops the file from the
        // cache first, so no dirty block lies past the end.
        let size = node.size();
        let mut tiers = Vec::new();
        let mut ops = Vec::new();
        let mut bytes = 0u64;
        for (start, s) in &batch {
            let n = size.saturating_sub(*start).min(BLOCK).min(s.len() as u64) as usize;
            bytes += n as u64;
            let data = &s.buf.as_ref().expect("dirty slot has a buffer")[..n];
            for x in st.layout.extents(*start, n) {
                tiers.push(x.tier);
                ops.push(crate::tierio::Op::Write {
                    piece: st.pieces[x.tier].as_ref().expect("checked above"),
                    buf: &data[x.buf..x.buf + x.len],
                    off: x.local,
                });
            }
        }
        let results = io::run_batch(fs.io, Class::WriteBack, &tiers, &mut ops);
        drop(ops);
        if let Some((tier, err)) = results
            .into_iter()
            .zip(tiers)
            .find_map(|(r, t)| r.err().map(|e| (t, e)))
        {
            // Nothing of the batch is marked clean: all of it is written again.
            c.counters.writeback_errors.fetch_add(1, Ordering::Relaxed);
            *e.last_error.lock() = Some(format!("{} ({})", err, fs.tiers[tier].name));
            return Err(Error::tier(
                &fs.tiers[tier].name,
                "write back",
                "(cached file)",
                err,
            ));
        }
        c.counters
            .writeback_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        for (_, s) in &mut batch {
            e.set_clean(s, &c.counters);
        }
        budget -= 1;
    }
    // A file grown in memory past its last written block still needs its full size.
    let size = node.size();
    for t in st.layout.tiers() {
        let want = match &st.layout {
            FileLayout::Whole { .. } => size,
            FileLayout::Stripe(m) => m.piece_len(t, size),
        };
        if let Some(p) = &st.pieces[t] {
            let cur = p.file().metadata().map(|m| m.len()).unwrap_or(want);
            if cur < want {
                p.file().set_len(want).map_err(|err| {
                    pieces::tier_err(fs.tiers, t, "extend", Path::new("(cached file)"), err)
                })?;
            }
        }
    }
    settle_space(fs, st, e, size);
    stamp_mtime(fs, node, st);
    *e.last_error.lock() = None;
    Ok(false)
}

/// After a write-back: the file's mtime as the caller last saw it (its last write, or
/// the time the user set after it) goes onto the primary piece, which the write-back
/// itself just stamped with the present time.
pub(crate) fn stamp_mtime(fs: &Parts<'_>, node: &FileNode, st: &FileState) {
    let Some(t) = *node.mtime.lock() else { return };
    let primary = st.layout.primary();
    if let Some(p) = &st.pieces[primary] {
        if let Err(e) = sys::futimens(
            std::os::fd::AsFd::as_fd(p.file()),
            SetTime::Omit,
            SetTime::At(t),
        ) {
            log::warn!(
                "tier '{}': cannot set the mtime of a written-back file: {e}",
                fs.tiers[primary].name
            );
            fs.tiers[primary].note_error(&e);
        }
    }
}

pub(crate) fn stop_cache(fs: &Parts<'_>) {
    if let Some(c) = &fs.cache {
        c.stop.store(true, Ordering::Relaxed);
        c.wake_all();
        c.queue_prefetch(0, false);
    }
}
