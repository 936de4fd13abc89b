//! `[placement]`: how a file's bytes are laid out over the tiers and whether the shares
//! follow the online bandwidth estimates. Its defaults depend on the rest of the file (the
//! layout on `mount.passthrough`, `adapt` on whether any tier states its bandwidth), so the
//! section is read in parts that [`super::MountConfig::parse_with_vars`] puts together.

use super::mount::Passthrough;
use super::problems::Problems;
use super::raw::Human;
use super::tiers::TierConfig;
use crate::units;

/// How a file's bytes are laid out over the tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Each file lives whole on one tier.
    WholeFile,
    /// Each file is cut into `stripe_unit` pieces spread by weighted round-robin.
    Stripe,
}

impl Layout {
    /// The spelling used in the config file: `"whole-file"` or `"stripe"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::WholeFile => "whole-file",
            Layout::Stripe => "stripe",
        }
    }
}

/// The validated `[placement]` section.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlacementConfig {
    pub layout: Layout,
    pub stripe_unit: u64,
    /// Move the Eq. 1 shares with the online bandwidth estimates; false keeps the
    /// configured or probed figures. Default: true when every tier is probed, false when the
    /// config states any tier's bandwidth (stated figures are the user's decision).
    pub adapt: bool,
    /// With `adapt`: a tier that would get less than this share of the work next to the
    /// fastest tier alone gets none until it measures 1.5 times that
    /// ([`crate::policy::placement::shares_with_pause`]). 0 never pauses. Default 0.10.
    pub min_share: f64,
}

/// `placement.layout` when the file does not say and the daemon cannot use kernel
/// passthrough (not root, or `passthrough = "off"`): stripes, because DeepSpeed's swapper
/// moves one file at a time per handle, and only stripes put every tier to work on it
/// (docs/PERFORMANCE.md: the replay's optimizer step at the pooled floor with stripes).
pub const DEFAULT_LAYOUT: Layout = Layout::Stripe;

/// `placement.layout` when the file does not say: whole files where the daemon can hand
/// them to the kernel (root, passthrough not off), else [`DEFAULT_LAYOUT`]. Real DeepSpeed
/// is CPU-bound beside its swap I/O, and a whole file in passthrough costs the daemon no
/// CPU while a stripe's every byte crosses it: as root, whole files ran 0.85-0.89x the nvme
/// tier's step time against 0.93-1.00x for stripes (docs/PERFORMANCE.md, issue #14).
pub fn default_layout(passthrough: Passthrough) -> Layout {
    default_layout_for(passthrough, crate::sys::euid() == 0)
}

/// [`default_layout`] for a daemon that is root or not.
pub fn default_layout_for(passthrough: Passthrough, root: bool) -> Layout {
    if passthrough != Passthrough::Off && root {
        Layout::WholeFile
    } else {
        DEFAULT_LAYOUT
    }
}
/// `placement.stripe_unit` when the file does not say: 1 MiB.
pub const DEFAULT_STRIPE_UNIT: u64 = 1 << 20;
/// Smallest accepted `placement.stripe_unit`: 64 KiB.
pub const MIN_STRIPE_UNIT: u64 = 64 << 10;
/// Largest accepted `placement.stripe_unit`: 1 GiB.
pub const MAX_STRIPE_UNIT: u64 = 1 << 30;
/// `placement.stripe_unit` must be a multiple of this (the page size O_DIRECT needs).
pub const STRIPE_ALIGN: u64 = 4096;
/// `placement.min_share` when the file does not say: with `adapt`, a tier that would get
/// less than this next to the fastest tier alone is paused
/// ([`crate::policy::placement::shares_with_pause`]).
pub const DEFAULT_MIN_SHARE: f64 = 0.10;

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            layout: DEFAULT_LAYOUT,
            stripe_unit: DEFAULT_STRIPE_UNIT,
            adapt: true,
            min_share: DEFAULT_MIN_SHARE,
        }
    }
}

/// `placement.layout`; `None` when the file does not say, since the default depends on
/// `mount.passthrough` ([`default_layout`]).
pub(super) fn parse_layout(given: Option<&str>, p: &mut Problems) -> Option<Layout> {
    match given {
        None => None,
        Some("whole-file") => Some(Layout::WholeFile),
        Some("stripe") => Some(Layout::Stripe),
        Some(other) => {
            p.add(
                "placement.layout",
                format_args!("{other:?} is not a layout; use \"whole-file\" or \"stripe\""),
            );
            Some(DEFAULT_LAYOUT)
        }
    }
}

