//! The Slurm job template (docs/jobs/slurm-deepspeed.sbatch with docs/jobs/tierfs-node.toml)
//! run through real Slurm: a one-node cluster on this machine (tools/slurm-cluster.sh:
//! munged, slurmctld, slurmd, proctrack/cgroup), jobs submitted with `sbatch` by the
//! ordinary user `tierfs-test`, the DeepSpeed swap I/O replay (`tierfs-replay`, every read
//! verified) as the training. Scenarios, one after another on the one cluster:
//!
//! 1. a normal job: mounts, trains, ends; COMPLETED;
//! 2. `scancel` while training: Slurm sends SIGTERM to every process of the job and allows
//!    no new job step; CANCELLED;
//! 3. the time limit: `--time=1` with the template's grace signal (`--signal=B:TERM@40`
//!    here, since a minute is Slurm's least time limit): the script stops training and the
//!    mount step before Slurm does;
//! 4. two jobs of the same user on the node at once, one of them keeping its data
//!    (`KEEP_TIER_DATA=1`): both mounted side by side with their own daemons, the first to
//!    end leaves the other's tier folders byte for byte as they were, then the other ends.
//!
//! After each job: no daemon of it runs, nothing is mounted at its mountpoint, its tier
//! folders and mountpoint are gone (or, where it asked to keep them, still there with the
//! data and without a lock), and folders that belong to nobody's job (a sentinel NVMe and
//! PFS folder beside the jobs') are untouched.
//!
//! The template and config are run as shipped, with the settings a site edits given in the
//! environment (the binaries, where the NVMe and PFS folders are, TRAIN_CMD) and sbatch
//! options for this one-node cluster (one node, one task, no GPU, the time limit and grace
//! signal of scenario 3). The one change to the config: both tiers get a stated bandwidth,
//! so each job skips the 1 GiB probe of each tier (its tier folders are new every job).
//!
//! Needs root, /dev/fuse usable by the user (mode 0666; .ci/run sets it), fusermount3,
//! setpriv, python3, the user `tierfs-test` and Debian's `slurm-wlm` and `munge`. Where one
//! is missing it says SKIP, or fails with TIERFS_REQUIRE_ALL=1 (CI).
mod common;
use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const USER: &str = "tierfs-test";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The cluster; stopped (daemons ended, cgroups removed) on drop.
struct Cluster {
    dir: PathBuf,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        let o = Command::new(repo().join("tools/slurm-cluster.sh"))
            .arg("start")
            .arg(dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "slurm-cluster.sh start: {}", text(&o));
        eprintln!("{}", text(&o).trim());
        Cluster {
            dir: dir.to_path_buf(),
        }
    }
    fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("tools/slurm-cluster.sh"))
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

/// Where the jobs of this test run: binaries, templates, the NVMe and PFS folders, the
/// submit folder. Everything the user touches is the user's.
struct Site {
    /// Stopped first when the site is dropped (see `Drop for Site`).
    cluster: Option<Cluster>,
    dir: tempfile::TempDir,
    uid: u32,
    gid: u32,
    host: String,
}

impl Drop for Site {
    /// After a failure: the cluster is stopped (its jobs cancelled), then whatever is still
    /// mounted under the site is detached, so that the folder can go.
    fn drop(&mut self) {
        drop(self.cluster.take());
        let dir = self.dir.path().to_string_lossy().to_string();
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for mp in info.lines().filter_map(|l| l.split(' ').nth(4)) {
            if mp.starts_with(&dir) {
                let _ = Command::new("umount").arg("-l").arg(mp).status();
            }
        }
    }
}

/// A submitted job and what the template makes of it.
struct Job {
    id: String,
    what: &'static str,
}

