//! Stripe arithmetic, shared by the daemon (which lays files out) and the preload library
//! (which splits a program's requests over a striped file's pieces itself).

/// Stripe arithmetic: logical offset <-> (tier, offset in that tier's piece).
///
/// Stripe k of the file goes to tier `pattern[k % P]`. A tier's piece holds its stripes
/// back to back in logical order, so each piece is itself written sequentially when the
/// file is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeMap {
    pub unit: u64,
    pub pattern: Vec<u8>,
    /// Distinct tiers of the pattern, ascending.
    pub tiers: Vec<usize>,
    /// For each slot of the pattern: how many earlier slots hold the same tier.
    rank: Vec<u64>,
    /// Per tier index: slots per cycle (0 for tiers not in the pattern).
    per_cycle: Vec<u64>,
    /// Per tier index: the slots it occupies, in order.
    slots: Vec<Vec<u64>>,
}

/// One contiguous run of a logical range that lives in a single piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub tier: usize,
    /// Offset inside the tier's piece.
    pub local: u64,
    /// Offset inside the caller's buffer.
    pub buf: usize,
    pub len: usize,
}

impl StripeMap {
    pub fn new(unit: u64, pattern: Vec<u8>) -> StripeMap {
        assert!(unit > 0 && !pattern.is_empty());
        let n = *pattern.iter().max().unwrap() as usize + 1;
        let mut per_cycle = vec![0u64; n];
        let mut slots = vec![Vec::new(); n];
        let mut rank = Vec::with_capacity(pattern.len());
        for (slot, t) in pattern.iter().enumerate() {
            let t = *t as usize;
            rank.push(per_cycle[t]);
            per_cycle[t] += 1;
            slots[t].push(slot as u64);
        }
        let tiers = (0..n).filter(|t| per_cycle[*t] > 0).collect();
        StripeMap {
            unit,
            pattern,
            tiers,
            rank,
            per_cycle,
            slots,
        }
    }

    fn period(&self) -> u64 {
        self.pattern.len() as u64
    }

    /// The tier and piece offset of logical byte `off`.
    pub fn locate(&self, off: u64) -> (usize, u64) {
        let stripe = off / self.unit;
        let cycle = stripe / self.period();
        let slot = (stripe % self.period()) as usize;
        let tier = self.pattern[slot] as usize;
        let local_stripe = cycle * self.per_cycle[tier] + self.rank[slot];
        (tier, local_stripe * self.unit + off % self.unit)
    }

    /// Splits the logical range `[off, off+len)` into per-piece extents, in logical order.
    pub fn extents(&self, off: u64, len: usize) -> Vec<Extent> {
        let mut out = Vec::new();
        let mut done = 0usize;
        while done < len {
            let pos = off + done as u64;
            let in_unit = (self.unit - pos % self.unit) as usize;
            let n = in_unit.min(len - done);
            let (tier, local) = self.locate(pos);
            out.push(Extent {
                tier,
                local,
                buf: done,
                len: n,
            });
            done += n;
        }
        out
    }

    /// The size `tier`'s piece has when the logical file is `size` bytes long.
    pub fn piece_len(&self, tier: usize, size: u64) -> u64 {
        let pc = self.per_cycle.get(tier).copied().unwrap_or(0);
        if pc == 0 || size == 0 {
            return 0;
        }
        let full_stripes = size / self.unit;
        let tail = size % self.unit;
        let cycles = full_stripes / self.period();
        let rem_slot = full_stripes % self.period();
        let before = self.slots[tier].iter().filter(|s| **s < rem_slot).count() as u64;
        let mut len = (cycles * pc + before) * self.unit;
        if tail > 0 && self.pattern[rem_slot as usize] as usize == tier {
            len += tail;
        }
        len
    }

    /// The logical end (one past the last byte) of a piece of `len` bytes on `tier`.
    pub fn logical_end(&self, tier: usize, len: u64) -> u64 {
        let pc = self.per_cycle.get(tier).copied().unwrap_or(0);
        if pc == 0 || len == 0 {
            return 0;
        }
        let last = len - 1;
        let local_stripe = last / self.unit;
        let cycle = local_stripe / pc;
        let k = (local_stripe % pc) as usize;
        let slot = self.slots[tier][k];
        (cycle * self.period() + slot) * self.unit + last % self.unit + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_packs_each_tier_contiguously() {
        let m = StripeMap::new(10, vec![0, 1, 0]);
        assert_eq!(m.locate(0), (0, 0));
        assert_eq!(m.locate(15), (1, 5));
        assert_eq!(m.locate(20), (0, 10));
        assert_eq!(m.locate(30), (0, 20));
        assert_eq!(m.locate(45), (1, 15));
    }

    #[test]
    fn piece_lengths_and_logical_end_agree() {
        let m = StripeMap::new(8, vec![0, 1, 0, 2, 1]);
        for size in 0..200u64 {
            let mut end = 0;
            let mut total = 0;
            for t in 0..3 {
                let l = m.piece_len(t, size);
                total += l;
                end = end.max(m.logical_end(t, l));
            }
            assert_eq!(total, size, "size {size}");
            assert_eq!(end, size, "size {size}");
        }
    }

    #[test]
    fn extents_cover_range_in_order() {
        let m = StripeMap::new(4, vec![1, 0]);
        let ex = m.extents(3, 7);
        assert_eq!(ex.iter().map(|e| e.len).sum::<usize>(), 7);
        assert_eq!(
            ex[0],
            Extent {
                tier: 1,
                local: 3,
                buf: 0,
                len: 1
            }
        );
        assert_eq!(
            ex[1],
            Extent {
                tier: 0,
                local: 0,
                buf: 1,
                len: 4
            }
        );
        assert_eq!(
            ex[2],
            Extent {
                tier: 1,
                local: 4,
                buf: 5,
                len: 2
            }
        );
        // every logical byte maps to a distinct (tier, local) position
        let mut seen = std::collections::HashSet::new();
        for off in 0..100 {
            assert!(seen.insert(m.locate(off)));
        }
    }
}
