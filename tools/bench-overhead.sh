#!/bin/bash
# bench-overhead.sh - what the FUSE layer costs on one fast, uncapped tier: fio through
# tierfs (kernel passthrough, and the daemon path) against the same folder used directly,
# as root and as an ordinary user (tierfs mounted through fusermount3, no passthrough).
#
#   tools/bench-overhead.sh [RUNS] [SECONDS] [DIR]     (defaults: 3, 10, /dev/shm/tierfs-overhead)
#
# fio: O_DIRECT 1 MiB, libaio, 4 jobs x QD 16, time-based, write then read. Prints MB/s
# (10^6 B/s) per run, the medians, ratios to direct, and the daemon's CPU seconds per GB
# moved (utime+stime from /proc; passthrough moves bytes without the daemon).
# Targets: direct, passthrough, daemon (/dev/fuse), daemon-uring (FUSE over io_uring; root
# sets the fuse module's enable_uring for the run and restores it), before (the daemon path
# of the binary in $BEFORE, e.g. an older build, side by side); user-direct, user-daemon,
# user-daemon-uring (as BENCH_USER, default tierfs-test, when run as root and the user
# exists). TARGETS overrides the list. Each cell: median (min-max) over the runs.
# PROFILE=1: also `perf record -g` the daemon (daemon targets) during one write and one
# read run and print where its time goes (perf report, top symbols).
set -euo pipefail
RUNS=${1:-3}
SECS=${2:-10}
DIR=${3:-/dev/shm/tierfs-overhead}
HERE=$(cd "$(dirname "$0")/.." && pwd)
TIERFS=${TIERFS:-$HERE/target/release/tierfs}
BENCH_USER=${BENCH_USER:-tierfs-test}
command -v fio >/dev/null || { echo "install fio" >&2; exit 2; }
[ -x "$TIERFS" ] || (cd "$HERE" && cargo build --release)
URING=/sys/module/fuse/parameters/enable_uring
if [ -z "${TARGETS:-}" ]; then
  TARGETS="direct passthrough daemon"
  [ -w $URING ] && TARGETS="$TARGETS daemon-uring"
  [ -n "${BEFORE:-}" ] && TARGETS="$TARGETS before"
  if [ "$(id -u)" = 0 ] && id "$BENCH_USER" >/dev/null 2>&1 && command -v fusermount3 >/dev/null; then
    TARGETS="$TARGETS user-direct user-daemon"
    [ -w $URING ] && TARGETS="$TARGETS user-daemon-uring"
  fi
fi
URING_WAS=$(cat $URING 2>/dev/null || echo N)
MNT=$DIR-mnt
mkdir -p "$DIR/tier" "$DIR/direct" "$DIR/utier" "$DIR/udirect" "$MNT"
chmod 755 "$DIR"
id "$BENCH_USER" >/dev/null 2>&1 && chown "$BENCH_USER" "$DIR/utier" "$DIR/udirect" "$MNT"
as_user() { runuser -u "$BENCH_USER" -- "$@"; }
cleanup() {
  if grep -q " $MNT " /proc/mounts; then
    "$TIERFS" unmount "$MNT" 2>/dev/null || as_user "$TIERFS" unmount "$MNT" 2>/dev/null || umount -l "$MNT"
  fi
  rm -rf "$DIR" "$MNT"
  [ -w $URING ] && echo "$URING_WAS" >$URING
}
trap cleanup EXIT
CLK=$(getconf CLK_TCK)

fio_mbps() {  # DIR RW [runner...]
  local d=$1 rw=$2; shift 2
  "$@" fio --name=o --directory="$d" --rw="$rw" --bs=1M --size=512M --numjobs=4 --iodepth=16 \
    --ioengine=libaio --direct=1 --time_based --runtime="$SECS" --group_reporting \
    --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(int((j["read"]["bw_bytes"]+j["write"]["bw_bytes"])/1e6), int(j["read"]["io_bytes"]+j["write"]["io_bytes"]))'
}
cpu_of() { awk '{print $14+$15}' "/proc/$1/stat"; }
profile() {  # PID RW DIR: perf during one more fio run
  local out=$DIR/../tierfs-overhead-perf-$2.data
  perf record -g -o "$out" -p "$1" -- sleep "$SECS" >/dev/null 2>&1 &
  local perf_pid=$!
  fio_mbps "$3" "$2" >/dev/null
  wait $perf_pid || true
  echo "--- perf: daemon, $2, top symbols (self %)" >&2
  { perf report -i "$out" --stdio --no-children --sort symbol 2>/dev/null || true; } |
    grep -E '^ +[0-9.]+%' | sed -n '1,15p' >&2 || true
  rm -f "$out"
}

