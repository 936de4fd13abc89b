//! The direct path's leases on the core, without a mount: what a file is owed while a
//! program holds its pieces' own descriptors (issue 39). Moves wait for the lease (also a
//! later daemon's, which only the pieces' locks tell about), staging memory lets the file
//! go, the size comes from the pieces, and a grant never gives more than the handle had.
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use tierfs::config::MountConfig;
use tierfs::layout::FileLayout;
use tierfs::vfs::{Ctx, TierFs, ROOT_INO};
use tierfs_wire::{NoReason, Shape};

const CTX: Ctx = Ctx { uid: 0, gid: 0 };
const MIB: usize = 1 << 20;

fn fs_in(d: &Path, layout: &str, extra: &str) -> TierFs {
    let text = format!(
        "[[tier]]\nname = \"fast\"\npath = \"{0}/a\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [[tier]]\nname = \"slow\"\npath = \"{0}/b\"\ncreate = true\nwrite_bandwidth = \"1GB/s\"\n\
         [placement]\nlayout = \"{layout}\"\nstripe_unit = \"64KiB\"\nadapt = true\n[mount]\npassthrough = \"off\"\n{extra}",
        d.display()
    );
    let config = MountConfig::parse(&text, Path::new("direct.toml")).unwrap();
    config.prepare_tier_dirs().unwrap();
    let tiers = tierfs::daemon::open_tiers(&config, false, |_| {}).unwrap();
    TierFs::new(&config, tiers).unwrap()
}

