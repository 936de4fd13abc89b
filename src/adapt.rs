//! Adaptation: refreshing the Eq. 1 shares from the online estimates and the shared-tier
//! ledger, pausing tiers too slow to use, and probing failed tiers to take them back.

use crate::coord::Plan;
use crate::placement::{self};
use crate::tier::Tier;
use crate::vfs::state::TierFs;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) fn refresh_shares(fs: &TierFs) -> Vec<f64> {
    let mut changed = false;
    for t in &fs.tiers {
        changed |= t.sample_bandwidth();
    }
    crate::tier::app::sample_passthrough(&fs.tiers);
    // The job's view of a shared tier moves with the other nodes, not only with this
    // one's traffic: every period counts.
    changed |= fs.shared.iter().any(Option::is_some);

    if changed {
        recompute_shares(fs);
    }
    fs.placer.shares()
}

pub(crate) fn recompute_shares(fs: &TierFs) {
    let shared = fs.shared.iter().any(Option::is_some);
    if fs.adapt || shared {
        let mut bws: Vec<f64> = fs
            .tiers
            .iter()
            .map(|t| {
                let (r, w) = if fs.adapt {
                    t.current_bandwidth()
                } else {
                    (t.read_bps, t.write_bps)
                };
                placement::effective_bandwidth(r, w)
            })
            .collect();
        let plans: Vec<Option<Plan>> = fs
            .shared
            .iter()
            .map(|sh| sh.as_ref().and_then(|s| s.plan()))
            .collect();
        let judge = shared_view(&mut bws, &plans);
        let new = if fs.adapt {
            paused_shares(&fs.tiers, &judge, &bws, fs.min_share)
        } else {
            placement::shares(&bws)
        };
        let old = fs.placer.shares();
        if new.iter().zip(&old).any(|(a, b)| (a - b).abs() > 0.02) {
            log::info!(
                "shares now {} ({})",
                fs.tiers
                    .iter()
                    .zip(&new)
                    .map(|(t, s)| format!("{}={:.1}%", t.name, s * 100.0))
                    .collect::<Vec<_>>()
                    .join(" "),
                match (fs.adapt, shared) {
                    (true, false) => "online bandwidth",
                    (true, true) => "online bandwidth, shared tier ledger",
                    _ => "shared tier ledger",
                }
            );
        }
        fs.placer.set_shares(new);
    }
}

/// Applies the shared tiers' plans to this node's bandwidths `bws` (each shared tier gives
/// this node no more than its part of the job's view) and returns what each tier is worth
/// for judging its pause: its own estimate, and for a shared tier at least the job's
/// capacity of it. While a job's nodes use a tier together each one's own estimate is only
/// its part, which is no reason to leave the tier unused.
fn shared_view(bws: &mut [f64], plans: &[Option<Plan>]) -> Vec<f64> {
    let mut judge = bws.to_vec();
    for ((bw, j), plan) in bws.iter_mut().zip(judge.iter_mut()).zip(plans) {
        if let Some(plan) = plan {
            *j = j.max(plan.capacity_bps);
            *bw = bw.min(plan.allot_bps);
        }
    }
    judge
}

pub(crate) fn tick_shared(fs: &TierFs) -> bool {
    if fs.shared.iter().all(Option::is_none) {
        return false;
    }
    let bytes = |t: &Tier| {
        t.counters.bytes_read.load(Ordering::Relaxed)
            + t.counters.bytes_written.load(Ordering::Relaxed)
    };
    let all: u64 = fs.tiers.iter().map(bytes).sum();
    let now = std::time::Instant::now();
    for (t, sh) in fs.tiers.iter().zip(&fs.shared) {
        if let Some(sh) = sh {
            let c = crate::coord::Counters {
                tier_bytes: bytes(t),
                tier_busy_ns: t.shared_busy_ns(),
                all_bytes: all,
            };
            sh.tick(now, c, t.queueing.saturated());
        }
    }
    true
}

pub(crate) fn shared_tier(fs: &TierFs, index: usize) -> Option<&crate::coord::SharedTier> {
    fs.shared.get(index).and_then(Option::as_ref)
}

pub(crate) fn leave_shared(fs: &TierFs) {
    for sh in fs.shared.iter().flatten() {
        sh.leave();
    }
}

