//! A one-node Slurm cluster for tests (tools/slurm-cluster.sh) and what the tests ask it:
//! job states, waits, the tierfs processes of a mountpoint.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// stdout and stderr of a finished command, for messages.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The cluster; stopped (jobs cancelled, daemons ended, cgroups removed) on drop.
pub struct Cluster {
    pub dir: PathBuf,
}

impl Cluster {
    /// Starts it in `dir` with `env` for the script (`CLUSTER_PROLOG`, `CLUSTER_EPILOG`).
    pub fn start_with(dir: &Path, env: &[(&str, &Path)]) -> Cluster {
        let mut c = Command::new(repo().join("tools/slurm-cluster.sh"));
        c.arg("start").arg(dir);
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "slurm-cluster.sh start: {}", text(&o));
        eprintln!("{}", text(&o).trim());
        Cluster {
            dir: dir.to_path_buf(),
        }
    }

    pub fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// A Slurm command as root, against this cluster.
    pub fn cmd(&self, prog: &str, args: &[&str]) -> Output {
        Command::new(prog)
            .args(args)
            .env("SLURM_CONF", self.conf())
            .output()
            .unwrap()
    }

    /// `scontrol show job -o ID`.
    pub fn show_job(&self, id: &str) -> String {
        text(&self.cmd("scontrol", &["show", "job", "-o", id]))
            .trim()
            .to_string()
    }

    /// `JobState` of a job ("" if Slurm does not know it).
    pub fn job_state(&self, id: &str) -> String {
        field(&self.show_job(id), "JobState")
    }

    /// Waits until `pred(state)` holds for the job, up to `secs`; `report` says what
    /// happened to it, for the failure message.
    pub fn wait_state(
        &self,
        id: &str,
        secs: u64,
        pred: impl Fn(&str) -> bool,
        report: impl Fn() -> String,
    ) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let st = self.job_state(id);
            if pred(&st) {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} is still {st} after {secs} s\n{}",
                report()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Waits until the job has ended (a state Slurm does not pass through).
    pub fn wait_ended(&self, id: &str, secs: u64, report: impl Fn() -> String) -> String {
        // Slurm's passing states too: SIGNALING while a time limit's signals are delivered
        // (seen in CI, between RUNNING and TIMEOUT/FAILED), STAGE_OUT, RESIZING.
        self.wait_state(
            id,
            secs,
            |s| {
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
            },
            report,
        )
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

/// `KEY=value` of one line of `scontrol show -o`.
pub fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or("")
        .to_string()
}

/// The processes whose command line names `mp` and that run tierfs.
pub fn tierfs_processes_for(mp: &Path) -> Vec<String> {
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

/// What Slurm and a test need on this machine: root, /dev/fuse, the Slurm, munge, FUSE and
/// util-linux tools, and `user`; `None` when all is there, else what is missing.
pub fn missing(user: &str) -> Option<String> {
    if !crate::common::is_root() {
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
        if crate::common::which(t).is_none() {
            return Some(format!(
                "{t} is not installed (apt-get install slurm-wlm munge fuse3 util-linux python3)"
            ));
        }
    }
    if crate::common::user_ids(user).is_none() {
        return Some(format!("no user {user} (useradd -m {user})"));
    }
    None
}
