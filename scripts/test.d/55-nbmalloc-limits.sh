#!/usr/bin/env bash
# nbmalloc runs wherever glibc runs, and never accepts a bad pointer
# (issue 12). Everything runs with the same binaries under glibc and under
# LD_PRELOAD=libnbmalloc.so:
#  1. under ulimit -v of 64 MiB, 256 MiB and 1 GiB: env, python3, sort and a
#     small C program; each that runs under glibc must run under nbmalloc and
#     print the same;
#  2. under ulimit -v 4 GiB: memory reachable in blocks of 4000 B, 1 MiB and
#     100 MiB (each size filled until malloc fails, then freed), at least 90%
#     of glibc's; after freeing, 4000 B refilled to 90% of glibc's first fill,
#     then malloc of 100 B, 4000 B, 1 MiB and 100 MiB must all succeed;
#     four threads filling and freeing together under 512 MiB;
#     under 1 GiB, blocks of 300,000 B and 1,100,000 B (between powers of
#     two) at least 88% of glibc's; under 1.5 GiB, 512 MiB of 1 MiB blocks
#     freed serve 256 KiB, 512 KiB and 300,000 B requests (90%, 90%, 88%),
#     256 MiB of 4 MiB blocks 1,100,000 B ones (86%); blocks of 1 or 4 MiB
#     freed with room left serve smaller requests filled to the wall (95%,
#     86%, 86% of glibc's);
#  3. every alignment up to 2 GiB allocated and freed, malloc(64 TiB) fails
#     with ENOMEM (also under glibc, as a check of the check);
#  4. bad pointers (stack, interior, never handed out, freed, in every tier)
#     to free, realloc and malloc_usable_size abort with a message naming the
#     error; a fuzz of random frees around live and freed blocks accepts none.
# Uses the release build of scripts/test.sh (NBM_BUILD overrides it).
# About 40 s on 2 cores; touches up to 4 GiB of memory (one process at a time).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${NBM_BUILD:-build/release}
SO=$PWD/$B/src/nbmalloc/libnbmalloc.so
LIM=$PWD/$B/tests/nbmalloc/nbm_limits
for f in "$SO" "$LIM"; do [ -f "$f" ] || { echo "nbmalloc limits: $f not built"; exit 1; }; done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "nbmalloc limits: FAILED: $*"; fail=$((fail + 1)); }
# ratio N D: N / D to three places (0 when D is 0 or empty).
ratio() { awk -v n="${1:-0}" -v d="${2:-0}" 'BEGIN { printf "%.3f", d ? n / d : 0 }'; }
# at_least R W MESSAGE: a passed check if R >= W, else a failure saying MESSAGE.
at_least() { if awk -v r="$1" -v w="$2" 'BEGIN { exit !(r >= w) }'; then ok; else bad "$3"; fi; }

# run LIMIT_KB OUT PRELOAD cmd...: the exit status of cmd under ulimit -v.
run() {
  local kb=$1 out=$2 lib=$3; shift 3
  ( ulimit -v "$kb"; exec env ${lib:+LD_PRELOAD=$lib} "$@" ) > "$out" 2> "$out.err"
}

# --- 1. small limits -------------------------------------------------------
awk 'BEGIN { srand(3); for (i = 0; i < 20000; i++) printf "%08x line %d\n", int(rand() * 4294967295), i }' > "$tmp/in.txt"
PY=$(command -v python3)
printf '%s\n' 'import collections, json' 'd = collections.Counter()' \
  'for i in range(300): d[len(json.dumps(list(range(i))))] += 1' \
  'print(sum(k * v for k, v in d.items()), len(d))' > "$tmp/work.py"

compare() { # KB cmd...: if it runs under glibc, it must run under nbmalloc and print the same
  local kb=$1; shift
  local g=0 n=0
  run "$kb" "$tmp/g.out" "" "$@" || g=$?
  run "$kb" "$tmp/n.out" "$SO" "$@" || n=$?
  if [ "$g" != 0 ]; then
    echo "  ulimit -v $kb: '$*' fails under glibc too (status $g): not compared"
  elif [ "$n" = 0 ] && cmp -s "$tmp/g.out" "$tmp/n.out"; then
    ok
  else
    bad "ulimit -v $kb: '$*' status $n under nbmalloc (glibc 0): $(head -c 200 "$tmp/n.out.err")"
  fi
}
for kb in 65536 262144 1048576; do
  compare $kb env true
  compare $kb "$PY" -c pass
  compare $kb "$PY" "$tmp/work.py"
  compare $kb sort "$tmp/in.txt"
  compare $kb sort -S 1M --parallel=2 "$tmp/in.txt"
  compare $kb "$LIM" small
  echo "  ulimit -v $kb: env, python3 (2), sort (2), a small C program compared"
