//! Moving a file's bytes to a new layout while it stays usable: off a tier that is full or
//! failed (the write that failed then succeeds), or to follow the shares when a striped
//! file is rewritten. Copies first, switches under the file's state lock, removes the old
//! pieces last: a failure at any point leaves the file as it was.

use super::*;

impl TierFs {
    /// How far a stripe pattern's split may drift from the current Eq. 1 shares (largest
    /// per-tier difference) before a file opened for writing is re-laid out.
    const DRIFT: f64 = 0.15;

    /// Whether a striped file's pattern no longer follows the current shares (with
    /// `adapt`: a tier slowed down or recovered since the file was laid out).
    pub(super) fn layout_drifted(&self, layout: &FileLayout) -> bool {
        let FileLayout::Stripe(m) = layout else {
            return false;
        };
        if !self.adapt {
            return false;
        }
        let eligible: Vec<bool> = self
            .tiers
            .iter()
            .map(|t| t.is_healthy() && t.has_room_for(1 << 20))
            .collect();
        let ideal = placement::stripe_pattern(&self.placer.shares(), &eligible);
        if ideal.is_empty() {
            return false;
        }
        let frac = |p: &[u8], t: usize| {
            p.iter().filter(|x| **x as usize == t).count() as f64 / p.len() as f64
        };
        (0..self.tiers.len()).any(|t| (frac(&m.pattern, t) - frac(&ideal, t)).abs() > Self::DRIFT)
    }

