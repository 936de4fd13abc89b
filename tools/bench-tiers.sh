#!/bin/bash
# bench-tiers.sh - DeepSpeed ZeRO-3 swap replay and fio, side by side, on two bandwidth-capped
# tiers made with ../shared/tierbed: the fast tier used directly, mergerfs over both tiers,
# tierfs whole-file and tierfs stripe. Needs root (tierbed, mounts); installs fio, mergerfs
# and gnuplot with apt-get when they are missing.
#
#   tools/bench-tiers.sh [--runs N] [--replay-args "ARGS"] [--fio-secs S] [--targets "T..."]
#                        [--no-doc] [--out DIR]
#
# Tiers: "nvme" 1200/800 MB/s read/write (tierbed --ram: exact caps), "pfs" 400/300 MB/s
# (disk-backed). Each tierbed tier gets a name of its own (bt-nvme, bt-pfs by default) so a
# concurrent bench-mount.sh is not disturbed; they are always taken down at exit.
# Per run and target (targets interleaved, so drift hits all alike):
#   replay  target/release/tierfs-replay DIR $REPLAY_ARGS --json ...  (verifies every read)
#   fio     O_DIRECT 1 MiB libaio, QD 16, 4 jobs x 8 files of 32 MiB, time-based write then read
#   CPU     the FUSE daemon's utime+stime (/proc/PID/stat) over the replay and over fio, per GB
#           moved (tierfs: PID from MNT/.tierfs/stats.json; mergerfs: the process we started)
# Failures (mergerfs rejects O_DIRECT writes) are recorded, not fatal.
# The defaults: target default mounts a config of only the two [[tier]] entries (as root:
# whole files, passthrough "auto", automatic staging memory); default-cg the same with the
# daemon in a memory cgroup of MEMCG_LIMIT (default 1G), so staging is bounded as at real
# scale. A target ending in @before runs the binary BEFORE=path instead (side by side):
# default, default-cg, default-user, default-user-cg, each also with -run (then under
# BEFORE's own `tierfs run`, with the libtierfs_preload.so beside BEFORE).
# As an ordinary user: targets direct-user and stripe-user run the replay and fio as
# BENCH_USER (default tierfs-test), stripe-user with the mount made by that user through
# fusermount3 (no passthrough without root). default-user and default-user-cg: the defaults
# (only the two [[tier]] entries; as a user layout "stripe") with the daemon and the replay
# as BENCH_USER, -cg with the daemon in the memory cgroup.
# The direct path: any tierfs target ending in -run (e.g. default-user-cg-run, default-cg-run,
# stripe-user-run) runs the replay and fio under `tierfs run` (the preload library beside
# the tierfs binary); the table then shows the GB the replay moved on the direct path.
# Binaries: TIERFS=path REPLAY=path use those builds (copied, with libtierfs_preload.so from
# beside TIERFS) instead of `cargo build --release`'s target/release.
# Results: $OUT/results.tsv, per-run JSON and logs, a PNG plot, and (unless --no-doc) the
# generated block of docs/PERFORMANCE.md under "## DeepSpeed replay and side-by-side".
# Environment: TIERBED, BENCH_DIR (work folder), NVME_TIER, PFS_TIER, MERGERFS_OPTS,
# MEMCG_LIMIT, BEFORE, TIERFS, REPLAY, BENCH_USER.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
CMDLINE="tools/bench-tiers.sh $*"
RUNS=5
REPLAY_ARGS="--ranks 2 --subgroups 8 --subgroup-bytes 32MiB --steps 3 --engine libaio"
FIO_SECS=5
TARGETS="direct mergerfs whole-file whole-file-pt stripe"
DOC=1
OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --replay-args) REPLAY_ARGS=$2; shift 2 ;;
    --fio-secs) FIO_SECS=$2; shift 2 ;;
    --targets) TARGETS=$2; shift 2 ;;
    --no-doc) DOC=0; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-tiers.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "bench-tiers.sh: --runs must be a positive integer" >&2; exit 2; }

