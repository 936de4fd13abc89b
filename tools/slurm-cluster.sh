#!/bin/bash
# A one-node Slurm cluster on this machine, for testing the job templates (docs/jobs/) the
# way a real cluster runs them. Everything lives in one folder: configs, munge key and
# socket, state, spool, logs. Nothing under /etc is read or changed.
#
#   tools/slurm-cluster.sh start DIR    # root; then: export SLURM_CONF=DIR/slurm.conf
#   tools/slurm-cluster.sh stop DIR     # ends the daemons and removes their cgroups
#
# Needs Debian's slurm-wlm (22.05) and munge: `apt-get install slurm-wlm munge`.
#
# What runs: munged with a freshly generated key and its socket in DIR; `slurmctld -D` and
# `slurmd -D` in the background, on free TCP ports chosen at start (so two clusters or a
# real one on this machine do not collide); this host is the only node, with its real CPUs.
#
# Process tracking is proctrack/cgroup, what real clusters run: every process a job step
# starts is in the step's freezer cgroup, and when the step ends (or the job is cancelled
# or times out) Slurm signals and then kills everything in it, double forks included. That
# is the behaviour a tierfs daemon in a job must live with. It needs the cgroup v1 freezer
# controller (mounted at /sys/fs/cgroup/freezer, as on this kind of machine); where it is
# missing or not writable the script says so and falls back to proctrack/linuxproc, which
# finds a step's processes by parent pid and so loses daemons that left their parent.
# `CLUSTER_PROCTRACK=linuxproc` forces the fallback.
#
# `CLUSTER_PROLOG=FILE` and `CLUSTER_EPILOG=FILE` (absolute paths of executables) make
# them the node's Prolog and Epilog, run by slurmd as root for every job, the prolog at
# allocation (PrologFlags=Alloc), as a site would run docs/jobs/tierfs-prolog.sh and
# tierfs-epilog.sh (tests/slurm_prolog.rs). Unset (the default), there are none.
set -euo pipefail

usage() {
    echo "usage: $0 start DIR | stop DIR" >&2
    exit 2
}
[ $# -eq 2 ] || usage
CMD=$1
DIR=$2

die() {
    echo "slurm-cluster: $*" >&2
    exit 1
}

# A TCP port nobody listens on now (from /proc/net/tcp{,6}: state 0A is LISTEN).
free_port() {
    local used p
    used=$(awk 'NR > 1 && $4 == "0A" { split($2, a, ":"); print strtonum("0x" a[2]) }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u)
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 30000))
        grep -qx "$p" <<<"$used" || { echo "$p"; return; }
    done
    die "no free TCP port found"
}

