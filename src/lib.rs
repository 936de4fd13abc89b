//! tierfs: one bandwidth-aware tier over several storage tiers.
pub mod config;
pub mod probe;
pub mod units;