impl Site {
    fn cluster(&self) -> &Cluster {
        self.cluster
            .as_ref()
            .expect("the cluster runs while the site lives")
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn nvme_dir(&self) -> PathBuf {
        self.p("nvme/tierfs-tiers")
    }
    fn mountpoint(&self, j: &Job) -> PathBuf {
        self.p(&format!("nvme/tierfs-{}", j.id))
    }
    /// The job's tier folders: NVMe, PFS.
    fn tier_folders(&self, j: &Job) -> [PathBuf; 2] {
        [
            self.nvme_dir().join(format!("nvme-{}", j.id)),
            self.p(&format!("pfs/{}-{}", self.host, j.id)),
        ]
    }
    fn logdir(&self, j: &Job) -> PathBuf {
        self.p(&format!("submit/tierfs-logs-{}", j.id))
    }
    fn output(&self, j: &Job) -> String {
        std::fs::read_to_string(self.p(&format!("submit/slurm-{}.out", j.id))).unwrap_or_default()
    }
    fn daemon_log(&self, j: &Job) -> String {
        std::fs::read_to_string(self.logdir(j).join(format!("tierfs-{}.log", self.host)))
            .unwrap_or_default()
    }
    /// Everything that says what happened to a job, for failure messages.
    fn report(&self, j: &Job) -> String {
        format!(
            "--- job {} ({}): {}\n--- its output:\n{}\n--- its daemon's log:\n{}",
            j.id,
            j.what,
            scontrol_show(self.cluster(), &j.id),
            self.output(j),
            self.daemon_log(j)
        )
    }

    /// Runs `prog args` as the user, in the submit folder, with exactly this environment.
    fn as_user(&self, prog: &str, args: &[&str], env: &[(&str, String)]) -> Output {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg("--init-groups")
            .arg("--")
            .arg("env")
            .arg("-i");
        for (k, v) in self.base_env().iter().chain(env) {
            c.arg(format!("{k}={v}"));
        }
        c.arg(prog)
            .args(args)
            .current_dir(self.p("submit"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// The environment a user's shell would have at submission: the site's settings for
    /// the template (where tierfs is, where the NVMe and PFS folders are).
    fn base_env(&self) -> Vec<(&'static str, String)> {
        let bin = self.p("bin");
        vec![
            (
                "PATH",
                format!(
                    "{}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
                    bin.display()
                ),
            ),
            ("HOME", format!("/home/{USER}")),
            ("USER", USER.into()),
            ("LOGNAME", USER.into()),
            ("LC_ALL", "C".into()),
            ("SLURM_CONF", self.cluster().conf().display().to_string()),
            ("TIERFS", bin.join("tierfs").display().to_string()),
            (
                "TIERFS_CFG",
                self.p("jobs/tierfs-node.toml").display().to_string(),
            ),
            ("NVME_BASE", self.p("nvme").display().to_string()),
            ("TIERFS_PFS_DIR", self.p("pfs").display().to_string()),
            (
                "DS_BASE",
                self.p("submit/ds_base.json").display().to_string(),
            ),
        ]
    }

    /// `sbatch` of the template with `env` and extra sbatch options.
    fn submit(&self, what: &'static str, env: &[(&str, String)], opts: &[&str]) -> Job {
        let script = self.p("jobs/slurm-deepspeed.sbatch");
        let mut args = vec![
            "--parsable",
            "--nodes=1",
            "--ntasks-per-node=1",
            "--cpus-per-task=1",
            "--gpus-per-node=0",
            "--time=5",
        ];
        args.extend_from_slice(opts);
        let script = script.to_str().unwrap();
        args.push(script);
        let o = self.as_user("sbatch", &args, env);
        assert!(o.status.success(), "sbatch ({what}): {}", text(&o));
        let id = String::from_utf8_lossy(&o.stdout)
            .trim()
            .split(';')
            .next()
            .unwrap()
            .to_string();
        eprintln!("submitted job {id}: {what}");
        Job { id, what }
    }

    /// Waits until `pred(state)` holds for the job (JobState=...), up to `secs`.
    fn wait_state(&self, j: &Job, secs: u64, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let st = job_state(self.cluster(), &j.id);
            if pred(&st) {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "job {} is still {st} after {secs} s\n{}",
                j.id,
                self.report(j)
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn wait_ended(&self, j: &Job, secs: u64) -> String {
        // Slurm's passing states too: SIGNALING while a time limit's signals are delivered
        // (seen in CI, between RUNNING and TIMEOUT/FAILED), STAGE_OUT, RESIZING.
        self.wait_state(j, secs, |s| {
            !matches!(
                s,
                "PENDING"
                    | "RUNNING"
                    | "CONFIGURING"
                    | "COMPLETING"
                    | "SUSPENDED"
                    | "SIGNALING"
                    | "STAGE_OUT"
                    | "RESIZING"
                    | ""
            )
        })
    }

    /// Waits until the job's training has written swap files through the mount (seen in
    /// its NVMe tier folder) and the mount is there.
    fn wait_training(&self, j: &Job, secs: u64) {
        let data = self.tier_folders(j)[0].join("data");
        let ok = wait_for(secs, || {
            data.is_dir()
                && !dir_files(&data).is_empty()
                && tierfs::daemon::is_mountpoint(&self.mountpoint(j))
        });
        assert!(ok, "job {} never trained\n{}", j.id, self.report(j));
    }

    /// What a finished job must leave: no daemon, no mount, no pid files; its tier folders
    /// and mountpoint gone, or with `keep` the tier folders there with their data and no
    /// lock; the sentinels untouched.
    fn assert_cleaned(&self, j: &Job, keep: bool) {
        let mp = self.mountpoint(j);
        let procs = tierfs_processes_for(&mp);
        assert!(
            procs.is_empty(),
            "job {}: tierfs processes still run: {procs:?}\n{}",
            j.id,
            self.report(j)
        );
        assert!(
            !tierfs::daemon::is_mountpoint(&mp),
            "job {}: {} is still mounted\n{}",
            j.id,
            mp.display(),
            self.report(j)
        );
        let pids: Vec<_> = std::fs::read_dir(self.logdir(j))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".pid"))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default();
        assert!(pids.is_empty(), "job {}: pid files left: {pids:?}", j.id);
        for f in self.tier_folders(j) {
            if keep {
                assert!(
                    !dir_files(&f.join("data")).is_empty(),
                    "job {} asked to keep its data, but {} holds none\n{}",
                    j.id,
                    f.display(),
                    self.report(j)
                );
                assert!(
                    !f.join(".tierfs-meta/lock").exists(),
                    "job {}: {} is still locked",
                    j.id,
                    f.display()
                );
            } else {
                assert!(
                    !f.exists(),
                    "job {}: tier folder {} was not removed\n{}",
                    j.id,
                    f.display(),
                    self.report(j)
                );
            }
        }
        assert_eq!(
            mp.exists(),
            keep,
            "job {}: mountpoint {} (kept: {keep})\n{}",
            j.id,
            mp.display(),
            self.report(j)
        );
        self.assert_sentinels();
    }

    fn sentinels(&self) -> [PathBuf; 2] {
        [
            self.nvme_dir().join("nvme-sentinel"),
            self.p("pfs/sentinel"),
        ]
    }

    fn assert_sentinels(&self) {
        for s in self.sentinels() {
            assert_eq!(
                std::fs::read(s.join("data/kept.swp")).ok().as_deref(),
                Some(&b"not any job's to remove"[..]),
                "{} was touched",
                s.display()
            );
        }
    }
}

fn scontrol_show(c: &Cluster, id: &str) -> String {
    let o = Command::new("scontrol")
        .args(["show", "job", "-o", id])
        .env("SLURM_CONF", c.conf())
        .output()
        .unwrap();
    text(&o).trim().to_string()
}

/// `JobState` of a job ("" if Slurm does not know it).
fn job_state(c: &Cluster, id: &str) -> String {
    field(&scontrol_show(c, id), "JobState")
}

fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or("")
        .to_string()
}

/// The processes whose command line names `mp` and that run tierfs.
fn tierfs_processes_for(mp: &Path) -> Vec<String> {
    let mp = mp.to_string_lossy().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains("tierfs") && cmd.contains(&mp) && !cmd.contains("cargo") {
            out.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
        }
    }
    out
}

/// Every file under `dir` with its bytes, for "untouched" checks.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    dir_files(dir)
        .into_iter()
        .map(|rel| {
            let b = std::fs::read(dir.join(&rel)).unwrap();
            (rel, b)
        })
        .collect()
}

/// The replay of DeepSpeed's swap I/O: small, every read checked.
const REPLAY: &str = "tierfs-replay \"$TIERFS_MNT/ds\" --ranks 1 --subgroups 4 \
    --subgroup-bytes 1MiB --engine libaio --quiet";

fn tools_missing() -> Option<String> {
    if !is_root() {
        return Some("needs root (starts a Slurm cluster)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    for t in [
        "munged",
        "slurmctld",
        "slurmd",
        "sbatch",
        "scancel",
        "scontrol",
        "srun",
        "fusermount3",
        "setpriv",
        "python3",
    ] {
        if which(t).is_none() {
            return Some(format!(
                "{t} is not installed (apt-get install slurm-wlm munge fuse3 util-linux python3)"
            ));
        }
    }
    if user_ids(USER).is_none() {
        return Some(format!("no user {USER} (useradd -m {USER})"));
    }
    None
}

#[test]
fn job_template_under_slurm() {
    require!(tools_missing().map_or(Ok(()), Err));
    let (uid, gid) = user_ids(USER).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("tierfs-slurm-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cluster = Cluster::start(&dir.path().join("cluster"));
    let site = Site {
        cluster: Some(cluster),
        dir,
        uid,
        gid,
        host: tierfs::config::hostname().unwrap(),
    };
    // The binaries and the templates, where the user can reach them.
    for d in ["bin", "jobs", "submit", "nvme", "pfs"] {
        std::fs::create_dir(site.p(d)).unwrap();
    }
    for b in ["tierfs", "tierfs-replay"] {
        let built = tierfs_bin().with_file_name(b);
        std::fs::copy(&built, site.p("bin").join(b)).unwrap();
    }
    std::fs::copy(
        repo().join("docs/jobs/slurm-deepspeed.sbatch"),
        site.p("jobs/slurm-deepspeed.sbatch"),
    )
    .unwrap();
    let cfg = std::fs::read_to_string(repo().join("docs/jobs/tierfs-node.toml")).unwrap();
    let mut stated = String::new();
    for line in cfg.lines() {
        stated.push_str(line);
        stated.push('\n');
        if line.starts_with("create = true") {
            stated.push_str("read_bandwidth = \"1GB/s\"\nwrite_bandwidth = \"1GB/s\"\n");
        }
    }
    assert_eq!(stated.matches("write_bandwidth").count(), 2, "{stated}");
    std::fs::write(site.p("jobs/tierfs-node.toml"), stated).unwrap();
    std::fs::write(site.p("submit/ds_base.json"), "{\"train_batch_size\": 1}\n").unwrap();
    // The sentinels: folders beside the jobs' that belong to no job.
    std::fs::create_dir(site.nvme_dir()).unwrap();
    for s in site.sentinels() {
        std::fs::create_dir_all(s.join("data")).unwrap();
        std::fs::write(s.join("data/kept.swp"), b"not any job's to remove").unwrap();
    }
    sh(&format!(
        "chown -R {uid}:{gid} {} {} {}",
        q(&site.p("submit")),
        q(&site.p("nvme")),
        q(&site.p("pfs"))
    ));
    let started = Instant::now();

    // 1. A normal job.
    let t = Instant::now();
    let j = site.submit(
        "normal",
        &[("TRAIN_CMD", format!("{REPLAY} --steps 2"))],
        &[],
    );
    let st = site.wait_ended(&j, 180);
    assert_eq!(st, "COMPLETED", "{}", site.report(&j));
    let out = site.output(&j);
    assert!(out.contains("tierfs mounted at"), "{}", site.report(&j));
    let log = site.daemon_log(&j);
    assert!(
        log.contains("signal received: unmounting") && log.contains("scratch: removed tier folder"),
        "{}",
        site.report(&j)
    );
    assert!(site.logdir(&j).join("ds_config.json").exists());
    site.assert_cleaned(&j, false);
    eprintln!("scenario 1 (normal job): ok in {:.0?}", t.elapsed());

    // 2. scancel while training.
    let t = Instant::now();
    let j = site.submit(
        "scancel mid-run",
        &[("TRAIN_CMD", format!("{REPLAY} --steps 100000"))],
        &[],
    );
    site.wait_training(&j, 120);
    let o = site.as_user("scancel", &[&j.id], &[]);
    assert!(o.status.success(), "scancel: {}", text(&o));
    let st = site.wait_ended(&j, 120);
    assert_eq!(st, "CANCELLED", "{}", site.report(&j));
    let log = site.daemon_log(&j);
    assert!(
        log.contains("signal received: unmounting") && log.contains("scratch: removed tier folder"),
        "{}",
        site.report(&j)
    );
    site.assert_cleaned(&j, false);
    eprintln!("scenario 2 (scancel): ok in {:.0?}", t.elapsed());

    // 3. The time limit, with the grace signal.
    let t = Instant::now();
    let j = site.submit(
        "time limit",
        &[("TRAIN_CMD", format!("{REPLAY} --steps 100000"))],
        &["--time=1", "--signal=B:TERM@40"],
    );
    site.wait_training(&j, 120);
    let st = site.wait_ended(&j, 240);
    let out = site.output(&j);
    // The grace signal makes the script clean up and exit 143 (FAILED) before the limit;
    // if Slurm's check comes late the limit itself ends it (TIMEOUT). Either way: clean.
    assert!(
        st == "FAILED" || st == "TIMEOUT",
        "{st}\n{}",
        site.report(&j)
    );
    assert!(
        out.contains("tierfs: cleaning up (exit status 143)"),
        "the script did not clean up on the grace signal\n{}",
        site.report(&j)
    );
    let log = site.daemon_log(&j);
    assert!(
        log.contains("signal received: unmounting") && log.contains("scratch: removed tier folder"),
        "{}",
        site.report(&j)
    );
    site.assert_cleaned(&j, false);
    eprintln!(
        "scenario 3 (time limit): {st} after the grace signal, ok in {:.0?}",
        t.elapsed()
    );

    // 4. Two jobs of the user on the node at once; A keeps its data.
    let t = Instant::now();
    let two_phase = |release: &Path| {
        format!(
            "{REPLAY} --steps 1 && touch \"$LOGDIR/phase1\" && \
             while [ ! -e {r} ]; do sleep 0.2; done && {REPLAY} --steps 1",
            r = q(release)
        )
    };
    let (ra, rb) = (site.p("submit/release-a"), site.p("submit/release-b"));
    let a = site.submit(
        "two at once, A keeps its data",
        &[
            ("TRAIN_CMD", two_phase(&ra)),
            ("KEEP_TIER_DATA", "1".into()),
        ],
        &[],
    );
    let b = site.submit("two at once, B", &[("TRAIN_CMD", two_phase(&rb))], &[]);
    for j in [&a, &b] {
        assert!(
            wait_for(180, || site.logdir(j).join("phase1").exists()),
            "job {} did not get through its first phase\n{}",
            j.id,
            site.report(j)
        );
    }
    // Side by side: both running, both mounted, each with its own daemon.
    for j in [&a, &b] {
        assert_eq!(job_state(site.cluster(), &j.id), "RUNNING");
        assert!(tierfs::daemon::is_mountpoint(&site.mountpoint(j)));
    }
    let daemons = |j: &Job| -> Vec<String> {
        tierfs_processes_for(&site.mountpoint(j))
            .into_iter()
            .filter(|p| p.contains(" mount "))
            .collect()
    };
    let (pa, pb) = (daemons(&a), daemons(&b));
    assert!(pa.len() == 1 && pb.len() == 1, "{pa:?} {pb:?}");
    let before: Vec<_> = site
        .tier_folders(&a)
        .iter()
        .map(|f| contents(&f.join("data")))
        .collect();
    assert!(before.iter().all(|c| !c.is_empty()));
    std::fs::write(&rb, b"").unwrap();
    let st = site.wait_ended(&b, 120);
    assert_eq!(st, "COMPLETED", "{}", site.report(&b));
    site.assert_cleaned(&b, false);
    // B's end (its daemon removing its folders, beside A's) left A alone.
    assert_eq!(job_state(site.cluster(), &a.id), "RUNNING");
    assert!(tierfs::daemon::is_mountpoint(&site.mountpoint(&a)));
    let after: Vec<_> = site
        .tier_folders(&a)
        .iter()
        .map(|f| contents(&f.join("data")))
        .collect();
    assert!(
        before == after,
        "job {}'s tier folders changed when job {} ended",
        a.id,
        b.id
    );
    std::fs::write(&ra, b"").unwrap();
    let st = site.wait_ended(&a, 120);
    assert_eq!(st, "COMPLETED", "{}", site.report(&a));
    site.assert_cleaned(&a, true);
    eprintln!("scenario 4 (two jobs at once): ok in {:.0?}", t.elapsed());

    // Nothing the jobs started is left running (the user's processes that name this site).
    let site_dir = site.p("").to_string_lossy().to_string();
    let mut left = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let uid = std::fs::metadata(e.path()).map(|m| m.uid());
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if uid.ok() == Some(site.uid) && cmd.contains(&site_dir) {
            left.push(cmd);
        }
    }
    assert!(left.is_empty(), "processes of the jobs left: {left:?}");
    eprintln!("all Slurm scenarios passed in {:.0?}", started.elapsed());
}
