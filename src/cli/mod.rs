//! The command line: parse with clap, validate, call the library, map failures to exit
//! codes (0 ok, 2 bad usage or config, 1 runtime failure). What the commands and their
//! arguments are is in [`args`], apart, so the manual pages can be made from it without
//! depending on what the commands do; [`manpage`] makes them. [`mount_helper`] is the
//! same binary called by mount(8) (`mount -t fuse.tierfs`, fstab): another way into the
//! commands, which turns mount's options into a `tierfs mount`, so it lives with them.

pub mod args;
pub mod ctl;
pub mod manpage;
pub mod mount_helper;
pub mod tune;

pub use args::{print_completions, Cli, Cmd, VERSION};

use crate::client::read_snapshot;
use crate::config::MountConfig;
use crate::daemon::{self, MountOptions};
use crate::error::failure::Failure;
use crate::probe::{self, ProbeOptions};
use clap::Parser;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    if mount_helper::is_helper_call(&args, &commands) {
        return mount_helper::run(&args);
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
            options,
            metrics_textfile,
            mountpoint,
            foreground,
            force,
            reprobe,
            degraded,
            break_lock,
            scratch,
            no_scratch,
            allow_other,
            nonempty,
        } => {
            let mut m = MountOptions::new(config, mountpoint);
            m.foreground = foreground;
            m.force = force;
            m.reprobe = reprobe;
            m.degraded = degraded;
            m.break_lock = break_lock;
            m.scratch = match (scratch, no_scratch) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            };
            m.allow_other = allow_other;
            m.nonempty = nonempty;
            mount_with_options(m, &options, metrics_textfile.as_deref())
        }
        Cmd::Run {
            print_library,
            command,
        } => crate::direct::run::run(print_library, &command),
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
        } => match watch {
            Some(secs) => run_watch(&mountpoint, &stats_dir, secs, count),
            None => run_stat(&mountpoint, &stats_dir, json, prom, label, out.as_deref()),
        },
        Cmd::Ctl {
            mountpoint,
            command,
            wait,
            stats_dir,
        } => ctl::run(&mountpoint, &command, wait, &stats_dir),
        Cmd::DsConfig {
            mountpoint,
            ranks,
            stats_dir,
        } => run_ds_config(&mountpoint, ranks, &stats_dir),
        Cmd::Tune(a) => tune::run(a),
        Cmd::Record {
            mountpoint,
            out,
            interval,
            duration,
            format,
            stats_dir,
        } => run_record(&mountpoint, &stats_dir, &out, interval, duration, format),
        Cmd::Plot { file, out, title } => run_plot(&file, &out, title),
        Cmd::Fsck { config, repair } => crate::ondisk::run_fsck(&config, repair),
        Cmd::Export {
            config,
            dest,
            force,
        } => crate::ondisk::run_export(&config, &dest, force),
        Cmd::Man { dir } => run_man(dir.as_deref()),
        Cmd::Completions { shell } => {
            print_completions(shell, &mut std::io::stdout());
            Ok(())
        }
    }
}

/// `tierfs mount` with its `-o` options (the mount helper's grammar) and
/// `--metrics-textfile` applied.
fn mount_with_options(
    mut m: MountOptions,
    options: &[String],
    textfile: Option<&Path>,
) -> Result<(), Failure> {
    let items: Vec<String> = options
        .iter()
        .flat_map(|o| mount_helper::split_options(o))
        .collect();
    for n in mount_helper::apply(&mut m, &items, false)? {
        eprintln!("tierfs: note: {n}");
    }
    if let Some(t) = textfile {
        let item = format!("metrics.textfile={}", t.display());
        let ov = crate::config::parse_option(&item)
            .map_err(|e| Failure::usage(format!("--metrics-textfile: {e}")))?
            .expect("metrics.textfile is a config key");
        m.overrides.push(ov);
    }
    mount_helper::check_source(&m)?;
    daemon::mount(&m)
}

