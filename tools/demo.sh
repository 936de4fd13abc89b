#!/bin/bash
# demo.sh - build tierfs, mount the demo config (two tier folders under /tmp, no setup
# needed), write and verify 12 files with O_DIRECT, and show where the bytes went.
#
#   tools/demo.sh            # leaves the demo mounted at /tmp/tierfs-demo
#   tools/demo.sh --unmount  # ... and unmounts at the end
set -euo pipefail
cd "$(dirname "$0")/.."
MNT=${TIERFS_DEMO_MNT:-/tmp/tierfs-demo}
cargo build --release --quiet
BIN=target/release/tierfs
if mountpoint -q "$MNT" 2>/dev/null; then "$BIN" unmount "$MNT"; fi
mkdir -p "$MNT"
"$BIN" mount --config mount-configs/demo.toml "$MNT"
work=$(mktemp -d)
for i in $(seq 1 12); do
  head -c $((8 << 20)) /dev/urandom >"$work/src$i"
  dd if="$work/src$i" of="$MNT/file$i.swp" bs=1M oflag=direct status=none
done
for i in $(seq 1 12); do cmp "$work/src$i" "$MNT/file$i.swp"; done
rm -rf "$work"
echo "12 files of 8 MiB written with O_DIRECT and read back identical."
echo
"$BIN" stat "$MNT"
echo
head -5 "$MNT/.tierfs/files"
echo
echo "Backing folders: /tmp/tierfs-demo-nvme/data and /tmp/tierfs-demo-pfs/data"
if [ "${1:-}" = --unmount ]; then
  rm -f "$MNT"/file*.swp
  "$BIN" unmount "$MNT"
  echo "unmounted $MNT"
else
  echo "Still mounted at $MNT; unmount with: $BIN unmount $MNT"
fi
