//! The site's Slurm prolog and epilog (docs/jobs/tierfs-prolog.sh, tierfs-epilog.sh with
//! docs/jobs/tierfs-prolog.toml) run by real Slurm: a one-node cluster on this machine
//! (tools/slurm-cluster.sh with CLUSTER_PROLOG and CLUSTER_EPILOG, so slurmd runs them as
//! root at allocation and at the end of every job), jobs submitted with `sbatch` by the
//! ordinary user `tierfs-test`. Scenarios, on the one cluster:
//!
//! 1. a job that asks (`--comment=tierfs`): it finds root's mount at the well-known path,
//!    owned by it (mode 0700), writes and reads through it; meanwhile, seen from outside:
//!    the mount is root's with `allow_other`, the daemon runs as root, files are opened in
//!    kernel passthrough, the new files and their backing files are the user's, and another
//!    user (`nobody`) cannot get in; then it ends normally: COMPLETED;
//! 2. a job that does not ask: no mount, nothing made, nothing logged;
//! 3. `scancel` while the job uses its mount: CANCELLED;
//! 4. the time limit (`--time=1`, Slurm's least; submitted first, it runs beside the
//!    others): TIMEOUT;
//! 5. a prolog that fails after mounting (the test's tierfs wrapper fails `tierfs stat`
//!    while a flag file exists): the prolog unmounts and removes what it made, exits 1,
//!    and Slurm drains the node and requeues the job held; the node is then resumed and
//!    the job cancelled.
//!
//! After each: no tierfs daemon of the job runs, nothing is mounted at its mountpoint, its
//! mountpoint, NVMe and PFS tier folders and the prolog's record are gone, the log says
//! what was done, and sentinel folders named like a job's (`job-999999[-NODE]` in the NVMe and
//! PFS bases, `999999` in the mountpoint base) are untouched: the epilog removes only what
//! the prolog recorded.
//!
//! The scripts run as shipped, with a site config (TIERFS_PROLOG_CONF, set by two wrapper
//! scripts slurmd runs) that puts every folder inside the test's folder; the tierfs config
//! as shipped plus stated bandwidths (no probe). Needs what tests/slurm_jobs.rs needs;
//! where something is missing it says SKIP, or fails with TIERFS_REQUIRE_ALL=1 (CI).
mod common;
#[path = "common/slurm.rs"]
mod slurm;
use common::*;
use slurm::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

const USER: &str = "tierfs-test";
/// A job id no job of the test gets: the sentinels are named after it.
const NOT_A_JOB: &str = "999999";

/// What a job does: with `EXPECT=mount`, checks it finds the mount, writes and reads a file
/// through it, copies the mount's stats.json out, says `ready` and waits for `release`
/// (which never comes for the scancel and time-limit jobs); with `EXPECT=none`, checks
/// that there is no mount.
const JOB_SCRIPT: &str = r#"#!/bin/bash
set -eu
M=$SITE_MNT/$SLURM_JOB_ID
OUT=$SLURM_SUBMIT_DIR/job-$SLURM_JOB_ID
mkdir -p "$OUT"
if [ "$EXPECT" = none ]; then
    [ ! -e "$M" ] || { echo "$M is there, though the job did not ask"; exit 1; }
    echo "no mount, as asked"
    exit 0
fi
mountpoint -q "$M"
mkdir "$M/ds"
head -c 4194304 /dev/urandom >"$OUT/ref"
cp "$OUT/ref" "$M/ds/a.bin"
cmp "$OUT/ref" "$M/ds/a.bin"
stat -c '%u %g %a %n' "$M" "$M/ds" "$M/ds/a.bin" >"$OUT/owners"
cp "$M/.tierfs/stats.json" "$OUT/stats.json"
touch "$OUT/ready"
while [ ! -e "$OUT/release" ]; do sleep 0.2; done
cmp "$OUT/ref" "$M/ds/a.bin"
echo "read back after the wait"
"#;

