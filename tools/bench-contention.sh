#!/bin/bash
# bench-contention.sh - the DeepSpeed replay through tierfs while the pfs tier slows down
# mid-run, against the nvme tier used directly.
#
#   tools/bench-contention.sh [--runs N] [--scenario throttle|writer] [--steps S] [--out DIR]
#
# Tiers (tierbed, root): nvme 1200/800 MB/s --ram, pfs 400/300 MB/s --ram, named
# ${PREFIX:-h5c}-nvme / -pfs, state in TIERBED_HOME (default /var/lib/tierbed-h5c).
# Each run replays `tierfs-replay --ranks 2 --subgroups 8 --subgroup-bytes 32MiB --engine
# libaio --steps S` (default 12) once through tierfs (stripe, adapt = true, min_share
# $MIN_SHARE (default 0.10), passthrough $PASSTHROUGH (default "direct", what README
# recommends for DeepSpeed as root; "off" = every byte through the daemon)) and once on the
# nvme tier directly, with the same disturbance T0 s after the replay starts (default 12):
#   throttle: `tierbed.sh rate pfs 40 30` (10 % of its caps) for D s (default 20), then back
#   writer:   a competing fio writer on the pfs tier (O_DIRECT 1 MiB, 2 jobs x QD 8) for D s
# Per step it prints the optimizer-step I/O time of both and their ratio, with the phase
# (before / during / after the disturbance, by the step's start time); at the end the
# min/median/max over runs of the median ratio per phase. The first tierfs run is recorded
# (`tierfs record`) and plotted (`tierfs plot`) to OUT/contention-SCENARIO.png.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
TB=${TIERBED:-$HERE/../shared/tierbed/tierbed.sh}
TIERFS=$HERE/target/release/tierfs
REPLAY=$HERE/target/release/tierfs-replay
export TIERBED_HOME=${TIERBED_HOME:-/var/lib/tierbed-h5c}
P=${PREFIX:-h5c}
RUNS=3; SCEN=throttle; STEPS=12; T0=${T0:-12}; D=${D:-20}; OUT=/tmp/bench-contention
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --scenario) SCEN=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$TIERFS" ] && [ -x "$REPLAY" ] || (cd "$HERE" && cargo build --release)
mkdir -p "$OUT"
NV=/mnt/tb-$P-nvme; PF=/mnt/tb-$P-pfs; MNT=$OUT/mnt
cleanup() {
  mountpoint -q "$MNT" && "$TIERFS" unmount "$MNT" || true
  bash "$TB" down $P-nvme --purge >/dev/null 2>&1 || true
  bash "$TB" down $P-pfs --purge >/dev/null 2>&1 || true
}
trap cleanup EXIT
bash "$TB" up $P-nvme 5 1200 800 $NV --ram --force >/dev/null
bash "$TB" up $P-pfs 5 400 300 $PF --ram --force >/dev/null
mkdir -p "$MNT"
cat >"$OUT/c.toml" <<EOT
[[tier]]
name = "nvme"
path = "$NV/t"
create = true
read_bandwidth = "1200MB/s"
write_bandwidth = "800MB/s"
[[tier]]
name = "pfs"
path = "$PF/t"
create = true
read_bandwidth = "400MB/s"
write_bandwidth = "300MB/s"
[placement]
layout = "stripe"
adapt = true
min_share = ${MIN_SHARE:-0.10}
[mount]
passthrough = "${PASSTHROUGH:-direct}"
log_file = "$OUT/daemon.log"
EOT
disturb() { # in the background: wait T0, disturb for D s, undo
  sleep "$T0"
  if [ "$SCEN" = throttle ]; then
    bash "$TB" rate $P-pfs 40 30 >/dev/null; sleep "$D"; bash "$TB" rate $P-pfs 400 300 >/dev/null
  else
    mkdir -p "$PF/hog"
    fio --name=hog --directory="$PF/hog" --rw=write --bs=1M --direct=1 --size=256M --numjobs=2 \
      --iodepth=8 --ioengine=libaio --time_based --runtime="$D" --output=/dev/null >/dev/null 2>&1 || true
    rm -rf "$PF/hog"
  fi
}
replay() { # DIR JSON
  "$REPLAY" "$1" --ranks 2 --subgroups 8 --subgroup-bytes 32MiB --engine libaio --steps "$STEPS" \
    --cleanup --json "$2" >"$2.log" 2>&1
}
for r in $(seq 1 "$RUNS"); do
  for target in tierfs direct; do
    if [ $target = tierfs ]; then
      "$TIERFS" mount --config "$OUT/c.toml" "$MNT" 2>/dev/null
      DIR=$MNT/ds
      if [ "$r" = 1 ]; then
        "$TIERFS" record "$MNT" --out "$OUT/record-$SCEN.jsonl" --interval 1 --duration $((T0 + D + 40)) >/dev/null 2>&1 &
        REC=$!
      fi
    else
      DIR=$NV/direct
    fi
    mkdir -p "$DIR"
    disturb & DP=$!
    replay "$DIR" "$OUT/$SCEN-$target-$r.json"
    wait $DP
    if [ $target = tierfs ]; then
      [ "$r" = 1 ] && { kill $REC 2>/dev/null || true; wait $REC 2>/dev/null || true; }
      grep -E "shares now|probe of|paused|resumed" "$OUT/daemon.log" | tail -12 >"$OUT/$SCEN-shares-$r.txt" || true
      "$TIERFS" unmount "$MNT"
    else
      rm -rf "$DIR"
    fi
  done
done
"$TIERFS" plot "$OUT/record-$SCEN.jsonl" --out "$OUT/contention-$SCEN.png" >/dev/null 2>&1 || echo "plot failed"
python3 - "$OUT" "$SCEN" "$RUNS" "$T0" "$D" <<'EOF'
import json, sys, statistics as st
out, scen, runs, t0, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
def steps(path):
    j = json.load(open(path)); t = 0.0; res = {}
    for ph in j["phases"]:
        if ph["phase"] == "optimizer":
            start = t
            phase = "before" if start < t0 else ("during" if start < t0 + d else "after")
            res[ph["step"]] = (ph["io_s"], phase)
        t += ph["wall_s"]
    return res
agg = {"before": [], "during": [], "during_late": [], "after": []}
for r in range(1, runs + 1):
    a = steps(f"{out}/{scen}-tierfs-{r}.json"); b = steps(f"{out}/{scen}-direct-{r}.json")
    print(f"run {r}: step  tierfs_s  direct_s  ratio  phase(tierfs)")
    per = {"before": [], "during": [], "during_late": [], "after": []}
    seen_during = 0
    for s in sorted(a):
        ta, ph = a[s]; tb = b[s][0]
        ratio = ta / tb
        print(f"        {s:>4}  {ta:8.2f}  {tb:8.2f}  {ratio:5.2f}  {ph}")
        per[ph].append(ratio)
        if ph == "during":
            seen_during += 1
            if seen_during > 2:
                per["during_late"].append(ratio)
    for k in agg:
        if per[k]:
            agg[k].append(st.median(per[k]))
print(f"\n{scen}: median per run of tierfs/direct optimizer-step I/O time, min / median / max over {runs} runs")
for k, v in agg.items():
    if v:
        print(f"  {k:12s} {min(v):.2f} / {st.median(v):.2f} / {max(v):.2f}  (n={len(v)})")
EOF
