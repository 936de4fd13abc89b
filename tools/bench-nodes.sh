#!/bin/bash
# bench-nodes.sh - N simulated nodes of one job sharing one slow tier (issues #17, #40).
#
#   tools/bench-nodes.sh [--nodes "1 2 4"] [--runs 3] [--steps 6] [--warmup 0]
#                        [--targets "direct tierfs solo"] [--scenario busy|idle|writer|hogs]
#                        [--out DIR] [--smoke]
#
# Root; tierbed with --ram and --force ($TIERBED, else /work/shared/tierbed/tierbed.sh).
# On one machine, as a job's nodes share a Lustre file system: node i has its own fast tier
# (tierbed "${PREFIX}-nvme<i>" at /mnt/${PREFIX}-nvme<i>, RAM, $FAST MB/s read/write, default
# "1200 800") and its own replay; every node's slow tier is its own folder (node<i>, as
# ${HOSTNAME} would be) on ONE shared tierbed tier ("${PREFIX}-pfs" at /mnt/${PREFIX}-pfs,
# disk, $SLOW, default "400 300"), where the ledger folder is too. PREFIX defaults to
# "nodes"; state in TIERBED_HOME (default /var/lib/tierbed-nodes); everything is taken down
# at the end. Sizes: FAST_GB (2; a RAM tier holds only what is written), SLOW_GB (6, and at
# least N + 2: each probe needs 1 GiB free, solo probes N at once). --smoke: 1 run, 2 steps,
# 8 MiB subgroups, small tiers (N = 2 unless --nodes comes after it): only shows that the
# bench works (its numbers mean nothing). --nodes 8 works (8 RAM tiers of FAST_GB each).
#
# Targets, each run with all N nodes at once (the order is interleaved in every run):
#   direct   each node's replay on its fast tier itself: the "fast tier alone" time
#   tierfs   tierfs per node (layout $LAYOUT (default "stripe"), adapt, passthrough
#            $PASSTHROUGH (default "direct")),
#            the nodes coordinated through a ledger on the shared tier (shared_ledger,
#            shared_job, shared_node on the pfs tier); the shared tier's bandwidth is not
#            stated: one node probes it for the job
#   solo     the same without the shared_* keys (what tierfs did before issue #17: each
#            node probes the shared tier and follows its own estimates)
#   before   the tierfs target with the binary in $BEFORE (a build to compare against,
#            interleaved in the same run)
#   private  each node with a slow tier of its own capped at SLOW/N (what a perfect split
#            of the shared tier gives each node: the same floor, no coordination needed);
#            the gap between it and the floor is the daemon's cost, not the sharing's
#   TARGET-run  (tierfs-run, solo-run, private-run, before-run) the same target with each
#            node's replay under `tierfs run` (the direct path: the preload library beside
#            that target's binary on LD_PRELOAD, so the replay's O_DIRECT swap files get the
#            tier files' own descriptors and their bytes bypass FUSE) and `passthrough =
#            "off"` (the daemon grants no lease for a file in kernel passthrough). The
#            daemons run as root, as for the other targets: the tiers, the ledger and the
#            memory cgroups are root's, and with passthrough off a root daemon takes the
#            path an ordinary user's does (no kernel passthrough; stripes never have it).
# Scenarios:
#   busy     (default) every node runs the replay
#   idle     only node 1 runs it; the others are mounted and idle (its share of the slow
#            tier should be its N = 1 share)
#   writer   every node runs it while a foreign fio writer (O_DIRECT 1 MiB, 2 jobs x QD 8)
#            writes to the shared tier outside the job
#   hogs     every node runs it while $HOGS (default 4) processes spin on the CPU, as an
#            optimizer takes the cores: the tiers' estimates must not read the machine's
#            load as slow tiers
# Memory: each daemon runs in a cgroup-v1 memory cgroup of its own, limit $MEMCG_LIMIT,
# default a sixth of a node's swap set (the replay's files, from REPLAY_ARGS: 1.21 GB with
# the default replay, 0.15 GB with --smoke's) plus 256 MiB for the daemon itself: 448 MiB
# by default (it was a quarter of a step's 2.55 GB of swap traffic + 256 MiB, 864 MiB,
# before issue #40). Staging memory (`[cache] size`, $STAGING) is what "auto" would give
# under that limit (1/8 of it), but never more than a sixth of the swap set: 56 MiB by
# default, 24 MiB with --smoke; so it holds far less than the swap set, as at real scale,
# where the swap set is far larger than memory. summary.md names the limit, the swap set
# and each daemon's staging size. MEMCG_LIMIT=SIZE for another limit, MEMCG_LIMIT=0 for
# none; STAGING=auto for the daemon's own rule, or a size ("64MiB").
# WORKLOAD=ds: each node trains real DeepSpeed instead (tools/deepspeed/train_bench.py, the
# venv of tools/deepspeed/setup-venv.sh at DS_VENV [~/.cache/tierfs/ds-venv], DS_RANKS [2]
# ranks, DS_MODEL_ARGS [--d-model 768 --layers 6 --heads 12 --batch 1 --seq 64], DeepSpeed's
# own aio defaults, as root); a node's figure is then its median training step (steps >= 3)
# against its direct step, in place of the optimizer step's I/O. An indicative run: N
# trainings of DS_RANKS ranks each share the machine's cores.
# Replay per node: tierfs-replay DIR $REPLAY_ARGS --steps S (default: --ranks 1 --subgroups 8
# --subgroup-bytes 32MiB --engine libaio; libaio goes through the preload library). Per node
# and run: the median optimizer-step I/O time of its steps after the first --warmup W ones
# (default 0: every step), divided by the same node's direct time of that run.
# Report (tools/bench-nodes-summary.py OUT writes it again from the files): OUT/summary.md,
# a markdown table per N and target: per node the median (min-max) over runs, the median
# over nodes, the worst node, the floor F/(F + P/N) from the caps (F, P: harmonic means of
# read and write caps), per node the daemon's CPU-s per GB its tiers moved over the replay
# (utime + stime from /proc/PID/stat; bytes from stats.json before and after: bytes_read +
# bytes_written of every tier, direct-path bytes included), the share of those bytes on
# the direct path (direct_bytes), pause/resume flips per minute (the daemon log's "tier
# '...' paused/resumed" lines stamped within the replay), the slow tier's share (median of
# the recorded samples), then the machine's CPU use and the load average; the staging size
# and cgroup peak below it. OUT/results.csv and OUT/results.json hold the same per node and
# run, for plots; with matplotlib in PLOT_VENV (default ~/.cache/tierfs/plot-venv, as
# tools/deepspeed/bench.sh makes it; PLOT=0 for none) OUT/bench-nodes.png plots the ratio
# and the daemon CPU-s/GB against N (copy it to docs/ for a figure). Each tierfs node is
# recorded (`tierfs record`, with the online estimates) and the first run's records are
# plotted (`tierfs plot`) to OUT/N<n>-<target>-node<i>.png, with each node's view of the
# ledger (live nodes, its part of the shared tier) over time in OUT/rec/*.shared.tsv.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
CMDLINE="tools/bench-nodes.sh $*"
TB=${TIERBED:-/work/shared/tierbed/tierbed.sh}
grep -q -- '--ram' "$TB" 2>/dev/null || { echo "bench-nodes.sh: $TB: no tierbed with --ram (set TIERBED)" >&2; exit 2; }
TIERFS=${TIERFS:-$HERE/target/release/tierfs}
REPLAY=${REPLAY:-$HERE/target/release/tierfs-replay}
export TIERBED_HOME=${TIERBED_HOME:-/var/lib/tierbed-nodes}
P=${PREFIX:-nodes}
NODES="1 2 4"; RUNS=3; STEPS=6; WARMUP=0; TARGETS="direct tierfs solo"; SCEN=busy; OUT=/tmp/bench-nodes
read -r FAST_R FAST_W <<<"${FAST:-1200 800}"
read -r SLOW_R SLOW_W <<<"${SLOW:-400 300}"
FAST_GB=${FAST_GB:-2}; SLOW_GB=${SLOW_GB:-}
REPLAY_ARGS=${REPLAY_ARGS:---ranks 1 --subgroups 8 --subgroup-bytes 32MiB --engine libaio}
PASSTHROUGH=${PASSTHROUGH:-direct}
LAYOUT=${LAYOUT:-stripe}
WORKLOAD=${WORKLOAD:-replay}
DS_VENV=${DS_VENV:-$HOME/.cache/tierfs/ds-venv}
DS_RANKS=${DS_RANKS:-2}
DS_MODEL_ARGS=${DS_MODEL_ARGS:---d-model 768 --layers 6 --heads 12 --batch 1 --seq 64}
case $WORKLOAD in
  replay) ;;
  ds) [ -x "$DS_VENV/bin/python" ] || { echo "bench-nodes.sh: WORKLOAD=ds needs the DeepSpeed venv at $DS_VENV (tools/deepspeed/setup-venv.sh)" >&2; exit 2; } ;;
  *) echo "bench-nodes.sh: WORKLOAD must be replay or ds" >&2; exit 2 ;;
