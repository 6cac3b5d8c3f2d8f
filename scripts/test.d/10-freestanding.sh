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
# The kernel branch (nbbs_platform.h under __KERNEL__): the same core sources
# built by Kbuild against Debian's kernel headers, with the kernel's own flags
# (-nostdinc, -Wundef, ...), no warning allowed (scripts/kernel/build.sh), as
# part of nbbs.ko whose self-test file includes nbbs.h beside the kernel's
# headers (one uint64_t, the kernel's). Linked together, the core objects may
# need only what the kernel's compiler flags insert (ftrace's __fentry__, the
# stack protector, return/indirect thunks) and the running CPU's number
# (cpu_number, read by raw_smp_processor_id, the per-CPU hint hook): no
# function of the kernel's, no memset/memcpy.
if [ -z "${NBBS_FREESTANDING_NO_KERNEL:-}" ]; then
  krel=$(bash scripts/kernel/install.sh)
  kout=build/kernel/freestanding
  if bash scripts/kernel/build.sh "$krel" "$kout"; then
    kobjs=()
    for f in "${core[@]}"; do kobjs+=("$kout/src/nbbs/$(basename "$f" .c).o"); done
    ld -r -o "$out/core.kernel.o" "${kobjs[@]}"
    undef=$(nm -u "$out/core.kernel.o" | awk '{print $2}' \
            | grep -vxE '__fentry__|__stack_chk_fail|__x86_return_thunk|__x86_indirect_thunk_[a-z0-9]+|cpu_number' \
            | tr '\n' ' ' || true)
    if [ -n "$undef" ]; then echo "freestanding: core (kernel $krel) needs: $undef"; status=1; fi
  else
    echo "freestanding: core does not build in kernel $krel without warning"; status=1
  fi
fi
# Only the platform header (and the public header, in its kernel branch) may
# include a system header. The compile above already proves which ones: with
# -nostdinc only the compiler's own freestanding headers can be found.
bad=$(grep -lE '^#include <' src/nbbs/*.h src/nbbs/*.inc "${core[@]}" | grep -v '^src/nbbs/nbbs_platform.h$' || true)
if [ -n "$bad" ]; then echo "freestanding: system headers included outside nbbs_platform.h: $bad"; status=1; fi
if [ $status -eq 0 ]; then
  echo "freestanding: ${#core[@]} core objects x 2 compilers${krel:+ + kernel $krel}, no undefined symbols: 1 passed, 0 failed"
else
  echo "freestanding: 0 passed, 1 failed"
fi
exit $status
