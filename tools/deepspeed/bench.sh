#!/usr/bin/env bash
# bench.sh - real DeepSpeed ZeRO-Infinity (CPU, several ranks) on bandwidth-capped tierbed
# tiers, with nvme_path on each target in turn: the measuring instrument of issue 14.
# Needs root (tierbed, mounts, memory cgroup), the DeepSpeed venv (tools/deepspeed/
# setup-venv.sh) and a tierfs binary.
#
#   tools/deepspeed/bench.sh [NAME=CONFIG.toml ...]
#   QUICK=1 tools/deepspeed/bench.sh                 # smoke mode: 1 run, small model, 4 steps
#
# Each run trains the same model from scratch once per target, targets interleaved and
# their order rotated from run to run (so drift and warm-up hit all alike):
#   shm          a folder in /dev/shm: no I/O cost, the compute floor
#   nvme         the nvme tier's folder alone (tierbed, 1200/800 MB/s read/write, in RAM)
#   pfs          the pfs tier's folder alone (tierbed, 400/300 MB/s, on disk)
#   tierfs-root  tierfs over both tiers, config with only the two [[tier]] entries; daemon
#                and training as root
#   tierfs-user  the same config; daemon (mounted through fusermount3) and training run as
#                the ordinary user BENCH_USER
#   before-root, before-user  tierfs-root and tierfs-user run with the binary in BEFORE (an
#                older build), interleaved with the others: a before/after side by side;
#                before-root-run, before-user-run the same under that build's `tierfs run`
#                (its libtierfs_preload.so, beside BEFORE)
#   tierfs-root-run, tierfs-user-run  tierfs-root and tierfs-user with the training under
#                `tierfs run` (the direct path: the preload library beside the tierfs binary
#                on LD_PRELOAD, so O_DIRECT opens and swap files get the tier files' own
#                descriptors where the daemon grants them)
#   NAME=FILE    extra tierfs targets (arguments, or EXTRA_TARGETS="NAME=FILE ..."): FILE is
#                a tierfs config; without [[tier]] entries the bench's two tiers are put in
#                front of it (so `[cache]` / `[mount]` / `[placement]` lines alone are
#                enough); a NAME ending in -user runs as BENCH_USER, like tierfs-user; a NAME
#                ending in -run (-user-run for the user) trains under `tierfs run`.
# Every tierfs daemon runs in a memory cgroup of its own (v1, MEMCG_LIMIT) and is checked to
# still be under the tierbed caps (`tierbed.sh check`). DeepSpeed's aio block, pipeline
# flags and buffer counts are what `tierfs ds-config MOUNT --ranks RANKS` prints for the
# tierfs-root mount; every target uses the same DeepSpeed config, so losses must be
# bit-identical everywhere (compared against the nvme target's).
#
# Reported per target (README.md in this folder): median step time of steps >= 3 (median,
# min and max of the runs' medians), forward/backward/optimizer parts, time relative to the
# nvme tier alone, I/O stall (step minus the shm floor), daemon CPU s per step, GB per tier
# per step (tier block-device counters, which see passthrough I/O too), memory hits from
# tierfs's cache (prefetched vs re-read), the daemon's memory peak, identical losses.
# Output in OUT: summary.md (the table), dsbench.png, results.json (every raw number),
# runs/<run>-<target>/ (rank logs and JSON, daemon log, stats.json, memory cgroup figures).
#
# Environment (defaults in brackets; QUICK=1 changes those marked q):
#   RUNS [3, q:1]  STEPS [8, q:4]  RANKS [2]  WARMUP_STEPS [3, q:2]
#   MODEL_ARGS [--d-model 768 --layers 6 --heads 12 --batch 1 --seq 64; q: --d-model 384
#              --layers 4 --heads 6]  extra train_bench.py arguments (e.g. --threads, --sub-group-size)
#   TARGETS ["shm nvme pfs tierfs-root tierfs-user"]   EXTRA_TARGETS [""]
#   OUT [/tmp/dsbench-DATE]   TIERFS [target/release/tierfs]   BENCH_USER [tierfs-test]
#   BEFORE [""]: the binary the before-* targets run
#   MEMCG_LIMIT [swap bytes per step / 4 + MEMCG_BASE]; bytes, or K/M/G (10^3), Ki/Mi/Gi (2^10)
#   MEMCG_BASE [256Mi]: the daemon's own memory besides staging (threads' buffers, tables)
#   TIERFS_TRANSPORT, DAEMON_ENV ["VAR=VALUE ..."]: passed to every tierfs daemon
#   TIERBED [../shared/tierbed/tierbed.sh]  TIERBED_HOME [/var/lib/tierbed-dsbench]
#   NVME_TIER [dsb-nvme] PFS_TIER [dsb-pfs] NVME_GB [4] PFS_GB [6]  MNT [/mnt/dsb-tierfs]
#   TIERFS_DS_VENV, TORCH_EXTENSIONS_DIR (as for smoke.sh)  RUN_TIMEOUT [1800 s per training]
#   PLOT [1]: make the PNG (installs matplotlib into PLOT_VENV [~/.cache/tierfs/plot-venv] once)
#   SELFTEST_CORRUPT [""]: TARGET[:STEP] - harness self-test: in that target's trainings rank 0
#              zeroes 4 KiB of a master-weight swap file after STEP (default 1), so its losses
#              must be reported as differing (and the exit status is 1)
# Exit status: 0 when every run of every target finished and all losses agree, 1 otherwise,
# 2 on usage errors. Everything it sets up (tiers, mounts, daemons, cgroups, /dev/fuse mode,
# temporary folders) is taken down on exit, Ctrl-C included.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CMDLINE="tools/deepspeed/bench.sh $*"

