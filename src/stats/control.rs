//! What an operator set for a tier through `tierfs ctl` (pause, drain, weight), as the
//! tables show it: a word for `tierfs stat --watch`'s STATE column, and a note under the
//! table of `tierfs stat` and `.tierfs/tiers` with a drain's progress.
//!
//! Only a tier that differs from how every mount starts (active, weight 1) gets either,
//! so the tables of a mount nobody steered read as before. The operator's pause is told
//! apart from `adapt`'s (a tier measured too slow, [`super::TierStats::paused`]): only the
//! first is lifted by `tierfs ctl MOUNT resume`.

use super::{DrainStats, TierStats};
use crate::units::fmt_bytes;
use serde::{Deserialize, Serialize};

/// One tier's operator state, kept by `tierfs stat --watch` and `tierfs record` samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierControl {
    /// "active", "paused", "draining" or "drained" ([`crate::tier::admin::AdminState`]).
    pub state: String,
    /// Its weight in Eq. 1 (1 at mount).
    pub weight: f64,
    /// Files and bytes the tier holds now: for a draining tier, what is left to move.
    pub files: u64,
    pub used: u64,
    /// A drain's progress since the last `drain` (None before any).
    #[serde(default)]
    pub drain: Option<DrainStats>,
}

impl TierControl {
    /// The operator state of `t`; None for a tier as it was at mount (active, weight 1).
    pub fn of(t: &TierStats) -> Option<TierControl> {
        (t.control != "active" || t.weight != 1.0).then(|| TierControl {
            state: t.control.clone(),
            weight: t.weight,
            files: t.files,
            used: t.used,
            drain: t.drain.clone(),
        })
    }

    /// The STATE column's word: the state ("active" only beside a weight), then the weight
    /// when it is not 1, e.g. `paused`, `draining w=2`, `active w=0.5`.
    pub fn word(&self) -> String {
        if self.weight == 1.0 {
            self.state.clone()
        } else {
            format!("{} w={}", self.state, self.weight)
        }
    }

    /// The note under the table: what the state means for new data and, for a drain, what
    /// is left and what moved; then the weight when it is not 1.
    pub fn note(&self, tier: &str) -> String {
        let held = files_and_bytes(self.files, self.used);
        let mut parts = Vec::new();
        match self.state.as_str() {
            "paused" => parts.push(format!(
                "PAUSED by the operator: takes no new data; what it holds, {held}, stays \
                 where it is (`tierfs ctl MOUNT resume {tier}` lifts it)"
            )),
            "draining" => parts.push(format!("DRAINING: {held} left to move{}", self.progress())),
            "drained" => parts.push(format!(
                "DRAINED{}; takes no new data until `tierfs ctl MOUNT resume {tier}`",
                self.progress()
            )),
            _ => {}
        }
        if self.weight != 1.0 {
            parts.push(if self.weight == 0.0 {
                "weight 0: no share of new data".to_string()
            } else {
                format!(
                    "weight {}: its bandwidth counts {} times in Eq. 1",
                    self.weight, self.weight
                )
            });
        }
        parts.join("; ")
    }

    /// `, N files (B) moved off[, F failed moves (retried), last: E]`.
    fn progress(&self) -> String {
        let Some(d) = &self.drain else {
            return String::new();
        };
        let mut s = format!(
            ", {} moved off",
            files_and_bytes(d.moved_files, d.moved_bytes)
        );
        if d.failures > 0 {
            s.push_str(&format!(
                ", {} failed move{} (retried)",
                d.failures,
                if d.failures == 1 { "" } else { "s" }
            ));
            if let Some(e) = &d.last_error {
                s.push_str(&format!(", last: {e}"));
            }
        }
        s
    }
}

fn files_and_bytes(files: u64, bytes: u64) -> String {
    format!(
        "{files} file{} ({})",
        if files == 1 { "" } else { "s" },
        fmt_bytes(bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control(state: &str, weight: f64, drain: Option<DrainStats>) -> TierControl {
        TierControl {
            state: state.into(),
            weight,
            files: 3,
            used: 3 << 20,
            drain,
        }
    }

    fn moved(files: u64, failures: u64) -> Option<DrainStats> {
        Some(DrainStats {
            moved_files: files,
            moved_bytes: files << 20,
            failures,
            last_error: (failures > 0).then(|| "a: busy".to_string()),
        })
    }

    #[test]
    fn a_tier_as_at_mount_has_no_control() {
        let mut t = crate::stats::metrics::tests::tier("nvme", 1e9);
        assert_eq!(TierControl::of(&t), None);
        t.weight = 2.0;
        let c = TierControl::of(&t).expect("a weight shows");
        assert_eq!(c.word(), "active w=2");
        assert_eq!(
            c.note("nvme"),
            "weight 2: its bandwidth counts 2 times in Eq. 1"
        );
        t.weight = 1.0;
        t.control = "paused".into();
        assert_eq!(TierControl::of(&t).unwrap().word(), "paused");
    }

    #[test]
    fn the_table_says_it_on_a_line_of_its_own() {
        use crate::stats::metrics::tests::{snap, tier};
        let plain = crate::stats::tiers_table(&snap(vec![tier("fast", 1e9), tier("slow", 1e8)]));
        assert!(!plain.contains("  slow: "), "{plain}");
        let mut slow = tier("slow", 1e8);
        slow.control = "paused".into();
        slow.files = 1;
        slow.used = 1 << 20;
        slow.device_read = Some(0);
        slow.device_written = Some(0);
        let text = crate::stats::tiers_table(&snap(vec![tier("fast", 1e9), slow]));
        let notes: Vec<&str> = text.lines().filter(|l| l.starts_with("  ")).collect();
        assert_eq!(
            notes,
            [
                "  slow: PAUSED by the operator: takes no new data; what it holds, 1 file \
                 (1.0 MiB), stays where it is (`tierfs ctl MOUNT resume slow` lifts it)",
                "  slow: device: 0 B read, 0 B written since mount",
            ],
            "{text}"
        );
    }

    #[test]
    fn each_state_says_what_it_means_and_how_to_lift_it() {
        let p = control("paused", 1.0, None);
        assert_eq!(p.word(), "paused");
        assert_eq!(
            p.note("slow"),
            "PAUSED by the operator: takes no new data; what it holds, 3 files (3.0 MiB), \
             stays where it is (`tierfs ctl MOUNT resume slow` lifts it)"
        );
        let d = control("draining", 0.5, moved(1, 0));
        assert_eq!(d.word(), "draining w=0.5");
        assert_eq!(
            d.note("slow"),
            "DRAINING: 3 files (3.0 MiB) left to move, 1 file (1.0 MiB) moved off; weight \
             0.5: its bandwidth counts 0.5 times in Eq. 1"
        );
        let f = control("draining", 1.0, moved(2, 3));
        assert_eq!(
            f.note("slow"),
            "DRAINING: 3 files (3.0 MiB) left to move, 2 files (2.0 MiB) moved off, 3 failed \
             moves (retried), last: a: busy"
        );
        let done = TierControl {
            files: 0,
            used: 0,
            ..control("drained", 0.0, moved(4, 0))
        };
        assert_eq!(done.word(), "drained w=0");
        assert_eq!(
            done.note("slow"),
            "DRAINED, 4 files (4.0 MiB) moved off; takes no new data until `tierfs ctl \
             MOUNT resume slow`; weight 0: no share of new data"
        );
    }
}
