//! `tierfs plot`: a PNG of a recording — per-tier read and write throughput (MB/s) and the
//! share of the bytes each tier moved, against its Eq. 1 share, over time.
//!
//! Drawn with plotters' bitmap backend. Plotters' text needs system fonts (or a font file
//! to register), which a fresh machine may not have, so every label here is drawn from the
//! 8x8 bitmap font of the `font8x8` crate, pixel by pixel: no font lookup at run time.
//!
//! Throughput per tier comes from the daemon's byte counters, except for tiers that had
//! files open in kernel passthrough and sit on a block device: their bytes bypass the
//! daemon, so the device counters are plotted instead (marked "(device)" in the legend).

use crate::client::monitor::{counter_delta, interval, Sample};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Image size, pixels.
pub const WIDTH: u32 = 1100;
pub const HEIGHT: u32 = 900;

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];
const GRID: RGBColor = RGBColor(225, 225, 225);
const INK: RGBColor = RGBColor(30, 30, 30);

/// One tier's series, one point per interval (at the interval's end).
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub name: String,
    /// True when the device counters were used (passthrough).
    pub device: bool,
    pub t: Vec<f64>,
    pub read_mbps: Vec<f64>,
    pub write_mbps: Vec<f64>,
    /// Share of all bytes moved in the interval, 0..1; None when nothing moved.
    pub moved_share: Vec<Option<f64>>,
    /// Eq. 1 share at the interval's end, 0..1.
    pub eq1_share: Vec<f64>,
}

/// Turns samples into per-tier series (tiers in order of first appearance).
pub fn series(samples: &[Sample]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for s in samples {
        for t in &s.tiers {
            if !out.iter().any(|x| x.name == t.name) {
                out.push(Series {
                    name: t.name.clone(),
                    ..Series::default()
                });
            }
        }
    }
    for x in &mut out {
        x.device = samples.iter().any(|s| {
            s.tiers
                .iter()
                .any(|t| t.name == x.name && t.passthrough_opens > 0 && t.device_read.is_some())
        });
    }
    for w in samples.windows(2) {
        let (p, c) = (&w[0], &w[1]);
        let wall = (c.elapsed_s - p.elapsed_s).max(1e-6);
        let (dt, restarted) = interval(p.pid, p.uptime_s, c.pid, c.uptime_s, wall);
        let mut moved = Vec::new();
        for x in out.iter() {
            let cur = c.tiers.iter().find(|t| t.name == x.name);
            let prev = p.tiers.iter().find(|t| t.name == x.name);
            let r = restarted || prev.is_none();
            let bytes = |f: &dyn Fn(&crate::client::monitor::TierSample) -> u64| match cur {
                Some(ct) => counter_delta(prev.map(f).unwrap_or(0), f(ct), r),
                None => 0,
            };
            let (rd, wr) = if x.device {
                (
                    bytes(&|t| t.device_read.unwrap_or(0)),
                    bytes(&|t| t.device_written.unwrap_or(0)),
                )
            } else {
                (bytes(&|t| t.bytes_read), bytes(&|t| t.bytes_written))
            };
            moved.push((rd, wr, cur.map(|t| t.share).unwrap_or(0.0)));
        }
        let total: u64 = moved.iter().map(|m| m.0 + m.1).sum();
        for (x, (rd, wr, share)) in out.iter_mut().zip(moved) {
            x.t.push(c.elapsed_s);
            x.read_mbps.push(rd as f64 / dt / 1e6);
            x.write_mbps.push(wr as f64 / dt / 1e6);
            x.moved_share
                .push((total > 0).then(|| (rd + wr) as f64 / total as f64));
            x.eq1_share.push(share);
        }
    }
    out
}

/// A "nice" axis: (top, step) with top >= max, about `n` steps of 1, 2 or 5 x 10^k.
pub fn nice_axis(max: f64, n: usize) -> (f64, f64) {
    if max.is_nan() || max <= 0.0 || !max.is_finite() {
        return (1.0, 0.25);
    }
    let raw = max / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag);
    ((max / step - 1e-9).ceil().max(1.0) * step, step)
}

fn tick_label(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0}")
    } else if step >= 0.1 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Draws `text` with its top-left corner at (x, y), 8x8 glyphs scaled by `scale`.
fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    x: i32,
    y: i32,
    s: &str,
    color: &RGBColor,
    scale: i32,
) {
    let mut cx = x;
    for ch in s.chars() {
        let code = if ch.is_ascii() {
            ch as usize
        } else {
            b'?' as usize
        };
        let glyph = font8x8::legacy::BASIC_LEGACY[code];
        for (row, bits) in glyph.iter().enumerate() {
            for col in 0..8 {
                if bits & (1 << col) != 0 {
                    let (px, py) = (cx + col * scale, y + row as i32 * scale);
                    for dy in 0..scale {
                        for dx in 0..scale {
                            let _ = area.draw_pixel((px + dx, py + dy), color);
                        }
                    }
                }
            }
        }
        cx += 8 * scale;
    }
}

