//! `[metrics]`: metrics the daemon writes out itself. `textfile` names a file for
//! node_exporter's textfile collector, which the daemon rewrites every `textfile_interval`
//! seconds with the mount's `.tierfs/metrics` (`crate::stats::prom`): no timer job, and it works
//! where the collector cannot read a user's mount.

use std::path::PathBuf;

use super::problems::Problems;
use super::raw::RawMetrics;
use super::vars::expand_path;

/// The validated `[metrics]` section (all optional in the file).
#[derive(Debug, Clone, serde::Serialize)]
pub struct MetricsSection {
    /// Where to write the metrics in the Prometheus text format; `None`: nowhere.
    pub textfile: Option<PathBuf>,
    /// Seconds between two writes of `textfile`. Default 5.
    pub textfile_interval: f64,
}

/// `metrics.textfile_interval` when the file does not say, in seconds.
pub const DEFAULT_TEXTFILE_INTERVAL: f64 = 5.0;

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection {
            textfile: None,
            textfile_interval: DEFAULT_TEXTFILE_INTERVAL,
        }
    }
}

/// Validates `[metrics]`; a key with a problem gets its default.
pub(super) fn parse_metrics(
    m: &RawMetrics,
    vars: &dyn Fn(&str) -> Option<String>,
    p: &mut Problems,
) -> MetricsSection {
    let textfile = m.textfile.as_deref().and_then(|t| match expand_path(t, vars) {
        Ok(path) if path.file_name().is_some() => Some(path),
        Ok(_) => {
            p.add(
                "metrics.textfile",
                format_args!("{t:?} names a folder; name the file, e.g. \"/var/lib/node_exporter/tierfs.prom\""),
            );
            None
        }
        Err(e) => {
            p.add("metrics.textfile", format_args!("{e}; or remove the key"));
            None
        }
    });
    let textfile_interval = match m.textfile_interval {
        None => DEFAULT_TEXTFILE_INTERVAL,
        Some(s) if s.is_finite() && (0.5..=3600.0).contains(&s) => s,
        Some(s) => {
            p.add(
                "metrics.textfile_interval",
                format_args!(
                    "{s} is out of range; use 0.5 to 3600 seconds ({DEFAULT_TEXTFILE_INTERVAL} is \
                     the default)"
                ),
            );
            DEFAULT_TEXTFILE_INTERVAL
        }
    };
    MetricsSection {
        textfile,
        textfile_interval,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{parse, TWO};

    #[test]
    fn textfile_and_interval() {
        let c = parse(TWO).unwrap();
        assert_eq!(c.metrics.textfile, None);
        assert_eq!(c.metrics.textfile_interval, 5.0);
        let c = parse(&format!(
            "{TWO}[metrics]\ntextfile = \"/var/lib/ne/t.prom\"\ntextfile_interval = 0.5\n"
        ))
        .unwrap();
        assert_eq!(
            c.metrics.textfile.as_deref(),
            Some(std::path::Path::new("/var/lib/ne/t.prom"))
        );
        assert_eq!(c.metrics.textfile_interval, 0.5);
        assert_eq!(
            parse(&c.to_toml()).unwrap().metrics.textfile,
            c.metrics.textfile
        );
        for (bad, needle) in [
            (
                "textfile = \"t.prom\"",
                "metrics.textfile: \"t.prom\" is not absolute",
            ),
            ("textfile = \"/\"", "metrics.textfile: \"/\" names a folder"),
            (
                "textfile_interval = 0.1",
                "metrics.textfile_interval: 0.1 is out of range; use 0.5 to 3600",
            ),
            ("textfile_interval = 1e9", "out of range"),
        ] {
            let e = parse(&format!("{TWO}[metrics]\n{bad}\n")).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }
}
