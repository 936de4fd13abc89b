//! Config keys given as mount options (`tierfs mount -o mount.threads=32`, an fstab line):
//! the one table of the keys `-o` takes ([`KEYS`]), and how a `KEY=VALUE` becomes a change
//! to the config before it is validated.
//!
//! A key is named as in the file: `section.key` (`placement.layout`), the key alone where no
//! other section has one of that name (`layout`), and a tier's key as `tier.NAME.key`
//! (`tier.nvme.path=/local/x`), which adds the tier NAME where the file has none: with
//! enough tiers given this way no file is needed (a one-line fstab entry). The options are
//! applied to the file's TOML as if written there, so the validation, its defaults and its
//! messages are the file's own; a problem with a value given as an option names the option
//! (`-o threads=0: mount.threads: ...`) instead of the file.

use std::path::Path;

use super::problems::Problems;
use super::raw::RawConfig;
use super::ConfigError;

/// What a key's value is, as `-o` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `true`/`false` (also `yes`/`no`, `1`/`0`); the bare name means `true`.
    Bool,
    /// A whole number.
    Int,
    /// A number (`0.5`).
    Float,
    /// Text: a path, a choice, a size or bandwidth with its unit (`1MiB`, `2GB/s`).
    Text,
}

/// One config key `-o` takes.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// As in the file: `section.key`, or `tier.key` for a tier's (written `tier.NAME.key`).
    pub name: &'static str,
    pub kind: Kind,
    /// An example value (the man page shows `name=example`).
    pub example: &'static str,
    pub help: &'static str,
}

const fn key(name: &'static str, kind: Kind, example: &'static str, help: &'static str) -> Key {
    Key {
        name,
        kind,
        example,
        help,
    }
}

/// Every config key, in the order of the file's sections. A test checks that this is
/// every key the effective config (`.tierfs/config`) shows, so a key added to the file is
/// added here too.
pub const KEYS: &[Key] = &[
    key(
        "tier.path",
        Kind::Text,
        "/local/scratch/tierfs",
        "the tier's folder (adds tier NAME when the config has none)",
    ),
    key(
        "tier.create",
        Kind::Bool,
        "true",
        "create the folder's last component",
    ),
    key(
        "tier.write_bandwidth",
        Kind::Text,
        "2GB/s",
        "stated write bandwidth (default: probed)",
    ),
    key(
        "tier.read_bandwidth",
        Kind::Text,
        "3GB/s",
        "stated read bandwidth (default: probed)",
    ),
    key(
        "tier.capacity",
        Kind::Text,
        "800GiB",
        "bytes tierfs may put there (default: the free space)",
    ),
    key(
        "tier.max_in_flight",
        Kind::Int,
        "16",
        "requests in flight on the tier at most",
    ),
    key(
        "tier.shared_ledger",
        Kind::Text,
        "/lus/proj/ledger",
        "ledger folder of a tier the job's nodes share",
    ),
    key(
        "tier.shared_job",
        Kind::Text,
        "12345",
        "the job's id in the shared ledger",
    ),
    key(
        "tier.shared_node",
        Kind::Text,
        "node01",
        "this node's name in the shared ledger",
    ),
    key(
        "placement.layout",
        Kind::Text,
        "stripe",
        "whole-file or stripe",
    ),
    key(
        "placement.stripe_unit",
        Kind::Text,
        "1MiB",
        "stripe size, a multiple of 4096",
    ),
    key(
        "placement.adapt",
        Kind::Bool,
        "true",
        "follow the online bandwidth estimates",
    ),
    key(
        "placement.min_share",
        Kind::Float,
        "0.1",
        "with adapt: pause a tier worth less",
    ),
    key(
        "mount.stats_dir",
        Kind::Text,
        ".tierfs",
        "the stats folder at the mount root",
    ),
    key(
        "mount.allow_other",
        Kind::Bool,
        "true",
        "let other users in (fuse.conf: user_allow_other)",
    ),
    key(
        "mount.log_file",
        Kind::Text,
        "/tmp/tierfs.log",
        "the daemon's log file",
    ),
    key(
        "mount.threads",
        Kind::Int,
        "64",
        "FUSE worker threads, 1 to 256",
    ),
    key(
        "mount.passthrough",
        Kind::Text,
        "auto",
        "kernel passthrough: auto, direct or off",
    ),
    key(
        "mount.exclusive_tiers",
        Kind::Bool,
        "true",
        "each tier serves one file at a time",
    ),
    key(
        "mount.degraded",
        Kind::Bool,
        "true",
        "mount without a missing tier (not the first)",
    ),
    key(
        "mount.engine",
        Kind::Text,
        "io_uring",
        "backing I/O: io_uring or psync",
    ),
    key(
        "mount.transport",
        Kind::Text,
        "auto",
        "FUSE transport: auto, uring or dev",
    ),
    key(
        "mount.scratch",
        Kind::Bool,
        "true",
        "discard the data and remove the tier folders at unmount",
    ),
    key(
        "mount.direct",
        Kind::Text,
        "auto",
        "the direct path of `tierfs run`: auto or off",
    ),
    key(
        "cache.size",
        Kind::Text,
        "4GiB",
        "staging memory: a size, auto or off",
    ),
    key(
        "cache.policy",
        Kind::Text,
        "learned",
        "what staging keeps: learned or lru",
    ),
    key(
        "cache.prefetch",
        Kind::Int,
        "2",
        "files loaded ahead per folder, 0 to 64",
    ),
    key(
        "cache.writeback_delay",
        Kind::Float,
        "5",
        "seconds dirty data may wait in memory",
    ),
    key(
        "cache.max_file",
        Kind::Text,
        "1GiB",
        "largest file staging takes",
    ),
    key(
        "metrics.textfile",
        Kind::Text,
        "/var/lib/node_exporter/tierfs.prom",
        "write the metrics there for node_exporter",
    ),
    key(
        "metrics.textfile_interval",
        Kind::Float,
        "5",
        "seconds between textfile writes",
    ),
];

