//! The command line's definition: every command, argument, help text and example, as
//! clap derives them. `--help`, the shell completions and the manual pages
//! ([`super::manpage`]) are all made from it, so they cannot disagree.

use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;

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
        after_help = "Examples:\n  mkdir -p /tmp/tierfs-demo-$USER && tierfs mount --config mount-configs/demo.toml /tmp/tierfs-demo-$USER\n  tierfs mount --force --config node.toml /local/tierfs     # after a job died: clear the dead mount\n  tierfs mount --foreground --config node.toml /local/tierfs  # stay attached (batch job steps)\n  tierfs mount --scratch --config job.toml /local/tierfs-$SLURM_JOB_ID  # swap files: gone at unmount\n  tierfs mount -o tier.nvme.path=/local/x,tier.pfs.path=/lus/me/x,threads=32 /local/tierfs  # no config file\n  mount -t fuse.tierfs -o allow_other node.toml /local/tierfs   # through mount(8) (see man tierfs)\n\nThe daemon goes to the background once the mount answers; it logs to the config's\nlog_file or <first tier>/.tierfs-meta/daemon.log. On SIGTERM it unmounts itself\n(scratch: and removes the tier folders). A second daemon on the same tier folders is\nrefused; a lock left by a killed daemon of this host is taken over."
    )]
    Mount {
        /// The TOML config naming the tiers (optional where -o names them).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Mount options, comma-separated, repeatable: config keys as the file names them
        /// (mount.threads=32, threads=32, tier.NAME.path=DIR adds a tier), over the file's;
        /// also force, reprobe, nonempty, break_lock and what fstab lines carry (see
        /// `man tierfs`, MOUNT OPTIONS).
        #[arg(short = 'o', value_name = "KEY[=VALUE],...")]
        options: Vec<String>,
        /// Write the metrics (as `tierfs stat --prom`) to FILE every few seconds, for
        /// node_exporter's textfile collector (also `textfile` under [metrics]).
        #[arg(long, value_name = "FILE")]
        metrics_textfile: Option<PathBuf>,
        /// Where to mount (an existing, empty directory; see --nonempty).
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
        /// Mount even if MOUNTPOINT is not empty: what it holds is hidden (not changed)
        /// until the mount goes.
        #[arg(long)]
        nonempty: bool,
    },
    /// Run a program on the direct path: its O_DIRECT opens and DeepSpeed swap files on tierfs mounts go straight to the tier files.
    #[command(
        after_help = "Examples:\n  tierfs run -- deepspeed train.py --deepspeed_config ds.json\n  srun tierfs run -- python train.py                  # every rank of a Slurm step\n  tierfs run -- torchrun --nproc_per_node 4 train.py\n  export LD_PRELOAD=$(tierfs run --print-library)    # in a job script, for everything after it\n\nThe program runs with the preload library beside the tierfs binary on LD_PRELOAD\n(children and launchers inherit it). On a tierfs mount, an O_DIRECT open or a DeepSpeed\nswap file (*.tensor.swp) is opened through FUSE as usual, then the mount's daemon hands\nthe program the tier files' own descriptors: its bytes never cross FUSE, so the daemon\nspends no CPU on them (and needs no root). Anything the library cannot keep exact stays on\nFUSE, correct and slower; an error says so once on stderr (tierfs: WARNING: ...). Success\nis silent. TIERFS_DIRECT=0 turns it off; the mount's `direct = \"off\"` refuses it.\nWhat it does and does not cover: docs/DESIGN.md, \"The direct path\"."
    )]
    Run {
        /// Print the preload library's path (for LD_PRELOAD in job scripts) and exit.
        #[arg(long)]
        print_library: bool,
        /// The program and its arguments (after `--`).
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            required_unless_present = "print_library",
            value_name = "COMMAND"
        )]
        command: Vec<std::ffi::OsString>,
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
    #[command(after_help = stat_help())]
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
        #[arg(long, value_name = "NAME=VALUE", requires = "prom", value_parser = crate::stats::prom::parse_label)]
        label: Vec<(String, String)>,
        /// Write to FILE instead of stdout: a temporary file renamed over FILE, mode 0644
        /// (for node_exporter's textfile collector).
        #[arg(long, value_name = "FILE", conflicts_with = "watch")]
        out: Option<PathBuf>,
        /// Name of the stats folder if the config changed it.
        #[arg(long, default_value = ".tierfs")]
        stats_dir: String,
    },
    /// Control a running mount: pause, resume or drain a tier, set its weight, flush, show status.
    #[command(
        after_help = "Examples:\n  tierfs ctl /local/tierfs status                  # each tier's state, weight, share, files, bytes\n  tierfs ctl /local/tierfs pause pfs               # no new data on pfs; its files stay usable\n  tierfs ctl /local/tierfs resume pfs\n  tierfs ctl --wait /local/tierfs drain nvme1      # move nvme1's files to the other tiers\n  tierfs ctl /local/tierfs weight nvme0 2          # nvme0's bandwidth counts twice in the split\n  tierfs ctl /local/tierfs flush                   # write staged data back to the tiers\n\nThe command goes to MOUNTPOINT/.tierfs/control, which takes one command per line (also\nthe cache hints order, step, prefetch, drop); the daemon's reply is printed: `ok ...`,\nor its reason on stderr with exit status 2 for a malformed command and 1 for a refused\none (an unknown tier, the last tier taking new data, no room to drain). A paused or\ndrained tier takes no new data until resumed; what it holds stays readable and\nwritable. The state lasts until unmount. Options go before MOUNTPOINT. The protocol, for\nscripts that write the file themselves: docs/CONFIG.md, \"Live control\"."
    )]
    Ctl {
        /// The tierfs mountpoint.
        mountpoint: PathBuf,
        /// The command and its words: pause TIER, resume TIER, drain TIER, weight TIER N,
        /// flush [PATH] or status (or any line .tierfs/control takes).
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<String>,
        /// With `drain TIER`: wait until the tier holds no file, saying on stderr what is
        /// left.
        #[arg(long)]
        wait: bool,
        /// Name of the stats folder if the config changed it.
        #[arg(long, default_value = ".tierfs")]
        stats_dir: String,
    },
    /// Print DeepSpeed offload and aio settings chosen for this mount (JSON on stdout, reasons on stderr).
    #[command(
        name = "ds-config",
        after_help = "Examples:\n  tierfs ds-config /local/tierfs --ranks 4 > ds-offload.json\n  tierfs ds-config /local/tierfs --ranks 4 2>/dev/null | jq .aio\n\nPrints the `zero_optimization` offload blocks (offload_param, offload_optimizer with\ndevice nvme and nvme_path = MOUNTPOINT, buffer counts, sub_group_size) and the `aio`\nblock, chosen from the mount's tiers (stats.json), its FUSE threads (.tierfs/config)\nand the ranks per node: about 8 requests in flight per tier, all ranks together below\nthe FUSE threads. The pinned buffers of all ranks stay under a quarter of the smallest of\nthe host's memory, its available memory, the memory cgroup limit and Slurm's allocation\n(SLURM_MEM_PER_NODE, _PER_GPU, _PER_CPU): sub_group_size is lowered first, then\npin_memory turned off; run it where the job runs. Each value's reason goes to stderr as\na `#` line, so stdout is pure JSON to merge into your DeepSpeed config. For measured aio\nvalues: tierfs tune."
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
    /// Measure DeepSpeed's I/O pattern through a mount (block size x queue depth x threads) and print the aio section to use.
    #[command(
        after_help = "Examples:\n  tierfs tune /local/tierfs > aio.json                  # about 90 s; the table on stderr\n  tierfs tune /local/tierfs --quick                     # 8 points, about 20 s\n  tierfs tune /local/tierfs --ranks 4 --full --json > sweep.json\n  tierfs tune /local/tierfs --block-sizes 1MiB --queue-depths 8,16,32 --threads 1,2\n  tierfs run -- tierfs tune /local/tierfs               # as DeepSpeed under tierfs run\n\nWhat it does, like DeepSpeed's ds_nvme_tune on a raw drive: for each point, every rank\nwrites files of --size the way DeepSpeed's swapper writes a tensor (O_DIRECT, no\nO_TRUNC, one contiguous slice per thread, block-size requests on each thread's own\nkernel AIO context, queue-depth in flight), then reads them back; GB/s is 10^9 bytes\nover each phase's wall time. The files (*.tensor.swp, so the mount treats them as\nDeepSpeed's) live in MOUNTPOINT/.tierfs-tune-PID/, removed after each point, at the\nend, on an error and on Ctrl-C. The chosen point: of those within 3% of the fastest\nread + write, the one keeping the fewest bytes in flight.\n\nstdout: {\"aio\": {...}}, the section to merge into the DeepSpeed config (the shape\n`tierfs ds-config` prints); stderr: the table (BLOCK QD THREADS WRITE_GB/s READ_GB/s,\nFILES per phase, MEM_W% MEM_R% the share staging memory took in or served) and notes.\n--json: one object with every point instead. See docs/TUNING.md."
    )]
    Tune(super::tune::TuneArgs),
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
        format: Option<crate::client::monitor::Format>,
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

