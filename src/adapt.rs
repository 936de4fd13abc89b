//! Adaptation: refreshing the Eq. 1 shares from the online estimates and the shared-tier
//! ledger, pausing tiers too slow to use, and probing failed tiers to take them back.

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
        let own = bws.clone();
        // A shared tier gives this node no more than its part of the job's view.
        for (bw, sh) in bws.iter_mut().zip(&fs.shared) {
            if let Some(plan) = sh.as_ref().and_then(|s| s.plan()) {
                *bw = bw.min(plan.allot_bps);
            }
        }
        let new = if fs.adapt {
            paused_shares(&fs.tiers, &own, &bws, fs.min_share)
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
                tier_busy_ns: t.counters.read_busy.total_ns() + t.counters.write_busy.total_ns(),
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

/// Eq. 1 over `bws` with the tiers too slow by their own measure `own` paused (a shared
/// tier's cut to this node's part is in `bws` only); updates and logs each tier's pause.
pub(crate) fn paused_shares(tiers: &[Tier], own: &[f64], bws: &[f64], min_share: f64) -> Vec<f64> {
    let mut paused: Vec<bool> = tiers.iter().map(|t| t.is_paused()).collect();
    let new = placement::shares_paused_by(own, bws, min_share, &mut paused);
    for (t, p) in tiers.iter().zip(paused) {
        if p != t.is_paused() {
            let s = placement::pairwise_share(own, t.index) * 100.0;
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
    // reason to probe it.
    let base: Vec<f64> = fs
        .tiers
        .iter()
        .zip(&fs.shared)
        .map(|(t, sh)| {
            let bw = placement::effective_bandwidth(t.read_bps, t.write_bps);
            match sh.as_ref().and_then(|s| s.plan()) {
                Some(p) => bw.min(p.allot_bps),
                None => bw,
            }
        })
        .collect();
    // A tier too slow on paper to ever resume is not probed for nothing: its base
    // share counts as paused whenever it is below the resume point.
    let base = placement::shares_with_pause(&base, fs.min_share, &mut vec![true; base.len()]);
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
