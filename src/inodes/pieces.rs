//! Where an inode's pieces are on the tiers, and the tiers' side of them: the open piece of
//! a file on a tier (or why there is none), a file's bytes on the tiers' books, and a
//! tier's error named for the caller. The namespace and the data path share these; they
//! need the tiers and, for a path, the tree, nothing more.

use crate::error::{Error, Result};
use crate::inodes::file::FileState;
use crate::inodes::tree::Tree;
use crate::layout::FileLayout;
use crate::tier::Tier;
use crate::tierio::Piece;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The piece of an open file on `tier`, or EIO when the tier was left out of a degraded
/// mount (the only way an open file lacks one).
pub(crate) fn open_piece<'a>(
    tiers: &[Tier],
    st: &'a FileState,
    tier: usize,
    op: &'static str,
) -> Result<&'a Piece> {
    piece_in(tiers, &st.pieces, tier, op)
}

/// The piece on `tier` among `pieces` (a file's, or a move's new ones).
pub(crate) fn piece_in<'a>(
    tiers: &[Tier],
    pieces: &'a [Option<Arc<Piece>>],
    tier: usize,
    op: &'static str,
) -> Result<&'a Piece> {
    match &pieces[tier] {
        Some(p) => Ok(p),
        None if tiers[tier].missing => Err(missing_err(tiers, tier, op)),
        None => Err(Error::BadHandle),
    }
}

/// The error for a request that needs a tier missing from a degraded mount.
pub(crate) fn missing_err(tiers: &[Tier], tier: usize, op: &'static str) -> Error {
    let t = &tiers[tier];
    t.counters.errors.fetch_add(1, Ordering::Relaxed);
    Error::tier(
        &t.name,
        op,
        &t.root,
        // No raw errno: the caller gets EIO, and no move is attempted.
        std::io::Error::other("the tier is missing (mounted degraded without it)"),
    )
}

/// A tier's failure of `op` on `path`: counted on the tier, and an error naming both.
pub(crate) fn tier_err(
    tiers: &[Tier],
    tier: usize,
    op: &'static str,
    path: &Path,
    e: std::io::Error,
) -> Error {
    tiers[tier].note_error(&e);
    Error::tier(&tiers[tier].name, op, path, e)
}

/// Adjusts the per-tier `used` counters for a size change of a file.
pub(crate) fn account_resize(tiers: &[Tier], layout: &FileLayout, old: u64, new: u64) {
    match layout {
        FileLayout::Whole { tier } => tiers[*tier].add_used(new as i64 - old as i64),
        FileLayout::Stripe(m) => {
            for t in &m.tiers {
                let d = m.piece_len(*t, new) as i64 - m.piece_len(*t, old) as i64;
                tiers[*t].add_used(d);
            }
        }
    }
}

/// Where a file's piece on `tier` is: at its path, or in limbo once unlinked.
pub(crate) fn piece_path(tiers: &[Tier], tree: &Tree, ino: u64, tier: usize) -> Result<PathBuf> {
    Ok(if tree.get(ino)?.limbo {
        tiers[tier].limbo_path(ino)
    } else {
        tiers[tier].path(&tree.rel(ino).ok_or(Error::NotFound)?)
    })
}

/// ENOSPC for a new file or a move no tier has room for, logged with each tier's
/// account: `df` may show free space that tierfs keeps back ([`crate::tier::FREE_RESERVE`]
/// per tier, and what the cache has promised), or the tier is at its `capacity`.
pub(crate) fn no_room(tiers: &[Tier], want: u64) -> Error {
    use crate::units::fmt_bytes;
    let why: Vec<String> = tiers
        .iter()
        .filter(|t| !t.missing)
        .map(|t| {
            let avail = t.space().map_or(0, |s| s.avail);
            let mut w = format!(
                "'{}' {} free on its file system, {} of it kept back (FREE_RESERVE)",
                t.name,
                fmt_bytes(avail),
                fmt_bytes(avail.min(crate::tier::FREE_RESERVE))
            );
            let promised = t.counters.reserved.load(Ordering::Relaxed);
            if promised > 0 {
                w.push_str(&format!(
                    ", {} promised to cached data",
                    fmt_bytes(promised)
                ));
            }
            if let Some(c) = t.capacity {
                w.push_str(&format!(
                    ", {} of its capacity {} used",
                    fmt_bytes(t.counters.used.load(Ordering::Relaxed)),
                    fmt_bytes(c)
                ));
            }
            if !t.is_healthy() {
                w.push_str(&format!(", {}", t.state()));
            }
            w
        })
        .collect();
    log::warn!(
        "no tier has room for {} more bytes (ENOSPC): {}",
        fmt_bytes(want),
        why.join("; ")
    );
    Error::NoSpace(want)
}