    /// Moves a file off tier `bad` (full, or failed): copies its bytes into a new layout on
    /// the other tiers — a stripe pattern over them for a striped file, one tier with room
    /// for a whole file — then switches over and removes the old pieces last. Nothing
    /// written is lost; on any failure the file stays as it was.
    pub(super) fn relocate(
        &self,
        ino: u64,
        node: &Arc<FileNode>,
        bad: Option<usize>,
        need: u64,
    ) -> Result<()> {
        let tree = self.tree.read();
        let rel = tree.rel(ino);
        let mut st = node.state.write();
        let old = st.layout.clone();
        match bad {
            Some(b) if !old.tiers().contains(&b) => return Ok(()), // moved already
            None if !self.layout_drifted(&old) => return Ok(()),
            _ => {}
        }
        if st.pt_opens > 0 {
            // The kernel writes this file's old piece itself: it cannot move under it.
            return Err(Error::NotSupported("moving a file open in passthrough"));
        }
        let size = node.size();
        let want = need.max(size) + (1 << 20);
        let (layout, charge) = match &old {
            FileLayout::Stripe(m) => {
                let eligible: Vec<bool> = self
                    .tiers
                    .iter()
                    .map(|t| Some(t.index) != bad && t.is_healthy() && t.has_room_for(1 << 20))
                    .collect();
                let pattern = placement::stripe_pattern(&self.placer.shares(), &eligible);
                match pattern.len() {
                    0 => return Err(Error::NoSpace(want)),
                    1 => (
                        FileLayout::Whole {
                            tier: pattern[0] as usize,
                        },
                        None,
                    ),
                    _ => (FileLayout::Stripe(StripeMap::new(m.unit, pattern)), None),
                }
            }
            FileLayout::Whole { .. } => {
                let eligible: Vec<bool> = self
                    .tiers
                    .iter()
                    .map(|t| Some(t.index) != bad && t.is_healthy() && t.has_room_for(want))
                    .collect();
                let parent = tree.nodes.get(&ino).map(|n| n.parent).unwrap_or(ROOT_INO);
                let c = self
                    .placer
                    .choose(parent, &eligible)
                    .ok_or(Error::NoSpace(want))?;
                (FileLayout::Whole { tier: c.tier }, Some(c))
            }
        };
        let final_path = |t: usize| match &rel {
            Some(r) => self.tiers[t].path(r),
            None => self.tiers[t].limbo_path(ino),
        };
        // Temporaries live in limbo, which every mount empties.
        let tmp_path = |t: usize| self.tiers[t].limbo.join(format!("{TMP_PREFIX}{ino}"));
        let primary = old.primary();
        let meta = st.pieces[primary]
            .as_ref()
            .ok_or(Error::BadHandle)?
            .file()
            .metadata()
            .map_err(|e| self.tier_err(primary, "fstat", Path::new("(open file)"), e))?;
        let mut made: Vec<usize> = Vec::new();
        let mut new_pieces: Vec<Option<Arc<Piece>>> = vec![None; self.tiers.len()];
        let result = (|| -> Result<()> {
            for t in layout.tiers() {
                let p = tmp_path(t);
                let piece = Piece::open_new_in(
                    &self.tiers[t].root,
                    &p,
                    meta.mode() & 0o7777,
                    self.tiers[t].direct_io,
                )
                .map_err(|e| self.tier_err(t, "create", &p, e))?;
                made.push(t);
                new_pieces[t] = Some(Arc::new(piece));
            }
            let mut buf = AlignedBuf::zeroed(1 << 20);
            let mut off = 0u64;
            while off < size {
                let n = ((size - off) as usize).min(buf.len());
                match st.cache.clone() {
                    // Its newest bytes may be only in memory.
                    Some(e) => self.cached_read(node, &st, &e, off, &mut buf[..n])?,
                    None => self.read_pieces(&st, off, &mut buf[..n])?,
                }
                for ex in layout.extents(off, n) {
                    let piece = new_pieces[ex.tier].as_ref().expect("created above");
                    self.piece_write(ex.tier, piece, &buf[ex.buf..ex.buf + ex.len], ex.local)
                        .map_err(|e| self.tier_err(ex.tier, "write", &tmp_path(ex.tier), e))?;
                }
                off += n as u64;
            }
            let old_primary = final_path(primary);
            let user_xattrs: Vec<(Vec<u8>, Vec<u8>)> = sys::llistxattr(&old_primary)
                .unwrap_or_default()
                .into_iter()
                .filter(|n| n.starts_with(b"user.") && n.as_slice() != LAYOUT_XATTR.as_bytes())
                .filter_map(|n| {
                    let v = sys::lgetxattr(&old_primary, OsStr::from_bytes(&n)).ok()?;
                    Some((n, v))
                })
                .collect();
            for t in layout.tiers() {
                let piece = new_pieces[t].as_ref().expect("created above");
                let p = tmp_path(t);
                // Holes at the end of a piece still count toward the file's size.
                piece
                    .file()
                    .set_len(layout.piece_len(t, size))
                    .map_err(|e| self.tier_err(t, "truncate", &p, e))?;
                piece
                    .file()
                    .sync_all()
                    .map_err(|e| self.tier_err(t, "fsync", &p, e))?;
                if let Err(e) =
                    sys::lsetxattr(&p, OsStr::new(LAYOUT_XATTR), layout.encode().as_bytes(), 0)
                {
                    if matches!(layout, FileLayout::Stripe(_)) {
                        return Err(self.tier_err(t, "set layout xattr on", &p, e));
                    }
                }
                let _ = std::os::unix::fs::lchown(&p, Some(meta.uid()), Some(meta.gid()));
                if t == layout.primary() {
                    for (n, v) in &user_xattrs {
                        let _ = sys::lsetxattr(&p, OsStr::from_bytes(n), v, 0);
                    }
                }
            }
            for t in layout.tiers() {
                let (from, to) = (tmp_path(t), final_path(t));
                fs::rename(&from, &to).map_err(|e| self.tier_err(t, "rename", &to, e))?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            for t in made {
                let _ = fs::remove_file(tmp_path(t));
            }
            if let Some(c) = charge {
                self.placer.release(c);
            }
            return Err(e);
        }
        let new_tiers = layout.tiers();
        for t in old.tiers() {
            if !new_tiers.contains(&t) {
                let p = final_path(t);
                if let Err(e) = fs::remove_file(&p) {
                    // A read-only tier keeps its stale piece; the mount-time scan prefers
                    // the newer copy and sets the old one aside.
                    log::warn!("cannot remove the old piece {}: {e}", p.display());
                    self.tiers[t].note_error(&e);
                }
            }
            let _ = self.tiers[t].counters.files.fetch_update(
                Ordering::Relaxed,
                Ordering::Relaxed,
                |v| Some(v.saturating_sub(1)),
            );
        }
        for t in &new_tiers {
            self.tiers[*t]
                .counters
                .files
                .fetch_add(1, Ordering::Relaxed);
        }
        self.account_resize(&old, size, 0);
        self.account_resize(&layout, 0, size);
        let mut c = node.charge.lock();
        if let Some(old_charge) = c.take() {
            self.placer.release(old_charge);
        }
        *c = charge.map(|ch| self.placer.settle(ch, size));
        drop(c);
        st.pieces = new_pieces;
        if let (Some(c), Some(e)) = (&self.cache, &st.cache) {
            // Every byte, memory's included, is in the new pieces.
            for slot in e.all_slots() {
                e.set_clean(&mut slot.lock(), &c.counters);
            }
        }
        match bad {
            Some(b) => log::info!(
                "moved inode {ino} ({size} bytes) off tier '{}': now {}",
                self.tiers[b].name,
                layout.encode()
            ),
            None => log::info!(
                "re-laid out inode {ino} ({size} bytes) to follow the current shares: now {}",
                layout.encode()
            ),
        }
        st.layout = layout;
        Ok(())
    }
}
