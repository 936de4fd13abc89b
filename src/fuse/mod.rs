//! The kernel side: the FUSE protocol spoken by the daemon itself, under the FUSE-free core
//! ([`crate::vfs::TierFs`]).
//!
//! Layers, bottom up:
//! - [`abi`]: the kernel's message layouts (protocol 7.42).
//! - [`mount`]: getting a connection (`mount` as root, `fusermount3` otherwise) and
//!   unmounting it.
//! - [`request`]: a request's bytes decoded into a typed operation, the same for every
//!   transport.
//! - [`dispatch`]: the one dispatcher: INIT negotiation, a call into the core per request,
//!   the reply body, kernel passthrough registrations, panic containment.
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
pub mod mount;
pub mod notify;
pub mod request;
pub mod session;
pub mod uring;

pub use dispatch::{MAX_BACKGROUND, MAX_REQUEST};
pub use notify::Notifier;
pub use session::{Session, SessionOptions};
