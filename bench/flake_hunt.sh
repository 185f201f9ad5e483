#!/usr/bin/env bash
# Flake hunt (issue 34): the README's default-suite command RUNS times in a row with the test order
# randomised (pytest-random-order, modules and the tests in each module shuffled, a new seed per
# run), while busy loops keep every core busy. Run it on a machine nothing else uses: the busy
# loops are the load. Writes run, seed, exit code, seconds and pytest's summary line to
# OUT/times.tsv and each run's output to OUT/runN.log; exits 1 if any run failed. Rerun one order
# with: python3 -m pytest -m "not slow" -n 2 --dist loadfile -p random_order
#   --random-order-bucket=module --random-order-seed=SEED
#
#   bash bench/flake_hunt.sh                                 # 3 runs of the default suite
#   RUNS=1 HOGS=1 bash bench/flake_hunt.sh tests/test_cli.py  # check that it starts
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
HOGS=${HOGS:-$(nproc)}
OUT=${OUT:-runs/flake_hunt/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"

hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
}
trap stop_hogs EXIT
for _ in $(seq "$HOGS"); do
  (while :; do :; done) &
  hogs+=("$!")
done

printf 'run\tseed\texit\tseconds\tsummary\n' >"$OUT/times.tsv"
failed=0
for run in $(seq "$RUNS"); do
  seed=$((RANDOM * 32768 + RANDOM))
  SECONDS=0
  code=0
  python3 -m pytest -m "not slow" -n 2 --dist loadfile -q -p random_order \
    --random-order-bucket=module --random-order-seed="$seed" "$@" >"$OUT/run$run.log" 2>&1 ||
    code=$?
  printf '%s\t%s\t%s\t%s\t%s\n' "$run" "$seed" "$code" "$SECONDS" "$(tail -n 1 "$OUT/run$run.log")" \
    >>"$OUT/times.tsv"
  [ "$code" -eq 0 ] || failed=1
done
cat "$OUT/times.tsv"
exit "$failed"
