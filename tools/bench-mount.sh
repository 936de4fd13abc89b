#!/bin/bash
# bench-mount.sh - throughput through tierfs against the fast tier used directly, side by side
# in one run, on two bandwidth-capped tiers made with ../shared/tierbed (needs root and fio).
#
#   tools/bench-mount.sh [RUNS] [SECONDS]        (defaults: 3 runs, 10 s each)
#
# SECONDS = 0: each job writes its file once, then reads it once (not time-based), and the
# figure is all bytes over the time until the last job ends, as a user's first fio or dd
# sees it. Time-based runs hide a placement that puts more files on the slow tier: each
# job runs at its own file's tier speed, so the sum is the tiers' caps whatever the split.
#
# Tiers: "nvme" 1200/800 MB/s read/write (RAM-backed, exact caps), "pfs" 400/300 MB/s (disk;
# PFS_RAM=1: RAM).
# Workload: fio O_DIRECT 1 MiB requests, libaio, 6 jobs x iodepth 8 (DeepSpeed-like: several
# files in flight at once), time-based, write then read of the same files. Targets:
#   direct   fio on the nvme tier itself (what DeepSpeed gets today)
#   whole-file       tierfs, layout = "whole-file", passthrough = "direct" (kernel passthrough as root)
#   whole-file+nopt  the same with passthrough = "off": every byte through the daemon
#   stripe           tierfs, layout = "stripe", 1 MiB units (always through the daemon)
#   default          tierfs with a config of only the two [[tier]] entries: what a user gets
#                    (as root: whole files, passthrough "auto", automatic staging memory)
#   default+cg       the same with the daemon in a memory cgroup of MEMCG_LIMIT (default
#                    1G), so automatic staging is bounded as at real scale
# (bandwidths from `tierfs probe` of these tiers, probed once per invocation so every target
# places its files by the same figures). LAYOUTS="..." picks targets; a target may end in
# "@dev" (the /dev/fuse transport: TIERFS_TRANSPORT=dev) or "@before" (the binary named by
# BEFORE=path, e.g. an older build, run in the same rounds).
# Prints per-run MB/s (10^6 B/s) and the median per target, each also as a fraction of the
# tiers' summed caps (1600 MB/s read, 1100 write), the daemon's CPU-s per GB and how many of
# fio's files each tier holds. Environment: TIERBED (path of tierbed.sh), BENCH_DIR (work
# folder), JOBS, QD, SIZE (per job, default 512M), MEMCG_LIMIT.
set -euo pipefail
RUNS=${1:-3}
SECS=${2:-10}
HERE=$(cd "$(dirname "$0")/.." && pwd)
TIERBED=${TIERBED:-$HERE/../shared/tierbed/tierbed.sh}
BENCH_DIR=${BENCH_DIR:-/tmp/tierfs-bench}
TIERFS=${TIERFS:-$HERE/target/release/tierfs}
JOBS=${JOBS:-6}
QD=${QD:-8}
SIZE=${SIZE:-512M}
MEMCG_LIMIT=${MEMCG_LIMIT:-1G}
MEMCG=/sys/fs/cgroup/memory/tierfs-bench-mount-$$

[ "$(id -u)" = 0 ] || { echo "bench-mount.sh: needs root (tierbed)" >&2; exit 2; }
command -v fio >/dev/null || { echo "bench-mount.sh: install fio (apt-get install -y fio)" >&2; exit 2; }
[ -x "$TIERFS" ] || (cd "$HERE" && cargo build --release)

