//! The data path: a read or write of an open file, served from the cache, a migration
//! under way, the whole-file piece or the stripes, with the move-on-ENOSPC rescue.

use crate::data::file::FileState;
use crate::data::{cached, migrate};
use crate::error::{Error, Result};
use crate::layout::FileLayout;
use crate::tierio::{AlignedBuf, Piece};
use crate::tierio::{Class, Op};
use crate::vfs::handles::Handle;
use crate::vfs::state::TierFs;
use crate::vfs::types::*;
use crate::vfs::{backing, files, handles, state, statsdir};
use std::cell::RefCell;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

thread_local! {
    static READ_BUF: RefCell<AlignedBuf> = RefCell::new(AlignedBuf::zeroed(1 << 20));
}

pub(crate) fn read_with<R>(
    fs: &TierFs,
    fh: u64,
    off: u64,
    size: u32,
    reply: impl FnOnce(&[u8]) -> R,
) -> Result<R> {
    READ_BUF.with(|b| {
        let mut b = b.borrow_mut();
        b.resize((size as usize).div_ceil(crate::tierio::ALIGN) * crate::tierio::ALIGN);
        let n = read_into(fs, fh, off, &mut b[..size as usize])?;
        Ok(reply(&b[..n]))
    })
}

pub(crate) fn read_into(fs: &TierFs, fh: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
    match handles::handle(fs, fh)? {
        Handle::Virtual(content) => {
            let start = (off as usize).min(content.len());
            let end = (start + buf.len()).min(content.len());
            buf[..end - start].copy_from_slice(&content[start..end]);
            Ok(end - start)
        }
        Handle::Dir(_) => Err(Error::IsDir),
        Handle::Control => Err(Error::Access("the control file is write-only")),
        Handle::File { node, .. } => {
            let st = node.state.read();
            let fsize = node.size();
            if off >= fsize {
                return Ok(0);
            }
            let len = (buf.len() as u64).min(fsize - off) as usize;
            match &st.cache {
                Some(e) => {
                    cached::cached_read(fs, &node, &st, e, off, &mut buf[..len], Class::DemandRead)?
                }
                None => migrate::read_file(fs, &st, off, &mut buf[..len], Class::DemandRead)?,
            }
            Ok(len)
        }
    }
}

pub(crate) fn read_pieces(
    fs: &TierFs,
    st: &FileState,
    off: u64,
    buf: &mut [u8],
    class: Class,
) -> Result<()> {
    read_layout(fs, &st.layout, &st.pieces, off, buf, false, class)
}

/// Reads logical bytes through `layout` from `pieces`. A striped piece shorter than the
/// file is a hole; a whole piece may be short only with `holes` (a move's new pieces).
pub(crate) fn read_layout(
    fs: &TierFs,
    layout: &FileLayout,
    pieces: &[Option<Arc<Piece>>],
    off: u64,
    buf: &mut [u8],
    holes: bool,
    class: Class,
) -> Result<()> {
    match layout {
        FileLayout::Whole { tier } => {
            let piece = backing::piece_in(fs, pieces, *tier, "read")?;
            let got = piece_read_as(fs, *tier, piece, buf, off, class)?;
            if holes {
                buf[got..].fill(0);
            } else if got < buf.len() {
                return Err(Error::ShortRead {
                    tier: fs.tiers[*tier].name.clone(),
                    path: PathBuf::from("(open file)"),
                    offset: off,
                    got,
                    want: buf.len(),
                });
            }
        }
        FileLayout::Stripe(_) => read_extents_in(fs, layout, pieces, off, buf, class)?,
    }
    Ok(())
}

/// Reads a range of a file from its pieces as one engine batch (every tier at once);
/// where a piece is shorter than the range, zeros (a hole, or a cached file's tail that
/// is only in memory yet).
pub(crate) fn read_extents(
    fs: &TierFs,
    st: &FileState,
    off: u64,
    buf: &mut [u8],
    class: Class,
) -> Result<()> {
    read_extents_in(fs, &st.layout, &st.pieces, off, buf, class)
}

/// [`TierFs::read_extents`] through `layout` from `pieces` (a move's new ones, say).
pub(crate) fn read_extents_in(
    fs: &TierFs,
    layout: &FileLayout,
    pieces: &[Option<Arc<Piece>>],
    off: u64,
    buf: &mut [u8],
    class: Class,
) -> Result<()> {
    let exts = layout.extents(off, buf.len());
    let mut tiers = Vec::with_capacity(exts.len());
    let mut ops = Vec::with_capacity(exts.len());
    let mut rest: &mut [u8] = buf;
    for ex in &exts {
        let (dst, tail) = std::mem::take(&mut rest).split_at_mut(ex.len);
        rest = tail;
        tiers.push(ex.tier);
        ops.push(Op::Read {
            piece: backing::piece_in(fs, pieces, ex.tier, "read")?,
            buf: dst,
            off: ex.local,
        });
    }
    let results = run_batch(fs, class, &tiers, &mut ops);
    for ((op, r), t) in ops.iter_mut().zip(results).zip(tiers) {
        // Counted on its tier by `tierio`.
        let got = r.map_err(|e| Error::tier(&fs.tiers[t].name, "read", "(open file)", e))?;
        if let Op::Read { buf, .. } = op {
            buf[got..].fill(0);
        }
    }
    Ok(())
}

