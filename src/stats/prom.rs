//! `tierfs stat --prom` and `[metrics] textfile`: a mount's `.tierfs/metrics` made ready for
//! node_exporter's textfile collector on a shared node.
//!
//! The collector runs as its own user and reads one folder of `*.prom` files. It cannot read
//! a user's FUSE mount itself (without `allow_other` even root is refused), so the mount's
//! owner copies the metrics out on a timer. Several users' files land in one folder, so each
//! sample gets a `mountpoint` label (two mounts never share one) and any labels asked for,
//! and the file is replaced by a rename, never seen half written.

use std::io::Write;
use std::path::Path;

/// A label to add: `NAME=VALUE`, NAME as Prometheus allows (`[a-zA-Z_][a-zA-Z0-9_]*`, not
/// starting with `__`, which Prometheus reserves).
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE (e.g. job=1234)"))?;
    let ok = name
        .chars()
        .enumerate()
        .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
    if name.is_empty() || !ok || name.starts_with("__") {
        return Err(format!(
            "{name:?} is not a label name: use letters, digits and '_', not starting with a \
             digit or \"__\""
        ));
    }
    Ok((name.to_string(), value.to_string()))
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The label names already on a sample line's `{...}`.
fn label_names(braces: &str) -> Vec<&str> {
    // Values are quoted and may hold commas or '=', so walk name="value" pairs.
    let mut names = Vec::new();
    let mut rest = braces;
    while let Some(eq) = rest.find("=\"") {
        names.push(rest[..eq].trim_start_matches([',', ' ']));
        let mut i = eq + 2;
        let b = rest.as_bytes();
        while i < b.len() && b[i] != b'"' {
            i += if b[i] == b'\\' { 2 } else { 1 };
        }
        rest = rest.get(i + 1..).unwrap_or("");
    }
    names
}

/// Adds `labels` to every sample of a text exposition; comments pass unchanged. A label
/// that a sample already has is an error (Prometheus would reject the file).
pub fn add_labels(text: &str, labels: &[(String, String)]) -> Result<String, String> {
    let extra: Vec<String> = labels
        .iter()
        .map(|(n, v)| format!("{n}=\"{}\"", escape(v)))
        .collect();
    let extra = extra.join(",");
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.lines() {
        if extra.is_empty() || line.is_empty() || line.starts_with('#') {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        let (name, rest) = line.split_at(name_end);
        if let Some(inner) = rest.strip_prefix('{') {
            let close = inner
                .rfind('}')
                .ok_or_else(|| format!("no '}}' in {line:?}"))?;
            let have = label_names(&inner[..close]);
            if let Some((n, _)) = labels.iter().find(|(n, _)| have.contains(&n.as_str())) {
                return Err(format!(
                    "{name} already has a label {n:?}; choose another label name"
                ));
            }
            let sep = if inner.starts_with('}') { "" } else { "," };
            out.push_str(&format!("{name}{{{extra}{sep}{inner}\n"));
        } else {
            out.push_str(&format!("{name}{{{extra}}}{rest}\n"));
        }
    }
    Ok(out)
}

/// A mount's metrics as the textfile collector gets them (`tierfs stat --prom`, and the
/// daemon's own `[metrics] textfile`): every sample labelled `mountpoint="ABSOLUTE PATH"`.
pub fn labelled(metrics: &str, mountpoint: &Path) -> Result<String, String> {
    let abs = std::path::absolute(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    add_labels(
        metrics,
        &[("mountpoint".to_string(), abs.display().to_string())],
    )
}

/// The temporary file [`write_atomic`] writes `path` through: a hidden name in the same
/// folder that the collector, which reads `*.prom`, skips.
pub fn temp_path(path: &Path) -> std::io::Result<std::path::PathBuf> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the file name is missing"))?;
    Ok(dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    )))
}

/// Writes `bytes` to `path` through a temporary file in the same folder (named so the
/// collector, which reads `*.prom`, skips it) and a rename; the file is mode 0644 so the
/// collector's user can read it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let tmp = temp_path(path)?;
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        // The mode above passes through the umask (often 077 on clusters).
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn labels_go_on_every_sample() {
        let text = "# HELP tierfs_files Regular files.\n# TYPE tierfs_files gauge\n\
                    tierfs_files 3\n\
                    tierfs_tier_read_bytes_total{tier=\"nvme\"} 10\n\
                    tierfs_info{version=\"0.1, \\\"x\\\"\",layout=\"stripe\"} 1\n\
                    tierfs_empty{} 0\n";
        let out = add_labels(text, &l(&[("mountpoint", "/local/a \"b\""), ("job", "42")])).unwrap();
        let want = "# HELP tierfs_files Regular files.\n# TYPE tierfs_files gauge\n\
                    tierfs_files{mountpoint=\"/local/a \\\"b\\\"\",job=\"42\"} 3\n\
                    tierfs_tier_read_bytes_total{mountpoint=\"/local/a \\\"b\\\"\",job=\"42\",tier=\"nvme\"} 10\n\
                    tierfs_info{mountpoint=\"/local/a \\\"b\\\"\",job=\"42\",version=\"0.1, \\\"x\\\"\",layout=\"stripe\"} 1\n\
                    tierfs_empty{mountpoint=\"/local/a \\\"b\\\"\",job=\"42\"} 0\n";
        assert_eq!(out, want);
        assert_eq!(add_labels(text, &[]).unwrap(), text);
    }

    #[test]
    fn metrics_are_labelled_with_the_absolute_mountpoint() {
        let out = labelled("tierfs_files 3\n", Path::new("/local/t")).unwrap();
        assert_eq!(out, "tierfs_files{mountpoint=\"/local/t\"} 3\n");
        let cwd = std::env::current_dir().unwrap();
        let out = labelled("tierfs_files 3\n", Path::new("rel")).unwrap();
        assert!(out.contains(&format!("{}/rel", cwd.display())), "{out}");
        let tmp = temp_path(Path::new("/d/t.prom")).unwrap();
        assert_eq!(tmp.parent(), Some(Path::new("/d")));
        assert!(!tmp.to_string_lossy().ends_with(".prom"));
    }

    #[test]
    fn a_label_the_sample_has_is_refused() {
        let e = add_labels("m{tier=\"a\"} 1\n", &l(&[("tier", "x")])).unwrap_err();
        assert!(e.contains("already has a label \"tier\""), "{e}");
        // A value that merely contains the name is no clash.
        assert!(add_labels("m{path=\"tier=\\\"\"} 1\n", &l(&[("tier", "x")])).is_ok());
    }

    #[test]
    fn label_arguments_are_checked() {
        assert_eq!(
            parse_label("job=a=b"),
            Ok(("job".to_string(), "a=b".to_string()))
        );
        for bad in ["job", "=x", "1a=x", "a-b=x", "__x=y"] {
            assert!(parse_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_file_is_replaced_whole_and_readable() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tierfs-alice.prom");
        write_atomic(&p, b"a 1\n").unwrap();
        write_atomic(&p, b"a 2\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"a 2\n");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o444, 0o444, "{mode:o}");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "temporary files left behind");
        assert!(write_atomic(&d.path().join("no/such/dir/x.prom"), b"").is_err());
    }
}
