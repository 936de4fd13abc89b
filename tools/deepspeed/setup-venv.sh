#!/usr/bin/env bash
# Create (once) the Python venv used by the DeepSpeed ZeRO-Infinity smoke test.
#
# The venv lives OUTSIDE the repository (it is ~5 GB because the default torch
# wheel pulls the nvidia-* CUDA wheels, even though we only run on CPU):
#   ${TIERFS_DS_VENV:-$HOME/.cache/tierfs/ds-venv}
# Re-running is a no-op once the marker file records the pinned versions.
# Works as an ordinary user: it checks the system packages it needs (python3-venv, Python
# headers, libaio, a C++ compiler, ninja) and names the missing ones for an administrator;
# only as root on Debian/Ubuntu does it install them itself.
#
# The venv's python is
#   "$TIERFS_DS_VENV/bin/python".
set -euo pipefail

TORCH_VERSION=2.15.0
DEEPSPEED_VERSION=0.19.8
# deepspeed's own runtime dependencies, pinned to the set first installed here
# (2026-11) so the environment is reproducible. ninja is also the JIT op builder.
DEPS=(numpy==2.4.6 ninja==1.13.2 packaging==26.4 psutil==7.2.2 py-cpuinfo==9.0.0
      pydantic==2.14.4 hjson==3.1.0 msgpack==1.2.4 einops==0.8.2 tqdm==4.70.1)

VENV="${TIERFS_DS_VENV:-$HOME/.cache/tierfs/ds-venv}"
MARKER="$VENV/.tierfs-ds-venv"
WANT="torch==$TORCH_VERSION deepspeed==$DEEPSPEED_VERSION ${DEPS[*]}"
PYTHON="${PYTHON:-python3}"

log() { echo "[setup-venv] $*" >&2; }

# --- system packages: checked by what they provide, so this works on any distribution ---
# Each entry: what is checked | Debian/Ubuntu package | RHEL/Rocky/Alma package.
# Without root nothing is installed: the script names what an administrator must add.
have_python_venv() { "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; }
have_python_headers() {
    "$PYTHON" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null
}
have_libaio() { [[ -e /usr/include/libaio.h ]]; }
have_cxx() { command -v c++ >/dev/null || command -v g++ >/dev/null; }
have_ninja() { command -v ninja >/dev/null; }
CHECKS=(
    "have_python_venv|python3-venv|python3|Python's venv and ensurepip modules (the venv itself)"
    "have_python_headers|python3-dev|python3-devel|Python.h (DeepSpeed's JIT-built ops)"
    "have_libaio|libaio-dev|libaio-devel|libaio.h (DeepSpeed's async_io op, used for NVMe offload)"
    "have_cxx|build-essential|gcc-c++|a C++ compiler (the JIT-built ops)"
    "have_ninja|ninja-build|ninja-build|ninja (the JIT builder)"
)
if ! command -v "$PYTHON" >/dev/null; then
    log "no $PYTHON: install Python 3.9 or newer (Debian/Ubuntu: python3; RHEL: python3), or set PYTHON=/path/to/python3"
    exit 1
fi
missing=()
for c in "${CHECKS[@]}"; do
    IFS='|' read -r check deb rpm what <<<"$c"
    if ! "$check"; then
        missing+=("$deb|$rpm|$what")
    fi
done
if ((${#missing[@]})); then
    debs=() rpms=()
    for m in "${missing[@]}"; do
        IFS='|' read -r deb rpm what <<<"$m"
        debs+=("$deb") rpms+=("$rpm")
        log "missing: $what"
    done
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        log "installing apt packages: ${debs[*]}"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${debs[@]}"
    else
        log "these system packages must be installed by an administrator (this script"
        log "never uses sudo):"
        log "  Debian/Ubuntu:   apt-get install ${debs[*]}"
        log "  RHEL/Rocky/Alma: dnf install $(printf '%s\n' "${rpms[@]}" | sort -u | tr '\n' ' ')(ninja-build is in EPEL)"
        log "then run this script again. On a cluster, a module may provide them (e.g. module load gcc python)."
        exit 1
    fi
fi

# --- venv ---
if [[ -f "$MARKER" ]] && [[ "$(cat "$MARKER")" == "$WANT" ]] && [[ -x "$VENV/bin/python" ]]; then
    log "venv up to date: $VENV ($WANT)"
    exit 0
fi

log "installing into venv $VENV ($WANT)"
mkdir -p "$(dirname "$VENV")"
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
rm -f "$MARKER"
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --upgrade pip setuptools wheel
# torch first: deepspeed's setup.py imports torch, so deepspeed is installed
# without build isolation against this torch.
# (The default PyPI torch wheel is the CUDA build and pulls ~3 GB of nvidia-*
# wheels; it runs fine on CPU-only machines with DS_ACCELERATOR=cpu.)
"$VPY" -m pip install "torch==$TORCH_VERSION" "${DEPS[@]}"
DS_BUILD_OPS=0 "$VPY" -m pip install --no-build-isolation "deepspeed==$DEEPSPEED_VERSION"

DS_ACCELERATOR=cpu "$VPY" - <<PY
import torch, deepspeed
assert torch.__version__.split("+")[0] == "$TORCH_VERSION", torch.__version__
assert deepspeed.__version__ == "$DEEPSPEED_VERSION", deepspeed.__version__
print("[setup-venv] torch", torch.__version__, "deepspeed", deepspeed.__version__)
PY
echo "$WANT" > "$MARKER"
log "done: $(du -sh "$VENV" | cut -f1) in $VENV"