fn text_width(s: &str, scale: i32) -> i32 {
    s.chars().count() as i32 * 8 * scale
}

/// Splits a series into runs of defined points (a line breaks where a value is None).
fn runs(t: &[f64], v: &[Option<f64>]) -> Vec<Vec<(f64, f64)>> {
    let mut out = vec![Vec::new()];
    for (x, y) in t.iter().zip(v) {
        match y {
            Some(y) => out.last_mut().unwrap().push((*x, *y)),
            None if !out.last().unwrap().is_empty() => out.push(Vec::new()),
            None => {}
        }
    }
    out.retain(|r| !r.is_empty());
    out
}

struct Panel<'a> {
    title: &'a str,
    /// Per tier: thick lines (and optional thin ones), values in the panel's unit.
    thick: Vec<Vec<Vec<(f64, f64)>>>,
    thin: Vec<Vec<Vec<(f64, f64)>>>,
    /// Fixed y top (shares: 100), else from the data.
    y_top: Option<f64>,
}

type PlotError = String;

fn draw_panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    area: &DrawingArea<DB, Shift>,
    p: &Panel<'_>,
    t_max: f64,
) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| format!("drawing: {e}");
    let y_max = p
        .thick
        .iter()
        .chain(&p.thin)
        .flatten()
        .flatten()
        .map(|(_, y)| *y)
        .fold(0.0f64, f64::max);
    let (y_top, y_step) = match p.y_top {
        Some(top) => (top, top / 4.0),
        None => nice_axis(y_max * 1.05, 5),
    };
    let (mut x_top, x_step) = nice_axis(t_max, 10);
    // Samples a hair past a round number (4.009 s) get a 0..4 axis, not 0..4.5.
    if x_top - x_step > 0.0 && t_max - (x_top - x_step) <= 0.02 * x_top {
        x_top -= x_step;
    }
    let mut chart = ChartBuilder::on(area)
        .margin_top(26)
        .margin_bottom(24)
        .margin_left(70)
        .margin_right(24)
        .build_cartesian_2d(0f64..x_top, 0f64..y_top)
        .map_err(|e| err(&e))?;
    // Grid and tick labels.
    let mut y = 0.0;
    while y <= y_top * (1.0 + 1e-9) {
        chart
            .draw_series(LineSeries::new(vec![(0.0, y), (x_top, y)], GRID))
            .map_err(|e| err(&e))?;
        let (px, py) = chart.backend_coord(&(0.0, y));
        let l = tick_label(y, y_step);
        text(root, px - 6 - text_width(&l, 1), py - 4, &l, &INK, 1);
        y += y_step;
    }
    let mut x = 0.0;
    while x <= x_top * (1.0 + 1e-9) {
        chart
            .draw_series(LineSeries::new(vec![(x, 0.0), (x, y_top)], GRID))
            .map_err(|e| err(&e))?;
        let (px, py) = chart.backend_coord(&(x, 0.0));
        let l = tick_label(x, x_step);
        text(root, px - text_width(&l, 1) / 2, py + 6, &l, &INK, 1);
        x += x_step;
    }
    for (i, tier) in p.thin.iter().enumerate() {
        let c = PALETTE[i % PALETTE.len()];
        for run in tier {
            chart
                .draw_series(LineSeries::new(run.clone(), c.stroke_width(1)))
                .map_err(|e| err(&e))?;
        }
    }
    for (i, tier) in p.thick.iter().enumerate() {
        let c = PALETTE[i % PALETTE.len()];
        for run in tier {
            if run.len() == 1 {
                chart
                    .draw_series(std::iter::once(Circle::new(run[0], 3, c.filled())))
                    .map_err(|e| err(&e))?;
            } else {
                chart
                    .draw_series(LineSeries::new(run.clone(), c.stroke_width(3)))
                    .map_err(|e| err(&e))?;
            }
        }
    }
    // Frame and title.
    let (x0, y0) = chart.backend_coord(&(0.0, y_top));
    let (x1, y1) = chart.backend_coord(&(x_top, 0.0));
    root.draw(&Rectangle::new([(x0, y0), (x1, y1)], INK.stroke_width(1)))
        .map_err(|e| err(&e))?;
    text(root, x0, y0 - 14, p.title, &INK, 1);
    Ok(())
}