die() { echo "bench.sh: $*" >&2; exit 2; }
log() { echo "bench.sh $(date +%H:%M:%S): $*" >&2; }
[ "${1:-}" = -h ] || [ "${1:-}" = --help ] && { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  RUNS=${RUNS:-1} STEPS=${STEPS:-4} WARMUP_STEPS=${WARMUP_STEPS:-2}
  MODEL_ARGS=${MODEL_ARGS:---d-model 384 --layers 4 --heads 6 --batch 1 --seq 64}
else
  RUNS=${RUNS:-3} STEPS=${STEPS:-8} WARMUP_STEPS=${WARMUP_STEPS:-3}
  MODEL_ARGS=${MODEL_ARGS:---d-model 768 --layers 6 --heads 12 --batch 1 --seq 64}
fi
RANKS=${RANKS:-2}
TARGETS=${TARGETS:-shm nvme pfs tierfs-root tierfs-user}
OUT=${OUT:-/tmp/dsbench-$(date +%Y%m%d-%H%M%S)}
TIERFS_SRC=${TIERFS:-$ROOT/target/release/tierfs}
BENCH_USER=${BENCH_USER:-tierfs-test}
MEMCG_BASE=${MEMCG_BASE:-256Mi}
TIERBED_HOME=${TIERBED_HOME:-/var/lib/tierbed-dsbench}
export TIERBED_HOME
NVME_TIER=${NVME_TIER:-dsb-nvme} PFS_TIER=${PFS_TIER:-dsb-pfs}
NVME_GB=${NVME_GB:-4} PFS_GB=${PFS_GB:-6}
NVME=/mnt/$NVME_TIER PFS=/mnt/$PFS_TIER
MNT=${MNT:-/mnt/dsb-tierfs}
RUN_TIMEOUT=${RUN_TIMEOUT:-1800}
VENV=${TIERFS_DS_VENV:-$HOME/.cache/tierfs/ds-venv}
EXT=${TORCH_EXTENSIONS_DIR:-$HOME/.cache/tierfs/torch_extensions}
PLOT=${PLOT:-1}
PLOT_VENV=${PLOT_VENV:-$HOME/.cache/tierfs/plot-venv}
MATPLOTLIB=matplotlib==3.10.8
MEMCG_ROOT=/sys/fs/cgroup/memory
MEMCG=$MEMCG_ROOT/tierfs-dsbench-$$
# caps, MB/s (10^6 B/s): the issue's tiers
NR=1200 NW=800 PR=400 PW=300

# ---- arguments and checks ---------------------------------------------------------------------
EXTRA=()  # NAME=FILE
for a in "$@" ${EXTRA_TARGETS:-}; do
  [[ $a == *=* ]] || die "unknown argument '$a' (extra targets are NAME=CONFIG.toml; see --help)"
  name=${a%%=*} file=${a#*=}
  [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "bad target name '$name' (letters, digits, _ . -)"
  [ -f "$file" ] || die "target $name: no config file '$file'"
  EXTRA+=("$name=$(realpath "$file")")
  TARGETS="$TARGETS $name"
done
declare -A SEEN=()
for t in $TARGETS; do
  [ -z "${SEEN[$t]:-}" ] || die "target '$t' given twice"
  SEEN[$t]=1
  case $t in shm|nvme|pfs|tierfs-root|tierfs-user|tierfs-root-run|tierfs-user-run) ;;
    before-root|before-user|before-root-run|before-user-run) [ -x "${BEFORE:-}" ] || die "target $t needs BEFORE=BINARY (an executable tierfs)" ;;
    *)
    printf '%s\n' "${EXTRA[@]}" | grep -q "^$t=" || die "unknown target '$t' (built in: shm nvme pfs tierfs-root tierfs-user tierfs-root-run tierfs-user-run; others need NAME=CONFIG.toml)" ;;
  esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
[[ $STEPS =~ ^[0-9]+$ ]] && [ "$STEPS" -ge 3 ] || die "STEPS must be >= 3 (steps 1-2 are warm-up; the medians use steps >= 3)"
[[ $WARMUP_STEPS =~ ^[0-9]+$ ]] && [ "$WARMUP_STEPS" -ge 2 ] || die "WARMUP_STEPS must be >= 2"
[[ $RANKS =~ ^[1-9][0-9]*$ ]] || die "RANKS must be a positive integer"
[ "$(id -u)" = 0 ] || die "needs root (tierbed, mounts, memory cgroups)"
to_bytes() { numfmt --from=auto "$1" 2>/dev/null || die "$2: '$1' is not a size (bytes, or K/M/G, Ki/Mi/Gi)"; }
MEMCG_BASE_B=$(to_bytes "$MEMCG_BASE" MEMCG_BASE)
[ -z "${MEMCG_LIMIT:-}" ] || MEMCG_LIMIT_B=$(to_bytes "$MEMCG_LIMIT" MEMCG_LIMIT)
if [ -z "${TIERBED:-}" ]; then
  for c in "$ROOT/../shared/tierbed/tierbed.sh" "$ROOT/../../shared/tierbed/tierbed.sh"; do
    [ -f "$c" ] && { TIERBED=$(realpath "$c"); break; }
  done
