//! Opening the tiers of a config for a mount: each one locked, its bandwidth stated,
//! probed, or taken from the job's shared ledger, and its admission queue sized.

use crate::config::{MountConfig, SharedConfig, TierConfig};
use crate::error::failure::Failure;
use crate::probe::{self, ProbeOptions};
use crate::tier::{BandwidthSource, LockRequest, Tier};

/// Probes (where the config gives no bandwidth) and opens every tier, in config order.
pub fn open_tiers(
    config: &MountConfig,
    reprobe: bool,
    progress: impl FnMut(&str),
) -> Result<Vec<Tier>, Failure> {
    let req = LockRequest {
        scratch: config.mount.scratch,
        ..LockRequest::default()
    };
    open_tiers_degraded(config, reprobe, &[], &req, progress)
}

/// [`open_tiers`], leaving out the tiers in `missing` (index, why): they keep their place
/// as [`Tier::missing`] placeholders; the locks are taken as `lock` says.
pub fn open_tiers_degraded(
    config: &MountConfig,
    reprobe: bool,
    missing: &[(usize, String)],
    lock: &LockRequest,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Tier>, Failure> {
    let mut tiers = Vec::new();
    for (i, t) in config.tiers.iter().enumerate() {
        if let Some((_, why)) = missing.iter().find(|(m, _)| *m == i) {
            let mut tier = Tier::missing(i, &t.name, &t.path, why);
            // The stated figures, so the stats show what the tier would get; it is never
            // eligible while missing.
            tier.read_bps = t.read_bandwidth.or(t.write_bandwidth).unwrap_or(0.0);
            tier.write_bps = t.write_bandwidth.or(t.read_bandwidth).unwrap_or(0.0);
            tiers.push(tier);
            continue;
        }
        let mut tier = Tier::open_for(i, &t.name, &t.path, t.capacity, lock)
            .map_err(|e| Failure::runtime(e.to_string()))?;
        let (r, w, src) = match (t.read_bandwidth, t.write_bandwidth) {
            (Some(r), Some(w)) => (r, w, BandwidthSource::Config),
            (Some(r), None) => (r, r, BandwidthSource::Config),
            (None, Some(w)) => (w, w, BandwidthSource::Config),
            (None, None) => {
                let (r, w) = match &t.shared {
                    Some(sh) => shared_bandwidth(t, sh, reprobe, &mut progress)?,
                    None => probed_bandwidth(t, reprobe, &mut progress)?,
                };
                (r, w, BandwidthSource::Probe)
            }
        };
        tier.read_bps = r;
        tier.write_bps = w;
        tier.bandwidth_source = src;
        // By default each tier may hold an equal part of the FUSE threads, so a slow tier
        // can never block all of them while a fast one idles.
        let limit = t
            .max_in_flight
            .unwrap_or((config.mount.threads / config.tiers.len()).max(4));
        tier.max_in_flight = limit;
        tier.exclusive = config.mount.exclusive_tiers;
        tiers.push(tier);
    }
    Ok(tiers)
}

/// Refuses the tier folders that are not this tierfs's tiers as they stand
/// ([`crate::tier::identity::check`]: a blank folder where the pool says a tier holds data,
/// a tier of another pool or position, a format file that cannot be read). With
/// `degraded`, any but the first is left out instead: added to `missing` with why.
pub fn check_identities(
    config: &MountConfig,
    missing: &mut Vec<(usize, String)>,
    degraded: bool,
) -> Result<(), Failure> {
    let skip: Vec<usize> = missing.iter().map(|(i, _)| *i).collect();
    let mut refused = Vec::new();
    for (index, msg) in identity_problems(config, &skip) {
        if degraded && index > 0 {
            missing.push((index, msg));
        } else {
            refused.push(msg);
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Failure::usage(refused.join("\n")))
    }
}

/// The tier folders of `config` that are not its tiers as they stand (`skip`: left out
/// already), each with the whole message (what `tierfs check-config` reports too).
pub fn identity_problems(config: &MountConfig, skip: &[usize]) -> Vec<(usize, String)> {
    let named: Vec<_> = config
        .tiers
        .iter()
        .map(|t| (t.name.as_str(), t.path.as_path()))
        .collect();
    crate::tier::identity::check(&named, skip)
        .into_iter()
        .map(|r| {
            let msg = format!(
                "{}: tier '{}': {}",
                config.source.display(),
                config.tiers[r.index].name,
                r.why
            );
            (r.index, msg)
        })
        .collect()
}

/// Writes into every opened tier which pool it belongs to and the pool's tiers (the id of
/// the first tier that has one, else a new one), so a later mount can tell a blank or
/// foreign folder from this tierfs's tier. A tier that cannot take it is only warned of:
/// the mount works, without that check for it.
pub fn record_identities(config: &MountConfig, tiers: &[Tier]) {
    use crate::tier::identity::{self, Identity, Seen};
    let present = || tiers.iter().filter(|t| !t.missing);
    let pool = present()
        .find_map(|t| match identity::read(&t.root) {
            Seen::Tier(Identity { pool: Some(p), .. }) => Some(p),
            _ => None,
        })
        .unwrap_or_else(identity::new_pool_id);
    let names: Vec<String> = config.tiers.iter().map(|t| t.name.clone()).collect();
    for t in present() {
        let id = Identity {
            format: Some(crate::layout::FORMAT_VERSION),
            name: Some(t.name.clone()),
            pool: Some(pool.clone()),
            tiers: names.clone(),
        };
        if let Err(e) = identity::record(&t.root, &id) {
            log::warn!(
                "tier '{}': cannot record its pool in {}: {e}; a later mount cannot tell \
                 a blank folder there from this tier",
                t.name,
                t.root.display()
            );
        }
    }
}

/// This node's own measurement of a tier (read, write bytes/s), cached in the tier.
fn probe_here(t: &TierConfig, reprobe: bool) -> Result<(f64, f64), String> {
    let cache = Tier::probe_cache(&t.path);
    probe::probe_cached(
        &t.path.join(crate::tier::META_DIR),
        &cache,
        reprobe,
        &ProbeOptions::default(),
    )
    .map(|p| (p.read_bps, p.write_bps))
    .map_err(|e| {
        format!(
            "{e}\n(set read_bandwidth/write_bandwidth for tier '{}' in the config to skip probing)",
            t.name
        )
    })
}

/// A tier of this node alone: probed once, then the cached result.
fn probed_bandwidth(
    t: &TierConfig,
    reprobe: bool,
    progress: &mut impl FnMut(&str),
) -> Result<(f64, f64), Failure> {
    let cache = Tier::probe_cache(&t.path);
    if reprobe || !cache.exists() {
        progress(&format!(
            "probing tier '{}' at {} (once; cached in {})",
            t.name,
            t.path.display(),
            cache.display()
        ));
    }
    probe_here(t, reprobe).map_err(Failure::runtime)
}

/// A tier shared by the nodes of a job: one node probes it for all and writes the result
/// in the job's ledger; if the ledger cannot be used, this node probes it itself.
fn shared_bandwidth(
    t: &TierConfig,
    sh: &SharedConfig,
    reprobe: bool,
    progress: &mut impl FnMut(&str),
) -> Result<(f64, f64), Failure> {
    let dir = crate::coord::ledger_dir(&sh.ledger, &sh.job, &t.name);
    progress(&format!(
        "tier '{}' is shared by job {}: taking its bandwidth from {} (one node \
         probes it for the job)",
        t.name,
        sh.job,
        dir.display()
    ));
    let local = || probe_here(t, reprobe);
    match crate::coord::shared_probe(&dir, &sh.node, crate::coord::PROBE_WAIT, local) {
        Ok(((r, w), how)) => {
            log::info!(
                "tier '{}': bandwidth {} ({:.0} MB/s read, {:.0} MB/s write)",
                t.name,
                match how {
                    crate::coord::ProbeOutcome::Cached => "from the job's ledger",
                    crate::coord::ProbeOutcome::Elected => "probed by this node for the job",
                },
                r / 1e6,
                w / 1e6
            );
            Ok((r, w))
        }
        // This node's own probe failed: a second try would fail the same.
        Err(crate::coord::SharedProbeError::Probe(e)) => Err(Failure::runtime(e)),
        Err(crate::coord::SharedProbeError::Ledger(e)) => {
            log::warn!(
                "tier '{}': no bandwidth for the job from {}: {e}; probing it \
                 from this node",
                t.name,
                dir.display()
            );
            probe_here(t, reprobe).map_err(Failure::runtime)
        }
    }
}
