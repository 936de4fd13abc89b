//! Policy: where new bytes go, and how the estimates that decide it move.
//!
//! - [`placement`]: the paper's Eq. 1 shares, the whole-file chooser and stripe patterns;
//!   pure bookkeeping with no I/O, so its decisions are tested and benched on their own.
//!
//! Why a folder of its own: placement is the one decision of where bytes go, and the code
//! that keeps its inputs true (share refresh, pausing, recovery probes) belongs beside it,
//! not at the root of `src/` between the formats and the process. `coord/` stays apart: it
//! is the protocol by which the nodes of a job share a tier (a ledger on the tier, its
//! file format, its periods), whose plan the share refresh reads but does not own.

pub mod placement;
