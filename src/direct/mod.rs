//! The direct path's server: the unix socket on which a program under `tierfs run` (the
//! preload library in `direct/preload/`) asks for the tier files behind a FUSE descriptor
//! it holds, and reports what it moved through them. Why: without root there is no kernel
//! passthrough, and the kernel copies every `O_DIRECT` payload into the daemon on any FUSE
//! transport; DeepSpeed's bytes then cost the CPU training needs. Handed the pieces' own
//! descriptors, the program's bytes never cross FUSE. The protocol is `tierfs_wire`'s;
//! which opens go direct, and what a file is owed while they do, is the core's
//! (`crate::vfs::direct`).
//!
//! Trust: the socket is abstract (anyone may connect), so the daemon believes only the
//! kernel. A program proves which handle it holds with the single-use token the daemon
//! answered to a FUSE ioctl on that handle's descriptor ([`tierfs_wire::IOC_HANDLE`]): the
//! kernel sends that ioctl only for a descriptor of this mount that is not `O_PATH`, with
//! the descriptor's own handle, so whoever has the token held the descriptor (or was given
//! the token by one who did, as good as being given the descriptor). The grant has no more
//! access than that handle's open. The caller's uid comes from `SO_PEERCRED`, for the log.
//! Anything else a peer sends (garbage, other versions, wrong or spent tokens, descriptors)
//! is refused or dropped, its descriptors closed. (Protocol 1 passed the FUSE descriptor
//! itself and the daemon asked the ioctl: two more FUSE requests into this daemon, the
//! ioctl and the FLUSH of its copy's close, for every open.)

pub mod run;

use crate::fuse::Notifier;
use crate::vfs::TierFs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tierfs_wire::{sock, NoReason, Reply, Request};

/// The running server: its socket and thread, ended by [`Server::stop`] (or drop).
pub struct Server {
    /// Closed at [`Server::stop`]: the name is free for a later mount then (a mount that
    /// gets this one's device number), not when this process ends.
    listener: Option<OwnedFd>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    name: String,
}

/// What a connection thread needs.
struct Shared {
    fs: Arc<TierFs>,
    notify: Notifier,
}

impl Server {
    /// Starts serving the mount at `mountpoint` (mounted and answering).
    pub fn start(fs: Arc<TierFs>, mountpoint: &Path, notify: Notifier) -> std::io::Result<Server> {
        let dev = std::fs::metadata(mountpoint)?.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let name = tierfs_wire::socket_name(major, minor);
        // An earlier daemon of a mount that had this device number may still hold the
        // name for a moment while it ends: wait for it (up to 5 s).
        let mut tries = 0;
        let fd = loop {
            match sock::listen(&name) {
                Ok(fd) => break fd,
                Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("cannot listen on the abstract socket @{name}: {e}"),
                    ))
                }
            }
        };
        // SAFETY: `fd` is the socket we just made and now own.
        let listener = unsafe { OwnedFd::from_raw_fd(fd) };
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = Arc::new(Shared { fs, notify });
        let (l, s) = (listener.as_raw_fd(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("tierfs-direct".into())
            .spawn(move || accept_loop(l, &s, &ctx))?;
        log::info!("direct path: serving programs under `tierfs run` on @{name}");
        Ok(Server {
            listener: Some(listener),
            stop,
            thread: Some(thread),
            name,
        })
    }

    /// Stops taking connections (the connections open now end with their programs).
    pub fn stop(&mut self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(l) = &self.listener {
            // SAFETY: shutdown(2) on our listening socket wakes the accept.
            unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.listener = None;
        log::info!("direct path: stopped @{}", self.name);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: i32, stop: &AtomicBool, ctx: &Arc<Shared>) {
    while !stop.load(Ordering::SeqCst) {
        let fd = match sock::accept(listener) {
            Ok(fd) => fd,
            Err(e) if stop.load(Ordering::SeqCst) => {
                log::debug!("direct path: accept ends: {e}");
                return;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::warn!("direct path: accept: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        // SAFETY: `fd` is the connection accept just made; we own it.
        let conn = unsafe { OwnedFd::from_raw_fd(fd) };
        let ctx = ctx.clone();
        let spawned = std::thread::Builder::new()
            .name("tierfs-direct-conn".into())
            .spawn(move || serve(conn, &ctx));
        if let Err(e) = spawned {
            log::warn!("direct path: cannot serve a connection: {e}");
        }
    }
}

/// Serves one program (process) until it goes.
fn serve(conn: OwnedFd, ctx: &Shared) {
    let Ok((pid, uid, _)) = sock::peer(conn.as_raw_fd()) else {
        return;
    };
    let mut buf = vec![0u8; tierfs_wire::MAX_MESSAGE];
    loop {
        let (n, fds, cut) = match sock::recv(conn.as_raw_fd(), &mut buf) {
            Ok(r) => r,
            Err(e) => {
                log::debug!("direct path: pid {pid}: {e}");
                return;
            }
        };
        // SAFETY: the kernel installed these descriptors for us; each is ours to close.
        let fds: Vec<OwnedFd> = fds
            .into_iter()
            .map(|f| unsafe { OwnedFd::from_raw_fd(f) })
            .collect();
        if n == 0 && fds.is_empty() {
            return;
        }
        let reply = if cut {
            Some(no(NoReason::Error, "a message cut short"))
        } else {
            match Request::decode(&buf[..n]) {
                // Descriptors have no place in a request: dropped (closed) with `fds`.
                Ok(Request::Open { .. }) if !fds.is_empty() => {
                    Some(no(NoReason::Refused, "an open carries no descriptor"))
                }
                Ok(Request::Open { fh, token, flags }) => Some(open(ctx, fh, token, flags, uid)),
                Ok(Request::Report(r)) => {
                    ctx.fs.direct_report(uid, &r.tiers);
                    None
                }
                Err(tierfs_wire::DecodeError::Version(v)) => Some(no(
                    NoReason::Version,
                    format!(
                        "the daemon speaks protocol {}, the library {v}: use the library \
                         built with this tierfs",
                        tierfs_wire::VERSION
                    ),
                )),
                Err(e) => {
                    log::debug!("direct path: pid {pid} sent {e}");
                    Some(no(NoReason::Error, e.to_string()))
                }
            }
        };
        if let Some((reply, fds)) = reply {
            let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
            if let Err(e) = sock::send(conn.as_raw_fd(), &reply.encode(), &raw) {
                log::debug!("direct path: pid {pid}: {e}");
                return;
            }
        }
    }
}

fn no(why: NoReason, text: impl Into<String>) -> (Reply, Vec<OwnedFd>) {
    (
        Reply::No {
            why,
            text: text.into(),
        },
        Vec::new(),
    )
}

/// An open request: the handle `fh` proven by its `token`, asked of the core.
fn open(ctx: &Shared, fh: u64, token: u64, flags: i32, uid: u32) -> (Reply, Vec<OwnedFd>) {
    match ctx.fs.direct_grant(fh, token, flags, uid) {
        Ok(g) => {
            if g.write {
                // The kernel's pages and attributes of the file are stale from now on.
                ctx.notify.inval_inode(g.ino, true);
            }
            let reply = Reply::Grant(tierfs_wire::Grant {
                ino: g.ino,
                shape: g.shape,
                tiers: g.tiers,
            });
            (reply, g.fds)
        }
        Err(r) => no(r.why, r.text),
    }
}
