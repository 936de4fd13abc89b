//! The daemon's logger: timestamped lines to one file or stderr.
//!
//! A minimal `log` backend rather than a logging crate: the daemon writes a few lines per
//! event, and a background daemon's only window is this file, so every line is flushed as
//! it is written. Only the daemon installs it; the commands print to stderr themselves.

use parking_lot::Mutex;
use std::io::Write;
use std::path::Path;

struct Logger {
    out: Mutex<Box<dyn Write + Send>>,
    level: log::LevelFilter,
}

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= self.level
    }
    fn log(&self, r: &log::Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let mut out = self.out.lock();
        let _ = writeln!(
            out,
            "{}.{:03} {:<5} {}",
            now.as_secs(),
            now.subsec_millis(),
            r.level(),
            r.args()
        );
        let _ = out.flush();
    }
    fn flush(&self) {
        let _ = self.out.lock().flush();
    }
}

/// Installs the logger (the first call wins). Lines go to `log_file` (the config's
/// `log_file`), else to `TIERFS_LOG_FILE`, else, or where that cannot be opened, to stderr.
/// The level comes from `TIERFS_LOG` (error, warn, info, debug), default info.
pub fn init(log_file: Option<&Path>) {
    let level = match std::env::var("TIERFS_LOG").as_deref() {
        Ok("error") => log::LevelFilter::Error,
        Ok("warn") => log::LevelFilter::Warn,
        Ok("debug") => log::LevelFilter::Debug,
        _ => log::LevelFilter::Info,
    };
    let target = log_file
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("TIERFS_LOG_FILE").map(std::path::PathBuf::from));
    let out: Box<dyn Write + Send> = match target.and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    }) {
        Some(f) => Box::new(f),
        None => Box::new(std::io::stderr()),
    };
    if log::set_boxed_logger(Box::new(Logger {
        out: Mutex::new(out),
        level,
    }))
    .is_ok()
    {
        log::set_max_level(level);
    }
}
