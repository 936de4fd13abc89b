//! A file's layout over the tiers: which tier holds which logical bytes, and how that is
//! persisted so a remount (or `tierfs export`) finds the same bytes.
//!
//! Every piece of a file is a plain file at the file's own path in its tier's `data/` tree.
//! The layout is written once, at creation, into the piece's `user.tierfs.layout` xattr
//! (format versioned); it never changes afterwards except by moving a whole file. The
//! logical size is not stored at all: it is derived from the piece sizes, which the
//! filesystem keeps exact (every truncate sets each piece to its share of the new size), so
//! there is no second copy of the size to disagree after a crash.
//!
//! A piece with no layout xattr is a whole file on the tier it sits on: that lets a tier
//! folder filled by hand (or on a filesystem without user xattrs) be mounted as is.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Name of the xattr that stores a piece's layout. Hidden from users.
pub const LAYOUT_XATTR: &str = "user.tierfs.layout";
/// Current on-disk layout format.
pub const FORMAT_VERSION: u32 = 1;

/// Where a file's bytes live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileLayout {
    /// All bytes on one tier.
    Whole { tier: usize },
    /// `unit`-sized stripes assigned to tiers by a repeating pattern.
    Stripe(StripeMap),
}

impl FileLayout {
    /// Tiers that hold a piece of this file, in ascending order.
    pub fn tiers(&self) -> Vec<usize> {
        match self {
            FileLayout::Whole { tier } => vec![*tier],
            FileLayout::Stripe(m) => m.tiers.clone(),
        }
    }

    /// The tier whose piece carries the file's metadata (mode, owner, times, xattrs).
    pub fn primary(&self) -> usize {
        match self {
            FileLayout::Whole { tier } => *tier,
            FileLayout::Stripe(m) => m.pattern[0] as usize,
        }
    }

    /// Splits the logical range `[off, off+len)` into per-piece extents.
    pub fn extents(&self, off: u64, len: usize) -> Vec<Extent> {
        match self {
            FileLayout::Whole { tier } => vec![Extent {
                tier: *tier,
                local: off,
                buf: 0,
                len,
            }],
            FileLayout::Stripe(m) => m.extents(off, len),
        }
    }

    /// The size `tier`'s piece has when the file is `size` bytes long.
    pub fn piece_len(&self, tier: usize, size: u64) -> u64 {
        match self {
            FileLayout::Whole { tier: t } if *t == tier => size,
            FileLayout::Whole { .. } => 0,
            FileLayout::Stripe(m) => m.piece_len(tier, size),
        }
    }

    /// Serialized form for the layout xattr.
    pub fn encode(&self) -> String {
        match self {
            FileLayout::Whole { tier } => {
                format!("tierfs-layout v{FORMAT_VERSION} whole-file tier={tier}")
            }
            FileLayout::Stripe(m) => {
                let p: Vec<String> = m.pattern.iter().map(|t| t.to_string()).collect();
                format!(
                    "tierfs-layout v{FORMAT_VERSION} stripe unit={} pattern={}",
                    m.unit,
                    p.join(",")
                )
            }
        }
    }

    /// [`FileLayout::encode`] with the file's id (see [`new_file_id`]) for a striped file's
    /// pieces.
    pub fn encode_with_id(&self, id: Option<u64>) -> String {
        match (self, id) {
            (FileLayout::Stripe(_), Some(id)) => format!("{} id={id:016x}", self.encode()),
            _ => self.encode(),
        }
    }

    /// Parses [`FileLayout::encode`]'s output; `ntiers` bounds the tier indices.
    pub fn decode(s: &str, ntiers: usize) -> Result<FileLayout, String> {
        let mut words = s.split_whitespace();
        if words.next() != Some("tierfs-layout") {
            return Err(format!("not a tierfs layout: {s:?}"));
        }
        let version = words.next().unwrap_or("");
        if version != format!("v{FORMAT_VERSION}") {
            return Err(format!(
                "layout format {version} is not supported by this tierfs (v{FORMAT_VERSION})"
            ));
        }
        let kind = words.next().unwrap_or("");
        let mut kv = std::collections::HashMap::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| format!("bad layout field {w:?}"))?;
            kv.insert(k, v);
        }
        match kind {
            "whole-file" => {
                let tier: usize = kv
                    .get("tier")
                    .and_then(|t| t.parse().ok())
                    .ok_or("whole-file layout without tier")?;
                if tier >= ntiers {
                    return Err(format!("layout names tier {tier}, config has {ntiers}"));
                }
                Ok(FileLayout::Whole { tier })
            }
            "stripe" => {
                let unit: u64 = kv
                    .get("unit")
                    .and_then(|t| t.parse().ok())
                    .filter(|u| *u > 0)
                    .ok_or("stripe layout without unit")?;
                let pattern: Result<Vec<u8>, _> = kv
                    .get("pattern")
                    .ok_or("stripe layout without pattern")?
                    .split(',')
                    .map(|t| t.parse::<u8>())
                    .collect();
                let pattern = pattern.map_err(|e| format!("bad stripe pattern: {e}"))?;
                if pattern.is_empty() || pattern.iter().any(|t| *t as usize >= ntiers) {
                    return Err(format!(
                        "stripe pattern {pattern:?} does not fit {ntiers} tiers"
                    ));
                }
                Ok(FileLayout::Stripe(StripeMap::new(unit, pattern)))
            }
            other => Err(format!("unknown layout kind {other:?}")),
        }
    }
}

