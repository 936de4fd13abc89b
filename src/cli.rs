//! The command line: parse with clap, validate, call the library, map failures to exit
//! codes (0 ok, 2 bad usage or config, 1 runtime failure).

use crate::config::MountConfig;
use crate::daemon::{self, Failure, MountOptions};
use crate::probe::{self, ProbeOptions};
use crate::stats::Snapshot;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `tierfs --version`: the crate version and the commit it was built from (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("TIERFS_GIT_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "tierfs",
    version = VERSION,
    about = "Pool node-local NVMe and a parallel file system into one bandwidth-aware tier for DeepSpeed swap files",
    long_about = "Pool node-local NVMe and a parallel file system into one bandwidth-aware tier for DeepSpeed swap files.\n\ntierfs is a FUSE file system over tier folders: a node's NVMe drives and a folder on the cluster's parallel file system (Lustre, GPFS, VAST, NFS). Each tier gets a share of every file in proportion to its bandwidth, measured or given in the config, so all tiers work at once. Mount it once per node before training and set DeepSpeed ZeRO-Infinity's nvme_path to the mountpoint; unmodified DeepSpeed then swaps through every tier.",
    after_help = "Examples:\n  tierfs mount --config mount-configs/demo.toml /tmp/tierfs-demo-$USER\n  tierfs ds-config /tmp/tierfs-demo-$USER --ranks 4 > ds-offload.json\n  tierfs stat /tmp/tierfs-demo-$USER --watch 1\n  tierfs record /tmp/tierfs-demo-$USER --out run.jsonl --interval 1\n  tierfs plot run.jsonl --out run.png\n  tierfs unmount /tmp/tierfs-demo-$USER\n\nExit status: 0 ok, 2 bad usage or config, 1 runtime failure.\nEvery mount serves its stats under MOUNTPOINT/.tierfs/ (tiers, files, config, stats.json, metrics)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Mount the tiers of a config at MOUNTPOINT; returns once the mount answers.
    #[command(
        after_help = "Examples:\n  mkdir -p /tmp/tierfs-demo-$USER && tierfs mount --config mount-configs/demo.toml /tmp/tierfs-demo-$USER\n  tierfs mount --force --config node.toml /local/tierfs     # after a job died: clear the dead mount\n  tierfs mount --foreground --config node.toml /local/tierfs  # stay attached (batch job steps)\n  tierfs mount --scratch --config job.toml /local/tierfs-$SLURM_JOB_ID  # swap files: gone at unmount\n  mount -t fuse.tierfs -o allow_other node.toml /local/tierfs   # through mount(8) (see man tierfs)\n\nThe daemon goes to the background once the mount answers; it logs to the config's\nlog_file or <first tier>/.tierfs-meta/daemon.log. On SIGTERM it unmounts itself\n(scratch: and removes the tier folders). A second daemon on the same tier folders is\nrefused; a lock left by a killed daemon of this host is taken over."
    )]
    Mount {
        /// The TOML config naming the tiers.
        #[arg(long, short)]
        config: PathBuf,
        /// Where to mount (an existing, empty directory).
        mountpoint: PathBuf,
        /// Stay attached and log to stderr (or the config's log_file).
        #[arg(long, short)]
        foreground: bool,
        /// Clear a dead tierfs mount left at MOUNTPOINT by a killed daemon.
        #[arg(long)]
        force: bool,
        /// Measure tiers again even where a probe result is cached.
        #[arg(long)]
        reprobe: bool,
        /// Mount even if a tier (not the first) is missing or unusable: it is left out,
        /// files with pieces on it answer EIO (also `degraded = true` under [mount]).
        #[arg(long)]
        degraded: bool,
        /// Take over tier locks that a daemon on another host holds, as their lock files
        /// say (only when that daemon is surely gone: its node crashed or was rebooted).
        #[arg(long)]
        break_lock: bool,
        /// Scratch data: unmounting discards it and removes the tier folders and the
        /// mountpoint (also `scratch = true` under [mount]).
        #[arg(long, conflicts_with = "no_scratch")]
        scratch: bool,
        /// Keep the data at unmount even if the config says `scratch = true`.
        #[arg(long)]
        no_scratch: bool,
        /// Let other users in (also `allow_other = true` under [mount]; a non-root user
        /// needs `user_allow_other` in /etc/fuse.conf).
        #[arg(long)]
        allow_other: bool,
    },
    /// Unmount and wait until the daemon has exited.
    #[command(
        after_help = "Example:\n  tierfs unmount /tmp/tierfs-demo-$USER\n\nA plain `umount` or `fusermount3 -u` is also safe. A dead mount (daemon killed)\nis cleared too (also `fusermount3 -uz MOUNTPOINT` or `tierfs mount --force ...`).\nRoot can unmount any user's tierfs mount (an epilog): mounts are found in\n/proc/self/mountinfo, and the daemon is waited for as the mount's owner sees it.\nExits 1 naming the files when the daemon could not write cached data back\n(a plain umount leaves that in the daemon's log)."
    )]
    Unmount {
        /// The tierfs mountpoint.
        mountpoint: PathBuf,
        /// Name of the stats folder if the config changed it.
        #[arg(long, default_value = ".tierfs")]
        stats_dir: String,
    },
    /// Measure sequential read and write bandwidth (O_DIRECT, 1 MiB, queue depth 8).
    #[command(
        after_help = "Examples:\n  tierfs probe /local/scratch /lus/proj/me\n  tierfs probe --config mount-configs/demo.toml --json"
    )]
    Probe {
        /// Probe the tiers of this config (results are cached in each tier).
        #[arg(long, short, conflicts_with = "dirs")]
        config: Option<PathBuf>,
        /// Directories to probe.
        dirs: Vec<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Ignore cached results.
        #[arg(long)]
        fresh: bool,
        /// Test file size (e.g. 1GiB).
        #[arg(long, default_value = "1GiB")]
        size: String,
        /// Minimum seconds per direction.
        #[arg(long, default_value_t = 3.0)]
        secs: f64,
    },
    /// Validate a config and say what mounting it would do.
    #[command(
        name = "check-config",
        after_help = "Examples:\n  tierfs check-config mount-configs/demo.toml\n  tierfs check-config node.toml /local/tierfs   # also check the mountpoint against the tiers\n\nExit status 2 names every problem found (missing folders, bad values, a mountpoint\nand a tier folder inside one another)."
    )]
    CheckConfig {
        /// The TOML config to check.
        config: PathBuf,
        /// Where it would be mounted: checked against the tier folders too.
        mountpoint: Option<PathBuf>,
    },
    /// Show a mount's per-tier statistics, once or live.
    #[command(
        after_help = "Examples:\n  tierfs stat /tmp/tierfs-demo-$USER                 # per-tier table\n  tierfs stat /tmp/tierfs-demo-$USER --json          # the raw stats.json\n  tierfs stat /tmp/tierfs-demo-$USER --watch 1       # live, like iostat -x; Ctrl-C to stop\n  tierfs stat /tmp/tierfs-demo-$USER --watch 0.5 --count 10\n  tierfs stat /tmp/tierfs-demo-$USER --prom --out /var/lib/node_exporter/tierfs/tierfs-$USER.prom\n\nWith --watch: r/s w/s are backing requests per second, rMB/s wMB/s the bytes through\nthe daemon (MB = 10^6), dev_rMB/s dev_wMB/s the tier's block device (passthrough I/O\nshows only there; '-' without a block device), INFL requests in flight, WAIT requests\nwaiting in the tier's admission queue, PT passthrough files open, SHARE the Eq. 1\nshare, ERR errors in the interval."
    )]
    Stat {
        /// The tierfs mountpoint.
        mountpoint: PathBuf,
        /// Print the raw stats.json.
        #[arg(long, conflicts_with = "watch")]
        json: bool,
        /// Redraw rates every SECS seconds (e.g. 1 or 0.5) until Ctrl-C.
        #[arg(long, value_name = "SECS", value_parser = parse_secs)]
        watch: Option<f64>,
        /// With --watch: stop after N intervals.
        #[arg(long, value_name = "N", requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
        /// Print the metrics in the Prometheus text format (the mount's .tierfs/metrics),
        /// every sample labelled mountpoint="MOUNTPOINT".
        #[arg(long, conflicts_with_all = ["json", "watch"])]
        prom: bool,
        /// With --prom: one more label on every sample, NAME=VALUE (repeatable), e.g.
        /// --label job=$SLURM_JOB_ID.
        #[arg(long, value_name = "NAME=VALUE", requires = "prom", value_parser = crate::prom::parse_label)]
        label: Vec<(String, String)>,
        /// Write to FILE instead of stdout: a temporary file renamed over FILE, mode 0644
        /// (for node_exporter's textfile collector).
        #[arg(long, value_name = "FILE", conflicts_with = "watch")]
        out: Option<PathBuf>,
        /// Name of the stats folder if the config changed it.
        #[arg(long, default_value = ".tierfs")]
        stats_dir: String,
    },
    /// Print DeepSpeed offload and aio settings chosen for this mount (JSON on stdout, reasons on stderr).
    #[command(
        name = "ds-config",
        after_help = "Examples:\n  tierfs ds-config /local/tierfs --ranks 4 > ds-offload.json\n  tierfs ds-config /local/tierfs --ranks 4 2>/dev/null | jq .aio\n\nPrints the `zero_optimization` offload blocks (offload_param, offload_optimizer with\ndevice nvme and nvme_path = MOUNTPOINT, buffer counts, sub_group_size) and the `aio`\nblock, chosen from the mount's tiers (stats.json), its FUSE threads (.tierfs/config)\nand the ranks per node: about 8 requests in flight per tier, all ranks together below\nthe FUSE threads. Each value's reason goes to stderr as a `#` line, so stdout is pure\nJSON to merge into your DeepSpeed config."
    )]
    DsConfig {
        /// The tierfs mountpoint (becomes nvme_path).
        mountpoint: PathBuf,
        /// Ranks per node sharing the mount (default: $LOCAL_WORLD_SIZE,
        /// $SLURM_NTASKS_PER_NODE, ... or the GPUs in /dev, else 1).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=4096))]
        ranks: Option<u64>,
        /// Name of the stats folder if the config changed it.
        #[arg(long, default_value = ".tierfs")]
        stats_dir: String,
    },
    /// Sample a mount's stats periodically into a JSON-lines or CSV file.
    #[command(
        after_help = "Examples:\n  tierfs record /local/tierfs --out run.jsonl                 # every second until Ctrl-C\n  tierfs record /local/tierfs --out run.csv --interval 0.5 --duration 600\n  tierfs record /local/tierfs --out run.jsonl & REC=$!; ...; kill $REC\n\nEach sample holds every tier's counters (bytes, requests, in flight, errors, share,\nused, free, device bytes) and the MB/s since the previous sample. JSON lines: one\nobject per sample. CSV (chosen by a .csv name or --format csv): one row per tier and\nsample. Every sample is flushed, so a recording stopped with Ctrl-C or kill is\ncomplete up to its last line. `tierfs plot` draws it."
    )]
    Record {
        /// The tierfs mountpoint.
        mountpoint: PathBuf,
        /// The file to write (replaced if it exists).
        #[arg(long, short)]
        out: PathBuf,
        /// Seconds between samples.
        #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_secs)]
        interval: f64,
        /// Stop after SECS seconds (default: run until Ctrl-C or the mount goes away).
        #[arg(long, value_name = "SECS", value_parser = parse_secs)]
        duration: Option<f64>,
        /// File format (default: csv for a .csv name, else jsonl).
        #[arg(long, value_enum)]
        format: Option<crate::monitor::Format>,
        /// Name of the stats folder if the config changed it.
        #[arg(long, default_value = ".tierfs")]
        stats_dir: String,
    },
    /// Draw a recording as a PNG: per-tier read and write MB/s and shares over time.
    #[command(
        after_help = "Example:\n  tierfs plot run.jsonl --out run.png\n\nThree panels: read MB/s and write MB/s per tier, and the share of the bytes each\ntier moved (thick) against its Eq. 1 share (thin). Tiers with passthrough files on a\nblock device are drawn from the device counters, marked (device). Needs no fonts."
    )]
    Plot {
        /// A recording from `tierfs record` (JSON lines or CSV).
        file: PathBuf,
        /// The PNG to write.
        #[arg(long, short)]
        out: PathBuf,
        /// Title at the top (default: the recording's file name).
        #[arg(long)]
        title: Option<String>,
    },
    /// Check the tier folders offline: every file's pieces agree; --repair fixes what is safe.
    #[command(
        after_help = "Examples:\n  tierfs unmount /local/tierfs && tierfs fsck --config node.toml\n  tierfs fsck --config node.toml --repair\n\nReads the tier folders without a daemon (it refuses while a daemon holds them):\nstripe pieces present on every tier of their pattern with one layout and file id\n(pieces of one file left at two paths by an interrupted rename are named), no whole file\non two tiers, no file/folder clash across tiers, folders mirrored on every tier, no\nleftover .tierfs-tmp-* temporaries, layout xattrs that parse and name the config's\ntiers. One line per problem (PROBLEM or REPAIRED, the path, the tier's backing path,\nwhat to do), then a summary. --repair moves split pieces back together, mirrors\nmissing folders, removes leftover\ntemporaries and identical duplicates, creates missing stripe pieces empty (their\nbytes are lost: they read as zeros), and renames conflicting copies to\nNAME.tierfs-conflict-TIER as a mount would; it never deletes other data.\n\nExit status: 0 clean, 1 problems found (also when --repair fixed them all: run it\nagain to confirm), 2 bad usage or config."
    )]
    Fsck {
        /// The TOML config naming the tiers.
        #[arg(long, short)]
        config: PathBuf,
        /// Fix what is safe to fix (never deletes user data).
        #[arg(long)]
        repair: bool,
    },
    /// Copy every file out of the tiers into a plain folder, without FUSE.
    #[command(
        after_help = "Examples:\n  tierfs export --config node.toml /scratch/rescued\n  tierfs export --config node.toml --force /scratch/rescued   # write over an earlier copy\n\nReassembles striped files (missing stripes read as zeros), recreates folders,\nsymlinks and FIFOs with their modes, times, owners (as root) and user.* xattrs\n(not user.tierfs.*), and prints the counts. Copies that a mount would rename aside\nare exported as NAME.tierfs-conflict-TIER. Export only reads the tiers, so it also\nworks while they are mounted, but then writes in flight through the mount may be\nmissing from the copy, or in it only in part: unmount first for an exact copy."
    )]
    Export {
        /// The TOML config naming the tiers.
        #[arg(long, short)]
        config: PathBuf,
        /// The folder to copy into (created if missing; must be empty without --force).
        dest: PathBuf,
        /// Export into a non-empty DEST, replacing files of the same names.
        #[arg(long)]
        force: bool,
    },
    /// Print the manual page, or write one page per command into a folder.
    #[command(
        after_help = "Examples:\n  tierfs man | man -l -                              # read it now\n  tierfs man --dir ~/.local/share/man/man1           # install for yourself, then: man tierfs\n  sudo tierfs man --dir /usr/local/share/man/man1    # install for everyone\n\nThe pages are made from the same definitions as --help, so they match this binary.\ntierfs.1 lists every command and covers the mount helper (mount -t fuse.tierfs,\nfstab), the environment and the exit status; --dir adds tierfs-COMMAND.1 pages."
    )]
    Man {
        /// Write tierfs.1 and tierfs-COMMAND.1 for every command into DIR (created if
        /// missing) instead of printing tierfs.1.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  tierfs completions bash > ~/.local/share/bash-completion/completions/tierfs\n  tierfs completions zsh > ~/.zfunc/_tierfs     # with fpath+=(~/.zfunc) before compinit\n  tierfs completions fish > ~/.config/fish/completions/tierfs.fish\n\nThe same scripts are shipped in completions/."
    )]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// A positive, finite number of seconds.
