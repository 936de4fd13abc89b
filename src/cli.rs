//! The command line: parse with clap, validate, call the library, map failures to exit
//! codes (0 ok, 2 bad usage or config, 1 runtime failure).

use crate::config::MountConfig;
use crate::daemon::{self, Failure, MountOptions};
use crate::probe::{self, ProbeOptions};
use crate::stats::Snapshot;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "tierfs",
    version,
    about = "Pool node-local NVMe and a parallel file system into one bandwidth-aware tier for DeepSpeed swap files",
    after_help = "Examples:\n  tierfs mount --config mount-configs/demo.toml /tmp/tierfs-demo\n  tierfs stat /tmp/tierfs-demo\n  tierfs unmount /tmp/tierfs-demo"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Mount the tiers of a config at MOUNTPOINT; returns once the mount answers.
    #[command(
        after_help = "Example:\n  mkdir -p /tmp/tierfs-demo && tierfs mount --config mount-configs/demo.toml /tmp/tierfs-demo"
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
    },
    /// Unmount and wait until the daemon has exited.
    #[command(after_help = "Example:\n  tierfs unmount /tmp/tierfs-demo")]
    Unmount {
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
        after_help = "Example:\n  tierfs check-config mount-configs/demo.toml"
    )]
    CheckConfig { config: PathBuf },
    /// Show a mount's per-tier statistics.
    #[command(after_help = "Example:\n  tierfs stat /tmp/tierfs-demo")]
    Stat {
        mountpoint: PathBuf,
        /// Print the raw stats.json.
        #[arg(long)]
        json: bool,
        #[arg(long, default_value = ".tierfs")]
        stats_dir: String,
    },
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
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
        } => daemon::mount(&MountOptions {
            config,
            mountpoint,
            foreground,
            force,
            reprobe,
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
        Cmd::CheckConfig { config } => check_config(&config),
        Cmd::Stat {
            mountpoint,
            json,
            stats_dir,
        } => {
            let path = mountpoint.join(&stats_dir).join("stats.json");
            if json {
                let s = std::fs::read_to_string(&path).map_err(|e| {
                    Failure::runtime(format!(
                        "{}: {e} (is {} a tierfs mount?)",
                        path.display(),
                        mountpoint.display()
                    ))
                })?;
                print!("{s}");
                return Ok(());
            }
            let snap = read_snapshot(&mountpoint, &stats_dir)?;
            print!("{}", crate::stats::tiers_table(&snap));
            Ok(())
        }
    }
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

fn check_config(path: &Path) -> Result<(), Failure> {
    let cfg = MountConfig::load(path).map_err(|e| Failure::usage(e.to_string()))?;
    let mut problems = Vec::new();
    for t in &cfg.tiers {
        let state = if t.path.is_dir() {
            "exists".to_string()
        } else if t.create && t.path.parent().is_some_and(|p| p.is_dir()) {
            "will be created".to_string()
        } else if t.create {
            problems.push(format!(
                "tier '{}': parent of {} does not exist",
                t.name,
                t.path.display()
            ));
            "parent missing".to_string()
        } else {
            problems.push(format!(
                "tier '{}': {} does not exist; create it or set `create = true`",
                t.name,
                t.path.display()
            ));
            "missing".to_string()
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
        m.level() <= self.level && !m.target().starts_with("fuser")
            || (m.target().starts_with("fuser") && m.level() <= log::Level::Warn)
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
