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
#   user             the same config, the daemon run by BENCH_USER (default tierfs-test,
#                    mounted through fusermount3) and fio run as that user: the FUSE path
#                    an ordinary user gets (layout "stripe", no passthrough)
#   +cg, +run        flags any target may carry (e.g. user+cg+run, default+cg+run): +cg puts
#                    the daemon in the memory cgroup; +run runs fio under `tierfs run` (the
#                    direct path: the preload library beside the tierfs binary)
# VERIFY=run (default) | all | 0: after a target's timed passes, a crc32c verify pass (fio
# --verify=crc32c --do_verify=1, the same jobs on fresh files, written then read back and checked) on
# +run targets (all: every target), and for +run targets a second check of those files read
# through FUSE without the library (fio --verify_only=1): what the direct path wrote, the
# FUSE view must show. Reported as "clean" or the failure; logs in BENCH_DIR.
# (bandwidths from `tierfs probe` of these tiers, probed once per invocation so every target
# places its files by the same figures). LAYOUTS="..." picks targets; a target may end in
# "@dev" (the /dev/fuse transport: TIERFS_TRANSPORT=dev) or "@before" (the binary named by
# BEFORE=path, e.g. an older build, run in the same rounds).
# Prints per-run MB/s (10^6 B/s) and the median per target, each also as a fraction of the
# tiers' summed caps (1600 MB/s read, 1100 write), the daemon's CPU-s per GB and how many of
# fio's files each tier holds, and the bytes that took the direct path. Environment: TIERBED
# (path of tierbed.sh), BENCH_DIR (work folder), TIERFS (binary), JOBS, QD, SIZE (per job,
# default 512M), MEMCG_LIMIT, BENCH_USER, VERIFY.
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
BENCH_USER=${BENCH_USER:-tierfs-test}
VERIFY=${VERIFY:-run}
AS=()    # who runs the current target's daemon and fio: empty (root) or runuser -u BENCH_USER --
RUNP=()  # fio's prefix: empty, or TIERFS run -- (the direct path)
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
  # (grep, not mountpoint: root may not stat a user's FUSE mount)
  if grep -q " $MNT fuse" /proc/mounts; then "$TIERFS" unmount "$MNT" || umount -l "$MNT" || true; fi
  memcg_remove
  bash "$TIERBED" down nvme >/dev/null 2>&1 || true
  bash "$TIERBED" down pfs --purge >/dev/null 2>&1 || true
}
trap cleanup EXIT
mkdir -p "$BENCH_DIR" "$MNT"
# Paths given relative to the caller's folder stay valid after the cd below.
BENCH_DIR=$(realpath -m "$BENCH_DIR") MNT=$(realpath -m "$MNT") TIERFS=$(realpath "$TIERFS")
[ -z "${BEFORE:-}" ] || BEFORE=$(realpath "$BEFORE")
cd /tmp  # fio may leave files in its working directory; the user's fio needs one it can enter
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

core_of() {  # TARGET -> the target without @..., +cg and +run (default, user, stripe, whole-file+nopt, ...)
  local t=${1%@*}; t=${t//+cg/}; echo "${t//+run/}"
}
config() {  # TARGET -> config path (bandwidths come from the cached probe)
  case $(core_of "$1") in
    default|user)  # only the tiers: every other key at its default
      local logf=$BENCH_DIR/daemon.log
      # The user's daemon cannot write in BENCH_DIR.
      [ "$(core_of "$1")" = user ] && logf=/tmp/tierfs-bench-mount-daemon-user.log && rm -f "$logf"
      { cat "$BENCH_DIR/probe.toml"; printf '[mount]\nlog_file = "%s"\n%s\n' \
          "$logf" "${MOUNT_EXTRA:-}"; } >"$BENCH_DIR/$1.toml"
      chmod 644 "$BENCH_DIR/$1.toml"
      echo "$BENCH_DIR/$1.toml"; return ;;
  esac
  # TARGET is a layout, optionally with "+nopt" for passthrough = "off" (daemon path only);
  # otherwise passthrough = "direct", so fio's O_DIRECT opens of whole files are passthrough
  local t; t=$(core_of "$1"); local c=$BENCH_DIR/$1.toml layout=${t%+nopt} pt=direct
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
  local out; out=$("${AS[@]}" "${RUNP[@]}" fio --name=bench --directory="$1" --rw="$2" --bs=1M --size="$SIZE" --numjobs="$JOBS" \
    --iodepth="$QD" --ioengine=libaio --direct=1 "${timed[@]}" --group_reporting \
    --output-format=json 2>/dev/null)
  python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(int((j["read"]["bw_bytes"]+j["write"]["bw_bytes"])/1e6))' <<<"$out"
}