/// The name `-o` may give `k` by alone: its key where no other section has one so named.
pub fn short_name(k: &Key) -> Option<&'static str> {
    let (section, name) = k.name.split_once('.')?;
    let unique = KEYS
        .iter()
        .filter(|o| o.name.split_once('.').is_some_and(|(_, n)| n == name))
        .count()
        == 1;
    (section != "tier" && unique).then_some(name)
}

/// A config key with its value from a mount option.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// The key as the file would have it: `mount.threads`, or `tier.NAME.key`.
    pub key: String,
    /// The option as it was written (`threads=32`), for messages.
    pub given: String,
    value: toml::Value,
}

impl Override {
    /// As one `-o` item, `KEY=VALUE` with the full key name (quoted where it holds a comma).
    pub fn as_option(&self) -> String {
        let v = match &self.value {
            toml::Value::String(s) if s.contains(',') => format!("\"{s}\""),
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        format!("{}={v}", self.key)
    }

    /// The tier name and key of a `tier.NAME.key` override.
    fn tier_key(&self) -> Option<(&str, &str)> {
        self.key.strip_prefix("tier.")?.rsplit_once('.')
    }
}

/// `opt` (`NAME` or `NAME=VALUE`) as a config override: `Ok(None)` when NAME is no config
/// key, `Err` (why, with the fix) when it is one and the value does not fit.
pub fn parse(opt: &str) -> Result<Option<Override>, String> {
    let (name, value) = match opt.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (opt, None),
    };
    let (k, full) = if let Some(rest) = name.strip_prefix("tier.") {
        let Some((tier, field)) = rest.rsplit_once('.') else {
            return match KEYS.iter().find(|k| k.name == name) {
                Some(_) => Err(format!(
                    "name the tier: {}, e.g. tier.nvme.{rest}=...",
                    name.replacen("tier.", "tier.NAME.", 1)
                )),
                None => Ok(None),
            };
        };
        let Some(k) = KEYS.iter().find(|k| k.name == format!("tier.{field}")) else {
            return Ok(None);
        };
        if tier.is_empty() {
            return Err(format!("name the tier: tier.NAME.{field}"));
        }
        (k, name.to_string())
    } else {
        match KEYS
            .iter()
            .find(|k| k.name == name || short_name(k) == Some(name))
        {
            Some(k) if !k.name.starts_with("tier.") => (k, k.name.to_string()),
            _ => return Ok(None),
        }
    };
    let value = to_value(k, value)?;
    Ok(Some(Override {
        key: full,
        given: opt.to_string(),
        value,
    }))
}

