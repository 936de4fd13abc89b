//! Open handles and the kernel passthrough switch: the handle table the adapter's file
//! handles index, and passthrough turned off when the kernel refuses it (the rule for which
//! opens the kernel serves is [`crate::data::passthrough`]'s).

use crate::data::passthrough;
use crate::error::{Error, Result};
use crate::inodes::types::*;
use crate::layout::FileLayout;
use crate::vfs::state::TierFs;
use std::sync::atomic::Ordering;

pub(crate) fn passthrough_mode(fs: &TierFs) -> crate::config::Passthrough {
    fs.passthrough_mode
}

pub(crate) fn passthrough_enabled(fs: &TierFs) -> bool {
    fs.passthrough.load(Ordering::Relaxed)
}

pub(crate) fn disable_passthrough(fs: &TierFs, why: &str) {
    if fs.passthrough.swap(false, Ordering::Relaxed) {
        log::warn!("kernel passthrough off: {why}; all I/O goes through the daemon");
    }
}

/// [`passthrough::held_for_placement`] of this mount.
pub(crate) fn held_for_placement(fs: &TierFs) -> u64 {
    passthrough::held_for_placement(&fs.parts())
}

pub(crate) fn passthrough_refused(fs: &TierFs, fh: u64) {
    let mut handles = fs.handles.lock();
    if let Some(Handle::File {
        node, passthrough, ..
    }) = handles.get_mut(&fh)
    {
        if *passthrough {
            *passthrough = false;
            let mut st = node.state.write();
            st.pt_opens = st.pt_opens.saturating_sub(1);
            if let FileLayout::Whole { tier } = st.layout {
                fs.tiers[tier]
                    .counters
                    .pt_open
                    .fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

pub(crate) fn new_fh(fs: &TierFs, h: Handle) -> u64 {
    let fh = fs.next_fh.fetch_add(1, Ordering::Relaxed);
    fs.handles.lock().insert(fh, h);
    fh
}

pub(crate) fn handle(fs: &TierFs, fh: u64) -> Result<Handle> {
    fs.handles.lock().get(&fh).cloned().ok_or(Error::BadHandle)
}
