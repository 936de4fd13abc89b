#!/bin/bash
# openbench.sh - what one open() costs with the direct path's preload library, outside any
# mount and on a tierfs mount (issue 39: "state the per-open overhead you measure, inside
# and outside"). Needs root (mounts as root and as BENCH_USER) and gcc.
#
#   tools/direct/openbench.sh [RUNS]          (default 5 runs per case)
#
# Compiles openbench.c, then times N open()+close() pairs of one file (openbench.c), each
# case once without and once with LD_PRELOAD=libtierfs_preload.so (the library beside
# TIERFS, as `tierfs run` sets it), the two interleaved in every run. Cases:
#   outside      a file on the local disk, outside any mount: plain O_RDONLY of plain.dat,
#                and O_RDONLY|O_DIRECT of x.tensor.swp (the library checks whether it is on
#                a tierfs mount, finds not, and opens it as asked)
#   user         a tierfs mount by BENCH_USER (fusermount3; layout "stripe", the user's
#                default, staging memory off so that the 1 MiB file is not served from
#                memory): O_RDONLY|O_DIRECT and O_WRONLY|O_DIRECT of a 1 MiB swap file,
#                through FUSE (without) and on the direct path (with: a FUSE open, the
#                handle's ioctl, then the daemon's grant over its socket); a plain O_RDONLY
#                of a non-swap file
#   user staged  the same mount with the default config (staging memory on): the file is
#                held in memory, so the daemon refuses the lease (memory first): what an
#                ask that is refused costs
#   root         a root mount, default config (whole files; swap files' O_DIRECT opens in
#                kernel passthrough, so the daemon refuses the lease): O_RDONLY|O_DIRECT
#   root whole   a root mount with layout = "whole-file", passthrough = "off" and staging
#                memory off: the whole file's piece replaces the program's descriptor
#                (passthrough = "off" alone makes root's default layout "stripe", as a user's)
# The tiers are two plain folders on the local disk (bandwidths given in the config: no
# probe); opens do not move data. Prints a markdown table: ns per open, median (min-max)
# over RUNS, leases the daemon granted per open with the library (its stats.json), and where
# the first open's descriptor pointed (readlink /proc/self/fd/N).
# Environment: TIERFS [target/release/tierfs], BENCH_USER [tierfs-test], N_OUT [20000],
# N_IN [2000] (opens per run outside / inside a mount), OUT [a new folder under /tmp].
set -euo pipefail
HERE=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${1:-5}
TIERFS=$(realpath "${TIERFS:-$HERE/target/release/tierfs}")
LIB=$(dirname "$TIERFS")/libtierfs_preload.so
BENCH_USER=${BENCH_USER:-tierfs-test}
N_OUT=${N_OUT:-20000} N_IN=${N_IN:-2000}
OUT=${OUT:-$(mktemp -d /tmp/openbench-out.XXXXXX)}
[ "$(id -u)" = 0 ] || { echo "openbench.sh: needs root" >&2; exit 2; }
[ -f "$LIB" ] || { echo "openbench.sh: no $LIB beside $TIERFS" >&2; exit 2; }
command -v gcc >/dev/null || { echo "openbench.sh: needs gcc" >&2; exit 2; }
mkdir -p "$OUT"
W=$(mktemp -d /var/tmp/openbench.XXXXXX)
chmod 755 "$W"
MNT=$W/mnt OWNER=""
cleanup() {
  if grep -q " $MNT fuse" /proc/mounts; then "$TIERFS" unmount "$MNT" >/dev/null 2>&1 || umount -l "$MNT" || true; fi
  rm -rf "$W"
}
trap cleanup EXIT
cp "$TIERFS" "$W/tierfs"; cp "$LIB" "$W/"; chmod 755 "$W/tierfs" "$W/libtierfs_preload.so"
TIERFS=$W/tierfs LIB=$W/libtierfs_preload.so
gcc -O2 -Wall -o "$W/openbench" "$HERE/tools/direct/openbench.c"
cd /tmp

as() { if [ "$OWNER" = user ]; then runuser -u "$BENCH_USER" -- "$@"; else "$@"; fi; }
config() {  # EXTRA_LINES -> config path
  local c; c=$W/config-$RANDOM.toml
  cat >"$c" <<EOT
[[tier]]
name = "nvme"
path = "$W/nvme"
read_bandwidth = "1200MB/s"
write_bandwidth = "800MB/s"
[[tier]]
name = "pfs"
path = "$W/pfs"
read_bandwidth = "400MB/s"
write_bandwidth = "300MB/s"
[mount]
log_file = "$W/daemon.log"
$1
EOT
  chmod 644 "$c"; echo "$c"
}
mount_as() {  # root|user EXTRA_LINES
  OWNER=$1
  rm -rf "$W/nvme" "$W/pfs" "$MNT"; mkdir -p "$W/nvme" "$W/pfs" "$MNT"
  [ "$OWNER" = root ] || { chown "$BENCH_USER" "$W/nvme" "$W/pfs" "$MNT"; touch "$W/daemon.log"; chown "$BENCH_USER" "$W/daemon.log"; }
  as "$TIERFS" mount --config "$(config "$2")" "$MNT" >/dev/null
  as mkdir -p "$MNT/ds"
  as dd if=/dev/urandom of="$MNT/ds/x.tensor.swp" bs=1M count=1 oflag=direct status=none
  as dd if=/dev/urandom of="$MNT/plain.dat" bs=1M count=1 status=none
}
unmount() { as "$TIERFS" unmount "$MNT" >/dev/null; OWNER=""; }

