//! Human units for sizes ("1MiB", "800GiB") and bandwidths ("2GB/s").
//!
//! Owned here so the config, the probe table and the stats files all print and parse the
//! same way. Decimal prefixes (k, M, G, T) are powers of 1000 and binary prefixes (Ki, Mi,
//! Gi, Ti) powers of 1024, as `fio` and `dd` users expect; "MB/s" is 10^6 bytes per second.
//!
//! Two kinds of printing live here: [`fmt_bytes`] and [`fmt_rate`] are for people (rounded),
//! while [`fmt_size_exact`] and [`fmt_bandwidth_exact`] give the shortest human form that
//! parses back to exactly the same value, which is what the effective-config dump needs.

/// What [`parse_size`] accepts, quoted in its errors.
pub const SIZE_FORMS: &str = "a whole number of bytes with an optional unit: \
     4096, 64k, 64KiB, 1MiB, 1.5GB, 800GiB, 2T \
     (k/M/G/T = powers of 1000, Ki/Mi/Gi/Ti = powers of 1024, trailing B optional)";

/// What [`parse_bandwidth`] accepts, quoted in its errors.
pub const BANDWIDTH_FORMS: &str = "a positive rate ending in /s: \
     2GB/s, 500MB/s, 1.5GiB/s, 800 MB/s \
     (k/M/G/T = powers of 1000, Ki/Mi/Gi/Ti = powers of 1024, in bytes)";

/// Unit suffixes (without the optional trailing "B"), largest first, decimal before binary
/// at each magnitude so exact printing prefers "2GB/s" over "1.86GiB/s".
const UNITS: [(&str, u64); 8] = [
    ("T", 1_000_000_000_000),
    ("Ti", 1 << 40),
    ("G", 1_000_000_000),
    ("Gi", 1 << 30),
    ("M", 1_000_000),
    ("Mi", 1 << 20),
    ("k", 1_000),
    ("Ki", 1 << 10),
];

/// A number and its unit, split but not yet interpreted.
struct Quantity<'a> {
    /// Digits before the decimal point (may be empty when written ".5").
    int: &'a str,
    /// Digits after the decimal point (empty when there is none).
    frac: &'a str,
    /// The multiplier the unit stands for.
    mult: u64,
}

/// Splits `s` (already trimmed, non-empty) into number and unit. `Err` carries only the
/// reason; callers add the value and the accepted forms.
fn split_quantity(s: &str) -> Result<Quantity<'_>, &'static str> {
    if s.starts_with('-') {
        return Err("negative values are not allowed");
    }
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = (&s[..num_end], s[num_end..].trim());
    if num.is_empty() {
        return Err("it does not start with a number");
    }
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => {
            if f.contains('.') {
                return Err("the number has more than one '.'");
            }
            (i, f)
        }
        None => (num, ""),
    };
    if int.is_empty() && frac.is_empty() {
        return Err("it does not start with a number");
    }
    let mult =
        unit_multiplier(unit).ok_or(if unit.starts_with(['b', 'B']) || unit.ends_with('b') {
            "lower-case 'b' (bits) and unknown units are not accepted; sizes are in bytes (B)"
        } else {
            "unknown unit"
        })?;
    Ok(Quantity { int, frac, mult })
}

/// The multiplier of a unit such as "", "B", "k", "KB", "MiB"; `None` when unknown.
/// The prefix letter is case-insensitive ("64k" = "64K"), "i" and "B" are not: "Mb" is
/// megabits, which tierfs does not guess at.
fn unit_multiplier(unit: &str) -> Option<u64> {
    let unit = unit.strip_suffix('B').unwrap_or(unit);
    if unit.is_empty() {
        return Some(1);
    }
    let mut chars = unit.chars();
    let prefix = chars.next()?.to_ascii_uppercase();
    let binary = match chars.as_str() {
        "" => false,
        "i" => true,
        _ => return None,
    };
    let exp = match prefix {
        'K' => 1,
        'M' => 2,
        'G' => 3,
        'T' => 4,
        _ => return None,
    };
    let base: u64 = if binary { 1024 } else { 1000 };
    Some(base.pow(exp))
}

