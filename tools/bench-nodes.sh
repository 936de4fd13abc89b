#!/bin/bash
# bench-nodes.sh - N simulated nodes of one job sharing one slow tier (issue #17).
#
#   tools/bench-nodes.sh [--nodes "1 2 4"] [--runs 3] [--steps 6] [--warmup 0]
#                        [--targets "direct tierfs solo"] [--scenario busy|idle|writer|hogs] [--out DIR]
#
# Root; tierbed with --ram and --force ($TIERBED, else /work/shared/tierbed/tierbed.sh).
# On one machine, as a job's nodes share a Lustre file system: node i has its own fast tier
# (tierbed "${PREFIX}-nvme<i>" at /mnt/${PREFIX}-nvme<i>, RAM, $FAST MB/s read/write, default
# "1200 800") and its own replay; every node's slow tier is its own folder (node<i>, as
# ${HOSTNAME} would be) on ONE shared tierbed tier ("${PREFIX}-pfs" at /mnt/${PREFIX}-pfs,
# disk, $SLOW, default "400 300"), where the ledger folder is too. PREFIX defaults to
# "nodes"; state in TIERBED_HOME (default /var/lib/tierbed-nodes); everything is taken down
# at the end. Sizes: FAST_GB (2), SLOW_GB (6; each probe needs 1 GiB free, solo probes N at once). --smoke: N = 2,
# 1 run, 2 steps, 8 MiB subgroups, small tiers: only shows that the bench works (its numbers
# mean nothing).
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
# Scenarios:
#   busy     (default) every node runs the replay
#   idle     only node 1 runs it; the others are mounted and idle (its share of the slow
#            tier should be its N = 1 share)
#   writer   every node runs it while a foreign fio writer (O_DIRECT 1 MiB, 2 jobs x QD 8)
#            writes to the shared tier outside the job
#   hogs     every node runs it while $HOGS (default 4) processes spin on the CPU, as an
#            optimizer takes the cores: the tiers' estimates must not read the machine's
#            load as slow tiers
# Memory: each daemon runs in a cgroup-v1 memory cgroup of its own, limit $MEMCG_LIMIT
# (default 864Mi: a quarter of the default replay's 2.55 GB of swap traffic a node and step,
# plus 256 MiB for the daemon itself, the rule of tools/deepspeed/bench.sh), so staging
# memory is sized as at real scale, where the swap set is far larger than memory; set it to
# fit other REPLAY_ARGS, or MEMCG_LIMIT=0 for none.
# Replay per node: tierfs-replay DIR $REPLAY_ARGS --steps S (default: --ranks 1 --subgroups 8
# --subgroup-bytes 32MiB --engine libaio). Per node and run: the median optimizer-step I/O
# time of its steps after the first --warmup W ones (default 0: every step), divided by the
# same node's direct time of that run. Printed per N: per node the
# median (min-max) over runs, the median over nodes, the floor F/(F + P/N) from the caps
# (F, P: harmonic means of read and write caps), daemon CPU (s and % of one core over the
# replay), the machine's CPU use, flips (pause/resume lines in each daemon's log) per minute,
# the slow tier's share per node (median of the recorded samples while the replay ran) and
# the load average. Each tierfs node is recorded (`tierfs record`, with the online
# estimates) and the first run's records are plotted (`tierfs plot`) to OUT/N<n>-<target>-node<i>.png.
# Summary in OUT/summary.md, with each node's view of the ledger (live nodes, its part of
# the shared tier) from stats.json over time in OUT/rec/*.shared.tsv.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
TB=${TIERBED:-/work/shared/tierbed/tierbed.sh}
grep -q -- '--ram' "$TB" 2>/dev/null || { echo "bench-nodes.sh: $TB: no tierbed with --ram (set TIERBED)" >&2; exit 2; }
TIERFS=${TIERFS:-$HERE/target/release/tierfs}
REPLAY=${REPLAY:-$HERE/target/release/tierfs-replay}
export TIERBED_HOME=${TIERBED_HOME:-/var/lib/tierbed-nodes}
P=${PREFIX:-nodes}
NODES="1 2 4"; RUNS=3; STEPS=6; WARMUP=0; TARGETS="direct tierfs solo"; SCEN=busy; OUT=/tmp/bench-nodes
read -r FAST_R FAST_W <<<"${FAST:-1200 800}"
read -r SLOW_R SLOW_W <<<"${SLOW:-400 300}"
FAST_GB=${FAST_GB:-2}; SLOW_GB=${SLOW_GB:-6}
REPLAY_ARGS=${REPLAY_ARGS:---ranks 1 --subgroups 8 --subgroup-bytes 32MiB --engine libaio}
PASSTHROUGH=${PASSTHROUGH:-direct}
LAYOUT=${LAYOUT:-stripe}
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
    --smoke) NODES=2; RUNS=1; STEPS=2; FAST_GB=1; SLOW_GB=3
             REPLAY_ARGS="--ranks 1 --subgroups 4 --subgroup-bytes 8MiB --engine libaio"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ " $TARGETS " == *" before "* ]] && [ ! -x "${BEFORE:-}" ]; then
  echo "bench-nodes.sh: target 'before' needs BEFORE=<a tierfs binary>" >&2; exit 2
