#!/usr/bin/env bash
# Real programs under LD_PRELOAD=libnbmalloc.so must print exactly what they
# print with the system allocator: a Python script building and sorting large
# dictionaries, sort(1) of a large generated file, a multi-threaded C++
# program (std::string/vector/map), gcc and g++ compiles, and cmake. Uses the release build
# of scripts/test.sh (NBM_BUILD overrides the build directory).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${NBM_BUILD:-build/release}
SO=$PWD/$B/src/nbmalloc/libnbmalloc.so
[ -f "$SO" ] || { echo "nbmalloc preload: $SO not built"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
same() { sh tests/nbmalloc/same_output.sh "$SO" "$@"; }
pass=0

PY=$(command -v python3)
same "$PY" tests/nbmalloc/dicts.py; pass=$((pass + 1))

# ~40 MB of lines with repeated keys; sort with several threads and a small
# buffer so it merges runs.
awk 'BEGIN { srand(7); for (i = 0; i < 1500000; i++) printf "%08x %d line-%d\n", int(rand() * 4294967295), i % 1000, i }' > "$tmp/big.txt"
same sort --parallel=2 -S 8M "$tmp/big.txt"; pass=$((pass + 1))
same sort -k2,2n -k1,1 "$tmp/big.txt"; pass=$((pass + 1))

same "$B/tests/nbmalloc/nbm_test_cpp" 4 20000; pass=$((pass + 1))

# The compiler's output (assembly of one of our own files) must not change.
same gcc -O2 -S -o - -Iinclude -Isrc/nbmalloc src/nbmalloc/heap.c; pass=$((pass + 1))
same g++ -O1 -S -o - tests/nbmalloc/test_cpp.cpp; pass=$((pass + 1))

# cmake links gnutls, whose constructor calls malloc before nbmalloc's own
# constructor has run: the first allocation must initialise everything.
same cmake --version; pass=$((pass + 1))

echo "nbmalloc preload: $pass passed, 0 failed"
