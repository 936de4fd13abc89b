//! Human units for sizes ("1MiB", "800GiB") and bandwidths ("2GB/s").
//!
//! Owned here so the config, the probe table and the stats files all print and parse the
//! same way. Decimal prefixes (k, M, G, T) are powers of 1000 and binary prefixes (Ki, Mi,
//! Gi, Ti) powers of 1024, as `fio` and `dd` users expect; "MB/s" is 10^6 bytes per second.

/// Parses a size such as `4096`, `64k`, `1MiB`, `1.5GB`, `800GiB` into bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let _ = s;
    Err("unimplemented".into())
}

/// Parses a bandwidth such as `2GB/s`, `500MB/s`, `1.5GiB/s` into bytes per second.
pub fn parse_bandwidth(s: &str) -> Result<f64, String> {
    let _ = s;
    Err("unimplemented".into())
}

/// Formats bytes with a binary prefix, e.g. `8.0 MiB`.
pub fn fmt_bytes(n: u64) -> String {
    format!("{n} B")
}

/// Formats bytes per second as decimal MB/s, e.g. `1200 MB/s`.
pub fn fmt_rate(bps: f64) -> String {
    format!("{:.0} MB/s", bps / 1e6)
}