/// Longest name a directory entry may have.
pub const NAME_MAX: usize = 255;

/// The name a conflicting copy of `name` from tier `tier` is set aside under (by the
/// mount's scan and `tierfs fsck --repair` alike, never deleted): `NAME.tierfs-conflict-TIER`,
/// or `NAME.tierfs-conflict-TIER-N` for the N-th (N > 1) when earlier ones exist. A name too
/// long for that (over about 200 bytes) is cut and ends in `~` and 16 hex digits of a hash
/// of the whole name before the suffix, so the conflict name always fits in [`NAME_MAX`]
/// and two long names that share a beginning still get different ones.
pub fn conflict_name(name: &OsStr, tier: &str, n: u32) -> OsString {
    let mut suffix = format!(".tierfs-conflict-{tier}");
    if n > 1 {
        suffix.push_str(&format!("-{n}"));
    }
    let b = name.as_bytes();
    let mut out = if b.len() + suffix.len() <= NAME_MAX {
        b.to_vec()
    } else {
        // FNV-1a: stable across builds and versions, unlike std's hasher.
        let h = b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
            (h ^ u64::from(*x)).wrapping_mul(0x0100_0000_01b3)
        });
        let tag = format!("~{h:016x}");
        let mut keep = NAME_MAX
            .saturating_sub(suffix.len() + tag.len())
            .min(b.len());
        // Do not cut a UTF-8 character in two.
        while keep > 0 && keep < b.len() && b[keep] & 0xC0 == 0x80 {
            keep -= 1;
        }
        let mut v = b[..keep].to_vec();
        v.extend_from_slice(tag.as_bytes());
        v
    };
    out.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(out)
}

/// [`conflict_name`] for the last component of a relative path.
pub fn conflict_path(rel: &Path, tier: &str, n: u32) -> PathBuf {
    let name = conflict_name(rel.file_name().unwrap_or_default(), tier, n);
    match rel.parent() {
        Some(p) => p.join(name),
        None => PathBuf::from(name),
    }
}

/// A new id for the pieces of a striped file: 64 random bits.
///
/// Every piece of a striped file carries the same id in its layout xattr (an `id=` field,
/// which readers that predate it ignore). The pieces of one file are otherwise found only by
/// sitting at the same path; a rename that reached some tiers and not others (a crash
/// between them, or a tier missing at the time) splits a file into two half-files, each
/// reading zeros where the other holds its bytes. With the id, the mount's scan and `tierfs
/// fsck` recognise the halves and put them back together ([`plan_rejoin`]).
pub fn new_file_id() -> u64 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    // RandomState is seeded from the OS's random source once per process.
    std::collections::hash_map::RandomState::new().hash_one((
        now,
        SEQ.fetch_add(1, Ordering::Relaxed),
        std::process::id(),
    ))
}

/// The file id in a layout xattr's text, if it has one.
pub fn decode_id(s: &str) -> Option<u64> {
    s.split_whitespace()
        .find_map(|w| w.strip_prefix("id="))
        .and_then(|v| u64::from_str_radix(v, 16).ok())
}

/// The pieces of one striped file (one id) found at one path, and the tiers holding them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub rel: std::path::PathBuf,
    pub tiers: Vec<usize>,
}

/// How a striped file split over several paths goes back together: `parts` are the paths
/// at which pieces with the file's id were found (in path order). Only parts lacking some
/// of the layout's pieces count (a complete copy is a file of its own). The file is kept
/// at the part holding the primary piece (its mode, owner, times and xattrs), or the first
/// part when none does, and each piece it lacks moves there from the first other part that
/// has it. Returns the kept part's index and the moves as (part, tier); `None` when there
/// is nothing to move.
pub fn plan_rejoin(m: &StripeMap, parts: &[Part]) -> Option<(usize, Vec<(usize, usize)>)> {
    let incomplete: Vec<usize> = (0..parts.len())
        .filter(|i| m.tiers.iter().any(|t| !parts[*i].tiers.contains(t)))
        .collect();
    if incomplete.len() < 2 {
        return None;
    }
    let primary = m.pattern[0] as usize;
    let keep = incomplete
        .iter()
        .copied()
        .find(|i| parts[*i].tiers.contains(&primary))
        .unwrap_or(incomplete[0]);
    let moves: Vec<(usize, usize)> = m
        .tiers
        .iter()
        .filter(|t| !parts[keep].tiers.contains(t))
        .filter_map(|t| {
            incomplete
                .iter()
                .find(|i| **i != keep && parts[**i].tiers.contains(t))
                .map(|i| (*i, *t))
        })
        .collect();
    (!moves.is_empty()).then_some((keep, moves))
}

