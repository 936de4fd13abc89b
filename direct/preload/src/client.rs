//! Talking to a mount's daemon: one connection per mount and process (a forked child makes
//! its own), checked to be the mount owner's, one request and reply at a time.

use crate::fdtable::Spin;
use crate::mounts::Mount;
use std::sync::atomic::Ordering;
use tierfs_wire::{sock, Reply, Request};

/// How long the library waits for the daemon's answer to an open before it goes on through
/// FUSE (and warns). A slow daemon costs one open that long, then its connection.
const TIMEOUT_MS: u64 = 5000;

struct Conn {
    dev: u64,
    pid: u32,
    fd: i32,
}

/// A report not yet sent: reports wait for the process's next open of a file of the same
/// mount and go just before its request, so the daemon reads both in one wake-up instead
/// of being woken again at every close (DeepSpeed opens and closes a swap file for every
/// read and write of a tensor). They go at once when [`PENDING_MAX`] wait or the oldest
/// has waited [`PENDING_NS`], and at exit, `_exit` and `_Exit` (fio's and Python's
/// worker processes end with `_exit`); a kill or a raw `exit_group` loses at most that
/// many reports, which only feed the statistics and bandwidth estimates.
struct Pending {
    dev: u64,
    pid: u32,
    since: u64,
    msg: Vec<u8>,
}

const PENDING_MAX: usize = 16;
const PENDING_NS: u64 = 1_000_000_000;

struct Conns {
    lock: Spin,
    list: std::cell::UnsafeCell<Vec<Conn>>,
    pending: std::cell::UnsafeCell<Vec<Pending>>,
}

// SAFETY: `list` and `pending` are only touched with `lock` held.
unsafe impl Sync for Conns {}

static CONNS: Conns = Conns {
    lock: Spin::new(),
    list: std::cell::UnsafeCell::new(Vec::new()),
    pending: std::cell::UnsafeCell::new(Vec::new()),
};

/// Takes this process's reports waiting for `dev`'s daemon. The caller holds the lock.
///
/// # Safety
/// `CONNS.lock` must be held.
unsafe fn take_pending(dev: u64) -> Vec<Vec<u8>> {
    let me = pid();
    // SAFETY: the caller holds the lock.
    let pending = unsafe { &mut *CONNS.pending.get() };
    // A forked child's copies of its parent's reports are the parent's to send, and a
    // vfork child shares its parent's memory: only this process's own are touched.
    let (mine, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(pending)
        .into_iter()
        .partition(|p| p.dev == dev && p.pid == me);
    *pending = rest;
    mine.into_iter().map(|p| p.msg).collect()
}

pub fn lock_for_fork() {
    CONNS.lock.lock();
}

pub fn unlock_after_fork() {
    CONNS.lock.unlock();
}

/// A socket of ours moved from `fd` to `to` (the program `dup2`'d onto its number).
pub fn moved(fd: i32, to: i32) {
    CONNS.lock.lock();
    // SAFETY: the lock is held.
    let list = unsafe { &mut *CONNS.list.get() };
    for c in list.iter_mut().filter(|c| c.fd == fd) {
        c.fd = to;
    }
    CONNS.lock.unlock();
}

fn pid() -> u32 {
    // SAFETY: getpid(2) has no failure mode.
    unsafe { libc::getpid() as u32 }
}

/// Runs `f` on this process's connection to `m`'s daemon (made first if there is none).
/// The lock is held throughout (replies follow requests in order); the socket calls it
/// makes are the library's own, not wrapped ones.
fn with_conn<R>(m: &Mount, f: impl FnOnce(i32) -> Result<R, String>) -> Result<R, String> {
    let dev = m.dev();
    let me = pid();
    CONNS.lock.lock();
    // SAFETY: the lock is held.
    let list = unsafe { &mut *CONNS.list.get() };
    // A forked child inherits its parent's sockets: never speak on one (they stay open,
    // guarded, as inherited descriptors the child did not ask for).
    list.retain(|c| c.pid == me);
    let fd = match list.iter().find(|c| c.dev == dev) {
        Some(c) => Ok(c.fd),
        None => connect(m).inspect(|fd| {
            crate::fdtable::add_socket(*fd);
            list.push(Conn {
                dev,
                pid: me,
                fd: *fd,
            })
        }),
    };
    let r = fd.and_then(|fd| {
        f(fd).inspect_err(|_| {
            // Its state is unknown now (a reply may still come): start afresh next time.
            list.retain(|c| c.fd != fd);
            crate::fdtable::remove_socket(fd);
            // SAFETY: our own socket, closed once.
            unsafe { crate::real::close(fd) };
        })
    });
    CONNS.lock.unlock();
    r
}

/// A connection to `m`'s daemon, refused unless its peer is the mount's owner.
fn connect(m: &Mount) -> Result<i32, String> {
    let name = tierfs_wire::socket_name(m.major, m.minor);
    let fd = sock::connect(&name).map_err(|e| format!("cannot reach its daemon (@{name}): {e}"))?;
    let checked = sock::peer(fd)
        .map_err(|e| e.to_string())
        .and_then(|(_, uid, _)| {
            if uid == m.owner {
                Ok(())
            } else {
                Err(format!(
                    "@{name} is served by uid {uid}, not by the mount's owner (uid {}): ignored",
                    m.owner
                ))
            }
        })
        .and_then(|_| sock::set_timeout(fd, TIMEOUT_MS).map_err(|e| e.to_string()));
    match checked {
        Ok(()) => Ok(fd),
        Err(e) => {
            // SAFETY: our own socket, closed once.
            unsafe { crate::real::close(fd) };
            Err(e)
        }
    }
}

/// The handle behind the program's fresh FUSE descriptor `fuse_fd` and a single-use token
/// that proves it to the daemon: its answer to [`tierfs_wire::IOC_HANDLE`], which the
/// kernel delivers as a FUSE request with that descriptor's handle.
fn handle_of(fuse_fd: i32) -> Result<(u64, u64), String> {
    let mut out = [0u8; tierfs_wire::IOC_HANDLE_LEN];
    // SAFETY: the ioctl writes at most IOC_HANDLE_LEN bytes (its size is encoded in the
    // number) into `out`; a raw syscall, so no wrapper of ours or another library's runs.
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioctl,
            fuse_fd,
            tierfs_wire::IOC_HANDLE as libc::c_ulong,
            out.as_mut_ptr(),
        )
    };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "the mount does not name the open's handle ({e}; a daemon older than the library?)"
        ));
    }
    let word = |i: usize| u64::from_le_bytes(out[i..i + 8].try_into().expect("8 bytes"));
    Ok((word(0), word(16)))
}

