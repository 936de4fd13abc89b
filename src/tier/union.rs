//! Busy periods that programs measured themselves (the direct path's reports), merged so
//! that time two programs spent on a tier at once counts once.
//!
//! A tier's busy time is the wall time with at least one request in flight. The daemon
//! measures its own requests with [`super::Busy`]; programs under `tierfs run` report the
//! periods their descriptors had I/O in flight when they close them. Added as they come,
//! four optimizer ranks reading one tier at once would count the same second four times
//! and the tier would look four times slower than it is. [`Union`] keeps the recent union
//! of what was reported and answers how much of a new report is new.

/// How long reported periods are remembered: a report of a period older than this (a
/// descriptor kept open longer) is counted whole, as nothing is left to overlap it with.
const KEEP_NS: u64 = 60_000_000_000;
/// At most this many disjoint periods are kept; past it the two closest merge (the gap
/// between them counts as busy), which bounds memory and the cost of a report.
const MAX_KEPT: usize = 4096;

/// The union of reported busy periods (`CLOCK_MONOTONIC` nanoseconds).
#[derive(Debug, Default)]
pub struct Union {
    /// Disjoint, sorted by start.
    kept: parking_lot::Mutex<Vec<(u64, u64)>>,
}

impl Union {
    /// Adds `periods` (start, end; any order, may overlap) and returns the nanoseconds
    /// they cover that the union did not already.
    pub fn add(&self, periods: &[(u64, u64)]) -> u64 {
        let mut kept = self.kept.lock();
        let mut new = 0;
        for &(s, e) in periods {
            if e > s {
                new += insert(&mut kept, s, e);
            }
        }
        if let Some(&(_, last)) = kept.last() {
            let horizon = last.saturating_sub(KEEP_NS);
            kept.retain(|&(_, e)| e >= horizon);
        }
        while kept.len() > MAX_KEPT {
            merge_closest(&mut kept);
        }
        new
    }
}

/// Inserts `[s, e)` into the disjoint sorted `kept`; returns the part not covered before.
fn insert(kept: &mut Vec<(u64, u64)>, s: u64, e: u64) -> u64 {
    // The first kept period that ends at or after `s` and the first that starts after `e`
    // bound the ones the new period touches.
    let lo = kept.partition_point(|&(_, pe)| pe < s);
    let hi = kept.partition_point(|&(ps, _)| ps <= e);
    let covered: u64 = kept[lo..hi]
        .iter()
        .map(|&(ps, pe)| pe.min(e).saturating_sub(ps.max(s)))
        .sum();
    let (ns, ne) = kept[lo..hi]
        .iter()
        .fold((s, e), |(a, b), &(ps, pe)| (a.min(ps), b.max(pe)));
    kept.splice(lo..hi, [(ns, ne)]);
    (e - s) - covered
}

fn merge_closest(kept: &mut Vec<(u64, u64)>) {
    let Some(i) = (1..kept.len()).min_by_key(|&i| kept[i].0 - kept[i - 1].1) else {
        return;
    };
    kept[i - 1].1 = kept[i].1;
    kept.remove(i);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_reports_count_their_union_once() {
        let u = Union::default();
        assert_eq!(u.add(&[(100, 200)]), 100);
        assert_eq!(u.add(&[(150, 250)]), 50, "only the part past 200 is new");
        assert_eq!(u.add(&[(120, 180)]), 0, "inside what is known");
        assert_eq!(u.add(&[(300, 400), (50, 310)]), 100 + 50 + 50);
        assert_eq!(u.kept.lock().as_slice(), &[(50, 400)]);
    }

    #[test]
    fn a_period_spanning_several_counts_only_the_gaps() {
        let u = Union::default();
        u.add(&[(10, 20), (30, 40), (50, 60)]);
        assert_eq!(u.add(&[(0, 70)]), 70 - 30);
        assert_eq!(u.kept.lock().as_slice(), &[(0, 70)]);
    }

    #[test]
    fn empty_and_touching_periods() {
        let u = Union::default();
        assert_eq!(
            u.add(&[(5, 5), (9, 3)]),
            0,
            "empty or reversed periods are nothing"
        );
        assert_eq!(u.add(&[(0, 10)]), 10);
        assert_eq!(u.add(&[(10, 20)]), 10, "touching is not overlapping");
        assert_eq!(u.kept.lock().as_slice(), &[(0, 20)]);
    }

    #[test]
    fn old_periods_are_forgotten_and_memory_stays_bounded() {
        let u = Union::default();
        u.add(&[(0, 10)]);
        u.add(&[(KEEP_NS + 100, KEEP_NS + 200)]);
        assert_eq!(u.kept.lock().len(), 1, "the old period is dropped");
        assert_eq!(u.add(&[(0, 10)]), 10, "so a late report of it counts whole");
        let many: Vec<_> = (0..MAX_KEPT as u64 + 10)
            .map(|i| (KEEP_NS + 1000 + i * 10, KEEP_NS + 1005 + i * 10))
            .collect();
        u.add(&many);
        assert!(u.kept.lock().len() <= MAX_KEPT);
    }
}
