#!/usr/bin/env bash
# libnbbs inside a real Linux kernel (docs/kernel.md):
#  1. builds nbbs.ko (the core unchanged plus kernel/nbbs_kmod.c) against
#     Debian's kernel headers with no warning, boots it in qemu (TCG, -smp 2)
#     and checks the kernel log: verdict PASS, no FAIL line, no panic, Oops,
#     BUG, WARNING, lockdep, lockup or hung-task report;
#  2. boots it again with planted bug 4 (tests/explore/bugs/bug4.patch: a
#     plain store where phase 3's CAS belongs) compiled in: the module's own
#     checks must report FAIL, so the in-kernel test is shown able to fail.
# Both boots skip nothing but the benchmark's repetitions of the first (the
# normal boot times one repetition; make kernel-bench runs the full one).
set -euo pipefail
cd "$(dirname "$0")/../.."
passed=0 failed=0
run() {
  if bash scripts/kernel/boot.sh "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
}
run --name boot
run --bug 4 --expect-fail reps=0
echo "kernel: $passed passed, $failed failed"
[ $failed -eq 0 ]
