#!/usr/bin/env bash
# The back-end core must build freestanding and depend on nothing from libc:
# compile each core source with -ffreestanding -nostdinc (only the compiler's
# own headers: stddef, stdint, stdbool, stdatomic) and check
# that the objects, linked together into one relocatable object (ld -r), have
# no undefined symbol at all (nm -u), with gcc and with clang.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The core's source list is written once, in src/nbbs/sources.mk.
core=($(sed -n 's/^NBBS_CORE_SOURCES := //p' src/nbbs/sources.mk | tr ' ' '\n' | sed 's|^|src/nbbs/|') ${NBBS_FREESTANDING_PLANT:-})
status=0
for cc in gcc clang-14; do
  objs=()
  for f in "${core[@]}"; do
    o="$out/$(basename "$f" .c).$cc.o"
    $cc -std=c11 -O2 -Wall -Wextra -Werror -ffreestanding -fno-stack-protector \
        -nostdinc -isystem "$($cc -print-file-name=include)" \
        -mno-red-zone -fno-pic -Iinclude -Isrc/nbbs ${NBBS_FREESTANDING_EXTRA:-} -c "$f" -o "$o"
    objs+=("$o")
  done
  ld -r -o "$out/core.$cc.o" "${objs[@]}"
  undef=$(nm -u "$out/core.$cc.o" | awk '{print $2}' | tr '\n' ' ')
  if [ -n "$undef" ]; then
    echo "freestanding: core ($cc) needs: $undef"; status=1
  fi
done
# Only the platform header (and the public header, in its kernel branch) may
# include a system header. The compile above already proves which ones: with
# -nostdinc only the compiler's own freestanding headers can be found.
bad=$(grep -lE '^#include <' src/nbbs/*.h src/nbbs/*.inc "${core[@]}" | grep -v '^src/nbbs/nbbs_platform.h$' || true)
if [ -n "$bad" ]; then echo "freestanding: system headers included outside nbbs_platform.h: $bad"; status=1; fi
if [ $status -eq 0 ]; then
  echo "freestanding: ${#core[@]} core objects x 2 compilers, no undefined symbols: 1 passed, 0 failed"
else
  echo "freestanding: 0 passed, 1 failed"
fi
exit $status
