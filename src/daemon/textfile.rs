//! `[metrics] textfile`: the daemon writes its metrics (what `tierfs stat --prom` prints)
//! for node_exporter's textfile collector itself, every `textfile_interval` seconds and once
//! more at unmount, so no cron job or loop beside the job has to copy them out.
//!
//! Each write goes through a temporary file in the same folder and a rename
//! ([`crate::stats::prom::write_atomic`]), so the collector never reads half a file. The daemon
//! runs as the mount's user, so that user must be able to write the folder: checked before
//! mounting ([`check`]), with the fix. A write that fails later (the folder removed, a full
//! disk) is logged once and retried at the next interval; the mount goes on.

use crate::config::MountConfig;
use crate::error::failure::Failure;
use crate::vfs::{TierFs, Virtual};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Refuses a textfile whose folder this user cannot write, or that sits in the mount (the
/// daemon would write through its own mount).
pub(super) fn check(config: &MountConfig, mountpoint: &Path) -> Result<(), Failure> {
    let Some(file) = &config.metrics.textfile else {
        return Ok(());
    };
    let dir = file.parent().unwrap_or(Path::new("/"));
    let fail = |why: String| {
        Failure::usage(format!(
            "{}: metrics.textfile: {why}",
            config.source.display()
        ))
    };
    if !dir.is_dir() {
        return Err(fail(format!(
            "the folder {} of {} does not exist; create it (`mkdir -p {}`) or point \
             textfile elsewhere",
            dir.display(),
            file.display(),
            dir.display()
        )));
    }
    if let (Ok(d), Ok(m)) = (
        std::fs::canonicalize(dir),
        std::fs::canonicalize(mountpoint),
    ) {
        if d.starts_with(&m) {
            return Err(fail(format!(
                "{} is inside the mountpoint {}; the daemon cannot write into its own mount: \
                 point textfile outside it",
                file.display(),
                mountpoint.display()
            )));
        }
    }
    // A real write and rename, as the daemon will make them: access(2) says nothing of a
    // read-only file system or an ACL.
    let probe = crate::stats::prom::temp_path(file).map_err(|e| fail(e.to_string()))?;
    let tried = std::fs::write(&probe, b"").and_then(|()| std::fs::remove_file(&probe));
    tried.map_err(|e| {
        fail(format!(
            "the folder {} is not writable by {}: {e}; let this user write there (a folder \
             of its own, e.g. {}/$USER, made by the folder's owner) or point textfile \
             elsewhere",
            dir.display(),
            crate::config::who_am_i(),
            dir.display()
        ))
    })
}

/// The thread that writes the textfile, until [`Writer::stop`].
pub(super) struct Writer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
    job: Job,
}

/// One write: what to render and where.
#[derive(Clone)]
struct Job {
    fs: Arc<TierFs>,
    file: PathBuf,
    mountpoint: PathBuf,
}

impl Job {
    fn write(&self) -> Result<(), String> {
        let metrics = crate::vfs::snapshot::render(&self.fs, Virtual::Metrics, false);
        let text =
            crate::stats::prom::labelled(&String::from_utf8_lossy(&metrics), &self.mountpoint)?;
        crate::stats::prom::write_atomic(&self.file, text.as_bytes()).map_err(|e| e.to_string())
    }
}

impl Writer {
    /// Writes the textfile now and then every `textfile_interval` seconds; `None` where
    /// the config names none.
    pub(super) fn start(
        fs: &Arc<TierFs>,
        config: &MountConfig,
        mountpoint: &Path,
    ) -> Result<Option<Writer>, Failure> {
        let Some(file) = config.metrics.textfile.clone() else {
            return Ok(None);
        };
        let job = Job {
            fs: fs.clone(),
            file,
            mountpoint: mountpoint.to_path_buf(),
        };
        let mut last_error = None;
        write_logged(&job, &mut last_error);
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let interval = Duration::from_secs_f64(config.metrics.textfile_interval);
        let thread = {
            let (stop, job) = (stop.clone(), job.clone());
            std::thread::Builder::new()
                .name("tierfs-textfile".into())
                .spawn(move || loop {
                    let (lock, cv) = &*stop;
                    let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
                    let (guard, _) = cv
                        .wait_timeout_while(guard, interval, |stopped| !*stopped)
                        .unwrap_or_else(|e| e.into_inner());
                    if *guard {
                        return;
                    }
                    drop(guard);
                    write_logged(&job, &mut last_error);
                })
                .map_err(|e| Failure::runtime(format!("cannot start the textfile thread: {e}")))?
        };
        Ok(Some(Writer {
            stop,
            thread: Some(thread),
            job,
        }))
    }

    /// Stops the thread and writes the file a last time (the counters as the mount ends).
    pub(super) fn stop(mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Err(e) = self.job.write() {
            log::warn!(
                "metrics textfile {}: last write at unmount failed: {e}",
                self.job.file.display()
            );
        }
    }
}

/// Writes once; a failure is logged when it differs from the last one (not every interval),
/// and a success after failures is said.
fn write_logged(job: &Job, last_error: &mut Option<String>) {
    match (job.write(), last_error.as_ref()) {
        (Ok(()), None) => {}
        (Ok(()), Some(_)) => {
            log::info!("metrics textfile {} written again", job.file.display());
            *last_error = None;
        }
        (Err(e), Some(last)) if *last == e => {}
        (Err(e), _) => {
            log::warn!(
                "metrics textfile {}: {e} (retried every interval)",
                job.file.display()
            );
            *last_error = Some(e);
        }
    }
}