fn parse_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v <= 86_400.0 * 365.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds above 0 (e.g. 1 or 0.5)"
        )),
    }
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let commands: Vec<String> = {
        use clap::CommandFactory;
        Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect()
    };
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    if crate::mount_helper::is_helper_call(&args, &commands) {
        return crate::mount_helper::run(&args);
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match run(cli.command) {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("tierfs: error: {}", f.message);
            f.code
        }
    }
}

fn run(cmd: Cmd) -> Result<(), Failure> {
    match cmd {
        Cmd::Mount {
            config,
            mountpoint,
            foreground,
            force,
            reprobe,
            degraded,
            break_lock,
            scratch,
            no_scratch,
            allow_other,
        } => daemon::mount(&MountOptions {
            config,
            mountpoint,
            foreground,
            force,
            reprobe,
            degraded,
            break_lock,
            scratch: match (scratch, no_scratch) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            },
            allow_other,
        }),
        Cmd::Unmount {
            mountpoint,
            stats_dir,
        } => daemon::unmount(&mountpoint, &stats_dir),
        Cmd::Probe {
            config,
            dirs,
            json,
            fresh,
            size,
            secs,
        } => run_probe(config, dirs, json, fresh, &size, secs),
        Cmd::CheckConfig { config, mountpoint } => check_config(&config, mountpoint.as_deref()),
        Cmd::Stat {
            mountpoint,
            json,
            watch,
            count,
            prom,
            label,
            out,
            stats_dir,
        } => {
            if let Some(secs) = watch {
                return run_watch(&mountpoint, &stats_dir, secs, count);
            }
            let read = |name: &str| {
                let path = mountpoint.join(&stats_dir).join(name);
                std::fs::read_to_string(&path).map_err(|e| {
                    Failure::runtime(format!(
                        "{}: {e} (is {} a tierfs mount?)",
                        path.display(),
                        mountpoint.display()
                    ))
                })
            };
            let text = if json {
                read("stats.json")?
            } else if prom {
                let abs = std::path::absolute(&mountpoint).unwrap_or(mountpoint.clone());
                let mut labels = vec![("mountpoint".to_string(), abs.display().to_string())];
                if let Some((n, _)) = label.iter().find(|(n, _)| n == "mountpoint") {
                    return Err(Failure::usage(format!(
                        "--label {n}=...: every sample already has the label {n}; choose another name"
                    )));
                }
                labels.extend(label);
                crate::prom::add_labels(&read("metrics")?, &labels)
                    .map_err(|e| Failure::runtime(format!("{}: {e}", mountpoint.display())))?
            } else {
                crate::stats::tiers_table(&read_snapshot(&mountpoint, &stats_dir)?)
            };
            match out {
                Some(p) => crate::prom::write_atomic(&p, text.as_bytes())
                    .map_err(|e| Failure::runtime(format!("{}: {e}", p.display()))),
                None => {
                    print!("{text}");
                    Ok(())
                }
            }
        }
        Cmd::DsConfig {
            mountpoint,
            ranks,
            stats_dir,
        } => run_ds_config(&mountpoint, ranks, &stats_dir),
        Cmd::Record {
            mountpoint,
            out,
            interval,
            duration,
            format,
            stats_dir,
        } => run_record(&mountpoint, &stats_dir, &out, interval, duration, format),
        Cmd::Plot { file, out, title } => run_plot(&file, &out, title),
        Cmd::Fsck { config, repair } => crate::export::run_fsck(&config, repair),
        Cmd::Export {
            config,
            dest,
            force,
        } => crate::export::run_export(&config, &dest, force),
        Cmd::Man { dir } => match dir {
            Some(d) => {
                let files = crate::manpage::write_all(&d)
                    .map_err(|e| Failure::runtime(format!("{}: {e}", d.display())))?;
                eprintln!(
                    "tierfs: wrote {} manual pages into {} (man tierfs)",
                    files.len(),
                    d.display()
                );
                Ok(())
            }
            None => {
                let mut page = Vec::new();
                crate::manpage::render_main(&mut page)
                    .and_then(|()| std::io::stdout().write_all(&page))
                    .map_err(|e| Failure::runtime(format!("stdout: {e}")))
            }
        },
        Cmd::Completions { shell } => {
            print_completions(shell, &mut std::io::stdout());
            Ok(())
        }
    }
}