/// `placement.stripe_unit`: a multiple of [`STRIPE_ALIGN`] from [`MIN_STRIPE_UNIT`] to
/// [`MAX_STRIPE_UNIT`].
pub(super) fn parse_stripe_unit(given: Option<&Human>, p: &mut Problems) -> u64 {
    let Some(v) = given else {
        return DEFAULT_STRIPE_UNIT;
    };
    match units::parse_size(&v.0) {
        Ok(n) if n % STRIPE_ALIGN == 0 && (MIN_STRIPE_UNIT..=MAX_STRIPE_UNIT).contains(&n) => n,
        Ok(n) => {
            p.add(
                "placement.stripe_unit",
                format_args!(
                    "{:?} ({n} bytes) must be a multiple of 4096 between 64KiB and 1GiB; \
                     e.g. \"1MiB\" (the default)",
                    v.0
                ),
            );
            DEFAULT_STRIPE_UNIT
        }
        Err(e) => {
            p.add("placement.stripe_unit", e);
            DEFAULT_STRIPE_UNIT
        }
    }
}

/// `placement.min_share`: 0 (never pause) to 0.5.
pub(super) fn parse_min_share(given: Option<f64>, p: &mut Problems) -> f64 {
    match given {
        None => DEFAULT_MIN_SHARE,
        Some(m) if m.is_finite() && (0.0..=0.5).contains(&m) => m,
        Some(m) => {
            p.add(
                "placement.min_share",
                format_args!(
                    "{m} is out of range; use 0 (never pause a slow tier) to 0.5, e.g. 0.10 (the default)"
                ),
            );
            DEFAULT_MIN_SHARE
        }
    }
}

/// `placement.adapt` when the file does not say: only when every tier is probed, since a
/// stated bandwidth is the user's decision.
pub(super) fn default_adapt(tiers: &[TierConfig]) -> bool {
    tiers
        .iter()
        .all(|t| t.read_bandwidth.is_none() && t.write_bandwidth.is_none())
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{parse, TWO};
    use super::*;

    #[test]
    fn adapt_defaults_to_probed_tiers_only() {
        // A stated bandwidth is the user's decision: shares stay put.
        assert!(!parse(TWO).unwrap().placement.adapt);
        let probed =
            "[[tier]]\nname = \"a\"\npath = \"/x\"\n[[tier]]\nname = \"b\"\npath = \"/y\"\n";
        assert!(parse(probed).unwrap().placement.adapt);
        let forced = format!("{TWO}[placement]\nadapt = true\n");
        assert!(parse(&forced).unwrap().placement.adapt);
    }

    #[test]
    fn min_share_defaults_and_range() {
        assert_eq!(parse(TWO).unwrap().placement.min_share, 0.10);
        let zero = format!("{TWO}[placement]\nmin_share = 0.0\n");
        assert_eq!(parse(&zero).unwrap().placement.min_share, 0.0);
        for bad in ["0.6", "-0.1", "nan"] {
            let c = format!("{TWO}[placement]\nmin_share = {bad}\n");
            let e = parse(&c).unwrap_err().to_string();
            assert!(e.contains("placement.min_share:"), "{e}");
        }
    }

    #[test]
    fn default_layout_is_whole_files_where_passthrough_can_serve_them() {
        assert_eq!(
            default_layout_for(Passthrough::Auto, true),
            Layout::WholeFile
        );
        assert_eq!(
            default_layout_for(Passthrough::Direct, true),
            Layout::WholeFile
        );
        assert_eq!(default_layout_for(Passthrough::Off, true), Layout::Stripe);
        assert_eq!(default_layout_for(Passthrough::Auto, false), Layout::Stripe);
        let off = parse(&format!("{TWO}\n[mount]\npassthrough = \"off\"\n")).unwrap();
        assert_eq!(off.placement.layout, Layout::Stripe);
        let given = parse(&format!("{TWO}\n[placement]\nlayout = \"stripe\"\n")).unwrap();
        assert_eq!(given.placement.layout, Layout::Stripe);
    }

    #[test]
    fn stripe_unit_limits() {
        let with = |v: &str| parse(&format!("{TWO}[placement]\nstripe_unit = {v:?}\n"));
        assert_eq!(with("64KiB").unwrap().placement.stripe_unit, 64 << 10);
        assert_eq!(with("1GiB").unwrap().placement.stripe_unit, 1 << 30);
        for bad in ["32KiB", "2GiB", "100000", "1MB", "lots"] {
            let err = with(bad).unwrap_err();
            assert!(
                err.contains("placement.stripe_unit") && err.contains(bad),
                "{err}"
            );
        }
    }
}
