//! `[[tier]]`: the tiers, each a folder with optional stated bandwidths and capacity, and
//! optionally shared by the nodes of a job through a ledger. Validated one by one and then
//! against each other: unique names, folders that neither coincide nor nest, ledgers
//! outside every tier folder.

use std::path::{Path, PathBuf};

use super::problems::Problems;
use super::raw::{Human, RawTier};
use super::vars::{expand_path, expand_with};
use crate::units;

/// One validated `[[tier]]`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TierConfig {
    pub name: String,
    /// Absolute, with `${HOSTNAME}` and `${USER}` expanded.
    pub path: PathBuf,
    pub create: bool,
    /// Bytes per second; `None` means "probe it".
    pub read_bandwidth: Option<f64>,
    pub write_bandwidth: Option<f64>,
    /// Bytes; `None` means "the device's free space".
    pub capacity: Option<u64>,
    /// Requests in flight on this tier at most, across all ranks; `None`: the FUSE threads
    /// divided evenly among the tiers, so a slow tier can never hold every thread.
    pub max_in_flight: Option<usize>,
    /// The tier is shared by the nodes of a job, which coordinate their shares of it
    /// through a ledger ([`crate::coord`]); `None`: node-local estimates only.
    pub shared: Option<SharedConfig>,
}

/// A tier's `shared_ledger`, `shared_job` and `shared_node`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SharedConfig {
    /// The ledger folder on the shared file system (absolute, `${NAME}` expanded); the
    /// job's entries go in `<ledger>/<job>/<tier name>/`.
    pub ledger: PathBuf,
    pub job: String,
    /// This node's name in the ledger: unique within the job. Default `${HOSTNAME}`.
    pub node: String,
}

/// Longest accepted tier name.
pub const MAX_TIER_NAME: usize = 32;

