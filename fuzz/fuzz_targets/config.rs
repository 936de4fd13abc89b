//! The config parser: `MountConfig::parse` on any text. It must never panic, and what it
//! accepts must survive `to_toml` unchanged (the `.tierfs/config` dump is parsed again by
//! `tierfs ds-config` and by people who copy it).
//!
//! `${NAME}` is looked up in a fixed table, not in the environment of the machine that
//! fuzzes, so a crash input means the same thing everywhere: a name starting with `UNSET`
//! is not set, `EMPTY` is empty, any other name expands to `v-NAME`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use tierfs::config::MountConfig;

fn vars(name: &str) -> Option<String> {
    if name.starts_with("UNSET") {
        None
    } else if name == "EMPTY" {
        Some(String::new())
    } else {
        Some(format!("v-{name}"))
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let source = Path::new("/fuzz/config.toml");
    let Ok(a) = MountConfig::parse_with_vars(text, source, &vars) else {
        return;
    };
    let printed = a.to_toml();
    let b = MountConfig::parse_with_vars(&printed, source, &vars).unwrap_or_else(|e| {
        panic!("to_toml output does not parse:\n{e}\n--- input\n{text}\n--- printed\n{printed}")
    });
    assert_eq!(
        printed,
        b.to_toml(),
        "to_toml is not stable\n--- input\n{text}"
    );
});
