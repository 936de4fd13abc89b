#!/usr/bin/env bash
# The real-DeepSpeed smoke test through a tierfs mount: mount two tier folders (temporary,
# 2:1 bandwidths), train 5 steps with nvme_path on a plain folder and then on the mount,
# demand bit-identical losses and parameters, unmount. CI runs this.
#
#   tools/deepspeed/mount-smoke.sh [TIERFS_BINARY]     (default: target/debug/tierfs, built if missing)
#
# Environment: TIERFS_TRANSPORT (auto, uring, dev: the daemon's transport, checked),
# PASSTHROUGH (default: none in the config, so the product's defaults decide: as root
# whole files with DeepSpeed's swap files in kernel passthrough), CACHE (a size such as
# "64MiB": mount with a host-memory cache of that size, "off" for none; default: the
# automatic size, as a config without [cache] gets), DIRECT=1 (the training on the mount
# runs under `tierfs run`: its swap files on the direct path, which must have served
# some; files staging memory holds are served from memory, so bound it with CACHE), WORK
# (temp folder),
# and everything smoke.sh reads (TIERFS_DS_VENV, TORCH_EXTENSIONS_DIR, SMOKE_STEPS).
# The first run on a machine installs torch and deepspeed into a venv outside the repo
# (~3 GB of wheels) and JIT-builds DeepSpeed's ops (~6.5 min on 2 cores).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${1:-$ROOT/target/debug/tierfs}"
[ -x "$BIN" ] || (cd "$ROOT" && cargo build)
WORK="${WORK:-$(mktemp -d /tmp/tierfs-ds-smoke.XXXXXX)}"
PT="${PASSTHROUGH:-default}"
mkdir -p "$WORK/nvme" "$WORK/pfs" "$WORK/mnt" "$WORK/plain"
cat >"$WORK/tierfs.toml" <<EOT
[[tier]]
name = "nvme"
path = "$WORK/nvme"
write_bandwidth = "2GB/s"
[[tier]]
name = "pfs"
path = "$WORK/pfs"
write_bandwidth = "1GB/s"
[mount]
log_file = "$WORK/daemon.log"
EOT
[ "$PT" = default ] || printf 'passthrough = "%s"\n' "$PT" >>"$WORK/tierfs.toml"
if [ -n "${CACHE:-}" ]; then
  printf '[cache]\nsize = "%s"\nwriteback_delay = 1.0\n' "$CACHE" >>"$WORK/tierfs.toml"
fi
cleanup() {
  if mountpoint -q "$WORK/mnt"; then "$BIN" unmount "$WORK/mnt" || umount -l "$WORK/mnt" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
"$BIN" mount --config "$WORK/tierfs.toml" "$WORK/mnt"
# Which transport carries the requests (TIERFS_TRANSPORT, when set, must be the one used).
TRANSPORT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["fuse"]["transport"])' \
  "$WORK/mnt/.tierfs/stats.json")
echo "transport: $TRANSPORT"
case "${TIERFS_TRANSPORT:-auto}" in
  auto) ;;
  "$TRANSPORT") ;;
  *) echo "FAIL: TIERFS_TRANSPORT=$TIERFS_TRANSPORT but the mount uses $TRANSPORT" >&2; exit 1 ;;
esac
WRAP=""
[ "${DIRECT:-0}" = 1 ] && WRAP="$BIN run --"
SMOKE_CLEANUP=1 SMOKE_WRAP_B="$WRAP" "$ROOT/tools/deepspeed/smoke.sh" "$WORK/plain" "$WORK/mnt/ds"
if [ "${DIRECT:-0}" = 1 ]; then
  # The run must have gone direct: leases granted on the mount.
  python3 - "$WORK/mnt/.tierfs/stats.json" <<'EOF2'
import json, sys
s = json.load(open(sys.argv[1]))
n = sum(t.get("direct_opens", 0) for t in s["tiers"])
moved = sum(t.get("direct_bytes", 0) for t in s["tiers"])
print(f"direct path: {n} leases, {moved / 1e6:.0f} MB moved past the daemon")
if n == 0 or moved == 0:
    sys.exit("FAIL: DIRECT=1 but no swap file went on the direct path")
EOF2
fi
echo "--- tierfs after the run (passthrough = $PT, cache = ${CACHE:-auto}, transport = $TRANSPORT)"
"$BIN" stat "$WORK/mnt"
python3 - "$WORK/mnt/.tierfs/cache" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
print("cache size: %s" % c["size_from"])
if c["enabled"]:
  print("cache: %d MiB used of %d, hits %.0f MiB, misses %.0f MiB, absorbed %.0f MiB, written back %.0f MiB, "
      "evictions %d, discarded dirty %.0f MiB" % (c["used"] >> 20, c["config"]["size"] >> 20,
      c["hit_bytes"] / 2**20, c["miss_bytes"] / 2**20, c["absorbed_bytes"] / 2**20,
      c["writeback_bytes"] / 2**20, c["evictions"], c["discarded_dirty_bytes"] / 2**20))
  for o in c["orders"]:
    print("  order %s: %s, cycle of %d files, %d cycles" % (o["dir"], o["mode"], o["cycle_len"], o["cycles"]))
EOF
# The daemon's log: a WARN or ERROR line fails the test unless it is expected here, by
# a pattern below with its reason. This run has no faults, so none is listed: anything the
# daemon warns about (a refused O_DIRECT, a failed backing call, a panic) is a finding.
ALLOWED=(
)
[ -s "$WORK/daemon.log" ] || { echo "FAIL: no daemon log at $WORK/daemon.log" >&2; exit 1; }
bad=$(grep -E '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z +(WARN|ERROR) ' "$WORK/daemon.log" || true)
for re in "${ALLOWED[@]}"; do
  bad=$(printf '%s\n' "$bad" | grep -vE "$re" || true)
done
if [ -n "$bad" ]; then
  echo "FAIL: the daemon logged warnings or errors (tools/deepspeed/mount-smoke.sh lists the expected ones):" >&2
  echo "$bad" | head -20 >&2
  exit 1
fi
echo "daemon log: $(wc -l <"$WORK/daemon.log") lines, no WARN or ERROR"