/// The text after `=` as the TOML value key `k` takes.
fn to_value(k: &Key, v: Option<&str>) -> Result<toml::Value, String> {
    let what = match k.kind {
        Kind::Bool => "true or false",
        Kind::Int => "a whole number",
        Kind::Float => "a number",
        Kind::Text => "a value",
    };
    let short = short_name(k).unwrap_or(k.name);
    let fix = || format!("{} takes {what}, e.g. {short}={}", k.name, k.example);
    let Some(v) = v else {
        return match k.kind {
            Kind::Bool => Ok(toml::Value::Boolean(true)),
            _ => Err(fix()),
        };
    };
    let v = v.trim();
    let parsed = match k.kind {
        Kind::Bool => match v {
            "true" | "yes" | "1" => Some(toml::Value::Boolean(true)),
            "false" | "no" | "0" => Some(toml::Value::Boolean(false)),
            _ => None,
        },
        Kind::Int => v.parse::<i64>().ok().map(toml::Value::Integer),
        Kind::Float => v
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(toml::Value::Float),
        Kind::Text => Some(toml::Value::String(v.to_string())),
    };
    parsed.ok_or_else(fix)
}

/// The config `text` (`None`: no file) with `overrides` applied, as the raw structs, and
/// which key of the validation each override sets (`tier[1].path` for `tier.pfs.path`),
/// with the option as written: what the problems of those keys are named by.
pub(super) fn apply(
    text: Option<&str>,
    file: &str,
    overrides: &[Override],
) -> Result<(RawConfig, Vec<(String, String)>), ConfigError> {
    let mut table = match text {
        Some(t) => toml::from_str::<toml::Table>(t)
            .map_err(|e| super::problems::toml_error(t, file, &e))?,
        None => toml::Table::new(),
    };
    // The tiers the options add first, in the order of their paths, so that a tier's
    // other keys may come before its path.
    for o in overrides {
        if let Some((tier, "path")) = o.tier_key() {
            tier_index(&mut table, tier, "path", o, file)?;
        }
    }
    let mut given = Vec::new();
    for o in overrides {
        let at = match o.tier_key() {
            Some((tier, field)) => {
                let i = tier_index(&mut table, tier, field, o, file)?;
                format!("tier[{i}].{field}")
            }
            None => {
                let (s, f) = o.key.split_once('.').unwrap_or(("", &o.key));
                let t = table
                    .entry(s)
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                let toml::Value::Table(t) = t else {
                    return Err(ConfigError::Invalid(format!(
                        "{file}: {s} is not a section; write it as [{s}]"
                    )));
                };
                t.insert(f.to_string(), o.value.clone());
                o.key.clone()
            }
        };
        given.retain(|(k, _): &(String, String)| *k != at);
        given.push((at, o.given.clone()));
    }
    let raw = toml::Value::Table(table)
        .try_into::<RawConfig>()
        .map_err(|e| ConfigError::Invalid(format!("{file} with the mount options: {e}")))?;
    Ok((raw, given))
}

/// Tier `tier`'s index among the `[[tier]]` tables, with `o`'s value set in it; a tier the
/// table lacks is added, which only a path may do (`file`: for the message).
fn tier_index(
    table: &mut toml::Table,
    tier: &str,
    field: &str,
    o: &Override,
    file: &str,
) -> Result<usize, ConfigError> {
    let list = table
        .entry("tier")
        .or_insert_with(|| toml::Value::Array(Vec::new()));
    let toml::Value::Array(list) = list else {
        return Err(ConfigError::Invalid(
            "tier is not a list of [[tier]] sections".into(),
        ));
    };
    let named = |v: &toml::Value| v.get("name").and_then(|n| n.as_str()) == Some(tier);
    let i = match list.iter().position(named) {
        Some(i) => i,
        None if field == "path" => {
            let mut t = toml::Table::new();
            t.insert("name".into(), toml::Value::String(tier.to_string()));
            list.push(toml::Value::Table(t));
            list.len() - 1
        }
        None => {
            return Err(ConfigError::Invalid(format!(
                "-o {}: {file} has no tier '{tier}'; add it with its folder, \
                 tier.{tier}.path=DIR",
                o.given
            )))
        }
    };
    if let Some(toml::Value::Table(t)) = list.get_mut(i) {
        t.insert(field.to_string(), o.value.clone());
    }
    Ok(i)
}

/// Whether `overrides` name at least one tier's folder (enough to mount without a file).
pub fn names_a_tier(overrides: &[Override]) -> bool {
    overrides
        .iter()
        .any(|o| o.tier_key().is_some_and(|(_, f)| f == "path"))
}