/// Parses a size such as `4096`, `64k`, `1MiB`, `1.5GB`, `800GiB` into bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = |why: &str| format!("bad size {s:?}: {why}; expected {SIZE_FORMS}");
    if t.is_empty() {
        return Err(bad("it is empty"));
    }
    let q = split_quantity(t).map_err(bad)?;
    let overflow = || bad("it is too large (the limit is 16 EiB)");
    let digits = |d: &str| -> Result<u128, String> {
        if d.is_empty() {
            Ok(0)
        } else if d.len() > 30 {
            Err(overflow())
        } else {
            d.parse::<u128>().map_err(|_| overflow())
        }
    };
    let mult = u128::from(q.mult);
    let int = digits(q.int)?.checked_mul(mult).ok_or_else(overflow)?;
    // The fraction is kept exact: "1.5KiB" is 1536 bytes, "0.1KiB" (102.4) is refused
    // rather than silently rounded.
    let frac_digits = q.frac.trim_end_matches('0');
    let frac = if frac_digits.is_empty() {
        0
    } else {
        if frac_digits.len() > 20 {
            return Err(bad("it is not a whole number of bytes"));
        }
        let scale = 10u128.pow(frac_digits.len() as u32);
        let scaled = digits(frac_digits)? * mult;
        if scaled % scale != 0 {
            return Err(bad("it is not a whole number of bytes"));
        }
        scaled / scale
    };
    let total = int.checked_add(frac).ok_or_else(overflow)?;
    u64::try_from(total).map_err(|_| overflow())
}

/// Parses a bandwidth such as `2GB/s`, `500MB/s`, `1.5GiB/s` into bytes per second.
pub fn parse_bandwidth(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let bad = |why: &str| format!("bad bandwidth {s:?}: {why}; expected {BANDWIDTH_FORMS}");
    if t.is_empty() {
        return Err(bad("it is empty"));
    }
    let Some(rate) = t.strip_suffix("/s") else {
        return Err(bad("it does not end in \"/s\""));
    };
    let rate = rate.trim();
    if rate.is_empty() {
        return Err(bad("there is no number before \"/s\""));
    }
    let q = split_quantity(rate).map_err(bad)?;
    let int = if q.int.is_empty() { "0" } else { q.int };
    let num = if q.frac.is_empty() {
        int.to_string()
    } else {
        format!("{int}.{}", q.frac)
    };
    let value: f64 = num.parse().map_err(|_| bad("the number does not parse"))?;
    let bps = value * q.mult as f64;
    if !bps.is_finite() {
        return Err(bad("it is too large"));
    }
    if bps <= 0.0 {
        return Err(bad("it must be greater than zero"));
    }
    Ok(bps)
}

/// Formats bytes with a binary prefix, e.g. `8.0 MiB`.
pub fn fmt_bytes(n: u64) -> String {
    const NAMES: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    // Step up while the rounded figure would read 1024.0 or more ("1024.0 KiB" -> "1.0 MiB").
    while value >= 1023.95 && unit + 1 < NAMES.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", NAMES[unit])
}

/// Formats bytes per second as decimal MB/s, e.g. `1200 MB/s`.
pub fn fmt_rate(bps: f64) -> String {
    format!("{:.0} MB/s", bps / 1e6)
}

