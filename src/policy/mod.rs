//! Policy: where new bytes go.
//!
//! - [`placement`]: the paper's Eq. 1 shares, the whole-file chooser and stripe patterns;
//!   pure bookkeeping with no I/O, so its decisions are tested and benched on their own.
//!
//! Why a folder of its own: placement is the one decision of where bytes go, and neither a
//! format nor a part of the process, as the other files at the root of `src/` are. What
//! keeps its inputs true, the shares refreshed from the online estimates and the ledger
//! (`crate::vfs::adapt`), runs over the core's shared state and lives with the core: here
//! it made `policy` and `vfs` import each other. `coord/` stays apart: it is the protocol by
//! which the nodes of a job share a tier (a ledger on the tier, its file format, its
//! periods).

pub mod placement;
