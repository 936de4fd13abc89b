//! What the tierfs daemon and the library `tierfs run` preloads say to each other: the
//! direct path's messages, their one binary encoding, and the stripe arithmetic both sides
//! need ([`stripe`]).
//!
//! The library opens a file through the FUSE mount as any program would (the kernel checks
//! permissions, creates and truncates), asks the daemon through that FUSE descriptor which
//! handle it is ([`IOC_HANDLE`], a FUSE ioctl: the daemon answers with the handle and a
//! single-use token only a holder of that descriptor can get), then asks the mount's daemon
//! over a unix socket ([`socket_name`]) for the tier files behind that handle, proving it
//! holds it with the token ([`Request::Open`]). The daemon answers with one descriptor per
//! piece, opened with no more access than the FUSE open had ([`Grant`]), or says no
//! ([`Reply::No`]): the program then keeps its FUSE descriptor, as if the library were not
//! there. When the program closes such a descriptor, the library tells the daemon what it
//! moved ([`Report`]), so the daemon's counters and bandwidth estimates keep seeing it.
//!
//! Every message is one `SOCK_SEQPACKET` packet: a [`Header`] (magic, version, kind,
//! payload length), then the payload, all little-endian. A side that reads another
//! version, an unknown kind or a malformed payload gets an error value, never a panic: the
//! daemon drops such a packet (and the descriptors that came with it), the library falls
//! back to FUSE.

#![deny(unsafe_code)]

pub mod sock;
pub mod stripe;

/// The protocol's version. Both sides refuse another (the library then stays on FUSE).
pub const VERSION: u16 = 2;
/// The first four bytes of every message.
pub const MAGIC: [u8; 4] = *b"TFDP";
/// The largest message either side sends or accepts.
pub const MAX_MESSAGE: usize = 64 << 10;
/// The most busy periods a report gives for one direction of one piece (the library
/// merges the closest ones beyond it).
pub const MAX_PERIODS: usize = 32;
/// The most descriptors one message carries (a piece per tier).
pub const MAX_FDS: usize = 16;

/// The abstract unix socket (no file: the leading NUL is added by the caller) of the daemon
/// serving the mount whose device number is (`major`, `minor`). Anyone may connect to an
/// abstract socket, so each side checks the other with `SO_PEERCRED`: the library talks only
/// to the mount's owner, and the daemon trusts nothing but a handle's token (which only the
/// kernel hands out, to holders of that handle's descriptors).
pub fn socket_name(major: u32, minor: u32) -> String {
    format!("tierfs-direct-{major}:{minor}")
}

/// The FUSE ioctl the library issues on a descriptor the program just opened, to learn
/// which of the daemon's open handles it is (`_IOR('t', 0x43, [u8; 24])`: 24 bytes out, the
/// handle, the inode and a token: a random number the daemon draws at each ask and keeps
/// with the handle until a [`Request::Open`] spends it). The kernel sends a FUSE ioctl only
/// to the daemon of the descriptor's mount, with the handle of that descriptor, and refuses
/// it on an `O_PATH` one: whoever holds the token held the descriptor. Any caller may ask:
/// the answer names only the caller's own handle. (Protocol 1's ioctl, 0x42, was the
/// daemon's own, on a descriptor the program passed along.)
pub const IOC_HANDLE: u32 = ioc_read(b't', 0x43, IOC_HANDLE_LEN as u32);
/// The bytes [`IOC_HANDLE`] answers.
pub const IOC_HANDLE_LEN: usize = 24;

const fn ioc_read(ty: u8, nr: u8, size: u32) -> u32 {
    // The kernel's _IOC(_IOC_READ, type, nr, size) on the common architectures.
    (2 << 30) | (size << 16) | ((ty as u32) << 8) | nr as u32
}

/// What the library asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The tier files behind the open handle `fh`, opened as the program's `flags` ask (the
    /// access mode never more than the handle's own), proven by the `token` the handle's
    /// [`IOC_HANDLE`] answered (spent by this request, granted or not).
    Open { fh: u64, token: u64, flags: i32 },
    /// What a direct descriptor moved, sent when the program closed it.
    Report(Report),
}

/// Bytes, requests and busy time of one piece's direct I/O.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TierIo {
    /// The tier's index in the mount (as [`Grant::tiers`] names it).
    pub tier: u8,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub reads: u64,
    pub writes: u64,
    /// The requests' latencies, summed.
    pub read_lat_ns: u64,
    pub write_lat_ns: u64,
    /// The periods (start, end; `CLOCK_MONOTONIC` nanoseconds, which every process of the
    /// machine shares) with at least one read (write) of this descriptor in flight on the
    /// piece, at most [`MAX_PERIODS`]: the daemon adds their union with what other
    /// descriptors reported to the tier's busy time, so concurrent programs are not
    /// counted twice.
    pub read_busy: Vec<(u64, u64)>,
    pub write_busy: Vec<(u64, u64)>,
}

