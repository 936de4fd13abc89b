//! Where new bytes go: the paper's Eq. 1 (tier i gets B_i / sum(B) of the work), applied to
//! whole files or to stripes.
//!
//! The placer is pure bookkeeping with no I/O, so its decisions are unit-tested and benched
//! on their own. Two decisions live here:
//! - `whole-file`: each new file goes to the tier that is furthest below its fair share of the
//!   bytes, judged both within the file's directory and globally. DeepSpeed writes one folder
//!   per rank and creates a subgroup's files (master, `exp_avg`, `exp_avg_sq`, gradients) one
//!   after another, so per-directory balance splits every subgroup across the tiers and keeps
//!   every tier busy while a rank swaps; the global term keeps the split right when each
//!   folder holds only a few files.
//! - `stripe`: a short weighted round-robin pattern of tier indices, fixed per file when it is
//!   created (and persisted with it), so a file's layout never depends on later measurements.

use parking_lot::Mutex;
use std::collections::HashMap;

pub use crate::config::DEFAULT_MIN_SHARE;

/// The bandwidth used for Eq. 1 when a tier has different read and write bandwidths: the
/// optimizer step reads and writes every byte once, so a tier's time per byte is
/// 1/R + 1/W, i.e. the harmonic mean.
pub fn effective_bandwidth(read_bps: f64, write_bps: f64) -> f64 {
    if read_bps <= 0.0 || write_bps <= 0.0 {
        return 0.0;
    }
    2.0 * read_bps * write_bps / (read_bps + write_bps)
}

/// Eq. 1: each tier's fraction of the bytes. All zero bandwidths give equal shares.
pub fn shares(bandwidths: &[f64]) -> Vec<f64> {
    let sum: f64 = bandwidths
        .iter()
        .filter(|b| b.is_finite() && **b > 0.0)
        .sum();
    if sum <= 0.0 {
        let n = bandwidths.len().max(1) as f64;
        return vec![1.0 / n; bandwidths.len()];
    }
    bandwidths
        .iter()
        .map(|b| {
            if b.is_finite() && *b > 0.0 {
                b / sum
            } else {
                0.0
            }
        })
        .collect()
}

/// Of the staging budget, the most counted as holding the slower tiers' files whole in
/// [`shares_with_held`]; what is counted is only what the cache has really admitted for
/// them (`vfs::handles::held_for_placement`), never memory it merely could hold. Half: the
/// rest is room for the files read ahead and written behind beyond it, for gradient files
/// held spare, and for the memory watch to shrink the budget without the layout counting
/// on it. Measured with real DeepSpeed (2 ranks, 0.78 GB of swap files, 405 MiB of
/// staging; docs/PERFORMANCE.md, "Staging memory counted in the layout"): the slower tier
/// at 45-50 % of the bytes ran 0.80-0.83x the nvme tier alone against 0.88x at its Eq. 1
/// share of 35 %.
pub const HELD_FRACTION: f64 = 0.5;

/// The least part of its Eq. 1 share the fastest tier keeps in [`shares_with_held`]: a
/// small data set still uses it, and if the memory watch later takes the staging budget
/// back, the slower tiers are left at most about twice their Eq. 1 part.
pub const HELD_FAST_FLOOR: f64 = 0.5;

/// Eq. 1 shares with staging memory counted. Where the fastest tier's files go to the
/// kernel and the slower tiers' files are staged in host memory, the first `held` bytes of
/// the slower tiers' files are served from memory and cost no tier any time; only the bytes
/// beyond them need splitting by bandwidth. Of `total` bytes the fastest tier (the largest
/// share, the first of equals) then gets `share * (1 - held / total)`, but at least
/// [`HELD_FAST_FLOOR`] of its share; the others the rest in their Eq. 1 proportions. At
/// real scale (`total` far above `held`) this is Eq. 1 again. Unchanged when `held` is 0,
/// with one tier, or when no slower tier has a share (paused or no bandwidth).
pub fn shares_with_held(shares: &[f64], held: u64, total: u64) -> Vec<f64> {
    let Some(k) = shares
        .iter()
        .enumerate()
        .fold(None, |best: Option<(usize, f64)>, (i, s)| match best {
            Some((_, b)) if *s <= b => best,
            _ => Some((i, *s)),
        })
        .map(|(i, _)| i)
    else {
        return shares.to_vec();
    };
    let rest = 1.0 - shares[k];
    if held == 0 || total == 0 || shares.len() < 2 || rest <= 1e-12 {
        return shares.to_vec();
    }
    let fast = shares[k] * (1.0 - held.min(total) as f64 / total as f64).max(HELD_FAST_FLOOR);
    shares
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if i == k {
                fast
            } else {
                s / rest * (1.0 - fast)
            }
        })
        .collect()
}