fi
[[ $WARMUP =~ ^[0-9]+$ ]] && [ "$WARMUP" -lt "$STEPS" ] || { echo "--warmup: a whole number below --steps" >&2; exit 2; }
MEMCG_LIMIT=${MEMCG_LIMIT:-864Mi}
MEMCG_ROOT=/sys/fs/cgroup/memory
if [ "$MEMCG_LIMIT" != 0 ]; then
  MEMCG_LIMIT_B=$(numfmt --from=auto "$MEMCG_LIMIT") || { echo "MEMCG_LIMIT: bytes, or K/M/G, Ki/Mi/Gi" >&2; exit 2; }
  [ -w "$MEMCG_ROOT" ] || { echo "bench-nodes.sh: no writable cgroup-v1 memory controller at $MEMCG_ROOT (MEMCG_LIMIT=0 for none)" >&2; exit 2; }
fi
case $SCEN in busy|idle|writer|hogs) ;; *) echo "--scenario: busy, idle, writer or hogs" >&2; exit 2 ;; esac
HOGS=${HOGS:-4}
[ "$(id -u)" = 0 ] || { echo "bench-nodes.sh needs root (tierbed)" >&2; exit 2; }
[ -x "$TIERFS" ] && [ -x "$REPLAY" ] || (cd "$HERE" && cargo build --release)
mkdir -p "$OUT"
MAXN=0; for n in $NODES; do [ "$n" -gt "$MAXN" ] && MAXN=$n; done
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
if [[ " $TARGETS " == *" private "* ]]; then
  for i in $(seq 1 "$MAXN"); do up "$P-priv$i" 2 "$SLOW_R" "$SLOW_W" "/mnt/$P-priv$i"; done
fi
echo "tiers up: $MAXN x fast $FAST_R/$FAST_W MB/s (RAM), shared slow $SLOW_R/$SLOW_W MB/s (disk); load $(cut -d' ' -f1-3 /proc/loadavg)"