fi
[ -f "${TIERBED:-}" ] || die "tierbed.sh not found (set TIERBED=/path/to/tierbed.sh)"
[ -x "$TIERFS_SRC" ] || die "no tierfs binary at $TIERFS_SRC (cargo build --release, or set TIERFS)"
[ -d "$MEMCG_ROOT" ] && [ -w "$MEMCG_ROOT" ] || die "no writable cgroup-v1 memory controller at $MEMCG_ROOT"
USER_TARGETS=0
is_user() { [[ ${1%-run} == *-user ]]; }   # TARGET: daemon and training as BENCH_USER?
is_run() { [[ $1 == *-run ]]; }              # TARGET: training under `tierfs run`?
RUN_TARGETS=0
for t in $TARGETS; do is_user "$t" && USER_TARGETS=1; is_run "$t" && RUN_TARGETS=1; done
if [ "$USER_TARGETS" = 1 ]; then
  id "$BENCH_USER" >/dev/null 2>&1 || die "user targets need the user '$BENCH_USER' (set BENCH_USER, or leave out *-user targets with TARGETS)"
  command -v fusermount3 >/dev/null || die "user targets need fusermount3 (apt-get install fuse3)"
  command -v unshare >/dev/null && command -v runuser >/dev/null || die "user targets need unshare and runuser (util-linux)"
fi
for m in "$NVME" "$PFS" "$MNT"; do
  ! grep -q " $m " /proc/mounts || die "$m is already a mount point (another bench running? set NVME_TIER/PFS_TIER/MNT)"
done

"$HERE/setup-venv.sh"
PY=$VENV/bin/python
PYHOME=$(dirname "$(dirname "$(realpath "$PY")")")
export TORCH_EXTENSIONS_DIR=$EXT

# ---- state and cleanup ------------------------------------------------------------------------
WORK=$(mktemp -d /tmp/dsbench-work.XXXXXX)
chmod 755 "$WORK"
SHM=/dev/shm/dsbench-$$
FUSE_MODE=""
TRAIN_PID=""       # the running training's launcher (own session: kill -- -PID)
DAEMON_PID=""      # the mounted tierfs daemon
MOUNT_OWNER=""     # root or BENCH_USER
TIERS_UP=0

