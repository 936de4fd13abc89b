#!/bin/bash
# bench-cache.sh - what tierfs's host-memory cache gives DeepSpeed's swap I/O: the replay
# (tierfs-replay) on two bandwidth-capped tierbed tiers, side by side: the fast tier used
# directly, tierfs stripe without a cache, with the learned-order cache, and with an LRU
# cache of the same size; optimizer step in unmodified ascending order and alternating.
# Needs root (tierbed, mounts).
#
#   tools/bench-cache.sh [--runs N] [--replay-args "ARGS"] [--cache-share F] [--targets "T..."]
#                        [--orders "O..."] [--doc-tag NAME] [--no-doc]
#
# The cache gets F (default 0.25) of the bytes one optimizer step reads (all ranks).
# Per run the targets and orders are interleaved, so drift hits all alike. Reported per
# target and order: optimizer-step I/O time (median over the run's steps, then median,
# min and max over runs), the share of the optimizer step's reads served from memory
# (replay --cache-stats), and the share of all reads (forward, backward, optimizer).
# Results: $OUT/results.tsv and logs; unless --no-doc, the block of docs/PERFORMANCE.md
# under "## Host-memory cache".
# Targets: direct stripe learned lru (default: all); orders: ascending alternate.
# Default replay: --optimizer-only (DeepSpeed with only the optimizer on NVMe, the case the
# cache targets); --replay-args "--engine libaio" adds the parameter files, with their own
# doc block via --doc-tag.
# Environment: TIERBED, BENCH_DIR, NVME_TIER (bc-nvme), PFS_TIER (bc-pfs), CACHE_EXTRA (more
# lines for the [cache] section, e.g. "prefetch = 0").
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
CMDLINE="tools/bench-cache.sh $*"
RUNS=5
RANKS=2 SUBGROUPS=8 SGMIB=32 STEPS=4
EXTRA_ARGS="--engine libaio --optimizer-only"
TAG=bench-cache
SHARE=0.25
DOC=1
TARGETS="direct stripe learned lru"
ORDERS="ascending alternate"
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --replay-args) EXTRA_ARGS=$2; shift 2 ;;
    --cache-share) SHARE=$2; shift 2 ;;
    --no-doc) DOC=0; shift ;;
    --targets) TARGETS=$2; shift 2 ;;
    --orders) ORDERS=$2; shift 2 ;;
    --doc-tag) TAG=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-cache.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "bench-cache.sh: --runs must be a positive integer" >&2; exit 2; }

TIERBED=${TIERBED:-$HERE/../shared/tierbed/tierbed.sh}
BENCH_DIR=${BENCH_DIR:-/tmp/tierfs-bench-cache}
OUT=$BENCH_DIR/out
NVME_TIER=${NVME_TIER:-bc-nvme}
PFS_TIER=${PFS_TIER:-bc-pfs}
TIERFS=$BENCH_DIR/bin/tierfs
REPLAY=$BENCH_DIR/bin/tierfs-replay
NVME=/mnt/$NVME_TIER PFS=/mnt/$PFS_TIER MNT=$BENCH_DIR/mnt
REPLAY_ARGS="--ranks $RANKS --subgroups $SUBGROUPS --subgroup-bytes ${SGMIB}MiB --steps $STEPS $EXTRA_ARGS"
# One optimizer step reads master, exp_avg, exp_avg_sq and the gradient of every subgroup.
OPT_READ=$((RANKS * SUBGROUPS * 4 * (SGMIB * 1048576 + 6144)))
CACHE_BYTES=$(awk -v b=$OPT_READ -v f="$SHARE" 'BEGIN{printf "%d", b * f}')

log() { echo "bench-cache: $*" >&2; }
[ "$(id -u)" = 0 ] || { log "needs root (tierbed, mounts)"; exit 2; }
[ -f "$TIERBED" ] || { log "tierbed not found at $TIERBED (set TIERBED)"; exit 2; }
log "cargo build --release"
(cd "$HERE" && cargo build --release 2>&1 | tail -1) >&2
mkdir -p "$BENCH_DIR/bin"
cp "$HERE/target/release/tierfs" "$HERE/target/release/tierfs-replay" "$BENCH_DIR/bin/"
REV=$(cd "$HERE" && git rev-parse --short HEAD)$(cd "$HERE" && git diff --quiet HEAD -- src Cargo.toml || echo "+uncommitted src changes")

cleanup() {
  mountpoint -q "$MNT" 2>/dev/null && { "$TIERFS" unmount "$MNT" || umount -l "$MNT"; }
  bash "$TIERBED" down "$NVME_TIER" >/dev/null 2>&1 || true
  bash "$TIERBED" down "$PFS_TIER" --purge >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rm -rf "$OUT"; mkdir -p "$BENCH_DIR" "$MNT" "$OUT"
bash "$TIERBED" up "$NVME_TIER" 6 1200 800 "$NVME" --ram --force >/dev/null
bash "$TIERBED" up "$PFS_TIER" 12 400 300 "$PFS" --force >/dev/null
cat >"$BENCH_DIR/tiers.toml" <<EOT
[[tier]]
name = "nvme"
path = "$NVME/tierfs"
create = true
[[tier]]
name = "pfs"
path = "$PFS/tierfs"
create = true
EOT
log "probing the tiers ..."
"$TIERFS" probe --config "$BENCH_DIR/tiers.toml" --fresh --size 1GiB --secs 3 2>/dev/null >"$OUT/probe.txt"

config() {  # TARGET -> config path
  local c=$BENCH_DIR/$1.toml
  { cat "$BENCH_DIR/tiers.toml"
    printf '[placement]\nlayout = "stripe"\n[mount]\nlog_file = "%s/daemon-%s.log"\n' "$BENCH_DIR" "$1"
    case $1 in
      learned|lru) printf '[cache]\nsize = %d\npolicy = "%s"\n%s\n' "$CACHE_BYTES" "$1" "${CACHE_EXTRA:-}" ;;
      # "stripe" is tierfs without a cache, which since issue #14 has to be said.
      *) printf '[cache]\nsize = "off"\n' ;;
    esac
  } >"$c"
  echo "$c"
}

