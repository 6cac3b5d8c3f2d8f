#!/usr/bin/env bash
# The in-kernel benchmark (`make kernel-bench`): boots nbbs.ko with a larger
# loop count and several interleaved repetitions, then writes
#   bench/results/kernel.json  every figure of the boot (format: docs/kernel.md)
#   bench/results/kernel.md    the table for the report
# Options through the environment: KBENCH_ITERS (default 100000 pairs per
# thread per loop), KBENCH_REPS (default 5), KBENCH_HELD (default 16384),
# BENCH_OUT (default bench/results). The self-test runs in the same boot; the
# results are written only if it passed.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${BENCH_OUT:-bench/results}
mkdir -p "$OUT"
bash scripts/kernel/boot.sh --name bench iters="${KBENCH_ITERS:-100000}" \
  reps="${KBENCH_REPS:-5}" held="${KBENCH_HELD:-16384}"
python3 scripts/kernel/results.py build/kernel/bench/boot.log "$OUT/kernel.json" "$OUT/kernel.md" >/dev/null
cp build/kernel/bench/boot.log "$OUT/kernel-boot.log"
echo "kernel bench: $OUT/kernel.json, $OUT/kernel.md"