/// What the validation of an override-only config calls its source.
pub const NO_FILE: &str = "mount options";

impl super::MountConfig {
    /// Reads `file` (or nothing) and validates it with `overrides` applied on top, as if
    /// written in it; a problem with an override's value is named by the option.
    pub fn load_with(
        file: Option<&Path>,
        overrides: &[Override],
    ) -> Result<super::MountConfig, ConfigError> {
        let text = match file {
            Some(p) => Some(super::read_config_text(p)?),
            None => None,
        };
        let source = file.unwrap_or(Path::new(NO_FILE));
        if overrides.is_empty() {
            let text = text.unwrap_or_default();
            return Self::parse(&text, source);
        }
        let label = source.display().to_string();
        let (raw, given) = match apply(text.as_deref(), &label, overrides) {
            Ok(r) => r,
            // A mistake of the file's own (the options may also fill what it leaves out,
            // a tier's path) is said as the file alone says it, with its line and column.
            Err(e) => match text.as_deref().map(toml::from_str::<RawConfig>) {
                Some(Err(fe)) => {
                    let t = text.as_deref().unwrap_or_default();
                    return Err(super::problems::toml_error(t, &label, &fe));
                }
                _ => return Err(e),
            },
        };
        let mut p = Problems::new(label);
        p.name_by_options(given);
        super::validate(raw, source, &super::process_var, p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MountConfig;

    fn ov(items: &[&str]) -> Vec<Override> {
        items.iter().map(|i| parse(i).unwrap().unwrap()).collect()
    }

    fn load(text: Option<&str>, items: &[&str]) -> Result<MountConfig, String> {
        let d = tempfile::tempdir().unwrap();
        let f = text.map(|t| {
            let p = d.path().join("c.toml");
            std::fs::write(&p, t).unwrap();
            p
        });
        MountConfig::load_with(f.as_deref(), &ov(items)).map_err(|e| e.to_string())
    }

    #[test]
    fn names_full_short_and_per_tier() {
        let o = parse("threads=32").unwrap().unwrap();
        assert_eq!(
            (o.key.as_str(), o.as_option()),
            ("mount.threads", "mount.threads=32".into())
        );
        assert_eq!(
            parse("mount.threads=32").unwrap().unwrap().key,
            "mount.threads"
        );
        assert_eq!(
            parse("allow_other").unwrap().unwrap().as_option(),
            "mount.allow_other=true"
        );
        assert_eq!(
            parse("tier.my.nvme.path=/a,b")
                .unwrap()
                .unwrap()
                .as_option(),
            "tier.my.nvme.path=\"/a,b\""
        );
        assert_eq!(parse("bogus=1"), Ok(None));
        assert_eq!(parse("tier.a.speed=1"), Ok(None));
        assert_eq!(parse("rw"), Ok(None));
        // `path` alone is a tier's key: which tier?
        assert_eq!(parse("path=/x"), Ok(None));
        let e = parse("tier.path=/x").unwrap_err();
        assert!(e.contains("tier.NAME.path"), "{e}");
        for (bad, needle) in [
            (
                "threads=lots",
                "mount.threads takes a whole number, e.g. threads=64",
            ),
            (
                "threads",
                "mount.threads takes a whole number, e.g. threads=64",
            ),
            ("allow_other=maybe", "mount.allow_other takes true or false"),
            ("min_share=x", "placement.min_share takes a number"),
            (
                "layout",
                "placement.layout takes a value, e.g. layout=stripe",
            ),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.starts_with(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn short_names_are_unambiguous() {
        for k in KEYS {
            if let Some(s) = short_name(k) {
                let same: Vec<_> = KEYS.iter().filter(|o| short_name(o) == Some(s)).collect();
                assert_eq!(same.len(), 1, "{s}");
            }
        }
        assert_eq!(short_name(&KEYS[0]), None, "tier keys need their tier");
    }

    /// Every key the effective config writes (or says is unset) is in [`KEYS`], and every
    /// entry of [`KEYS`] is a key of the file.
    #[test]
    fn keys_are_the_files_keys() {
        let c = load(
            Some("[[tier]]\nname='a'\npath='/a'\nshared_ledger='/l'\nshared_job='j'\n"),
            &[],
        )
        .unwrap();
        let mut section = String::new();
        let mut seen = Vec::new();
        for line in c.to_toml().lines() {
            let line = line.trim_start_matches("# ");
            if let Some(s) = line.strip_prefix('[') {
                section = s.trim_matches(|c| c == '[' || c == ']').to_string();
            } else if let Some((k, _)) = line.split_once([' ', ':']) {
                if k.chars().all(|c| c.is_ascii_lowercase() || c == '_') && !k.is_empty() {
                    if section == "tier" && k == "name" {
                        continue;
                    }
                    seen.push(format!("{section}.{k}"));
                }
            }
        }
        for k in &seen {
            assert!(
                KEYS.iter().any(|o| o.name == k),
                "{k} is not in overrides::KEYS"
            );
        }
        for k in KEYS {
            assert!(
                seen.iter().any(|s| s == k.name),
                "{} is not a key of the file",
                k.name
            );
        }
    }

    #[test]
    fn options_stand_in_for_a_file_and_override_one() {
        let c = load(
            None,
            &[
                "tier.nvme.path=/l/n",
                "tier.pfs.path=/lus/p",
                "tier.pfs.write_bandwidth=1GB/s",
                "layout=stripe",
                "threads=8",
            ],
        )
        .unwrap();
        assert_eq!(c.tiers.len(), 2);
        assert_eq!(
            (c.tiers[0].name.as_str(), c.tiers[1].name.as_str()),
            ("nvme", "pfs")
        );
        assert_eq!(c.tiers[1].write_bandwidth, Some(1e9));
        assert_eq!(c.placement.layout, crate::config::Layout::Stripe);
        assert_eq!(c.mount.threads, 8);
        assert_eq!(c.source, Path::new(NO_FILE));
        let file = "[[tier]]\nname='a'\npath='/a'\n[mount]\nthreads=4\n";
        let c = load(
            Some(file),
            &[
                "tier.a.capacity=1GiB",
                "tier.b.path=/b",
                "threads=16",
                "size=64MiB",
                "passthrough=off",
            ],
        )
        .unwrap();
        assert_eq!(c.tiers.len(), 2);
        assert_eq!(c.tiers[0].capacity, Some(1 << 30));
        assert_eq!(c.mount.threads, 16);
        assert_eq!(c.cache.size, crate::config::CacheSize::Bytes(64 << 20));
        assert_eq!(c.mount.passthrough, crate::config::Passthrough::Off);
        // The later of two wins, as in a command line.
        assert_eq!(
            load(Some(file), &["threads=2", "threads=3"])
                .unwrap()
                .mount
                .threads,
            3
        );
    }

    #[test]
    fn problems_of_option_values_name_the_option() {
        let file = "[[tier]]\nname='a'\npath='/a'\n";
        let e = load(Some(file), &["threads=0"]).unwrap_err();
        assert!(
            e.starts_with("-o threads=0: mount.threads: 0 is out of range"),
            "{e}"
        );
        let e = load(Some(file), &["tier.b.path=rel"]).unwrap_err();
        assert!(
            e.starts_with("-o tier.b.path=rel: tier[1].path: \"rel\" is not absolute"),
            "{e}"
        );
        let e = load(Some(file), &["tier.c.create=true"]).unwrap_err();
        assert!(
            e.contains("c.toml has no tier 'c'; add it with its folder, tier.c.path=DIR"),
            "{e}"
        );
        // A file may leave out what the options give (a template with no paths).
        let c = load(Some("[[tier]]\nname='a'\n"), &["tier.a.path=/x"]).unwrap();
        assert_eq!(c.tiers[0].path, Path::new("/x"));
        // A tier's keys may come before its path; tiers are in the order of their paths.
        let c = load(
            None,
            &["tier.b.create=true", "tier.a.path=/a", "tier.b.path=/b"],
        )
        .unwrap();
        assert_eq!(c.tiers[0].name, "a");
        assert!(c.tiers[1].create);
        // The file's own problems keep its name, line and column.
        let e = load(
            Some("[[tier]]\nname='a'\npath='/a'\n[mount]\nthreads=0\n"),
            &["layout=stripe"],
        )
        .unwrap_err();
        assert!(
            e.contains("c.toml: mount.threads: 0 is out of range"),
            "{e}"
        );
        let e = load(Some("[[tier]]\nname='a'\nspeed=1\n"), &["layout=stripe"]).unwrap_err();
        assert!(e.contains("c.toml:3:1: unknown field `speed`"), "{e}");
        let e = load(None, &["threads=8"]).unwrap_err();
        assert!(e.contains("no [[tier]] sections"), "{e}");
    }
}
