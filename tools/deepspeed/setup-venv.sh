#!/usr/bin/env bash
# Create (once) the Python venv used by the DeepSpeed ZeRO-Infinity smoke test.
#
# The venv lives OUTSIDE the repository (it is ~5 GB because the default torch
# wheel pulls the nvidia-* CUDA wheels, even though we only run on CPU):
#   ${TIERFS_DS_VENV:-$HOME/.cache/tierfs/ds-venv}
# Re-running is a no-op once the marker file records the pinned versions.
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

# --- apt packages: libaio (async_io op), ninja and a C++ toolchain (JIT builds) ---
need_apt=()
for p in libaio-dev ninja-build build-essential; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        need_apt+=("$p")
    fi
done
if ((${#need_apt[@]})); then
    log "installing apt packages: ${need_apt[*]}"
    SUDO=""
    if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
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
