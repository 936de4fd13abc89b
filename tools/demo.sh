#!/bin/bash
# demo.sh - build tierfs, mount the demo config (two tier folders under /tmp, no setup
# needed), write and verify 12 files with O_DIRECT, and show where the bytes went.
# Every path has the user's name in it, so several users can run it on one machine.
#
#   tools/demo.sh            # leaves the demo mounted at /tmp/tierfs-demo-$USER
#   tools/demo.sh --unmount  # ... and unmounts at the end
#
# Environment: TIERFS_BIN (use this tierfs binary instead of building one),
# TIERFS_DEMO_MNT (the mountpoint).
set -euo pipefail
cd "$(dirname "$0")/.."
# The config expands ${USER} from the environment, or from the password file without it.
USER=${USER:-$(id -un)}
export USER
MNT=${TIERFS_DEMO_MNT:-/tmp/tierfs-demo-$USER}
if [ -n "${TIERFS_BIN:-}" ]; then
  BIN=$TIERFS_BIN
else
  if ! command -v cargo >/dev/null; then
    echo "demo.sh: cargo not found: install Rust (README.md, Install) or set TIERFS_BIN" >&2
    exit 2
  fi
  cargo build --release --quiet
  BIN=target/release/tierfs
fi
if mountpoint -q "$MNT" 2>/dev/null; then "$BIN" unmount "$MNT"; fi
mkdir -p "$MNT"
"$BIN" mount --config mount-configs/demo.toml "$MNT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq 1 12); do
  head -c $((8 << 20)) /dev/urandom >"$work/src$i"
  dd if="$work/src$i" of="$MNT/file$i.swp" bs=1M oflag=direct status=none
done
for i in $(seq 1 12); do cmp "$work/src$i" "$MNT/file$i.swp"; done
echo "12 files of 8 MiB written with O_DIRECT and read back identical."
echo
"$BIN" stat "$MNT"
echo
head -5 "$MNT/.tierfs/files"
echo
echo "Backing folders: /tmp/tierfs-demo-$USER-nvme/data and /tmp/tierfs-demo-$USER-pfs/data"
if [ "${1:-}" = --unmount ]; then
  rm -f "$MNT"/file*.swp
  "$BIN" unmount "$MNT"
  echo "unmounted $MNT"
else
  echo "Still mounted at $MNT; unmount with: $BIN unmount $MNT"
fi
