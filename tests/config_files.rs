//! The shipped example configs in `mount-configs/` must parse, and every kind of bad config
//! must be refused with a message that names the file and the key.

use std::fs;
use std::path::{Path, PathBuf};

use tierfs::config::{Layout, MountConfig};

const SOURCE: &str = "/etc/tierfs/bad.toml";

fn parse(text: &str) -> Result<MountConfig, String> {
    MountConfig::parse(text, Path::new(SOURCE)).map_err(|e| e.to_string())
}

/// Asserts `text` is refused and that the message names the file and `key`, and contains
/// each of `also`. Returns the message.
#[track_caller]
fn refused(text: &str, key: &str, also: &[&str]) -> String {
    let err = match parse(text) {
        Ok(c) => panic!("accepted a bad config:\n{text}\n=> {c:?}"),
        Err(e) => e,
    };
    assert!(
        err.contains(SOURCE),
        "message does not name the file: {err}"
    );
    assert!(err.contains(key), "message does not name {key}: {err}");
    for s in also {
        assert!(err.contains(s), "message lacks {s:?}: {err}");
    }
    err
}

const GOOD_TIERS: &str = r#"
[[tier]]
name = "nvme"
path = "/local/scratch/tierfs"
[[tier]]
name = "pfs"
path = "/lus/proj/tierfs"
"#;

fn shipped_configs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("mount-configs");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn shipped_configs_validate_and_round_trip() {
    let files = shipped_configs();
    for name in [
        "demo",
        "polaris-nvme-lustre",
        "single-nvme",
        "four-nvme-lustre",
    ] {
        assert!(
            files.iter().any(|f| f.file_stem().unwrap() == name),
            "mount-configs/{name}.toml is missing"
        );
    }
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        let a = MountConfig::parse(&text, file)
            .unwrap_or_else(|e| panic!("{} does not validate:\n{e}", file.display()));
        assert!(!a.tiers.is_empty());
        let printed = a.to_toml();
        let b = MountConfig::parse(&printed, file).unwrap_or_else(|e| {
            panic!(
                "to_toml of {} does not parse:\n{e}\n{printed}",
                file.display()
            )
        });
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&b).unwrap(),
            "{} changes through to_toml:\n{printed}",
            file.display()
        );
        assert_eq!(printed, b.to_toml(), "{}", file.display());
        // Every default is written out.
        for key in [
            "create =",
            "layout =",
            "stripe_unit =",
            "stats_dir =",
            "threads =",
        ] {
            assert!(
                printed.contains(key),
                "{}: no {key:?} in\n{printed}",
                file.display()
            );
        }
    }
}

#[test]
fn shipped_demo_is_what_the_readme_expects() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("mount-configs/demo.toml");
    let c = MountConfig::load(&file).unwrap();
    let tiers: Vec<_> = c
        .tiers
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.path.to_str().unwrap(),
                t.create,
                t.write_bandwidth,
            )
        })
        .collect();
    // Per-user folders, so two users can run the demo on one machine at once.
    let user = tierfs::config::user_name().unwrap();
    let (nvme, pfs) = (
        format!("/tmp/tierfs-demo-{user}-nvme"),
        format!("/tmp/tierfs-demo-{user}-pfs"),
    );
    assert_eq!(
        tiers,
        [
            ("nvme", nvme.as_str(), true, Some(2e9)),
            ("pfs", pfs.as_str(), true, Some(1e9)),
        ]
    );
    assert!(c.tiers.iter().all(|t| t.read_bandwidth.is_some()));

    let four = MountConfig::load(&file.with_file_name("four-nvme-lustre.toml")).unwrap();
    assert_eq!(four.tiers.len(), 5);
    assert_eq!(four.placement.layout, Layout::Stripe);
}

#[test]
fn unknown_key() {
    refused(
        &format!("{GOOD_TIERS}speed = \"2GB/s\"\n"),
        "speed",
        &["unknown field"],
    );
    let err = refused(
        "[[tier]]\nname = \"nvme\"\npath = \"/a\"\nwrite_bandwith = \"2GB/s\"\n",
        "write_bandwith",
        &["unknown field", "write_bandwidth"],
    );
    // The line and column of the key.
    assert!(err.starts_with(&format!("{SOURCE}:4:1:")), "{err}");
    refused(
        &format!("{GOOD_TIERS}[mount]\nthread = 4\n"),
        "thread",
        &["unknown field"],
    );
    refused(
        &format!("{GOOD_TIERS}[placment]\n"),
        "placment",
        &["unknown field"],
    );
}

#[test]
fn toml_syntax_error_has_line_and_column() {
    let err = refused("[[tier]]\nname = \"nvme\"\npath = /a\n", ":3:8:", &[]);
    assert!(err.contains("path = /a"), "{err}");
}