/// Eq. 1 over `bws` with the tiers too slow by `judge` (what each tier is worth: its own
/// measure, a shared tier's capacity) paused; a shared tier's cut to this node's part is
/// in `bws` only. Updates and logs each tier's pause.
pub(crate) fn paused_shares(
    tiers: &[Tier],
    judge: &[f64],
    bws: &[f64],
    min_share: f64,
) -> Vec<f64> {
    let mut paused: Vec<bool> = tiers.iter().map(|t| t.is_paused()).collect();
    let new = placement::shares_paused_by(judge, bws, min_share, &mut paused);
    for (t, p) in tiers.iter().zip(paused) {
        if p != t.is_paused() {
            let s = placement::pairwise_share(judge, t.index) * 100.0;
            if p {
                log::warn!(
                    "tier '{}' paused: next to the fastest tier it measures {s:.1}% of the \
                     bandwidth, below min_share {:.0}%; it gets no new data (recovery \
                     probes still measure it) until it measures {:.0}%",
                    t.name,
                    min_share * 100.0,
                    min_share * placement::RESUME_FACTOR * 100.0
                );
            } else {
                log::info!(
                    "tier '{}' resumed: it measures {s:.1}% next to the fastest tier",
                    t.name
                );
            }
            t.set_paused(p);
        }
    }
    new
}

pub(crate) fn probe_tiers(fs: &Arc<TierFs>) {
    if !fs.adapt {
        return;
    }
    // A shared tier's base is this node's part of it: a cut the ledger made is no
    // reason to probe it. Its pause is judged on the tier's own figure, as the placement's
    // is, or a cut tier paused on its measure would never be probed back.
    let stated: Vec<f64> = fs
        .tiers
        .iter()
        .map(|t| placement::effective_bandwidth(t.read_bps, t.write_bps))
        .collect();
    let base: Vec<f64> = stated
        .iter()
        .zip(&fs.shared)
        .map(|(bw, sh)| match sh.as_ref().and_then(|s| s.plan()) {
            Some(p) => bw.min(p.allot_bps),
            None => *bw,
        })
        .collect();
    // A tier too slow on paper to ever resume is not probed for nothing: its base
    // share counts as paused whenever it is below the resume point.
    let base =
        placement::shares_paused_by(&stated, &base, fs.min_share, &mut vec![true; base.len()]);
    let now = fs.placer.shares();
    for (i, t) in fs.tiers.iter().enumerate() {
        if t.claim_probe(now[i] < 0.8 * base[i]) {
            let fs = fs.clone();
            let r = std::thread::Builder::new()
                .name("tierfs-probe".into())
                .spawn(move || crate::tierio::recovery::probe(&fs.tiers[i], &*fs.engine));
            if let Err(e) = r {
                log::warn!("cannot start a probe thread: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_nodes_on_a_shared_tier_keep_using_it() {
        // The bench's tiers: 960 MB/s local, a 343 MB/s tier shared by 4 nodes that use it
        // together, so each one's own estimate is about its part, 86.
        let mut bws = vec![960.0, 86.0];
        let plan = Plan {
            live: 4,
            capacity_bps: 343.0,
            allot_bps: 85.75,
        };
        let judge = shared_view(&mut bws, &[None, Some(plan)]);
        assert_eq!(bws, vec![960.0, 85.75]);
        assert_eq!(judge, vec![960.0, 343.0]);
        let mut paused = vec![false, false];
        let s = placement::shares_paused_by(&judge, &bws, 0.10, &mut paused);
        assert_eq!(paused, vec![false, false], "paused on its part");
        assert!((s[1] - 85.75 / 1045.75).abs() < 1e-12, "{s:?}");
        // Judged on the own estimate alone (86 next to 960: 8 %) it would pause.
        let mut paused = vec![false, false];
        placement::shares_paused_by(&[960.0, 86.0], &bws, 0.10, &mut paused);
        assert_eq!(paused, vec![false, true]);
        // A tier the whole job finds slow (a foreign writer: the capacity fell) pauses.
        let mut bws = vec![960.0, 20.0];
        let slow = Plan {
            live: 4,
            capacity_bps: 60.0,
            allot_bps: 15.0,
        };
        let judge = shared_view(&mut bws, &[None, Some(slow)]);
        let mut paused = vec![false, false];
        placement::shares_paused_by(&judge, &bws, 0.10, &mut paused);
        assert_eq!(paused, vec![false, true]);
    }
}
