#!/bin/bash
# bench-overhead.sh - what the FUSE layer costs on one fast, uncapped tier: fio through
# tierfs (kernel passthrough, and the daemon path) against the same folder used directly.
#
#   tools/bench-overhead.sh [RUNS] [SECONDS] [DIR]     (defaults: 3, 10, /dev/shm/tierfs-overhead)
#
# fio: O_DIRECT 1 MiB, libaio, 4 jobs x QD 16, time-based, write then read. Prints MB/s
# (10^6 B/s) per run, the medians, ratios to direct, and the daemon's CPU seconds per GB
# moved (utime+stime from /proc; passthrough moves bytes without the daemon).
set -euo pipefail
RUNS=${1:-3}
SECS=${2:-10}
DIR=${3:-/dev/shm/tierfs-overhead}
HERE=$(cd "$(dirname "$0")/.." && pwd)
TIERFS=${TIERFS:-$HERE/target/release/tierfs}
command -v fio >/dev/null || { echo "install fio" >&2; exit 2; }
[ -x "$TIERFS" ] || (cd "$HERE" && cargo build --release)
MNT=$DIR-mnt
mkdir -p "$DIR/tier" "$DIR/direct" "$MNT"
trap 'mountpoint -q "$MNT" && "$TIERFS" unmount "$MNT"; rm -rf "$DIR" "$MNT"' EXIT
CLK=$(getconf CLK_TCK)

fio_mbps() {  # DIR RW
  fio --name=o --directory="$1" --rw="$2" --bs=1M --size=512M --numjobs=4 --iodepth=16 \
    --ioengine=libaio --direct=1 --time_based --runtime="$SECS" --group_reporting \
    --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(int((j["read"]["bw_bytes"]+j["write"]["bw_bytes"])/1e6), int(j["read"]["io_bytes"]+j["write"]["io_bytes"]))'
}
cpu_of() { awk '{print $14+$15}' "/proc/$1/stat"; }

declare -A RES CPU
for run in $(seq 1 "$RUNS"); do
  for target in direct passthrough daemon; do
    if [ $target = direct ]; then d=$DIR/direct; pid=
    else
      pt=direct; [ $target = daemon ] && pt=off
      printf '[[tier]]\nname = "fast"\npath = "%s/tier"\nread_bandwidth = "5GB/s"\nwrite_bandwidth = "5GB/s"\n[mount]\npassthrough = "%s"\nlog_file = "%s/log"\n' "$DIR" "$pt" "$DIR" >"$DIR/c.toml"
      "$TIERFS" mount --config "$DIR/c.toml" "$MNT" 2>/dev/null
      d=$MNT/bench; mkdir -p "$d"
      pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$MNT/.tierfs/stats.json")
    fi
    fio --name=o --directory="$d" --rw=write --bs=1M --size=512M --numjobs=4 --direct=1 --output-format=terse >/dev/null 2>&1
    c0=${pid:+$(cpu_of "$pid")}
    read -r w wb < <(fio_mbps "$d" write)
    read -r r rb < <(fio_mbps "$d" read)
    if [ -n "$pid" ]; then
      c1=$(cpu_of "$pid")
      CPU[$target]+="$(awk -v c=$((c1 - c0)) -v t="$CLK" -v b=$((wb + rb)) 'BEGIN{printf "%.3f", c/t/(b/1e9)}') "
      rm -rf "$d"; "$TIERFS" unmount "$MNT"
    else rm -rf "$d"/*; fi
    RES[$target.w]+="$w "; RES[$target.r]+="$r "
    echo "run $run $target: write $w MB/s, read $r MB/s" >&2
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
dw=$(median <<<"${RES[direct.w]}"); dr=$(median <<<"${RES[direct.r]}")
echo "| target | write MB/s | vs direct | read MB/s | vs direct | daemon CPU s/GB |"
echo "|---|---|---|---|---|---|"
for t in direct passthrough daemon; do
  w=$(median <<<"${RES[$t.w]}"); r=$(median <<<"${RES[$t.r]}")
  printf '| %s | %s | %.2f | %s | %.2f | %s |\n' "$t" "$w" "$(awk -v a="$w" -v b="$dw" 'BEGIN{print a/b}')" \
    "$r" "$(awk -v a="$r" -v b="$dr" 'BEGIN{print a/b}')" "$(median <<<"${CPU[$t]:-}")"
done
echo "one uncapped tier at $DIR; fio 4 jobs x QD 16, 1 MiB O_DIRECT libaio, ${SECS}s, $RUNS runs"
