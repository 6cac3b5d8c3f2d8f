#!/usr/bin/env bash
# Installs everything the project needs on a fresh Debian machine (run as root,
# or with sudo available): compilers, sanitizer runtimes, the system allocators
# the benchmarks compare against, and a local Python venv with matplotlib.
# Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake ninja-build pkg-config python3-venv
      clang-14 libclang-rt-14-dev llvm-14
      libjemalloc-dev libmimalloc-dev libtcmalloc-minimal4 libgoogle-perftools-dev)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -c 'import matplotlib' 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check matplotlib
fi
echo "deps: ok"