/// What one direct descriptor moved, per piece.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// The inode (as the grant named it).
    pub ino: u64,
    pub tiers: Vec<TierIo>,
}

/// How a granted file's bytes sit in the pieces sent with the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// One piece holds the file: its descriptor replaces the program's.
    Whole,
    /// Stripes of `unit` bytes, stripe k on the tier `pattern[k % pattern.len()]`.
    Stripe { unit: u64, pattern: Vec<u8> },
}

/// The daemon's yes: a descriptor per piece comes with it, in the order of `tiers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub ino: u64,
    pub shape: Shape,
    /// The tier of each descriptor sent.
    pub tiers: Vec<u8>,
}

/// Why the daemon said no.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum NoReason {
    /// Not an open the direct path takes (its config, the open's kind): stay on FUSE,
    /// quietly.
    Policy = 1,
    /// The file cannot go direct now (held in staging memory, moving, failed): quietly.
    Busy = 2,
    /// Something went wrong: the library says so once (a WARNING line).
    Error = 3,
    /// The descriptor is not one the daemon serves, or the caller may not have it.
    Refused = 4,
    /// Another protocol version.
    Version = 5,
}

impl NoReason {
    fn from_u16(v: u16) -> Option<NoReason> {
        Some(match v {
            1 => NoReason::Policy,
            2 => NoReason::Busy,
            3 => NoReason::Error,
            4 => NoReason::Refused,
            5 => NoReason::Version,
            _ => return None,
        })
    }

    /// Whether the library should say so (one WARNING line), rather than stay quiet.
    pub fn is_error(self) -> bool {
        matches!(
            self,
            NoReason::Error | NoReason::Version | NoReason::Refused
        )
    }
}