esac
MIN_SHARE=${MIN_SHARE:-0.10}
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) NODES=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --targets) TARGETS=$2; shift 2 ;;
    --scenario) SCEN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --smoke) NODES=2; RUNS=1; STEPS=2; FAST_GB=1; SLOW_GB=${SLOW_GB:-3}
             REPLAY_ARGS="--ranks 1 --subgroups 4 --subgroup-bytes 8MiB --engine libaio"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
MAXN=0
for n in $NODES; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "--nodes: whole numbers from 1" >&2; exit 2; }
  [ "$n" -gt "$MAXN" ] && MAXN=$n
done
[ -n "$SLOW_GB" ] || SLOW_GB=$(( MAXN + 2 > 6 ? MAXN + 2 : 6 ))
for tg in $TARGETS; do
  case $tg in
    direct|tierfs|solo|before|private|tierfs-run|solo-run|before-run|private-run) ;;
    *) echo "--targets: '$tg' is not a target (direct tierfs solo before private, and the last four with -run)" >&2; exit 2 ;;
  esac
done
if [[ " $TARGETS " =~ " before"(-run)?" " ]] && [ ! -x "${BEFORE:-}" ]; then
  echo "bench-nodes.sh: targets before and before-run need BEFORE=<a tierfs binary>" >&2; exit 2