/// Writes the completion script for `shell`.
pub fn print_completions(shell: clap_complete::Shell, out: &mut dyn Write) {
    use clap::CommandFactory;
    clap_complete::generate(shell, &mut Cli::command(), "tierfs", out);
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

fn run_watch(mp: &Path, stats_dir: &str, secs: f64, count: Option<u64>) -> Result<(), Failure> {
    use crate::monitor::{rates, render_watch, Sample};
    use std::io::IsTerminal;
    let tty = std::io::stdout().is_terminal();
    let start = Instant::now();
    let take = || -> Result<(Sample, Instant), Failure> {
        let s = read_snapshot(mp, stats_dir)?;
        let now = Instant::now();
        Ok((
            Sample::from_snapshot(&s, unix_now(), (now - start).as_secs_f64()),
            now,
        ))
    };
    let (mut prev, mut prev_t) = take()?;
    let mount = mp.display().to_string();
    let mut out = std::io::stdout().lock();
    for i in 0.. {
        if count.is_some_and(|c| i >= c) {
            break;
        }
        sleep_until(start + Duration::from_secs_f64(secs * (i + 1) as f64));
        let (cur, now) = take()?;
        let r = rates(&prev, &cur, (now - prev_t).as_secs_f64());
        let screen = render_watch(&mount, &crate::monitor::clock(), &cur, &r);
        let w = if tty {
            write!(out, "\x1b[H\x1b[2J{screen}")
        } else if i > 0 {
            write!(out, "\n{screen}")
        } else {
            write!(out, "{screen}")
        };
        if w.and_then(|_| out.flush()).is_err() {
            // stdout closed (e.g. piped into head): stop quietly.
            return Ok(());
        }
        prev = cur;
        prev_t = now;
    }
    Ok(())
}

fn run_ds_config(mp: &Path, ranks: Option<u64>, stats_dir: &str) -> Result<(), Failure> {
    use crate::dsconfig::{choose, detect_ranks, MountFacts};
    let snap = read_snapshot(mp, stats_dir)?;
    let abs =
        std::path::absolute(mp).map_err(|e| Failure::runtime(format!("{}: {e}", mp.display())))?;
    let cfg_path = mp.join(stats_dir).join("config");
    let cfg_text = std::fs::read_to_string(&cfg_path).unwrap_or_default();
    let threads_note = crate::dsconfig::threads_from_config(&cfg_text)
        .is_none()
        .then(|| {
            format!(
                "{} does not say `threads = N`: assuming the default {}.",
                cfg_path.display(),
                crate::dsconfig::DEFAULT_THREADS
            )
        });
    let (ranks, from) = match ranks {
        Some(n) => (n as usize, "--ranks".to_string()),
        None => detect_ranks(),
    };
    let facts = MountFacts::from_snapshot(&abs, &snap, &cfg_text);
    let c = choose(&facts, ranks, &from);
    let mut err = std::io::stderr().lock();
    for n in threads_note.iter().chain(&c.notes) {
        let _ = writeln!(err, "# {n}");
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&c.config).unwrap_or_default()
    );
    Ok(())
}

