# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_tierfs_global_optspecs
    string join \n h/help V/version
end

function __fish_tierfs_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_tierfs_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_tierfs_using_subcommand
    set -l cmd (__fish_tierfs_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c tierfs -n "__fish_tierfs_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tierfs -n "__fish_tierfs_needs_command" -s V -l version -d 'Print version'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "mount" -d 'Mount the tiers of a config at MOUNTPOINT; returns once the mount answers'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "run" -d 'Run a program on the direct path: its O_DIRECT opens and DeepSpeed swap files on tierfs mounts go straight to the tier files'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "unmount" -d 'Unmount and wait until the daemon has exited'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "probe" -d 'Measure sequential read and write bandwidth (O_DIRECT, 1 MiB, queue depth 8)'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "check-config" -d 'Validate a config and say what mounting it would do'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "stat" -d 'Show a mount\'s per-tier statistics, once or live'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "ctl" -d 'Control a running mount: pause, resume or drain a tier, set its weight, flush, show status'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "ds-config" -d 'Print DeepSpeed offload and aio settings chosen for this mount (JSON on stdout, reasons on stderr)'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "tune" -d 'Measure DeepSpeed\'s I/O pattern through a mount (block size x queue depth x threads) and print the aio section to use'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "record" -d 'Sample a mount\'s stats periodically into a JSON-lines or CSV file'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "plot" -d 'Draw a recording as a PNG: per-tier read and write MB/s and shares over time'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "fsck" -d 'Check the tier folders offline: every file\'s pieces agree; --repair fixes what is safe'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "export" -d 'Copy every file out of the tiers into a plain folder, without FUSE'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "man" -d 'Print the manual page, or write one page per command into a folder'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c tierfs -n "__fish_tierfs_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -s c -l config -d 'The TOML config naming the tiers (optional where -o names them)' -r -F
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -s o -d 'Mount options, comma-separated, repeatable: config keys as the file names them (mount.threads=32, threads=32, tier.NAME.path=DIR adds a tier), over the file\'s; also force, reprobe, nonempty, break_lock and what fstab lines carry (see `man tierfs`, MOUNT OPTIONS)' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -l metrics-textfile -d 'Write the metrics (as `tierfs stat --prom`) to FILE every few seconds, for node_exporter\'s textfile collector (also `textfile` under [metrics])' -r -F
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -s f -l foreground -d 'Stay attached and log to stderr (or the config\'s log_file)'
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -l force -d 'Clear a dead tierfs mount left at MOUNTPOINT by a killed daemon'
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -l reprobe -d 'Measure tiers again even where a probe result is cached'
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -l degraded -d 'Mount even if a tier (not the first) is missing or unusable: it is left out, files with pieces on it answer EIO (also `degraded = true` under [mount])'
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -l break-lock -d 'Take over tier locks that a daemon on another host holds, as their lock files say (only when that daemon is surely gone: its node crashed or was rebooted)'
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -l scratch -d 'Scratch data: unmounting discards it and removes the tier folders and the mountpoint (also `scratch = true` under [mount])'
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -l no-scratch -d 'Keep the data at unmount even if the config says `scratch = true`'
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -l allow-other -d 'Let other users in (also `allow_other = true` under [mount]; a non-root user needs `user_allow_other` in /etc/fuse.conf)'
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -l nonempty -d 'Mount even if MOUNTPOINT is not empty: what it holds is hidden (not changed) until the mount goes'
complete -c tierfs -n "__fish_tierfs_using_subcommand mount" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand run" -l print-library -d 'Print the preload library\'s path (for LD_PRELOAD in job scripts) and exit'
complete -c tierfs -n "__fish_tierfs_using_subcommand run" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand unmount" -l stats-dir -d 'Name of the stats folder if the config changed it' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand unmount" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand probe" -s c -l config -d 'Probe the tiers of this config (results are cached in each tier)' -r -F
complete -c tierfs -n "__fish_tierfs_using_subcommand probe" -l size -d 'Test file size (e.g. 1GiB)' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand probe" -l secs -d 'Minimum seconds per direction' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand probe" -l json -d 'Print JSON instead of a table'
complete -c tierfs -n "__fish_tierfs_using_subcommand probe" -l fresh -d 'Ignore cached results'
complete -c tierfs -n "__fish_tierfs_using_subcommand probe" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand check-config" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand stat" -l watch -d 'Redraw rates every SECS seconds (e.g. 1 or 0.5) until Ctrl-C' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand stat" -l count -d 'With --watch: stop after N intervals' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand stat" -l label -d 'With --prom: one more label on every sample, NAME=VALUE (repeatable), e.g. --label job=$SLURM_JOB_ID' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand stat" -l out -d 'Write to FILE instead of stdout: a temporary file renamed over FILE, mode 0644 (for node_exporter\'s textfile collector)' -r -F
complete -c tierfs -n "__fish_tierfs_using_subcommand stat" -l stats-dir -d 'Name of the stats folder if the config changed it' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand stat" -l json -d 'Print the raw stats.json'
complete -c tierfs -n "__fish_tierfs_using_subcommand stat" -l prom -d 'Print the metrics in the Prometheus text format (the mount\'s .tierfs/metrics), every sample labelled mountpoint="MOUNTPOINT"'
complete -c tierfs -n "__fish_tierfs_using_subcommand stat" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand ctl" -l stats-dir -d 'Name of the stats folder if the config changed it' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand ctl" -l wait -d 'With `drain TIER`: wait until the tier holds no file, saying on stderr what is left'
complete -c tierfs -n "__fish_tierfs_using_subcommand ctl" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand ds-config" -l ranks -d 'Ranks per node sharing the mount (default: $LOCAL_WORLD_SIZE, $SLURM_NTASKS_PER_NODE, ... or the GPUs in /dev, else 1)' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand ds-config" -l stats-dir -d 'Name of the stats folder if the config changed it' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand ds-config" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l budget -d 'Seconds for the whole sweep, shared out over the points (each point writes and reads at least one file per rank). Default: 90, --quick 20, --full 300' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l size -d 'Bytes per file, one DeepSpeed request (a tensor): e.g. 128MiB. A multiple of 4 KiB x every thread count' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l block-sizes -d 'Block sizes to try instead of the grid\'s (comma-separated, e.g. 256KiB,1MiB)' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l queue-depths -d 'Queue depths to try instead of the grid\'s (e.g. 8,32,128)' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l threads -d 'Thread counts (intra_op_parallelism) to try instead of the grid\'s (e.g. 1,2,4)' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l ranks -d 'Ranks writing and reading at once, each its own files (default: as ds-config finds them: $LOCAL_WORLD_SIZE, $SLURM_NTASKS_PER_NODE, ... or the GPUs in /dev, else 1)' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l engine -d 'Measure with pread/pwrite threads instead of kernel AIO (the fallback where the kernel refuses AIO; DeepSpeed itself needs AIO)' -r -f -a "auto\t''
psync\t''"
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l stats-dir -d 'Name of the stats folder if the config changed it' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l quick -d 'A few points around DeepSpeed\'s defaults (1M,4M x 8,32 x 1,4; 20 s)'
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l full -d 'Every power of two: 128K..8M x 4..128 x 1..8 (168 points; 300 s)'
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l single-submit -d 'Submit one request per io_submit call (DeepSpeed\'s single_submit = true)'
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l no-overlap-events -d 'Submit a batch and wait for all of it (DeepSpeed\'s overlap_events = false)'
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -l json -d 'Print everything as one JSON object (the points, the choice, the aio section)'
complete -c tierfs -n "__fish_tierfs_using_subcommand tune" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand record" -s o -l out -d 'The file to write (replaced if it exists)' -r -F
complete -c tierfs -n "__fish_tierfs_using_subcommand record" -l interval -d 'Seconds between samples' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand record" -l duration -d 'Stop after SECS seconds (default: run until Ctrl-C or the mount goes away)' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand record" -l format -d 'File format (default: csv for a .csv name, else jsonl)' -r -f -a "jsonl\t'One JSON object per sample and line'
csv\t'One row per tier and sample, with a header'"
complete -c tierfs -n "__fish_tierfs_using_subcommand record" -l stats-dir -d 'Name of the stats folder if the config changed it' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand record" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tierfs -n "__fish_tierfs_using_subcommand plot" -s o -l out -d 'The PNG to write' -r -F
complete -c tierfs -n "__fish_tierfs_using_subcommand plot" -l title -d 'Title at the top (default: the recording\'s file name)' -r
complete -c tierfs -n "__fish_tierfs_using_subcommand plot" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand fsck" -s c -l config -d 'The TOML config naming the tiers' -r -F
complete -c tierfs -n "__fish_tierfs_using_subcommand fsck" -l repair -d 'Fix what is safe to fix (never deletes user data)'
complete -c tierfs -n "__fish_tierfs_using_subcommand fsck" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand export" -s c -l config -d 'The TOML config naming the tiers' -r -F
complete -c tierfs -n "__fish_tierfs_using_subcommand export" -l force -d 'Export into a non-empty DEST, replacing files of the same names'
complete -c tierfs -n "__fish_tierfs_using_subcommand export" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand man" -l dir -d 'Write tierfs.1 and tierfs-COMMAND.1 for every command into DIR (created if missing) instead of printing tierfs.1' -r -F
complete -c tierfs -n "__fish_tierfs_using_subcommand man" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand completions" -s h -l help -d 'Print help'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "mount" -d 'Mount the tiers of a config at MOUNTPOINT; returns once the mount answers'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "run" -d 'Run a program on the direct path: its O_DIRECT opens and DeepSpeed swap files on tierfs mounts go straight to the tier files'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "unmount" -d 'Unmount and wait until the daemon has exited'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "probe" -d 'Measure sequential read and write bandwidth (O_DIRECT, 1 MiB, queue depth 8)'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "check-config" -d 'Validate a config and say what mounting it would do'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "stat" -d 'Show a mount\'s per-tier statistics, once or live'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "ctl" -d 'Control a running mount: pause, resume or drain a tier, set its weight, flush, show status'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "ds-config" -d 'Print DeepSpeed offload and aio settings chosen for this mount (JSON on stdout, reasons on stderr)'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "tune" -d 'Measure DeepSpeed\'s I/O pattern through a mount (block size x queue depth x threads) and print the aio section to use'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "record" -d 'Sample a mount\'s stats periodically into a JSON-lines or CSV file'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "plot" -d 'Draw a recording as a PNG: per-tier read and write MB/s and shares over time'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "fsck" -d 'Check the tier folders offline: every file\'s pieces agree; --repair fixes what is safe'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "export" -d 'Copy every file out of the tiers into a plain folder, without FUSE'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "man" -d 'Print the manual page, or write one page per command into a folder'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "completions" -d 'Print a shell completion script'
complete -c tierfs -n "__fish_tierfs_using_subcommand help; and not __fish_seen_subcommand_from mount run unmount probe check-config stat ctl ds-config tune record plot fsck export man completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
