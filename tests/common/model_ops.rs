//! The operations of the sequential file-semantics model and their proptest generators,
//! one definition for `tests/model.rs` (through a mount, against a plain folder),
//! `tests/model_core.rs` (on the FUSE-free core, against an in-memory model) and the own
//! folder of each thread in `tests/model_concurrent.rs`; with the run's size and seed from
//! the environment, which the three read alike.
//!
//! [`Op`] holds the union of what the tests run. The mount test also draws O_TRUNC,
//! O_DIRECT and page-aligned I/O (the `trunc`, `direct` and `aligned` fields); the core
//! never sees them (the kernel turns O_TRUNC into a setattr, which `Truncate` covers, and
//! O_DIRECT and alignment stop at the kernel and the transport), so its [`Mix`] leaves them
//! false. A field left false is drawn from `Just(false)`, which takes nothing from the RNG
//! and has nothing to shrink: each test gets for a seed the sequences, and the shrinking,
//! that its own copy of the generator gave before it was shared. The weights differ per
//! test (a remount is the slowest step through a mount, so there it is rarer), hence
//! [`Mix`].
//!
//! `tests/model_concurrent.rs` uses [`Op`] alone: its threads draw from their own seeded
//! splitmix streams, over their own paths and sizes, so that a seed gives every thread the
//! same operations whatever the interleaving, and nothing there shrinks.
//!
//! Declared with `#[path]` by the tests that use it (as `linearize.rs` is), so the other
//! integration tests do not compile it.

// Each test uses a part: the core never reads the mount's fields, the concurrent test
// uses neither the generators nor `Falloc`.
#![allow(dead_code)]

use proptest::prelude::*;
use proptest::strategy::Union;

pub const MIB: u64 = 1 << 20;
/// The stripe unit the offsets and sizes aim next to: the smallest the config accepts,
/// the one the 64 KiB stripe configurations use (its multiples hit 1 MiB units too).
pub const UNIT: u64 = tierfs::config::MIN_STRIPE_UNIT;

/// Every path an operation can name (`path`, `from`, `to` index it; the concurrent test
/// has its own list). "a/x" walks through a file when "a" is one; "e/d" and "d/f/a" let
/// folders move across and into each other.
pub const PATHS: [&str; 12] = [
    "a", "b", "d", "e", "d/a", "d/b", "d/f", "d/f/a", "e/a", "e/d", "e/d/a", "a/x",
];

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Falloc {
    Alloc,
    KeepSize,
    PunchHole,
}

impl Falloc {
    pub fn mode(self) -> i32 {
        match self {
            Falloc::Alloc => 0,
            Falloc::KeepSize => libc::FALLOC_FL_KEEP_SIZE,
            Falloc::PunchHole => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        }
    }
}

/// One step. `h` picks an open handle (modulo how many are open; skipped when none is).
/// `trunc` adds O_TRUNC (to a write open), `direct` opens with O_DIRECT, and `aligned`
/// rounds a read or write to whole pages, so a direct handle does direct I/O: those three
/// only through a mount.
#[derive(Clone, Debug)]
pub enum Op {
    Create {
        path: usize,
        excl: bool,
        trunc: bool,
        write: bool,
        direct: bool,
    },
    Open {
        path: usize,
        write: bool,
        trunc: bool,
        direct: bool,
    },
    Close {
        h: usize,
    },
    Write {
        h: usize,
        off: u64,
        len: usize,
        aligned: bool,
        seed: u64,
    },
    Read {
        h: usize,
        off: u64,
        len: usize,
        aligned: bool,
    },
    Truncate {
        path: usize,
        size: u64,
    },
    FTruncate {
        h: usize,
        size: u64,
    },
    Fallocate {
        h: usize,
        off: u64,
        len: u64,
        mode: Falloc,
    },
    Rename {
        from: usize,
        to: usize,
    },
    Unlink {
        path: usize,
    },
    /// A hard link `to` of `from`.
    Link {
        from: usize,
        to: usize,
    },
    Mkdir {
        path: usize,
    },
    Rmdir {
        path: usize,
    },
    Fsync {
        h: usize,
        datasync: bool,
    },
    Stat {
        path: usize,
    },
    FStat {
        h: usize,
    },
    /// Close everything and mount again (the core: rebuild it from the tiers).
    Remount,
}

/// What [`op`] draws: each operation's relative weight, and whether the mount's own
/// fields are drawn.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub create: u32,
    pub open: u32,
    pub close: u32,
    pub write: u32,
    pub read: u32,
    pub truncate: u32,
    pub ftruncate: u32,
    pub fallocate: u32,
    pub rename: u32,
    pub unlink: u32,
    pub link: u32,
    pub mkdir: u32,
    pub rmdir: u32,
    pub fsync: u32,
    pub stat: u32,
    pub fstat: u32,
    pub remount: u32,
    /// Draw `trunc`, `direct` and `aligned`; false leaves them false.
    pub mount_fields: bool,
}

/// Offsets: anywhere in the first 4 MiB, page-aligned, and next to stripe boundaries.
pub fn offset() -> BoxedStrategy<u64> {
    prop_oneof![
        3 => 0..4 * MIB,
        2 => (0..1024u64).prop_map(|k| k * 4096),
        2 => (0..64u64, -3i64..=3).prop_map(|(k, d)| (k * UNIT).saturating_add_signed(d)),
        1 => 0..300u64,
    ]
    .boxed()
}