fn run_record(
    mp: &Path,
    stats_dir: &str,
    out: &Path,
    interval: f64,
    duration: Option<f64>,
    format: Option<crate::monitor::Format>,
) -> Result<(), Failure> {
    use crate::monitor::{fill_rates, write_header, write_sample, Format, Sample};
    let format = format.unwrap_or_else(|| Format::for_path(out));
    // Fail on a wrong mountpoint before creating the file.
    read_snapshot(mp, stats_dir)?;
    let file = std::fs::File::create(out)
        .map_err(|e| Failure::runtime(format!("{}: {e}", out.display())))?;
    let mut w = std::io::BufWriter::new(file);
    let werr = |e: std::io::Error| Failure::runtime(format!("{}: {e}", out.display()));
    write_header(&mut w, format).map_err(werr)?;
    w.flush().map_err(werr)?;
    eprintln!(
        "tierfs: recording {} every {interval} s into {}{}",
        mp.display(),
        out.display(),
        match duration {
            Some(d) => format!(" for {d} s"),
            None => " until Ctrl-C".to_string(),
        }
    );
    let start = Instant::now();
    let mut prev: Option<(Sample, Instant)> = None;
    let mut n = 0u64;
    loop {
        let due = interval * n as f64;
        if duration.is_some_and(|d| due > d + 1e-9) {
            break;
        }
        sleep_until(start + Duration::from_secs_f64(due));
        let snap = match read_snapshot(mp, stats_dir) {
            Ok(s) => s,
            Err(e) if n > 0 => {
                eprintln!(
                    "tierfs: the mount went away ({}); stopped after {n} samples",
                    e.message
                );
                break;
            }
            Err(e) => return Err(e),
        };
        let now = Instant::now();
        let mut s = Sample::from_snapshot(&snap, unix_now(), (now - start).as_secs_f64());
        if let Some((p, pt)) = &prev {
            fill_rates(p, &mut s, (now - *pt).as_secs_f64());
        }
        write_sample(&mut w, format, &s).map_err(werr)?;
        w.flush().map_err(werr)?;
        prev = Some((s, now));
        n += 1;
    }
    eprintln!("tierfs: {n} samples in {}", out.display());
    Ok(())
}