/// A grant as the library asks it: a token from the handle's ioctl, then the grant (a
/// handle that has no token gets 0, which no grant takes).
fn grant(
    fs: &TierFs,
    fh: u64,
    flags: i32,
    uid: u32,
) -> Result<tierfs::vfs::direct::Granted, tierfs::vfs::direct::Refusal> {
    let token = fs.direct_token(fh).map_or(0, |(_, t)| t);
    fs.direct_grant(fh, token, flags, uid)
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// A striped swap file of 1 MiB, written through the core; returns its inode.
fn striped_file(fs: &TierFs) -> u64 {
    let (a, fh, _) = fs
        .create(
            ROOT_INO,
            OsStr::new("f.tensor.swp"),
            0o600,
            libc::O_WRONLY,
            CTX,
        )
        .unwrap();
    fs.write(fh, 0, &data(MIB, 1)).unwrap();
    fs.release(fh).unwrap();
    a.ino
}

fn started(fs: &TierFs) -> u64 {
    fs.relayout_counters()
        .migrations_started
        .load(std::sync::atomic::Ordering::Relaxed)
}

#[test]
fn a_file_on_lease_is_not_moved_until_the_lease_ends() {
    let d = tempfile::tempdir().unwrap();
    let fs = fs_in(d.path(), "stripe", "");
    let ino = striped_file(&fs);
    let before = fs.file_list()[0].2.clone();
    let (fh, _) = fs.open(ino, libc::O_WRONLY | libc::O_DIRECT).unwrap();
    let g = grant(&fs, fh, libc::O_WRONLY | libc::O_DIRECT, 0).unwrap();
    assert!(matches!(g.shape, Shape::Stripe { .. }) && g.fds.len() == 2);
    // The shares move: a writer's open would re-lay the file out, but not under a lease.
    fs.placer().set_shares(vec![10.0 / 11.0, 1.0 / 11.0]);
    let (w, _) = fs.open(ino, libc::O_WRONLY).unwrap();
    fs.release(w).unwrap();
    assert_eq!(started(&fs), 0, "a move began under a lease");
    assert_eq!(fs.file_list()[0].2, before);
    // The lease ends (its handle's release): the next writer moves it.
    drop(g);
    fs.release(fh).unwrap();
    let (w, _) = fs.open(ino, libc::O_WRONLY).unwrap();
    fs.write(w, 0, &data(64 << 10, 1)).unwrap();
    fs.release(w).unwrap();
    assert_eq!(started(&fs), 1, "no move once the lease was gone");
    assert_ne!(fs.file_list()[0].2, before);
}

/// After `mount --force` the new daemon knows nothing of the leases the killed one gave
/// out; the shared locks on the handed-out descriptors keep it from moving those pieces.
#[test]
fn a_later_daemon_does_not_move_pieces_an_earlier_one_handed_out() {
    let d = tempfile::tempdir().unwrap();
    let held = {
        let fs = fs_in(d.path(), "stripe", "");
        let ino = striped_file(&fs);
        let (fh, _) = fs.open(ino, libc::O_RDWR | libc::O_DIRECT).unwrap();
        let g = grant(&fs, fh, libc::O_RDWR | libc::O_DIRECT, 0).unwrap();
        // The daemon dies with the lease out: the program keeps the descriptors.
        g.fds
    };
    let fs = fs_in(d.path(), "stripe", "");
    let ino = fs.lookup(ROOT_INO, OsStr::new("f.tensor.swp")).unwrap().ino;
    fs.placer().set_shares(vec![10.0 / 11.0, 1.0 / 11.0]);
    let (w, _) = fs.open(ino, libc::O_WRONLY).unwrap();
    fs.release(w).unwrap();
    assert_eq!(
        started(&fs),
        0,
        "the pieces moved under another daemon's program"
    );
    drop(held);
    let (w, _) = fs.open(ino, libc::O_WRONLY).unwrap();
    fs.write(w, 0, &data(64 << 10, 1)).unwrap();
    fs.release(w).unwrap();
    assert_eq!(
        started(&fs),
        1,
        "the pieces stayed pinned after the program closed them"
    );
}

#[test]
fn the_size_comes_from_the_pieces_while_a_lease_may_write() {
    for layout in ["whole-file", "stripe"] {
        let d = tempfile::tempdir().unwrap();
        let fs = fs_in(d.path(), layout, "");
        let (a, fh, _) = fs
            .create(
                ROOT_INO,
                OsStr::new("g.tensor.swp"),
                0o600,
                libc::O_WRONLY,
                CTX,
            )
            .unwrap();
        // A swap file (the name qualifies it) opened without O_DIRECT: any buffer will do.
        let g = grant(&fs, fh, libc::O_WRONLY, 0).unwrap();
        // The program writes 3 MiB + 1 KiB past the daemon, as its stripes fall.
        let want = 3 * MIB + 1024;
        let bytes = data(want, 9);
        match &g.shape {
            Shape::Whole => std::fs::File::from(g.fds.into_iter().next().unwrap())
                .write_all_at(&bytes, 0)
                .unwrap(),
            Shape::Stripe { unit, pattern } => {
                let map = tierfs_wire::stripe::StripeMap::new(*unit, pattern.clone());
                let files: Vec<std::fs::File> =
                    g.fds.into_iter().map(std::fs::File::from).collect();
                for e in map.extents(0, want) {
                    let i = g.tiers.iter().position(|t| *t as usize == e.tier).unwrap();
                    files[i]
                        .write_all_at(&bytes[e.buf..e.buf + e.len], e.local)
                        .unwrap();
                }
            }
        }
        let attr = fs.getattr(a.ino).unwrap();
        assert_eq!(attr.size, want as u64, "{layout}: getattr under the lease");
        assert!(
            attr.volatile,
            "{layout}: the kernel may cache a size that moves"
        );
        fs.flush(fh).unwrap();
        fs.release(fh).unwrap();
        let attr = fs.getattr(a.ino).unwrap();
        assert_eq!(attr.size, want as u64, "{layout}: after the lease");
        assert!(!attr.volatile);
        let (fh, _) = fs.open(a.ino, libc::O_RDONLY).unwrap();
        let mut got = Vec::new();
        while got.len() < want {
            let c = fs
                .read_with(fh, got.len() as u64, MIB as u32, |b| b.to_vec())
                .unwrap();
            assert!(!c.is_empty());
            got.extend(c);
        }
        fs.release(fh).unwrap();
        assert!(
            got == bytes,
            "{layout}: the daemon reads what the program wrote"
        );
    }
}

/// Memory first: a file staging memory holds is served from there through FUSE, not
/// handed to the program (writing it back and dropping it cost real DeepSpeed what the
/// memory saved); a file memory does not hold goes direct, and memory does not take it in
/// while the lease is out.
#[test]
fn a_file_in_staging_memory_stays_with_the_daemon() {
    let d = tempfile::tempdir().unwrap();
    let fs = fs_in(
        d.path(),
        "whole-file",
        "[cache]\nsize = \"64MiB\"\nwriteback_delay = 3600\n",
    );
    let (a, fh, _) = fs
        .create(
            ROOT_INO,
            OsStr::new("c.tensor.swp"),
            0o600,
            libc::O_RDWR,
            CTX,
        )
        .unwrap();
    let bytes = data(2 * MIB, 4);
    fs.write(fh, 0, &bytes).unwrap();
    assert!(
        fs.cache_view().dirty > 0,
        "the write was not held in memory"
    );
    let no = grant(&fs, fh, libc::O_RDWR, 0).unwrap_err();
    assert_eq!(no.why, NoReason::Busy, "{no:?}");
    assert!(
        fs.cache_view().dirty > 0,
        "memory let go of a file it holds"
    );
    fs.release(fh).unwrap();
    // A file larger than memory holds (over `max_file`, a quarter of the size) goes direct,
    // and while its lease is out no other open brings it into memory.
    let (b, fh, _) = fs
        .create(
            ROOT_INO,
            OsStr::new("big.tensor.swp"),
            0o600,
            libc::O_WRONLY,
            CTX,
        )
        .unwrap();
    let big = data(20 * MIB, 6);
    for (i, c) in big.chunks(MIB).enumerate() {
        fs.write(fh, (i * MIB) as u64, c).unwrap();
    }
    fs.release(fh).unwrap();
    let (fh, _) = fs.open(b.ino, libc::O_RDONLY).unwrap();
    let g = grant(&fs, fh, libc::O_RDONLY, 0).unwrap();
    let mut got = vec![0u8; big.len()];
    std::fs::File::from(g.fds.into_iter().next().unwrap())
        .read_exact_at(&mut got, 0)
        .unwrap();
    assert!(got == big, "the piece lacks the file's bytes");
    let (other, _) = fs.open(b.ino, libc::O_RDONLY).unwrap();
    assert!(
        !fs.cache_view().files.iter().any(|f| f.path.contains("big")),
        "admitted under a lease"
    );
    fs.release(other).unwrap();
    fs.release(fh).unwrap();
    let _ = a;
}

#[test]
fn grants_give_no_more_than_the_handle_and_refuse_what_cannot_stay_exact() {
    let d = tempfile::tempdir().unwrap();
    let fs = fs_in(d.path(), "stripe", "");
    let ino = striped_file(&fs);
    // A read-only handle gets read-only pieces, whatever the flags say.
    let (fh, _) = fs.open(ino, libc::O_RDONLY).unwrap();
    let g = grant(&fs, fh, libc::O_RDWR | libc::O_DIRECT, 0).unwrap();
    assert!(!g.write);
    let f = std::fs::File::from(g.fds.into_iter().next().unwrap());
    assert!(
        (&f).write(b"x").is_err(),
        "a read-only handle's piece writes"
    );
    // One lease per handle.
    let again = grant(&fs, fh, libc::O_RDONLY | libc::O_DIRECT, 0).unwrap_err();
    assert_eq!(again.why, NoReason::Refused);
    fs.release(fh).unwrap();
    // A write-only handle gets write-only pieces though the flags ask to read too.
    let (fh, _) = fs.open(ino, libc::O_WRONLY | libc::O_DIRECT).unwrap();
    let g = grant(&fs, fh, libc::O_RDWR | libc::O_DIRECT, 0).unwrap();
    assert!(g.write);
    let f = std::fs::File::from(g.fds.into_iter().next().unwrap());
    assert!(
        f.read_at(&mut [0u8; 1], 0).is_err(),
        "a write-only handle's piece reads"
    );
    fs.release(fh).unwrap();
    // O_APPEND on stripes, and an open that is neither O_DIRECT nor a swap file: FUSE.
    let (fh, _) = fs.open(ino, libc::O_WRONLY | libc::O_APPEND).unwrap();
    let no = grant(&fs, fh, libc::O_WRONLY | libc::O_APPEND | libc::O_DIRECT, 0).unwrap_err();
    assert_eq!(no.why, NoReason::Policy);
    fs.release(fh).unwrap();
    let (a, fh, _) = fs
        .create(
            ROOT_INO,
            OsStr::new("plain.txt"),
            0o600,
            libc::O_WRONLY,
            CTX,
        )
        .unwrap();
    assert_eq!(
        grant(&fs, fh, libc::O_WRONLY, 0).unwrap_err().why,
        NoReason::Policy
    );
    assert!(grant(&fs, fh, libc::O_WRONLY | libc::O_DIRECT, 0).is_ok());
    fs.release(fh).unwrap();
    // A handle that is gone, or not a file's.
    assert_eq!(grant(&fs, fh, 0, 0).unwrap_err().why, NoReason::Refused);
    let _ = a;
    // `direct = "off"`: quietly no.
    let d2 = tempfile::tempdir().unwrap();
    let off = fs_in(d2.path(), "stripe", "direct = \"off\"\n");
    let ino = striped_file(&off);
    let (fh, _) = off.open(ino, libc::O_RDONLY | libc::O_DIRECT).unwrap();
    assert_eq!(
        grant(&off, fh, libc::O_DIRECT, 0).unwrap_err().why,
        NoReason::Policy
    );
    off.release(fh).unwrap();
    let _ = FileLayout::Whole { tier: 0 };
}

/// Only the token the handle's ioctl answered last proves it, once: a guess, another
/// handle's token, a replaced or a spent one are refused, and a wrong guess does not spend
/// the right one.
#[test]
fn a_grant_needs_the_handles_own_token_once() {
    let d = tempfile::tempdir().unwrap();
    let fs = fs_in(d.path(), "stripe", "");
    let ino = striped_file(&fs);
    let flags = libc::O_RDONLY | libc::O_DIRECT;
    let (a, _) = fs.open(ino, flags).unwrap();
    let (b, _) = fs.open(ino, flags).unwrap();
    let refused = |r: Result<_, tierfs::vfs::direct::Refusal>| {
        matches!(
            r,
            Err(tierfs::vfs::direct::Refusal {
                why: NoReason::Refused,
                ..
            })
        )
    };
    // No token asked yet: 0 (and anything else) is refused.
    assert!(refused(fs.direct_grant(a, 0, flags, 0)));
    let (ia, ta) = fs.direct_token(a).unwrap();
    let (ib, tb) = fs.direct_token(b).unwrap();
    assert_eq!((ia, ib), (ino, ino));
    assert!(ta != tb && ta != 0 && tb != 0);
    assert!(refused(fs.direct_grant(a, tb, flags, 0)), "b's token for a");
    assert!(refused(fs.direct_grant(a, ta ^ 2, flags, 0)), "a guess");
    // Asked again, the earlier token no longer counts.
    let (_, ta2) = fs.direct_token(a).unwrap();
    assert!(
        refused(fs.direct_grant(a, ta, flags, 0)),
        "a replaced token"
    );
    assert!(
        fs.direct_grant(a, ta2, flags, 0).is_ok(),
        "the guesses spent it"
    );
    assert!(refused(fs.direct_grant(b, tb ^ 4, flags, 0)));
    assert!(fs.direct_grant(b, tb, flags, 0).is_ok());
    assert!(refused(fs.direct_grant(b, tb, flags, 0)), "a spent token");
    fs.release(a).unwrap();
    fs.release(b).unwrap();
    assert!(fs.direct_token(a).is_err(), "a released handle");
}

#[test]
fn reported_busy_time_counts_concurrent_programs_once_and_only_from_the_owner() {
    let d = tempfile::tempdir().unwrap();
    let fs = fs_in(d.path(), "stripe", "");
    let busy = |fs: &TierFs| fs.tiers()[1].counters.read_busy.total_ns();
    let io = |periods: Vec<(u64, u64)>| tierfs_wire::TierIo {
        tier: 1,
        read_bytes: 1 << 20,
        reads: 1,
        read_lat_ns: 1000,
        read_busy: periods,
        ..Default::default()
    };
    let before = busy(&fs);
    // Two ranks read the tier over the same second: one second of busy time, not two.
    fs.direct_report(0, &[io(vec![(1_000_000_000, 2_000_000_000)])]);
    fs.direct_report(0, &[io(vec![(1_500_000_000, 2_500_000_000)])]);
    assert_eq!(busy(&fs) - before, 1_500_000_000);
    // Another user's program adds bytes but never busy time (it could report anything).
    let bytes = |fs: &TierFs| {
        fs.tiers()[1]
            .counters
            .direct_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let (b0, t0) = (bytes(&fs), busy(&fs));
    fs.direct_report(4242, &[io(vec![(9_000_000_000, 90_000_000_000)])]);
    assert_eq!(bytes(&fs) - b0, 1 << 20);
    assert_eq!(busy(&fs), t0);
}
