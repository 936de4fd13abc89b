//! tierfs: one fast, bandwidth-aware tier over a node's NVMe drives and a parallel file
//! system, for DeepSpeed ZeRO-Infinity's swap files.
//!
//! Layers, bottom up (`tools/check-layers.py` holds the table and CI enforces it; a module
//! uses only its own layer and those below; docs/DESIGN.md draws it):
//! - [`units`], [`error`], [`sys`]: sizes and rates, the core's errno-carrying error (and
//!   [`error::failure`], the exit-code error of every command), libc wrappers.
//! - [`config`]: the TOML file, validated into a plan; [`layout`]: where a file's bytes are
//!   and how that is persisted; [`control`]: the control file's commands; [`logging`]: the
//!   daemon's log.
//! - [`tier`]: an open, locked tier folder and its counters, with who holds it
//!   ([`tier::lock`]), every backing call, relative to the folder and never through a
//!   symlink in it ([`tier::beneath`]), and what the tiers hold at one path, for the
//!   mount-time scan and the offline tools alike ([`tier::resolve`]); [`tierio`]: the only
//!   way to a tier's bytes (admission by class, the engines, the accounting); [`probe`]:
//!   measured tier bandwidth.
//! - [`policy`]: Eq. 1 shares, whole-file and stripe decisions ([`policy::placement`]);
//!   [`coord`]: tiers shared between mounts; [`cache`]: the host-memory tier's books (no
//!   I/O); [`stats`]: the daemon's own counters (the CPU ledger, per-request counts), the
//!   snapshot's types, its renderings, the Prometheus metrics and the node_exporter output;
//!   [`inodes`]: the inode table (the tree, an open file's state, handles, failed inodes);
//!   [`relink`]: a moved file's other names and the journal that carries their re-linking
//!   across a crash.
//! - [`data`]: an open file's data path below a handle, down to [`tierio`], handed the
//!   parts of the mount it works on (never the whole file system).
//! - [`vfs`]: the FUSE-free filesystem core, a façade over per-concern modules and their
//!   shared state, with [`vfs::adapt`]: share refresh, pausing and recovery probes.
//! - [`ondisk`]: `tierfs fsck` and `tierfs export`; [`client`]: reading a mount's
//!   `.tierfs/` files from outside and what the commands make of them (advice, recording,
//!   the live view, figures); [`tune`]: advice measured by a sweep.
//! - [`fuse`]: the kernel side: mounting, the FUSE protocol, its /dev/fuse and io_uring
//!   transports and the one dispatcher into the core; [`daemon`]: mount, background,
//!   unmount; [`cli`]: the commands, their clap definition in `cli::args`, the binary as
//!   `mount -t fuse.tierfs` and in fstab ([`cli::mount_helper`]), `tierfs man`
//!   ([`cli::manpage`]); [`direct`]: the direct path's socket server.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cache;
pub mod cli;
pub mod client;
pub mod config;
pub mod control;
pub mod coord;
pub mod daemon;
pub mod data;
pub mod direct;
pub mod error;
pub mod fuse;
pub mod inodes;
pub mod layout;
pub mod logging;
pub mod ondisk;
pub mod policy;
pub mod probe;
pub mod relink;
pub mod stats;
pub mod sys;
#[cfg(test)]
mod testutil;
pub mod tier;
pub mod tierio;
pub mod tune;
pub mod units;
pub mod vfs;
