//! `tierfs probe`'s report: the results as a table for people, with when each was
//! measured ("3s ago", or the date) and a warning where the CPU was busy.
//!
//! Apart from the measurement (the parent module): presentation only, no I/O.

use super::{unix_now, CpuWait, ProbeResult};
use crate::units::fmt_rate;

/// A human table: one row per (name, path, result).
pub fn render_table(rows: &[(String, String, ProbeResult)]) -> String {
    render_table_at(rows, unix_now())
}

/// [`render_table`] with the MEASURED column relative to `now` (Unix seconds).
pub fn render_table_at(rows: &[(String, String, ProbeResult)], now: u64) -> String {
    let header = ["NAME", "PATH", "READ", "WRITE", "MODE", "MEASURED"];
    // READ and WRITE are right-aligned.
    let right = [false, false, true, true, false, false];
    let mut cells: Vec<[String; 6]> = Vec::with_capacity(rows.len() + 1);
    cells.push(header.map(String::from));
    for (name, path, r) in rows {
        cells.push([
            name.clone(),
            path.clone(),
            fmt_rate(r.read_bps),
            fmt_rate(r.write_bps),
            if r.direct_io {
                "direct"
            } else {
                "buffered+fsync"
            }
            .to_string(),
            match r.cpu_wait.filter(CpuWait::busy).and_then(|w| w.worst()) {
                Some(w) => format!(
                    "{}, CPU busy {:.0} %: may be low",
                    format_age(r.measured_at, now),
                    w * 100.0
                ),
                None => format_age(r.measured_at, now),
            },
        ]);
    }
    let mut widths = [0usize; 6];
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in &cells {
        let mut line = String::new();
        for (i, c) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = widths[i] - c.chars().count();
            if right[i] {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(c);
            } else {
                line.push_str(c);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// How long ago `then` was, seen at `now` (Unix seconds): "3s ago", "5m ago", "2h ago",
/// or the UTC date ("2025-01-31") from a day on, or when `then` lies in the future.
pub fn format_age(then: u64, now: u64) -> String {
    match now.checked_sub(then) {
        Some(s) if s < 60 => format!("{s}s ago"),
        Some(s) if s < 3600 => format!("{}m ago", s / 60),
        Some(s) if s < 86400 => format!("{}h ago", s / 3600),
        _ => {
            let (y, m, d) = civil_from_days(then / 86400);
            format!("{y:04}-{m:02}-{d:02}")
        }
    }
}

/// Year, month, day of a count of days since 1970-01-01 (proleptic Gregorian).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}
