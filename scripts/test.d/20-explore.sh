#!/usr/bin/env bash
# Interleaving explorer, long run (ctest already ran the short one in all three
# builds): every planted bug must be found, the real core must pass the
# exhaustive scenarios, 60 s of PCT on the two-thread TREE ones and 60 s on
# the 8-thread scenarios. Prints the figures docs/correctness.md quotes.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build/h-explore
JOBS=${NBBS_TEST_JOBS:-$(nproc)}
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc \
  -DCMAKE_CXX_COMPILER=g++ -DNBBS_BUILD_BENCH=OFF > /dev/null
targets="nbbs_explore"
for n in 1 2 3 4 5 7 8 9 10 11 12 13 14 15; do targets="$targets nbbs_explore_bug$n"; done
cmake --build $B -j "$JOBS" --target $targets
X=$B/tests/explore

# A planted bug is hunted on every scenario where the real core passes (the
# explorer skips those marked with a known core bug, see --list).
status=0
for n in 1 2 3 4 5 7 8 10 11 12 13 14 15; do
  out=$($X/nbbs_explore_bug$n --expect-fail --pct --budget 240) || status=1
  echo "$out" | grep -E "^FAIL|^planted" || true
done
# Bug 9 needs one exact interleaving of three threads (PCT did not reach it in
# 240 s): the hand-written schedule of ctest explore_aba_tree, which the real
# core passes, must fail with the lost mark.
out=$($X/nbbs_explore_bug9 --expect-fail --scenario aba-tree --prefix "0*23.1*14.2*11.1*2.0*1") || status=1
echo "$out" | grep "S1: the live block" || status=1
[ $status -eq 0 ] || { echo "20-explore: a planted bug was NOT found"; exit 1; }

$X/nbbs_explore --dfs --scenario bunch-d3,bunch-d5,bunch-d5-mix,tree-undo,bunch-undo
# The two-thread TREE scenarios are no longer searched exhaustively (the search
# did not end in 15 minutes once phase 3 took OWN_P): PCT instead.
$X/nbbs_explore --pct --scenario tree-d2,tree-d3,tree-d3-00 --budget 60
$X/nbbs_explore --pct --scenario stale-tree-8t,stale-bunch-8t,tree-stale,stale-bunch --budget 60
# nbbs_alloc_at racing searches and frees (ctest explore_at runs 10 s of it).
$X/nbbs_explore --pct --scenario at-tree,at-bunch,pct-at-tree-d4,pct-at-bunch-d6 --budget 40
