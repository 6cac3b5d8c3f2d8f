#!/usr/bin/env bash
# Fuzzing: clang-14 libFuzzer + ASan/UBSan builds of the back-end and nbmalloc
# fuzz targets, 60 s each from the committed corpus (tests/fuzz/corpus). A
# crash is copied into that corpus (commit it: ctest replays it in every
# build from then on) and fails the run. Prints execs/s and coverage.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build/h-fuzz
SECS=${NBBS_FUZZ_SECONDS:-60}
JOBS=${NBBS_TEST_JOBS:-$(nproc)}
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DNBBS_SANITIZE=address -DNBBS_FUZZ=ON -DNBBS_BUILD_BENCH=OFF \
  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link > /dev/null
targets=fuzz_nbbs
grep -q '^build fuzz_nbm:' $B/build.ninja && targets="$targets fuzz_nbm"
cmake --build $B -j "$JOBS" --target $targets

status=0
for t in $targets; do
  name=${t#fuzz_}
  work=$B/fuzz-work/$name
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/crash"
  cp tests/fuzz/corpus/$name/* "$work/corpus/"
  echo "== $t: ${SECS} s"
  if ! $B/tests/fuzz/$t "$work/corpus" -max_total_time="$SECS" -print_final_stats=1 \
       -artifact_prefix="$work/crash/" -rss_limit_mb=4096 > "$work/log" 2>&1; then
    status=1
  fi
  grep -E "^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)" "$work/log" || true
  grep -E "DONE|cov: " "$work/log" | tail -1 || true
  for c in "$work"/crash/*; do
    [ -e "$c" ] || continue
    cp "$c" "tests/fuzz/corpus/$name/regress-$(basename "$c")"
    echo "30-fuzz: $t crashed; input saved as tests/fuzz/corpus/$name/regress-$(basename "$c")"
    grep -m5 -E "ERROR|fuzz_.*\.c:[0-9]+:" "$work/log" || true
    status=1
  done
done
exit $status