pub use tierfs_wire::stripe::{Extent, StripeMap};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip() {
        for l in [
            FileLayout::Whole { tier: 2 },
            FileLayout::Stripe(StripeMap::new(1 << 20, vec![0, 1, 0, 2])),
        ] {
            assert_eq!(FileLayout::decode(&l.encode(), 3).unwrap(), l);
        }
        assert!(FileLayout::decode("tierfs-layout v9 whole-file tier=0", 3).is_err());
        assert!(FileLayout::decode("tierfs-layout v1 whole-file tier=5", 3).is_err());
        assert!(FileLayout::decode("junk", 3).is_err());
        assert!(FileLayout::decode("tierfs-layout v1 stripe unit=0 pattern=0", 3).is_err());
    }

    #[test]
    fn file_ids_round_trip_and_old_readers_ignore_them() {
        let l = FileLayout::Stripe(StripeMap::new(1 << 20, vec![0, 1, 0]));
        let (a, b) = (new_file_id(), new_file_id());
        assert_ne!(a, b);
        let s = l.encode_with_id(Some(a));
        assert_eq!(decode_id(&s), Some(a));
        assert_eq!(FileLayout::decode(&s, 2).unwrap(), l);
        assert_eq!(decode_id(&l.encode()), None);
        let w = FileLayout::Whole { tier: 1 };
        assert_eq!(w.encode_with_id(Some(a)), w.encode());
    }

    #[test]
    fn a_split_file_rejoins_where_its_primary_piece_is() {
        let m = StripeMap::new(1 << 20, vec![0, 1, 0, 2]);
        let part = |rel: &str, tiers: &[usize]| Part {
            rel: rel.into(),
            tiers: tiers.to_vec(),
        };
        // Renamed on tier 0 only: the new name holds the primary piece and keeps the file.
        let parts = [part("dir/c", &[1, 2]), part("dir2/c", &[0])];
        assert_eq!(plan_rejoin(&m, &parts), Some((1, vec![(0, 1), (0, 2)])));
        // Three ways.
        let parts = [part("a", &[2]), part("b", &[0]), part("c", &[1])];
        assert_eq!(plan_rejoin(&m, &parts), Some((1, vec![(2, 1), (0, 2)])));
        // A complete copy with the same id is a file of its own, never a source.
        let parts = [part("a", &[0, 1, 2]), part("b", &[0, 1])];
        assert_eq!(plan_rejoin(&m, &parts), None);
        // Nothing to gain: the other part has only what the kept one has.
        let parts = [part("a", &[0, 1]), part("b", &[1])];
        assert_eq!(plan_rejoin(&m, &parts), None);
        // No primary anywhere: the first part keeps the file.
        let parts = [part("a", &[1]), part("b", &[2])];
        assert_eq!(plan_rejoin(&m, &parts), Some((0, vec![(1, 2)])));
    }

    #[test]
    fn conflict_names_always_fit() {
        let c = |n: &[u8], k| conflict_name(OsStr::from_bytes(n), "nvme", k);
        assert_eq!(c(b"f", 1), OsStr::new("f.tierfs-conflict-nvme"));
        assert_eq!(c(b"f", 3), OsStr::new("f.tierfs-conflict-nvme-3"));
        let long = vec![b'a'; 250];
        let mut other = long.clone();
        other[249] = b'b';
        let tier = "t".repeat(32);
        for n in [1, 2, 999] {
            let a = conflict_name(OsStr::from_bytes(&long), &tier, n);
            let b = conflict_name(OsStr::from_bytes(&other), &tier, n);
            assert!(a.len() <= NAME_MAX && b.len() <= NAME_MAX, "{}", a.len());
            assert_ne!(a, b, "two long names that differ at the end");
            assert!(a.as_bytes().starts_with(&long[..150]));
        }
        assert_ne!(c(&long, 1), c(&long, 2));
        // A cut never splits a UTF-8 character.
        let accents = "é".repeat(125);
        let got = c(accents.as_bytes(), 1);
        assert!(got.to_str().is_some(), "{got:?}");
        assert_eq!(
            conflict_path(Path::new("d/e/f"), "x", 1),
            Path::new("d/e/f.tierfs-conflict-x")
        );
    }
}
