//! The kernel side: the FUSE protocol spoken by the daemon itself, under the FUSE-free core
//! ([`crate::vfs::TierFs`]).
//!
//! Layers, bottom up:
//! - [`abi`]: the kernel's message layouts (protocol 7.42).
//! - [`mount`]: getting a connection (`mount` as root, `fusermount3` otherwise) and
//!   unmounting it.
//! - [`request`]: a request's bytes decoded into a typed operation, the same for every
//!   transport.
//! - [`init`]: INIT, what the protocol negotiates (flags, sizes, passthrough, io_uring).
//! - [`dispatch`]: the one dispatcher: a call into the core per request, the reply body,
//!   kernel passthrough registrations, panic containment.
//! - `reply`: the dispatcher's pure conversions of the core's results into reply structs
//!   (attributes, directory entries, xattr answers, open flags, errnos).
//! - Transports, which only move bytes: [`dev`] (`readv`/`writev` on /dev/fuse) and
//!   [`uring`] (FUSE over io_uring, Linux >= 6.14). Neither the dispatcher nor the core
//!   knows which one delivered a request.
//! - [`session`]: mount, INIT, choosing the transport with its fallback, the workers.
//!
//! Why not the `fuser` crate: it keeps its request decoder and reply sender private and
//! answers INIT with protocol 7.40, so it can neither receive a WRITE's data page-aligned
//! (the tier's `O_DIRECT` write then needs a bounce copy) nor speak FUSE over io_uring.

pub mod abi;
pub mod dev;
pub mod dispatch;
pub mod init;
pub mod mount;
pub mod notify;
mod reply;
pub mod request;
pub mod session;
pub mod uring;

pub use notify::Notifier;
pub use session::{Session, SessionOptions};

// The mount's limits live here rather than in `init`, which negotiates them, because
// `reply` reports MAX_REQUEST as a file's block size and must not import its own caller.

/// Largest request we negotiate: DeepSpeed's aio block size.
pub const MAX_REQUEST: u32 = 1 << 20;
/// Kernel background requests (async direct I/O in flight): 4 ranks x 2 threads x QD 8
/// and headroom.
pub const MAX_BACKGROUND: u16 = 256;
