#!/bin/bash
# After a job died on this node: clear a dead tierfs mount, show what the tier folders
# still hold, and (with --clean) remove it.
#
#   docs/jobs/recover-node.sh MOUNTPOINT CONFIG [--clean]
#
# A killed daemon leaves its mountpoint dead: every access fails with "Transport endpoint
# is not connected" (ENOTCONN). The data is not lost: each file sits whole (whole-file
# layout) under <tier>/data/<its path> on some tier. Mounting the same config again shows
# every file as before; `tierfs mount --force` does that and clears the dead mount first.
set -euo pipefail
MNT=${1:?usage: $0 MOUNTPOINT CONFIG [--clean]}
CFG=${2:?usage: $0 MOUNTPOINT CONFIG [--clean]}
CLEAN=${3:-}
TIERFS=${TIERFS:-tierfs}

if grep -qs " $(readlink -m "$MNT") fuse" /proc/mounts; then
    if "$TIERFS" stat "$MNT" >/dev/null 2>&1; then
        echo "$MNT is a live tierfs mount (daemon running); unmounting it"
        "$TIERFS" unmount "$MNT"
    else
        echo "$MNT is a dead mount; detaching it"
        fusermount3 -uz "$MNT" 2>/dev/null || umount -l "$MNT"
    fi
fi

# The tier folders of the config, with ${HOSTNAME} and ${USER} as tierfs expands them.
mapfile -t TIERS < <(sed -n 's/^[[:space:]]*path[[:space:]]*=[[:space:]]*"\(.*\)".*/\1/p' "$CFG" |
    sed "s/\${HOSTNAME}/$(hostname)/g; s/\${USER}/${USER:-$(id -un)}/g; s|\${HOME}|$HOME|g")
for t in "${TIERS[@]}"; do
    [ -d "$t" ] || { echo "tier $t: missing"; continue; }
    holder=$(cat "$t/.tierfs-meta/lock" 2>/dev/null || true)
    if [ -n "$holder" ] && kill -0 "${holder#pid }" 2>/dev/null &&
        grep -qs tierfs "/proc/${holder#pid }/cmdline"; then
        echo "tier $t: still held by a running tierfs daemon ($holder): unmount its mount first"
    fi
    echo "tier $t: $(find "$t/data" -type f 2>/dev/null | wc -l) files, $(du -sh "$t/data" 2>/dev/null | cut -f1)"
    if [ "$CLEAN" = --clean ]; then
        rm -rf "$t/data"
        echo "  removed $t/data"
    fi
done
[ "$CLEAN" = --clean ] || echo "to see the files again: $TIERFS mount --force --config $CFG $MNT"