/// Runs backing requests (`ops[i]` on tier `tiers[i]`) as one batch of `class`
/// ([`crate::tierio::Io::submit`]: admission, engine, accounting); the caller maps errors.
pub(crate) fn run_batch(
    fs: &TierFs,
    class: Class,
    tiers: &[usize],
    ops: &mut [Op<'_>],
) -> Vec<std::io::Result<usize>> {
    state::io(fs).submit(class, tiers, ops)
}

/// Writes a range of a file to its pieces as one engine batch; the first failure with
/// its tier (for the rescue that moves the file).
pub(crate) fn write_extents(
    fs: &TierFs,
    st: &FileState,
    off: u64,
    data: &[u8],
    class: Class,
) -> std::result::Result<(), (usize, std::io::Error)> {
    let exts = st.layout.extents(off, data.len());
    let mut tiers = Vec::with_capacity(exts.len());
    let mut ops = Vec::with_capacity(exts.len());
    for ex in &exts {
        let piece = backing::open_piece(fs, st, ex.tier, "write").map_err(|_| {
            (
                ex.tier,
                std::io::Error::other("the tier is missing (mounted degraded without it)"),
            )
        })?;
        tiers.push(ex.tier);
        ops.push(Op::Write {
            piece,
            buf: &data[ex.buf..ex.buf + ex.len],
            off: ex.local,
        });
    }
    let results = run_batch(fs, class, &tiers, &mut ops);
    for (r, t) in results.into_iter().zip(tiers) {
        r.map_err(|e| (t, e))?;
    }
    Ok(())
}

pub(crate) fn piece_read_as(
    fs: &TierFs,
    tier: usize,
    piece: &Piece,
    buf: &mut [u8],
    off: u64,
    class: Class,
) -> Result<usize> {
    state::io(fs)
        .read(class, tier, piece, buf, off)
        .map_err(|e| Error::tier(&fs.tiers[tier].name, "read", "(open file)", e))
}

pub(crate) fn piece_write(
    fs: &TierFs,
    tier: usize,
    piece: &Piece,
    buf: &[u8],
    off: u64,
) -> std::io::Result<()> {
    state::io(fs).write(Class::DemandWrite, tier, piece, buf, off)
}

pub(crate) fn write(fs: &TierFs, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
    let (node, ino) = match handles::handle(fs, fh)? {
        Handle::File {
            node, ino, write, ..
        } => {
            if !write {
                return Err(Error::BadHandle);
            }
            (node, ino)
        }
        Handle::Virtual(_) => return Err(Error::Access("the stats files are read-only")),
        Handle::Control => {
            statsdir::control(fs, data)?;
            return Ok(data.len() as u32);
        }
        Handle::Dir(_) => return Err(Error::IsDir),
    };
    if data.is_empty() {
        // Writing nothing changes nothing, not even the size (POSIX).
        return Ok(0);
    }
    let end = off
        .checked_add(data.len() as u64)
        .ok_or(Error::Invalid("offset overflow"))?;
    let mut moved = false;
    loop {
        let st = node.state.read();
        if let Some(e) = &st.cache {
            if cached::cached_write(fs, &node, &st, e, off, data)? {
                *node.mtime.lock() = Some(SystemTime::now());
                let old = node.size.fetch_max(end, Ordering::AcqRel);
                if end > old {
                    backing::account_resize(fs, &st.layout, old, end);
                }
                node.dirty.store(true, Ordering::Relaxed);
                return Ok(data.len() as u32);
            }
            // It outgrew the cache: back to the tiers, then write there.
            drop(st);
            let mut st = node.state.write();
            cached::uncache_locked(fs, &node, &mut st)?;
            continue;
        }
        // Growth past a tier's capacity, or into space promised to cached data, is
        // refused up front like a full tier's ENOSPC: the file moves.
        let growing = st.migration.as_ref().map_or(&st.layout, |m| &m.layout);
        let r = if let Some(t) = files::refuses_growth(fs, growing, node.size(), end) {
            Err((t, std::io::Error::from_raw_os_error(libc::ENOSPC)))
        } else {
            match (&st.migration, &st.layout) {
                (Some(m), _) => migrate::migration_write(fs, &node, &st, m, off, data)?,
                (None, FileLayout::Whole { tier }) => {
                    let piece = backing::open_piece(fs, &st, *tier, "write")?;
                    piece_write(fs, *tier, piece, data, off).map_err(|e| (*tier, e))
                }
                (None, FileLayout::Stripe(_)) => {
                    write_extents(fs, &st, off, data, Class::DemandWrite)
                }
            }
        };
        match r {
            Ok(()) => {
                if st.migration.is_some() || !touches_primary(&st.layout, off, end) {
                    files::touch_primary(fs, &st);
                }
                let old = node.size.fetch_max(end, Ordering::AcqRel);
                if end > old {
                    backing::account_resize(fs, &st.layout, old, end);
                }
                node.dirty.store(true, Ordering::Relaxed);
                return Ok(data.len() as u32);
            }
            Err((tier, e)) if is_rescuable(&e) && !moved => {
                drop(st);
                log::warn!(
                    "tier '{}' refused a write to inode {ino} ({e}); moving the file to another tier",
                    fs.tiers[tier].name
                );
                if let Err(re) = migrate::relocate(fs, ino, &node, Some(tier), end) {
                    // The caller gets the tier's own error; the log has why the move failed.
                    log::error!(
                        "moving inode {ino} off tier '{}' failed: {re}",
                        fs.tiers[tier].name
                    );
                    return Err(Error::tier(&fs.tiers[tier].name, "write", "(open file)", e));
                }
                moved = true;
            }
            Err((tier, e)) => {
                return Err(Error::tier(&fs.tiers[tier].name, "write", "(open file)", e));
            }
        }
    }
}