/// Draws the recording's samples into a PNG at `out`.
pub fn plot(samples: &[Sample], out: &Path, title: &str) -> Result<(), String> {
    if samples.len() < 2 {
        return Err(format!(
            "the recording has {} sample(s); a plot needs at least 2 (record for longer than one interval)",
            samples.len()
        ));
    }
    let ser = series(samples);
    let t_max = samples
        .iter()
        .map(|s| s.elapsed_s)
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let some = |v: &[f64]| v.iter().map(|x| Some(*x)).collect::<Vec<_>>();
    let pct = |v: &[Option<f64>]| v.iter().map(|x| x.map(|y| y * 100.0)).collect::<Vec<_>>();
    let read = Panel {
        title: "read MB/s",
        thick: ser
            .iter()
            .map(|s| runs(&s.t, &some(&s.read_mbps)))
            .collect(),
        thin: Vec::new(),
        y_top: None,
    };
    let write = Panel {
        title: "write MB/s",
        thick: ser
            .iter()
            .map(|s| runs(&s.t, &some(&s.write_mbps)))
            .collect(),
        thin: Vec::new(),
        y_top: None,
    };
    let share = Panel {
        title: "share of bytes moved, % (thick) and Eq. 1 share (thin)",
        thick: ser
            .iter()
            .map(|s| runs(&s.t, &pct(&s.moved_share)))
            .collect(),
        thin: ser
            .iter()
            .map(|s| runs(&s.t, &pct(&some(&s.eq1_share))))
            .collect(),
        y_top: Some(100.0),
    };

    let backend = BitMapBackend::new(out, (WIDTH, HEIGHT));
    let root = backend.into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", out.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    // Header: title, then the legend.
    text(&root, 16, 10, title, &INK, 2);
    let mut lx = 16;
    for (i, s) in ser.iter().enumerate() {
        let c = PALETTE[i % PALETTE.len()];
        root.draw(&Rectangle::new([(lx, 38), (lx + 22, 44)], c.filled()))
            .map_err(|e| err(&e))?;
        let label = if s.device {
            format!("{} (device)", s.name)
        } else {
            s.name.clone()
        };
        text(&root, lx + 28, 37, &label, &INK, 1);
        lx += 28 + text_width(&label, 1) + 24;
    }
    let note = "x: seconds since the recording started";
    text(
        &root,
        WIDTH as i32 - 16 - text_width(note, 1),
        37,
        note,
        &INK,
        1,
    );
    let body = root.clone().margin(56, 0, 0, 0);
    let panels = body.split_evenly((3, 1));
    for (area, p) in panels.iter().zip([&read, &write, &share]) {
        draw_panel(&root, area, p, t_max)?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::monitor::tests::{sample, tier};

    #[test]
    fn nice_axes() {
        assert_eq!(nice_axis(0.0, 5), (1.0, 0.25));
        assert_eq!(nice_axis(10.0, 5), (10.0, 2.0));
        assert_eq!(nice_axis(11.0, 5), (15.0, 5.0));
        assert_eq!(nice_axis(1234.0, 5), (1500.0, 500.0));
        let (top, step) = nice_axis(0.37, 4);
        assert!((top - 0.4).abs() < 1e-12 && (step - 0.1).abs() < 1e-12);
    }

    #[test]
    fn series_rates_and_shares() {
        let s = vec![
            sample(1, 1.0, vec![tier("a", 0, 0), tier("b", 0, 0)]),
            sample(
                1,
                2.0,
                vec![tier("a", 0, 3_000_000), tier("b", 1_000_000, 0)],
            ),
            sample(
                1,
                3.0,
                vec![tier("a", 0, 3_000_000), tier("b", 1_000_000, 0)],
            ),
        ];
        let x = series(&s);
        assert_eq!(x.len(), 2);
        assert_eq!(x[0].t, vec![2.0, 3.0]);
        assert_eq!(x[0].write_mbps, vec![3.0, 0.0]);
        assert_eq!(x[1].read_mbps, vec![1.0, 0.0]);
        assert_eq!(x[0].moved_share, vec![Some(0.75), None]);
        assert_eq!(x[1].eq1_share, vec![0.5, 0.5]);
        assert!(!x[0].device);
        assert_eq!(
            runs(
                &[1.0, 2.0, 3.0, 4.0],
                &[Some(1.0), None, Some(2.0), Some(3.0)]
            ),
            vec![vec![(1.0, 1.0)], vec![(3.0, 2.0), (4.0, 3.0)]]
        );
    }

    #[test]
    fn passthrough_tiers_use_device_counters() {
        let mut a = tier("a", 0, 0);
        a.device_read = Some(0);
        a.device_written = Some(0);
        let mut b = tier("a", 0, 0);
        b.device_read = Some(0);
        b.device_written = Some(8_000_000);
        b.passthrough_opens = 1;
        let x = series(&[sample(1, 1.0, vec![a]), sample(1, 3.0, vec![b])]);
        assert!(x[0].device);
        assert_eq!(x[0].write_mbps, vec![4.0]);
    }

    #[test]
    fn writes_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("p.png");
        let mut s = Vec::new();
        for i in 0..20u64 {
            s.push(sample(
                1,
                i as f64 * 0.5,
                vec![
                    tier("nvme", i * i * 1_000_000, i * 40_000_000),
                    tier("pfs", i * 500_000, i * 20_000_000),
                ],
            ));
        }
        plot(&s, &out, "tierfs plot test").unwrap();
        let bytes = std::fs::read(&out).unwrap();
        assert!(bytes.len() > 1000, "{} bytes", bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(plot(&s[..1], &out, "x").is_err());
    }
}