#[test]
fn duplicate_tier_name() {
    refused(
        "[[tier]]\nname = \"nvme\"\npath = \"/a\"\n[[tier]]\nname = \"nvme\"\npath = \"/b\"\n",
        "tier[1].name",
        &["\"nvme\"", "tier[0]"],
    );
}

#[test]
fn bad_tier_name() {
    for bad in ["", "my tier", "a/b", "..", &"x".repeat(33)] {
        refused(
            &format!("[[tier]]\nname = {bad:?}\npath = \"/a\"\n"),
            "tier[0].name",
            &["1 to 32"],
        );
    }
}

#[test]
fn relative_path() {
    refused(
        &format!("{GOOD_TIERS}[[tier]]\nname = \"x\"\npath = \"scratch/tierfs\"\n"),
        "tier[2].path",
        &["\"scratch/tierfs\"", "absolute"],
    );
}

#[test]
fn duplicate_path() {
    refused(
        "[[tier]]\nname = \"a\"\npath = \"/x/y\"\n[[tier]]\nname = \"b\"\npath = \"/x//y/\"\n",
        "tier[1].path",
        &["tier[0]"],
    );
}

#[test]
fn nested_tier_paths() {
    refused(
        "[[tier]]\nname = \"a\"\npath = \"/scratch\"\n[[tier]]\nname = \"b\"\npath = \"/scratch/b\"\n",
        "tier[1].path",
        &["inside", "tier[0]", "/scratch/a"],
    );
    refused(
        "[[tier]]\nname = \"a\"\npath = \"/scratch/a\"\n[[tier]]\nname = \"b\"\npath = \"/scratch\"\n",
        "tier[1].path",
        &["contains", "tier[0]"],
    );
}

#[test]
fn bad_bandwidth() {
    for (bad, why) in [
        ("2GB", "/s"),
        ("0GB/s", "greater than zero"),
        ("-1GB/s", "negative"),
        ("fast", "/s"),
        ("2Gb/s", "bits"),
    ] {
        refused(
            &format!("[[tier]]\nname = \"nvme\"\npath = \"/a\"\nwrite_bandwidth = {bad:?}\n"),
            "tier[0].write_bandwidth",
            &[&format!("{bad:?}"), why, "500MB/s"],
        );
    }
    refused(
        &format!("{GOOD_TIERS}read_bandwidth = 2000000000\n"),
        "tier[1].read_bandwidth",
        &["/s"],
    );
}

#[test]
fn bad_size() {
    for bad in ["lots", "-1GiB", "1.5", "100000000000T"] {
        refused(
            &format!("[[tier]]\nname = \"nvme\"\npath = \"/a\"\ncapacity = {bad:?}\n"),
            "tier[0].capacity",
            &[&format!("{bad:?}"), "800GiB"],
        );
    }
    refused(
        "[[tier]]\nname = \"nvme\"\npath = \"/a\"\ncapacity = \"0\"\n",
        "tier[0].capacity",
        &["greater than zero"],
    );
    refused(
        &format!("{GOOD_TIERS}[placement]\nlayout = \"stripe\"\nstripe_unit = \"1000\"\n"),
        "placement.stripe_unit",
        &["\"1000\"", "4096", "64KiB", "1GiB"],
    );
}

#[test]
fn unset_variable() {
    // Any variable of the environment expands; these are set nowhere.
    for v in ["TIERFS_TEST_UNSET_PROJECT", "TIERFS_TEST_UNSET_JOBID"] {
        assert!(std::env::var_os(v).is_none(), "{v} is set");
    }
    refused(
        "[[tier]]\nname = \"pfs\"\npath = \"/lus/${TIERFS_TEST_UNSET_PROJECT}/tierfs\"\n",
        "tier[0].path",
        &["${TIERFS_TEST_UNSET_PROJECT}, which is not set in the environment"],
    );
    refused(
        &format!("{GOOD_TIERS}[mount]\nlog_file = \"/tmp/${{TIERFS_TEST_UNSET_JOBID}}.log\"\n"),
        "mount.log_file",
        &["${TIERFS_TEST_UNSET_JOBID}, which is not set"],
    );
}

#[test]
fn zero_tiers() {
    refused("", "tier", &["[[tier]]"]);
    refused("[mount]\nthreads = 4\n", "tier", &["at least one"]);
}

#[test]
fn bad_layout() {
    refused(
        &format!("{GOOD_TIERS}[placement]\nlayout = \"striped\"\n"),
        "placement.layout",
        &["\"striped\"", "\"whole-file\"", "\"stripe\""],
    );
}

