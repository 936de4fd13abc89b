//! The core's side of the host-memory cache (`crate::cache`): admitting files, serving
//! their reads and writes from memory, filling blocks from the tiers, writing dirty blocks
//! back, evicting, prefetching, and the `.tierfs/control` commands.
//!
//! Coherence rests on the file's state lock: a file is admitted or dropped only with it held
//! for writing, and every read and write of a cached file goes to its blocks while it is
//! held for reading. So no request ever reads a tier behind a dirty block, and a file in
//! kernel passthrough (whose I/O the daemon never sees) is never admitted.

use super::*;
use crate::cache::{self, Cache, Entry, Slot, BLOCK};
use crate::control::Command;
use std::time::Instant;

/// Threads that fill one prefetched file's blocks together (the tier queues bound what is
/// really in flight).
const PREFETCH_FILL_THREADS: usize = 4;

/// Dirty blocks written back together (one engine batch: requests in flight at once).
const WRITEBACK_BATCH: usize = 8;

/// How long [`TierFs::shrink_cache`] works at getting under a lowered budget.
const SHRINK_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

impl TierFs {
    pub fn cache(&self) -> Option<&Arc<Cache>> {
        self.cache.as_ref()
    }

    /// At an open (state lock held for writing, pieces open): records a read in the order,
    /// queues prefetches, and with `admit` admits the file if the policy wants it more than
    /// what it would displace (not when kernel passthrough is to serve it instead).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cache_on_open(
        &self,
        ino: u64,
        parent: u64,
        name: &OsStr,
        node: &Arc<FileNode>,
        st: &mut FileState,
        read: bool,
        admit: bool,
    ) {
        let Some(c) = &self.cache else { return };
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
            None => {
                if st.pt_opens == 0 && admit {
                    let rank = c.rank_of(parent, ino, name.as_bytes());
                    self.admit(c, ino, parent, name.as_bytes(), node, st, rank);
                }
            }
        }
    }

    /// Makes room and installs a cache entry (state lock held for writing).
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        c: &Cache,
        ino: u64,
        parent: u64,
        name: &[u8],
        node: &Arc<FileNode>,
        st: &mut FileState,
        rank: u64,
    ) -> bool {
        let size = node.size();
        if size > c.cfg.max_file || st.migration.is_some() {
            // A file mid-migration has its bytes in two layouts: it stays uncached.
            return false;
        }
        let need = cache::reserve_for(size);
        if !self.make_room(c, need, rank, ino) {
            c.counters.refusals.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        // Its pieces have every byte, and so its times.
        *node.mtime.lock() = None;
        st.cache = Some(c.insert(ino, parent, name, node, need));
        true
    }

    /// Takes `need` bytes of the budget, evicting clean files ranked above `rank` if it must.
    fn make_room(&self, c: &Cache, need: u64, rank: u64, me: u64) -> bool {
        for _ in 0..3 {
            if c.try_reserve(need) {
                return true;
            }
            let Some(victims) = c.victims(need, rank, me) else {
                return false;
            };
            for v in victims {
                self.evict(c, &v.node, &v.entry);
            }
        }
        c.try_reserve(need)
    }

    /// Drops a clean cached file to free its memory. Never waits for its lock (the caller
    /// may hold another file's): a busy file is skipped.
    fn evict(&self, c: &Cache, node: &Arc<FileNode>, e: &Arc<Entry>) -> bool {
        let Some(mut st) = node.state.try_write() else {
            return false;
        };
        let mine = st.cache.as_ref().is_some_and(|x| Arc::ptr_eq(x, e));
        if !mine || e.dirty_blocks() > 0 {
            return false;
        }
        st.cache = None;
        self.release_space(e);
        c.remove(e.ino, e, true);
        if st.opens == 0 {
            st.pieces.iter_mut().for_each(|p| *p = None);
        }
        true
    }

    /// Writes a cached file back and drops it from the cache (state lock held for
    /// writing), before its layout or size changes behind the cache. On a write-back error
    /// the file stays cached, dirty, and the error is returned.
    pub(super) fn uncache_locked(&self, node: &FileNode, st: &mut FileState) -> Result<()> {
        let (Some(c), Some(e)) = (&self.cache, st.cache.clone()) else {
            return Ok(());
        };
        {
            let _wb = e.writeback.lock();
            self.write_back_locked(c, node, st, &e, None)?;
        }
        st.cache = None;
        self.release_space(&e);
        c.remove(e.ino, &e, false);
        if st.opens == 0 {
            st.pieces.iter_mut().for_each(|p| *p = None);
        }
        Ok(())
    }

    /// The file is gone for good (unlinked and forgotten): its dirty bytes need no tier.
    pub(super) fn cache_forget(&self, f: &FileNode) {
        let Some(c) = &self.cache else { return };
        let mut st = f.state.write();
        if let Some(e) = st.cache.take() {
            self.release_space(&e);
            c.remove(e.ino, &e, false);
        }
    }

    /// Promises tier space for a cached file growing to `end` bytes, whose new bytes stay
    /// in memory until written back (state lock held): false when a tier of its layout
    /// cannot promise it (full, or at its `capacity`). The write then goes to the tiers,
    /// where a full tier moves the file and only a write no tier can take fails (ENOSPC):
    /// the cache never takes bytes it could not write back.
    fn reserve_space(&self, st: &FileState, e: &Entry, end: u64) -> bool {
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
            if !self.tiers[*t].try_reserve(*n) {
                for (u, m) in &want[..i] {
                    self.tiers[*u].unreserve(*m);
                }
                return false;
            }
        }
        p.per_tier.resize(self.tiers.len(), 0);
        for (t, n) in want {
            p.per_tier[t] += n;
        }
        p.upto = end;
        true
    }

    /// The tiers now hold a cached file up to `written` bytes (a write-back finished):
    /// gives back the space promised for them, keeping what its later growth holds.
    fn settle_space(&self, st: &FileState, e: &Entry, written: u64) {
        let mut p = e.space.lock();
        let l = &st.layout;
        for t in 0..p.per_tier.len() {
            let keep = if written >= p.upto {
                0
            } else {
                l.piece_len(t, p.upto) - l.piece_len(t, written)
            };
            let give = p.per_tier[t].saturating_sub(keep);
            self.tiers[t].unreserve(give);
            p.per_tier[t] -= give;
        }
        p.upto = p.upto.max(written);
    }

    /// Gives back all the tier space promised to a cached file (it leaves the cache, or
    /// every byte of it reached its new tiers).
    pub(super) fn release_space(&self, e: &Entry) {
        let mut p = e.space.lock();
        for (t, n) in p.per_tier.iter_mut().enumerate() {
            self.tiers[t].unreserve(*n);
            *n = 0;
        }
    }

    /// Fills one block from the tiers (its lock held). Bytes past what the tiers hold read
    /// as zeros: a cached file's tail may exist only in memory yet.
    fn fill(
        &self,
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
            self.read_lenient(st, start, &mut buf[..n], class)?;
        }
        s.buf = Some(buf);
        s.valid = true;
        Ok(())
    }

    /// Reads a range from the tiers, zeros where a piece is shorter.
    fn read_lenient(&self, st: &FileState, off: u64, buf: &mut [u8], class: Class) -> Result<()> {
        self.read_extents(st, off, buf, class)
    }

    /// Serves a read of a cached file (state lock held for reading); a block not in memory
    /// is filled at `class`.
    pub(super) fn cached_read(
        &self,
        node: &FileNode,
        st: &FileState,
        e: &Entry,
        off: u64,
        buf: &mut [u8],
        class: Class,
    ) -> Result<()> {
        let c = self.cache.as_ref().expect("cached file without a cache");
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let b = pos / BLOCK;
            let at = (pos % BLOCK) as usize;
            let n = (buf.len() - done).min(BLOCK as usize - at);
            let slot = e
                .slot(b)
                .ok_or(Error::Invalid("read past a cached file's blocks"))?;
            let mut s = slot.lock();
            if s.valid {
                c.counters.hit_bytes.fetch_add(n as u64, Ordering::Relaxed);
                if s.prefetched {
                    s.prefetched = false;
                    c.counters
                        .prefetch_used_bytes
                        .fetch_add(s.len() as u64, Ordering::Relaxed);
                }
            } else {
                self.fill(node, st, e, b, &mut s, class)?;
                c.counters.miss_bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            // A block filled or written before the file grew past it: the rest is a hole.
            s.ensure(at + n, &c.counters);
            let data = s.buf.as_ref().expect("valid slot has a buffer");
            buf[done..done + n].copy_from_slice(&data[at..at + n]);
            done += n;
        }
        Ok(())
    }

    /// Takes a write into a cached file's blocks (state lock held for reading). `Ok(false)`
    /// when the file would outgrow what the cache can give it, or what its tiers can
    /// promise to hold at write-back: the caller drops it from the cache and writes to the
    /// tiers.
    pub(super) fn cached_write(
        &self,
        node: &FileNode,
        st: &FileState,
        e: &Entry,
        off: u64,
        data: &[u8],
    ) -> Result<bool> {
        let c = self.cache.as_ref().expect("cached file without a cache");
        let end = off + data.len() as u64;
        if end > node.size() && !self.reserve_space(st, e, end) {
            return Ok(false);
        }
        let want = cache::reserve_for(end);
        if want > e.reserved() {
            let extra = want - e.reserved();
            if want > cache::reserve_for(c.cfg.max_file) || !self.make_room(c, extra, 0, e.ino) {
                return Ok(false);
            }
            c.grow(e, want);
        }
        let new_size = node.size().max(end);
        let mut done = 0usize;
        while done < data.len() {
            let pos = off + done as u64;
            let b = pos / BLOCK;
            let at = (pos % BLOCK) as usize;
            let n = (data.len() - done).min(BLOCK as usize - at);
            let slot = e.slot(b).expect("grown above");
            let mut s = slot.lock();
            // Covering the whole block, or all of it up to the file's end, needs no read.
            let whole = at == 0 && (n as u64 == BLOCK || pos + n as u64 >= new_size);
            if !s.valid {
                if whole {
                    s.buf = Some(AlignedBuf::zeroed(e.cap(b)));
                    s.valid = true;
                } else {
                    self.fill(node, st, e, b, &mut s, Class::DemandWrite)?;
                }
            }
            // A last block the file has grown into.
            s.ensure(at + n, &c.counters);
            s.buf.as_mut().expect("valid slot has a buffer")[at..at + n]
                .copy_from_slice(&data[done..done + n]);
            s.prefetched = false;
            e.set_dirty(&mut s, &c.counters);
            // The size moves while the block is still locked: a write-back that locks it next
            // then sees every byte it holds (it writes up to the size it reads then).
            let old = node.size.fetch_max(pos + n as u64, Ordering::AcqRel);
            if pos + n as u64 > old {
                self.account_resize(&st.layout, old, pos + n as u64);
            }
            done += n;
        }
        c.counters
            .absorbed_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        c.touch(e);
        Ok(true)
    }

    /// Writes a cached file's dirty blocks to its tiers, all of them or (with `batches`)
    /// that many engine batches of them; the state lock held, for reading or writing, then
    /// the entry's write-back lock (always in that order). Returns whether any dirty block
    /// is left.
    fn write_back_locked(
        &self,
        c: &Cache,
        node: &FileNode,
        st: &FileState,
        e: &Entry,
        batches: Option<usize>,
    ) -> Result<bool> {
        if e.dirty_blocks() == 0 {
            return Ok(false);
        }
        let mut budget = batches.unwrap_or(usize::MAX);
        for t in st.layout.tiers() {
            self.open_piece(st, t, "write back")?;
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
            let results = self.run_batch(Class::WriteBack, &tiers, &mut ops);
            drop(ops);
            if let Some((tier, err)) = results
                .into_iter()
                .zip(tiers)
                .find_map(|(r, t)| r.err().map(|e| (t, e)))
            {
                // Nothing of the batch is marked clean: all of it is written again.
                c.counters.writeback_errors.fetch_add(1, Ordering::Relaxed);
                *e.last_error.lock() = Some(format!("{} ({})", err, self.tiers[tier].name));
                return Err(Error::tier(
                    &self.tiers[tier].name,
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
                        self.tier_err(t, "extend", Path::new("(cached file)"), err)
                    })?;
                }
            }
        }
        self.settle_space(st, e, size);
        self.stamp_mtime(node, st);
        *e.last_error.lock() = None;
        Ok(false)
    }

    /// After a write-back: the file's mtime as the caller last saw it (its last write, or
    /// the time the user set after it) goes onto the primary piece, which the write-back
    /// itself just stamped with the present time.
    pub(super) fn stamp_mtime(&self, node: &FileNode, st: &FileState) {
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
                    self.tiers[primary].name
                );
                self.tiers[primary].note_error(&e);
            }
        }
    }

    /// Writes one cached file back now. A tier that refuses (full, failed) gets the file
    /// moved off it with its bytes, memory included, as a failed write would.
    pub(super) fn write_back(&self, node: &Arc<FileNode>, e: &Arc<Entry>, ino: u64) -> Result<()> {
        let before = self
            .cache
            .as_ref()
            .map_or(0, |c| c.counters.writeback_bytes.load(Ordering::Relaxed));
        let r = self.ledger.charge(crate::ledger::Class::WriteBack, || {
            self.write_back_batches(node, e, ino)
        });
        let after = self
            .cache
            .as_ref()
            .map_or(0, |c| c.counters.writeback_bytes.load(Ordering::Relaxed));
        // Other threads' write-backs may land in between: close enough for a ratio.
        self.ledger.moved(
            crate::ledger::Class::WriteBack,
            after.saturating_sub(before),
        );
        r
    }

    fn write_back_batches(&self, node: &Arc<FileNode>, e: &Arc<Entry>, ino: u64) -> Result<()> {
        let c = self.cache.as_ref().expect("write-back without a cache");
        // A batch at a time, the file's lock let go in between: an open or a demand request
        // of this file waits for one batch at most, not for the whole file.
        let r = loop {
            let st = node.state.read();
            if !st.cache.as_ref().is_some_and(|x| Arc::ptr_eq(x, e)) {
                return Ok(());
            }
            let _wb = e.writeback.lock();
            match self.write_back_locked(c, node, &st, e, Some(1)) {
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
                let bad = self.tiers.iter().position(|t| &t.name == tier);
                log::warn!(
                    "tier '{tier}' refused the write-back of inode {ino} ({source}); moving the file"
                );
                self.relocate(ino, node, bad, node.size())
            }
            r => r,
        }
    }

    /// The background writer: dirty files older than `writeback_delay` (gradient files only
    /// under memory pressure), the files asked for, or everything on `flush`.
    pub fn writeback_loop(&self) {
        let Some(c) = &self.cache else { return };
        let delay = c.cfg.writeback_delay;
        loop {
            let (above, all) = c.wait_writeback(std::time::Duration::from_millis(100));
            let stopping = c.stop.load(Ordering::Relaxed);
            if stopping && self.scratch {
                // Scratch data is thrown away at unmount: nothing to write back.
                return;
            }
            let mut work: Vec<(u64, Arc<FileNode>, Arc<Entry>)> = c
                .residents()
                .into_iter()
                .filter(|(n, e)| e.dirty_blocks() > 0 && !n.gone.load(Ordering::Relaxed))
                .filter_map(|(n, e)| {
                    let rank = c.rank_of_entry(&e);
                    let old = !e.gradient && e.dirty_age().is_some_and(|a| a >= delay);
                    let pressed = above.is_some_and(|r| rank > r);
                    (all || stopping || old || pressed).then_some((rank, n, e))
                })
                .collect();
            // Needed last first: the files the cache will give up first.
            work.sort_by_key(|w| std::cmp::Reverse(w.0));
            for (_, n, e) in work {
                if let Err(err) = self.write_back(&n, &e, e.ino) {
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

    /// Writes every dirty cached file back (control `flush`); the first error.
    pub fn flush_cache(&self) -> Result<()> {
        match self.write_back_all().into_iter().next() {
            Some((_, _, err)) => Err(err),
            None => Ok(()),
        }
    }

    /// Writes every dirty cached file back; the ones that could not be: (inode, dirty
    /// bytes, why).
    pub(super) fn write_back_all(&self) -> Vec<(u64, u64, Error)> {
        let Some(c) = &self.cache else {
            return Vec::new();
        };
        let mut failed = Vec::new();
        for (n, e) in c.residents() {
            if e.dirty_blocks() == 0 || n.gone.load(Ordering::Relaxed) {
                continue;
            }
            if let Err(err) = self.write_back(&n, &e, e.ino) {
                log::error!("write-back of inode {} failed: {err}", e.ino);
                let dirty: u64 = e
                    .all_slots()
                    .iter()
                    .map(|s| s.lock())
                    .filter(|s| s.dirty)
                    .map(|s| s.len() as u64)
                    .sum();
                failed.push((e.ino, dirty, err));
            }
        }
        failed
    }

    /// The prefetcher: loads predicted files into the cache, behind demand I/O.
    pub fn prefetch_loop(&self) {
        let Some(c) = &self.cache else { return };
        while let Ok((ino, asked)) = c.prefetch_rx.recv() {
            if c.stop.load(Ordering::Relaxed) {
                return;
            }
            if ino == 0 {
                continue;
            }
            c.dequeued(ino);
            if let Err(e) = self.prefetch(ino, asked) {
                log::debug!("prefetch of inode {ino}: {e}");
            }
        }
    }

    /// Loads one file into the cache (admitting it if the policy lets it in). `asked`: a
    /// `prefetch` command, wanted now whatever the order says.
    pub fn prefetch(&self, ino: u64, asked: bool) -> Result<()> {
        self.ledger.charge(crate::ledger::Class::Prefetch, || {
            self.prefetch_file(ino, asked)
        })
    }

    fn prefetch_file(&self, ino: u64, asked: bool) -> Result<()> {
        let c = self
            .cache
            .as_ref()
            .ok_or(Error::NotSupported("prefetch without a cache"))?;
        let node = {
            let tree = self.tree.read();
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
                let direct_in_kernel = match self.passthrough_mode() {
                    crate::config::Passthrough::Direct => true,
                    crate::config::Passthrough::Auto => is_deepspeed_swap(n.name.as_ref()),
                    crate::config::Passthrough::Off => false,
                };
                let passthrough_serves = self.passthrough_enabled()
                    && direct_in_kernel
                    && matches!(st.layout, FileLayout::Whole { tier } if self.kernel_first(tier));
                if st.pt_opens > 0
                    || passthrough_serves
                    || st.migration.is_some()
                    || st.layout.tiers().iter().any(|t| self.tiers[*t].missing)
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
                        let p = self.piece_path(&tree, ino, t)?;
                        let piece =
                            Piece::open_in(&self.tiers[t].root, &p, self.tiers[t].direct_io)
                                .map_err(|e| self.tier_err(t, "open", &p, e))?;
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
                // memory (or that of files with no known next use) and nothing else.
                let rank = if asked { rank } else { u64::MAX - 1 };
                let name = n.name.clone();
                if !self.admit(c, ino, n.parent, name.as_bytes(), &f, &mut st, rank) {
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
                    match self.fill(&node, &st, &e, b, &mut s, Class::Prefetch) {
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
            self.ledger.moved(crate::ledger::Class::Prefetch, n);
        }
        match err.into_inner() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Lowers (or raises) the cache's budget to `target` bytes and, when it holds more,
    /// evicts until it holds no more than the budget: clean files first, the ones needed
    /// last first (that frees memory at once), then dirty ones, written back first. Gives
    /// up after [`SHRINK_WITHIN`] (files busy all that time, or write-back failing); the
    /// watch's next poll tries again.
    pub fn shrink_cache(&self, target: u64) {
        let Some(c) = &self.cache else { return };
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
                        if !write_back || node.gone.load(Ordering::Relaxed) {
                            continue;
                        }
                        if let Err(err) = self.write_back(&node, &e, e.ino) {
                            log::warn!(
                                "memory pressure: write-back of inode {} failed (kept): {err}",
                                e.ino
                            );
                            continue;
                        }
                    }
                    let bytes = e.reserved();
                    if self.evict(c, &node, &e) {
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

    /// The pressure watch ([`crate::cache::memory`]): every poll, the budget follows the
    /// memory the job leaves free, and the cache gets under a lowered one at once.
    pub fn memory_watch_loop(&self) {
        use crate::cache::memory;
        let Some(c) = &self.cache else { return };
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
                self.ledger
                    .charge(crate::ledger::Class::WriteBack, || self.shrink_cache(next));
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

    /// Stops the cache's threads' loops (they finish what they hold).
    pub fn stop_cache(&self) {
        if let Some(c) = &self.cache {
            c.stop.store(true, Ordering::Relaxed);
            c.wake_all();
            c.queue_prefetch(0, false);
        }
    }

    /// Resolves a control path to an inode.
    fn resolve(&self, path: &Path) -> Result<(u64, u64)> {
        let tree = self.tree.read();
        let mut ino = ROOT_INO;
        let mut parent = ROOT_INO;
        for c in path.components() {
            parent = ino;
            ino = tree.child(ino, c.as_os_str())?;
        }
        Ok((parent, ino))
    }

    /// Runs a `.tierfs/control` write: every line is checked first, so a bad one changes
    /// nothing. Without a cache the hints are accepted and have no effect.
    pub fn control(&self, text: &[u8]) -> Result<()> {
        let text =
            std::str::from_utf8(text).map_err(|_| Error::Invalid("control text is not UTF-8"))?;
        let cmds = crate::control::parse(text).map_err(|e| {
            log::warn!(
                "refused a control write of {} bytes: {}",
                text.len(),
                crate::control::log_excerpt(&e.to_string())
            );
            Error::Invalid("bad control command (the daemon log says which line and why)")
        })?;
        // Resolve every path before acting on any.
        let mut plan = Vec::with_capacity(cmds.len());
        for cmd in cmds {
            let target = match &cmd {
                Command::Order { dir, .. } => Some(self.resolve(dir)?.1),
                Command::Step { dir: Some(d) } => Some(self.resolve(d)?.1),
                Command::Prefetch { path } | Command::Drop { path } => {
                    let (_, ino) = self.resolve(path)?;
                    if !matches!(self.tree.read().get(ino)?.data, NodeData::File(_)) {
                        return Err(Error::Invalid("prefetch/drop of something not a file"));
                    }
                    Some(ino)
                }
                Command::Flush { path: Some(p) } => Some(self.resolve(p)?.1),
                Command::DebugPanic { path } => Some(self.resolve(path)?.1),
                _ => None,
            };
            plan.push((cmd, target));
        }
        // Not a cache hint: armed with or without a cache.
        for (cmd, target) in &plan {
            if let (Command::DebugPanic { .. }, Some(ino)) = (cmd, target) {
                self.arm_panic(*ino);
            }
        }
        let Some(c) = &self.cache else {
            return Ok(());
        };
        for (cmd, target) in plan {
            match cmd {
                Command::Order { hint, dir } => c.hint(
                    (!dir.as_os_str().is_empty()).then_some(target.unwrap_or(ROOT_INO)),
                    hint,
                ),
                Command::Step { .. } => c.mark_step(target),
                Command::Prefetch { .. } => c.queue_prefetch(target.expect("resolved"), true),
                Command::Drop { .. } | Command::Flush { path: Some(_) } => {
                    let ino = target.expect("resolved");
                    let node = match &self.tree.read().get(ino)?.data {
                        NodeData::File(f) => f.clone(),
                        _ => continue,
                    };
                    if matches!(cmd, Command::Drop { .. }) {
                        let mut st = node.state.write();
                        self.uncache_locked(&node, &mut st)?;
                    } else if let Some(e) = node.state.read().cache.clone() {
                        self.write_back(&node, &e, ino)?;
                    }
                }
                Command::Flush { path: None } => self.flush_cache()?,
                Command::DebugPanic { .. } => {}
            }
        }
        Ok(())
    }
}

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

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

impl TierFs {
    pub fn cache_view(&self) -> CacheView {
        // Per FUSE thread: fuser's request buffer, the read reply buffer and an unaligned-write
        // bounce buffer, 1 MiB each at most; per prefetch fill thread nothing (blocks are
        // counted in the cache).
        let buffers_bound = self.threads as u64 * 3 * BLOCK;
        let Some(c) = &self.cache else {
            return CacheView {
                enabled: false,
                config: None,
                size_from: self.staging_from.clone(),
                budget: 0,
                pressure_shrinks: 0,
                pressure_evicted_bytes: 0,
                used: 0,
                allocated: 0,
                dirty: 0,
                hit_bytes: 0,
                miss_bytes: 0,
                hit_ratio: 0.0,
                absorbed_bytes: 0,
                writeback_bytes: 0,
                writeback_errors: 0,
                prefetch_files: 0,
                prefetch_bytes: 0,
                prefetch_used_bytes: 0,
                prefetch_wasted_bytes: 0,
                admissions: 0,
                refusals: 0,
                evictions: 0,
                evicted_bytes: 0,
                discarded_dirty_bytes: 0,
                memory: MemoryView {
                    cache_limit: 0,
                    buffers_bound,
                    bound: buffers_bound,
                    rss: rss_bytes(),
                    job_limit: None,
                    job_in_use: None,
                },
                orders: Vec::new(),
                files: Vec::new(),
            };
        };
        let k = &c.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let tree = self.tree.read();
        let path_of = |ino: u64| {
            tree.rel(ino)
                .map(|p| crate::stats::escape_path(&p))
                .unwrap_or_else(|| format!("(inode {ino}, deleted)"))
        };
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
                    path: path_of(e.ino),
                    size: n.size(),
                    blocks: slots.len() as u64,
                    valid_blocks: valid,
                    dirty_blocks: e.dirty_blocks(),
                    next_use: (c.cfg.policy == crate::config::CachePolicy::Learned
                        && rank != u64::MAX)
                        .then_some(rank),
                    gradient: e.gradient,
                    dirty_age_s: e.dirty_age(),
                    last_error: e.last_error.lock().clone(),
                }
            })
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let orders = c
            .orders()
            .into_iter()
            .map(|(d, o)| OrderEntry {
                dir: if d == ROOT_INO {
                    "/".into()
                } else {
                    path_of(d)
                },
                order: o,
            })
            .collect();
        let (hit, miss) = (get(&k.hit_bytes), get(&k.miss_bytes));
        CacheView {
            enabled: true,
            config: Some(c.cfg.clone()),
            size_from: c.size_from.clone(),
            budget: c.budget(),
            pressure_shrinks: get(&k.pressure_shrinks),
            pressure_evicted_bytes: get(&k.pressure_evicted_bytes),
            used: c.used(),
            allocated,
            dirty: get(&k.dirty_bytes),
            hit_bytes: hit,
            miss_bytes: miss,
            hit_ratio: if hit + miss > 0 {
                hit as f64 / (hit + miss) as f64
            } else {
                0.0
            },
            absorbed_bytes: get(&k.absorbed_bytes),
            writeback_bytes: get(&k.writeback_bytes),
            writeback_errors: get(&k.writeback_errors),
            prefetch_files: get(&k.prefetch_files),
            prefetch_bytes: get(&k.prefetch_bytes),
            prefetch_used_bytes: get(&k.prefetch_used_bytes),
            prefetch_wasted_bytes: get(&k.prefetch_wasted_bytes),
            admissions: get(&k.admissions),
            refusals: get(&k.refusals),
            evictions: get(&k.evictions),
            evicted_bytes: get(&k.evicted_bytes),
            discarded_dirty_bytes: get(&k.discarded_dirty_bytes),
            memory: MemoryView {
                cache_limit: c.cfg.size,
                buffers_bound,
                bound: c.cfg.size + buffers_bound,
                rss: rss_bytes(),
                job_limit: c.watch.as_ref().map(|l| l.bytes),
                job_in_use: c.watch.as_ref().and_then(|l| l.in_use()),
            },
            orders,
            files,
        }
    }

    /// Starts the cache's writer and prefetcher threads (nothing without a cache).
    pub fn start_cache_threads(
        fs: &Arc<TierFs>,
    ) -> std::io::Result<Vec<std::thread::JoinHandle<()>>> {
        let mut out = Vec::new();
        if fs.cache.is_none() {
            return Ok(out);
        }
        let f = fs.clone();
        out.push(
            std::thread::Builder::new()
                .name("tierfs-writeback".into())
                .spawn(move || f.writeback_loop())?,
        );
        let f = fs.clone();
        out.push(
            std::thread::Builder::new()
                .name("tierfs-prefetch".into())
                .spawn(move || f.prefetch_loop())?,
        );
        if fs.cache.as_ref().is_some_and(|c| c.watch.is_some()) {
            let f = fs.clone();
            out.push(
                std::thread::Builder::new()
                    .name("tierfs-memwatch".into())
                    .spawn(move || f.memory_watch_loop())?,
            );
        }
        Ok(out)
    }
}