fn run_plot(file: &Path, out: &Path, title: Option<String>) -> Result<(), Failure> {
    let f = std::fs::File::open(file)
        .map_err(|e| Failure::runtime(format!("{}: {e}", file.display())))?;
    let samples = crate::monitor::read_samples(std::io::BufReader::new(f))
        .map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
    let title = title.unwrap_or_else(|| {
        format!(
            "tierfs: {}",
            file.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        )
    });
    crate::plot::plot(&samples, out, &title).map_err(Failure::runtime)?;
    eprintln!(
        "tierfs: {} ({} samples) -> {}",
        file.display(),
        samples.len(),
        out.display()
    );
    Ok(())
}

/// Reads a mount's `stats.json`.
pub fn read_snapshot(mp: &Path, stats_dir: &str) -> Result<Snapshot, Failure> {
    let path = mp.join(stats_dir).join("stats.json");
    let s = std::fs::read_to_string(&path).map_err(|e| {
        Failure::runtime(format!(
            "{}: {e} (is {} a tierfs mount?)",
            path.display(),
            mp.display()
        ))
    })?;
    serde_json::from_str(&s).map_err(|e| Failure::runtime(format!("{}: {e}", path.display())))
}

fn run_probe(
    config: Option<PathBuf>,
    dirs: Vec<PathBuf>,
    json: bool,
    fresh: bool,
    size: &str,
    secs: f64,
) -> Result<(), Failure> {
    let file_size =
        crate::units::parse_size(size).map_err(|e| Failure::usage(format!("--size: {e}")))?;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(Failure::usage("--secs must be a positive number"));
    }
    let opts = ProbeOptions {
        file_size,
        min_time: Duration::from_secs_f64(secs),
        ..ProbeOptions::default()
    };
    let mut targets: Vec<(String, PathBuf, Option<PathBuf>)> = Vec::new();
    if let Some(c) = config {
        let cfg = MountConfig::load(&c).map_err(|e| Failure::usage(e.to_string()))?;
        cfg.prepare_tier_dirs()
            .map_err(|e| Failure::usage(e.to_string()))?;
        for t in &cfg.tiers {
            let meta = t.path.join(crate::tier::META_DIR);
            std::fs::create_dir_all(&meta)
                .map_err(|e| Failure::runtime(format!("{}: {e}", meta.display())))?;
            targets.push((
                t.name.clone(),
                t.path.clone(),
                Some(crate::tier::Tier::probe_cache(&t.path)),
            ));
        }
    } else if dirs.is_empty() {
        return Err(Failure::usage(
            "give directories to probe, or --config FILE",
        ));
    } else {
        for d in dirs {
            if !d.is_dir() {
                return Err(Failure::usage(format!(
                    "{} is not a directory",
                    d.display()
                )));
            }
            targets.push((d.display().to_string(), d, None));
        }
    }
    let mut rows = Vec::new();
    for (name, dir, cache) in targets {
        if !json {
            eprintln!("tierfs: probing {} ...", dir.display());
        }
        let r = match &cache {
            Some(c) => probe::probe_cached(&dir.join(crate::tier::META_DIR), c, fresh, &opts),
            None => probe::probe_dir(&dir, &opts),
        }
        .map_err(|e| Failure::runtime(e.to_string()))?;
        rows.push((name, dir.display().to_string(), r));
    }
    if json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|(n, p, r)| serde_json::json!({"name": n, "path": p, "read_bps": r.read_bps, "write_bps": r.write_bps, "direct_io": r.direct_io, "measured_at": r.measured_at, "bytes": r.bytes}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", probe::render_table(&rows));
    }
    Ok(())
}

