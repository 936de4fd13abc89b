//! A read or write of an open handle: a file's, handed to the data path (served from the
//! cache, a migration under way, the whole-file piece or the stripes, with the
//! move-on-ENOSPC rescue); a `.tierfs/` file's, from its snapshot or the control file.

use crate::cache::BLOCK;
use crate::data::cached::{self, WriteSrc};
use crate::data::{migrate, passthrough};
use crate::error::{Error, Result};
use crate::inodes::file::{FileNode, FileState};
use crate::inodes::pieces;
use crate::inodes::types::Handle;
use crate::inodes::types::*;
use crate::layout::FileLayout;
use crate::tierio::AlignedBuf;
use crate::tierio::Class;
use crate::vfs::state::TierFs;
use crate::vfs::{files, handles};
use std::cell::RefCell;

use crate::data::io;
use crate::data::moves;
use std::sync::atomic::Ordering;
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
        read_to(fs, fh, off, &mut b[..size as usize], reply)
    })
}

/// Reads up to `buf.len()` bytes at `off` and hands them to `reply`: straight from the
/// host-memory cache's block when the read lies in one cached block (see
/// [`cached::cached_read_with`]: `reply` runs with that block locked), else read into
/// `buf` first.
pub(crate) fn read_to<R>(
    fs: &TierFs,
    fh: u64,
    off: u64,
    buf: &mut [u8],
    reply: impl FnOnce(&[u8]) -> R,
) -> Result<R> {
    if let Handle::File { node, .. } = handles::handle(fs, fh)? {
        let st = node.state.read();
        if let Some(e) = &st.cache {
            let fsize = node.size();
            let len = (buf.len() as u64).min(fsize.saturating_sub(off)) as usize;
            if len > 0 {
                let mut reply = Some(reply);
                let take = |d: &[u8]| (reply.take().expect("called once"))(d);
                if let Some(r) = cached::cached_read_with(
                    &fs.parts(),
                    &node,
                    &st,
                    e,
                    off,
                    len,
                    Class::DemandRead,
                    take,
                )? {
                    return Ok(r);
                }
                drop(st);
                let n = read_into(fs, fh, off, buf)?;
                return Ok((reply.take().expect("not called"))(&buf[..n]));
            }
        }
    }
    let n = read_into(fs, fh, off, buf)?;
    Ok(reply(&buf[..n]))
}

pub(crate) fn read_into(fs: &TierFs, fh: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
    match handles::handle(fs, fh)? {
        Handle::File { node, .. } => {
            let st = node.state.read();
            if st.direct_writers > 0 {
                // A program writes (and truncates) the pieces past the daemon: their size
                // is the file's end.
                passthrough::sync_size_from_pieces(&fs.tiers, &node, &st);
            }
            let fsize = node.size();
            if off >= fsize {
                return Ok(0);
            }
            let len = (buf.len() as u64).min(fsize - off) as usize;
            match &st.cache {
                Some(e) => cached::cached_read(
                    &fs.parts(),
                    &node,
                    &st,
                    e,
                    off,
                    &mut buf[..len],
                    Class::DemandRead,
                )?,
                None => {
                    moves::read_file(&fs.parts(), &st, off, &mut buf[..len], Class::DemandRead)?
                }
            }
            Ok(len)
        }
        // Only an open file's handle comes here: the façade serves the others (the
        // `.tierfs/` files', a folder's) in `vfs::statsdir`.
        _ => Err(Error::BadHandle),
    }
}

/// [`write`] of a FUSE transport's request buffer holding exactly one cache block: a
/// block-aligned write into a cached file takes the buffer itself as the block's memory,
/// with no copy, and leaves another buffer in `buf` (see [`WriteSrc::Block`]); any other
/// write is [`write`]'s, from the buffer's bytes.
pub(crate) fn write_buf(fs: &TierFs, fh: u64, off: u64, buf: &mut AlignedBuf) -> Result<u32> {
    let n = buf.len();
    if n as u64 == BLOCK && off % BLOCK == 0 {
        if let Handle::File {
            node, write: true, ..
        } = handles::handle(fs, fh)?
        {
            let st = node.state.read();
            if let Some(e) = &st.cache {
                let end = off
                    .checked_add(BLOCK)
                    .ok_or(Error::Invalid("offset overflow"))?;
                if cached::cached_write(&fs.parts(), &node, &st, e, off, &mut WriteSrc::Block(buf))?
                {
                    cached_wrote(fs, &node, &st, end);
                    return Ok(n as u32);
                }
            }
        }
    }
    write(fs, fh, off, buf)
}

/// The books after a write into a cached file's memory up to `end`: its mtime, size and
/// the tiers' bytes, and a dirty mark for close.
fn cached_wrote(fs: &TierFs, node: &FileNode, st: &FileState, end: u64) {
    *node.mtime.lock() = Some(SystemTime::now());
    let old = node.size.fetch_max(end, Ordering::AcqRel);
    if end > old && node.counted() {
        pieces::account_resize(&fs.tiers, &st.layout, old, end);
    }
    node.dirty.store(true, Ordering::Relaxed);
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
        // As in `read_into`: not an open file's, not the data path's.
        _ => return Err(Error::BadHandle),
    };
    if data.is_empty() {
        // Writing nothing changes nothing, not even the size (POSIX).
        return Ok(0);
    }
    {
        let st = node.state.read();
        if st.direct_writers > 0 {
            passthrough::sync_size_from_pieces(&fs.tiers, &node, &st);
        }
    }
    let end = off
        .checked_add(data.len() as u64)
        .ok_or(Error::Invalid("offset overflow"))?;
    let parts = fs.parts();
    let mut moved = false;
    loop {
        let st = node.state.read();
        if let Some(e) = &st.cache {
            if cached::cached_write(&parts, &node, &st, e, off, &mut WriteSrc::Slice(data))? {
                cached_wrote(fs, &node, &st, end);
                return Ok(data.len() as u32);
            }
            // It outgrew the cache: back to the tiers, then write there.
            drop(st);
            let mut st = node.state.write();
            cached::uncache_locked(&parts, &node, &mut st)?;
            continue;
        }
        // Growth past a tier's capacity, or into space promised to cached data, is
        // refused up front like a full tier's ENOSPC: the file moves.
        let growing = st.migration.as_ref().map_or(&st.layout, |m| &m.layout);
        let r = if let Some(t) = files::refuses_growth(fs, growing, node.size(), end) {
            Err((t, std::io::Error::from_raw_os_error(libc::ENOSPC)))
        } else {
            match (&st.migration, &st.layout) {
                (Some(m), _) => migrate::migration_write(&parts, &node, &st, m, off, data)?,
                (None, FileLayout::Whole { tier }) => {
                    let piece = pieces::open_piece(&fs.tiers, &st, *tier, "write")?;
                    io::piece_write(parts.io, *tier, piece, data, off).map_err(|e| (*tier, e))
                }
                (None, FileLayout::Stripe(_)) => {
                    io::write_extents(parts.io, &st, off, data, Class::DemandWrite)
                }
            }
        };
        match r {
            Ok(()) => {
                if st.migration.is_some() || !touches_primary(&st.layout, off, end) {
                    files::touch_primary(fs, &st);
                }
                let old = node.size.fetch_max(end, Ordering::AcqRel);
                if end > old && node.counted() {
                    pieces::account_resize(&fs.tiers, &st.layout, old, end);
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
                if let Err(re) = migrate::relocate(&parts, ino, &node, Some(tier), end) {
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
