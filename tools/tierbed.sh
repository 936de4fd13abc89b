#!/usr/bin/env bash
# tierbed.sh: a storage tier with a real, capped bandwidth on one machine, for the tests that
# need one (tests/mount_tier_failure.rs, the probe check in .ci/run).
#
# A tier is an ext4 file system on a loop device (direct I/O on) whose image lives in a
# private tmpfs, mounted at a folder. Its bandwidth is capped by cgroup-v1 blk-throttle rules
# for that loop device in the ROOT blkio cgroup: v1 throttling is flat, so only rules there
# cover every process of the machine (a tierfs daemon included) and the kernel's writeback.
# RAM backing keeps the caps exact: no shared disk underneath swings the figures.
#
#   tierbed.sh up NAME SIZE_GIB READ_MBPS WRITE_MBPS MOUNTPOINT   make and mount a tier
#   tierbed.sh rate NAME READ_MBPS WRITE_MBPS                     change its caps live
#   tierbed.sh fail NAME        a real fault: its ext4 turns read-only now (writes get EROFS,
#                               also through descriptors opened before; reads keep working)
#   tierbed.sh down NAME        unmount, lift the caps, free the loop device and the RAM
#   tierbed.sh status           the tiers of this TIERBED_HOME
#
# MB/s is 10^6 bytes per second; 0 means uncapped. The image is sparse: RAM is used only for
# what is written. State lives in $TIERBED_HOME (default /var/lib/tierfs-tierbed); give each
# user of the machine its own. Needs root, /sys/fs/cgroup/blkio, losetup and mkfs.ext4.
#
# Keep in mind: a cap lets about 0.1 s worth of bytes through unthrottled after idle (measure
# for 3 s or 1 GB at least); buffered reads of cached pages skip the caps (use O_DIRECT); a
# process in a CHILD blkio cgroup is not throttled at all.
set -euo pipefail

HOME_DIR=${TIERBED_HOME:-/var/lib/tierfs-tierbed}
BLKIO=${TIERBED_BLKIO:-/sys/fs/cgroup/blkio}

die() {
    echo "tierbed: error: $*" >&2
    exit 1
}
say() { echo "tierbed: $*" >&2; }

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }
need_blkio() {
    [ -w "$BLKIO/blkio.throttle.read_bps_device" ] ||
        die "no cgroup-v1 blkio throttling at $BLKIO (cgroup v2 alone is not supported)"
}
check_name() { [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$ ]] || die "bad tier name '$1'"; }
check_num() { [[ $1 =~ ^[0-9]+$ ]] || die "'$1' is not a whole number"; }

state() { echo "$HOME_DIR/$1.env"; }

# Sets LOOP MNT RAM IMG from the tier's state file.
load() {
    [ -f "$(state "$1")" ] || die "no tier '$1' in $HOME_DIR"
    # shellcheck disable=SC1090
    . "$(state "$1")"
}

devnum() { cat "/sys/block/$(basename "$1")/dev"; }

# LOOP READ_MBPS WRITE_MBPS; 0 removes the rule.
caps() {
    local dev
    dev=$(devnum "$1")
    echo "$dev $(($2 * 1000000))" >"$BLKIO/blkio.throttle.read_bps_device"
    echo "$dev $(($3 * 1000000))" >"$BLKIO/blkio.throttle.write_bps_device"
}