/// Formats `v` with at most two decimals, trailing zeros dropped ("1.50" -> "1.5").
fn short_decimal(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The shortest human form of a size that [`parse_size`] reads back as exactly `n`,
/// e.g. `1MiB`, `800GiB`, `1.5GB`, `4100`.
pub fn fmt_size_exact(n: u64) -> String {
    for (suffix, mult) in UNITS {
        if n < mult {
            continue;
        }
        let candidate = format!("{}{suffix}B", short_decimal(n as f64 / mult as f64));
        if parse_size(&candidate) == Ok(n) {
            return candidate;
        }
    }
    n.to_string()
}

/// The shortest human form of a bandwidth that [`parse_bandwidth`] reads back as exactly
/// `bps`, e.g. `2GB/s`, `1.5GiB/s`, `1234.5B/s`.
pub fn fmt_bandwidth_exact(bps: f64) -> String {
    for (suffix, mult) in UNITS {
        let v = bps / mult as f64;
        if v < 1.0 {
            continue;
        }
        let candidate = format!("{}{suffix}B/s", short_decimal(v));
        if parse_bandwidth(&candidate) == Ok(bps) {
            return candidate;
        }
    }
    // f64's Display is the shortest string that parses back to the same value and never
    // uses an exponent, so this always round-trips.
    format!("{bps}B/s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        let cases: &[(&str, u64)] = &[
            ("4096", 4096),
            ("0", 0),
            ("64k", 64_000),
            ("64K", 64_000),
            ("64kB", 64_000),
            ("64KiB", 65_536),
            ("64Ki", 65_536),
            ("1MiB", 1 << 20),
            ("1M", 1_000_000),
            ("1.5GB", 1_500_000_000),
            ("1.5KiB", 1536),
            ("800GiB", 800 << 30),
            ("2T", 2_000_000_000_000),
            ("2TiB", 2 << 40),
            (" 8 MiB ", 8 << 20),
            ("10B", 10),
            ("1.0", 1),
            (".5k", 500),
            ("18446744073709551615", u64::MAX),
        ];
        for &(s, want) in cases {
            assert_eq!(parse_size(s), Ok(want), "{s:?}");
        }
    }

    #[test]
    fn sizes_rejected_with_the_accepted_forms() {
        for s in [
            "",
            "  ",
            "-1",
            "-1MiB",
            "abc",
            "1 parsec",
            "1Mb",
            "1mb",
            "1.2.3",
            ".",
            "k",
            "0.1KiB",
            "1.5",
            "18446744073709551616",
            "20000000T",
            "99999999999999999999999999999999999",
            "1MiB/s",
            "1 Mi B x",
        ] {
            let err = parse_size(s).expect_err(s);
            assert!(
                err.contains("64KiB") && err.contains(&format!("{s:?}")),
                "{s:?}: {err}"
            );
        }
        assert!(parse_size("-1").unwrap_err().contains("negative"));
        assert!(parse_size("1Mb").unwrap_err().contains("bits"));
        assert!(parse_size("99T99").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn bandwidths_parse() {
        let cases: &[(&str, f64)] = &[
            ("2GB/s", 2e9),
            ("500MB/s", 500e6),
            ("1.5GiB/s", 1.5 * 1073741824.0),
            ("800 MB/s", 800e6),
            (" 800 MB/s ", 800e6),
            ("3G/s", 3e9),
            ("100/s", 100.0),
            ("1234.5B/s", 1234.5),
            ("64KiB/s", 65536.0),
        ];
        for &(s, want) in cases {
            assert_eq!(parse_bandwidth(s), Ok(want), "{s:?}");
        }
    }

    #[test]
    fn bandwidths_rejected_with_the_accepted_forms() {
        for s in [
            "",
            "2GB",
            "2000000000",
            "0GB/s",
            "0/s",
            "-1GB/s",
            "/s",
            "fast/s",
            "2Gb/s",
            "2 GB / s",
        ] {
            let err = parse_bandwidth(s).expect_err(s);
            assert!(
                err.contains("500MB/s") && err.contains(&format!("{s:?}")),
                "{s:?}: {err}"
            );
        }
        assert!(parse_bandwidth("2GB").unwrap_err().contains("/s"));
        assert!(parse_bandwidth("0GB/s")
            .unwrap_err()
            .contains("greater than zero"));
    }

    #[test]
    fn bytes_format() {
        assert_eq!(fmt_bytes(0), "0 B");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(1023), "1023 B");
        assert_eq!(fmt_bytes(1024), "1.0 KiB");
        assert_eq!(fmt_bytes(1536), "1.5 KiB");
        assert_eq!(fmt_bytes(8 << 20), "8.0 MiB");
        assert_eq!(fmt_bytes((1 << 20) - 1), "1.0 MiB");
        assert_eq!(fmt_bytes(800 << 30), "800.0 GiB");
        assert_eq!(fmt_bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn rates_format() {
        assert_eq!(fmt_rate(1.2e9), "1200 MB/s");
        assert_eq!(fmt_rate(2.5e6), "2 MB/s");
    }

    #[test]
    fn exact_sizes_round_trip() {
        assert_eq!(fmt_size_exact(1 << 20), "1MiB");
        assert_eq!(fmt_size_exact(800 << 30), "800GiB");
        assert_eq!(fmt_size_exact(1_500_000_000), "1.5GB");
        assert_eq!(fmt_size_exact(4096), "4KiB");
        assert_eq!(fmt_size_exact(4100), "4.1kB");
        assert_eq!(fmt_size_exact(4097), "4097");
        assert_eq!(fmt_size_exact(0), "0");
        for n in [
            1,
            999,
            1000,
            1023,
            1024,
            65_536,
            123_456_789,
            u64::MAX,
            u64::MAX - 1,
            3 << 40,
        ] {
            assert_eq!(parse_size(&fmt_size_exact(n)), Ok(n), "{n}");
        }
    }

    #[test]
    fn exact_bandwidths_round_trip() {
        assert_eq!(fmt_bandwidth_exact(2e9), "2GB/s");
        assert_eq!(fmt_bandwidth_exact(500e6), "500MB/s");
        assert_eq!(fmt_bandwidth_exact(1.5 * 1073741824.0), "1.5GiB/s");
        assert_eq!(fmt_bandwidth_exact(1234.5), "1234.5B/s");
        for bps in [
            1.0,
            0.5,
            1e-3,
            2e9,
            1.2345678e9,
            3.3e12,
            1e21,
            123456789.123,
        ] {
            assert_eq!(parse_bandwidth(&fmt_bandwidth_exact(bps)), Ok(bps), "{bps}");
        }
    }
}
