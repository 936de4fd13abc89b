//! `tierfs tune`: its arguments and output. The sweep itself is [`crate::tune`].

use crate::error::failure::Failure;
use crate::tune::{self, report, Grid, Plan};
use std::io::Write;
use std::path::PathBuf;

/// The arguments of `tierfs tune`.
#[derive(Debug, clap::Args)]
pub struct TuneArgs {
    /// The tierfs mountpoint (what DeepSpeed's nvme_path will be).
    pub mountpoint: PathBuf,
    /// A few points around DeepSpeed's defaults (1M,4M x 8,32 x 1,4; 20 s).
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// Every power of two: 128K..8M x 4..128 x 1..8 (168 points; 300 s).
    #[arg(long)]
    pub full: bool,
    /// Seconds for the whole sweep, shared out over the points (each point writes and
    /// reads at least one file per rank). Default: 90, --quick 20, --full 300.
    #[arg(long, value_name = "SECS")]
    pub budget: Option<f64>,
    /// Bytes per file, one DeepSpeed request (a tensor): e.g. 128MiB. A multiple of
    /// 4 KiB x every thread count.
    #[arg(long, value_name = "SIZE", default_value = "128MiB")]
    pub size: String,
    /// Block sizes to try instead of the grid's (comma-separated, e.g. 256KiB,1MiB).
    #[arg(long, value_name = "LIST")]
    pub block_sizes: Option<String>,
    /// Queue depths to try instead of the grid's (e.g. 8,32,128).
    #[arg(long, value_name = "LIST")]
    pub queue_depths: Option<String>,
    /// Thread counts (intra_op_parallelism) to try instead of the grid's (e.g. 1,2,4).
    #[arg(long, value_name = "LIST")]
    pub threads: Option<String>,
    /// Ranks writing and reading at once, each its own files (default: as ds-config finds
    /// them: $LOCAL_WORLD_SIZE, $SLURM_NTASKS_PER_NODE, ... or the GPUs in /dev, else 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
    pub ranks: Option<u64>,
    /// Submit one request per io_submit call (DeepSpeed's single_submit = true).
    #[arg(long)]
    pub single_submit: bool,
    /// Submit a batch and wait for all of it (DeepSpeed's overlap_events = false).
    #[arg(long)]
    pub no_overlap_events: bool,
    /// Measure with pread/pwrite threads instead of kernel AIO (the fallback where the
    /// kernel refuses AIO; DeepSpeed itself needs AIO).
    #[arg(long, value_name = "ENGINE", default_value = "auto", value_parser = ["auto", "psync"])]
    pub engine: String,
    /// Print everything as one JSON object (the points, the choice, the aio section).
    #[arg(long)]
    pub json: bool,
    /// Name of the stats folder if the config changed it.
    #[arg(long, default_value = ".tierfs")]
    pub stats_dir: String,
}

impl TuneArgs {
    /// The plan the arguments ask for (checked by [`Plan::check`] when the sweep starts).
    fn plan(&self, ranks: usize) -> Result<Plan, Failure> {
        let grid = match (self.quick, self.full) {
            (true, _) => Grid::Quick,
            (_, true) => Grid::Full,
            _ => Grid::Default,
        };
        let (mut block_sizes, mut queue_depths, mut threads, budget) = grid.values();
        let usage = |opt: &'static str| move |e: String| Failure::usage(format!("{opt}: {e}"));
        if let Some(s) = &self.block_sizes {
            block_sizes = tune::parse_sizes(s).map_err(usage("--block-sizes"))?;
        }
        if let Some(s) = &self.queue_depths {
            queue_depths = tune::parse_counts(s).map_err(usage("--queue-depths"))?;
        }
        if let Some(s) = &self.threads {
            threads = tune::parse_counts(s).map_err(usage("--threads"))?;
        }
        Ok(Plan {
            block_sizes,
            queue_depths,
            threads,
            file_size: crate::units::parse_size(&self.size).map_err(usage("--size"))?,
            ranks,
            budget_s: self.budget.unwrap_or(budget),
            single_submit: self.single_submit,
            overlap_events: !self.no_overlap_events,
            psync: self.engine == "psync",
        })
    }
}

/// Runs `tierfs tune`: progress and the table on stderr, the `aio` section (or, with
/// `--json`, everything) on stdout.
pub fn run(a: TuneArgs) -> Result<(), Failure> {
    let (ranks, ranks_from) = match a.ranks {
        Some(n) => (n as usize, "--ranks".to_string()),
        None => crate::client::dsconfig::detect_ranks(),
    };
    let plan = a.plan(ranks)?;
    plan.check().map_err(Failure::usage)?;
    let points = plan.points();
    let mut err = std::io::stderr().lock();
    let say = |err: &mut std::io::StderrLock, line: &str| {
        if !a.json {
            let _ = writeln!(err, "{line}");
        }
    };
    say(
        &mut err,
        &format!(
            "# tierfs tune {}: {} points, about {:.0} s; {} rank(s) ({ranks_from}), files of {}",
            a.mountpoint.display(),
            points.len(),
            plan.budget_s,
            ranks,
            crate::units::fmt_size_exact(plan.file_size)
        ),
    );
    say(&mut err, &report::header());
    let sweep = tune::sweep(&a.mountpoint, &a.stats_dir, &plan, |row| {
        say(&mut err, &report::line(row, ""));
    })?;
    let Some((fastest, chosen)) = report::choose(&sweep.rows) else {
        return Err(Failure::runtime("the sweep measured nothing"));
    };
    let aio = report::aio_of(&sweep.rows[chosen], plan.single_submit, plan.overlap_events);
    let mut notes = vec![format!("engine: {}", sweep.engine.describe())];
    notes.extend(sweep.engine_note.clone());
    notes.extend(report::notes(&sweep.rows, &points));
    if a.json {
        let abs = std::path::absolute(&a.mountpoint).unwrap_or(a.mountpoint.clone());
        let doc = serde_json::json!({
            "mount": abs.display().to_string(),
            "engine": sweep.engine,
            "file_size": plan.file_size,
            "ranks": ranks,
            "single_submit": plan.single_submit,
            "overlap_events": plan.overlap_events,
            "seconds_per_phase": sweep.seconds_per_phase,
            "points": sweep.rows,
            "fastest": sweep.rows[fastest],
            "chosen": sweep.rows[chosen],
            "notes": notes,
            "aio": aio,
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    // The rows went by as they were measured; the ones that matter, again, marked.
    say(&mut err, "");
    say(&mut err, &report::header());
    for i in [fastest, chosen]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
    {
        let mark = report::mark((fastest, chosen), i);
        say(&mut err, &report::line(&sweep.rows[i], mark));
    }
    for n in &notes {
        say(&mut err, &format!("# {n}"));
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({ "aio": aio })).unwrap_or_default()
    );
    Ok(())
}
