//! I/O past the daemon: which opens the kernel serves straight from a tier (passthrough)
//! and which files staging memory holds instead, what placement may count on memory to
//! hold, and a file's size as writes past the daemon (passthrough, the direct path) leave
//! it. The flag that turns passthrough off for good, and the handles that hold it, are
//! `vfs::handles`'.

use crate::config::Passthrough;
use crate::data::Parts;
use crate::inodes::file::{FileNode, FileState};
use crate::inodes::pieces;
use crate::inodes::types::{is_deepspeed_swap, PASSTHROUGH_HEADROOM};
use crate::layout::FileLayout;
use crate::tier::Tier;
use crate::tierio::Piece;
use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Whether passthrough may still be offered.
pub(crate) fn enabled(fs: &Parts<'_>) -> bool {
    fs.passthrough.load(Ordering::Relaxed)
}

/// The rule for opening a file in passthrough (state lock held): only whole files; only
/// when the inode has no daemon-served open (the kernel keeps one mode per inode), or
/// already has passthrough opens (then it must); on a healthy tier with room to spare,
/// since a passthrough write that hits ENOSPC cannot be rescued by moving the file; and
/// O_DIRECT opens only with `passthrough = "direct"`, or with `"auto"` for DeepSpeed's
/// swap files (see [`crate::config::Passthrough`]), and on a tier that takes 1 KiB-aligned
/// direct I/O, since DeepSpeed's tails are not 4 KiB-aligned and the kernel passes the
/// caller's alignment straight to the tier.
pub(crate) fn passthrough_piece(
    fs: &Parts<'_>,
    st: &FileState,
    name: &OsStr,
    size: u64,
    flags: i32,
) -> Option<Arc<Piece>> {
    if !enabled(fs) {
        return None;
    }
    let FileLayout::Whole { tier } = st.layout else {
        return None;
    };
    if st.cache.is_some() {
        // Its current bytes are in memory: the kernel must not read the tier instead.
        return None;
    }
    let piece = st.pieces[tier].clone()?;
    if st.pt_opens > 0 {
        return Some(piece);
    }
    if st.opens > 0 || stages_instead(fs, tier) {
        return None;
    }
    let t = &fs.tiers[tier];
    // A draining tier's files go to the daemon: passthrough would hold a piece the drain
    // must move.
    if !t.is_healthy()
        || t.admin.state() == crate::tier::admin::AdminState::Draining
        || t.room() < size.saturating_add(PASSTHROUGH_HEADROOM)
    {
        return None;
    }
    if flags & libc::O_DIRECT != 0 {
        let allowed = match fs.passthrough_mode {
            Passthrough::Direct => true,
            Passthrough::Auto => is_deepspeed_swap(name),
            Passthrough::Off => false,
        };
        if !allowed || !t.small_direct_io {
            return None;
        }
    }
    // The kernel writes a passthrough file with the daemon's credentials, which keep
    // set-user-ID and set-group-ID where a user's write must clear them: such files are
    // written through the daemon (FUSE_HANDLE_KILLPRIV_V2 then clears the bits).
    if flags & libc::O_ACCMODE != libc::O_RDONLY {
        use std::os::unix::fs::PermissionsExt;
        let setid = piece.file().metadata().map_or(true, |m| {
            m.permissions().mode() & (libc::S_ISUID | libc::S_ISGID) != 0
        });
        if setid {
            return None;
        }
    }
    Some(piece)
}

/// Whether a whole file on `tier` is staged in host memory rather than opened in kernel
/// passthrough: with a cache, only the fastest tier's files go to the kernel. A slower
/// tier's file opened in passthrough would be read and written at that tier's speed
/// while DeepSpeed waits on it; through the daemon the prefetcher has read it ahead and
/// its writes land in memory and go back behind the reader (write-behind), so every tier
/// works at once. The fastest tier gains nothing from memory it does not gain from the
/// kernel, which moves its bytes with no daemon CPU at all (but for gradient files, which
/// memory saves a write and a read: `crate::data::cached::cache_on_open` keeps them spare).
pub(crate) fn stages_instead(fs: &Parts<'_>, tier: usize) -> bool {
    fs.cache.is_some() && fs.tiers.len() > 1 && Some(tier) != fastest_tier(fs)
}