/// The daemon's answer to an open: the reply and the descriptors that came with it
/// (close-on-exec, the caller's to close).
pub fn ask(m: &Mount, fuse_fd: i32, flags: i32) -> Result<(Reply, Vec<i32>), String> {
    let (fh, token) = handle_of(fuse_fd)?;
    let msg = Request::Open { fh, token, flags }.encode();
    with_conn(m, |fd| {
        // SAFETY: `with_conn` holds the lock.
        for r in unsafe { take_pending(m.dev()) } {
            // Lost with the connection on failure, like a report sent at close.
            sock::send(fd, &r, &[]).map_err(|e| format!("sending to the daemon: {e}"))?;
        }
        sock::send(fd, &msg, &[]).map_err(|e| format!("sending to the daemon: {e}"))?;
        let mut buf = vec![0u8; tierfs_wire::MAX_MESSAGE];
        let (n, fds, cut) = sock::recv(fd, &mut buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                format!("the daemon did not answer within {} s", TIMEOUT_MS / 1000)
            } else {
                format!("reading the daemon's answer: {e}")
            }
        })?;
        let bad = |why: String, fds: &[i32]| {
            for f in fds {
                // SAFETY: descriptors we were just handed, closed once.
                unsafe { crate::real::close(*f) };
            }
            Err(why)
        };
        if n == 0 {
            return bad("the daemon closed the connection".into(), &fds);
        }
        if cut {
            return bad("the daemon's answer was cut short".into(), &fds);
        }
        match Reply::decode(&buf[..n]) {
            Ok(r) => Ok((r, fds)),
            Err(e) => bad(format!("the daemon answered {e}"), &fds),
        }
    })
}

/// Queues what a direct open moved for the daemon of the mount on device `dev` (no
/// answer); see [`Pending`] for when it goes.
pub fn report(dev: u64, r: tierfs_wire::Report) {
    at_exit();
    let now = crate::stats::now_ns();
    let me = pid();
    CONNS.lock.lock();
    // SAFETY: the lock is held.
    let pending = unsafe { &mut *CONNS.pending.get() };
    pending.push(Pending {
        dev,
        pid: me,
        since: now,
        msg: Request::Report(r).encode(),
    });
    let due = pending.iter().filter(|p| p.dev == dev && p.pid == me);
    let send = due.clone().count() >= PENDING_MAX
        || due
            .map(|p| p.since)
            .min()
            .is_some_and(|t| now.saturating_sub(t) >= PENDING_NS);
    CONNS.lock.unlock();
    if send {
        send_pending(dev);
    }
}

/// Sends this process's reports waiting for `dev`'s daemon now.
fn send_pending(dev: u64) {
    let Some(m) = crate::mounts_known()
        .iter()
        .find(|m| m.dev() == dev)
        .cloned()
    else {
        return;
    };
    let _ = with_conn(&m, |fd| {
        // SAFETY: `with_conn` holds the lock.
        for r in unsafe { take_pending(dev) } {
            sock::send(fd, &r, &[]).map_err(|e| e.to_string())?;
        }
        Ok(())
    });
}

/// Sends every report this process has waiting (at exit, `exit` or `_exit`).
pub fn flush_pending() {
    let me = pid();
    CONNS.lock.lock();
    // SAFETY: the lock is held.
    let mut devs: Vec<u64> = unsafe { &*CONNS.pending.get() }
        .iter()
        .filter(|p| p.pid == me)
        .map(|p| p.dev)
        .collect();
    CONNS.lock.unlock();
    devs.sort_unstable();
    devs.dedup();
    for d in devs {
        send_pending(d);
    }
}

/// Sends every waiting report when the process exits (registered once).
fn at_exit() {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    extern "C" fn flush() {
        flush_pending();
    }
    // SAFETY: registers a function that takes and releases our own lock.
    unsafe { libc::atexit(flush) };
}

/// Whether the library is turned off for this process (`TIERFS_DIRECT=0`).
pub fn disabled() -> bool {
    static STATE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    match STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let off = std::env::var_os("TIERFS_DIRECT").is_some_and(|v| v == "0");
            STATE.store(if off { 2 } else { 1 }, Ordering::Relaxed);
            off
        }
    }
}