/// Lengths: mostly small and unaligned, some page multiples, a few of 2..3 MiB.
pub fn length() -> BoxedStrategy<usize> {
    prop_oneof![
        1 => Just(0usize),
        4 => 0..8192usize,
        2 => (1..64usize).prop_map(|k| k * 4096),
        2 => 0..(256usize << 10),
        1 => (2usize << 20)..=(3usize << 20),
    ]
    .boxed()
}

/// Sizes for truncate: zero, small, aligned, on and next to stripe boundaries, large.
pub fn new_size() -> BoxedStrategy<u64> {
    prop_oneof![
        1 => Just(0u64),
        2 => 0..2 * UNIT,
        2 => (0..1024u64).prop_map(|k| k * 4096),
        2 => (0..64u64, -3i64..=3).prop_map(|(k, d)| (k * UNIT).saturating_add_signed(d)),
        1 => 0..6 * MIB,
    ]
    .boxed()
}

/// One operation, drawn as `mix` says.
pub fn op(mix: Mix) -> impl Strategy<Value = Op> {
    let p = || 0..PATHS.len();
    let h = || 0..8usize;
    // A mount field: drawn from `s`, or always false (no randomness taken, nothing to shrink).
    let field = |s: BoxedStrategy<bool>| {
        if mix.mount_fields {
            s
        } else {
            Just(false).boxed()
        }
    };
    let arms: Vec<(u32, BoxedStrategy<Op>)> = vec![
        (
            mix.create,
            (
                p(),
                prop::bool::weighted(0.2),
                field(prop::bool::weighted(0.2).boxed()),
                prop::bool::weighted(0.85),
                field(any::<bool>().boxed()),
            )
                .prop_map(|(path, excl, trunc, write, direct)| Op::Create {
                    path,
                    excl,
                    trunc,
                    write,
                    direct,
                })
                .boxed(),
        ),
        (
            mix.open,
            (
                p(),
                prop::bool::weighted(0.6),
                field(prop::bool::weighted(0.1).boxed()),
                field(any::<bool>().boxed()),
            )
                .prop_map(|(path, write, trunc, direct)| Op::Open {
                    path,
                    write,
                    trunc,
                    direct,
                })
                .boxed(),
        ),
        (mix.close, h().prop_map(|h| Op::Close { h }).boxed()),
        (
            mix.write,
            (
                h(),
                offset(),
                length(),
                field(any::<bool>().boxed()),
                any::<u64>(),
            )
                .prop_map(|(h, off, len, aligned, seed)| Op::Write {
                    h,
                    off,
                    len,
                    aligned,
                    seed,
                })
                .boxed(),
        ),
        (
            mix.read,
            (h(), offset(), length(), field(any::<bool>().boxed()))
                .prop_map(|(h, off, len, aligned)| Op::Read {
                    h,
                    off,
                    len,
                    aligned,
                })
                .boxed(),
        ),
        (
            mix.truncate,
            (p(), new_size())
                .prop_map(|(path, size)| Op::Truncate { path, size })
                .boxed(),
        ),
        (
            mix.ftruncate,
            (h(), new_size())
                .prop_map(|(h, size)| Op::FTruncate { h, size })
                .boxed(),
        ),
        (
            mix.fallocate,
            (
                h(),
                offset(),
                1..3 * MIB,
                prop_oneof![
                    Just(Falloc::Alloc),
                    Just(Falloc::KeepSize),
                    Just(Falloc::PunchHole)
                ],
            )
                .prop_map(|(h, off, len, mode)| Op::Fallocate { h, off, len, mode })
                .boxed(),
        ),
        (
            mix.rename,
            (p(), p())
                .prop_map(|(from, to)| Op::Rename { from, to })
                .boxed(),
        ),
        (mix.unlink, p().prop_map(|path| Op::Unlink { path }).boxed()),
        (
            mix.link,
            (p(), p())
                .prop_map(|(from, to)| Op::Link { from, to })
                .boxed(),
        ),
        (mix.mkdir, p().prop_map(|path| Op::Mkdir { path }).boxed()),
        (mix.rmdir, p().prop_map(|path| Op::Rmdir { path }).boxed()),
        (
            mix.fsync,
            (h(), any::<bool>())
                .prop_map(|(h, datasync)| Op::Fsync { h, datasync })
                .boxed(),
        ),
        (mix.stat, p().prop_map(|path| Op::Stat { path }).boxed()),
        (mix.fstat, h().prop_map(|h| Op::FStat { h }).boxed()),
        (mix.remount, Just(Op::Remount).boxed()),
    ];
    Union::new_weighted(arms)
}

/// A number from the environment variable `name`, else `default` (panics on a value that
/// is not a number, so a typo does not run the default silently).
pub fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The run's RNG seed: `TIERFS_MODEL_SEED`, else the clock (each test prints it, so a
/// failing run can be replayed).
pub fn seed() -> u64 {
    env_num(
        "TIERFS_MODEL_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    )
}
