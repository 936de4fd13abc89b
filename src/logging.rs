//! The daemon's logger: timestamped lines to one file or stderr.
//!
//! Each line starts with the time in RFC 3339, UTC, to the millisecond
//! (`2026-12-06T06:30:01.123Z INFO  mounted ...`): what a person reading the log of a job
//! that ran overnight can place, and what `sort` and `grep` on a date prefix take. UTC,
//! because the daemon's time zone may not be the reader's, and a few lines of calendar
//! arithmetic ([`rfc3339`]) instead of a date crate.
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
        let _ = writeln!(out, "{} {:<5} {}", rfc3339(now), r.level(), r.args());
        let _ = out.flush();
    }
    fn flush(&self) {
        let _ = self.out.lock().flush();
    }
}

/// `since_epoch` (a time after 1970-01-01) as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(since_epoch: std::time::Duration) -> String {
    let secs = since_epoch.as_secs();
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        since_epoch.subsec_millis()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`:
/// count in 400-year eras starting on March 1, so that the leap day ends a year).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of the era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the year from March 1
    let mp = (5 * doy + 2) / 153; // month from March, 0..=11
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        let at = |s: u64, ms: u64| rfc3339(Duration::from_millis(s * 1000 + ms));
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        // `date -u -d @951782400` and neighbours: a leap day of a year divisible by 400,
        // the end of a leap year, and a time of day with every field set.
        assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(951_868_799, 999), "2000-02-29T23:59:59.999Z");
        assert_eq!(at(1_735_689_599, 5), "2024-12-31T23:59:59.005Z");
        assert_eq!(at(1_796_538_601, 123), "2026-12-06T06:30:01.123Z");
        // 2100 is not a leap year: Feb 28 is followed by Mar 1.
        assert_eq!(at(4_107_542_399, 0), "2100-02-28T23:59:59.000Z");
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000Z");
    }

    /// Every day from 1970 to 2200 against a plain day-by-day calendar.
    #[test]
    fn civil_dates_agree_with_counting_days() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let (mut y, mut m, mut d) = (1970i64, 1u32, 1u32);
        for days in 0..(230 * 366) {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            let len = match m {
                2 if leap(y) => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            d += 1;
            if d > len {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }
}