/// What the daemon answers to an [`Request::Open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Grant(Grant),
    No { why: NoReason, text: String },
}

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than its header says, or than the header itself.
    Short,
    /// Not ours (magic).
    Magic,
    /// Another version of the protocol (the one it says).
    Version(u16),
    /// A kind this side does not know.
    Kind(u16),
    /// A payload that does not parse (what).
    Bad(&'static str),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Short => write!(f, "a truncated message"),
            DecodeError::Magic => write!(f, "not a tierfs direct-path message"),
            DecodeError::Version(v) => {
                write!(f, "protocol version {v} (this side speaks {VERSION})")
            }
            DecodeError::Kind(k) => write!(f, "an unknown message kind {k}"),
            DecodeError::Bad(what) => write!(f, "a malformed {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}

const HEADER: usize = 12;
const K_OPEN: u16 = 1;
const K_REPORT: u16 = 2;
const K_GRANT: u16 = 3;
const K_NO: u16 = 4;

/// A message's fixed head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u16,
    pub kind: u16,
    pub len: u32,
}

fn frame(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Splits a message into its kind and payload, checking magic, version and length.
fn unframe(msg: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    if msg.len() < HEADER {
        return Err(DecodeError::Short);
    }
    if msg[..4] != MAGIC {
        return Err(DecodeError::Magic);
    }
    let version = u16::from_le_bytes([msg[4], msg[5]]);
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let kind = u16::from_le_bytes([msg[6], msg[7]]);
    let len = u32::from_le_bytes([msg[8], msg[9], msg[10], msg[11]]) as usize;
    let payload = msg.get(HEADER..HEADER + len).ok_or(DecodeError::Short)?;
    if msg.len() != HEADER + len {
        return Err(DecodeError::Bad("message (bytes past its payload)"));
    }
    Ok((kind, payload))
}

/// Reads little-endian fields off a payload.
struct Reader<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.b.len() < n {
            return Err(DecodeError::Bad(self.what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    /// A list of at most `max` items, each read by `item`.
    fn list<T>(
        &mut self,
        max: usize,
        mut item: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let n = self.u16()? as usize;
        if n > max {
            return Err(DecodeError::Bad(self.what));
        }
        (0..n).map(|_| item(self)).collect()
    }
    fn done(&self) -> Result<(), DecodeError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Bad(self.what))
        }
    }
}

/// The longest stripe pattern a grant may carry (tierfs's own are at most 64 slots).
pub const MAX_PATTERN: usize = 256;

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Open { fh, token, flags } => {
                let mut p = Vec::with_capacity(20);
                p.extend_from_slice(&fh.to_le_bytes());
                p.extend_from_slice(&token.to_le_bytes());
                p.extend_from_slice(&flags.to_le_bytes());
                frame(K_OPEN, &p)
            }
            Request::Report(r) => {
                let mut p = Vec::with_capacity(10 + r.tiers.len() * 60);
                p.extend_from_slice(&r.ino.to_le_bytes());
                p.extend_from_slice(&(r.tiers.len() as u16).to_le_bytes());
                for t in &r.tiers {
                    p.push(t.tier);
                    for v in [
                        t.read_bytes,
                        t.write_bytes,
                        t.reads,
                        t.writes,
                        t.read_lat_ns,
                        t.write_lat_ns,
                    ] {
                        p.extend_from_slice(&v.to_le_bytes());
                    }
                    for periods in [&t.read_busy, &t.write_busy] {
                        let n = periods.len().min(MAX_PERIODS);
                        p.extend_from_slice(&(n as u16).to_le_bytes());
                        for (a, b) in &periods[..n] {
                            p.extend_from_slice(&a.to_le_bytes());
                            p.extend_from_slice(&b.to_le_bytes());
                        }
                    }
                }
                frame(K_REPORT, &p)
            }
        }
    }

    pub fn decode(msg: &[u8]) -> Result<Request, DecodeError> {
        let (kind, payload) = unframe(msg)?;
        match kind {
            K_OPEN => {
                let mut r = Reader {
                    b: payload,
                    what: "open request",
                };
                let (fh, token, flags) = (r.u64()?, r.u64()?, r.u32()? as i32);
                r.done()?;
                Ok(Request::Open { fh, token, flags })
            }
            K_REPORT => {
                let mut r = Reader {
                    b: payload,
                    what: "report",
                };
                let ino = r.u64()?;
                let period = |r: &mut Reader<'_>| -> Result<(u64, u64), DecodeError> {
                    let (a, b) = (r.u64()?, r.u64()?);
                    if b < a {
                        return Err(DecodeError::Bad(
                            "report (a period ending before it starts)",
                        ));
                    }
                    Ok((a, b))
                };
                let tiers = r.list(MAX_FDS, |r| {
                    Ok(TierIo {
                        tier: r.u8()?,
                        read_bytes: r.u64()?,
                        write_bytes: r.u64()?,
                        reads: r.u64()?,
                        writes: r.u64()?,
                        read_lat_ns: r.u64()?,
                        write_lat_ns: r.u64()?,
                        read_busy: r.list(MAX_PERIODS, period)?,
                        write_busy: r.list(MAX_PERIODS, period)?,
                    })
                })?;
                r.done()?;
                Ok(Request::Report(Report { ino, tiers }))
            }
            k => Err(DecodeError::Kind(k)),
        }
    }
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Grant(g) => {
                let mut p = Vec::new();
                p.extend_from_slice(&g.ino.to_le_bytes());
                match &g.shape {
                    Shape::Whole => p.push(0),
                    Shape::Stripe { unit, pattern } => {
                        p.push(1);
                        p.extend_from_slice(&unit.to_le_bytes());
                        p.extend_from_slice(&(pattern.len() as u16).to_le_bytes());
                        p.extend_from_slice(pattern);
                    }
                }
                p.extend_from_slice(&(g.tiers.len() as u16).to_le_bytes());
                p.extend_from_slice(&g.tiers);
                frame(K_GRANT, &p)
            }
            Reply::No { why, text } => {
                let mut p = Vec::with_capacity(4 + text.len());
                p.extend_from_slice(&(*why as u16).to_le_bytes());
                let t = &text.as_bytes()[..text.len().min(MAX_MESSAGE / 2)];
                p.extend_from_slice(&(t.len() as u16).to_le_bytes());
                p.extend_from_slice(t);
                frame(K_NO, &p)
            }
        }
    }

    pub fn decode(msg: &[u8]) -> Result<Reply, DecodeError> {
        let (kind, payload) = unframe(msg)?;
        match kind {
            K_GRANT => {
                let mut r = Reader {
                    b: payload,
                    what: "grant",
                };
                let ino = r.u64()?;
                let shape = match r.u8()? {
                    0 => Shape::Whole,
                    1 => {
                        let unit = r.u64()?;
                        let pattern = r.list(MAX_PATTERN, |r| r.u8())?;
                        if unit == 0 || pattern.is_empty() {
                            return Err(DecodeError::Bad("grant (stripe shape)"));
                        }
                        Shape::Stripe { unit, pattern }
                    }
                    _ => return Err(DecodeError::Bad("grant (shape)")),
                };
                let tiers = r.list(MAX_FDS, |r| r.u8())?;
                r.done()?;
                let fits = match &shape {
                    Shape::Whole => tiers.len() == 1,
                    Shape::Stripe { pattern, .. } => {
                        !tiers.is_empty() && pattern.iter().all(|t| tiers.contains(t))
                    }
                };
                if !fits {
                    return Err(DecodeError::Bad("grant (pieces and shape disagree)"));
                }
                Ok(Reply::Grant(Grant { ino, shape, tiers }))
            }
            K_NO => {
                let mut r = Reader {
                    b: payload,
                    what: "refusal",
                };
                let why = NoReason::from_u16(r.u16()?).ok_or(DecodeError::Bad("refusal"))?;
                let n = r.u16()? as usize;
                let text = String::from_utf8_lossy(r.take(n)?).into_owned();
                r.done()?;
                Ok(Reply::No { why, text })
            }
            k => Err(DecodeError::Kind(k)),
        }
    }
}