/// A paused tier resumes once its pairwise share reaches this multiple of `min_share`, so
/// an estimate that hovers at the threshold does not flip the placement every second.
pub const RESUME_FACTOR: f64 = 1.5;

/// A tier's share next to the fastest tier alone: B_i / (B_i + B_max). For two tiers this is
/// the Eq. 1 share; with many tiers of equal speed it stays at 1/2, so pausing never thins
/// out a pool of peers, only tiers far slower than the best one.
pub fn pairwise_share(bandwidths: &[f64], i: usize) -> f64 {
    let max = bandwidths
        .iter()
        .copied()
        .filter(|b| b.is_finite())
        .fold(0.0, f64::max);
    let b = bandwidths[i];
    if !(b.is_finite() && b > 0.0) || max <= 0.0 {
        return 0.0;
    }
    b / (b + max)
}

/// Eq. 1 with the small tiers paused: a tier whose [`pairwise_share`] is below `min_share`
/// gets no new work (only recovery probes measure it) until the share reaches
/// `min_share` x [`RESUME_FACTOR`]; `paused` carries that state between calls and is
/// updated. Why: a tier worth a few percent of the bandwidth can shorten a step by at most
/// those few percent, while every step waits for its slowest tier, so an estimate of it
/// that is too high by half (a shared tier's queue, a throttle that just began) costs far
/// more than the tier can give. The fastest tier is never paused, and the shares of the
/// others are renormalised.
pub fn shares_with_pause(bandwidths: &[f64], min_share: f64, paused: &mut [bool]) -> Vec<f64> {
    shares_paused_by(bandwidths, bandwidths, min_share, paused)
}

/// [`shares_with_pause`] with the pause judged on `judge` (each tier's own measured
/// bandwidth) and the shares taken from `bandwidths` (the same, cut to this node's part of
/// a shared tier). A tier the job splits among its nodes is as fast as ever when it is
/// used; its small part is a division, not an estimate that may be too high, and pausing
/// on it would leave the tier unused whenever a job has enough nodes, and flip it each
/// time the split moved.
pub fn shares_paused_by(
    judge: &[f64],
    bandwidths: &[f64],
    min_share: f64,
    paused: &mut [bool],
) -> Vec<f64> {
    assert_eq!(bandwidths.len(), paused.len());
    assert_eq!(judge.len(), paused.len());
    let mut bws = bandwidths.to_vec();
    for (i, p) in paused.iter_mut().enumerate() {
        let s = pairwise_share(judge, i);
        if s >= 0.5 || min_share <= 0.0 {
            *p = false;
        } else if *p {
            *p = s < min_share * RESUME_FACTOR;
        } else {
            *p = s < min_share;
        }
        if *p {
            bws[i] = 0.0;
        }
    }
    shares(&bws)
}

/// Longest stripe pattern; 64 slots approximate any share to within 1/128.
pub const MAX_PATTERN: usize = 64;

/// A weighted round-robin sequence of tier indices over the `eligible` tiers whose counts
/// follow `shares` as closely as a pattern of at most [`MAX_PATTERN`] slots allows, spread
/// evenly (smooth WRR) so consecutive stripes land on different tiers. Empty when no tier
/// is eligible.
pub fn stripe_pattern(shares: &[f64], eligible: &[bool]) -> Vec<u8> {
    let w: Vec<f64> = shares
        .iter()
        .zip(eligible)
        .map(|(s, e)| if *e { s.max(0.0) } else { 0.0 })
        .collect();
    let sum: f64 = w.iter().sum();
    let w: Vec<f64> = if sum > 0.0 {
        w.iter().map(|x| x / sum).collect()
    } else {
        let n = eligible.iter().filter(|e| **e).count();
        if n == 0 {
            return Vec::new();
        }
        eligible
            .iter()
            .map(|e| if *e { 1.0 / n as f64 } else { 0.0 })
            .collect()
    };
    // Shortest pattern whose counts are within 2% of every share and give no tier more
    // than 5% beyond its share (relative: a tier capped to a few percent of the bandwidth
    // would otherwise get twice its part and set the pace), else the best of all.
    let mut best: Option<(f64, Vec<usize>)> = None;
    for len in 1..=MAX_PATTERN {
        let counts = apportion(&w, len);
        let err = counts
            .iter()
            .zip(&w)
            .map(|(c, s)| (*c as f64 / len as f64 - s).abs())
            .fold(0.0, f64::max);
        let over = counts
            .iter()
            .zip(&w)
            .filter(|(_, s)| **s > 0.0)
            .map(|(c, s)| *c as f64 / len as f64 / s)
            .fold(0.0, f64::max);
        if best.as_ref().is_none_or(|(e, _)| err < *e - 1e-12) {
            best = Some((err, counts));
        }
        if err <= 0.02 && over <= 1.05 {
            best = Some((err, apportion(&w, len)));
            break;
        }
    }
    let counts = best.map(|(_, c)| c).unwrap_or_default();
    smooth_wrr(&counts)
}

