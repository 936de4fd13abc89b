//! The size and bandwidth parsers (`units::parse_size`, `units::parse_bandwidth`) on any
//! text, and the exact printers on what they accept: never a panic, every error quotes the
//! forms accepted, and `fmt_*_exact` reads back as the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierfs::units;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match units::parse_size(s) {
        Ok(n) => {
            let exact = units::fmt_size_exact(n);
            assert_eq!(
                units::parse_size(&exact),
                Ok(n),
                "{s:?} -> {n} -> {exact:?}"
            );
            let _ = units::fmt_bytes(n);
        }
        Err(e) => assert!(e.contains("expected"), "{s:?}: {e}"),
    }
    match units::parse_bandwidth(s) {
        Ok(bps) => {
            assert!(bps.is_finite() && bps > 0.0, "{s:?} -> {bps}");
            let exact = units::fmt_bandwidth_exact(bps);
            assert_eq!(
                units::parse_bandwidth(&exact),
                Ok(bps),
                "{s:?} -> {bps} -> {exact:?}"
            );
            let _ = units::fmt_rate(bps);
        }
        Err(e) => assert!(e.contains("expected"), "{s:?}: {e}"),
    }
});