fn check_config(path: &Path, mountpoint: Option<&Path>) -> Result<(), Failure> {
    let cfg = MountConfig::load(path).map_err(|e| Failure::usage(e.to_string()))?;
    // The same checks `tierfs mount` makes, without creating anything.
    let mut problems = cfg.check_tier_dirs();
    if let Some(mp) = mountpoint {
        problems.extend(cfg.mountpoint_overlaps(mp));
    }
    for t in &cfg.tiers {
        let state = match std::fs::metadata(&t.path) {
            Ok(m) if m.is_dir() => "exists",
            Ok(_) => "not a folder",
            Err(_) if t.create && t.path.parent().is_some_and(|p| p.is_dir()) => "will be created",
            Err(_) if t.create => "parent missing",
            Err(_) => "missing",
        };
        let bw = match (t.read_bandwidth, t.write_bandwidth) {
            (None, None) => "probed at mount".to_string(),
            (r, w) => format!(
                "read {} write {}",
                r.or(w).map(crate::units::fmt_rate).unwrap_or_default(),
                w.or(r).map(crate::units::fmt_rate).unwrap_or_default()
            ),
        };
        println!(
            "tier {:<10} {:<40} {:<16} {}",
            t.name,
            t.path.display(),
            state,
            bw
        );
    }
    println!("layout {}", cfg.placement.layout.as_str());
    if cfg.mount.scratch {
        println!("scratch: unmounting discards the data and removes the tier folders");
    }
    if problems.is_empty() {
        println!("{}: ok", path.display());
        Ok(())
    } else {
        Err(Failure::usage(problems.join("\n")))
    }
}