declare -A R T L
leases() {  # -> direct leases the mounted daemon granted so far (all tiers)
  as cat "$MNT/.tierfs/stats.json" | python3 -c 'import json,sys; print(sum(t.get("direct_opens", 0) for t in json.load(sys.stdin)["tiers"]))'
}
case_run() {  # NAME PATH N MODE: one run, without then with the library
  local name=$1 p=$2 n=$3 mode=$4 out l0=""
  out=$(as "$W/openbench" "$p" "$n" "$mode")
  R[$name.without]+="$(awk '{print $2}' <<<"$out") "; T[$name.without]=$(awk '{print $4}' <<<"$out")
  [ -z "$OWNER" ] || l0=$(leases)
  out=$(as env LD_PRELOAD="$LIB" "$W/openbench" "$p" "$n" "$mode")
  R[$name.with]+="$(awk '{print $2}' <<<"$out") "; T[$name.with]=$(awk '{print $4}' <<<"$out")
  # openbench opens the file 100 times untimed first: those count too.
  if [ -n "$l0" ]; then L[$name]=$(awk -v a="$l0" -v b="$(leases)" -v n="$n" 'BEGIN{printf "%.2f", (b-a)/(n+100)}'); else L[$name]="-"; fi
}
CASES=()
add() { CASES+=("$1"); }

mkdir -p "$W/plain"
dd if=/dev/urandom of="$W/plain/x.tensor.swp" bs=1M count=1 status=none
dd if=/dev/urandom of="$W/plain/plain.dat" bs=1M count=1 status=none
add "outside: plain.dat O_RDONLY"; add "outside: x.tensor.swp O_RDONLY|O_DIRECT"
add "user mount (stripe): swap file O_RDONLY|O_DIRECT"; add "user mount (stripe): swap file O_WRONLY|O_DIRECT"
add "user mount (stripe): plain.dat O_RDONLY"
add "user mount (stripe), staging memory on: swap file O_WRONLY|O_DIRECT (held in memory: refused)"
add "root mount, default (passthrough): swap file O_RDONLY|O_DIRECT"
add "root mount, whole-file, passthrough off: swap file O_RDONLY|O_DIRECT"
add "root mount, whole-file, passthrough off: swap file O_WRONLY|O_DIRECT"
for run in $(seq 1 "$RUNS"); do
  echo "openbench: run $run/$RUNS" >&2
  case_run "${CASES[0]}" "$W/plain/plain.dat" "$N_OUT" rd
  case_run "${CASES[1]}" "$W/plain/x.tensor.swp" "$N_OUT" rd-direct
  mount_as user '[cache]
size = "off"'
  case_run "${CASES[2]}" "$MNT/ds/x.tensor.swp" "$N_IN" rd-direct
  case_run "${CASES[3]}" "$MNT/ds/x.tensor.swp" "$N_IN" wr-direct
  case_run "${CASES[4]}" "$MNT/plain.dat" "$N_IN" rd
  as cat "$MNT/.tierfs/stats.json" >"$OUT/stats-user-$run.json"
  unmount
  mount_as user ""
  case_run "${CASES[5]}" "$MNT/ds/x.tensor.swp" "$N_IN" wr-direct
  unmount
  mount_as root ""
  case_run "${CASES[6]}" "$MNT/ds/x.tensor.swp" "$N_IN" rd-direct
  unmount
  mount_as root 'passthrough = "off"
[placement]
layout = "whole-file"
[cache]
size = "off"'
  case_run "${CASES[7]}" "$MNT/ds/x.tensor.swp" "$N_IN" rd-direct
  case_run "${CASES[8]}" "$MNT/ds/x.tensor.swp" "$N_IN" wr-direct
  cat "$MNT/.tierfs/stats.json" >"$OUT/stats-root-whole-$run.json"
  unmount
done

stat_of() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END{printf "%d (%d-%d)", a[int((NR+1)/2)], a[1], a[NR]}'; }
med() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
{
  echo "| case | without the library: ns per open, median (min-max) | with it (LD_PRELOAD) | difference (medians) | leases per open, last run (a striped lease counts once per tier) | descriptor with the library |"
  echo "|---|---|---|---|---|---|"
  for c in "${CASES[@]}"; do
    a=$(med <<<"${R[$c.without]}"); b=$(med <<<"${R[$c.with]}")
    printf '| %s | %s | %s | %+d ns (%+.0f %%) | %s | %s |\n' "$c" "$(stat_of <<<"${R[$c.without]}")" \
      "$(stat_of <<<"${R[$c.with]}")" "$((b - a))" "$(awk -v a="$a" -v b="$b" 'BEGIN{print 100*(b-a)/a}')" \
      "${L[$c]}" "$(sed "s|$W|W|g" <<<"${T[$c.with]}")"
  done
  echo
  echo "$RUNS runs; $N_OUT opens per run outside a mount, $N_IN inside; open()+close() timed together; W = the bench's folder; tierfs $("$TIERFS" --version | head -1); $(nproc) cores, kernel $(uname -r); load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
} | tee "$OUT/openbench.md"
echo "openbench: results in $OUT" >&2