done

# --- 2. exhaustion and recovery under 4 GiB ----------------------------------
# Filling 4 GiB with 4000-byte blocks touches all of it (glibc writes a header
# into each): on a machine with less than 6 GiB available, 1 GiB is used
# instead, and said so.
G4=4194304
avail_kb=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo 2>/dev/null || echo 0)
if [ "${avail_kb:-0}" -lt 6291456 ]; then
  G4=1048576
  echo "  only ${avail_kb} KiB available: exhaustion compared under ulimit -v $G4, not 4194304"
fi
run $G4 "$tmp/fill.glibc" "" "$LIM" fill 4000,1048576,104857600 || bad "fill under glibc: $(cat "$tmp/fill.glibc.err")"
run $G4 "$tmp/fill.nbm" "$SO" "$LIM" fill 4000,1048576,104857600,4000 || bad "fill under nbmalloc: $(cat "$tmp/fill.nbm.err")"
# One line per nbmalloc round: size, glibc's bytes (first fill of that size), ours, ratio.
awk 'FNR == NR && /^fill / { if (!($2 in g)) g[$2] = $3; next }
     /^fill / { r = g[$2] ? $3 / g[$2] : 0; printf "%s%s %s %s %.3f\n", $2, seen[$2]++ ? "(again)" : "", g[$2], $3, r }' \
  "$tmp/fill.glibc" "$tmp/fill.nbm" > "$tmp/ratios"
printf '  ulimit -v %s:\n  %-16s %14s %14s %7s\n' "$G4" "block bytes" "glibc" "nbmalloc" "ratio"
while read -r label ref got ratio; do
  printf '  %-16s %14s %14s %7s\n' "$label" "$ref" "$got" "$ratio"
  at_least "$ratio" 0.90 "reachable memory in blocks of $label: $got bytes, glibc $ref (ratio $ratio < 0.90)"
done < "$tmp/ratios"
if [ "$(wc -l < "$tmp/ratios")" = 4 ]; then ok; else bad "fill rounds missing: $(cat "$tmp/ratios")"; fi
for s in 100 4000 1048576 104857600; do
  if grep -qx "after $s ok" "$tmp/fill.nbm"; then ok; else
    bad "malloc($s) after freeing everything: $(grep "after $s" "$tmp/fill.nbm" || echo missing)"; fi
done

# Sizes between powers of two (blocks of pieces) under 1 GiB, one size per
# fresh process: blocks placed end to end fit at least 88% of glibc's bytes
# (0.901-0.909 measured; the class's rounding alone caps them at 0.916 and
# 0.932 of the arenas' bytes, so 90% would fail now and then; each block in
# a power of two of its own, before packing, fitted 0.57 and 0.52).
for s in 300000 1100000; do
  run 1048576 "$tmp/mid.glibc" "" "$LIM" fill $s || bad "fill $s under glibc: $(cat "$tmp/mid.glibc.err")"
  run 1048576 "$tmp/mid.nbm" "$SO" "$LIM" fill $s || bad "fill $s under nbmalloc: $(cat "$tmp/mid.nbm.err")"
  read -r _ _ g < "$tmp/mid.glibc"; read -r _ _ n < "$tmp/mid.nbm"
  r=$(ratio "$n" "$g")
  echo "  ulimit -v 1048576: blocks of $s: glibc $g, nbmalloc $n (ratio $r)"
  at_least "$r" 0.88 "reachable memory in blocks of $s under 1 GiB: $n bytes, glibc $g (ratio $r < 0.88)"
done

