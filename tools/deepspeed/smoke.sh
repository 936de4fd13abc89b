#!/usr/bin/env bash
# DeepSpeed ZeRO-Infinity smoke test: train the same tiny model twice, with
# nvme_path in folder A and then in folder B, and demand bit-identical losses.
#
#   tools/deepspeed/smoke.sh NVME_DIR_A NVME_DIR_B
#
# Intended use: A = a plain directory on a local disk, B = a folder inside a
# tierfs mount. No GPU is needed (DS_ACCELERATOR=cpu). Each run gets a fresh
# subfolder run-<timestamp>-<pid>-{a,b} inside A / B; it is left in place
# (swap files included) for inspection unless SMOKE_CLEANUP=1.
#
# Environment:
#   TIERFS_DS_VENV          venv location (default ~/.cache/tierfs/ds-venv)
#   TORCH_EXTENSIONS_DIR    JIT op cache (default ~/.cache/tierfs/torch_extensions)
#   SMOKE_STEPS             training steps (default 5)
#   SMOKE_ARGS              extra arguments for train_tiny.py
#   SMOKE_CLEANUP=1         delete the run subfolders afterwards
#   SMOKE_CORRUPT_B=STEP    harness self-test: run B zeroes 4 KiB of a master-weight
#                           swap file after STEP, so the comparison must fail (exit 1)
#
# Exit status: 0 when the two runs agree exactly; 1 when they differ or a run
# fails (its log tail is printed); 2 on usage errors.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 NVME_DIR_A NVME_DIR_B" >&2
    exit 2
fi
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${TIERFS_DS_VENV:-$HOME/.cache/tierfs/ds-venv}"
export TIERFS_DS_VENV="$VENV"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$HOME/.cache/tierfs/torch_extensions}"
export DS_ACCELERATOR=cpu
STEPS="${SMOKE_STEPS:-5}"

"$HERE/setup-venv.sh"
PY="$VENV/bin/python"

tag="run-$(date +%Y%m%d-%H%M%S)-$$"
run_one() {  # label base_dir [extra args] -> sets RUN_DIR
    local label="$1" base="$2"; shift 2
    # SMOKE_WRAP_B: a command run B's training goes through, e.g. `tierfs run --`.
    local wrap=()
    [[ "$label" == b && -n "${SMOKE_WRAP_B:-}" ]] && read -r -a wrap <<<"$SMOKE_WRAP_B"
    mkdir -p "$base"
    RUN_DIR="$(cd "$base" && pwd)/$tag-$label"
    mkdir "$RUN_DIR"
    echo "=== run $label: nvme_path=$RUN_DIR/nvme ($(df -PT "$base" | awk 'NR==2{print $2" on "$7}'))"
    local t0=$SECONDS
    # shellcheck disable=SC2086
    if ! "${wrap[@]}" "$PY" "$HERE/train_tiny.py" --nvme-path "$RUN_DIR/nvme" --losses-out "$RUN_DIR/losses.json" \
            --steps "$STEPS" ${SMOKE_ARGS:-} "$@" 2>&1 | tee "$RUN_DIR/train.log" \
            | grep -E '^(step |eval loss|param sha256|swap |median step|\[train_tiny\]|Traceback)'; then
        :
    fi
    if [[ ! -s "$RUN_DIR/losses.json" ]]; then
        echo "FAIL: run $label did not finish; last lines of $RUN_DIR/train.log:" >&2
        tail -n 30 "$RUN_DIR/train.log" >&2
        exit 1
    fi
    echo "=== run $label done in $((SECONDS - t0))s"
}

run_one a "$1"; DIR_A="$RUN_DIR"
if [[ -n "${SMOKE_CORRUPT_B:-}" ]]; then
    run_one b "$2" --self-test-corrupt-after "$SMOKE_CORRUPT_B"
else
    run_one b "$2"
fi
DIR_B="$RUN_DIR"

set +e
"$PY" - "$DIR_A/losses.json" "$DIR_B/losses.json" <<'PY'
import json, statistics, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
print()
print(f"A: {a['nvme_path']}")
print(f"B: {b['nvme_path']}")
print(f"{'step':>4}  {'loss A':<22} {'time A':>8}   {'loss B':<22} {'time B':>8}  same")
n = max(len(a["losses"]), len(b["losses"]))
for i in range(n):
    la = a["losses"][i] if i < len(a["losses"]) else None
    lb = b["losses"][i] if i < len(b["losses"]) else None
    ta = a["step_times_s"][i] if i < len(a["step_times_s"]) else float("nan")
    tb = b["step_times_s"][i] if i < len(b["step_times_s"]) else float("nan")
    print(f"{i+1:>4}  {la!r:<22} {ta:>7.3f}s   {lb!r:<22} {tb:>7.3f}s  {'yes' if la == lb else 'NO'}")
print(f"median step time: A {statistics.median(a['step_times_s']):.3f}s, "
      f"B {statistics.median(b['step_times_s']):.3f}s")
print(f"swap files: A {a['swap_files']['count']} files / {a['swap_files']['bytes']} bytes, "
      f"B {b['swap_files']['count']} files / {b['swap_files']['bytes']} bytes")
print(f"eval loss after last step: A {a['eval_loss']!r}, B {b['eval_loss']!r}")
print(f"final param sha256: A {a['param_sha256'][:16]}..., B {b['param_sha256'][:16]}...")
problems = []
if a["losses"] != b["losses"]:
    diff = [i + 1 for i in range(n) if (a["losses"][i:i+1] != b["losses"][i:i+1])]
    problems.append(f"training losses differ (steps {diff})")
if a["eval_loss"] != b["eval_loss"]:
    problems.append("eval loss after the last step differs")
if a["param_sha256"] != b["param_sha256"]:
    problems.append("final parameters differ")
if a["swap_files"]["count"] == 0 or b["swap_files"]["count"] == 0:
    problems.append("a run wrote no *.tensor.swp files (NVMe offload not active?)")
if problems:
    print("SMOKE FAIL: " + "; ".join(problems) + ".")
    print("Run A and run B were expected to be bit-identical; the difference points at "
          "corrupted, stale or short swap I/O in one of the folders (or nondeterminism: "
          "run the smoke test with A and B both plain directories to tell).")
    sys.exit(1)
print("SMOKE OK: losses, post-training eval loss and final parameters are bit-identical.")
PY
rc=$?
set -e
if [[ "${SMOKE_CLEANUP:-0}" == 1 ]]; then
    rm -rf "$DIR_A" "$DIR_B"
else
    echo "run folders kept: $DIR_A $DIR_B"
fi
exit "$rc"