RES=$OUT/results.tsv
printf 'run\ttarget\torder\topt_s\topt_cache_share\tall_cache_share\n' >"$RES"
one() {  # TARGET ORDER
  local t=$1 o=$2 dir stats="" tag="$1-$2-$run" rc=0
  if [ "$t" = direct ]; then
    dir=$NVME/direct
  else
    "$TIERFS" mount --config "$(config "$t")" "$MNT" >/dev/null 2>>"$OUT/mount.log" ||
      { log "mount failed for $t"; return; }
    dir=$MNT/bench
    [ "$t" = stripe ] || stats="--cache-stats $MNT/.tierfs/cache"
  fi
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  timeout 900 "$REPLAY" "$dir/ds" $REPLAY_ARGS --order "$o" $stats --json "$OUT/$tag.json" \
    >"$OUT/$tag.log" 2>&1 || rc=$?
  local all=""
  if [ -n "$stats" ]; then
    all=$(python3 - "$MNT/.tierfs/cache" "$OUT/$tag.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))["summary"]
steps = len(s["optimizer_io_s"])
print("%.3f" % (c["hit_bytes"] / (s["per_step_bytes_read"] * steps)))
EOF
)
    cp "$MNT/.tierfs/cache" "$OUT/$tag.cache.json"
  fi
  rm -rf "$dir/ds"
  [ "$t" = direct ] || "$TIERFS" unmount "$MNT" >/dev/null
  if [ $rc != 0 ]; then
    log "run $run $t $o: replay FAILED (exit $rc): $(tail -2 "$OUT/$tag.log")"
    printf '%s\t%s\t%s\tFAIL\t\t\n' "$run" "$t" "$o" >>"$RES"
    return
  fi
  python3 - "$OUT/$tag.json" "$run" "$t" "$o" "$all" >>"$RES" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
share = s.get("optimizer_cache_share_median")
print("\t".join([sys.argv[2], sys.argv[3], sys.argv[4], "%.3f" % s["optimizer_io_s_median"],
                 "" if share is None else "%.3f" % share, sys.argv[5]]))
EOF
  log "run $run $t $o: $(tail -1 "$RES" | cut -f4-)"
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date -u '+%Y-%m-%d %H:%M UTC')
for run in $(seq 1 "$RUNS"); do
  for o in $ORDERS; do
    for t in $TARGETS; do one "$t" "$o"; done
  done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

TABLE=$(python3 - "$RES" "$OUT" <<'EOF'
import csv, json, os, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
for r in rows:  # whole-step I/O time (forward + backward + optimizer) from the replay's JSON
    j = os.path.join(sys.argv[2], "%s-%s-%s.json" % (r["target"], r["order"], r["run"]))
    r["step_s"] = "%.3f" % json.load(open(j))["summary"]["step_io_s_median"] if r["opt_s"] != "FAIL" else "FAIL"
names = {"direct": "nvme tier used directly", "stripe": "tierfs stripe, no cache",
         "learned": "tierfs stripe + cache (learned order)", "lru": "tierfs stripe + cache (LRU)"}
def stat(v):
    v = [float(x) for x in v if x not in ("", "FAIL")]
    if not v: return "-"
    return "%.3f (%.3f-%.3f)" % (statistics.median(v), min(v), max(v))
print("| optimizer order | target | optimizer-step I/O s, median (min-max) | whole-step I/O s (fwd+bwd+opt) | optimizer reads from memory | all reads from memory | failed runs |")
print("|---|---|---|---|---|---|---|")
for o in ("ascending", "alternate"):
    for t in ("direct", "stripe", "learned", "lru"):
        rs = [r for r in rows if r["target"] == t and r["order"] == o]
        fails = sum(r["opt_s"] == "FAIL" for r in rs)
        print("| %s | %s | %s | %s | %s | %s | %d |" % (o, names[t], stat(r["opt_s"] for r in rs),
              stat(r["step_s"] for r in rs), stat(r["opt_cache_share"] for r in rs),
              stat(r["all_cache_share"] for r in rs), fails))
EOF
)
echo "$TABLE"
if [ "$DOC" = 1 ]; then
  DOCF=$HERE/docs/PERFORMANCE.md
  BLOCK=$(cat <<EOT
<!-- $TAG:begin (generated by tools/bench-cache.sh) -->
Command: \`$CMDLINE\` (tierfs $REV, $START, $RUNS runs, load $LOAD0 -> $LOAD1).
Tiers: tierbed "nvme" 1200/800 MB/s (RAM), "pfs" 400/300 MB/s (disk), layout stripe.
Replay: \`$REPLAY_ARGS\`, cache \`size = $CACHE_BYTES\` bytes = $SHARE of the $OPT_READ bytes one optimizer step reads${CACHE_EXTRA:+, \`$CACHE_EXTRA\`}.

$TABLE
<!-- $TAG:end -->
EOT
)
  python3 - "$DOCF" "$BLOCK" "$TAG" <<'EOF'
import re, sys
path, block, tag = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(path).read()
pat = re.compile(r"<!-- %s:begin.*?<!-- %s:end -->" % (re.escape(tag), re.escape(tag)), re.S)
if pat.search(text):
    text = pat.sub(lambda m: block, text)
else:
    text += "\n## Host-memory cache\n\n" + block + "\n"
open(path, "w").write(text)
EOF
  log "updated $DOCF"
fi
