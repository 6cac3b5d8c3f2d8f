#!/usr/bin/env bash
# Builds nbbs.ko for kernel release KREL in a fresh staged copy of the sources
# at OUT (kernel/, src/nbbs/, include/), optionally with one planted bug
# (tests/explore/bugs/bugN.patch applied with patch -p1 to the copy).
# Fails if the build fails or prints any warning (the kernel's own flags:
# -Wall -Wundef ...).
#   build.sh KREL OUT [BUG]
set -euo pipefail
cd "$(dirname "$0")/../.."
krel=$1 out=$2 bug=${3:-}
rm -rf "$out"
mkdir -p "$out"
make -s -C kernel stage O="$(realpath "$out")" >/dev/null
if [ -n "$bug" ]; then
  p=tests/explore/bugs/bug$bug.patch
  [ -f "$p" ] || { echo "kernel build: no planted bug $p" >&2; exit 1; }
  patch -s -p1 -d "$out/src/nbbs" < "$p"
fi
log="$out/build.log"
if ! make -C "/lib/modules/$krel/build" M="$(realpath "$out")/kernel" modules >"$log" 2>&1; then
  cat "$log" >&2
  echo "kernel build: FAILED (log: $log)" >&2
  exit 1
fi
if grep -qiE 'warning:' "$log"; then
  grep -iE -B2 -A4 'warning:' "$log" >&2
  echo "kernel build: warnings (log: $log)" >&2
  exit 1
fi
[ -s "$out/kernel/nbbs.ko" ]
echo "kernel build: $out/kernel/nbbs.ko${bug:+ (planted bug $bug)}, no warning" >&2