/// Whether `s` may name a node or a job of a shared tier: 1 to 64 letters, digits, '_', '.'
/// or '-', not "." or "..", since it becomes part of a file name in the ledger.
pub fn is_valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn is_valid_tier_name(name: &str) -> bool {
    (1..=MAX_TIER_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        && name != "."
        && name != ".."
}

/// Why tier `name` at `path` cannot sit beside tier[`j`] `other`: the same folder, or one
/// inside the other (compared by whole components, so /xy is not inside /x).
fn overlap(path: &Path, name: &str, j: usize, other: &TierConfig) -> Option<String> {
    if other.path == path {
        return Some(format!(
            "{} is also the path of tier[{j}] ('{}'); give each tier its own folder",
            path.display(),
            other.name
        ));
    }
    let (relation, outer) = if path.starts_with(&other.path) {
        ("is inside", &other.path)
    } else if other.path.starts_with(path) {
        ("contains", &path.to_path_buf())
    } else {
        return None;
    };
    Some(format!(
        "{} {relation} tier[{j}]'s folder {} ('{}'); tier folders must not contain each \
         other: use sibling folders such as {} and {}",
        path.display(),
        other.path.display(),
        other.name,
        outer.join(&other.name).display(),
        outer.join(name).display(),
    ))
}

/// Validates every `[[tier]]`, reporting each problem; returns the tiers whose path is
/// valid, in the order of the file.
pub(super) fn parse_tiers(
    raw: &[RawTier],
    vars: &dyn Fn(&str) -> Option<String>,
    p: &mut Problems,
) -> Vec<TierConfig> {
    if raw.is_empty() {
        p.add(
            "tier",
            "no [[tier]] sections; add at least one, e.g.\n    \
             [[tier]]\n    name = \"nvme\"\n    path = \"/local/scratch/tierfs\"",
        );
    }
    // With their index in the file, for messages.
    let mut tiers: Vec<(usize, TierConfig)> = Vec::with_capacity(raw.len());
    for (i, t) in raw.iter().enumerate() {
        let key = |field: &str| format!("tier[{i}].{field}");
        check_name(raw, i, &key, p);
        let Some(tier) = parse_tier(t, &key, vars, p) else {
            continue;
        };
        for (j, o) in &tiers {
            if let Some(why) = overlap(&tier.path, &t.name, *j, o) {
                p.add(&key("path"), why);
            }
        }
        tiers.push((i, tier));
    }
    check_ledgers(&tiers, p);
    tiers.into_iter().map(|(_, t)| t).collect()
}

/// Tier `i`'s name is valid and not taken by an earlier tier.
fn check_name(raw: &[RawTier], i: usize, key: &dyn Fn(&str) -> String, p: &mut Problems) {
    let name = &raw[i].name;
    if !is_valid_tier_name(name) {
        p.add(
            &key("name"),
            format_args!(
                "{name:?} is not a valid tier name; use 1 to {MAX_TIER_NAME} letters, \
                 digits, '_', '.' or '-' (not \".\" or \"..\")"
            ),
        );
    } else if let Some(j) = raw[..i].iter().position(|o| o.name == *name) {
        p.add(
            &key("name"),
            format_args!("{name:?} is already the name of tier[{j}]; give each tier its own name"),
        );
    }
}

/// One tier's keys other than its name; `None` when its path is unusable (its other keys
/// are still checked, so that every problem is reported).
fn parse_tier(
    t: &RawTier,
    key: &dyn Fn(&str) -> String,
    vars: &dyn Fn(&str) -> Option<String>,
    p: &mut Problems,
) -> Option<TierConfig> {
    let path = match expand_path(&t.path, vars) {
        Ok(path) if path == Path::new("/") => {
            p.add(
                &key("path"),
                "the root folder cannot be a tier; use a folder in it",
            );
            None
        }
        Ok(path) => Some(path),
        Err(e) => {
            p.add(&key("path"), e);
            None
        }
    };
    let mut bandwidth = |field: &str, v: &Option<Human>| -> Option<f64> {
        let v = v.as_ref()?;
        units::parse_bandwidth(&v.0)
            .map_err(|e| {
                p.add(
                    &key(field),
                    format_args!("{e}; or remove the key to probe it"),
                )
            })
            .ok()
    };
    let write_bandwidth = bandwidth("write_bandwidth", &t.write_bandwidth);
    let read_bandwidth = bandwidth("read_bandwidth", &t.read_bandwidth);
    let capacity = match t.capacity.as_ref().map(|v| units::parse_size(&v.0)) {
        None => None,
        Some(Ok(0)) => {
            p.add(
                &key("capacity"),
                "must be greater than zero; \
                 remove the key to use the device's free space",
            );
            None
        }
        Some(Ok(n)) => Some(n),
        Some(Err(e)) => {
            p.add(&key("capacity"), e);
            None
        }
    };
    let max_in_flight = match t.max_in_flight {
        None => None,
        Some(n) if (1..=1024).contains(&n) => Some(n as usize),
        Some(n) => {
            p.add(
                &key("max_in_flight"),
                format_args!("{n} is out of range; use 1 to 1024 or leave it out"),
            );
            None
        }
    };
    let shared = shared_config(t, key, vars, p);
    Some(TierConfig {
        name: t.name.clone(),
        path: path?,
        create: t.create,
        read_bandwidth,
        write_bandwidth,
        capacity,
        max_in_flight,
        shared,
    })
}

/// A ledger inside a tier folder would be that node's own data (or, in data/, visible in
/// the mount): it must be a folder of its own.
fn check_ledgers(tiers: &[(usize, TierConfig)], p: &mut Problems) {
    for (i, t) in tiers {
        let Some(sh) = &t.shared else { continue };
        for (j, o) in tiers {
            if sh.ledger.starts_with(&o.path) {
                p.add(
                    &format!("tier[{i}].shared_ledger"),
                    format_args!(
                        "{} is inside tier[{j}]'s folder {} ('{}'); put the ledger in a \
                         folder of its own on the shared file system",
                        sh.ledger.display(),
                        o.path.display(),
                        o.name
                    ),
                );
            }
        }
    }
}

/// A tier's `shared_*` keys, validated: all or none of ledger and job, ids that fit in a
/// file name. Problems are added to `p`.
fn shared_config(
    t: &RawTier,
    key: &dyn Fn(&str) -> String,
    vars: &dyn Fn(&str) -> Option<String>,
    p: &mut Problems,
) -> Option<SharedConfig> {
    if t.shared_ledger.is_none() && t.shared_job.is_none() {
        if t.shared_node.is_some() {
            p.add(
                &key("shared_node"),
                "set without shared_ledger and shared_job; add them, or remove shared_node",
            );
        }
        return None;
    }
    let Some(ledger) = t.shared_ledger.as_deref() else {
        p.add(
            &key("shared_ledger"),
            "missing; shared_job needs a ledger folder on the shared file system, e.g. \
             shared_ledger = \"/lus/proj/tierfs-ledger\"",
        );
        return None;
    };
    let Some(job) = t.shared_job.as_deref() else {
        p.add(
            &key("shared_job"),
            "missing; a shared_ledger needs the job's id, the same on every node, e.g. \
             shared_job = \"${SLURM_JOB_ID}\"",
        );
        return None;
    };
    let ledger = expand_path(ledger, vars)
        .map_err(|e| p.add(&key("shared_ledger"), e))
        .ok();
    let mut id = |field: &str, written: &str| -> Option<String> {
        let v = expand_with(written, vars)
            .map_err(|e| p.add(&key(field), e))
            .ok()?;
        if is_valid_id(&v) {
            Some(v)
        } else {
            p.add(
                &key(field),
                format_args!(
                    "{v:?} is not a valid id; use 1 to 64 letters, digits, '_', '.' or '-' \
                     (not \".\" or \"..\")"
                ),
            );
            None
        }
    };
    let job = id("shared_job", job);
    let node = id(
        "shared_node",
        t.shared_node.as_deref().unwrap_or("${HOSTNAME}"),
    );
    Some(SharedConfig {
        ledger: ledger?,
        job: job?,
        node: node?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testkit::parse;
    use super::*;
    use crate::config::MountConfig;

    #[test]
    fn shared_keys_expand_and_default_the_node_to_the_host() {
        let vars = |n: &str| match n {
            "SLURM_JOB_ID" => Some("4711".to_string()),
            "HOSTNAME" => Some("nid001".to_string()),
            _ => None,
        };
        let text = "[[tier]]\nname = \"pfs\"\npath = \"/lus/t/${HOSTNAME}\"\n\
                    shared_ledger = \"/lus/ledger\"\nshared_job = \"job-${SLURM_JOB_ID}\"\n";
        let c = MountConfig::parse_with_vars(text, Path::new("/c.toml"), &vars).unwrap();
        let sh = c.tiers[0].shared.as_ref().unwrap();
        assert_eq!(sh.ledger, Path::new("/lus/ledger"));
        assert_eq!((sh.job.as_str(), sh.node.as_str()), ("job-4711", "nid001"));
        // The effective config says it, and reads back the same.
        let again =
            MountConfig::parse_with_vars(&c.to_toml(), Path::new("/c.toml"), &vars).unwrap();
        assert_eq!(again.tiers[0].shared.as_ref().unwrap().node, "nid001");
        // Without the keys: not shared.
        let plain = "[[tier]]\nname = \"a\"\npath = \"/a\"\n";
        let c = MountConfig::parse_with_vars(plain, Path::new("/c.toml"), &vars).unwrap();
        assert!(c.tiers[0].shared.is_none());
        // A job id that is not set is named.
        let e = MountConfig::parse_with_vars(text, Path::new("/c.toml"), &|n: &str| {
            (n == "HOSTNAME").then(|| "h".to_string())
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("tier[0].shared_job") && e.contains("SLURM_JOB_ID"),
            "{e}"
        );
    }

    #[test]
    fn paths_are_normalized_and_checked() {
        let c = parse("[[tier]]\nname='a'\npath='/x//y/./z/'\n").unwrap();
        assert_eq!(c.tiers[0].path, Path::new("/x/y/z"));
        assert!(parse("[[tier]]\nname='a'\npath='/x/../y'\n")
            .unwrap_err()
            .contains(".."));
        assert!(parse("[[tier]]\nname='a'\npath='/'\n")
            .unwrap_err()
            .contains("root"));
        let err =
            parse("[[tier]]\nname='a'\npath='/x'\n[[tier]]\nname='b'\npath='/x/'\n").unwrap_err();
        assert!(
            err.contains("tier[1].path") && err.contains("tier[0]"),
            "{err}"
        );
        // Prefixes that are not path components are not nesting.
        parse("[[tier]]\nname='a'\npath='/x'\n[[tier]]\nname='b'\npath='/xy'\n").unwrap();
    }

    #[test]
    fn numbers_are_accepted_for_sizes() {
        let c = parse("[[tier]]\nname='a'\npath='/a'\ncapacity = 4096\n").unwrap();
        assert_eq!(c.tiers[0].capacity, Some(4096));
    }

    #[test]
    fn tier_names() {
        assert!(is_valid_tier_name("nvme0"));
        assert!(is_valid_tier_name("A-b_c.d"));
        assert!(is_valid_tier_name(&"x".repeat(32)));
        for bad in ["", ".", "..", "a b", "a/b", "é", &"x".repeat(33)] {
            assert!(!is_valid_tier_name(bad), "{bad:?}");
        }
    }
}
