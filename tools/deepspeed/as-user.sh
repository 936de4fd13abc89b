#!/usr/bin/env bash
# as-user.sh - run a command as an ordinary user with root's DeepSpeed venv reachable (root only).
#
#   as-user.sh USER [--memlock] [--expose PATH]... [--writable PATH=COPY]... -- CMD [ARGS...]
#
# Why: the venv (and the Python it was made from, and the JIT-built DeepSpeed ops) usually
# live under /root, which an ordinary user cannot enter; a second venv for the user would be
# ~5 GB and a fresh 6-minute JIT build, and a different build could even change the numbers
# the bench compares bit for bit. So the user runs the very same files: in a private mount
# namespace (gone when CMD exits, nothing to clean up) the first folder the user cannot
# enter (e.g. /root) is covered by an empty tmpfs, and only the --expose PATHs are bound
# back into it at their own paths. --writable PATH=COPY binds the user-owned folder COPY
# over PATH (torch's extension cache: it takes a lock file and rewrites build.ninja in it
# even when nothing needs building; the same path keeps ninja's records valid, so nothing
# is rebuilt). Paths the user can already reach are left alone; with nothing to hide or
# overlay, CMD just runs under runuser.
#
# --memlock: let CMD lock memory without limit. DeepSpeed's aio swap buffers are mlock()ed
# even with pin_memory false, far beyond the usual 8 MiB RLIMIT_MEMLOCK of a login; cluster
# nodes give jobs `ulimit -l unlimited` (RDMA needs it too). The limit is raised when root
# may (CAP_SYS_RESOURCE); where it may not (containers), CMD gets CAP_IPC_LOCK as an ambient
# capability instead (setpriv), which has the same effect on mlock and nothing else.
#
# Environment: TMPDIR (where the namespace's scratch mount point is made; it is removed
# afterwards). Exit status: CMD's, or 2 on usage errors.
set -euo pipefail

die() { echo "as-user.sh: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "must run as root"
[ $# -ge 1 ] || die "usage: as-user.sh USER [--expose PATH]... [--writable PATH=COPY]... -- CMD [ARGS...]"
user=$1; shift
id "$user" >/dev/null 2>&1 || die "no user '$user'"
expose=(); writable=(); memlock=0
while [ $# -gt 0 ]; do
  case $1 in
    --memlock) memlock=1; shift ;;
    --expose) [ $# -ge 2 ] || die "--expose needs a PATH"; expose+=("$(realpath -e "$2")") || die "no such path: $2"; shift 2 ;;
    --writable) [[ ${2:-} == /*=/* ]] || die "--writable needs PATH=COPY (absolute)"; writable+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (the command follows --)" ;;
  esac
done
[ $# -ge 1 ] || die "no command given after --"

can_enter() { runuser -u "$user" -- test -x "$1" -a -r "$1" 2>/dev/null; }

# The topmost folder on PATH's way that the user cannot enter (empty if none).
blocked_ancestor() {
  local p=$1 cur="" part
  IFS=/ read -ra parts <<<"${p#/}"
  for part in "${parts[@]}"; do
    cur="$cur/$part"
    [ -d "$cur" ] || break
    can_enter "$cur" || { echo "$cur"; return; }
  done
}

top=""; hidden=()
for p in "${expose[@]}"; do
  a=$(blocked_ancestor "$p")
  [ -n "$a" ] || continue
  [ -z "$top" ] || [ "$top" = "$a" ] ||
    die "exposed paths are hidden by different folders ($top, $a); only one is supported"
  top=$a; hidden+=("$p")
done
# How to become the user: runuser, or setpriv with CAP_IPC_LOCK kept (see --memlock).
drop=(runuser -u "$user" --)
if [ "$memlock" = 1 ] && ! ulimit -l unlimited 2>/dev/null; then
  echo "as-user.sh: RLIMIT_MEMLOCK cannot be raised here (no CAP_SYS_RESOURCE); running as $user with ambient CAP_IPC_LOCK instead" >&2
  drop=(setpriv --reuid="$(id -u "$user")" --regid="$(id -g "$user")" --init-groups
        --inh-caps=+ipc_lock --ambient-caps=+ipc_lock --)
fi
if [ -z "$top" ] && [ ${#writable[@]} -eq 0 ]; then
  exec "${drop[@]}" "$@"
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/as-user.XXXXXX")
trap 'rmdir "$scratch" 2>/dev/null || true' EXIT
# Inside the namespace: keep TOP reachable at $scratch, cover TOP, bind back what is exposed,
# lay the writable copies over their paths, then drop to the user.
rc=0
unshare --mount --propagation private -- bash -s "$top" "$scratch" "${#hidden[@]}" "${hidden[@]}" \
    "${#writable[@]}" "${writable[@]}" "${#drop[@]}" "${drop[@]}" "$@" <<'EOS' || rc=$?
set -euo pipefail
top=$1 scratch=$2; shift 2
n=$1; shift; hidden=("${@:1:$n}"); shift "$n"
n=$1; shift; writable=("${@:1:$n}"); shift "$n"
n=$1; shift; drop=("${@:1:$n}"); shift "$n"
if [ -n "$top" ]; then
  mount --bind "$top" "$scratch"
  mount -t tmpfs -o mode=0755,size=1m as-user "$top"
  for p in "${hidden[@]}"; do
    rel=${p#"$top"/}
    if [ -d "$scratch/$rel" ]; then mkdir -p "$p"; else mkdir -p "$(dirname "$p")"; : >"$p"; fi
    mount --bind "$scratch/$rel" "$p"
  done
  umount -l "$scratch"
fi
for w in "${writable[@]}"; do
  path=${w%%=*} copy=${w#*=}
  mkdir -p "$path" 2>/dev/null || true
  mount --bind "$copy" "$path"
done
exec "${drop[@]}" "$@"
EOS
exit "$rc"