/// Largest-remainder apportionment of `len` slots by weights `w` (which sum to 1).
fn apportion(w: &[f64], len: usize) -> Vec<usize> {
    let exact: Vec<f64> = w.iter().map(|x| x * len as f64).collect();
    let mut counts: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let mut left = len - counts.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..w.len()).collect();
    order.sort_by(|a, b| {
        let ra = exact[*a] - exact[*a].floor();
        let rb = exact[*b] - exact[*b].floor();
        rb.total_cmp(&ra).then(a.cmp(b))
    });
    for i in order {
        if left == 0 {
            break;
        }
        if w[i] > 0.0 {
            counts[i] += 1;
            left -= 1;
        }
    }
    counts
}

/// Interleaves `counts[i]` copies of each index i as evenly as possible.
fn smooth_wrr(counts: &[usize]) -> Vec<u8> {
    let total: usize = counts.iter().sum();
    let mut current = vec![0i64; counts.len()];
    let mut out = Vec::with_capacity(total);
    for _ in 0..total {
        for (c, w) in current.iter_mut().zip(counts) {
            *c += *w as i64;
        }
        let (best, _) = current
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
            .expect("at least one tier");
        current[best] -= total as i64;
        out.push(best as u8);
    }
    out
}

/// Bytes assigned per tier, for one scope (a directory, or the whole mount).
#[derive(Debug, Default, Clone)]
struct Ledger {
    assigned: Vec<u64>,
    files: u64,
    bytes: u64,
}

impl Ledger {
    fn deficit(&self, tier: usize, share: f64, est: u64) -> f64 {
        let total: u64 = self.assigned.iter().sum();
        share * (total + est) as f64 - self.assigned.get(tier).copied().unwrap_or(0) as f64
    }
    fn charge(&mut self, n: usize, tier: usize, delta: i64) {
        if self.assigned.len() < n {
            self.assigned.resize(n, 0);
        }
        let a = &mut self.assigned[tier];
        *a = (*a as i64 + delta).max(0) as u64;
    }
}

/// Size assumed for a new file in a directory that has no finished file yet. Any constant
/// works: DeepSpeed's files of one subgroup have equal sizes, so early choices balance by
/// count until real sizes are known.
const DEFAULT_ESTIMATE: u64 = 1 << 20;

/// Whole-file placement state: who got how many bytes, per directory and overall.
#[derive(Debug)]
pub struct Placer {
    tiers: usize,
    shares: Mutex<Vec<f64>>,
    ledgers: Mutex<(Ledger, HashMap<u64, Ledger>)>,
}

/// What a placement charged, to be settled once the file's real size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    pub dir: u64,
    pub tier: usize,
    pub bytes: u64,
}

impl Placer {
    pub fn new(shares: Vec<f64>) -> Placer {
        Placer {
            tiers: shares.len(),
            shares: Mutex::new(shares),
            ledgers: Mutex::new((Ledger::default(), HashMap::new())),
        }
    }

    /// The current Eq. 1 shares.
    pub fn shares(&self) -> Vec<f64> {
        self.shares.lock().clone()
    }

    /// Replaces the shares (e.g. after a new measurement).
    pub fn set_shares(&self, shares: Vec<f64>) {
        assert_eq!(shares.len(), self.tiers);
        *self.shares.lock() = shares;
    }