# Memory freed in larger blocks serves smaller ones: under 1.5 GiB, a
# reserve (512 x 1 MiB, or 64 x 4 MiB) held while blocks of S fill the rest,
# then the reserve freed and S filled again: the second fill reaches at
# least 90% of the freed bytes for 256 and 512 KiB (a request split off the
# cached 1 MiB block it takes: 1.000 measured; taken whole, it held 0.25 and
# 0.50), and 88% and 86% for 300,000 B and 1,100,000 B (classes of pieces:
# the parts run on across blocks freed side by side, 0.910-0.913 and
# 0.885-0.902 over 10 runs; each block split alone, its rest stranded, 0.858
# and 0.787; the class's rounding caps them at 0.916 and 0.932). glibc:
# 1.004 and 1.000.
for rs in "1048576 512 262144 0.90" "1048576 512 524288 0.90" "1048576 512 300000 0.88" "4194304 64 1100000 0.86"; do
  set -- $rs
  run 1572864 "$tmp/refill.nbm" "$SO" "$LIM" refill "$1" "$2" "$3" || bad "refill $3 under nbmalloc: $(cat "$tmp/refill.nbm.err")"
  read -r _ _ f g < "$tmp/refill.nbm" || true
  r=$(ratio "$g" "$f")
  echo "  ulimit -v 1572864: $2 x $1 freed, blocks of $3 regained $g bytes (ratio $r)"
  at_least "$r" $4 "blocks of $3 after freeing $2 x $1: $g of $f bytes (ratio $r < $4)"
done
set --

# Blocks freed with room left, then smaller ones until malloc fails, under
# 1.5 GiB: a request that takes a larger cached block splits it once the
# wall is near (the next arena would not fit), not only once it is hit, so
# blocks taken before the wall are not held whole (4x their class) until
# freed. Ratio to glibc's bytes of S: 512 x 1 MiB then 256 KiB and
# 300,000 B, 128 x 4 MiB then 1,100,000 B at least 0.95, 0.86 and 0.86
# (0.986, 0.900 and 0.908 measured; 0.730, 0.687 and 0.686 split only at
# the wall).
for rs in "1048576 512 262144 0.95" "1048576 512 300000 0.86" "4194304 128 1100000 0.86"; do
  set -- $rs
  run 1572864 "$tmp/reuse.glibc" "" "$LIM" reuse "$1" "$2" "$3" || bad "reuse $3 under glibc: $(cat "$tmp/reuse.glibc.err")"
  run 1572864 "$tmp/reuse.nbm" "$SO" "$LIM" reuse "$1" "$2" "$3" || bad "reuse $3 under nbmalloc: $(cat "$tmp/reuse.nbm.err")"
  read -r _ _ _ g < "$tmp/reuse.glibc" || true; read -r _ _ _ n < "$tmp/reuse.nbm" || true
  r=$(ratio "$n" "$g")
  echo "  ulimit -v 1572864: $2 x $1 freed, blocks of $3: glibc $g, nbmalloc $n (ratio $r)"
  at_least "$r" $4 "blocks of $3 after $2 x $1 freed: $n bytes, glibc $g (ratio $r < $4)"
done
set --

# Four threads run out together under 512 MiB (memory moves between sizes
# while others allocate); no block may be corrupted, every round must get
# blocks, and 100 MiB must be available after.
for r in 1 2 3; do
  if run 524288 "$tmp/thr.out" "$SO" "$LIM" threads 4 3; then ok; else
    bad "threads under 512 MiB: $(cat "$tmp/thr.out") $(head -c 400 "$tmp/thr.out.err")"; fi
done
echo "  $(cat "$tmp/thr.out")"

# --- 3. valid pointers, impossible requests ----------------------------------
for lib in "" "$SO"; do
  if run unlimited "$tmp/valid.out" "$lib" "$LIM" valid; then ok; else
    bad "valid (${lib:-glibc}): $(cat "$tmp/valid.out.err")"; fi
done

# --- 4. bad pointers ------------------------------------------------------------
if run unlimited "$tmp/bogus.out" "$SO" "$LIM" bogus; then ok; else bad "bogus: $(cat "$tmp/bogus.out.err")"; fi
for seed in 1 2; do
  if run unlimited "$tmp/fuzz.out" "$SO" "$LIM" fuzz 2000 "$seed"; then ok; else
    bad "fuzz seed $seed: $(cat "$tmp/fuzz.out") $(head -c 600 "$tmp/fuzz.out.err")"; fi
  echo "  fuzz seed $seed: $(cat "$tmp/fuzz.out")"
done

echo "nbmalloc limits: $pass passed, $fail failed"
[ "$fail" = 0 ]