/// `tierfs stat` once: the table, the raw stats.json, or the Prometheus text.
fn run_stat(
    mountpoint: &Path,
    stats_dir: &str,
    json: bool,
    prom: bool,
    label: Vec<(String, String)>,
    out: Option<&Path>,
) -> Result<(), Failure> {
    let read = |name: &str| crate::client::read_stats_file(mountpoint, stats_dir, name);
    let text = if json {
        read("stats.json")?
    } else if prom {
        let abs = std::path::absolute(mountpoint).unwrap_or(mountpoint.to_path_buf());
        let mut labels = vec![("mountpoint".to_string(), abs.display().to_string())];
        if let Some((n, _)) = label.iter().find(|(n, _)| n == "mountpoint") {
            return Err(Failure::usage(format!(
                "--label {n}=...: every sample already has the label {n}; choose another name"
            )));
        }
        labels.extend(label);
        crate::stats::prom::add_labels(&read("metrics")?, &labels)
            .map_err(|e| Failure::runtime(format!("{}: {e}", mountpoint.display())))?
    } else {
        crate::stats::tiers_table(&read_snapshot(mountpoint, stats_dir)?)
    };
    match out {
        Some(p) => crate::stats::prom::write_atomic(p, text.as_bytes())
            .map_err(|e| Failure::runtime(format!("{}: {e}", p.display()))),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// `tierfs man`: the main page on stdout, or every page into a folder.
fn run_man(dir: Option<&Path>) -> Result<(), Failure> {
    match dir {
        Some(d) => {
            let files = manpage::write_all(d)
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
            manpage::render_main(&mut page)
                .and_then(|()| std::io::stdout().write_all(&page))
                .map_err(|e| Failure::runtime(format!("stdout: {e}")))
        }
    }
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
    use crate::client::monitor::Sample;
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
        let v = crate::client::watch::view(&prev, &cur, (now - prev_t).as_secs_f64());
        let screen =
            crate::client::watch::render(&mount, &crate::client::monitor::clock(), &cur, &v);
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
    use crate::client::dsconfig::{choose, detect_ranks, MountFacts};
    let snap = read_snapshot(mp, stats_dir)?;
    let abs =
        std::path::absolute(mp).map_err(|e| Failure::runtime(format!("{}: {e}", mp.display())))?;
    let cfg_path = mp.join(stats_dir).join("config");
    let cfg_text = std::fs::read_to_string(&cfg_path).unwrap_or_default();
    let threads_note = crate::client::dsconfig::threads_from_config(&cfg_text)
        .is_none()
        .then(|| {
            format!(
                "{} does not say `threads = N`: assuming the default {}.",
                cfg_path.display(),
                crate::client::dsconfig::DEFAULT_THREADS
            )
        });
    let (ranks, from) = match ranks {
        Some(n) => (n as usize, "--ranks".to_string()),
        None => detect_ranks(),
    };
    let mut facts = MountFacts::from_snapshot(&abs, &snap, &cfg_text);
    facts.memory =
        crate::client::dsmemory::JobMemory::detect(snap.cache.as_ref().map_or(0, |c| c.used));
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
    format: Option<crate::client::monitor::Format>,
) -> Result<(), Failure> {
    use crate::client::monitor::{fill_rates, write_header, write_sample, Format, Sample};
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
    let samples = crate::client::monitor::read_samples(std::io::BufReader::new(f))
        .map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
    let title = title.unwrap_or_else(|| {
        format!(
            "tierfs: {}",
            file.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        )
    });
    crate::client::plot::plot(&samples, out, &title).map_err(Failure::runtime)?;
    eprintln!(
        "tierfs: {} ({} samples) -> {}",
        file.display(),
        samples.len(),
        out.display()
    );
    Ok(())
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
            .map(|(n, p, r)| serde_json::json!({"name": n, "path": p, "read_bps": r.read_bps, "write_bps": r.write_bps, "direct_io": r.direct_io, "measured_at": r.measured_at, "bytes": r.bytes, "cpu_wait": r.cpu_wait}))
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
    problems.extend(
        crate::daemon::identity_problems(&cfg, &[])
            .into_iter()
            .map(|(_, m)| m),
    );
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
        println!("scratch: unmounting discards the data the mount wrote");
        for (t, plan) in cfg.tiers.iter().zip(crate::daemon::scratch_plans(&cfg)) {
            match plan {
                Ok(p) => println!(
                    "scratch: tier {}: {} {}",
                    t.name,
                    t.path.display(),
                    p.describe()
                ),
                Err(why) => problems.push(why),
            }
        }
    }
    if problems.is_empty() {
        println!("{}: ok", path.display());
        Ok(())
    } else {
        Err(Failure::usage(problems.join("\n")))
    }
}
