//! One mounted FUSE connection: mount, answer INIT, choose the transport, run its
//! workers, and unmount.

use super::abi::{self, Pod};
use super::dev;
use super::dispatch::Dispatcher;
use super::mount::{self, MountSpec, MountedBy};
use super::uring;
use super::MAX_REQUEST;
use crate::config::Transport;
use crate::vfs::TierFs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How to run the connection.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The mount's source as mountinfo shows it (`mount -a` compares it with fstab).
    pub source: String,
    pub allow_other: bool,
    /// /dev/fuse worker threads; with io_uring, the ring entries per queue follow from it.
    pub threads: usize,
    pub transport: Transport,
}

/// A mounted, served FUSE connection.
pub struct Session {
    mountpoint: PathBuf,
    by: MountedBy,
    /// Kept open for the session's life: workers read it, and the passthrough ioctls use it.
    dev: Arc<OwnedFd>,
    workers: Vec<JoinHandle<()>>,
    dev_workers: usize,
    transport: &'static str,
}

/// Whether registered ring workers go on to serve (`true`) or withdraw their entries.
#[derive(Default)]
struct Verdict {
    state: parking_lot::Mutex<Option<bool>>,
    cv: parking_lot::Condvar,
}

impl Verdict {
    fn set(&self, serve: bool) {
        *self.state.lock() = Some(serve);
        self.cv.notify_all();
    }

    fn wait(&self) -> bool {
        let mut s = self.state.lock();
        loop {
            if let Some(v) = *s {
                return v;
            }
            self.cv.wait(&mut s);
        }
    }
}

/// Descriptors the daemon keeps for tier files and everything else besides ring entries.
const FD_RESERVE: u64 = 256;

/// How many ring entries per queue the descriptor limit allows (each entry has its own
/// ring, one descriptor). An error when not even one per queue fits.
fn fd_budget(queues: usize) -> Result<usize, String> {
    // SAFETY: getrlimit only writes the struct we pass.
    let limit = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur
    };
    let open = std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count() as u64);
    let free = limit.saturating_sub(open + FD_RESERVE);
    let per_queue = free / queues as u64;
    if per_queue == 0 {
        return Err(format!(
            "too few file descriptors: {queues} queues need at least {queues} beside the \
             {FD_RESERVE} kept for files, and the limit is {limit} with {open} open; raise \
             it (ulimit -n)"
        ));
    }
    Ok(per_queue.min(usize::MAX as u64) as usize)
}

/// Ring entries (one thread each) per kernel queue: enough that one CPU's burst of
/// DeepSpeed requests (threads x queue depth 8) is served at once.
fn ring_depth(threads: usize, queues: usize) -> usize {
    threads.div_ceil(queues).clamp(4, 64)
}

impl Session {
    /// Mounts `fs` at `mountpoint` and starts serving it. On error nothing stays mounted.
    pub fn start(
        fs: Arc<TierFs>,
        mountpoint: &Path,
        o: &SessionOptions,
    ) -> Result<Session, String> {
        let spec = MountSpec {
            source: &o.source,
            mountpoint,
            allow_other: o.allow_other,
        };
        let (fd, by) = mount::mount(&spec)
            .map_err(|e| format!("cannot mount at {}: {e}", mountpoint.display()))?;
        let fd = Arc::new(fd);
        let mut s = Session {
            mountpoint: mountpoint.to_path_buf(),
            by,
            dev: fd.clone(),
            workers: Vec::new(),
            dev_workers: 0,
            transport: "dev",
        };
        match s.serve(fs, o) {
            Ok(()) => Ok(s),
            Err(e) => {
                let _ = s.unmount();
                Err(e)
            }
        }
    }

    fn serve(&mut self, fs: Arc<TierFs>, o: &SessionOptions) -> Result<(), String> {
        let raw = self.dev.as_raw_fd();
        let disp = Arc::new(Dispatcher::new(
            fs.clone(),
            &*self.dev,
            o.transport != Transport::Dev,
        ));
        let (h, init_in) =
            dev::read_init(raw).map_err(|e| format!("the kernel's INIT did not arrive: {e}"))?;
        // Whether the ring could be set up at all is settled before answering INIT: once
        // the kernel agrees to io_uring, every request waits for the ring.
        let queues = uring::possible_cpus();
        let mut why_not: Option<String> = None;
        let mut depth = 0;
        if o.transport != Transport::Dev {
            match fd_budget(queues) {
                Ok(d) => depth = ring_depth(o.threads, queues).min(d),
                Err(e) => why_not = Some(e),
            }
        }
        disp.set_want_uring(o.transport != Transport::Dev && why_not.is_none());
        let (out, neg) = match disp.init(&init_in) {
            Ok(v) => v,
            Err(msg) => {
                dev::send_reply(raw, h.unique, libc::EPROTO, &[]);
                return Err(msg);
            }
        };
        dev::send_reply(raw, h.unique, 0, out.bytes());
        let mut ring_ok = false;
        if o.transport != Transport::Dev {
            if why_not.is_none() {
                why_not = if neg.uring {
                    match self.start_ring(&disp, queues, depth) {
                        Ok(()) => {
                            ring_ok = true;
                            None
                        }
                        Err(e) => Some(format!("registering the ring failed: {e}")),
                    }
                } else {
                    Some(
                        uring::unavailable_reason(init_in.minor, neg.uring_offered)
                            .unwrap_or_else(|| "the kernel did not offer it".into()),
                    )
                };
            }
            if let Some(why) = why_not {
                if o.transport == Transport::Uring {
                    return Err(format!(
                        "transport = \"uring\" was asked for, but FUSE over io_uring is unavailable: {why}; \
                         use transport = \"auto\" to fall back to /dev/fuse"
                    ));
                }
                log::info!("FUSE over io_uring is unavailable ({why}): serving through /dev/fuse");
            }
        }
        // With the ring, /dev/fuse still carries forgets, interrupts and whatever arrived
        // before every queue had an entry.
        let n = if ring_ok { 2 } else { o.threads.max(1) };
        for i in 0..n {
            let fd = mount::clone_fd(&self.dev).map(Arc::new);
            let session_fd = self.dev.clone();
            let disp = disp.clone();
            let t = std::thread::Builder::new()
                .name(format!("tierfs-fuse-{i}"))
                .spawn(move || {
                    let raw = fd
                        .as_ref()
                        .map_or(session_fd.as_raw_fd(), |f| f.as_raw_fd());
                    if let Err(e) = dev::serve(raw, &disp) {
                        log::error!("a /dev/fuse worker stopped: {e}");
                    }
                    drop(fd);
                })
                .map_err(|e| format!("cannot start a FUSE thread: {e}"))?;
            self.workers.push(t);
        }
        self.dev_workers = n;
        self.transport = if ring_ok { "uring" } else { "dev" };
        fs.requests().set_transport(self.transport);
        log::info!(
            "FUSE transport: {} (protocol 7.{}, {} /dev/fuse threads{})",
            if ring_ok { "io_uring" } else { "/dev/fuse" },
            neg.minor,
            n,
            if ring_ok {
                format!(", {} ring entries", self.workers.len() - n)
            } else {
                String::new()
            }
        );
        Ok(())
    }