NVME=/mnt/tb-nvme PFS=/mnt/tb-pfs MNT=$BENCH_DIR/mnt
memcg_remove() {
  [ -d "$MEMCG" ] || return 0
  for p in $(cat "$MEMCG/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  sleep 0.2; rmdir "$MEMCG" 2>/dev/null || true
}
cleanup() {
  mountpoint -q "$MNT" 2>/dev/null && "$TIERFS" unmount "$MNT" || true
  memcg_remove
  bash "$TIERBED" down nvme >/dev/null 2>&1 || true
  bash "$TIERBED" down pfs --purge >/dev/null 2>&1 || true
}
trap cleanup EXIT
mkdir -p "$BENCH_DIR" "$MNT"
bash "$TIERBED" up nvme 6 1200 800 "$NVME" --ram --force >/dev/null
# PFS_RAM=1 keeps the pfs tier in RAM too (6 GiB): its caps then hold while other work on
# the machine uses the disk (A/B comparisons of two builds).
if [ "${PFS_RAM:-0}" = 1 ]; then
  bash "$TIERBED" up pfs 6 400 300 "$PFS" --ram --force >/dev/null
else
  bash "$TIERBED" up pfs 12 400 300 "$PFS" --force >/dev/null
fi

cat >"$BENCH_DIR/probe.toml" <<EOT
[[tier]]
name = "nvme"
path = "$NVME/tierfs"
create = true
[[tier]]
name = "pfs"
path = "$PFS/tierfs"
create = true
EOT
echo "probing the tiers (tierfs probe --fresh) ..." >&2
"$TIERFS" probe --config "$BENCH_DIR/probe.toml" --fresh --size 1GiB --secs 3 | tee "$BENCH_DIR/probe.txt" >&2

config() {  # TARGET -> config path (bandwidths come from the cached probe)
  case ${1%@*} in
    default|default+cg)  # only the tiers: every other key at its default
      { cat "$BENCH_DIR/probe.toml"; printf '[mount]\nlog_file = "%s/daemon.log"\n%s\n' \
          "$BENCH_DIR" "${MOUNT_EXTRA:-}"; } >"$BENCH_DIR/$1.toml"
      echo "$BENCH_DIR/$1.toml"; return ;;
  esac
  # TARGET is a layout, optionally with "+nopt" for passthrough = "off" (daemon path only);
  # otherwise passthrough = "direct", so fio's O_DIRECT opens of whole files are passthrough
  local t=${1%@*}; local c=$BENCH_DIR/$1.toml layout=${t%+nopt} pt=direct
  [ "$t" = "$layout" ] || pt=off
  # No staging memory (the default since issue #14): this measures the tiers' data path, and
  # an automatic cache would hold fio's files in memory.
  { cat "$BENCH_DIR/probe.toml"
    printf '[placement]\nlayout = "%s"\n[mount]\nlog_file = "%s/daemon.log"\npassthrough = "%s"\n%s\n[cache]\nsize = "off"\n' \
      "$layout" "$BENCH_DIR" "$pt" "${MOUNT_EXTRA:-}"; } >"$c"
  echo "$c"
}

fio_mbps() {  # DIR RW -> MB/s
  local timed=(--time_based --runtime="$SECS")
  [ "$SECS" = 0 ] && timed=()
  local out; out=$(fio --name=bench --directory="$1" --rw="$2" --bs=1M --size="$SIZE" --numjobs="$JOBS" \
    --iodepth="$QD" --ioengine=libaio --direct=1 "${timed[@]}" --group_reporting \
    --output-format=json 2>/dev/null)
  python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(int((j["read"]["bw_bytes"]+j["write"]["bw_bytes"])/1e6))' <<<"$out"
}

declare -A RES
run_target() {  # NAME DIR
  mkdir -p "$2"
  # lay out the files once, so reads hit written blocks (sized runs: the write is the layout)
  [ "$SECS" = 0 ] || fio --name=bench --directory="$2" --rw=write --bs=1M --size="$SIZE" --numjobs="$JOBS" --direct=1 \
      --ioengine=libaio --iodepth="$QD" --output-format=terse >/dev/null 2>&1
  local w r; w=$(fio_mbps "$2" write); r=$(fio_mbps "$2" read)
  RES[$1.write]+="$w "; RES[$1.read]+="$r "; LAST_W=$w; LAST_R=$r
  echo "run $run $1: write $w MB/s, read $r MB/s" >&2
}

