//! Recovery probes' I/O: a small write and read-back in the tier's `.tierfs-meta` folder
//! that says whether an idle tier whose share was cut has its bandwidth back. When a probe
//! is due and what its result does are the tier's ([`Tier::claim_probe`],
//! [`Tier::fold_probe`]); its requests take their queue slots at [`Class::Probe`] like any
//! other I/O, so a probe never jumps ahead of the tier's own traffic.

use super::{AlignedBuf, Class, Io, Piece};
use crate::tier::{META_DIR, PROBE_BYTES};
use std::io;

/// Threads writing (then reading) at once, each 1 MiB requests over its part of the file.
const THREADS: usize = 4;
const REQUEST: usize = 1 << 20;

/// Runs a claimed probe of tier `index` through `io` and folds its result into the tier's
/// estimates (call it on a thread of its own: a stalled tier must not stall the caller).
pub fn probe(io: Io<'_>, index: usize) {
    let r = measure(io, index);
    io.tiers()[index].fold_probe(r);
}

/// Writes [`PROBE_BYTES`] to the probe file and reads them back; (read, write) bytes/s.
fn measure(io: Io<'_>, index: usize) -> io::Result<(f64, f64)> {
    let tier = &io.tiers()[index];
    let path = tier.root.join(META_DIR).join("probe-live");
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .and_then(|_| Piece::open(&path, tier.direct_io));
    let piece = opened.inspect_err(|e| tier.note_error(e))?;
    let chunk = PROBE_BYTES / THREADS;
    let run = |write: bool| -> io::Result<f64> {
        let start = std::time::Instant::now();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|i| {
                    let piece = &piece;
                    s.spawn(move || -> io::Result<()> {
                        let mut buf = AlignedBuf::zeroed(REQUEST);
                        buf.fill(0x5a);
                        let mut off = (i * chunk) as u64;
                        let end = ((i + 1) * chunk) as u64;
                        while off < end {
                            if write {
                                io.write(Class::Probe, index, piece, &buf, off)?;
                            } else if io.read(Class::Probe, index, piece, &mut buf, off)? < REQUEST
                            {
                                // Not the tier's I/O error (those are counted in `Io`).
                                let e = io::Error::from(io::ErrorKind::UnexpectedEof);
                                tier.note_error(&e);
                                return Err(e);
                            }
                            off += REQUEST as u64;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("probe thread panicked")))
            })
        })?;
        Ok(PROBE_BYTES as f64 / start.elapsed().as_secs_f64().max(1e-6))
    };
    let w = run(true)?;
    let r = run(false)?;
    Ok((r, w))
}
