#!/bin/bash
# Slurm Prolog: mounts tierfs as root for a job that asks for it (`sbatch --comment=tierfs`),
# with kernel passthrough, for the job's user. Pair it with tierfs-epilog.sh:
#
#   slurm.conf:  Prolog=/etc/slurm/tierfs-prolog.sh
#                Epilog=/etc/slurm/tierfs-epilog.sh
#                PrologFlags=Alloc
#
# slurmd runs it as root on every node of the job, at allocation (PrologFlags=Alloc), with
# SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_UID, SLURM_JOB_GID and SLURM_JOB_COMMENT set
# (Slurm 22.05 and later). A job whose comment does not hold the word `tierfs` is left
# alone. For one that does, on each node:
#
#   NVMe tier folder  $NVME_BASE/job-$SLURM_JOB_ID        (made here, the user's, 0700)
#   PFS tier folder   $PFS_BASE/job-$SLURM_JOB_ID-NODE    (%u in PFS_BASE = the user; made
#                                                          as the user; NODE: Slurm's name
#                                                          of this node)
#   mountpoint        $MNT_BASE/$SLURM_JOB_ID             (the job reads it from there)
#   daemon log        $LOG_DIR/job-$SLURM_JOB_ID.log
#   what was made     $STATE_DIR/job-$SLURM_JOB_ID        (the epilog removes just that)
#
# The mount is root's: `allow_other` lets the user's processes in, `default_permissions`
# (always on in tierfs) has the kernel check file modes, the mount's root folder is given
# to the user with mode 0700, new files belong to whoever created them, and the daemon,
# being root, opens whole files in kernel passthrough (passthrough = "auto"). It is scratch
# space: at the job's end the epilog unmounts and the daemon discards the data.
#
# Site settings: the variables below, overridden by $TIERFS_PROLOG_CONF (default
# /etc/tierfs/slurm-prolog.conf, a bash file of VAR=value lines read by both scripts).
#
# Failure: anything that goes wrong undoes what this run made (unmount, folders, state) and
# exits 1; Slurm then drains the node and requeues the job held. The reason is in
# $LOG_DIR/slurm.log and slurmd's log. docs/JOBS.md, "Mounted by the site: prolog and
# epilog"; tested under Slurm in CI (tests/slurm_prolog.rs).
set -euo pipefail
# slurmd gives prologs no search path.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# ---- site settings (override them in $TIERFS_PROLOG_CONF) --------------------------------
TIERFS=/usr/local/bin/tierfs        # the tierfs binary
TIERFS_CONFIG=/etc/tierfs/job.toml  # the mount's config (docs/jobs/tierfs-prolog.toml)
NVME_BASE=/local/tierfs             # on the node's NVMe; must exist (root's, 0755)
PFS_BASE=/lus/scratch/%u/tierfs     # %u: the job's user; made as the user if missing
MNT_BASE=/run/tierfs                # mountpoints $MNT_BASE/$SLURM_JOB_ID
STATE_DIR=/var/lib/tierfs/slurm     # what each job's prolog made
LOG_DIR=/var/log/tierfs             # slurm.log (both scripts) and the daemons' logs
REQUEST_WORD=tierfs                 # a job asks with this word in its comment
UNMOUNT_TIMEOUT=300                 # epilog: seconds to wait for a daemon to finish
# ------------------------------------------------------------------------------------------
SITE_CONF=${TIERFS_PROLOG_CONF:-/etc/tierfs/slurm-prolog.conf}
if [ -e "$SITE_CONF" ]; then
    # shellcheck source=/dev/null
    . "$SITE_CONF"
elif [ -n "${TIERFS_PROLOG_CONF:-}" ]; then
    echo "tierfs-prolog: TIERFS_PROLOG_CONF=$SITE_CONF does not exist" >&2
    exit 1
fi

JOB=${SLURM_JOB_ID:?tierfs-prolog: SLURM_JOB_ID is not set (run by slurmd as Prolog)}
JUSER=${SLURM_JOB_USER:?}
JUID=${SLURM_JOB_UID:?}
JGID=${SLURM_JOB_GID:?}

# Whether the job asked: the request word among the comment's words (spaces or commas).
read -ra WORDS <<<"${SLURM_JOB_COMMENT:-}" || true
read -ra WORDS <<<"${WORDS[*]//,/ }" || true
asked=0
for w in "${WORDS[@]}"; do [ "$w" = "$REQUEST_WORD" ] && asked=1; done
[ "$asked" = 1 ] || exit 0

mkdir -p -m 0755 "$LOG_DIR"
log() {
    printf '%s prolog job %s (%s): %s\n' "$(date '+%F %T')" "$JOB" "$JUSER" "$*" |
        tee -a "$LOG_DIR/slurm.log" >&2
}