TIERBED=${TIERBED:-$HERE/../shared/tierbed/tierbed.sh}
BENCH_DIR=${BENCH_DIR:-/tmp/tierfs-bench-tiers}
OUT=${OUT:-$BENCH_DIR/out}
NVME_TIER=${NVME_TIER:-bt-nvme}
PFS_TIER=${PFS_TIER:-bt-pfs}
MERGERFS_OPTS=${MERGERFS_OPTS:-category.create=pfrd}
BENCH_USER=${BENCH_USER:-tierfs-test}
AS=()  # the runner of the current target: empty (root) or runuser -u BENCH_USER --
SRC_TIERFS=${TIERFS:-} SRC_REPLAY=${REPLAY:-}
TIERFS=$BENCH_DIR/bin/tierfs
REPLAY=$BENCH_DIR/bin/tierfs-replay
RUNP=()  # the replay's and fio's prefix: empty, or TIERFS run -- (targets ending in -run)
NVME=/mnt/$NVME_TIER PFS=/mnt/$PFS_TIER MNT=$BENCH_DIR/mnt
# caps, MB/s (10^6 B/s)
NR=1200 NW=800 PR=400 PW=300

log() { echo "bench-tiers: $*" >&2; }
[ "$(id -u)" = 0 ] || { log "needs root (tierbed, mounts)"; exit 2; }
[ -f "$TIERBED" ] || { log "tierbed not found at $TIERBED (set TIERBED)"; exit 2; }

need_pkgs=()
command -v fio >/dev/null || need_pkgs+=(fio)
command -v mergerfs >/dev/null || need_pkgs+=(mergerfs)
command -v gnuplot >/dev/null || need_pkgs+=(gnuplot-nox)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing ${need_pkgs[*]}"
  apt-get install -y -qq "${need_pkgs[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq "${need_pkgs[@]}" >/dev/null; }
fi
# private copies: target/ is shared, and a rebuild in the middle of the runs must not swap them
mkdir -p "$BENCH_DIR/bin"
if [ -n "$SRC_TIERFS" ] || [ -n "$SRC_REPLAY" ]; then
  [ -x "$SRC_TIERFS" ] && [ -x "$SRC_REPLAY" ] || { log "give both TIERFS and REPLAY (executables)"; exit 2; }
  cp "$SRC_TIERFS" "$BENCH_DIR/bin/tierfs"; cp "$SRC_REPLAY" "$BENCH_DIR/bin/tierfs-replay"
  LIB=$(dirname "$SRC_TIERFS")/libtierfs_preload.so
  if [ -f "$LIB" ]; then cp "$LIB" "$BENCH_DIR/bin/"; else rm -f "$BENCH_DIR/bin/libtierfs_preload.so"; fi
  REV="$("$TIERFS" --version 2>/dev/null | head -1) ($SRC_TIERFS)"
else
  log "cargo build --release"
  (cd "$HERE" && cargo build --release 2>&1 | tail -1) >&2
  cp "$HERE/target/release/tierfs" "$HERE/target/release/tierfs-replay" "$BENCH_DIR/bin/"
  cp "$HERE/target/release/libtierfs_preload.so" "$BENCH_DIR/bin/" 2>/dev/null || true
  REV=$(cd "$HERE" && git rev-parse --short HEAD)$(cd "$HERE" && git diff --quiet HEAD -- src Cargo.toml || echo "+uncommitted src changes")
fi
if [ -n "${BEFORE:-}" ]; then
  # Its own folder: `tierfs run` takes the library beside the binary it runs.
  mkdir -p "$BENCH_DIR/bin/before"
  cp "$BEFORE" "$BENCH_DIR/bin/before/tierfs"
  cp "$(dirname "$BEFORE")/libtierfs_preload.so" "$BENCH_DIR/bin/before/" 2>/dev/null || true
  BEFORE=$BENCH_DIR/bin/before/tierfs
fi
chmod 755 "$BENCH_DIR" "$BENCH_DIR/bin"; chmod -R a+rX "$BENCH_DIR/bin"