#[test]
fn bad_mount_section() {
    refused(
        &format!("{GOOD_TIERS}[mount]\nstats_dir = \"a/b\"\n"),
        "mount.stats_dir",
        &[],
    );
    refused(
        &format!("{GOOD_TIERS}[mount]\nthreads = 0\n"),
        "mount.threads",
        &["1 to 256"],
    );
}

// ---------------------------------------------------------------------------------------
// prepare_tier_dirs against real folders.

fn one_tier(dir: &Path, create: bool) -> MountConfig {
    let text = format!(
        "[[tier]]\nname = \"nvme\"\npath = {:?}\ncreate = {create}\n",
        dir
    );
    MountConfig::parse(&text, Path::new("/etc/tierfs/prepare.toml")).unwrap()
}

fn prepare_err(c: &MountConfig) -> String {
    c.prepare_tier_dirs()
        .expect_err("prepare_tier_dirs accepted it")
        .to_string()
}

#[test]
fn prepare_missing_without_create() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nvme");
    let err = prepare_err(&one_tier(&dir, false));
    assert!(err.contains("tier 'nvme'"), "{err}");
    assert!(err.contains(&dir.display().to_string()), "{err}");
    assert!(err.contains("create = true"), "{err}");
    assert!(!dir.exists());
}

#[test]
fn prepare_missing_parent_is_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("not-mounted");
    let dir = parent.join("tierfs");
    let err = prepare_err(&one_tier(&dir, true));
    assert!(err.contains("tier 'nvme'"), "{err}");
    assert!(
        err.contains(&format!("parent folder {}", parent.display())),
        "{err}"
    );
    assert!(!parent.exists());
}

#[test]
fn prepare_creates_the_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nvme");
    let c = one_tier(&dir, true);
    c.prepare_tier_dirs().unwrap();
    assert!(dir.is_dir());
    // And again, now that it exists.
    c.prepare_tier_dirs().unwrap();
    one_tier(&dir, false).prepare_tier_dirs().unwrap();
}

#[test]
fn prepare_refuses_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("nvme");
    fs::write(&file, b"").unwrap();
    let err = prepare_err(&one_tier(&file, true));
    assert!(err.contains("not a directory"), "{err}");
}

#[test]
fn prepare_refuses_a_read_only_folder() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nvme");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o555)).unwrap();
    // root may write anyway; then there is nothing to check.
    let writable = tempfile::tempfile_in(&dir).is_ok();
    if !writable {
        let err = prepare_err(&one_tier(&dir, false));
        assert!(err.contains("not writable"), "{err}");
    }
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn prepare_refuses_tiers_that_meet_through_a_symlink() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    let link = tmp.path().join("link");
    fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let text = format!(
        "[[tier]]\nname = \"a\"\npath = {real:?}\n[[tier]]\nname = \"b\"\npath = {link:?}\n"
    );
    let c = MountConfig::parse(&text, Path::new("/etc/tierfs/prepare.toml")).unwrap();
    let err = prepare_err(&c);
    assert!(err.contains("tier 'b'") && err.contains("symlink"), "{err}");
}

/// The batch-job config (docs/jobs/tierfs-node.toml) with the variables its job scripts
/// export: one NVMe folder per job, one PFS folder per node and job, stripes with adapt,
/// scratch mode, no bandwidth stated (probed). Without the job id it names the variable.
#[test]
fn job_config_is_keyed_on_the_job_and_node() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/jobs/tierfs-node.toml");
    let text = fs::read_to_string(&file).unwrap();
    let job = |v: &str| match v {
        "TIERFS_NVME_DIR" => Some("/local/scratch/u/tierfs-tiers".to_string()),
        "TIERFS_PFS_DIR" => Some("/lus/proj/u/tierfs".to_string()),
        "TIERFS_JOB" => Some("4242".to_string()),
        "HOSTNAME" => Some("node7".to_string()),
        _ => None,
    };
    let c = MountConfig::parse_with_vars(&text, &file, &job)
        .unwrap_or_else(|e| panic!("{} does not validate:\n{e}", file.display()));
    let paths: Vec<&Path> = c.tiers.iter().map(|t| t.path.as_path()).collect();
    assert_eq!(
        paths,
        [
            Path::new("/local/scratch/u/tierfs-tiers/nvme-4242"),
            Path::new("/lus/proj/u/tierfs/node7-4242")
        ]
    );
    assert!(c
        .tiers
        .iter()
        .all(|t| t.create && t.read_bandwidth.is_none() && t.write_bandwidth.is_none()));
    assert_eq!(c.placement.layout, Layout::Stripe);
    assert!(c.placement.adapt && c.mount.scratch);
    let no_job = |v: &str| if v == "TIERFS_JOB" { None } else { job(v) };
    let e = MountConfig::parse_with_vars(&text, &file, &no_job)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tier[0].path:") && e.contains("${TIERFS_JOB}, which is not set"),
        "{e}"
    );
}