STATE=$STATE_DIR/job-$JOB
NVME=$NVME_BASE/job-$JOB
PFS_USER_BASE=${PFS_BASE//%u/$JUSER}
# Per node too: the PFS is shared, and each node of the job has its own daemon and tier.
NODE=${SLURMD_NODENAME:-$(hostname -s)}
PFS=$PFS_USER_BASE/job-$JOB-$NODE
MNT=$MNT_BASE/$JOB
DAEMON_LOG=$LOG_DIR/job-$JOB.log

as_user() { setpriv --reuid="$JUID" --regid="$JGID" --init-groups -- "$@"; }
record() { echo "$1=$2" >>"$STATE"; }
is_mounted() { awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }

# On any failure: undo what this run made, newest first, and say why. A cause on the
# user's side (refuse_job) cancels the job instead of failing: a prolog's failure drains
# the node, and no user may drain nodes by pre-making a folder or filling a quota.
REFUSED=
refuse_job() {
    REFUSED=$*
    exit 0
}
undo() {
    local rc=$?
    trap - EXIT
    [ "$rc" -eq 0 ] && [ -z "$REFUSED" ] && exit 0
    set +e
    if [ -n "$REFUSED" ]; then
        log "REFUSED: $REFUSED; the job is cancelled, the node stays up; undoing what this prolog made"
        scancel "$JOB" >>"$LOG_DIR/slurm.log" 2>&1 || log "scancel $JOB failed: the job runs without its mount"
    else
        log "FAILED (exit $rc); undoing what this prolog made"
    fi
    if is_mounted "$MNT"; then
        timeout "$UNMOUNT_TIMEOUT" "$TIERFS" unmount "$MNT" >>"$LOG_DIR/slurm.log" 2>&1 ||
            umount -l "$MNT"
        log "unmounted $MNT"
    fi
    local k d
    for k in mnt pfs nvme; do
        d=$(sed -n "s/^$k=//p" "$STATE" 2>/dev/null)
        if [ -n "$d" ] && [ -d "$d" ] && [ ! -L "$d" ]; then
            # The PFS folder sits in a folder the user owns: removed as the user, so a
            # link swapped in above it leads nowhere root could reach.
            if [ "$k" = pfs ]; then
                as_user rm -rf --one-file-system -- "$d" && log "removed $d"
            else
                rm -rf --one-file-system -- "$d" && log "removed $d"
            fi
        fi
    done
    rm -f "$STATE"
    exit "$rc"
}

[ -x "$TIERFS" ] || { log "FAILED: TIERFS=$TIERFS is not an executable"; exit 1; }
[ -d "$NVME_BASE" ] || {
    log "FAILED: NVME_BASE=$NVME_BASE does not exist (is the NVMe mounted? make it, root's, 0755)"
    exit 1
}
mkdir -p -m 0700 "$STATE_DIR"
mkdir -p -m 0755 "$MNT_BASE"

# A requeued job runs again with its id: what an earlier run left (its node crashed before
# the epilog ran) is cleared the epilog's way first.
if [ -e "$STATE" ]; then
    log "an earlier run of this job left $STATE; running the epilog for it first"
    "$(dirname "$(readlink -f "$0")")/tierfs-epilog.sh" || {
        log "FAILED: the earlier run's leftovers could not be cleared"
        exit 1
    }
    # The epilog keeps the record of what it could not remove: not this run's to forget.
    [ -e "$STATE" ] && { log "FAILED: the earlier run left what $STATE names; see the log above"; exit 1; }
fi

trap undo EXIT
: >"$STATE"
chmod 0600 "$STATE"
record uid "$JUID"
record gid "$JGID"
# mkdir without -p: a folder that is already there is not this job's to use or remove.
mkdir -m 0700 "$NVME" || { log "FAILED: cannot make $NVME"; exit 1; }
record nvme "$NVME"
chown "$JUID:$JGID" "$NVME"
as_user mkdir -p "$PFS_USER_BASE" || refuse_job "$JUSER cannot make $PFS_USER_BASE"
as_user mkdir -m 0700 "$PFS" || refuse_job "$JUSER cannot make $PFS (already there, or no room or permission)"
record pfs "$PFS"
mkdir -m 0700 "$MNT" || { log "FAILED: cannot make $MNT"; exit 1; }
record mnt "$MNT"
chown "$JUID:$JGID" "$MNT"

# The config's tier paths read these; the daemon detaches (setsid) once the mount answers.
export TIERFS_NVME_DIR=$NVME TIERFS_PFS_DIR=$PFS TIERFS_JOB=$JOB
# The daemon's log names the job's files: readable by root and the job's group only.
install -m 0640 -o root -g "$JGID" /dev/null "$DAEMON_LOG"
if ! "$TIERFS" mount --config "$TIERFS_CONFIG" --scratch --allow-other \
    -o "log_file=$DAEMON_LOG" "$MNT" </dev/null >>"$LOG_DIR/slurm.log" 2>&1; then
    log "FAILED: tierfs mount (its messages are above in $LOG_DIR/slurm.log; log $DAEMON_LOG)"
    exit 1
fi
record mounted 1
pid=$("$TIERFS" stat --json "$MNT" | sed -n 's/^  "pid": \([0-9]*\).*/\1/p')
[ -n "$pid" ] || { log "FAILED: the mount at $MNT does not answer"; exit 1; }
record pid "$pid"
# The mount's root folder (through the mount) is the user's alone.
chown "$JUID:$JGID" "$MNT"
chmod 0700 "$MNT"
log "mounted $MNT (daemon $pid, tiers $NVME $PFS, log $DAEMON_LOG)"