/// A minimal logger: timestamped lines to the config's log file, `TIERFS_LOG_FILE`, or
/// stderr. Level from `TIERFS_LOG` (error, warn, info, debug), default info.
struct Logger {
    out: parking_lot::Mutex<Box<dyn Write + Send>>,
    level: log::LevelFilter,
}

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= self.level
    }
    fn log(&self, r: &log::Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let mut out = self.out.lock();
        let _ = writeln!(
            out,
            "{}.{:03} {:<5} {}",
            now.as_secs(),
            now.subsec_millis(),
            r.level(),
            r.args()
        );
        let _ = out.flush();
    }
    fn flush(&self) {
        let _ = self.out.lock().flush();
    }
}

/// Sets up logging for the daemon (once).
pub fn init_logging(config: &MountConfig) {
    let level = match std::env::var("TIERFS_LOG").as_deref() {
        Ok("error") => log::LevelFilter::Error,
        Ok("warn") => log::LevelFilter::Warn,
        Ok("debug") => log::LevelFilter::Debug,
        _ => log::LevelFilter::Info,
    };
    let target = config
        .mount
        .log_file
        .clone()
        .or_else(|| std::env::var_os("TIERFS_LOG_FILE").map(PathBuf::from));
    let out: Box<dyn Write + Send> = match target.and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    }) {
        Some(f) => Box::new(f),
        None => Box::new(std::io::stderr()),
    };
    if log::set_boxed_logger(Box::new(Logger {
        out: parking_lot::Mutex::new(out),
        level,
    }))
    .is_ok()
    {
        log::set_max_level(level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The scripts shipped in completions/, and the shell each is for.
    const SHIPPED: [(clap_complete::Shell, &str); 3] = [
        (clap_complete::Shell::Bash, "completions/tierfs.bash"),
        (clap_complete::Shell::Zsh, "completions/_tierfs"),
        (clap_complete::Shell::Fish, "completions/tierfs.fish"),
    ];

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_has_help_with_an_example() {
        let cmd = Cli::command();
        for sub in cmd.get_subcommands() {
            let name = sub.get_name();
            assert!(sub.get_about().is_some(), "{name}: no about");
            let after = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(after.contains("tierfs "), "{name}: --help has no example");
            for a in sub.get_arguments() {
                if a.get_id() == "help" || a.get_id() == "version" {
                    continue;
                }
                assert!(
                    a.get_help().is_some(),
                    "{name}: argument {} has no help",
                    a.get_id()
                );
            }
        }
    }

    /// The files in completions/ are what `tierfs completions` prints now. To refresh them
    /// after changing the command line: `TIERFS_UPDATE_COMPLETIONS=1 cargo test --lib cli`.
    #[test]
    fn shipped_completions_are_current() {
        let update = std::env::var_os("TIERFS_UPDATE_COMPLETIONS").is_some();
        for (shell, file) in SHIPPED {
            let mut now = Vec::new();
            print_completions(shell, &mut now);
            assert!(!now.is_empty());
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
            if update {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &now).unwrap();
                continue;
            }
            let shipped = std::fs::read(&path).unwrap_or_default();
            assert!(
                shipped == now,
                "{file} is out of date with the command line; regenerate with \
                 `TIERFS_UPDATE_COMPLETIONS=1 cargo test --lib cli`"
            );
        }
    }

    #[test]
    fn seconds_parse() {
        assert_eq!(parse_secs("0.2"), Ok(0.2));
        assert_eq!(parse_secs("5"), Ok(5.0));
        for bad in ["0", "-1", "nan", "inf", "x", ""] {
            assert!(parse_secs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn watch_flags() {
        let ok = Cli::try_parse_from(["tierfs", "stat", "/m", "--watch", "0.2", "--count", "2"]);
        assert!(ok.is_ok());
        assert!(Cli::try_parse_from(["tierfs", "stat", "/m", "--count", "2"]).is_err());
        assert!(Cli::try_parse_from(["tierfs", "stat", "/m", "--json", "--watch", "1"]).is_err());
        assert!(Cli::try_parse_from(["tierfs", "ds-config", "/m", "--ranks", "0"]).is_err());
        assert!(Cli::try_parse_from(["tierfs", "completions", "zsh"]).is_ok());
    }
}