/// Whether a whole file on `tier` goes to the kernel rather than into memory when both
/// could take it: with a cache over several tiers, the fastest tier's files do (see
/// [`stages_instead`]). With one tier the cache comes first, as configured.
pub(crate) fn kernel_first(fs: &Parts<'_>, tier: usize) -> bool {
    fs.cache.is_some() && fs.tiers.len() > 1 && Some(tier) == fastest_tier(fs)
}

/// Bytes of the slower tiers' files that staging memory holds, as placement counts them
/// for whole files ([`crate::policy::placement::shares_with_held`]): only where the fastest tier's
/// files go to the kernel and the others' are staged, and only memory the cache has
/// admitted for such files (ranked, not spare), at most [`crate::policy::placement::HELD_FRACTION`]
/// of the budget. Counting the budget instead (what the cache *could* hold) put three of
/// four fresh 1 GiB fio files on the slow tier with nothing staged, and a first big file
/// there too (issue 38): a file the cache does not hold is placed by Eq. 1. Without kernel
/// passthrough the cache holds every tier's files by their next use, so no tier's files
/// can count on it.
pub(crate) fn held_for_placement(fs: &Parts<'_>) -> u64 {
    match fs.cache {
        Some(c)
            if fs.layout == crate::config::Layout::WholeFile
                && fs.tiers.len() > 1
                && enabled(fs) =>
        {
            let Some(fast) = fastest_tier(fs) else {
                return 0;
            };
            let cap = (c.budget() as f64 * crate::policy::placement::HELD_FRACTION) as u64;
            let slower = |n: &FileNode| n.counted() && n.primary.load(Ordering::Relaxed) != fast;
            c.admitted_for(slower).min(cap)
        }
        _ => 0,
    }
}

/// Whether the cache should leave this open's file alone because kernel passthrough
/// will serve it ([`kernel_first`]); asked before the open is admitted.
pub(crate) fn leave_to_kernel(
    fs: &Parts<'_>,
    st: &FileState,
    name: &OsStr,
    size: u64,
    flags: i32,
) -> bool {
    match st.layout {
        FileLayout::Whole { tier } if st.cache.is_none() && kernel_first(fs, tier) => {
            passthrough_piece(fs, st, name, size, flags).is_some()
        }
        _ => false,
    }
}

/// The tier with the largest Eq. 1 share now (the first of equals).
pub(crate) fn fastest_tier(fs: &Parts<'_>) -> Option<usize> {
    let shares = fs.placer.shares();
    let max = shares.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    shares.iter().position(|s| *s == max)
}

/// Counts one more passthrough open of the file, on its tier's counters too.
pub(crate) fn note_pt_open(tiers: &[Tier], st: &mut FileState) {
    st.pt_opens += 1;
    if let FileLayout::Whole { tier } = st.layout {
        let c = &tiers[tier].counters;
        c.pt_open.fetch_add(1, Ordering::Relaxed);
        c.pt_opens_total.fetch_add(1, Ordering::Relaxed);
    }
}

/// Takes the size written into the pieces past the daemon (kernel passthrough, the direct
/// path) as the file's, with the tiers' books.
pub(crate) fn sync_size_from_pieces(tiers: &[Tier], node: &FileNode, st: &FileState) {
    let Some(now) = st.pieces_size() else { return };
    let old = node.size.swap(now, Ordering::AcqRel);
    if old != now {
        if node.counted() {
            pieces::account_resize(tiers, &st.layout, old, now);
        }
        node.dirty.store(true, Ordering::Relaxed);
    }
}