fi
[[ $WARMUP =~ ^[0-9]+$ ]] && [ "$WARMUP" -lt "$STEPS" ] || { echo "--warmup: a whole number below --steps" >&2; exit 2; }
# A node's swap set: the replay's files. Per rank and subgroup the fp32 master, exp_avg,
# exp_avg_sq and gradients (subgroup bytes + tail each) and the bf16 parameters (half).
SWAP_SET_B=$(python3 - "$REPLAY_ARGS" <<'PY'
import re, shlex, sys
a = shlex.split(sys.argv[1])
def opt(name, default):
    for i, x in enumerate(a):
        if x == name and i + 1 < len(a):
            return a[i + 1]
        if x.startswith(name + "="):
            return x.split("=", 1)[1]
    return default
def size(s):
    m = re.fullmatch(r"(\d+)\s*([KMGT]?)(i?)B?", s.strip(), re.I)
    if not m:
        sys.exit(f"REPLAY_ARGS: cannot read the size {s!r}")
    k = 1024 if m.group(3) or not m.group(2) else 1000
    return int(m.group(1)) * k ** " KMGT".index((m.group(2) or " ").upper())
total = size(opt("--subgroup-bytes", "32MiB")) + size(opt("--tail", "6KiB"))
per_sg = 4 * total + (0 if "--optimizer-only" in a else total // 2)
print(int(opt("--ranks", "1")) * int(opt("--subgroups", "8")) * per_sg)
PY
)
MEMCG_LIMIT=${MEMCG_LIMIT:-$(( SWAP_SET_B / 6 + 256 * 1024 * 1024 ))}
MEMCG_ROOT=/sys/fs/cgroup/memory
MEMCG_LIMIT_B=0
if [ "$MEMCG_LIMIT" != 0 ]; then
  MEMCG_LIMIT_B=$(numfmt --from=auto "$MEMCG_LIMIT") || { echo "MEMCG_LIMIT: bytes, or K/M/G, Ki/Mi/Gi" >&2; exit 2; }
  [ -w "$MEMCG_ROOT" ] || { echo "bench-nodes.sh: no writable cgroup-v1 memory controller at $MEMCG_ROOT (MEMCG_LIMIT=0 for none)" >&2; exit 2; }
fi
if [ -z "${STAGING:-}" ]; then
  STAGING_B=$(( SWAP_SET_B / 6 ))
  [ "$MEMCG_LIMIT_B" != 0 ] && [ $(( MEMCG_LIMIT_B / 8 )) -lt "$STAGING_B" ] && STAGING_B=$(( MEMCG_LIMIT_B / 8 ))
  # Whole MiB, and the cache's least size (16 MiB).
  STAGING="$(( STAGING_B >> 20 < 16 ? 16 : STAGING_B >> 20 ))MiB"
fi
case $SCEN in busy|idle|writer|hogs) ;; *) echo "--scenario: busy, idle, writer or hogs" >&2; exit 2 ;; esac
HOGS=${HOGS:-4}
[ "$(id -u)" = 0 ] || { echo "bench-nodes.sh needs root (tierbed)" >&2; exit 2; }
[ -x "$TIERFS" ] && [ -x "$REPLAY" ] || (cd "$HERE" && cargo build --release --workspace)
bin_of() { # TARGET -> the tierfs binary its daemons (and its `tierfs run`) are
  case $1 in before|before-run) echo "$BEFORE" ;; *) echo "$TIERFS" ;; esac
}
for tg in $TARGETS; do
  [[ $tg == *-run ]] || continue
  "$(bin_of "$tg")" run --print-library >/dev/null ||
    { echo "bench-nodes.sh: target $tg needs libtierfs_preload.so beside $(bin_of "$tg") (cargo build --release --workspace)" >&2; exit 2; }
