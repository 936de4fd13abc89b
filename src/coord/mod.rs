//! Coordination of a tier that the nodes of a job share (a parallel file system): each
//! daemon's share of it follows the job's global view, not only its own measurements.
//!
//! Why: every node of a job probes and measures the shared tier as if it had it alone, so
//! with N nodes each one puts N times too many bytes there and every step waits for the
//! shared tier (issue #17). The daemons meet through the shared tier itself, with no
//! service to run: a ledger folder on it (`[[tier]] shared_ledger`, per job
//! `shared_job`) holds one small file per node, replaced atomically (written under a
//! temporary name, then renamed over) about once a second. docs/SHARED-TIER.md describes
//! the protocol and its failure cases.
//!
//! This module owns the ledger and what is made of it, one concept a file:
//! - `ledger.rs`: the folder's format, what other nodes and versions read: an [`Entry`]
//!   per node, written atomically ([`ledger_dir`], [`read_entries`]).
//! - `plan.rs`: the policy, pure: who is live on the reader's clock ([`Liveness`]), the
//!   tier's capacity ([`capacity`], [`held_capacity`]) and each node's part
//!   ([`allotment`]).
//! - `election.rs`: one probe per job ([`shared_probe`]), before the mount.
//! - `node.rs`: a daemon's periods ([`SharedTier`]): its entry published, the others'
//!   read into its [`Plan`].
//!
//! The filesystem core only asks [`SharedTier::tick`] once a second for the bandwidth this
//! node may count on, and uses it in Eq. 1 in place of the tier's own estimate when it is
//! lower.

mod election;
mod ledger;
mod node;
mod plan;

pub use election::{shared_probe, ProbeOutcome, SharedProbeError, PROBE_WAIT};
pub use ledger::{ledger_dir, read_entries, Entry, Listing, CLOCK_OFFSET_ENV, FORMAT};
pub use node::{Counters, SharedTier, DEMAND_SMOOTHING, MIN_DEMAND_BPS};
pub use plan::{
    allotment, capacity, held_capacity, Liveness, Plan, ACTIVE_FRACTION, FALL_HOLD,
    MAX_CAPACITY_FACTOR, MIN_CAPACITY_FRACTION, RECOVER_RATE, STALE_AFTER,
};

/// Whether `s` may name a node or a job (it becomes part of a file name).
pub use crate::config::is_valid_id as is_valid_name;

#[cfg(test)]
mod tests;
