//! The effective configuration written back as TOML, every default filled in and every
//! unset key said as a comment: what `.tierfs/config` shows, and a file that parses back to
//! the same plan.

use std::path::Path;

use super::MountConfig;
use crate::units;

/// Quotes `s` as a TOML string.
pub(super) fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

impl MountConfig {
    /// The effective configuration as TOML (every default filled in), for `.tierfs/config`.
    pub fn to_toml(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let path_str = |p: &Path| toml_str(&p.to_string_lossy());
        // Writing into a String cannot fail; the results are ignored for that reason.
        let _ = writeln!(
            s,
            "# Effective tierfs configuration, every default filled in."
        );
        let _ = writeln!(s, "# Source: {:?}", self.source);
        for t in &self.tiers {
            let _ = writeln!(s, "\n[[tier]]");
            let _ = writeln!(s, "name = {}", toml_str(&t.name));
            let _ = writeln!(s, "path = {}", path_str(&t.path));
            let _ = writeln!(s, "create = {}", t.create);
            for (key, v) in [
                ("write_bandwidth", t.write_bandwidth),
                ("read_bandwidth", t.read_bandwidth),
            ] {
                match v {
                    Some(bps) => {
                        let _ =
                            writeln!(s, "{key} = {}", toml_str(&units::fmt_bandwidth_exact(bps)));
                    }
                    None => {
                        let _ = writeln!(s, "# {key}: not set, measured at mount");
                    }
                }
            }
            match t.capacity {
                Some(n) => {
                    let _ = writeln!(s, "capacity = {}", toml_str(&units::fmt_size_exact(n)));
                }
                None => {
                    let _ = writeln!(s, "# capacity: not set, the device's free space");
                }
            }
            match t.max_in_flight {
                Some(n) => {
                    let _ = writeln!(s, "max_in_flight = {n}");
                }
                None => {
                    let _ = writeln!(s, "# max_in_flight: not set, threads / number of tiers");
                }
            }
            if let Some(sh) = &t.shared {
                let _ = writeln!(s, "shared_ledger = {}", path_str(&sh.ledger));
                let _ = writeln!(s, "shared_job = {}", toml_str(&sh.job));
                let _ = writeln!(s, "shared_node = {}", toml_str(&sh.node));
            }
        }
        let _ = writeln!(s, "\n[placement]");
        let _ = writeln!(s, "layout = {}", toml_str(self.placement.layout.as_str()));
        let _ = writeln!(
            s,
            "stripe_unit = {}",
            toml_str(&units::fmt_size_exact(self.placement.stripe_unit))
        );
        let _ = writeln!(s, "adapt = {}", self.placement.adapt);
        let _ = writeln!(s, "min_share = {}", self.placement.min_share);
        let _ = writeln!(s, "\n[mount]");
        let _ = writeln!(s, "stats_dir = {}", toml_str(&self.mount.stats_dir));
        let _ = writeln!(s, "allow_other = {}", self.mount.allow_other);
        match &self.mount.log_file {
            Some(p) => {
                let _ = writeln!(s, "log_file = {}", path_str(p));
            }
            None => {
                let _ = writeln!(
                    s,
                    "# log_file: not set, stderr (or <first tier>/.tierfs-meta/daemon.log in \
                     the background)"
                );
            }
        }
        let _ = writeln!(s, "threads = {}", self.mount.threads);
        let _ = writeln!(s, "passthrough = \"{}\"", self.mount.passthrough.as_str());
        let _ = writeln!(s, "direct = \"{}\"", self.mount.direct.as_str());
        let _ = writeln!(s, "exclusive_tiers = {}", self.mount.exclusive_tiers);
        let _ = writeln!(s, "engine = \"{}\"", self.mount.engine.as_str());
        let _ = writeln!(s, "transport = \"{}\"", self.mount.transport.as_str());
        let _ = writeln!(s, "degraded = {}", self.mount.degraded);
        let _ = writeln!(s, "scratch = {}", self.mount.scratch);
        let c = &self.cache;
        let _ = writeln!(s, "\n[cache]");
        let _ = writeln!(s, "size = {}", c.size.to_toml_value());
        let _ = writeln!(s, "policy = \"{}\"", c.policy.as_str());
        let _ = writeln!(s, "prefetch = {}", c.prefetch);
        let _ = writeln!(s, "writeback_delay = {}", c.writeback_delay);
        match c.max_file {
            Some(n) => {
                let _ = writeln!(s, "max_file = {}", toml_str(&units::fmt_size_exact(n)));
            }
            None => {
                let _ = writeln!(s, "# max_file: not set, a quarter of size");
            }
        }
        let _ = writeln!(s, "\n[metrics]");
        match &self.metrics.textfile {
            Some(p) => {
                let _ = writeln!(s, "textfile = {}", path_str(p));
            }
            None => {
                let _ = writeln!(s, "# textfile: not set, no metrics file written");
            }
        }
        let _ = writeln!(
            s,
            "textfile_interval = {:?}",
            self.metrics.textfile_interval
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{parse, TWO};

    #[test]
    fn round_trips_through_to_toml() {
        let text = format!(
            "{TWO}\n[placement]\nlayout = \"stripe\"\nstripe_unit = \"256KiB\"\n\
             [mount]\nlog_file = \"/tmp/x.log\"\nthreads = 3\n"
        );
        let a = parse(&text).unwrap();
        let printed = a.to_toml();
        let b = parse(&printed).unwrap();
        assert_eq!(printed, b.to_toml());
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&b).unwrap()
        );
        assert!(printed.contains("write_bandwidth = \"2GB/s\""), "{printed}");
        assert!(printed.contains("capacity = \"800GiB\""), "{printed}");
        assert!(printed.contains("stripe_unit = \"256KiB\""), "{printed}");
        assert!(printed.contains("stats_dir = \".tierfs\""), "{printed}");
    }
}