struct Site {
    /// Stopped first when the site is dropped.
    cluster: Option<Cluster>,
    dir: tempfile::TempDir,
    uid: u32,
    gid: u32,
}

impl Drop for Site {
    /// After a failure: the cluster stopped (its jobs cancelled), then whatever is still
    /// mounted under the site detached and its daemons ended, so that the folder can go.
    fn drop(&mut self) {
        drop(self.cluster.take());
        let dir = self.dir.path().to_string_lossy().to_string();
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for mp in info.lines().filter_map(|l| l.split(' ').nth(4)) {
            if mp.starts_with(&dir) {
                let _ = Command::new("umount").arg("-l").arg(mp).status();
            }
        }
        for pid in self.daemons() {
            let _ = Command::new("kill").arg(pid).status();
        }
    }
}

struct Job {
    id: String,
    what: &'static str,
}

impl Site {
    /// The pids of the site's tierfs daemons (started from its copy of the binary).
    fn daemons(&self) -> Vec<String> {
        let exe = self.p("bin/tierfs-real");
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            if std::fs::read_link(e.path().join("exe")).ok().as_deref() == Some(exe.as_path()) {
                out.push(e.file_name().to_string_lossy().to_string());
            }
        }
        out
    }
    fn cluster(&self) -> &Cluster {
        self.cluster
            .as_ref()
            .expect("the cluster runs while the site lives")
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn pfs_base(&self) -> PathBuf {
        self.p(&format!("pfs/{USER}/tierfs"))
    }
    fn mnt(&self, j: &Job) -> PathBuf {
        self.p(&format!("mnt/{}", j.id))
    }
    /// What the prolog makes for a job: mountpoint, NVMe and PFS tier folders, record.
    fn made(&self, j: &Job) -> [PathBuf; 4] {
        [
            self.mnt(j),
            self.p(&format!("nvme/job-{}", j.id)),
            self.pfs_base()
                .join(format!("job-{}-{}", j.id, self.node_name())),
            self.p(&format!("state/job-{}", j.id)),
        ]
    }
    fn out(&self, j: &Job) -> PathBuf {
        self.p(&format!("submit/job-{}", j.id))
    }
    fn log(&self) -> String {
        std::fs::read_to_string(self.p("log/slurm.log")).unwrap_or_default()
    }
    /// The lines of the scripts' log about the job.
    fn log_of(&self, j: &Job) -> Vec<String> {
        let tag = format!(" job {} (", j.id);
        self.log()
            .lines()
            .filter(|l| l.contains(&tag))
            .map(str::to_string)
            .collect()
    }
    fn report(&self, j: &Job) -> String {
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        format!(
            "--- job {} ({}): {}\n--- its output:\n{}\n--- the scripts' log:\n{}\n--- the daemon's log:\n{}",
            j.id,
            j.what,
            self.cluster().show_job(&j.id),
            read(self.p(&format!("submit/slurm-{}.out", j.id))),
            self.log(),
            read(self.p(&format!("log/job-{}.log", j.id))),
        )
    }

    fn as_user(&self, prog: &str, args: &[&str], env: &[(&str, String)]) -> Output {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg("--init-groups")
            .args(["--", "env", "-i"])
            .arg("PATH=/usr/local/bin:/usr/bin:/bin")
            .arg(format!("HOME=/home/{USER}"))
            .arg(format!("USER={USER}"))
            .arg("LC_ALL=C")
            .arg(format!("SLURM_CONF={}", self.cluster().conf().display()))
            .arg(format!("SITE_MNT={}", self.p("mnt").display()));
        for (k, v) in env {
            c.arg(format!("{k}={v}"));
        }
        c.arg(prog)
            .args(args)
            .current_dir(self.p("submit"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn submit(&self, what: &'static str, expect: &str, opts: &[&str]) -> Job {
        let mut args = vec!["--parsable", "--nodes=1", "--ntasks=1", "--cpus-per-task=1"];
        args.extend_from_slice(opts);
        let script = self.p("submit/job.sh");
        args.push(script.to_str().unwrap());
        let o = self.as_user("sbatch", &args, &[("EXPECT", expect.into())]);
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

    fn wait_ready(&self, j: &Job, secs: u64) {
        let ready = self.out(j).join("ready");
        assert!(
            wait_for(secs, || ready.exists()),
            "job {} never used its mount\n{}",
            j.id,
            self.report(j)
        );
    }

    fn wait_ended(&self, j: &Job, secs: u64) -> String {
        self.cluster().wait_ended(&j.id, secs, || self.report(j))
    }

    /// After the job: the epilog has finished (its record gone or its last line logged),
    /// and nothing of the job is left; the sentinels are untouched.
    fn assert_cleaned(&self, j: &Job) {
        let record = &self.made(j)[3];
        assert!(
            wait_for(60, || !record.exists()),
            "job {}: the epilog did not finish\n{}",
            j.id,
            self.report(j)
        );
        let mnt = self.mnt(j);
        let procs = tierfs_processes_for(&mnt);
        assert!(
            procs.is_empty(),
            "job {}: tierfs processes still run: {procs:?}",
            j.id
        );
        assert!(
            !tierfs::daemon::is_mountpoint(&mnt),
            "job {}: {} is still mounted\n{}",
            j.id,
            mnt.display(),
            self.report(j)
        );
        for p in self.made(j) {
            assert!(
                !p.exists(),
                "job {}: {} was not removed\n{}",
                j.id,
                p.display(),
                self.report(j)
            );
        }
        self.assert_sentinels();
    }

    fn sentinels(&self) -> [PathBuf; 3] {
        [
            self.p(&format!("nvme/job-{NOT_A_JOB}")),
            self.pfs_base()
                .join(format!("job-{NOT_A_JOB}-{}", self.node_name())),
            self.p(&format!("mnt/{NOT_A_JOB}")),
        ]
    }

    fn assert_sentinels(&self) {
        for s in self.sentinels() {
            assert_eq!(
                std::fs::read(s.join("kept")).ok().as_deref(),
                Some(&b"not any job's to remove"[..]),
                "{} was touched",
                s.display()
            );
        }
    }

    /// Slurm's name of the node: tools/slurm-cluster.sh names it `hostname -s`.
    fn node_name(&self) -> String {
        text(&Command::new("hostname").arg("-s").output().unwrap())
            .trim()
            .to_string()
    }

    /// The node's state and the reason for it.
    fn node(&self) -> (String, String) {
        let line = text(
            &self
                .cluster()
                .cmd("scontrol", &["show", "node", "-o", &self.node_name()]),
        );
        (field(&line, "State"), line)
    }
}

/// The site: binaries and scripts, the folders the prolog works in, its config, the
/// wrappers slurmd runs, the sentinels; then the cluster with the prolog and epilog.
fn set_up(uid: u32, gid: u32) -> Site {
    let dir = tempfile::Builder::new()
        .prefix("tierfs-prolog-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = dir.path().to_path_buf();
    let p = |rel: &str| d.join(rel);
    for f in ["bin", "etc", "submit", "nvme", "pfs", "mnt"] {
        std::fs::create_dir(p(f)).unwrap();
    }
    std::fs::copy(tierfs_bin(), p("bin/tierfs-real")).unwrap();
    // The tierfs the prolog runs: the real one, except that `stat` fails while the flag
    // file of scenario 5 is there (a failure after the mount is up).
    let wrapper = format!(
        "#!/bin/bash\nif [ \"$1\" = stat ] && [ -e {flag} ]; then echo 'test: stat fails' >&2; exit 1; fi\nexec {real} \"$@\"\n",
        flag = q(&p("etc/fail-stat")),
        real = q(&p("bin/tierfs-real")),
    );
    write_exec(&p("bin/tierfs"), &wrapper);
    for s in ["tierfs-prolog.sh", "tierfs-epilog.sh"] {
        std::fs::copy(repo().join("docs/jobs").join(s), p("bin").join(s)).unwrap();
    }
    let cfg = std::fs::read_to_string(repo().join("docs/jobs/tierfs-prolog.toml")).unwrap();
    let mut stated = String::new();
    for line in cfg.lines() {
        stated.push_str(line);
        stated.push('\n');
        if line.starts_with("path = ") {
            stated.push_str("read_bandwidth = \"1GB/s\"\nwrite_bandwidth = \"1GB/s\"\n");
        }
    }
    assert_eq!(
        stated.matches("write_bandwidth = \"1").count(),
        2,
        "{stated}"
    );
    std::fs::write(p("etc/job.toml"), stated).unwrap();
    let site_conf = format!(
        "TIERFS={}\nTIERFS_CONFIG={}\nNVME_BASE={}\nPFS_BASE={}/%u/tierfs\nMNT_BASE={}\nSTATE_DIR={}\nLOG_DIR={}\n",
        q(&p("bin/tierfs")),
        q(&p("etc/job.toml")),
        q(&p("nvme")),
        q(&p("pfs")),
        q(&p("mnt")),
        q(&p("state")),
        q(&p("log")),
    );
    std::fs::write(p("etc/slurm-prolog.conf"), site_conf).unwrap();
    for s in ["prolog", "epilog"] {
        write_exec(
            &p(&format!("bin/{s}")),
            &format!(
                "#!/bin/sh\nTIERFS_PROLOG_CONF={} exec {}\n",
                q(&p("etc/slurm-prolog.conf")),
                q(&p(&format!("bin/tierfs-{s}.sh")))
            ),
        );
    }
    write_exec(&p("submit/job.sh"), JOB_SCRIPT);
    // The user's own folder on the "PFS", as a site has it; the prolog makes the rest.
    std::fs::create_dir(p(&format!("pfs/{USER}"))).unwrap();
    sh(&format!(
        "chown -R {uid}:{gid} {} {}",
        q(&p("submit")),
        q(&p(&format!("pfs/{USER}")))
    ));
    let cluster = Cluster::start_with(
        &p("cluster"),
        &[
            ("CLUSTER_PROLOG", &p("bin/prolog")),
            ("CLUSTER_EPILOG", &p("bin/epilog")),
        ],
    );
    let site = Site {
        cluster: Some(cluster),
        dir,
        uid,
        gid,
    };
    std::fs::create_dir_all(site.pfs_base()).unwrap();
    for s in site.sentinels() {
        std::fs::create_dir_all(&s).unwrap();
        std::fs::write(s.join("kept"), b"not any job's to remove").unwrap();
    }
    sh(&format!("chown -R {uid}:{gid} {}", q(&site.pfs_base())));
    site
}

fn write_exec(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Scenario 1's look from outside while the job holds its mount.
fn check_mount_from_outside(site: &Site, j: &Job) {
    let mnt = site.mnt(j);
    let ms = mnt.to_string_lossy().to_string();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(&ms))
        .unwrap_or_else(|| panic!("{ms} is not in mountinfo\n{}", site.report(j)));
    assert!(line.contains(" fuse.tierfs "), "{line}");
    assert!(
        line.contains("user_id=0,") && line.contains("allow_other"),
        "not root's mount with allow_other: {line}"
    );
    // The daemon is root, and the prolog recorded it.
    let record = std::fs::read_to_string(&site.made(j)[3]).unwrap();
    let pid = record
        .lines()
        .find_map(|l| l.strip_prefix("pid="))
        .unwrap_or_else(|| panic!("no pid in the record: {record}"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status.lines().any(|l| l.starts_with("Uid:\t0\t")),
        "daemon {pid} is not root: {status}"
    );
    // What the job saw: the mount's root, its folder and file are the user's.
    let owners = std::fs::read_to_string(site.out(j).join("owners")).unwrap();
    let want = [
        format!("{} {} 700 {ms}", site.uid, site.gid),
        format!("{} {} ", site.uid, site.gid),
        format!("{} {} ", site.uid, site.gid),
    ];
    for (l, w) in owners.lines().zip(&want) {
        assert!(l.starts_with(w.as_str()), "owners: {owners}");
    }
    assert_eq!(owners.lines().count(), 3, "{owners}");
    // Kernel passthrough: offered, and the job's opens of its file went there.
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(site.out(j).join("stats.json")).unwrap()).unwrap();
    assert_eq!(
        st["pid"].to_string(),
        pid,
        "stats.json names another daemon"
    );
    assert_eq!(
        st["passthrough"], true,
        "passthrough is off in a root mount"
    );
    let opens: u64 = st["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["passthrough_opens"].as_u64().unwrap())
        .sum();
    assert!(
        opens >= 2,
        "{opens} passthrough opens (cp and cmp made two)"
    );
    // The file's backing file in a tier folder is the user's too.
    let backing: Vec<PathBuf> = site.made(j)[1..3]
        .iter()
        .flat_map(|t| dir_files(t).into_iter().map(move |f| t.join(f)))
        .filter(|f| f.ends_with("ds/a.bin"))
        .collect();
    assert!(!backing.is_empty(), "no backing file of ds/a.bin");
    for b in &backing {
        let m = std::fs::metadata(b).unwrap();
        assert_eq!((m.uid(), m.gid()), (site.uid, site.gid), "{}", b.display());
    }
    // default_permissions and mode 0700: another user is kept out by the kernel.
    let (nobody, _) = user_ids("nobody").expect("user nobody");
    let o = Command::new("setpriv")
        .arg(format!("--reuid={nobody}"))
        .args(["--regid=65534", "--clear-groups", "ls"])
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(
        !o.status.success() && text(&o).contains("Permission denied"),
        "nobody could list the job's mount: {}",
        text(&o)
    );
}

#[test]
fn site_prolog_and_epilog_under_slurm() {
    require!(slurm::missing(USER).map_or(Ok(()), Err));
    require!(user("nobody"));
    let (uid, gid) = user_ids(USER).unwrap();
    let site = set_up(uid, gid);
    let started = Instant::now();

    // 4 first: the time limit runs out while the others run beside it.
    let limit = site.submit("time limit", "mount", &["--comment=tierfs", "--time=1"]);
    site.wait_ready(&limit, 120);

    // 1. A job that asks, ending normally.
    let t = Instant::now();
    let j = site.submit(
        "asks, ends normally",
        "mount",
        &["--comment=tierfs", "--time=5"],
    );
    site.wait_ready(&j, 240);
    check_mount_from_outside(&site, &j);
    std::fs::write(site.out(&j).join("release"), b"").unwrap();
    let st = site.wait_ended(&j, 120);
    assert_eq!(st, "COMPLETED", "{}", site.report(&j));
    site.assert_cleaned(&j);
    let log = site.log_of(&j).join("\n");
    for want in ["prolog job", "mounted ", "unmounted ", "removed ", "done"] {
        assert!(log.contains(want), "no '{want}' in the log: {log}");
    }
    eprintln!("scenario 1 (asks, normal end): ok in {:.0?}", t.elapsed());

    // 2. A job that does not ask.
    let t = Instant::now();
    let j = site.submit(
        "does not ask",
        "none",
        &["--comment=other words", "--time=5"],
    );
    let st = site.wait_ended(&j, 240);
    assert_eq!(st, "COMPLETED", "{}", site.report(&j));
    assert!(site.log_of(&j).is_empty(), "{:?}", site.log_of(&j));
    for p in site.made(&j) {
        assert!(
            !p.exists(),
            "{} was made for a job that did not ask",
            p.display()
        );
    }
    eprintln!("scenario 2 (does not ask): ok in {:.0?}", t.elapsed());

    // 3. scancel while the job uses its mount.
    let t = Instant::now();
    let j = site.submit("scancel", "mount", &["--comment=tierfs", "--time=5"]);
    site.wait_ready(&j, 240);
    assert!(tierfs::daemon::is_mountpoint(&site.mnt(&j)));
    let o = site.as_user("scancel", &[&j.id], &[]);
    assert!(o.status.success(), "scancel: {}", text(&o));
    let st = site.wait_ended(&j, 120);
    assert_eq!(st, "CANCELLED", "{}", site.report(&j));
    site.assert_cleaned(&j);
    eprintln!("scenario 3 (scancel): ok in {:.0?}", t.elapsed());

    // 5. The prolog fails after mounting.
    let t = Instant::now();
    std::fs::write(site.p("etc/fail-stat"), b"").unwrap();
    let j = site.submit("prolog fails", "mount", &["--comment=tierfs", "--time=5"]);
    assert!(
        wait_for(120, || site.node().0.contains("DRAIN")),
        "the node was not drained: {}\n{}",
        site.node().1,
        site.report(&j)
    );
    assert!(site.node().1.contains("Prolog error"), "{}", site.node().1);
    let log = site.log_of(&j).join("\n");
    assert!(
        log.contains("FAILED (exit 1)") && log.contains("unmounted "),
        "the prolog did not undo its mount: {log}"
    );
    site.assert_cleaned(&j);
    assert!(!site.out(&j).join("ready").exists(), "the job ran");
    std::fs::remove_file(site.p("etc/fail-stat")).unwrap();
    let o = site.cluster().cmd("scancel", &[&j.id]);
    assert!(o.status.success(), "scancel: {}", text(&o));
    let o = site.cluster().cmd(
        "scontrol",
        &[
            "update",
            &format!("nodename={}", site.node_name()),
            "state=resume",
        ],
    );
    assert!(o.status.success(), "resume: {}", text(&o));
    eprintln!("scenario 5 (prolog fails): ok in {:.0?}", t.elapsed());

    // 6. A cause on the user's side (the job's PFS folder is there already, made by the
    // user): the job is cancelled, the node stays up, the user's folder stays.
    let t = Instant::now();
    let next = (j.id.parse::<u64>().unwrap() + 1).to_string();
    let pre = site
        .pfs_base()
        .join(format!("job-{next}-{}", site.node_name()));
    let o = site.as_user("mkdir", &["-p", pre.to_str().unwrap()], &[]);
    assert!(o.status.success(), "mkdir as the user: {}", text(&o));
    let j = site.submit(
        "user's side refuses",
        "mount",
        &["--comment=tierfs", "--time=5"],
    );
    assert_eq!(j.id, next, "job ids are not consecutive in this cluster");
    let st = site.wait_ended(&j, 120);
    assert_eq!(st, "CANCELLED", "{}", site.report(&j));
    assert!(
        !site.node().0.contains("DRAIN"),
        "a refusal on the user's side drained the node: {}",
        site.node().1
    );
    let log = site.log_of(&j).join("\n");
    assert!(log.contains("REFUSED: "), "no REFUSED line: {log}");
    assert!(pre.is_dir(), "the user's own folder was removed");
    let [mnt, nvme, _, record] = site.made(&j);
    for p in [mnt, nvme, record] {
        assert!(!p.exists(), "{} left after a refusal", p.display());
    }
    assert!(!site.out(&j).join("ready").exists(), "the job ran");
    eprintln!(
        "scenario 6 (the user's side refuses): ok in {:.0?}",
        t.elapsed()
    );

    // 4. The time limit.
    let st = site.wait_ended(&limit, 240);
    assert_eq!(st, "TIMEOUT", "{}", site.report(&limit));
    site.assert_cleaned(&limit);
    eprintln!("scenario 4 (time limit): ok");

    assert_eq!(site.daemons(), Vec::<String>::new(), "tierfs daemons left");
    eprintln!("all prolog scenarios passed in {:.0?}", started.elapsed());
}