declare -A RES CPU
for run in $(seq 1 "$RUNS"); do
  for target in $TARGETS; do
    runner=()
    case $target in
      direct) d=$DIR/direct; pid= ;;
      user-direct) d=$DIR/udirect; pid=; runner=(runuser -u "$BENCH_USER" --) ;;
      passthrough|daemon|daemon-uring|before|user-daemon|user-daemon-uring)
        pt=direct; [ $target = passthrough ] || pt=off
        tier=$DIR/tier; [[ $target == user-* ]] && tier=$DIR/utier
        bin=$TIERFS; [ $target = before ] && bin=$BEFORE
        # The "before" binary may not know `transport`: its own default is /dev/fuse.
        tr=dev; [[ $target == *-uring ]] && tr=uring
        extra=; [ $target = before ] || extra="transport = \"$tr\"\n"
        [ -w $URING ] && { [ $tr = uring ] && echo Y >$URING || echo "$URING_WAS" >$URING; }
        printf '[[tier]]\nname = "fast"\npath = "%s"\nread_bandwidth = "5GB/s"\nwrite_bandwidth = "5GB/s"\n[mount]\npassthrough = "%s"\nlog_file = "%s/log"\n'"$extra" \
          "$tier" "$pt" "$tier" >"$DIR/c-$target.toml"
        chmod 644 "$DIR/c-$target.toml"
        if [[ $target == user-* ]]; then
          runner=(runuser -u "$BENCH_USER" --)
          as_user "$bin" mount --config "$DIR/c-$target.toml" "$MNT" 2>/dev/null
        else
          "$bin" mount --config "$DIR/c-$target.toml" "$MNT" 2>/dev/null
        fi
        d=$MNT/bench; "${runner[@]}" mkdir -p "$d"
        # A user's mount is private: even root reads its stats as that user.
        pid=$("${runner[@]}" python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$MNT/.tierfs/stats.json") ;;
      *) echo "unknown target $target" >&2; exit 2 ;;
    esac
    "${runner[@]}" fio --name=o --directory="$d" --rw=write --bs=1M --size=512M --numjobs=4 --direct=1 --output-format=terse >/dev/null 2>&1
    c0=${pid:+$(cpu_of "$pid")}
    read -r w wb < <(fio_mbps "$d" write "${runner[@]}")
    c1=${pid:+$(cpu_of "$pid")}
    read -r r rb < <(fio_mbps "$d" read "${runner[@]}")
    if [ -n "$pid" ]; then
      c2=$(cpu_of "$pid")
      CPU[$target.w]+="$(awk -v c=$((c1 - c0)) -v t="$CLK" -v b="$wb" 'BEGIN{printf "%.3f", c/t/(b/1e9)}') "
      CPU[$target.r]+="$(awk -v c=$((c2 - c1)) -v t="$CLK" -v b="$rb" 'BEGIN{printf "%.3f", c/t/(b/1e9)}') "
      if [ "${PROFILE:-0}" = 1 ] && [[ $target == daemon* || $target == before ]] && [ "$run" = 1 ]; then
        echo "--- profile of $target" >&2
        profile "$pid" write "$d"; profile "$pid" read "$d"
      fi
      "${runner[@]}" rm -rf "$d"
      if [[ $target == user-* ]]; then as_user "$bin" unmount "$MNT"; else "$bin" unmount "$MNT"; fi
    else rm -rf "${d:?}"/*; fi
    RES[$target.w]+="$w "; RES[$target.r]+="$r "
    echo "run $run $target: write $w MB/s, read $r MB/s" >&2
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
# median (min-max) of a list
mmm() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{if (NR) printf "%s (%s-%s)", a[int((NR+1)/2)], a[1], a[NR]}'; }
echo "| target | write MB/s | of direct's MB/s (higher is faster) | read MB/s | of direct's MB/s | daemon CPU s/GB write | read |"
echo "|---|---|---|---|---|---|---|"
for t in $TARGETS; do
  base=direct; [[ $t == user-* ]] && base=user-direct
  dw=$(median <<<"${RES[$base.w]:-}"); dr=$(median <<<"${RES[$base.r]:-}")
  w=$(median <<<"${RES[$t.w]}"); r=$(median <<<"${RES[$t.r]}")
  printf '| %s | %s | %.2f | %s | %.2f | %s | %s |\n' "$t" "$(mmm <<<"${RES[$t.w]}")" "$(awk -v a="$w" -v b="${dw:-0}" 'BEGIN{print b ? a/b : 0}')" \
    "$(mmm <<<"${RES[$t.r]}")" "$(awk -v a="$r" -v b="${dr:-0}" 'BEGIN{print b ? a/b : 0}')" "$(mmm <<<"${CPU[$t.w]:-}")" "$(mmm <<<"${CPU[$t.r]:-}")"
done
echo "one uncapped tier at $DIR; fio 4 jobs x QD 16, 1 MiB O_DIRECT libaio, ${SECS}s, $RUNS runs; user-* as $BENCH_USER (ratios to user-direct); before = $BEFORE"