declare -A RES
run_target() {  # NAME DIR
  "${AS[@]}" mkdir -p "$2"
  # lay out the files once, so reads hit written blocks (sized runs: the write is the layout)
  [ "$SECS" = 0 ] || "${AS[@]}" "${RUNP[@]}" fio --name=bench --directory="$2" --rw=write --bs=1M --size="$SIZE" --numjobs="$JOBS" --direct=1 \
      --ioengine=libaio --iodepth="$QD" --output-format=terse >/dev/null 2>&1
  local w r; w=$(fio_mbps "$2" write); r=$(fio_mbps "$2" read)
  RES[$1.write]+="$w "; RES[$1.read]+="$r "; LAST_W=$w; LAST_R=$r
  echo "run $run $1: write $w MB/s, read $r MB/s" >&2
}

verify_target() {  # NAME DIR -> sets VERDICT ("clean" or what failed); fio's output in BENCH_DIR
  local tag="$1-$run" rc=0 common=(--name=bench --directory="$2" --rw=write --bs=1M --size="$SIZE"
    --numjobs="$JOBS" --iodepth="$QD" --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1
    --verify_state_save=0 --group_reporting --output-format=json)
  # Fresh files: the timed ones go first. Rewriting them makes the daemon re-lay them out
  # when the shares moved (new pieces beside the old), and on tierbed's 6 GiB tiers 4 GiB
  # of files rewritten that way fill the fast tier and then the slow one: ENOSPC, through
  # FUSE as under `tierfs run` (2026-12-06, with two CPU-bound processes beside it).
  "${AS[@]}" rm -rf "$2"; "${AS[@]}" mkdir -p "$2"
  # The files written (with crc32c headers) and read back, on the target's own path.
  "${AS[@]}" "${RUNP[@]}" fio "${common[@]}" --do_verify=1 >"$BENCH_DIR/verify-$tag.json" \
    2>"$BENCH_DIR/verify-$tag.err" || rc=$?
  VERDICT=$(python3 - "$BENCH_DIR/verify-$tag.json" "$rc" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))["jobs"][0]
except Exception as e:
    print(f"FAIL (exit {sys.argv[2]}, no fio output)"); sys.exit()
bad = j.get("error", 0) or sys.argv[2] != "0"
print(f"FAIL (exit {sys.argv[2]}, fio error {j.get('error')})" if bad else "clean")
PY
)
  [ "$VERDICT" = clean ] || return 0
  if [ ${#RUNP[@]} -gt 0 ]; then
    # What the direct path wrote, read through FUSE without the library.
    rc=0
    "${AS[@]}" fio "${common[@]}" --verify_only=1 >"$BENCH_DIR/verify-fuse-$tag.json" \
      2>"$BENCH_DIR/verify-fuse-$tag.err" || rc=$?
    local ferr; ferr=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0].get("error", 0))' \
      "$BENCH_DIR/verify-fuse-$tag.json" 2>/dev/null || echo "no output")
    if [ "$rc" != 0 ] || [ "$ferr" != 0 ] || grep -qiE 'verify failed|bad magic|bad header|crc32c' "$BENCH_DIR/verify-fuse-$tag.err"; then
      VERDICT="FAIL through FUSE (exit $rc, fio error $ferr: $(grep -m1 -iE 'verify|error' "$BENCH_DIR/verify-fuse-$tag.err" | cut -c1-120))"
    else
      VERDICT="clean (+ FUSE read)"
    fi
  fi
}

