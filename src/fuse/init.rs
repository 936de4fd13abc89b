//! FUSE INIT: what the protocol negotiates with the kernel for one connection. The
//! protocol version we need; the flags we ask for out of those offered; the sizes
//! (largest request, readahead, background requests, pages); whether kernel passthrough is
//! on (the kernel offers it and we are root, else the core turns it off with the reason)
//! and whether the connection moves to FUSE over io_uring.
//!
//! Apart from the dispatcher (`dispatch.rs`), which serves every request after INIT: INIT
//! runs once per connection and decides what the serving path may assume, and the serving
//! path (the data path's hot path) need not be read to change a negotiation. Handed the
//! core and the transport's wish, it holds no state of its own.

use super::abi::{self, init};
use super::{MAX_BACKGROUND, MAX_REQUEST};
use crate::vfs::TierFs;

/// What INIT settled.
#[derive(Debug, Clone, Copy, Default)]
pub struct Negotiated {
    pub minor: u32,
    /// The kernel agreed to FUSE over io_uring for this connection.
    pub uring: bool,
    /// The kernel offered io_uring (module parameter `enable_uring` is on).
    pub uring_offered: bool,
    pub passthrough: bool,
}

/// Answers the kernel's INIT `i` for `fs` (`want_uring`: the transport asks for FUSE over
/// io_uring): what we ask for and what we settled on; `Err` when we cannot speak the
/// kernel's protocol (another major version, or a minor one too old).
pub fn negotiate(
    fs: &TierFs,
    want_uring: bool,
    i: &abi::InitIn,
) -> Result<(abi::InitOut, Negotiated), String> {
    if i.major != abi::KERNEL_VERSION {
        return Err(format!(
            "the kernel speaks FUSE {}.{}, tierfs needs 7.{}",
            i.major,
            i.minor,
            abi::MIN_KERNEL_MINOR
        ));
    }
    if i.minor < abi::MIN_KERNEL_MINOR {
        return Err(format!(
            "the kernel's FUSE protocol 7.{} is older than 7.{} (Linux 5.9); upgrade the kernel",
            i.minor,
            abi::MIN_KERNEL_MINOR
        ));
    }
    let offered = if i.flags as u64 & init::INIT_EXT != 0 {
        i.flags as u64 | (i.flags2 as u64) << 32
    } else {
        i.flags as u64
    };
    let mut want = init::ASYNC_READ
        | init::BIG_WRITES
        | init::MAX_PAGES
        | init::ASYNC_DIO
        | init::PARALLEL_DIROPS
        | init::HANDLE_KILLPRIV_V2
        | init::INIT_EXT;
    let mut neg = Negotiated {
        minor: i.minor.min(abi::KERNEL_MINOR_VERSION),
        ..Negotiated::default()
    };
    for (bit, name) in [
        (init::ASYNC_DIO, "FUSE_ASYNC_DIO"),
        (init::MAX_PAGES, "FUSE_MAX_PAGES"),
        (init::PARALLEL_DIROPS, "FUSE_PARALLEL_DIROPS"),
        (init::HANDLE_KILLPRIV_V2, "FUSE_HANDLE_KILLPRIV_V2"),
    ] {
        if offered & bit == 0 {
            log::info!("the kernel lacks {name}");
        }
    }
    let mut max_stack_depth = 0;
    if fs.passthrough_enabled() {
        if offered & init::PASSTHROUGH == 0 {
            fs.disable_passthrough("this kernel has no FUSE passthrough (Linux >= 6.9)");
        } else if crate::sys::euid() != 0 {
            // Registering a backing file needs CAP_SYS_ADMIN.
            fs.disable_passthrough("not root (registering backing files needs CAP_SYS_ADMIN)");
        } else {
            want |= init::PASSTHROUGH;
            max_stack_depth = 1;
            neg.passthrough = true;
        }
    }
    neg.uring_offered = offered & init::OVER_IO_URING != 0;
    if want_uring && neg.uring_offered {
        want |= init::OVER_IO_URING;
        neg.uring = true;
    }
    let flags = want & offered;
    let out = abi::InitOut {
        major: abi::KERNEL_VERSION,
        minor: abi::KERNEL_MINOR_VERSION,
        max_readahead: i.max_readahead.min(MAX_REQUEST),
        flags: flags as u32,
        flags2: (flags >> 32) as u32,
        max_background: MAX_BACKGROUND,
        congestion_threshold: MAX_BACKGROUND * 3 / 4,
        max_write: MAX_REQUEST,
        time_gran: 1,
        max_pages: (MAX_REQUEST / 4096) as u16,
        max_stack_depth,
        ..abi::InitOut::default()
    };
    Ok((out, neg))
}