/// `tierfs stat --help`'s text after the options: examples, the one-shot table's columns
/// and the watch screen's ([`crate::client::watch::COLUMNS_HELP`]).
fn stat_help() -> String {
    format!(
        "Examples:\n  tierfs stat /tmp/tierfs-demo-$USER                 # per-tier table\n  tierfs stat /tmp/tierfs-demo-$USER --json          # the raw stats.json\n  tierfs stat /tmp/tierfs-demo-$USER --watch 1       # live, like iostat -x; Ctrl-C to stop\n  tierfs stat /tmp/tierfs-demo-$USER --watch 0.5 --count 10\n  tierfs stat /tmp/tierfs-demo-$USER --prom --out /var/lib/node_exporter/tierfs/tierfs-$USER.prom\n\nThe table: APP_READ APP_WRITTEN are what programs read and wrote at the mount for\nfiles on the tier, whichever path served them (the daemon, staging memory, the direct\npath, kernel passthrough); TIER_READ TIER_WRITTEN what reached the tier folder (a write\nstaging memory holds gets there later; stats.json `app` has every path apart).\n\n{}",
        crate::client::watch::COLUMNS_HELP
    )
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

/// Writes the completion script for `shell`.
pub fn print_completions(shell: clap_complete::Shell, out: &mut dyn Write) {
    use clap::CommandFactory;
    clap_complete::generate(shell, &mut Cli::command(), "tierfs", out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::path::Path;

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

    #[test]
    fn ctl_takes_the_command_words_after_the_mountpoint() {
        let c =
            Cli::try_parse_from(["tierfs", "ctl", "--wait", "/m", "weight", "a", "-1"]).unwrap();
        match c.command {
            Cmd::Ctl {
                mountpoint,
                command,
                wait,
                ..
            } => {
                assert_eq!(mountpoint, Path::new("/m"));
                assert_eq!(
                    command,
                    ["weight", "a", "-1"],
                    "-1 is the daemon's to refuse"
                );
                assert!(wait);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            Cli::try_parse_from(["tierfs", "ctl", "/m"]).is_err(),
            "no command"
        );
    }
}
