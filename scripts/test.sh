#!/usr/bin/env bash
# The project's whole test suite (the README's test command; CI runs it):
#  1. installs dependencies (scripts/deps.sh);
#  2. builds and runs every ctest suite three times: gcc release build,
#     clang-14 ThreadSanitizer build, clang-14 AddressSanitizer+UBSan build;
#  3. runs the extra suites in scripts/test.d/*.sh in name order (freestanding
#     check, interleaving explorer, fuzzing, benchmark smoke, preload tests,
#     nbbs.ko booted in qemu: 60-kernel.sh).
# Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
JOBS=$(nproc)
export NBBS_TEST_JOBS=$JOBS
suites_passed=0

run_build() {
  local name=$1; shift
  echo "== build/$name"
  cmake -S . -B "build/$name" -G Ninja -DNBBS_WERROR=ON "$@" > "build-$name.log" 2>&1 || { cat "build-$name.log"; exit 1; }
  rm -f "build-$name.log"
  cmake --build "build/$name" -j "$JOBS"
  (cd "build/$name" && ctest --output-on-failure -j "$JOBS" --timeout 900)
  suites_passed=$((suites_passed + 1))
}

run_build release -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++
run_build tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DNBBS_SANITIZE=thread -DNBBS_BUILD_BENCH=OFF
run_build asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DNBBS_SANITIZE=address -DNBBS_BUILD_BENCH=OFF

for s in scripts/test.d/*.sh; do
  [ -e "$s" ] || continue
  echo "== $s"
  bash "$s"
  suites_passed=$((suites_passed + 1))
done
echo "test suites: $suites_passed passed, 0 failed"
