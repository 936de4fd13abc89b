//! The shortest real-mount check, on the defaults (automatic staging memory included):
//! write, read back, see the split in the stats.
mod common;
use common::*;

#[test]
fn direct_write_read_back_and_shares() {
    require!(fuse());
    for layout in ["whole-file", "stripe"] {
        let mut s = Setup::two(layout);
        s.auto_staging = true;
        let m = s.mount();
        for i in 0..12 {
            let data = pattern(8 << 20, i);
            std::fs::write(m.path(&format!("f{i}")), &data).unwrap();
            assert_eq!(std::fs::read(m.path(&format!("f{i}"))).unwrap(), data);
        }
        let used = settled_used(&m);
        let total = (used[0] + used[1]) as f64;
        let frac = used[0] as f64 / total;
        // Eq. 1 (the fast tier's share is 0.67 with the tiers' stated 2:1 bandwidths),
        // less what staging memory holds of the slower tier's whole files, down to half
        // the share (placement::shares_with_held; root with kernel passthrough only).
        let stats = m.stats_json();
        let held = stats["held_bytes"].as_u64().unwrap();
        let want = 0.67 * (1.0 - held as f64 / total).max(0.5);
        assert_eq!(
            held > 0,
            layout == "whole-file" && stats["passthrough"] == true
        );
        assert!(
            (frac - want).abs() <= 0.09,
            "{layout}: {used:?}, {frac:.3} against {want:.3} (held {held})"
        );
    }
}