LAYOUTS=${LAYOUTS:-whole-file whole-file+nopt stripe}
for run in $(seq 1 "$RUNS"); do
  rm -rf "$NVME/direct"; run_target direct "$NVME/direct"; rm -rf "$NVME/direct"
  for layout in $LAYOUTS; do
    bin=$TIERFS transport=${TIERFS_TRANSPORT:-}
    case $layout in
      *@before) bin=${BEFORE:?"target $layout needs BEFORE=path of the other binary"} ;;
      *@dev) transport=dev ;;
    esac
    # default+cg: the mount (and so its daemon) starts inside a memory cgroup.
    cg=()
    if [[ ${layout%@*} == *+cg ]]; then
      memcg_remove; mkdir "$MEMCG"
      echo "$(numfmt --from=iec "${MEMCG_LIMIT%B}")" >"$MEMCG/memory.limit_in_bytes"
      cg=(bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$MEMCG")
    fi
    if [ -n "$transport" ]; then
      TIERFS_TRANSPORT=$transport "${cg[@]}" "$bin" mount --config "$(config "$layout")" "$MNT" 2>/dev/null
    else
      env -u TIERFS_TRANSPORT "${cg[@]}" "$bin" mount --config "$(config "$layout")" "$MNT" 2>/dev/null
    fi
    cpu0=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cpu"]["total_s"])' "$MNT/.tierfs/stats.json")
    run_target "$layout" "$MNT/bench"
    # What each target did: shares, bytes per tier, daemon CPU (kept per run).
    cp "$MNT/.tierfs/tiers" "$BENCH_DIR/tiers-$layout-$run.txt"
    cp "$MNT/.tierfs/stats.json" "$BENCH_DIR/stats-$layout-$run.json"
    # GB fio moved: the layout pass, then the timed write and read (MB/s x seconds); sized
    # runs: each file written and read once.
    local_gb=$(awk -v j="$JOBS" -v sz="$(numfmt --from=iec "${SIZE%B}")" -v w="$LAST_W" -v r="$LAST_R" \
      -v t="$SECS" 'BEGIN{print (t == 0) ? 2*j*sz/1e9 : (j*sz)/1e9 + (w+r)*t/1e3}')
    read -r cpugb files <<<"$(python3 - "$MNT/.tierfs/stats.json" "$cpu0" "$local_gb" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
cpu = s["cpu"]["total_s"] - float(sys.argv[2])
gb = float(sys.argv[3])
on = {}
for f in s["files"]:
    for t in f.get("tiers", []):
        on[t] = on.get(t, 0) + 1
print(f"{cpu / gb if gb else 0:.3f}", ",".join(f"{k}:{v}" for k, v in sorted(on.items())) or "-")
PY
)"
    RES[$layout.cpu]+="$cpugb "; RES[$layout.files]+="$files "
    echo "run $run $layout: daemon ${cpugb} CPU-s/GB, fio files per tier $files" >&2
    rm -rf "$MNT/bench"
    "$bin" unmount "$MNT"
    memcg_remove
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
minmax() { tr ' ' '\n' | grep -v '^$' | sort -n | awk 'NR==1{lo=$1} {hi=$1} END{print lo "-" hi}'; }
dw=$(median <<<"${RES[direct.write]}"); dr=$(median <<<"${RES[direct.read]}")
echo
echo "| target | write MB/s (median, min-max) | of nvme direct's | of the summed caps | read MB/s (median, min-max) | of nvme direct's | of the summed caps | daemon CPU-s/GB (median, min-max) | fio files per tier (each run) |"
echo "|---|---|---|---|---|---|---|---|---|"
for t in direct $LAYOUTS; do
  w=$(median <<<"${RES[$t.write]}"); r=$(median <<<"${RES[$t.read]}")
  cpu=-; files=-
  if [ "$t" != direct ]; then
    cpu="$(median <<<"${RES[$t.cpu]}") ($(minmax <<<"${RES[$t.cpu]}"))"; files=${RES[$t.files]% }
  fi
  printf '| %s | %s (%s) | %.2f | %.2f | %s (%s) | %.2f | %.2f | %s | %s |\n' "$t" "$w" "$(minmax <<<"${RES[$t.write]}")" \
    "$(awk -v a="$w" -v b="$dw" "BEGIN{print a/b}")" "$(awk -v a="$w" "BEGIN{print a/1100}")" \
    "$r" "$(minmax <<<"${RES[$t.read]}")" "$(awk -v a="$r" -v b="$dr" "BEGIN{print a/b}")" \
    "$(awk -v a="$r" "BEGIN{print a/1600}")" "$cpu" "$files"
done
echo
how="${SECS}s time-based"; [ "$SECS" = 0 ] && how="each file written once, then read once"
echo "caps: nvme 1200/800, pfs 400/300 MB/s read/write; sum 1600/1100. fio: $JOBS jobs x $SIZE x QD $QD, 1 MiB O_DIRECT libaio, $how, $RUNS runs. default+cg: daemon in a ${MEMCG_LIMIT} memory cgroup."