    /// Records a file found at mount time, so placement continues from the real state.
    pub fn record_existing(&self, dir: u64, tier: usize, bytes: u64) {
        let mut l = self.ledgers.lock();
        l.0.charge(self.tiers, tier, bytes as i64);
        let d = l.1.entry(dir).or_default();
        d.charge(self.tiers, tier, bytes as i64);
        d.files += 1;
        d.bytes += bytes;
    }

    /// Picks the tier for a new file in directory `dir` among the `eligible` ones and charges
    /// it an estimated size. `held`: bytes of the slower tiers' files staging memory holds
    /// ([`shares_with_held`]; 0 for plain Eq. 1). `None` when no tier is eligible.
    pub fn choose(&self, dir: u64, eligible: &[bool], held: u64) -> Option<Charge> {
        let shares = self.shares.lock().clone();
        let mut l = self.ledgers.lock();
        let (global, dirs) = &mut *l;
        let d = dirs.entry(dir).or_default();
        let est = d
            .bytes
            .checked_div(d.files)
            .map_or(DEFAULT_ESTIMATE, |avg| avg.max(1));
        let total = global.assigned.iter().sum::<u64>().saturating_add(est);
        let shares = shares_with_held(&shares, held, total);
        let mut best: Option<(f64, usize)> = None;
        for (i, share) in shares.iter().enumerate() {
            if !eligible.get(i).copied().unwrap_or(false) {
                continue;
            }
            // A tier with no share (no bandwidth) only takes files when nothing else can.
            let score = if *share > 0.0 {
                d.deficit(i, *share, est) + global.deficit(i, *share, est)
            } else {
                f64::MIN / 4.0
            };
            if best.is_none_or(|(s, _)| score > s + 1e-9) {
                best = Some((score, i));
            }
        }
        let (_, tier) = best?;
        d.charge(self.tiers, tier, est as i64);
        global.charge(self.tiers, tier, est as i64);
        Some(Charge {
            dir,
            tier,
            bytes: est,
        })
    }

    /// Replaces an earlier charge with the file's real size; returns the new charge.
    pub fn settle(&self, charge: Charge, actual: u64) -> Charge {
        let delta = actual as i64 - charge.bytes as i64;
        let mut l = self.ledgers.lock();
        l.0.charge(self.tiers, charge.tier, delta);
        let d = l.1.entry(charge.dir).or_default();
        d.charge(self.tiers, charge.tier, delta);
        // The first settle of a file counts it for the directory's size estimate.
        d.files += 1;
        d.bytes += actual;
        Charge {
            bytes: actual,
            ..charge
        }
    }

    /// Takes a file's bytes off the books (unlink, or a move to another tier).
    pub fn release(&self, charge: Charge) {
        let mut l = self.ledgers.lock();
        l.0.charge(self.tiers, charge.tier, -(charge.bytes as i64));
        if let Some(d) = l.1.get_mut(&charge.dir) {
            d.charge(self.tiers, charge.tier, -(charge.bytes as i64));
        }
    }

