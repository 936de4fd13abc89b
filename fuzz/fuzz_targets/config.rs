//! The config parser: `MountConfig::parse` on any text. It must never panic, and what it
//! accepts must survive `to_toml` unchanged (the `.tierfs/config` dump is parsed again by
//! `tierfs ds-config` and by people who copy it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use tierfs::config::MountConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let source = Path::new("/fuzz/config.toml");
    let Ok(a) = MountConfig::parse(text, source) else {
        return;
    };
    let printed = a.to_toml();
    let b = MountConfig::parse(&printed, source).unwrap_or_else(|e| {
        panic!("to_toml output does not parse:\n{e}\n--- input\n{text}\n--- printed\n{printed}")
    });
    assert_eq!(
        printed,
        b.to_toml(),
        "to_toml is not stable\n--- input\n{text}"
    );
});