/// Peeks at a message's header without checking it further (for logs).
pub fn header(msg: &[u8]) -> Option<Header> {
    if msg.len() < HEADER || msg[..4] != MAGIC {
        return None;
    }
    Some(Header {
        version: u16::from_le_bytes([msg[4], msg[5]]),
        kind: u16::from_le_bytes([msg[6], msg[7]]),
        len: u32::from_le_bytes([msg[8], msg[9], msg[10], msg[11]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(shape: Shape, tiers: Vec<u8>) -> Reply {
        Reply::Grant(Grant {
            ino: 77,
            shape,
            tiers,
        })
    }

    #[test]
    fn every_message_round_trips() {
        for r in [
            Request::Open {
                fh: 3,
                token: u64::MAX,
                flags: 0o40101,
            },
            Request::Open {
                fh: u64::MAX,
                token: 1,
                flags: -1,
            },
            Request::Report(Report {
                ino: 9,
                tiers: vec![
                    TierIo {
                        tier: 1,
                        read_bytes: 1 << 40,
                        write_bytes: 3,
                        reads: 4,
                        writes: 5,
                        read_lat_ns: 6,
                        write_lat_ns: u64::MAX,
                        read_busy: vec![(1, 2), (5, u64::MAX)],
                        write_busy: Vec::new(),
                    },
                    TierIo::default(),
                ],
            }),
        ] {
            assert_eq!(Request::decode(&r.encode()), Ok(r));
        }
        for r in [
            grant(Shape::Whole, vec![2]),
            grant(
                Shape::Stripe {
                    unit: 1 << 20,
                    pattern: vec![0, 1, 0, 0],
                },
                vec![0, 1],
            ),
            Reply::No {
                why: NoReason::Busy,
                text: "held in staging memory".into(),
            },
        ] {
            assert_eq!(Reply::decode(&r.encode()), Ok(r));
        }
    }

    #[test]
    fn garbage_gives_errors_never_panics() {
        let good = grant(
            Shape::Stripe {
                unit: 65536,
                pattern: vec![0, 1],
            },
            vec![0, 1],
        )
        .encode();
        // Every truncation, and every single byte changed, of a good message.
        for n in 0..good.len() {
            assert!(Reply::decode(&good[..n]).is_err(), "truncated to {n}");
            let _ = Request::decode(&good[..n]);
        }
        for i in 0..good.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut m = good.clone();
                m[i] = v;
                let _ = Reply::decode(&m);
                let _ = Request::decode(&m);
            }
        }
        let mut long = good.clone();
        long.push(0);
        assert!(Reply::decode(&long).is_err(), "bytes past the payload");
        let mut other = good.clone();
        other[4] = 9;
        assert_eq!(Reply::decode(&other), Err(DecodeError::Version(9)));
        assert_eq!(Request::decode(&good), Err(DecodeError::Kind(K_GRANT)));
        // A pattern naming a tier no descriptor is for.
        let bad = grant(
            Shape::Stripe {
                unit: 65536,
                pattern: vec![0, 2],
            },
            vec![0, 1],
        )
        .encode();
        assert!(Reply::decode(&bad).is_err());
        assert!(Reply::decode(&grant(Shape::Whole, vec![0, 1]).encode()).is_err());
    }

    #[test]
    fn the_ioctl_number_is_the_kernels_ior() {
        // _IOR('t', 0x43, 24 bytes) as <asm-generic/ioctl.h> builds it.
        assert_eq!(IOC_HANDLE, 0x8018_7443);
        assert_eq!(socket_name(0, 53), "tierfs-direct-0:53");
    }
}
