#!/bin/bash
# Slurm Epilog: undoes what tierfs-prolog.sh made for a job, and nothing else.
#
#   slurm.conf:  Epilog=/etc/slurm/tierfs-epilog.sh     (with Prolog=.../tierfs-prolog.sh)
#
# slurmd runs it as root on every node of the job once the job's processes are gone,
# however the job ended: its script finished, `scancel`, the time limit, a node failure the
# job was requeued after. It reads the prolog's record of the job ($STATE_DIR/job-ID); a
# job without one (it did not ask for tierfs, or was cleaned up already) is left alone.
# In that order:
#
# 1. `tierfs unmount` the job's mountpoint, which waits until the daemon has exited and,
#    the mount being scratch, discarded the data (up to UNMOUNT_TIMEOUT seconds; then the
#    mount is detached and the daemon stopped with SIGTERM, then SIGKILL);
# 2. the daemon the prolog recorded, if it still runs (same pid, a tierfs process): stopped;
# 3. the mountpoint, the NVMe tier folder and the PFS tier folder the prolog recorded are
#    removed (`rm -rf --one-file-system`: they were made new, empty, for this job; nothing
#    on another file system below them is touched);
# 4. the record is removed once nothing of the job is left.
#
# Every step is logged to $LOG_DIR/slurm.log. Exit 1 (Slurm drains the node) only when a
# mount or daemon of the job is still there; a folder that could not be removed is logged
# and its record kept, so that running this again by hand (`SLURM_JOB_ID=N
# SLURM_JOB_USER=U tierfs-epilog.sh`) finishes the work.
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# ---- site settings: the same file as the prolog's ----------------------------------------
TIERFS=/usr/local/bin/tierfs
STATE_DIR=/var/lib/tierfs/slurm
LOG_DIR=/var/log/tierfs
UNMOUNT_TIMEOUT=300
# ------------------------------------------------------------------------------------------
SITE_CONF=${TIERFS_PROLOG_CONF:-/etc/tierfs/slurm-prolog.conf}
if [ -e "$SITE_CONF" ]; then
    # shellcheck source=/dev/null
    . "$SITE_CONF"
elif [ -n "${TIERFS_PROLOG_CONF:-}" ]; then
    echo "tierfs-epilog: TIERFS_PROLOG_CONF=$SITE_CONF does not exist" >&2
    exit 1
fi

JOB=${SLURM_JOB_ID:?tierfs-epilog: SLURM_JOB_ID is not set (run by slurmd as Epilog)}
STATE=$STATE_DIR/job-$JOB
[ -f "$STATE" ] || exit 0

mkdir -p -m 0755 "$LOG_DIR"
log() {
    printf '%s epilog job %s (%s): %s\n' "$(date '+%F %T')" "$JOB" "${SLURM_JOB_USER:-?}" "$*" |
        tee -a "$LOG_DIR/slurm.log" >&2
}
get() { sed -n "s/^$1=//p" "$STATE" | tail -n 1; }
is_mounted() { awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }
# The recorded daemon, if that pid is still a tierfs process (not a reused pid).
daemon_alive() {
    [ -n "$1" ] && [ -r "/proc/$1/cmdline" ] &&
        tr '\0' ' ' <"/proc/$1/cmdline" | grep -q "tierfs.* mount .*$MNT"
}

MNT=$(get mnt)
NVME=$(get nvme)
PFS=$(get pfs)
PID=$(get pid)
JUID=$(get uid)
JGID=$(get gid)
left=0

# 1. The mount.
if [ -n "$MNT" ] && is_mounted "$MNT"; then
    if out=$(timeout "$UNMOUNT_TIMEOUT" "$TIERFS" unmount "$MNT" 2>&1); then
        log "unmounted $MNT${PID:+ (daemon $PID exited)}"
    else
        log "tierfs unmount $MNT failed or took over ${UNMOUNT_TIMEOUT}s: $out; detaching it"
        umount -l "$MNT" || true
    fi
fi
# 2. The daemon.
if daemon_alive "$PID"; then
    log "daemon $PID still runs; SIGTERM"
    kill -TERM "$PID" 2>/dev/null || true
    for _ in $(seq 300); do daemon_alive "$PID" || break; sleep 0.1; done
    if daemon_alive "$PID"; then
        log "daemon $PID did not exit in 30 s; SIGKILL"
        kill -KILL "$PID" 2>/dev/null || true
        sleep 1
    fi
fi
if [ -n "$MNT" ] && is_mounted "$MNT"; then
    log "ERROR: $MNT is still mounted"
    exit 1
fi
if daemon_alive "$PID"; then
    log "ERROR: daemon $PID still runs"
    exit 1
fi

# 3. The folders, as recorded (a scratch daemon may have removed some already).
for d in "$MNT" "$NVME" "$PFS"; do
    [ -n "$d" ] || continue
    if [ -L "$d" ]; then
        log "WARNING: $d is now a symlink, not the folder the prolog made; left alone"
        left=1
    elif [ -d "$d" ]; then
        # The PFS folder sits in a folder the user owns: removed as the user, so a link
        # swapped in above it leads nowhere root could reach (and root squash does not stop it).
        if [ "$d" = "$PFS" ] && [ -n "$JUID" ] && [ -n "$JGID" ]; then
            rm_it() { setpriv --reuid="$JUID" --regid="$JGID" --init-groups -- rm -rf --one-file-system -- "$1"; }
        else
            rm_it() { rm -rf --one-file-system -- "$1"; }
        fi
        if rm_it "$d"; then
            log "removed $d"
        else
            log "WARNING: could not remove $d"
            left=1
        fi
    fi
done

# 4. The record.
if [ "$left" = 0 ]; then
    rm -f "$STATE"
    log "done"
else
    log "record $STATE kept: run this epilog again by hand once the above is fixed"
fi