    /// Registers the ring entries, each on its own thread; Ok once the ring serves.
    ///
    /// The kernel switches to the ring as soon as every queue has an entry, and a switched
    /// connection cannot go back. So the entries of every queue but 0 are registered
    /// first; if any is refused, all are withdrawn (their rings closed) before queue 0 has
    /// one, and /dev/fuse keeps serving. Queue 0's first entry then turns the ring on.
    fn start_ring(
        &mut self,
        disp: &Arc<Dispatcher>,
        queues: usize,
        depth: usize,
    ) -> Result<(), String> {
        let payload = MAX_REQUEST as usize + abi::MIN_READ_BUFFER;
        let verdict = Arc::new(Verdict::default());
        let (tx, rx) = mpsc::channel::<Result<(), String>>();
        let spawn = |qid: usize, k: usize, this: &mut Session| -> Result<(), String> {
            let tx = tx.clone();
            let disp = disp.clone();
            let fd = this.dev.clone();
            let verdict = verdict.clone();
            let t = std::thread::Builder::new()
                .name(format!("tierfs-ring-{qid}.{k}"))
                .spawn(move || {
                    match uring::Worker::register(fd.as_raw_fd(), qid as u16, payload) {
                        Ok(w) => {
                            let _ = tx.send(Ok(()));
                            if verdict.wait() {
                                if let Err(e) = w.serve(&disp) {
                                    log::error!("ring worker {qid}.{k} stopped: {e}");
                                }
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e.to_string()));
                        }
                    }
                    drop(fd);
                })
                .map_err(|e| format!("cannot start a ring thread: {e}"))?;
            this.workers.push(t);
            Ok(())
        };
        let wait = |n: usize| -> Result<(), String> {
            for _ in 0..n {
                match rx.recv_timeout(Duration::from_secs(10)) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(e),
                    Err(_) => return Err("a ring entry did not register within 10 s".into()),
                }
            }
            Ok(())
        };
        let mut first: Result<(), String> = Ok(());
        let mut started = 0;
        for qid in 1..queues {
            for k in 0..depth {
                if let Err(e) = spawn(qid, k, self) {
                    first = Err(e);
                    break;
                }
                started += 1;
            }
        }
        let first = first.and_then(|()| wait(started));
        let first = first.and_then(|()| {
            spawn(0, 0, self)?;
            wait(1)
        });
        if let Err(e) = first {
            verdict.set(false);
            // A refused registration has already turned the connection back to /dev/fuse;
            // for a failure of ours, a registration the kernel must refuse (a queue that
            // does not exist) does it, so requests stop waiting for a ring.
            if let Err(r) = uring::Worker::register(self.dev.as_raw_fd(), queues as u16, payload) {
                log::debug!("withdrawing the ring: {r}");
            }
            return Err(e);
        }
        verdict.set(true);
        // The ring is on: queue 0's other entries only add depth.
        let mut extra = 0;
        for k in 1..depth {
            spawn(0, k, self)?;
            extra += 1;
        }
        if let Err(e) = wait(extra) {
            log::warn!("FUSE over io_uring: queue 0 has fewer than {depth} entries: {e}");
        }
        Ok(())
    }

    /// "uring" or "dev".
    /// Notifications to the kernel from outside the workers (the direct path's server).
    pub fn notifier(&self) -> super::Notifier {
        super::Notifier(self.dev.clone())
    }

    pub fn transport(&self) -> &'static str {
        self.transport
    }

    /// Whether the connection has ended (unmounted, by us or anyone).
    pub fn finished(&self) -> bool {
        self.workers[..self.dev_workers]
            .iter()
            .all(|t| t.is_finished())
    }

    /// Unmounts (lazily: files still open keep being served until closed).
    pub fn unmount(&self) -> std::io::Result<()> {
        mount::unmount(&self.mountpoint, self.by)
    }

    /// Waits for every worker to finish (after the connection has ended).
    pub fn join(self) {
        for t in self.workers {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_depth_bounds() {
        assert_eq!(ring_depth(64, 2), 32);
        assert_eq!(ring_depth(64, 256), 4);
        assert_eq!(ring_depth(256, 1), 64);
    }
}