MFS_PID=""
DAEMON_PID=""
threads_left() {  # PID -> live threads (a zombie leader with live threads still holds its files)
  local n=0 t
  for t in /proc/"$1"/task/*; do
    [ -r "$t/stat" ] || continue
    [ "$(cut -d')' -f2- "$t/stat" 2>/dev/null | awk '{print $1}')" = Z ] || n=$((n + 1))
  done
  echo $n
}
unmount_all() {
  if grep -q " $MNT " /proc/mounts; then
    if [ -n "$MFS_PID" ]; then umount "$MNT" || umount -l "$MNT"
    else "${AS[@]}" "$TIERFS" unmount "$MNT" || umount -l "$MNT"; fi
  fi
  if [ -n "$MFS_PID" ]; then wait "$MFS_PID" 2>/dev/null || true; MFS_PID=""; fi
  # `tierfs unmount` returns once the daemon's main thread is a zombie; its other threads
  # (and its tier locks) can outlive that for a second: wait for them.
  if [ -n "$DAEMON_PID" ]; then
    local i=0
    while [ "$(threads_left "$DAEMON_PID")" != 0 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    [ $i -lt 300 ] || log "daemon $DAEMON_PID still has live threads 30 s after unmount"
    UNMOUNT_LAG=$i
    DAEMON_PID=""
  fi
}
MEMCG_LIMIT=${MEMCG_LIMIT:-1G}
MEMCG=/sys/fs/cgroup/memory/tierfs-bench-tiers-$$
memcg_remove() {
  [ -d "$MEMCG" ] || return 0
  for p in $(cat "$MEMCG/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  sleep 0.2; rmdir "$MEMCG" 2>/dev/null || true
}
cleanup() {
  unmount_all || true
  memcg_remove
  bash "$TIERBED" down "$NVME_TIER" >/dev/null 2>&1 || true
  bash "$TIERBED" down "$PFS_TIER" --purge >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rm -rf "$OUT"; mkdir -p "$BENCH_DIR" "$MNT" "$OUT"
bash "$TIERBED" up "$NVME_TIER" 6 $NR $NW "$NVME" --ram --force >/dev/null
bash "$TIERBED" up "$PFS_TIER" 12 $PR $PW "$PFS" --force >/dev/null

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
log "probing the tiers (tierfs probe --fresh) ..."
"$TIERFS" probe --config "$BENCH_DIR/probe.toml" --fresh --size 1GiB --secs 3 2>/dev/null | tee "$OUT/probe.txt" >&2

config() {  # TARGET -> config path (bandwidths come from the cached probe)
  case $1 in
    default*)  # only the tiers: every other key at its default
      local dl=$BENCH_DIR/daemon-$1.log
      [[ $1 == default-user* ]] && dl=/tmp/tierfs-bench-daemon-$1.log && rm -f "$dl"
      { cat "$BENCH_DIR/probe.toml"; printf '[mount]\nlog_file = "%s"\n' "$dl"; } >"$BENCH_DIR/$1.toml"
      chmod 644 "$BENCH_DIR/$1.toml"
      echo "$BENCH_DIR/$1.toml"; return ;;
  esac
  local c=$BENCH_DIR/$1.toml layout=${1%-run} extra=""
  layout=${layout%-pt}; layout=${layout%-user}
  local logf=$BENCH_DIR/daemon-$1.log
  [[ ${1%-run} == *-user ]] && logf=/tmp/tierfs-bench-daemon-$1.log
  # whole-file-pt: kernel passthrough also for O_DIRECT opens (all of DeepSpeed's)
  [ "${1%-run}" = whole-file-pt ] && extra='passthrough = "direct"'
  [[ ${1%-run} == *-user ]] && rm -f "$logf"
  # No staging memory, as when the figures in docs/PERFORMANCE.md were measured (it is on by
  # default since issue #14).
  { cat "$BENCH_DIR/probe.toml"; printf '[placement]\nlayout = "%s"\n[mount]\nlog_file = "%s"\n%s\n[cache]\nsize = "off"\n' "$layout" "$logf" "$extra"; } >"$c"
  echo "$c"
}

cpu_s() {  # PID -> utime+stime seconds, or empty
  [ -n "$1" ] && [ -r "/proc/$1/stat" ] || { echo ""; return; }
  local t; t=$(getconf CLK_TCK)
  cut -d')' -f2- "/proc/$1/stat" | awk -v t="$t" '{printf "%.2f\n", ($12+$13)/t}'
}

mount_target() {  # TARGET -> sets DIR, DAEMON_PID, AS and RUNP; fails if the mount fails
  DAEMON_PID=""
  AS=() RUNP=()
  local bin=$TIERFS name=${1%@before}
  [[ $1 == *@before ]] && bin=${BEFORE:?"target $1 needs BEFORE=path of the other binary"}
  if [[ $name == *-run ]]; then
    [ -f "$(dirname "$bin")/libtierfs_preload.so" ] || { log "target $1: no libtierfs_preload.so beside $bin"; return 1; }
    RUNP=("$bin" run --)
  fi
  case ${name%-run} in
    direct) DIR=$NVME/direct ;;
    direct-user)
      AS=(runuser -u "$BENCH_USER" --)
      mkdir -p "$NVME/direct-user"; chown "$BENCH_USER" "$NVME/direct-user"; DIR=$NVME/direct-user ;;
    stripe-user)
      AS=(runuser -u "$BENCH_USER" --)
      # The user's daemon needs the tier folders (probe cache included) and the mountpoint.
      chown -R "$BENCH_USER" "$NVME/tierfs" "$PFS/tierfs" "$MNT"
      chmod 755 "$BENCH_DIR"; chmod 644 "$(config stripe-user)"
      "${AS[@]}" "$TIERFS" mount --config "$(config stripe-user)" "$MNT" >/dev/null 2>>"$OUT/tierfs-mount.log" || return 1
      DAEMON_PID=$("${AS[@]}" python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$MNT/.tierfs/stats.json")
      DIR=$MNT/bench ;;
    mergerfs)
      mkdir -p "$NVME/mfs" "$PFS/mfs"
      mergerfs -f -o "$MERGERFS_OPTS" "$NVME/mfs:$PFS/mfs" "$MNT" 2>>"$OUT/mergerfs.log" &
      MFS_PID=$!
      for _ in $(seq 50); do mountpoint -q "$MNT" && break; sleep 0.1; done
      mountpoint -q "$MNT" || return 1
      DAEMON_PID=$MFS_PID; DIR=$MNT/bench ;;
    default-user|default-user-cg)
      AS=(runuser -u "$BENCH_USER" --)
      chown -R "$BENCH_USER" "$NVME/tierfs" "$PFS/tierfs" "$MNT"
      local cg=() c; c=$(config "$1")
      if [[ $1 == default-user-cg* ]]; then
        memcg_remove; mkdir "$MEMCG"
        numfmt --from=iec "${MEMCG_LIMIT%B}" >"$MEMCG/memory.limit_in_bytes"
        cg=(bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$MEMCG")
      fi
      "${cg[@]}" "${AS[@]}" "$bin" mount --config "$c" "$MNT" >/dev/null 2>>"$OUT/tierfs-mount.log" || return 1
      DAEMON_PID=$("${AS[@]}" python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$MNT/.tierfs/stats.json")
      DIR=$MNT/bench ;;
    default|default-cg)
      local cg=()
      if [[ $1 == default-cg* ]]; then
        memcg_remove; mkdir "$MEMCG"
        numfmt --from=iec "${MEMCG_LIMIT%B}" >"$MEMCG/memory.limit_in_bytes"
        cg=(bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$MEMCG")
      fi
      "${cg[@]}" "$bin" mount --config "$(config "$name")" "$MNT" >/dev/null 2>>"$OUT/tierfs-mount.log" || return 1
      DAEMON_PID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$MNT/.tierfs/stats.json")
      DIR=$MNT/bench ;;
    whole-file|whole-file-pt|stripe)
      "$TIERFS" mount --config "$(config "$1")" "$MNT" >/dev/null 2>>"$OUT/tierfs-mount.log" || return 1
      DAEMON_PID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$MNT/.tierfs/stats.json")
      DIR=$MNT/bench ;;
    *) log "unknown target $1"; return 1 ;;
  esac
  "${AS[@]}" mkdir -p "$DIR"
}

RES=$OUT/results.tsv
printf 'run\ttarget\tmetric\tvalue\n' >"$RES"
put() { printf '%s\t%s\t%s\t%s\n' "$run" "$1" "$2" "$3" >>"$RES"; }

fio_run() {  # DIR RW DIRECT -> prints "MBps bytes" or "FAIL message"
  timeout 120 "${AS[@]}" "${RUNP[@]}" fio --name=fio --directory="$1" --rw="$2" --bs=1M --ioengine=libaio --iodepth=16 \
    --direct="$3" --numjobs=4 --nrfiles=8 --filesize=32M --time_based --runtime="$FIO_SECS" \
    --group_reporting --output-format=json >"$OUT/fio.json" 2>"$OUT/fio.err" || true
  python3 - "$2" "$OUT/fio.json" "$OUT/fio.err" <<'EOF'
import json, sys
rw, err = sys.argv[1], open(sys.argv[3]).read().strip().splitlines()
try:
    j = json.loads(open(sys.argv[2]).read())["jobs"][0]
except Exception:
    print("FAIL", (err[0] if err else "no fio output")[:160]); sys.exit()
d = j[rw]
if j.get("error", 0) or d["io_bytes"] == 0:
    msg = next((l for l in err if "error" in l.lower()), err[0] if err else "error %s" % j.get("error"))
    print("FAIL", msg[:160])
else:
    print(int(d["bw_bytes"] / 1e6), d["io_bytes"])
EOF
}

run_target() {  # TARGET
  local t=$1 tag="$1-$run"
  if ! mount_target "$t"; then
    log "run $run $t: mount failed"; put "$t" status "mount failed"; unmount_all; return
  fi
  # --- replay
  local c0 c1 c2 rc=0
  c0=$(cpu_s "$DAEMON_PID")
  # The JSON goes through /tmp, where the target's user may write.
  local tj=/tmp/tierfs-bench-tiers-replay.json
  rm -f "$tj"
  local sj0=$OUT/stats-before-replay-$tag.json sj1=$OUT/stats-after-replay-$tag.json
  rm -f "$sj0" "$sj1"
  [ -z "$DAEMON_PID" ] || [ -n "$MFS_PID" ] || "${AS[@]}" cat "$MNT/.tierfs/stats.json" >"$sj0" 2>/dev/null || rm -f "$sj0"
  timeout 600 "${AS[@]}" "${RUNP[@]}" "$REPLAY" "$DIR/ds" $REPLAY_ARGS --json "$tj" >"$OUT/replay-$tag.log" 2>&1 || rc=$?
  [ -f "$tj" ] && mv "$tj" "$OUT/replay-$tag.json"
  c1=$(cpu_s "$DAEMON_PID")
  if [ -f "$sj0" ] && "${AS[@]}" cat "$MNT/.tierfs/stats.json" >"$sj1" 2>/dev/null; then
    # bytes the replay moved on the direct path (all tiers), and the leases it took
    put "$t" direct_gb_replay "$(python3 -c 'import json,sys
a, b = (json.load(open(f))["tiers"] for f in sys.argv[1:3])
print(sum(t.get("direct_bytes", 0) for t in b) / 1e9 - sum(t.get("direct_bytes", 0) for t in a) / 1e9)' "$sj0" "$sj1")"
    put "$t" direct_opens_replay "$(python3 -c 'import json,sys
a, b = (json.load(open(f))["tiers"] for f in sys.argv[1:3])
print(sum(t.get("direct_opens", 0) for t in b) - sum(t.get("direct_opens", 0) for t in a))' "$sj0" "$sj1")"
  else
    rm -f "$sj1"
  fi
  if [ "$rc" = 0 ]; then
    python3 - "$OUT/replay-$tag.json" "$c0" "$c1" <<'EOF' >>"$OUT/tmp.kv"
import json, sys
j = json.load(open(sys.argv[1])); s = j["summary"]; ph = j["phases"]
opt = [p for p in ph if p["phase"] == "optimizer"]
moved = sum(p["bytes_read"] + p["bytes_written"] for p in ph)
print("opt_s", s["optimizer_io_s_median"]); print("step_s", s["step_io_s_median"])
print("opt_gbps", s["optimizer_gb_per_s_median"])
print("opt_read_bytes", opt[0]["bytes_read"]); print("opt_write_bytes", opt[0]["bytes_written"])
print("setup_s", [p for p in ph if p["phase"] == "setup"][0]["io_s"])
print("replay_bytes", moved)
if sys.argv[2] and sys.argv[3]:
    print("cpu_replay", (float(sys.argv[3]) - float(sys.argv[2])) / (moved / 1e9))
EOF
    while read -r k v; do put "$t" "$k" "$v"; done <"$OUT/tmp.kv"; rm -f "$OUT/tmp.kv"
    put "$t" replay ok
    log "run $run $t: replay optimizer I/O $(grep -o 'median [0-9.]* s' "$OUT/replay-$tag.log" | head -1)"
  else
    local msg; msg=$(grep -m1 'tierfs-replay:' "$OUT/replay-$tag.log" | sed 's/^tierfs-replay: //' | sed "s|$DIR/||g" | cut -c1-200)
    put "$t" replay "FAIL (exit $rc): $msg"
    log "run $run $t: replay FAILED (exit $rc): $msg"
  fi
  "${AS[@]}" rm -rf "$DIR/ds"
  # --- fio: write, then read the same files
  c1=$(cpu_s "$DAEMON_PID")
  local w r wb=0 rb=0
  "${AS[@]}" mkdir -p "$DIR/fio"
  read -r w wb <<<"$(fio_run "$DIR/fio" write 1)"
  if [ "$w" = FAIL ]; then
    put "$t" fio_write "FAIL: $wb"; log "run $run $t: fio O_DIRECT write FAILED: $wb"; wb=0
    # lay the files out with buffered writes so the O_DIRECT read test has data
    timeout 300 fio --name=fio --directory="$DIR/fio" --rw=write --bs=1M --direct=0 --numjobs=4 --nrfiles=8 \
      --filesize=32M --output-format=terse >/dev/null 2>&1 || true
    sync
  else
    put "$t" fio_write "$w"
  fi
  read -r r rb <<<"$(fio_run "$DIR/fio" read 1)"
  if [ "$r" = FAIL ]; then put "$t" fio_read "FAIL: $rb"; rb=0; else put "$t" fio_read "$r"; fi
  c2=$(cpu_s "$DAEMON_PID")
  if [ -n "$c1" ] && [ -n "$c2" ] && [ $((wb + rb)) -gt 0 ]; then
    put "$t" cpu_fio "$(awk -v a="$c1" -v b="$c2" -v n=$((wb + rb)) 'BEGIN{print (b-a)/(n/1e9)}')"
  fi
  log "run $run $t: fio write $w MB/s, read $r MB/s"
  [ "$t" = mergerfs ] && put "$t" placement "$(du -sm "$NVME/mfs" | cut -f1) MiB on nvme, $(du -sm "$PFS/mfs" | cut -f1) MiB on pfs"
  "${AS[@]}" rm -rf "$DIR/fio" "$DIR"
  UNMOUNT_LAG=0
  if [[ "$t" != direct* ]]; then
    # Where the daemon put the bytes, before they go.
    [ -n "$DAEMON_PID" ] && [ -z "$MFS_PID" ] &&
      { "${AS[@]}" cat "$MNT/.tierfs/stats.json" >"$OUT/stats-$tag.json" 2>/dev/null || rm -f "$OUT/stats-$tag.json"; } || true
    unmount_all
  fi
  memcg_remove
  AS=() RUNP=()
  [ "$UNMOUNT_LAG" = 0 ] || put "$t" unmount_lag_s "$(awk -v i="$UNMOUNT_LAG" 'BEGIN{print i/10}')"
  rm -rf "$NVME/mfs" "$PFS/mfs"
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date -u '+%Y-%m-%d %H:%M UTC')
for run in $(seq 1 "$RUNS"); do
  for t in $TARGETS; do run_target "$t"; done
  put all loadavg "$(cut -d' ' -f1 /proc/loadavg)"
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- summary, floors, plot, doc -------------------------------------------------------------
export RES OUT NR NW PR PW RUNS REPLAY_ARGS FIO_SECS TARGETS CMDLINE LOAD0 LOAD1 START MERGERFS_OPTS REV
python3 - <<'EOF' >"$OUT/summary.md"
import csv, os, statistics, json, platform, subprocess
rows = list(csv.DictReader(open(os.environ["RES"]), delimiter="\t"))
E = os.environ
targets = E["TARGETS"].split()
def vals(t, m):
    out = []
    for r in rows:
        if r["target"] == t and r["metric"] == m:
            try: out.append(float(r["value"]))
            except ValueError: pass
    return out
def fails(t, m):
    return sorted({r["value"] for r in rows if r["target"] == t and r["metric"] == m and r["value"].startswith("FAIL")})
def stat(v, fmt="{:.2f}"):
    if not v: return None
    return (fmt.format(statistics.median(v)) + " (" + fmt.format(min(v)) + "–" + fmt.format(max(v)) + ")")
NR, NW, PR, PW = (float(E[k]) for k in ("NR", "NW", "PR", "PW"))
allr = [v for t in targets for v in vals(t, "opt_read_bytes")]
allw = [v for t in targets for v in vals(t, "opt_write_bytes")]
rb, wb = (allr[0] if allr else 0), (allw[0] if allw else 0)
def floors(rcap, wcap):
    r, w = rb / (rcap * 1e6), wb / (wcap * 1e6)
    return max(r, w), r + w
f_direct = floors(NR, NW); f_pool = floors(NR + PR, NW + PW)
d_opt = statistics.median(vals("direct", "opt_s")) if vals("direct", "opt_s") else None
lines = []
P = lines.append
P(f"Run {E['START']} at tierfs {E['REV']}; `{E['CMDLINE']}` ({E['RUNS']} runs, targets interleaved in each run). "
  f"Replay: `tierfs-replay DIR {E['REPLAY_ARGS']}` (O_DIRECT, 1 MiB, QD 8 per handle, "
  f"pipelined optimizer, every read verified). Targets: direct = the nvme tier itself; mergerfs over both; "
  f"tierfs whole-file (default passthrough = \"auto\", which leaves O_DIRECT opens to the daemon); "
  f"whole-file-pt = whole-file with passthrough = \"direct\"; stripe (1 MiB units); default* = only the two [[tier]] entries "
  f"(-cg: daemon in a memory cgroup; -user: daemon and replay as an ordinary user); -run: the replay and fio under `tierfs run`. fio: O_DIRECT 1 MiB libaio QD 16, 4 jobs x 8 files "
  f"of 32 MiB, {E['FIO_SECS']} s write then {E['FIO_SECS']} s read. mergerfs options: `{E['MERGERFS_OPTS']}`. "
  f"Machine: {os.cpu_count()} cores, kernel {platform.release()}; load average {E['LOAD0']} at start, "
  f"{E['LOAD1']} at end (other work shared the cores).")
P("")
P("| target | optimizer step I/O s, median (min–max) | time vs direct (target s / direct s, lower is faster) | of the pooled floor (overlapped) | step I/O s (fwd+bwd+opt) | set-up s | fio write MB/s | fio read MB/s | daemon CPU s/GB replay | daemon CPU s/GB fio | replay GB on the direct path |")
P("|---|---|---|---|---|---|---|---|---|---|---|")
plot = []
for t in targets:
    o = vals(t, "opt_s")
    rf = fails(t, "replay")
    opt = stat(o) or ("FAIL" if rf else "–")
    rel = f"{statistics.median(o) / d_opt:.2f}x" if (o and d_opt) else "–"
    wf = stat(vals(t, "fio_write"), "{:.0f}") or ("FAIL" if fails(t, "fio_write") else "–")
    rd = stat(vals(t, "fio_read"), "{:.0f}") or ("FAIL" if fails(t, "fio_read") else "–")
    cr = stat(vals(t, "cpu_replay"), "{:.3f}") or "–"
    cf = stat(vals(t, "cpu_fio"), "{:.3f}") or "–"
    if t == "direct": cr = cf = "n/a (no daemon)"
    pool = f"{statistics.median(o) / f_pool[0]:.3f}" if (o and f_pool[0]) else "–"
    dg = stat(vals(t, "direct_gb_replay"), "{:.2f}") or "–"
    P(f"| {t} | {opt} | {rel} | {pool} | {stat(vals(t, 'step_s')) or '–'} | {stat(vals(t, 'setup_s')) or '–'} | {wf} | {rd} | {cr} | {cf} | {dg} |")
    med = lambda v: statistics.median(v) if v else 0
    plot.append((t, med(o), min(o) if o else 0, max(o) if o else 0, med(vals(t, "fio_write")), med(vals(t, "fio_read"))))
P("")
P(f"Optimizer step floor (bytes per step, all ranks: read {rb/1e9:.3f} GB, write {wb/1e9:.3f} GB; "
  f"caps nvme {NR:.0f}/{NW:.0f}, pfs {PR:.0f}/{PW:.0f} MB/s read/write):")
P("")
P("| | reads and writes overlapped: max(R/ΣBr, W/ΣBw) | serialized: R/ΣBr + W/ΣBw |")
P("|---|---|---|")
P(f"| nvme alone (direct) | {f_direct[0]:.2f} s | {f_direct[1]:.2f} s |")
P(f"| both tiers pooled | {f_pool[0]:.2f} s | {f_pool[1]:.2f} s |")
P("")
P("The replay pipelines the optimizer step as DeepSpeed does (reads of subgroup i+1 and writes of "
  "i are in flight together, on separate read and write handles), so its floor is the overlapped one; "
  "the first subgroup's reads and the last one's writes cannot overlap, so it cannot quite reach it.")
P("")
notes = []
for t in targets:
    for m in ("replay", "fio_write", "fio_read"):
        for f in fails(t, m):
            notes.append(f"- {t}, {m.replace('_', ' ')}: {f}")
    for r in rows:
        if r["target"] == t and r["metric"] in ("placement", "status"):
            notes.append(f"- {t}, {r['metric']} (run {r['run']}): {r['value']}")
for t in targets:
    lag = vals(t, "unmount_lag_s")
    if lag:
        notes.append(f"- {t}: in {len(lag)} of {E['RUNS']} unmounts the daemon still had live threads "
                     f"(holding its tier locks) after `tierfs unmount` returned, for up to {max(lag):.1f} s; "
                     "the script waits for them before the next mount")
seen = []
for n in notes:
    if n not in seen: seen.append(n)
if seen:
    P("Failures and notes:"); P("")
    lines.extend(seen); P("")
P("![optimizer step I/O and fio](bench-tiers.png)")
print("\n".join(lines))
with open(os.path.join(E["OUT"], "plot.dat"), "w") as f:
    for i, p in enumerate(plot):
        f.write(f"{i} {p[0]} {p[1]:.3f} {p[2]:.3f} {p[3]:.3f} {p[4]:.0f} {p[5]:.0f}\n")
with open(os.path.join(E["OUT"], "floors.txt"), "w") as f:
    f.write(f"{f_direct[0]:.3f} {f_direct[1]:.3f} {f_pool[0]:.3f} {f_pool[1]:.3f}\n")
EOF
cat "$OUT/summary.md"

read -r FDO FDS FPO FPS <"$OUT/floors.txt"
XMAX=$(awk 'END{print NR-0.4}' "$OUT/plot.dat")
gnuplot <<EOF || log "gnuplot failed; no plot"
set terminal pngcairo size 1200,480 font "sans,10" noenhanced
set output "$OUT/bench-tiers.png"
set multiplot layout 1,2 title "DeepSpeed ZeRO-3 replay and fio on nvme (1200/800 MB/s) + pfs (400/300 MB/s)"
set style fill solid 0.6 border -1
set boxwidth 0.6
set grid ytics
set xrange [-0.6:$XMAX]
set yrange [0:*]
set offsets 0,0,graph 0.12,0
set key top left
set title "optimizer step I/O, s (median, min-max; lower is better)"
set ylabel "seconds"
set arrow 1 from -0.6,$FDO to $XMAX,$FDO nohead dt 2 lc rgb "#aa0000"
set arrow 2 from -0.6,$FPO to $XMAX,$FPO nohead dt 2 lc rgb "#0000aa"
set label 1 "floor, nvme alone (overlapped)" at $XMAX,$FDO right offset -0.5,0.7 tc rgb "#aa0000" front
set label 2 "floor, pooled (overlapped)" at $XMAX,$FPO right offset -0.5,-0.9 tc rgb "#0000aa" front
plot "$OUT/plot.dat" using 1:3:xtic(2) with boxes lc rgb "#4477aa" notitle, \
     "" using 1:3:4:5 with yerrorbars lc rgb "black" pt 0 notitle, \
     "" using 1:(\$3>0?\$3:1/0):(sprintf("%.2f",\$3)) with labels offset 0,1 notitle, \
     "" using 1:(\$3>0?1/0:0.05):("FAIL") with labels offset 0,1 tc rgb "red" notitle
unset arrow; unset label
set title "fio O_DIRECT 1 MiB, QD 16, 32 files: MB/s (higher is better)"
set ylabel "MB/s"
set boxwidth 0.35
set key top right
plot "$OUT/plot.dat" using (\$1-0.18):6:xtic(2) with boxes lc rgb "#cc6677" title "write", \
     "" using (\$1+0.18):7 with boxes lc rgb "#117733" title "read", \
     "" using (\$1-0.18):(\$6>0?1/0:20):("FAIL") with labels offset 0,1 tc rgb "red" notitle
unset multiplot
EOF

if [ "$DOC" = 1 ]; then
  cp "$OUT/bench-tiers.png" "$HERE/docs/bench-tiers.png" 2>/dev/null || true
  python3 - "$HERE/docs/PERFORMANCE.md" "$OUT/summary.md" "$OUT/probe.txt" <<'EOF'
import os, re, sys
doc, summ, probe = sys.argv[1], open(sys.argv[2]).read().rstrip(), open(sys.argv[3]).read().rstrip()
H = "## DeepSpeed replay and side-by-side"
B, E = "<!-- bench-tiers:begin (generated by tools/bench-tiers.sh) -->", "<!-- bench-tiers:end -->"
block = f"{B}\n{summ}\n\nProbe of the tiers at the start (`tierfs probe --fresh`; tierfs plans with these):\n\n```\n{probe}\n```\n{E}"
text = open(doc).read() if os.path.exists(doc) else "# Performance\n"
if B in text and E in text:
    pre, rest = text.split(B, 1); _, post = rest.split(E, 1)
    text = pre + block + post
elif H in text:
    i = text.index(H) + len(H)
    text = text[:i] + "\n\n" + block + "\n" + text[i:]
else:
    text = text.rstrip() + f"\n\n{H}\n\n{block}\n"
open(doc, "w").write(text)
EOF
  log "wrote docs/PERFORMANCE.md (section \"DeepSpeed replay and side-by-side\") and docs/bench-tiers.png"
fi
log "results in $OUT"
