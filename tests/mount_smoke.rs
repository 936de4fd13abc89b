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
        let frac = used[0] as f64 / (used[0] + used[1]) as f64;
        assert!((0.60..=0.73).contains(&frac), "{layout}: {used:?}");
    }
}
