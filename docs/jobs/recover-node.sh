#!/bin/bash
# After a job died on this node: clear its tierfs mount, show what its tier folders still
# hold, and (with --clean) remove them.
#
#   TIERFS_JOB=1234 [TIERFS_NVME_DIR=... TIERFS_PFS_DIR=...] \
#       docs/jobs/recover-node.sh MOUNTPOINT CONFIG [--clean]
#
# Give the dead job's settings as the job script had them (its id, and the tier parents if
# they are not the defaults), so ${...} in CONFIG expands to that job's folders.
#
# Usually there is nothing to do: the daemon cleans up on SIGTERM (scancel, time limit),
# and a scratch daemon that was killed outright (SIGKILL, the OOM killer) leaves folders
# that the next tierfs mount on this node removes. This script is for a look by hand, for
# data kept with KEEP_TIER_DATA=1, and for sites that clean nodes in an epilog (as root,
# `tierfs unmount` also unmounts an ordinary user's mount).
#
# A killed daemon leaves its mountpoint dead: every access fails with "Transport endpoint
# is not connected" (ENOTCONN). `tierfs unmount` detaches it. The data is not lost: each
# tier folder holds data/ (the files, or their stripes) and .tierfs-meta/; mounting the same
# config again with --no-scratch shows every file, and `tierfs export --config CONFIG DEST`
# copies them out without mounting.
set -euo pipefail
MNT=${1:?usage: $0 MOUNTPOINT CONFIG [--clean]}
CFG=${2:?usage: $0 MOUNTPOINT CONFIG [--clean]}
CLEAN=${3:-}
TIERFS=${TIERFS:-tierfs}
export TIERFS_NVME_DIR=${TIERFS_NVME_DIR:-/local/scratch/$USER/tierfs-tiers}
export TIERFS_PFS_DIR=${TIERFS_PFS_DIR:-/lus/myproject/$USER/tierfs}
: "${TIERFS_JOB:?set TIERFS_JOB to the id of the job that died}"
export TIERFS_JOB

# A live mount is unmounted (its daemon cleans up), a dead one detached.
if said=$("$TIERFS" unmount "$MNT" 2>&1); then
    echo "$MNT: ${said:-unmounted}"
fi

# The tier folders, as tierfs expands the config's paths.
mapfile -t TIERS < <("$TIERFS" check-config "$CFG" 2>/dev/null | awk '$1 == "tier" { print $3 }')
[ ${#TIERS[@]} -gt 0 ] || { "$TIERFS" check-config "$CFG"; exit 1; }
for t in "${TIERS[@]}"; do
    [ -d "$t" ] || { echo "tier $t: gone"; continue; }
    lock=$t/.tierfs-meta/lock
    if [ -f "$lock" ]; then
        host=$(sed -n 's/^host //p' "$lock")
        pid=$(sed -n 's/^pid //p' "$lock")
        if [ "$host" = "$(hostname)" ] && kill -0 "$pid" 2>/dev/null &&
            grep -qs tierfs "/proc/$pid/cmdline"; then
            echo "tier $t: in use by a running tierfs daemon (pid $pid): unmount its mount first"
            continue
        fi
        echo "tier $t: locked by pid $pid on ${host:-this host}, which is gone"
    fi
    echo "tier $t: $(find "$t/data" -type f 2>/dev/null | wc -l) files, $(du -sh "$t" 2>/dev/null | cut -f1)"
    if [ "$CLEAN" = --clean ]; then
        rm -rf "$t/data" "$t/.tierfs-meta"
        rmdir "$t" 2>/dev/null && echo "  removed $t" || echo "  removed $t/data and $t/.tierfs-meta (kept the rest)"
    fi
done
[ "$CLEAN" = --clean ] || echo "to see the files again: $TIERFS mount --no-scratch --force --config $CFG $MNT"
