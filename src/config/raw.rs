//! The config file exactly as written: serde structs that mirror its sections key for key.
//! `deny_unknown_fields` makes a misspelt key an error instead of a silently ignored
//! default, and sizes and bandwidths stay the text the user wrote ([`Human`]) so that the
//! unit parser, not serde, words what is wrong with them. The sibling modules validate each
//! section into its plan.

use std::fmt;

use serde::Deserialize;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) tier: Vec<RawTier>,
    #[serde(default)]
    pub(super) placement: RawPlacement,
    #[serde(default)]
    pub(super) mount: RawMount,
    pub(super) cache: Option<RawCache>,
    #[serde(default)]
    pub(super) metrics: RawMetrics,
}

/// `[metrics]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub(super) textfile: Option<String>,
    pub(super) textfile_interval: Option<f64>,
}

/// `[cache]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCache {
    pub(super) size: Option<Human>,
    pub(super) policy: Option<String>,
    pub(super) prefetch: Option<i64>,
    pub(super) writeback_delay: Option<f64>,
    pub(super) max_file: Option<Human>,
}

/// One `[[tier]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTier {
    pub(super) name: String,
    pub(super) path: String,
    #[serde(default)]
    pub(super) create: bool,
    pub(super) write_bandwidth: Option<Human>,
    pub(super) read_bandwidth: Option<Human>,
    pub(super) capacity: Option<Human>,
    pub(super) max_in_flight: Option<i64>,
    pub(super) shared_ledger: Option<String>,
    pub(super) shared_job: Option<String>,
    pub(super) shared_node: Option<String>,
}

/// `[placement]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlacement {
    pub(super) layout: Option<String>,
    pub(super) stripe_unit: Option<Human>,
    pub(super) adapt: Option<bool>,
    pub(super) min_share: Option<f64>,
}

/// `[mount]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMount {
    pub(super) stats_dir: Option<String>,
    #[serde(default)]
    pub(super) allow_other: bool,
    pub(super) log_file: Option<String>,
    /// Signed so that `threads = -1` gets our range message rather than serde's.
    pub(super) threads: Option<i64>,
    pub(super) passthrough: Option<String>,
    #[serde(default)]
    pub(super) exclusive_tiers: bool,
    #[serde(default)]
    pub(super) degraded: bool,
    pub(super) engine: Option<String>,
    pub(super) transport: Option<String>,
    #[serde(default)]
    pub(super) scratch: bool,
    pub(super) direct: Option<String>,
}

/// A size or bandwidth as written: a string (`"1MiB"`), or a bare number (`capacity = 4096`),
/// kept as text so the unit parser gives one kind of message for both.
#[derive(Debug)]
pub(super) struct Human(pub(super) String);

impl<'de> Deserialize<'de> for Human {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Human;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string with a unit, such as \"1MiB\" or \"2GB/s\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Human, E> {
                Ok(Human(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Human, E> {
                Ok(Human(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Human, E> {
                Ok(Human(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Human, E> {
                Ok(Human(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}
