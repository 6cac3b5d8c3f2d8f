#!/usr/bin/env bash
# libnbbs inside a real Linux kernel: builds nbbs.ko (the core unchanged plus
# kernel/nbbs_kmod.c) against Debian's kernel headers with no warning, boots
# it in qemu (TCG, -smp 2) and checks the kernel log (scripts/kernel/boot.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
passed=0 failed=0
if bash scripts/kernel/boot.sh --name boot; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
fi
echo "kernel: $passed passed, $failed failed"
[ $failed -eq 0 ]