stats_json() {  # -> the mount's stats.json on stdout (as the mount's owner: root cannot read a user's mount)
  "${AS[@]}" cat "$MNT/.tierfs/stats.json"
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
    # +cg: the mount (and so its daemon) starts inside a memory cgroup.
    cg=() AS=() RUNP=()
    if [ "$(core_of "$layout")" = user ]; then
      AS=(runuser -u "$BENCH_USER" --)
      # The user's daemon needs the tier folders (probe cache included) and the mountpoint.
      chown -R "$BENCH_USER" "$NVME/tierfs" "$PFS/tierfs" "$MNT"; chmod 755 "$BENCH_DIR"
    fi
    [[ ${layout%@*} == *+run* ]] && RUNP=("$bin" run --)
    if [[ ${layout%@*} == *+cg* ]]; then
      memcg_remove; mkdir "$MEMCG"
      echo "$(numfmt --from=iec "${MEMCG_LIMIT%B}")" >"$MEMCG/memory.limit_in_bytes"
      cg=(bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$MEMCG")
    fi
    if [ -n "$transport" ]; then
      TIERFS_TRANSPORT=$transport "${cg[@]}" "${AS[@]}" "$bin" mount --config "$(config "$layout")" "$MNT" 2>/dev/null
    else
      env -u TIERFS_TRANSPORT "${cg[@]}" "${AS[@]}" "$bin" mount --config "$(config "$layout")" "$MNT" 2>/dev/null
    fi
    stats_json >"$BENCH_DIR/stats0-$layout-$run.json"
    cpu0=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cpu"]["total_s"])' "$BENCH_DIR/stats0-$layout-$run.json")
    run_target "$layout" "$MNT/bench"
    # What each target did: shares, bytes per tier, daemon CPU (kept per run).
    "${AS[@]}" cat "$MNT/.tierfs/tiers" >"$BENCH_DIR/tiers-$layout-$run.txt"
    stats_json >"$BENCH_DIR/stats-$layout-$run.json"
    # GB fio moved: the layout pass, then the timed write and read (MB/s x seconds); sized
    # runs: each file written and read once.
    local_gb=$(awk -v j="$JOBS" -v sz="$(numfmt --from=iec "${SIZE%B}")" -v w="$LAST_W" -v r="$LAST_R" \
      -v t="$SECS" 'BEGIN{print (t == 0) ? 2*j*sz/1e9 : (j*sz)/1e9 + (w+r)*t/1e3}')
    read -r cpugb files dgb <<<"$(python3 - "$BENCH_DIR/stats-$layout-$run.json" "$cpu0" "$local_gb" "$BENCH_DIR/stats0-$layout-$run.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s0 = json.load(open(sys.argv[4]))
cpu = s["cpu"]["total_s"] - float(sys.argv[2])
gb = float(sys.argv[3])
on = {}
for f in s["files"]:
    for t in f.get("tiers", []):
        on[t] = on.get(t, 0) + 1
# bytes the direct path moved (fio's timed passes), all tiers
d = sum(t.get("direct_bytes", 0) for t in s["tiers"]) - sum(t.get("direct_bytes", 0) for t in s0["tiers"])
print(f"{cpu / gb if gb else 0:.3f}", ",".join(f"{k}:{v}" for k, v in sorted(on.items())) or "-", f"{d / 1e9:.2f}")
PY
)"
    RES[$layout.cpu]+="$cpugb "; RES[$layout.files]+="$files "; RES[$layout.direct]+="$dgb "
    echo "run $run $layout: daemon ${cpugb} CPU-s/GB, fio files per tier $files, $dgb GB on the direct path" >&2
    if [ "$VERIFY" = all ] || { [ "$VERIFY" = run ] && [ ${#RUNP[@]} -gt 0 ]; }; then
      verify_target "$layout" "$MNT/bench"
      RES[$layout.verify]+="$VERDICT;"
      echo "run $run $layout: crc32c verify $VERDICT" >&2
      stats_json >"$BENCH_DIR/stats-verified-$layout-$run.json"
    fi
    "${AS[@]}" rm -rf "$MNT/bench"
    "${AS[@]}" "$bin" unmount "$MNT"
    memcg_remove
    AS=() RUNP=()
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
minmax() { tr ' ' '\n' | grep -v '^$' | sort -n | awk 'NR==1{lo=$1} {hi=$1} END{print lo "-" hi}'; }
dw=$(median <<<"${RES[direct.write]}"); dr=$(median <<<"${RES[direct.read]}")
echo
echo "| target | write MB/s (median, min-max) | of nvme direct's | of the summed caps | read MB/s (median, min-max) | of nvme direct's | of the summed caps | daemon CPU-s/GB (median, min-max) | fio files per tier (each run) | GB on the direct path (each run) | crc32c verify (each run) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for t in direct $LAYOUTS; do
  w=$(median <<<"${RES[$t.write]}"); r=$(median <<<"${RES[$t.read]}")
  cpu=-; files=-; dgb=-; ver=-
  if [ "$t" != direct ]; then
    cpu="$(median <<<"${RES[$t.cpu]}") ($(minmax <<<"${RES[$t.cpu]}"))"; files=${RES[$t.files]% }
    dgb=${RES[$t.direct]% }; ver=${RES[$t.verify]:--}; ver=${ver%;}
  fi
  printf '| %s | %s (%s) | %.2f | %.2f | %s (%s) | %.2f | %.2f | %s | %s | %s | %s |\n' "$t" "$w" "$(minmax <<<"${RES[$t.write]}")" \
    "$(awk -v a="$w" -v b="$dw" "BEGIN{print a/b}")" "$(awk -v a="$w" "BEGIN{print a/1100}")" \
    "$r" "$(minmax <<<"${RES[$t.read]}")" "$(awk -v a="$r" -v b="$dr" "BEGIN{print a/b}")" \
    "$(awk -v a="$r" "BEGIN{print a/1600}")" "$cpu" "$files" "$dgb" "$ver"
done
echo
how="${SECS}s time-based"; [ "$SECS" = 0 ] && how="each file written once, then read once"
echo "caps: nvme 1200/800, pfs 400/300 MB/s read/write; sum 1600/1100. fio: $JOBS jobs x $SIZE x QD $QD, 1 MiB O_DIRECT libaio, $how, $RUNS runs. +cg: daemon in a ${MEMCG_LIMIT} memory cgroup; user: daemon and fio as $BENCH_USER; +run: fio under \`tierfs run\`."
