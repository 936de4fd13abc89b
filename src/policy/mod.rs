//! Policy: where new bytes go, and how the estimates that decide it move.
//!
//! - [`placement`]: the paper's Eq. 1 shares, the whole-file chooser and stripe patterns;
//!   pure bookkeeping with no I/O, so its decisions are tested and benched on their own.
//! - [`adapt`]: the shares refreshed from the online estimates and the shared-tier ledger,
//!   tiers too slow to use paused, failed tiers probed to take them back.
//!
//! Why a folder of its own: placement is the one decision of where bytes go, and `adapt`
//! keeps its inputs true; the two are one policy, and neither is a format or a part of the
//! process, as the other files at the root of `src/` are. `coord/` stays apart: it is the
//! protocol by which the nodes of a job share a tier (a ledger on the tier, its file
//! format, its periods), whose plan `adapt` reads but does not own.
//!
//! The two halves sit in different layers (`tools/check-layers.py`): `placement` is pure
//! and low (what `data::file` and `client` use), `adapt` runs over the core's shared state
//! (`vfs::state`) and sits with the operations.

pub mod adapt;
pub mod placement;
