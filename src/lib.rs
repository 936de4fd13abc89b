//! tierfs: one fast, bandwidth-aware tier over a node's NVMe drives and a parallel file

//! system, for DeepSpeed ZeRO-Infinity's swap files.
//!
//! Layers, bottom up:
//! - [`config`], [`units`]: the TOML file, validated into a plan; [`failure`]: the
//!   exit-code error of every command; [`logging`]: the daemon's log.
//! - [`probe`]: measured tier bandwidth.
//! - [`tier`]: an open, locked tier folder and its counters; [`beneath`]: every backing
//!   call, relative to a tier folder and never through a symlink in it; [`lock`]: who holds a tier
//!   folder; [`tierio`]: the only way to a tier (admission by class, the engines, the
//!   accounting; full, never-short backing reads and writes with O_DIRECT where it is
//!   allowed); [`sys`]: libc wrappers.
//! - [`placement`]: Eq. 1 shares, whole-file and stripe decisions; [`layout`]: where a
//!   file's bytes are and how that is persisted.
//! - [`fs`]: the FUSE-free filesystem core; [`stats`]: the `.tierfs/` files; [`client`]:
//!   reading them from outside a running mount.
//! - [`fuse`]: the kernel side: mounting, the FUSE protocol, its /dev/fuse and io_uring
//!   transports and the one dispatcher into the core; [`daemon`]: mount, background,
//!   unmount; [`cli`]: the commands, their clap definition in `cli::args`;
//!   [`mount_helper`]: `mount -t fuse.tierfs` and fstab; [`manpage`]: `tierfs man`;
//!   [`prom`]: `tierfs stat --prom` for node_exporter.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod adapt;
pub mod beneath;
pub mod cache;
pub mod cli;
pub mod client;
pub mod config;
pub mod control;
pub mod coord;
pub mod daemon;
pub mod data;
pub mod dsconfig;
pub mod engine;
pub mod error;
pub mod failure;
pub mod fuse;
pub mod io;
pub mod layout;
pub mod ledger;
pub mod lock;
pub mod logging;
pub mod manpage;

pub mod monitor;
pub mod mount_helper;
pub mod ondisk;
pub mod placement;
pub mod plot;
pub mod probe;
pub mod prom;
pub mod reqstats;
pub mod resolve;
pub mod sched;
pub mod stats;
/// The Prometheus rendering's old path.
pub use stats::metrics;
pub mod sys;
#[cfg(test)]
mod testutil;
pub mod tier;
pub mod tierio;
pub mod units;
pub mod vfs;

/// The offline tools' old path (`cli` calls `export::run_fsck` and `export::run_export`).
pub use ondisk as export;
