#!/bin/bash
# bench-onetier.sh - what the daemon costs on one tier: the DeepSpeed replay on a single
# tierbed tier (1200/800 MB/s, --ram) used directly, through tierfs with every byte through
# the daemon (passthrough = "off", what an ordinary user gets), and through tierfs with
# passthrough = "direct" (root), interleaved per run. Root only (tierbed).
#
#   tools/bench-onetier.sh [--runs N] [--steps S] [--out DIR]
#
# Prints the median optimizer-step I/O time of each target over all runs and steps, and
# its ratio to direct. This is the floor of what tierfs can do when it puts
# everything on one tier (e.g. a slow tier paused, see docs/PERFORMANCE.md "Contention").
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
TB=${TIERBED:-$HERE/../shared/tierbed/tierbed.sh}
T=$HERE/target/release
export TIERBED_HOME=${TIERBED_HOME:-/var/lib/tierbed-onetier}
P=${PREFIX:-onetier}
RUNS=3; STEPS=6; OUT=/tmp/bench-onetier
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$T/tierfs" ] && [ -x "$T/tierfs-replay" ] || (cd "$HERE" && cargo build --release)
NV=/mnt/tb-$P-nvme; MNT=$OUT/mnt
mkdir -p "$OUT" "$MNT"
cleanup() {
  mountpoint -q "$MNT" && "$T/tierfs" unmount "$MNT" || true
  bash "$TB" down $P-nvme --purge >/dev/null 2>&1 || true
}
trap cleanup EXIT
bash "$TB" up $P-nvme 5 1200 800 "$NV" --ram --force >/dev/null
for pt in off direct; do
  cat >"$OUT/$pt.toml" <<EOT
[[tier]]
name = "nvme"
path = "$NV/t"
create = true
read_bandwidth = "1200MB/s"
write_bandwidth = "800MB/s"
[placement]
layout = "stripe"
adapt = true
[mount]
passthrough = "$pt"
log_file = "$OUT/daemon.log"
EOT
done
for r in $(seq 1 "$RUNS"); do
  for tg in direct daemon passthrough; do
    case $tg in
      direct) D=$NV/direct ;;
      daemon) "$T/tierfs" mount --config "$OUT/off.toml" "$MNT" >/dev/null; D=$MNT/ds ;;
      passthrough) "$T/tierfs" mount --config "$OUT/direct.toml" "$MNT" >/dev/null; D=$MNT/ds ;;
    esac
    mkdir -p "$D"
    "$T/tierfs-replay" "$D" --ranks 2 --subgroups 8 --subgroup-bytes 32MiB --engine libaio \
      --steps "$STEPS" --cleanup --json "$OUT/$tg-$r.json" >"$OUT/$tg-$r.log" 2>&1 \
      || { echo "replay failed on $tg (see $OUT/$tg-$r.log)" >&2; exit 1; }
    if [ $tg = direct ]; then rm -rf "$D"; else "$T/tierfs" unmount "$MNT"; fi
  done
done
python3 - "$OUT" "$RUNS" <<'PY'
import json, sys, statistics as st
out, runs = sys.argv[1], int(sys.argv[2])
med = {}
for tg in ("direct", "daemon", "passthrough"):
    v = []
    for r in range(1, runs + 1):
        j = json.load(open(f"{out}/{tg}-{r}.json"))
        v += [p["io_s"] for p in j["phases"] if p["phase"] == "optimizer"]
    med[tg] = st.median(v)
    print(f"{tg:12s} optimizer step I/O {med[tg]:.3f} s median of {len(v)} steps, "
          f"{med[tg] / med['direct']:.2f}x direct")
PY
