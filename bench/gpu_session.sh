#!/usr/bin/env bash
# One prepared accelerator session: every bench/gpu_*.py check and timing in a single call, each
# under its own time limit (sum ~9 min, inside one 10-minute device command), results as JSON under
# $OUT (the device tool returns at most 8 files: one log + the JSON files below).
#
#   bash bench/gpu_session.sh          # on the device machine (device tool: run, timeout_s 600)
#   bash bench/gpu_session.sh --tiny   # CPU check of the script itself (tests run it)
#
# Order is priority order (docs/design/ci.md / docs/design/inference.md "Decode profile"):
# train-step MFU, decode scanned vs
# unrolled layers (CoreShape.unrolled), the 64k long-context step with the kernel parity checks,
# the Gated DeltaNet layer. A check that fails or runs out of time is logged and the next one runs.
# Wheels the device lacks travel in .whl (device README): installed first when present.
set -u
OUT="${OUT:-$(mktemp -d)}"
TINY=""
if [ "${1:-}" = "--tiny" ]; then TINY="--tiny"; fi
export PYTHONUNBUFFERED=1
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$(pwd):${PYTHONPATH:-}"
LOG="$OUT/gpu_session.log"
: >"$LOG"

step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "=== $name (limit ${limit}s): $*" | tee -a "$LOG"
  local start=$SECONDS
  timeout "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  echo "=== $name rc=$rc in $((SECONDS - start))s" | tee -a "$LOG"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >>"$LOG" 2>&1 || true
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" >>"$LOG" 2>&1
step train_step 120 python3 bench/gpu_train_step.py $TINY --steps 5 --out "$OUT/gpu_train_step.json"
step decode_scanned 90 python3 bench/gpu_decode.py $TINY --out "$OUT/gpu_decode_scanned.json"
step decode_unrolled 90 python3 bench/gpu_decode.py $TINY --unrolled \
  --out "$OUT/gpu_decode_unrolled.json"
step long_context 150 python3 bench/gpu_long_context.py $TINY --out "$OUT/gpu_long_context.jsonl"
step gated_delta 90 python3 bench/gpu_gated_delta.py $TINY --out "$OUT/gpu_gated_delta.jsonl"
echo "results in $OUT:" && ls -la "$OUT"