pids_of() {
    local f
    for f in "$DIR"/run/*.pid; do
        [ -s "$f" ] && cat "$f"
    done
    true
}

stop() {
    [ -d "$DIR" ] || return 0
    local pid ids
    # Jobs still queued or running are cancelled first, the way a site would drain the
    # node: TERM to every process of them, KILL after KillWait.
    if [ -f "$DIR/slurm.conf" ] && [ -s "$DIR/run/slurmctld.pid" ]; then
        export SLURM_CONF=$DIR/slurm.conf
        ids=$(squeue -h -o %i 2>/dev/null || true)
        if [ -n "$ids" ]; then
            # shellcheck disable=SC2086
            scancel $ids 2>/dev/null || true
            for _ in $(seq 120); do
                [ -z "$(squeue -h -o %i 2>/dev/null || true)" ] && break
                sleep 0.5
            done
        fi
    fi
    # slurmd first (it ends the job steps it runs), then the controller, then munged.
    for name in slurmd slurmctld munged; do
        pid=$(cat "$DIR/run/$name.pid" 2>/dev/null || true)
        [ -n "$pid" ] || continue
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        rm -f "$DIR/run/$name.pid"
    done
    # What is left in the cgroups Slurm made for this node's steps (a step daemon whose
    # slurmd went first) is this cluster's and nobody else's: kill it, remove the cgroups.
    if [ -f "$DIR/cgroup-root" ]; then
        local root p
        root=$(cat "$DIR/cgroup-root")
        if [ -d "$root" ]; then
            for _ in $(seq 50); do
                p=$(find "$root" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
                [ -z "$p" ] && break
                # shellcheck disable=SC2086
                kill -KILL $p 2>/dev/null || true
                sleep 0.1
            done
            find "$root" -depth -type d -exec rmdir {} + 2>/dev/null || true
        fi
    fi
}

start() {
    [ "$(id -u)" -eq 0 ] || die "start needs root (slurmd starts jobs as their users)"
    local t
    for t in munged slurmctld slurmd sbatch scontrol; do
        command -v "$t" >/dev/null || die "$t is not installed (apt-get install slurm-wlm munge)"
    done
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    chmod 0755 "$DIR"
    mkdir -p "$DIR/munge" "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/run"
    # munged checks that its key is private and that nobody else can write the socket's
    # folder; clients (any user) only need to reach the socket.
    chmod 0755 "$DIR/munge"
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 0400 "$DIR/munge/munge.key"
    munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
        --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munged.seed" ||
        die "munged did not start; see $DIR/log/munged.log"

    local node cpus hw proctrack why=""
    node=$(hostname -s)
    # The node as slurmd sees it (CPUs, sockets, cores, threads, memory), so the
    # controller does not drain it for a mismatch; memory a little below the real figure.
    hw=$(slurmd -C | head -n 1 | sed -e "s/^NodeName=[^ ]*//" \
        -e 's/RealMemory=\([0-9]*\)/RealMemory=\1/')
    local mem
    mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
    hw=$(sed "s/RealMemory=[0-9]*/RealMemory=$((mem * 9 / 10))/" <<<"$hw")
    cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$hw")

    proctrack=cgroup
    local freezer=/sys/fs/cgroup/freezer
    if [ "${CLUSTER_PROCTRACK:-}" = linuxproc ]; then
        proctrack=linuxproc
        why="CLUSTER_PROCTRACK=linuxproc"
    elif ! grep -qs " $freezer cgroup .*freezer" /proc/self/mounts; then
        proctrack=linuxproc
        why="no cgroup v1 freezer controller at $freezer (cgroup v2 only, or not mounted)"
    elif ! mkdir "$freezer/slurm-cluster-check.$$" 2>/dev/null; then
        proctrack=linuxproc
        why="$freezer is not writable here (a container without cgroup delegation?)"
    else
        rmdir "$freezer/slurm-cluster-check.$$"
    fi
    if [ "$proctrack" = linuxproc ]; then
        echo "slurm-cluster: using proctrack/linuxproc, not proctrack/cgroup: $why." >&2
        echo "slurm-cluster: linuxproc tracks a step's processes by parent pid only, so a" \
            "daemon that leaves its parent escapes the step's end (unlike real clusters)." >&2
    else
        # Slurm names the node's cgroup tree after the node when NodeName is set on the
        # command line; this is the one it makes, removed again at stop.
        echo "$freezer/slurm_$node" >"$DIR/cgroup-root"
    fi

    local prolog_lines="" f
    for f in "${CLUSTER_PROLOG:-}" "${CLUSTER_EPILOG:-}"; do
        [ -z "$f" ] || [[ "$f" = /* && -x "$f" ]] ||
            die "CLUSTER_PROLOG and CLUSTER_EPILOG must be absolute paths of executables: '$f'"
    done
    if [ -n "${CLUSTER_PROLOG:-}" ]; then
        # At allocation, not at the first job step: the job's batch script and every step
        # find what the prolog set up, and the epilog runs even if no step ever started.
        prolog_lines+="Prolog=$CLUSTER_PROLOG"$'\n'"PrologFlags=Alloc"$'\n'
    fi
    if [ -n "${CLUSTER_EPILOG:-}" ]; then
        prolog_lines+="Epilog=$CLUSTER_EPILOG"$'\n'
    fi

    local ctld_port slurmd_port
    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done

    cat >"$DIR/slurm.conf" <<EOF
# Written by tools/slurm-cluster.sh: a one-node test cluster, all state in $DIR.
ClusterName=tierfstest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/$proctrack
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# What real sites run: TERM, then KILL this long after (seconds).
KillWait=30
MinJobAge=600
${prolog_lines}NodeName=$node NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    cat >"$DIR/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
EOF
    chmod 0644 "$DIR/slurm.conf" "$DIR/cgroup.conf"
    export SLURM_CONF=$DIR/slurm.conf

    slurmctld -D -i -f "$SLURM_CONF" >>"$DIR/log/slurmctld.out" 2>&1 &
    echo $! >"$DIR/run/slurmctld.pid"
    slurmd -D -f "$SLURM_CONF" -N "$node" >>"$DIR/log/slurmd.out" 2>&1 &
    echo $! >"$DIR/run/slurmd.pid"

    # Ready when the node is idle.
    local state=""
    for _ in $(seq 300); do
        state=$(scontrol show node "$node" 2>/dev/null | sed -n 's/.*State=\([A-Z+_]*\).*/\1/p' || true)
        [ "$state" = IDLE ] && break
        for p in $(pids_of); do
            kill -0 "$p" 2>/dev/null || {
                tail -n 20 "$DIR"/log/*.log "$DIR"/log/*.out >&2 || true
                stop
                die "a Slurm daemon exited at start (logs above, in $DIR/log)"
            }
        done
        sleep 0.2
    done
    if [ "$state" != IDLE ]; then
        tail -n 20 "$DIR"/log/*.log >&2 || true
        stop
        die "node $node did not become idle (state '$state'); logs in $DIR/log"
    fi
    echo "slurm-cluster: up in $DIR: node $node ($cpus CPUs), proctrack/$proctrack," \
        "ports $ctld_port/$slurmd_port; export SLURM_CONF=$SLURM_CONF"
}

case $CMD in
start) start ;;
stop) stop ;;
*) usage ;;
esac
