//! Reads and writes of a striped file, split over its pieces by the library (the program's
//! descriptor stays the FUSE one): each extent of the request goes to its piece with
//! `pread`/`pwrite` at the piece's own offset ([`StripeMap::extents`]). The result is what
//! one call on the whole file would give: the bytes moved up to the first short or failed
//! extent, or that error when nothing moved before it.

use tierfs_wire::stripe::{Extent, StripeMap};

/// One extent's transfer: (tier, offset in the piece, offset in the buffer, length) ->
/// bytes moved, or `Err(errno)`.
pub type Move<'a> = dyn FnMut(&Extent) -> Result<usize, i32> + 'a;

/// Splits `[off, off + len)` of the file over its pieces and moves each extent with `mv`,
/// in logical order. Stops at the first short or failed extent: `Ok(bytes before it and
/// its own)`, or its `Err(errno)` when it is the first.
pub fn split(map: &StripeMap, off: u64, len: usize, mv: &mut Move<'_>) -> Result<usize, i32> {
    let mut done = 0usize;
    for e in map.extents(off, len) {
        match mv(&e) {
            Ok(n) => {
                done += n;
                if n < e.len {
                    break;
                }
            }
            Err(errno) if done == 0 => return Err(errno),
            Err(_) => break,
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A striped file held in memory: pieces per tier, moved like pread/pwrite would.
    struct Mem {
        pieces: Vec<Vec<u8>>,
        fail_tier: Option<usize>,
    }

    impl Mem {
        fn write(&mut self, map: &StripeMap, off: u64, data: &[u8]) -> Result<usize, i32> {
            split(map, off, data.len(), &mut |e: &Extent| {
                if self.fail_tier == Some(e.tier) {
                    return Err(libc::EIO);
                }
                let p = &mut self.pieces[e.tier];
                let end = e.local as usize + e.len;
                if p.len() < end {
                    p.resize(end, 0);
                }
                p[e.local as usize..end].copy_from_slice(&data[e.buf..e.buf + e.len]);
                Ok(e.len)
            })
        }
        fn read(&mut self, map: &StripeMap, off: u64, out: &mut [u8]) -> Result<usize, i32> {
            let n = out.len();
            split(map, off, n, &mut |e: &Extent| {
                if self.fail_tier == Some(e.tier) {
                    return Err(libc::EIO);
                }
                let p = &self.pieces[e.tier];
                let have = p.len().saturating_sub(e.local as usize).min(e.len);
                out[e.buf..e.buf + have]
                    .copy_from_slice(&p[e.local as usize..e.local as usize + have]);
                Ok(have)
            })
        }
    }

    #[test]
    fn split_requests_read_back_what_was_written_anywhere() {
        let map = StripeMap::new(16, vec![0, 1, 0, 2]);
        let mut m = Mem {
            pieces: vec![Vec::new(); 3],
            fail_tier: None,
        };
        let mut model = vec![0u8; 300];
        let mut seed = 7u32;
        for _ in 0..200 {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let off = (seed >> 8) as usize % 280;
            let len = 1 + (seed >> 20) as usize % (300 - off);
            let data: Vec<u8> = (0..len).map(|i| (i as u32 ^ seed) as u8).collect();
            assert_eq!(m.write(&map, off as u64, &data), Ok(len));
            model[off..off + len].copy_from_slice(&data);
            let mut out = vec![0u8; 300];
            let got = m.read(&map, 0, &mut out).unwrap();
            assert_eq!(&out[..got], &model[..got]);
        }
    }

    #[test]
    fn a_failing_piece_stops_the_request_where_it_fails() {
        let map = StripeMap::new(16, vec![0, 1]);
        let mut m = Mem {
            pieces: vec![Vec::new(); 2],
            fail_tier: Some(1),
        };
        // The first stripe (tier 0) goes, the second fails: the bytes before it count.
        assert_eq!(m.write(&map, 0, &[1u8; 40]), Ok(16));
        // Starting on the failing tier: the error itself.
        assert_eq!(m.write(&map, 16, &[1u8; 40]), Err(libc::EIO));
        // A short piece (end of file) ends a read there.
        m.fail_tier = None;
        let mut out = [0u8; 64];
        assert_eq!(m.read(&map, 0, &mut out), Ok(16));
    }
}