config() { # N I TARGET -> config file path
  local n=$1 i=$2 tg=$3 f="$OUT/cfg/N$1-$3-node$2.toml" slow
  mkdir -p "$OUT/cfg"
  if [ "$tg" = private ]; then slow=/mnt/$P-priv$i/node$i; else slow=$SLOWMNT/node$i; fi
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
  if [ "$tg" = tierfs ] || [ "$tg" = before ]; then
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
[mount]
passthrough = "$PASSTHROUGH"
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

HZ=$(getconf CLK_TCK)
for n in $NODES; do
  for r in $(seq 1 "$RUNS"); do
    for tg in $TARGETS; do
      [ "$tg" = private ] && [ "$n" = 1 ] && continue
      if [ "$tg" = private ]; then
        for i in $(seq 1 "$n"); do bash "$TB" rate "$P-priv$i" $((SLOW_R / n)) $((SLOW_W / n)) >/dev/null; done
      fi
      JOB="bench-$n-$r-$$"
      tag="N$n-$tg-r$r"
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
          bin=$TIERFS; [ "$tg" = before ] && bin=$BEFORE
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
      C0=(); for pid in "${PIDS[@]}"; do C0+=("$(cpu_of "$pid")"); done
      read -r B0 T0 < <(machine_busy)
      L0=$(cut -d' ' -f1-3 /proc/loadavg)
      S0=$(date +%s.%N)
      RP=()
      for i in $(seq 1 "$n"); do
        if [ "$SCEN" = idle ] && [ "$i" -gt 1 ]; then continue; fi
        # shellcheck disable=SC2086
        "$REPLAY" "${DIRS[$((i - 1))]}" $REPLAY_ARGS --steps "$STEPS" --cleanup --quiet \
          --json "$OUT/res/$tag-node$i.json" >"$OUT/res/$tag-node$i.log" 2>&1 &
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
      if [ -n "$HOG_PIDS" ]; then
        # shellcheck disable=SC2086
        kill $HOG_PIDS 2>/dev/null || true; wait $HOG_PIDS 2>/dev/null || true; HOG_PIDS=
      fi
      if [ -n "${FIO_PID:-}" ]; then kill "$FIO_PID" 2>/dev/null || true; wait "$FIO_PID" 2>/dev/null || true; FIO_PID=; rm -rf "$SLOWMNT/foreign"; fi
      for p in "${RECS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
      if [ "$tg" != direct ]; then
        OOM=""
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
      [ "$tg" = direct ] && OOM=""
      python3 - "$OUT/res/$tag.meta.json" <<EOF
import json, sys
json.dump({"n": $n, "target": "$tg", "run": $r, "fail": $fail, "wall_s": $S1 - $S0,
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

python3 - "$OUT" "$SCEN" "$FAST_R" "$FAST_W" "$SLOW_R" "$SLOW_W" "$RUNS" "$STEPS" "$REPLAY_ARGS" "$WARMUP" "$MEMCG_LIMIT" <<'EOF'
import glob, json, os, re, statistics as st, sys, datetime
out, scen = sys.argv[1], sys.argv[2]
fr, fw, sr, sw = map(float, sys.argv[3:7])
runs, steps, rargs = int(sys.argv[7]), int(sys.argv[8]), sys.argv[9]
warmup, memcg = int(sys.argv[10]), sys.argv[11]
hm = lambda r, w: 2 * r * w / (r + w)
F, Pb = hm(fr, fw), hm(sr, sw)
def opt_median(path):
    try:
        j = json.load(open(path))
    except Exception:
        return None
    v = [p["io_s"] for p in j["phases"] if p["phase"] == "optimizer"][warmup:]
    return st.median(v) if v else None
def flips(log):
    try:
        return sum(1 for l in open(log) if re.search(r"tier '\w+' (paused|resumed)", l))
    except OSError:
        return 0
def slow_share(rec, t0=None):
    vals = []
    try:
        lines = [json.loads(l) for l in open(rec) if l.strip()]
    except Exception:
        return None, None
    for s in lines[3:]:
        for t in s["tiers"]:
            if t["name"] == "pfs":
                vals.append((t["share"], t.get("est_write_bps")))
    if not vals:
        return None, None
    sh = st.median(v[0] for v in vals)
    ew = [v[1] for v in vals if v[1]]
    return sh, (st.median(ew) if ew else None)
fmt = lambda v: "-" if v is None else f"{v:.2f}"
# Shares over time, per recorded node: the slow tier's Eq. 1 share and its view of the ledger.
for rec in sorted(glob.glob(f"{out}/rec/*.jsonl")):
    with open(rec[:-len(".jsonl")] + ".shared.tsv", "w") as tsv:
        tsv.write("elapsed_s\tshare\tshared_live\tshared_allot_MBps\tsaturated\tpaused\n")
        for l in open(rec):
            try:
                smp = json.loads(l)
            except ValueError:
                continue
            for t in smp["tiers"]:
                if t["name"] == "pfs":
                    a = t.get("shared_allot_bps")
                    tsv.write(f'{smp["elapsed_s"]:.1f}\t{t["share"]:.3f}\t{t.get("shared_live") or "-"}\t'
                              f'{"-" if a is None else f"{a / 1e6:.0f}"}\t{t.get("saturated", False)}\t{t.get("paused", False)}\n')
metas = [json.load(open(m)) for m in glob.glob(f"{out}/res/*.meta.json")]
ns = sorted({m["n"] for m in metas})
targets = []
for m in sorted(metas, key=lambda m: m["target"]):
    if m["target"] not in targets:
        targets.append(m["target"])
lines = []
P = lines.append
P(f"Command: `MEMCG_LIMIT={memcg} tools/bench-nodes.sh --nodes \"{' '.join(map(str, ns))}\" --runs {runs} --steps {steps} "
  f"--warmup {warmup} --targets \"{' '.join(targets)}\" --scenario {scen}` ({datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC).")
P(f"Tiers: per node a fast tier {fr:.0f}/{fw:.0f} MB/s (F = {F:.0f} MB/s), one shared slow tier "
  f"{sr:.0f}/{sw:.0f} MB/s (P = {Pb:.0f} MB/s) in per-node folders. Replay per node: `{rargs} --steps {steps}`; "
  f"medians over steps {warmup + 1}-{steps}. Daemon memory cgroup: {'none' if memcg == '0' else memcg}.")
P("")
P("| N | target | optimizer-step I/O vs the node's fast tier alone, per node: median (min-max) over runs | median over nodes | worst node | floor F/(F+P/N) | daemon CPU, % of a core (median) | machine CPU busy | flips/min per node | slow-tier share per node (median) | load average (start -> end) |")
P("|---|---|---|---|---|---|---|---|---|---|---|")
for n in ns:
    floor = F / (F + Pb / n)
    for tg in targets:
        if tg == "direct":
            continue
        per_node = {}
        cpu, busy, loads, fl, shares = [], [], [], [], {}
        for m in metas:
            if m["n"] != n or m["target"] != tg:
                continue
            r = m["run"]
            tag, dtag = f"N{n}-{tg}-r{r}", f"N{n}-direct-r{r}"
            loads.append(f'{m["load_start"].split()[0]} -> {m["load_end"].split()[0]}')
            busy.append(m["machine_busy"])
            for c in m["daemon_cpu_s"]:
                cpu.append(c / m["wall_s"] * 100)
            for i in range(1, n + 1):
                a = opt_median(f"{out}/res/{tag}-node{i}.json")
                b = opt_median(f"{out}/res/{dtag}-node{i}.json")
                if a is not None and b:
                    per_node.setdefault(i, []).append(a / b)
                fl.append(flips(f"{out}/logs/{tag}-node{i}.log") / (m["wall_s"] / 60))
                sh, _ = slow_share(f"{out}/rec/{tag}-node{i}.jsonl")
                if sh is not None:
                    shares.setdefault(i, []).append(sh)
        if not per_node:
            continue
        cells = "; ".join(f"{i}: {st.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for i, v in sorted(per_node.items()))
        meds = [st.median(v) for v in per_node.values()]
        worst = max(max(v) for v in per_node.values())
        sh = "; ".join(f"{i}: {100 * st.median(v):.1f}%" for i, v in sorted(shares.items())) or "-"
        P(f"| {n} | {tg} | {cells} | {st.median(meds):.2f} | {worst:.2f} | {floor:.3f} | "
          f"{st.median(cpu) if cpu else 0:.0f}% | {100 * st.median(busy):.0f}% | "
          f"{max(fl) if fl else 0:.2f} | {sh} | {'; '.join(loads)} |")
    # the direct rows: absolute seconds
    d = []
    for m in metas:
        if m["n"] == n and m["target"] == "direct":
            for i in range(1, n + 1):
                v = opt_median(f"{out}/res/N{n}-direct-r{m['run']}-node{i}.json")
                if v:
                    d.append(v)
    if d:
        P(f"| {n} | direct (s) | optimizer-step I/O {st.median(d):.3f} s ({min(d):.3f}-{max(d):.3f}) over nodes and runs | | | | | | | | |")
mem = [g for m in metas for g in m.get("memcg", [])]
if mem:
    P("")
    P(f"Daemon memory cgroups: peak use {max(g['max_usage'] for g in mem) / 2**20:.0f} MiB at most; "
      f"OOM kills {sum(g['oom_kills'] for g in mem)}.")
fails = [f"N{m['n']}-{m['target']}-r{m['run']}" for m in metas if m["fail"]]
if fails:
    P("")
    P("Failed runs (see OUT/res/*.log): " + ", ".join(sorted(fails)))
text = "\n".join(lines) + "\n"
open(f"{out}/summary.md", "w").write(text)
print(text)
EOF