as_owner() { if [ "$MOUNT_OWNER" = root ] || [ -z "$MOUNT_OWNER" ]; then "$@"; else runuser -u "$BENCH_USER" -- "$@"; fi; }
live_threads() {  # PID -> live threads (a zombie leader with live threads still holds its files)
  local n=0 t
  for t in /proc/"$1"/task/*; do
    [ -r "$t/stat" ] || continue
    [ "$(cut -d')' -f2- "$t/stat" 2>/dev/null | awk '{print $1}')" = Z ] || n=$((n + 1))
  done
  echo $n
}
unmount_tierfs() {
  if grep -q " $MNT fuse" /proc/mounts; then
    as_owner "$TIERFS" unmount "$MNT" >/dev/null 2>&1 ||
      { [ "$MOUNT_OWNER" = root ] || runuser -u "$BENCH_USER" -- fusermount3 -u -z "$MNT"; } 2>/dev/null ||
      umount -l "$MNT" || true
  fi
  if [ -n "$DAEMON_PID" ]; then
    local i=0
    while [ "$(live_threads "$DAEMON_PID")" != 0 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    if [ $i -ge 300 ]; then
      log "daemon $DAEMON_PID still alive 30 s after unmount: killing it"
      kill -9 "$DAEMON_PID" 2>/dev/null || true
      sleep 1
    fi
    DAEMON_PID=""
  fi
  MOUNT_OWNER=""
}
memcg_remove() {
  [ -d "$MEMCG" ] || return 0
  local p
  for p in $(cat "$MEMCG/cgroup.procs" 2>/dev/null); do
    log "memory cgroup still holds pid $p ($(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-80)); killing it"
    kill -9 "$p" 2>/dev/null || true
  done
  local i=0
  while ! rmdir "$MEMCG" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  [ ! -d "$MEMCG" ] || log "could not remove $MEMCG"
}
stop_training() {
  if [ -n "$TRAIN_PID" ]; then
    kill -TERM -- "-$TRAIN_PID" 2>/dev/null || true
    local i=0
    while kill -0 "$TRAIN_PID" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL -- "-$TRAIN_PID" 2>/dev/null || true
    wait "$TRAIN_PID" 2>/dev/null || true
    TRAIN_PID=""
  fi
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  stop_training
  unmount_tierfs
  memcg_remove
  if [ "$TIERS_UP" = 1 ]; then
    bash "$TIERBED" down "$NVME_TIER" >/dev/null 2>&1 || log "tierbed down $NVME_TIER failed"
    bash "$TIERBED" down "$PFS_TIER" --purge >/dev/null 2>&1 || log "tierbed down $PFS_TIER failed"
  fi
  [ -z "$FUSE_MODE" ] || chmod "$FUSE_MODE" /dev/fuse
  rm -rf "$SHM" "$WORK"
  rmdir "$MNT" 2>/dev/null
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

mkdir -p "$OUT/runs" "$WORK/bin" "$WORK/runs" "$SHM"
[ -z "$(ls -A "$OUT/runs")" ] || die "OUT=$OUT already holds runs; give a new folder"
# Private copies, readable by the user: a rebuild of target/ during the runs must not swap the
# binary, and the checkout may not be readable by BENCH_USER.
cp "$TIERFS_SRC" "$WORK/bin/tierfs"
if [ "$RUN_TARGETS" = 1 ]; then
  # `tierfs run` finds its library beside the binary.
  cp "$(dirname "$TIERFS_SRC")/libtierfs_preload.so" "$WORK/bin/" 2>/dev/null ||
    die "the -run targets need libtierfs_preload.so beside $TIERFS_SRC"
fi
if [ -n "${BEFORE:-}" ]; then
  # Its own folder: `tierfs run` takes the library beside the binary it runs.
  mkdir -p "$WORK/bin/before"
  cp "$BEFORE" "$WORK/bin/before/tierfs"
  if [ "$RUN_TARGETS" = 1 ]; then
    cp "$(dirname "$BEFORE")/libtierfs_preload.so" "$WORK/bin/before/" 2>/dev/null ||
      [[ " $TARGETS " != *" before-"*-run" "* ]] || die "the before-*-run targets need libtierfs_preload.so beside $BEFORE"
  fi
fi
cp "$HERE/train_bench.py" "$WORK/bin/"
chmod -R a+rX "$WORK/bin"
TIERFS=$WORK/bin/tierfs
TIERFS_NEW=$TIERFS
TRAIN=$WORK/bin/train_bench.py
REV=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ "$TIERFS_SRC" != "$ROOT/target/release/tierfs" ] || (cd "$ROOT" && git diff --quiet HEAD -- src Cargo.toml 2>/dev/null) ||
  REV="$REV+uncommitted src changes"
# A binary from elsewhere: its own version line (the commit it was built from), not the checkout's.
[ "$TIERFS_SRC" = "$ROOT/target/release/tierfs" ] || REV="$("$TIERFS" --version 2>/dev/null | head -1) (checkout $REV)"

G=$OUT/bench.tsv  # global facts for the report, "key<TAB>value"
put() { printf '%s\t%s\n' "$1" "$2" >>"$G"; }
: >"$G"
put command "$CMDLINE"; put quick "$QUICK"; put runs "$RUNS"; put steps "$STEPS"; put ranks "$RANKS"
put model_args "$MODEL_ARGS"; put targets "$TARGETS"; put tierfs "$TIERFS_SRC"; put before "${BEFORE:-}"; put rev "$REV"
put start "$(date -u '+%Y-%m-%d %H:%M UTC')"; put load_start "$(cut -d' ' -f1-3 /proc/loadavg)"
put kernel "$(uname -r)"; put cpus "$(nproc)"; put caps "nvme $NR/$NW MB/s (RAM), pfs $PR/$PW MB/s (disk)"
put tierfs_transport "${TIERFS_TRANSPORT:-}"; put daemon_env "${DAEMON_ENV:-}"
for e in "${EXTRA[@]}"; do put "extra_target" "$e"; done
put bench_blkio "$(bash "$TIERBED" check $$ 2>&1 || true)"

if [ "$USER_TARGETS" = 1 ]; then
  # DeepSpeed mlock()s its aio buffers even with pin_memory false (see as-user.sh --memlock).
  if (ulimit -l unlimited) 2>/dev/null; then
    put user_memlock "ulimit -l unlimited"
  else
    put user_memlock "RLIMIT_MEMLOCK $(ulimit -Hl) KiB cannot be raised here (no CAP_SYS_RESOURCE): the user's training runs with ambient CAP_IPC_LOCK instead"
  fi
  FUSE_MODE=$(stat -c %a /dev/fuse)
  if [ "$FUSE_MODE" = 666 ]; then FUSE_MODE=""; else chmod 0666 /dev/fuse; log "/dev/fuse mode $FUSE_MODE -> 666 for this run"; fi
fi

# ---- tiers ------------------------------------------------------------------------------------
log "tierbed: $NVME_TIER ${NVME_GB} GiB $NR/$NW MB/s (RAM) at $NVME, $PFS_TIER ${PFS_GB} GiB $PR/$PW MB/s (disk) at $PFS"
TIERS_UP=1
bash "$TIERBED" up "$NVME_TIER" "$NVME_GB" $NR $NW "$NVME" --ram >/dev/null
bash "$TIERBED" up "$PFS_TIER" "$PFS_GB" $PR $PW "$PFS" >/dev/null
loop_of() { (. "$TIERBED_HOME/state/$1.conf" && basename "$LOOP"); }
NVME_DEV=$(loop_of "$NVME_TIER") PFS_DEV=$(loop_of "$PFS_TIER")
put devices "nvme=$NVME_DEV pfs=$PFS_DEV"
mkdir -p "$NVME/tierfs" "$PFS/tierfs" "$NVME/plain" "$PFS/plain" "$MNT"

BASE_CONF=$WORK/tierfs.toml
cat >"$BASE_CONF" <<EOT
[[tier]]
name = "nvme"
path = "$NVME/tierfs"

[[tier]]
name = "pfs"
path = "$PFS/tierfs"
EOT
config_for() {  # TARGET -> config file for it
  local t=$1 e f
  case $t in tierfs-root|tierfs-user|before-root|before-user|tierfs-root-run|tierfs-user-run|before-root-run|before-user-run) echo "$BASE_CONF"; return ;; esac
  for e in "${EXTRA[@]}"; do [ "${e%%=*}" = "$t" ] && f=${e#*=}; done
  if grep -qE '^[[:space:]]*\[\[tier\]\]' "$f"; then echo "$f"; return; fi
  { cat "$BASE_CONF"; echo; cat "$f"; } >"$WORK/$t.toml"
  echo "$WORK/$t.toml"
}
# Every config must be valid before hours of runs depend on it.
for t in $TARGETS; do
  case $t in shm|nvme|pfs) continue ;; esac
  c=$(config_for "$t")
  "$TIERFS" check-config "$c" >"$WORK/check-$t.txt" 2>&1 || { cat "$WORK/check-$t.txt" >&2; die "target $t: config $c is not valid"; }
done

# ---- the runners ------------------------------------------------------------------------------
# The venv's bin last: torch runs `ninja` from PATH for the JIT ops, and the venv's ninja
# (1.13) and Debian's (1.11) write incompatible .ninja_log files, so alternating between them
# rebuilds every op from scratch; smoke.sh (and CI) use the system one.
BASE_ENV=(PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$VENV/bin" LANG=C.UTF-8
          DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR="$EXT" PYTHONDONTWRITEBYTECODE=1)
DAEMON_VARS=()
[ -z "${TIERFS_TRANSPORT:-}" ] || DAEMON_VARS+=("TIERFS_TRANSPORT=$TIERFS_TRANSPORT")
for v in ${DAEMON_ENV:-}; do [[ $v == *=* ]] || die "DAEMON_ENV: '$v' is not VAR=VALUE"; DAEMON_VARS+=("$v"); done
UHOME=$(getent passwd "$BENCH_USER" | cut -d: -f6 || true)
runner() {  # root|user -> sets RUN (the command prefix for training)
  if [ "$1" = root ]; then
    RUN=(env -i "${BASE_ENV[@]}" HOME="$HOME" USER=root)
  else
    RUN=("$HERE/as-user.sh" "$BENCH_USER" --memlock --expose "$VENV" --expose "$PYHOME"
         --writable "$EXT=$WORK/ext-user" -- env -i "${BASE_ENV[@]}" HOME="$UHOME" USER="$BENCH_USER")
  fi
}

# train WHO NVME_DIR RESULT_DIR TRAIN_ARGS... -> training exit status; output in RESULT_DIR/train.out
# TRAIN_PRE: what goes before the launcher (`tierfs run --` for -run targets; empty otherwise)
TRAIN_PRE=()
train() {
  local who=$1 dir=$2 res=$3; shift 3
  runner "$who"
  local w=$WORK/runs/$(basename "$res")
  mkdir -p "$w"
  [ "$who" = root ] || chown "$BENCH_USER" "$w"
  local rc=0
  # Its own session, so a timeout or Ctrl-C can take down every rank by the group id.
  TMPDIR=$WORK setsid "${RUN[@]}" "${TRAIN_PRE[@]}" python "$TRAIN" --nvme-path "$dir" --out "$w" --ranks "$RANKS" \
    --ds-config "$WORK/ds-config.json" --timeout "$RUN_TIMEOUT" $MODEL_ARGS "$@" >"$res/train.out" 2>&1 &
  TRAIN_PID=$!
  wait "$TRAIN_PID" || rc=$?
  TRAIN_PID=""
  cp "$w"/* "$res/" 2>/dev/null || true
  rm -rf "$w"
  return $rc
}

# ---- memory cgroup for a daemon ---------------------------------------------------------------
memcg_create() {
  memcg_remove
  mkdir "$MEMCG"
  echo "$MEMCG_LIMIT_B" >"$MEMCG/memory.limit_in_bytes"
  # The limit must hold as written (the kernel rounds to pages).
  local got; got=$(cat "$MEMCG/memory.limit_in_bytes")
  [ $((got / 4096)) = $((MEMCG_LIMIT_B / 4096)) ] || log "memory cgroup limit reads back as $got"
}
memcg_report() {  # RESULT_DIR
  {
    echo "limit_in_bytes $(cat "$MEMCG/memory.limit_in_bytes")"
    echo "max_usage_in_bytes $(cat "$MEMCG/memory.max_usage_in_bytes")"
    echo "usage_in_bytes $(cat "$MEMCG/memory.usage_in_bytes")"
    echo "failcnt $(cat "$MEMCG/memory.failcnt")"
    sed 's/^/oom_control /' "$MEMCG/memory.oom_control"
    grep -E '^(total_)?(rss|cache|mapped_file|shmem) ' "$MEMCG/memory.stat" | sed 's/^/stat /'
  } >"$1/memcg.txt" 2>/dev/null || true
}

# mount_tierfs WHO CONFIG RESULT_DIR -> mounts at $MNT with the daemon inside $MEMCG
mount_tierfs() {
  local who=$1 conf=$2 res=$3
  memcg_create
  : >"$NVME/tierfs/.tierfs-meta/daemon.log" 2>/dev/null || true
  if [ "$who" = root ]; then
    MOUNT_OWNER=root
    bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$MEMCG" \
      env "${DAEMON_VARS[@]}" "$TIERFS" mount --config "$conf" "$MNT" >"$res/mount.log" 2>&1 || return 1
  else
    MOUNT_OWNER=$BENCH_USER
    # The user's daemon needs the tier folders (probe cache included), the mountpoint and the config.
    chown -R "$BENCH_USER" "$NVME/tierfs" "$PFS/tierfs" "$MNT"
    local c=$WORK/config-$BENCH_USER.toml
    cp "$conf" "$c"; chmod 644 "$c"
    bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$MEMCG" \
      runuser -u "$BENCH_USER" -- env HOME="$UHOME" "${DAEMON_VARS[@]}" "$TIERFS" mount --config "$c" "$MNT" \
      >"$res/mount.log" 2>&1 || return 1
  fi
  as_owner cat "$MNT/.tierfs/stats.json" >"$res/stats-start.json"
  DAEMON_PID=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$res/stats-start.json")
  {
    echo "daemon_pid	$DAEMON_PID"
    echo "daemon_user	$(stat -c %U "/proc/$DAEMON_PID")"
    echo "daemon_memcg	$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' "/proc/$DAEMON_PID/cgroup")"
    echo "daemon_blkio	$(bash "$TIERBED" check "$DAEMON_PID" 2>&1 || true)"
  } >>"$res/meta.tsv"
}

# ---- one target, one run ----------------------------------------------------------------------
FAILED=0
run_target() {  # RUN POSITION TARGET
  local run=$1 pos=$2 t=$3 who=root kind dir conf=""
  is_user "$t" && who=user
  case $t in shm|nvme|pfs) kind=$t ;; *) kind=tierfs ;; esac
  local res=$OUT/runs/$run-$t
  mkdir -p "$res"
  local m=$res/meta.tsv
  printf 'target\t%s\nrun\t%s\nposition\t%s\nkind\t%s\nwho\t%s\nstart\t%s\nload_before\t%s\n' \
    "$t" "$run" "$pos" "$kind" "$who" "$(date +%s)" "$(cut -d' ' -f1 /proc/loadavg)" >"$m"
  local args=(--block-dev "nvme=$NVME_DEV" --block-dev "pfs=$PFS_DEV")
  if [ -n "${SELFTEST_CORRUPT:-}" ] && [ "${SELFTEST_CORRUPT%%:*}" = "$t" ]; then
    args+=(--self-test-corrupt-after "$(if [[ $SELFTEST_CORRUPT == *:* ]]; then echo "${SELFTEST_CORRUPT#*:}"; else echo 1; fi)")
  fi
  case $kind in
    shm) dir=$SHM/ds ;;
    nvme) dir=$NVME/plain/ds ;;
    pfs) dir=$PFS/plain/ds ;;
    tierfs)
      conf=$(config_for "$t")
      cp "$conf" "$res/config.toml"
      TIERFS=$TIERFS_NEW
      [[ $t == before-* ]] && TIERFS=$WORK/bin/before/tierfs
      if ! mount_tierfs "$who" "$conf" "$res"; then
        log "run $run $t: mount FAILED ($(tail -1 "$res/mount.log"))"
        printf 'status\tmount failed: %s\n' "$(tail -1 "$res/mount.log")" >>"$m"
        unmount_tierfs; memcg_remove; FAILED=1; return
      fi
      dir=$MNT/ds
      args+=(--daemon-pid "$DAEMON_PID" --stats-json "$MNT/.tierfs/stats.json") ;;
  esac
  log "run $run/$RUNS, target $t ($pos): training ($(if [ "$who" = user ]; then echo "as $BENCH_USER"; else echo root; fi)) in $dir"
  local rc=0
  TRAIN_PRE=()
  if is_run "$t"; then TRAIN_PRE=("$TIERFS" run --); printf 'direct_run\t1\n' >>"$m"; fi
  train "$who" "$dir" "$res" --steps "$STEPS" "${args[@]}" || rc=$?
  TRAIN_PRE=()
  printf 'end\t%s\nload_after\t%s\nrc\t%s\n' "$(date +%s)" "$(cut -d' ' -f1 /proc/loadavg)" "$rc" >>"$m"
  if [ "$rc" = 0 ]; then
    printf 'status\tok\n' >>"$m"
    log "run $run $t: $(grep -m1 'median step' "$res/train.out" | sed 's/^\[train_bench\] //')"
  else
    printf 'status\ttraining failed (exit %s): %s\n' "$rc" "$(grep -m1 -E 'FAILED|Error|error' "$res/train.out" | cut -c1-200)" >>"$m"
    log "run $run $t: training FAILED (exit $rc); see $res/train.out"
    FAILED=1
  fi
  if [ "$kind" = tierfs ]; then
    as_owner cat "$MNT/.tierfs/stats.json" >"$res/stats-end.json" 2>/dev/null || rm -f "$res/stats-end.json"
    as_owner cat "$MNT/.tierfs/cache" >"$res/cache-end.json" 2>/dev/null || rm -f "$res/cache-end.json"
    memcg_report "$res"
    if grep -qE '^oom_control oom_kill [1-9]' "$res/memcg.txt"; then
      log "run $run $t: the daemon was OOM-killed by its memory cgroup (limit $MEMCG_LIMIT_B bytes)"
      printf 'daemon_oom_killed	1
' >>"$m"
      FAILED=1
    fi
    as_owner rm -rf "$dir" 2>/dev/null || true
    unmount_tierfs
    memcg_remove
    cp "$NVME/tierfs/.tierfs-meta/daemon.log" "$res/daemon.log" 2>/dev/null || true
    # A dead daemon leaves its swap folder in the tiers: clear it for the next target.
    rm -rf "$NVME/tierfs/data/ds" "$PFS/tierfs/data/ds" 2>/dev/null || true
  else
    rm -rf "$dir" || true
  fi
}

# ---- set-up: probe, ds-config, warm-up, the memory limit --------------------------------------
# Every mount of the set uses the tiers' cached probe, so one misread (the RAM-backed tier's
# writes need CPU: another busy process at that moment read it at a third of its cap in
# session 14, and the layout turned over) would change the layout of every run in the set.
# Probe until the figures agree with tierbed's caps, or stop: such a set would not measure
# what it says. "Agree": each figure within [0.70, 1.10] of its cap (this shared host's
# writes run at 0.8 of the caps on some days, for every tier alike) and, what sets the
# layout, each direction's nvme:pfs ratio within 15 % of the caps' ratio.
probe_tiers() {  # -> 0 when the figures agree with the caps
  mkdir -p "$NVME/tierfs" "$PFS/tierfs"
  "$TIERFS" probe --config "$BASE_CONF" --fresh --json >"$OUT/setup/probe.json" 2>>"$OUT/setup/probe.log" || return 2
  "$PY" - "$OUT/setup/probe.json" "$NR" "$NW" "$PR" "$PW" <<'PYEOF'
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1]))}
caps = {"nvme": (float(sys.argv[2]), float(sys.argv[3])), "pfs": (float(sys.argv[4]), float(sys.argv[5]))}
got = {n: (rows[n]["read_bps"] / 1e6, rows[n]["write_bps"] / 1e6) for n in caps}
bad = []
for name, cap in caps.items():
    for i, what in enumerate(("read", "write")):
        if not 0.70 * cap[i] <= got[name][i] <= 1.10 * cap[i]:
            bad.append(f"{name} {what} {got[name][i]:.0f} MB/s (cap {cap[i]:.0f})")
for i, what in enumerate(("read", "write")):
    ratio = (got["nvme"][i] / got["pfs"][i]) / (caps["nvme"][i] / caps["pfs"][i])
    if not 0.85 <= ratio <= 1.15:
        bad.append(f"nvme:pfs {what} ratio {ratio:.2f} of the caps'")
print("; ".join(bad) if bad else ", ".join(f"{n} {got[n][0]:.0f}/{got[n][1]:.0f}" for n in caps))
sys.exit(1 if bad else 0)
PYEOF
}
mkdir -p "$OUT/setup"
for attempt in 1 2 3 4; do
  if verdict=$(probe_tiers); then log "probe agrees with the caps: $verdict MB/s read/write"; break; fi
  log "probe $attempt misread the tiers (${verdict:-probe failed}); probing again in 10 s"
  [ "$attempt" = 4 ] && die "the probe disagreed with tierbed's caps 4 times (see $OUT/setup/probe.log): is something else using the CPU?"
  sleep 10
done

log "mounting tierfs-root once for \`tierfs ds-config $MNT --ranks $RANKS\`"
MOUNT_OWNER=root
"$TIERFS" mount --config "$BASE_CONF" "$MNT" >"$OUT/setup/mount.log" 2>&1 ||
  { cat "$OUT/setup/mount.log" >&2; die "tierfs mount of the base config failed"; }
DAEMON_PID=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$MNT/.tierfs/stats.json")
"$TIERFS" ds-config "$MNT" --ranks "$RANKS" >"$WORK/ds-config.json" 2>"$OUT/setup/ds-config.notes.txt" ||
  { cat "$OUT/setup/ds-config.notes.txt" >&2; die "tierfs ds-config failed"; }
cp "$WORK/ds-config.json" "$OUT/setup/ds-config.json"
"$TIERFS" stat "$MNT" >"$OUT/setup/tiers.txt" 2>&1 || true
unmount_tierfs
chmod 644 "$WORK/ds-config.json"
log "ds-config: aio $("$PY" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["aio"]))' "$WORK/ds-config.json")"

log "warm-up on $SHM ($WARMUP_STEPS steps, root): JIT-builds DeepSpeed's ops the first time, measures the swap bytes per step"
if ! train root "$SHM/warmup" "$OUT/setup" --steps "$WARMUP_STEPS"; then
  tail -20 "$OUT/setup/train.out" >&2; die "the warm-up training failed (see $OUT/setup/train.out)"
fi
rm -rf "$SHM/warmup"
read -r SWAP_STEP SWAP_SET NPARAMS < <("$PY" - "$OUT/setup" <<'EOF'
import glob, json, sys
ranks = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/rank*.json"))]
n = len(ranks[0]["step_s"])
# steps >= 2: step 1 creates the gradient files
per = sum((r["swap"][n][0] - r["swap"][1][0]) + (r["swap"][n][1] - r["swap"][1][1]) for r in ranks) / (n - 1)
print(int(per), ranks[0]["swap_files"]["bytes"], ranks[0]["n_params"])
EOF
)
put swap_bytes_per_step_warmup "$SWAP_STEP"; put swap_set_bytes "$SWAP_SET"; put n_params "$NPARAMS"
log "model: $NPARAMS parameters; swap traffic $(numfmt --to=si "$SWAP_STEP")B per step (DeepSpeed's aio reads+writes, all ranks); swap files $(numfmt --to=si "$SWAP_SET")B"
[ "$SWAP_STEP" -ge 1000000000 ] || log "WARNING: less than 1 GB of swap traffic per step (QUICK mode, or MODEL_ARGS too small)"
for pair in "$NVME_GB:$NVME_TIER" "$PFS_GB:$PFS_TIER"; do
  [ $((SWAP_SET * 2)) -le $(( ${pair%%:*} * 1073741824 )) ] ||
    log "WARNING: tier ${pair#*:} (${pair%%:*} GiB) holds less than twice the swap set; raise NVME_GB/PFS_GB"
done
if [ -z "${MEMCG_LIMIT_B:-}" ]; then
  MEMCG_LIMIT_B=$(( SWAP_STEP / 4 + MEMCG_BASE_B ))
  MEMCG_HOW="swap bytes per step / 4 + MEMCG_BASE = $(numfmt --to=iec-i "$((SWAP_STEP / 4))")B + $(numfmt --to=iec-i "$MEMCG_BASE_B")B"
else
  MEMCG_HOW="MEMCG_LIMIT=$MEMCG_LIMIT"
fi
MEMCG_LIMIT_B=$(( (MEMCG_LIMIT_B + 4095) / 4096 * 4096 ))
put memcg_limit "$MEMCG_LIMIT_B"; put memcg_how "$MEMCG_HOW"
log "daemon memory cgroup limit: $MEMCG_LIMIT_B bytes ($(numfmt --to=iec-i "$MEMCG_LIMIT_B")B; $MEMCG_HOW) at $MEMCG"

if [ "$USER_TARGETS" = 1 ]; then
  # The user's copy of the JIT-built ops (see as-user.sh), and a short check that the user's
  # environment imports and trains before the timed runs depend on it.
  cp -a "$EXT" "$WORK/ext-user"; chown -R "$BENCH_USER" "$WORK/ext-user"
  mkdir -p "$SHM/user" "$OUT/setup/user"; chown "$BENCH_USER" "$SHM/user"
  log "warm-up as $BENCH_USER (1 step, small model)"
  MODEL_ARGS_SAVED=$MODEL_ARGS; MODEL_ARGS="--d-model 384 --layers 4 --heads 6 --batch 1 --seq 64"
  if ! train user "$SHM/user/ds" "$OUT/setup/user" --steps 1; then
    tail -20 "$OUT/setup/user/train.out" >&2; die "the warm-up as $BENCH_USER failed (see $OUT/setup/user/train.out)"
  fi
  MODEL_ARGS=$MODEL_ARGS_SAVED
  rm -rf "$SHM/user"
  ! grep -q "Building extension" "$OUT/setup/user/rank0.log" || log "WARNING: the user's run rebuilt DeepSpeed's ops"
fi

# ---- the runs ---------------------------------------------------------------------------------
read -ra TLIST <<<"$TARGETS"
NT=${#TLIST[@]}
for run in $(seq 1 "$RUNS"); do
  for i in $(seq 0 $((NT - 1))); do
    t=${TLIST[$(( (i + run - 1) % NT ))]}
    # A target that fails is recorded and the runs go on (errexit is off inside, by design).
    run_target "$run" "$((i + 1))" "$t" || true
  done
done
put end "$(date -u '+%Y-%m-%d %H:%M UTC')"; put load_end "$(cut -d' ' -f1-3 /proc/loadavg)"

# ---- report -----------------------------------------------------------------------------------
RPY=$PY
if [ "$PLOT" = 1 ]; then
  if [ ! -x "$PLOT_VENV/bin/python" ] || ! "$PLOT_VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
    log "installing $MATPLOTLIB into $PLOT_VENV (once)"
    { "$PYHOME/bin/python3" -m venv "$PLOT_VENV" && "$PLOT_VENV/bin/python" -m pip install -q "$MATPLOTLIB"; } >"$WORK/plot-venv.log" 2>&1 ||
      { log "could not install matplotlib (no PNG): $(tail -1 "$WORK/plot-venv.log")"; PLOT=0; }
  fi
  [ "$PLOT" = 1 ] && RPY=$PLOT_VENV/bin/python
fi
rc=0
"$RPY" "$HERE/bench_report.py" "$OUT" $([ "$PLOT" = 1 ] || echo --no-plot) || rc=$?
cat "$OUT/summary.md"
log "results in $OUT (summary.md, results.json$([ "$PLOT" = 1 ] && echo ", dsbench.png"))"
[ "$rc" = 0 ] && [ "$FAILED" = 0 ] || exit 1