    /// Bytes assigned per tier overall.
    pub fn assigned(&self) -> Vec<u64> {
        let l = self.ledgers.lock();
        let mut a = l.0.assigned.clone();
        a.resize(self.tiers, 0);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq1_shares_follow_bandwidth() {
        let s = shares(&[2e9, 1e9]);
        assert!((s[0] - 2.0 / 3.0).abs() < 1e-12);
        assert!((s[1] - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(shares(&[0.0, 0.0]), vec![0.5, 0.5]);
        assert_eq!(shares(&[1.0, 0.0]), vec![1.0, 0.0]);
    }

    #[test]
    fn staging_memory_takes_its_bytes_off_the_fastest_tiers_part() {
        let eq1 = [0.65, 0.35];
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        // Nothing held, or nothing placed yet: Eq. 1.
        assert_eq!(shares_with_held(&eq1, 0, 1000), eq1.to_vec());
        assert_eq!(shares_with_held(&eq1, 100, 0), eq1.to_vec());
        // Everything fits in memory: the fast tier keeps half its share.
        assert!(close(&shares_with_held(&eq1, 500, 400), &[0.325, 0.675]));
        // 800 bytes, 600 held: no less than half its share either.
        let s = shares_with_held(&eq1, 600, 800);
        assert!(close(&s, &[0.325, 0.675]), "{s:?}");
        // 800 bytes, 200 held: the fast tier gets 65 % of the 600 beyond them.
        let s = shares_with_held(&eq1, 200, 800);
        assert!(close(&s, &[0.65 * 0.75, 1.0 - 0.65 * 0.75]), "{s:?}");
        // At real scale memory hardly counts.
        let s = shares_with_held(&eq1, 1 << 30, 1 << 40);
        assert!((s[0] - 0.65).abs() < 1e-3, "{s:?}");
        // The fastest tier need not be the first; the slower ones keep their proportions.
        let s = shares_with_held(&[0.2, 0.6, 0.2], 200, 800);
        assert!(close(&s, &[0.275, 0.45, 0.275]), "{s:?}");
        // No slower tier with a share (paused): unchanged, the fast tier takes all.
        assert_eq!(shares_with_held(&[1.0, 0.0], 300, 600), vec![1.0, 0.0]);
        assert_eq!(shares_with_held(&[1.0], 300, 600), vec![1.0]);
    }

    #[test]
    fn whole_files_fill_held_memory_then_split_the_rest() {
        // 100 files of 1 MiB, 40 MiB held: the fast tier gets 65 % of the 60 beyond them,
        // and no less than half its share of what is placed so far on the way.
        const M: u64 = 1 << 20;
        let p = Placer::new(vec![0.65, 0.35]);
        let mut fast = 0u64;
        for i in 1..=100u64 {
            let c = p.choose(7, &[true, true], 40 * M).unwrap();
            let c = p.settle(c, M);
            fast += u64::from(c.tier == 0);
            let want = (0.65 * (i as f64 - 40.0)).max(0.325 * i as f64);
            assert!(
                (fast as f64 - want).abs() <= 2.0,
                "{fast} MiB of {i} on the fast tier"
            );
        }
        assert!(
            (fast as f64 - 39.0).abs() <= 1.0,
            "fast tier got {fast} MiB"
        );
        assert_eq!(p.assigned().iter().sum::<u64>(), 100 * M);
    }

    #[test]
    fn small_tiers_pause_and_resume_with_hysteresis() {
        let mut p = vec![false, false];
        // 800 vs 300: 27 % stays.
        let s = shares_with_pause(&[800.0, 300.0], 0.10, &mut p);
        assert_eq!(p, vec![false, false]);
        assert!((s[1] - 300.0 / 1100.0).abs() < 1e-12);
        // Capped to 30: 3.6 % -> paused, the fast tier takes everything.
        let s = shares_with_pause(&[800.0, 30.0], 0.10, &mut p);
        assert_eq!((p.clone(), s), (vec![false, true], vec![1.0, 0.0]));
        // 12 % is above min_share but below the resume point (15 %): still paused.
        let s = shares_with_pause(&[800.0, 109.0], 0.10, &mut p);
        assert_eq!((p.clone(), s[1]), (vec![false, true], 0.0));
        // 16 %: resumes with its Eq. 1 share.
        let s = shares_with_pause(&[800.0, 152.4], 0.10, &mut p);
        assert_eq!(p, vec![false, false]);
        assert!((s[1] - 152.4 / 952.4).abs() < 1e-12);
        // Unpaused, 12 % stays (no flapping around the threshold).
        shares_with_pause(&[800.0, 109.0], 0.10, &mut p);
        assert_eq!(p, vec![false, false]);
        // min_share 0 never pauses.
        let s = shares_with_pause(&[800.0, 1.0], 0.0, &mut p);
        assert_eq!(p, vec![false, false]);
        assert!(s[1] > 0.0);
    }

    #[test]
    fn a_shared_tiers_cut_does_not_pause_it() {
        // Measured at 343 next to 960 (26 %), cut to a quarter by four nodes sharing it:
        // 8 %, below min_share, yet it is used for its part.
        let mut p = vec![false, false];
        let s = shares_paused_by(&[960.0, 343.0], &[960.0, 85.75], 0.10, &mut p);
        assert_eq!(p, vec![false, false]);
        assert!((s[1] - 85.75 / 1045.75).abs() < 1e-12, "{s:?}");
        // Its own measure falling below min_share still pauses it.
        let s = shares_paused_by(&[960.0, 60.0], &[960.0, 15.0], 0.10, &mut p);
        assert_eq!((p, s), (vec![false, true], vec![1.0, 0.0]));
    }

    #[test]
    fn pause_is_relative_to_the_fastest_tier_not_the_pool() {
        // Twelve equal tiers: each gets 8.3 % of Eq. 1, none is paused.
        let mut p = vec![false; 12];
        let s = shares_with_pause(&[1.0; 12], 0.10, &mut p);
        assert!(p.iter().all(|x| !x));
        assert!(s.iter().all(|x| (x - 1.0 / 12.0).abs() < 1e-12));
        // One fast tier and three slow ones at 5 % of it: the slow ones pause, even
        // though together they are 13 % of the pool.
        let mut p = vec![false; 4];
        let s = shares_with_pause(&[100.0, 5.0, 5.0, 5.0], 0.10, &mut p);
        assert_eq!(p, vec![false, true, true, true]);
        assert_eq!(s, vec![1.0, 0.0, 0.0, 0.0]);
        // Equal fastest tiers are never paused, whatever min_share says.
        let mut p = vec![true, true];
        shares_with_pause(&[10.0, 10.0], 0.5, &mut p);
        assert_eq!(p, vec![false, false]);
    }

    #[test]
    fn harmonic_mean_of_read_and_write() {
        assert_eq!(effective_bandwidth(1.0, 1.0), 1.0);
        assert!((effective_bandwidth(1200.0, 800.0) - 960.0).abs() < 1e-9);
        assert_eq!(effective_bandwidth(0.0, 5.0), 0.0);
    }

    #[test]
    fn stripe_pattern_two_to_one() {
        let p = stripe_pattern(&shares(&[2.0, 1.0]), &[true, true]);
        assert_eq!(p, vec![0, 1, 0]);
    }

    #[test]
    fn stripe_pattern_respects_eligibility_and_precision() {
        assert_eq!(stripe_pattern(&[0.5, 0.5], &[false, true]), vec![1]);
        assert!(stripe_pattern(&[0.5, 0.5], &[false, false]).is_empty());
        let s = shares(&[1200.0, 400.0, 333.0]);
        let p = stripe_pattern(&s, &[true, true, true]);
        for (i, share) in s.iter().enumerate() {
            let got = p.iter().filter(|t| **t as usize == i).count() as f64 / p.len() as f64;
            assert!(
                (got - share).abs() <= 0.02,
                "tier {i}: {got} vs {share} in {p:?}"
            );
        }
        // Evenly spread: the 62% tier never takes more than 3 stripes in a row.
        assert!(p.windows(4).all(|w| !w.iter().all(|t| *t == w[0])), "{p:?}");
    }

    fn run_files(placer: &Placer, dir: u64, n: usize, size: u64) -> Vec<usize> {
        (0..n)
            .map(|_| {
                let c = placer.choose(dir, &[true, true], 0).unwrap();
                placer.settle(c, size);
                c.tier
            })
            .collect()
    }

    #[test]
    fn whole_file_split_follows_shares_in_one_folder() {
        let p = Placer::new(shares(&[2e9, 1e9]));
        let tiers = run_files(&p, 7, 12, 8 << 20);
        assert_eq!(tiers.iter().filter(|t| **t == 0).count(), 8, "{tiers:?}");
        // Every run of three consecutive files (one DeepSpeed subgroup) uses both tiers.
        assert!(
            tiers.chunks(3).all(|c| c.contains(&0) && c.contains(&1)),
            "{tiers:?}"
        );
    }

    #[test]
    fn whole_file_split_follows_shares_across_single_file_folders() {
        let p = Placer::new(shares(&[2e9, 1e9]));
        let mut on0 = 0;
        for dir in 0..30 {
            on0 += run_files(&p, 100 + dir, 1, 4 << 20)
                .iter()
                .filter(|t| **t == 0)
                .count();
        }
        assert!((18..=22).contains(&on0), "{on0} of 30 on tier 0");
    }

    #[test]
    fn ineligible_tier_gets_nothing_and_none_when_all_full() {
        let p = Placer::new(shares(&[2e9, 1e9]));
        for _ in 0..5 {
            assert_eq!(p.choose(1, &[false, true], 0).unwrap().tier, 1);
        }
        assert!(p.choose(1, &[false, false], 0).is_none());
    }

    #[test]
    fn release_returns_bytes() {
        let p = Placer::new(shares(&[1.0, 1.0]));
        let c = p.choose(1, &[true, true], 0).unwrap();
        let c = p.settle(c, 100);
        assert_eq!(p.assigned()[c.tier], 100);
        p.release(c);
        assert_eq!(p.assigned()[c.tier], 0);
    }
}