done
mkdir -p "$OUT"
SLOWMNT=/mnt/$P-pfs
UP=()
cleanup() {
  set +e
  for m in "$OUT"/mnt/*; do mountpoint -q "$m" && "$TIERFS" unmount "$m" >/dev/null 2>&1; done
  [ -n "${FIO_PID:-}" ] && kill "$FIO_PID" 2>/dev/null
  [ -n "${HOG_PIDS:-}" ] && kill $HOG_PIDS 2>/dev/null
  for t in "${UP[@]}"; do bash "$TB" down "$t" --purge >/dev/null 2>&1; done
  for g in "$MEMCG_ROOT"/tierfs-nodes-$$-*; do [ -d "$g" ] && rmdir "$g" 2>/dev/null; done
}
trap cleanup EXIT
up() { # NAME GB R W DIR [--ram]
  bash "$TB" up "$1" "$2" "$3" "$4" "$5" ${6:-} --force >/dev/null
  UP+=("$1")
}
for i in $(seq 1 "$MAXN"); do up "$P-nvme$i" "$FAST_GB" "$FAST_R" "$FAST_W" "/mnt/$P-nvme$i" --ram; done
up "$P-pfs" "$SLOW_GB" "$SLOW_R" "$SLOW_W" "$SLOWMNT"
if [[ " $TARGETS " =~ " private"(-run)?" " ]]; then
  for i in $(seq 1 "$MAXN"); do up "$P-priv$i" 2 "$SLOW_R" "$SLOW_W" "/mnt/$P-priv$i"; done
fi
echo "tiers up: $MAXN x fast $FAST_R/$FAST_W MB/s (RAM), shared slow $SLOW_R/$SLOW_W MB/s (disk); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "daemon memory cgroups: $([ "$MEMCG_LIMIT" = 0 ] && echo none || echo "$MEMCG_LIMIT_B bytes each"); staging $STAGING; a node's swap set: $SWAP_SET_B bytes"
# What the summary needs to know about this run (tools/bench-nodes-summary.py reads it).
WORK_ARGS=$REPLAY_ARGS
[ "$WORKLOAD" = replay ] || WORK_ARGS="real DeepSpeed (tools/deepspeed/train_bench.py --ranks $DS_RANKS $DS_MODEL_ARGS), training step"
CMDLINE="WORKLOAD=$WORKLOAD $CMDLINE" SCEN=$SCEN TARGETS=$TARGETS REPLAY_ARGS=$WORK_ARGS MEMCG_LIMIT=$MEMCG_LIMIT \
LAYOUT=$LAYOUT PASSTHROUGH=$PASSTHROUGH STAGING=$STAGING TIERFS=$TIERFS BEFORE=${BEFORE:-} python3 - "$OUT/params.json" \
  "$FAST_R" "$FAST_W" "$SLOW_R" "$SLOW_W" "$RUNS" "$STEPS" "$WARMUP" "$MEMCG_LIMIT_B" "$SWAP_SET_B" "$MIN_SHARE" <<'PY'
import json, os, sys
fr, fw, sr, sw, runs, steps, warmup, limit, swap = map(int, sys.argv[2:11])
e = os.environ
json.dump({"command": e["CMDLINE"], "scenario": e["SCEN"], "targets": e["TARGETS"].split(),
           "fast": [fr, fw], "slow": [sr, sw], "runs": runs, "steps": steps, "warmup": warmup,
           "replay_args": e["REPLAY_ARGS"], "memcg_limit": e["MEMCG_LIMIT"], "memcg_limit_bytes": limit,
           "swap_set_bytes": swap, "min_share": float(sys.argv[11]), "layout": e["LAYOUT"],
           "passthrough": e["PASSTHROUGH"], "staging": e["STAGING"], "tierfs": e["TIERFS"], "before": e["BEFORE"]},
          open(sys.argv[1], "w"), indent=1)
PY

# One node's DeepSpeed training (WORKLOAD=ds): node I, result tag TAG; writes its step times
# as the replay's JSON would hold optimizer phases, so the summary reads both alike.
ds_node() {
  local i=$1 tag=$2 d=$OUT/res/$2-node$1.ds rc=0
  mkdir -p "$d"
  # `tierfs run` goes inside env -i (which would drop its LD_PRELOAD); a port per node.
  # shellcheck disable=SC2086
  env -i PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$DS_VENV/bin" LANG=C.UTF-8 \
    HOME="$HOME" USER=root TMPDIR="$d" TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$HOME/.cache/tierfs/torch_extensions}" \
    "${RUNP[@]}" "$DS_VENV/bin/python" "$HERE/tools/deepspeed/train_bench.py" --nvme-path "${DIRS[$((i - 1))]}" \
    --out "$d" --ranks "$DS_RANKS" --steps "$STEPS" --master-port $((29400 + 17 * i)) $DS_MODEL_ARGS \
    >"$OUT/res/$tag-node$i.log" 2>&1 || rc=$?
  python3 - "$d/rank0.json" "$OUT/res/$tag-node$i.json" <<'PY' || rc=1
import json, sys
j = json.load(open(sys.argv[1]))
# Steps 1-2 warm DeepSpeed up (as tools/deepspeed/bench.sh counts): steps >= 3.
json.dump({"workload": "ds", "phases": [{"phase": "optimizer", "step": k + 1, "io_s": s}
                                        for k, s in enumerate(j["step_s"]) if k >= 2]},
          open(sys.argv[2], "w"))
PY
  rm -rf "${DIRS[$((i - 1))]:?}"/* 2>/dev/null || true
  return $rc
}

config() { # N I TARGET -> config file path
  local n=$1 i=$2 tg=$3 base=${3%-run} f="$OUT/cfg/N$1-$3-node$2.toml" slow pt=$PASSTHROUGH
  mkdir -p "$OUT/cfg"
  # The direct path grants no lease for a file in kernel passthrough.
  [[ $tg == *-run ]] && pt=off
  if [ "$base" = private ]; then slow=/mnt/$P-priv$i/node$i; else slow=$SLOWMNT/node$i; fi
  cat >"$f" <<EOT
[[tier]]
name = "nvme"
path = "/mnt/$P-nvme$i/t"
create = true
read_bandwidth = "${FAST_R}MB/s"
write_bandwidth = "${FAST_W}MB/s"
[[tier]]
name = "pfs"
path = "$slow"
create = true
EOT
  if [ "$base" = tierfs ] || [ "$base" = before ]; then
    cat >>"$f" <<EOT
shared_ledger = "$SLOWMNT/ledger"
shared_job = "$JOB"
shared_node = "node$i"
EOT
  fi
  cat >>"$f" <<EOT
[placement]
layout = "$LAYOUT"
adapt = true
min_share = $MIN_SHARE
[cache]
size = "$STAGING"
[mount]
passthrough = "$pt"
log_file = "$OUT/logs/N$n-$tg-node$i.log"
scratch = true
EOT
  echo "$f"
}
cpu_of() { # PID -> utime+stime ticks
  awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0
}
machine_busy() { # -> "busy total" jiffies
  awk '/^cpu /{t=0; for (i=2;i<=NF;i++) t+=$i; print t-$5-$6, t}' /proc/stat
}
snap() { # WHEN: each node's stats.json now -> OUT/res/$tag-node<i>.stats-WHEN.json
  local i
  for i in $(seq 1 "$n"); do
    cp "$OUT/mnt/node$i/.tierfs/stats.json" "$OUT/res/$tag-node$i.stats-$1.json" 2>/dev/null || true
  done
}

HZ=$(getconf CLK_TCK)
for n in $NODES; do
  for r in $(seq 1 "$RUNS"); do
    for tg in $TARGETS; do
      base=${tg%-run}
      [ "$base" = private ] && [ "$n" = 1 ] && continue
      if [ "$base" = private ]; then
        for i in $(seq 1 "$n"); do bash "$TB" rate "$P-priv$i" $((SLOW_R / n)) $((SLOW_W / n)) >/dev/null; done
      fi
      JOB="bench-$n-$r-$$"
      tag="N$n-$tg-r$r"
      bin=$(bin_of "$tg")
      RUNP=(); [[ $tg == *-run ]] && RUNP=("$bin" run --)
      mkdir -p "$OUT/logs" "$OUT/res" "$OUT/rec" "$OUT/mnt"
      DIRS=(); PIDS=(); RECS=()
      for i in $(seq 1 "$n"); do
        if [ "$tg" = direct ]; then
          DIRS+=("/mnt/$P-nvme$i/direct"); mkdir -p "${DIRS[-1]}"; PIDS+=(0)
        else
          m=$OUT/mnt/node$i; mkdir -p "$m"
          rm -f "$OUT/logs/N$n-$tg-node$i.log"
          cfg=$(config "$n" "$i" "$tg")
          # All nodes mount at once, as a job's nodes do.
          if [ "$MEMCG_LIMIT" = 0 ]; then
            "$bin" mount --config "$cfg" "$m" >"$OUT/logs/$tag-node$i.mount" 2>&1 &
          else
            g=$MEMCG_ROOT/tierfs-nodes-$$-node$i
            [ -d "$g" ] || mkdir "$g"
            echo "$MEMCG_LIMIT_B" >"$g/memory.limit_in_bytes"
            echo 0 >"$g/memory.max_usage_in_bytes" 2>/dev/null || true
            bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$g" \
              "$bin" mount --config "$cfg" "$m" >"$OUT/logs/$tag-node$i.mount" 2>&1 &
          fi
          DIRS+=("$m/ds")
        fi
      done
      wait
      if [ "$tg" != direct ]; then
        for i in $(seq 1 "$n"); do
          m=$OUT/mnt/node$i
          mountpoint -q "$m" || { cat "$OUT/logs/$tag-node$i.mount"; exit 1; }
          mkdir -p "$m/ds"
          PIDS[$((i - 1))]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$m/.tierfs/stats.json")
          "$TIERFS" record "$m" --out "$OUT/rec/$tag-node$i.jsonl" --interval 1 >/dev/null 2>&1 &
          RECS+=($!)
        done
      fi
      if [ "$SCEN" = writer ]; then
        mkdir -p "$SLOWMNT/foreign"
        fio --name=foreign --directory="$SLOWMNT/foreign" --rw=write --bs=1M --direct=1 --size=256M \
          --numjobs=2 --iodepth=8 --ioengine=libaio --time_based --runtime=3600 --output=/dev/null >/dev/null 2>&1 &
        FIO_PID=$!
      fi
      HOG_PIDS=
      if [ "$SCEN" = hogs ]; then
        for _ in $(seq 1 "$HOGS"); do
          python3 -c 'while True: pass' & HOG_PIDS+="$! "
        done
      fi
      if [ "$tg" != direct ]; then snap start; fi
      C0=(); for pid in "${PIDS[@]}"; do C0+=("$(cpu_of "$pid")"); done
      read -r B0 T0 < <(machine_busy)
      L0=$(cut -d' ' -f1-3 /proc/loadavg)
      S0=$(date +%s.%N)
      RP=()
      for i in $(seq 1 "$n"); do
        if [ "$SCEN" = idle ] && [ "$i" -gt 1 ]; then continue; fi
        if [ "$WORKLOAD" = ds ]; then
          ds_node "$i" "$tag" &
        else
          # shellcheck disable=SC2086
          "${RUNP[@]}" "$REPLAY" "${DIRS[$((i - 1))]}" $REPLAY_ARGS --steps "$STEPS" --cleanup --quiet \
            --json "$OUT/res/$tag-node$i.json" >"$OUT/res/$tag-node$i.log" 2>&1 &
        fi
        RP+=($!)
      done
      fail=0
      for p in "${RP[@]}"; do wait "$p" || fail=1; done
      S1=$(date +%s.%N)
      read -r B1 T1 < <(machine_busy)
      L1=$(cut -d' ' -f1-3 /proc/loadavg)
      CPU=""
      for k in "${!PIDS[@]}"; do
        pid=${PIDS[$k]}
        [ "$pid" = 0 ] && continue
        CPU+="$(( $(cpu_of "$pid") - ${C0[$k]} )) "
      done
      if [ "$tg" != direct ]; then snap end; fi
      if [ -n "$HOG_PIDS" ]; then
        # shellcheck disable=SC2086
        kill $HOG_PIDS 2>/dev/null || true; wait $HOG_PIDS 2>/dev/null || true; HOG_PIDS=
      fi
      if [ -n "${FIO_PID:-}" ]; then kill "$FIO_PID" 2>/dev/null || true; wait "$FIO_PID" 2>/dev/null || true; FIO_PID=; rm -rf "$SLOWMNT/foreign"; fi
      for p in "${RECS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
      OOM=""
      if [ "$tg" != direct ]; then
        if [ "$MEMCG_LIMIT" != 0 ]; then
          for i in $(seq 1 "$n"); do
            g=$MEMCG_ROOT/tierfs-nodes-$$-node$i
            OOM+="$(awk '$1 == "oom_kill" {print $2}' "$g/memory.oom_control" 2>/dev/null || echo 0):$(cat "$g/memory.max_usage_in_bytes") "
          done
        fi
        for i in $(seq 1 "$n"); do "$TIERFS" unmount "$OUT/mnt/node$i" >/dev/null 2>&1 || true; done
        for i in $(seq 1 "$n"); do cp "$OUT/logs/N$n-$tg-node$i.log" "$OUT/logs/$tag-node$i.log" 2>/dev/null || true; done
      else
        for i in $(seq 1 "$n"); do rm -rf "/mnt/$P-nvme$i/direct"; done
      fi
      rm -rf "$SLOWMNT/ledger/$JOB"
      python3 - "$OUT/res/$tag.meta.json" <<EOF
import json, sys
json.dump({"n": $n, "target": "$tg", "run": $r, "fail": $fail, "t0": $S0, "wall_s": $S1 - $S0,
           "daemon_cpu_s": [int(x) / $HZ for x in "$CPU".split()],
           "machine_busy": ($B1 - $B0) / max(1, $T1 - $T0),
           "load_start": "$L0", "load_end": "$L1",
           "memcg": [dict(zip(("oom_kills", "max_usage"), map(int, x.split(":")))) for x in "$OOM".split()]},
          open(sys.argv[1], "w"))
EOF
      echo "$tag: $(awk "BEGIN{printf \"%.1f\", $S1 - $S0}") s, daemon CPU ticks [${CPU% }], load $L1$([ $fail = 1 ] && echo ' FAILED')"
    done
  done
  # Plots of the first run's records.
  for tg in $TARGETS; do
    for i in $(seq 1 "$n"); do
      f=$OUT/rec/N$n-$tg-r1-node$i.jsonl
      [ -s "$f" ] && "$TIERFS" plot "$f" --out "$OUT/N$n-$tg-node$i.png" >/dev/null 2>&1 || true
    done
  done
done

# The report; the plot needs matplotlib (the plot venv of tools/deepspeed/bench.sh has it).
PLOT_VENV=${PLOT_VENV:-$HOME/.cache/tierfs/plot-venv}
SPY=python3; PLOTARG=(--no-plot)
if [ "${PLOT:-1}" = 1 ]; then
  if "$PLOT_VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then SPY=$PLOT_VENV/bin/python; PLOTARG=()
  else echo "bench-nodes.sh: no matplotlib in $PLOT_VENV (tools/deepspeed/bench.sh installs it): no plot" >&2; fi
fi
"$SPY" "$HERE/tools/bench-nodes-summary.py" "$OUT" "${PLOTARG[@]}"
echo "results in $OUT: summary.md, results.csv, results.json$([ ${#PLOTARG[@]} = 0 ] && echo ", bench-nodes.png")"