cmd_up() {
    [ $# -eq 5 ] || usage
    local name=$1 size=$2 r=$3 w=$4 mnt=$5
    need_root
    need_blkio
    check_name "$name"
    check_num "$size"
    check_num "$r"
    check_num "$w"
    [ "$size" -ge 1 ] || die "SIZE_GIB must be at least 1"
    [[ $mnt = /* ]] || die "MOUNTPOINT must be absolute"
    command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 is missing (apt-get install e2fsprogs)"
    [ ! -e "$(state "$name")" ] || die "tier '$name' is already up (tierbed.sh down $name)"
    mkdir -p "$HOME_DIR" "$mnt"
    mountpoint -q "$mnt" && die "$mnt is already a mount point"
    local ram="$HOME_DIR/$name.ram"
    mkdir -p "$ram"
    mount -t tmpfs -o "size=$((size * 1024 + 64))m,mode=0700" "tierbed-$name" "$ram"
    local img="$ram/image"
    truncate -s "${size}G" "$img"
    local loop
    loop=$(losetup --find --show --direct-io=on "$img")
    # Written first, so `down` can undo a half-made tier.
    printf 'LOOP=%q\nMNT=%q\nRAM=%q\nIMG=%q\n' "$loop" "$mnt" "$ram" "$img" >"$(state "$name")"
    mkfs.ext4 -q -F -L "tb-$name" -E lazy_itable_init=0,lazy_journal_init=0,nodiscard "$loop"
    caps "$loop" "$r" "$w"
    # discard: deleted files give their RAM back.
    mount -o noatime,discard "$loop" "$mnt"
    chmod 1777 "$mnt"
    say "tier '$name' up: $mnt on $loop ($(devnum "$loop")), ${size} GiB, read $r MB/s, write $w MB/s (0 = uncapped)"
}

cmd_rate() {
    [ $# -eq 3 ] || usage
    need_root
    need_blkio
    check_num "$2"
    check_num "$3"
    load "$1"
    caps "$LOOP" "$2" "$3"
    say "tier '$1': read $2 MB/s, write $3 MB/s"
}

cmd_fail() {
    [ $# -eq 1 ] || usage
    need_root
    load "$1"
    mountpoint -q "$MNT" || die "tier '$1' is not mounted"
    # errors=remount-ro: the error below turns the file system read-only at once.
    mount -o remount,errors=remount-ro "$MNT"
    echo "tierbed fault injection" >"/sys/fs/ext4/$(basename "$LOOP")/trigger_fs_error"
    say "tier '$1' failed: read-only from now on (writes get EROFS)"
}

cmd_down() {
    [ $# -eq 1 ] || usage
    need_root
    check_name "$1"
    if [ ! -f "$(state "$1")" ]; then
        say "no tier '$1' (nothing to do)"
        return 0
    fi
    load "$1"
    if mountpoint -q "$MNT"; then
        umount "$MNT" || die "cannot unmount $MNT (still in use? fuser -vm $MNT)"
    fi
    if [ -e "/sys/block/$(basename "$LOOP")/dev" ]; then
        # The rules would stay on the loop device for its next user.
        caps "$LOOP" 0 0 || true
        losetup -d "$LOOP" || true
    fi
    # The loop device lets go of its image a moment after `losetup -d` (seconds on a busy
    # machine).
    local i
    for i in $(seq 300); do
        mountpoint -q "$RAM" || break
        umount "$RAM" 2>/dev/null && break
        sleep 0.1
    done
    if mountpoint -q "$RAM"; then umount "$RAM"; fi
    rmdir "$RAM" 2>/dev/null || true
    rmdir "$MNT" 2>/dev/null || true
    rm -f "$(state "$1")"
    say "tier '$1' down"
}

cmd_status() {
    local f any=0
    for f in "$HOME_DIR"/*.env; do
        [ -e "$f" ] || continue
        any=1
        (
            # shellcheck disable=SC1090
            . "$f"
            dev=$(devnum "$LOOP" 2>/dev/null || echo "?")
            rd=$(awk -v d="$dev" '$1 == d { print $2 / 1e6 }' "$BLKIO/blkio.throttle.read_bps_device")
            wr=$(awk -v d="$dev" '$1 == d { print $2 / 1e6 }' "$BLKIO/blkio.throttle.write_bps_device")
            echo "$(basename "$f" .env): $MNT on $LOOP ($dev), read ${rd:-0} MB/s, write ${wr:-0} MB/s"
        )
    done
    [ $any = 1 ] || echo "no tiers in $HOME_DIR"
}

case ${1:-} in
up | rate | fail | down | status)
    cmd=$1
    shift
    "cmd_$cmd" "$@"
    ;;
*) usage ;;
esac
