#!/bin/bash
# bench-mount.sh - throughput through tierfs against the fast tier used directly, side by side
# in one run, on two bandwidth-capped tiers made with ../shared/tierbed (needs root and fio).
#
#   tools/bench-mount.sh [RUNS] [SECONDS]        (defaults: 3 runs, 10 s each)
#
# Tiers: "nvme" 1200/800 MB/s read/write (RAM-backed, exact caps), "pfs" 400/300 MB/s (disk;
# PFS_RAM=1: RAM).
# Workload: fio O_DIRECT 1 MiB requests, libaio, 6 jobs x iodepth 8 (DeepSpeed-like: several
# files in flight at once), time-based, write then read of the same files. Targets:
#   direct   fio on the nvme tier itself (what DeepSpeed gets today)
#   whole-file       tierfs, layout = "whole-file", passthrough = "direct" (kernel passthrough as root)
#   whole-file+nopt  the same with passthrough = "off": every byte through the daemon
#   stripe           tierfs, layout = "stripe", 1 MiB units (always through the daemon)
# (bandwidths from `tierfs probe` of these tiers, probed once per invocation so every target
# places its files by the same figures). LAYOUTS="..." picks targets; a target may end in
# "@dev" (the /dev/fuse transport: TIERFS_TRANSPORT=dev) or "@before" (the binary named by
# BEFORE=path, e.g. an older build, run in the same rounds).
# Prints per-run MB/s (10^6 B/s) and the median per target; with --markdown, a table for
# docs/PERFORMANCE.md. Environment: TIERBED (path of tierbed.sh), BENCH_DIR (work folder).
set -euo pipefail
RUNS=${1:-3}
SECS=${2:-10}
HERE=$(cd "$(dirname "$0")/.." && pwd)
TIERBED=${TIERBED:-$HERE/../shared/tierbed/tierbed.sh}
BENCH_DIR=${BENCH_DIR:-/tmp/tierfs-bench}
TIERFS=${TIERFS:-$HERE/target/release/tierfs}
JOBS=${JOBS:-6}
QD=${QD:-8}

[ "$(id -u)" = 0 ] || { echo "bench-mount.sh: needs root (tierbed)" >&2; exit 2; }
command -v fio >/dev/null || { echo "bench-mount.sh: install fio (apt-get install -y fio)" >&2; exit 2; }
[ -x "$TIERFS" ] || (cd "$HERE" && cargo build --release)

NVME=/mnt/tb-nvme PFS=/mnt/tb-pfs MNT=$BENCH_DIR/mnt
cleanup() {
  mountpoint -q "$MNT" 2>/dev/null && "$TIERFS" unmount "$MNT" || true
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
  local out; out=$(fio --name=bench --directory="$1" --rw="$2" --bs=1M --size=512M --numjobs="$JOBS" \
    --iodepth="$QD" --ioengine=libaio --direct=1 --time_based --runtime="$SECS" --group_reporting \
    --output-format=json 2>/dev/null)
  python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(int((j["read"]["bw_bytes"]+j["write"]["bw_bytes"])/1e6))' <<<"$out"
}

declare -A RES
run_target() {  # NAME DIR
  mkdir -p "$2"
  # lay out the files once, so reads hit written blocks
  fio --name=bench --directory="$2" --rw=write --bs=1M --size=512M --numjobs="$JOBS" --direct=1 \
      --ioengine=libaio --iodepth="$QD" --output-format=terse >/dev/null 2>&1
  local w r; w=$(fio_mbps "$2" write); r=$(fio_mbps "$2" read)
  RES[$1.write]+="$w "; RES[$1.read]+="$r "
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
    if [ -n "$transport" ]; then
      TIERFS_TRANSPORT=$transport "$bin" mount --config "$(config "$layout")" "$MNT" 2>/dev/null
    else
      env -u TIERFS_TRANSPORT "$bin" mount --config "$(config "$layout")" "$MNT" 2>/dev/null
    fi
    run_target "$layout" "$MNT/bench"
    # What each target did: shares, bytes per tier, daemon CPU (kept per run).
    cp "$MNT/.tierfs/tiers" "$BENCH_DIR/tiers-$layout-$run.txt"
    rm -rf "$MNT/bench"
    "$bin" unmount "$MNT"
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
minmax() { tr ' ' '\n' | grep -v '^$' | sort -n | awk 'NR==1{lo=$1} {hi=$1} END{print lo "-" hi}'; }
dw=$(median <<<"${RES[direct.write]}"); dr=$(median <<<"${RES[direct.read]}")
echo
echo "| target | write MB/s (median, min-max) | of nvme direct's MB/s (higher is faster) | read MB/s (median, min-max) | of nvme direct's MB/s |"
echo "|---|---|---|---|---|"
for t in direct $LAYOUTS; do
  w=$(median <<<"${RES[$t.write]}"); r=$(median <<<"${RES[$t.read]}")
  printf '| %s | %s (%s) | %.2f | %s (%s) | %.2f |\n' "$t" "$w" "$(minmax <<<"${RES[$t.write]}")" \
    "$(awk -v a="$w" -v b="$dw" "BEGIN{print a/b}")" "$r" "$(minmax <<<"${RES[$t.read]}")" "$(awk -v a="$r" -v b="$dr" "BEGIN{print a/b}")"
done
echo
echo "caps: nvme 1200/800, pfs 400/300 MB/s read/write; sum 1600/1100. fio: $JOBS jobs x QD $QD, 1 MiB O_DIRECT libaio, ${SECS}s, $RUNS runs."
