#!/usr/bin/env bash
# Installs what the in-kernel test needs on a fresh Debian 12 machine and
# prints the kernel release it will build for and boot (e.g. 6.1.0-41-amd64):
#   - linux-headers-amd64 (the headers of Debian's current kernel) with gcc and
#     make, to build the module;
#   - qemu-system-x86, busybox-static and cpio, to boot it;
#   - the vmlinuz of the kernel image that matches those headers, taken out of
#     the .deb with apt-get download + dpkg-deb -x into build/kernel/vmlinuz-*,
#     so the machine gets none of the image package's boot-loader and
#     initramfs hooks (and no kernel installed for its own boot).
# Idempotent: a second run downloads and installs nothing. Messages go to
# stderr; stdout carries only the kernel release.
set -euo pipefail
cd "$(dirname "$0")/../.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS=(linux-headers-amd64 gcc make qemu-system-x86 busybox-static cpio)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "kernel deps: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq >&2
  # No recommends: qemu's would pull in a desktop's worth of packages.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# The release the metapackage points at, e.g. linux-headers-6.1.0-41-amd64.
hdr=$(dpkg-query -W -f='${Depends}' linux-headers-amd64 | tr ',' '\n' \
      | sed -n 's/^ *linux-headers-\([0-9][^ ]*-amd64\).*/\1/p' | head -1)
[ -n "$hdr" ] || { echo "kernel deps: cannot tell the release of linux-headers-amd64" >&2; exit 1; }
[ -d "/lib/modules/$hdr/build" ] || [ -d "/usr/src/linux-headers-$hdr" ] \
  || { echo "kernel deps: headers for $hdr not installed" >&2; exit 1; }

mkdir -p build/kernel
if [ ! -s "build/kernel/vmlinuz-$hdr" ]; then
  img="linux-image-$hdr"
  # The headers are installed at one exact version; take the image of the same
  # version (a newer image of the same ABI name would still load the module,
  # but the test should boot exactly what it built against).
  ver=$(dpkg-query -W -f='${Version}' "linux-headers-$hdr")
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "kernel deps: fetching vmlinuz from $img=$ver" >&2
  if [ -z "$(apt-cache policy "$img" 2>/dev/null | sed -n 's/^ *Candidate: //p')" ]; then
    $SUDO apt-get update -qq >&2
  fi
  (cd "$tmp" && apt-get download -qq "$img=$ver" >&2 2>/dev/null) \
    || (cd "$tmp" && apt-get download -qq "$img" >&2)
  # apt-get download writes as the _apt user when it can; root fallback is fine.
  dpkg-deb -x "$tmp"/linux-image-*.deb "$tmp/x"
  cp "$tmp/x/boot/vmlinuz-$hdr" "build/kernel/vmlinuz-$hdr"
  # The config helps the docs and a reader tell which debug options are on.
  cp "$tmp/x/boot/config-$hdr" "build/kernel/config-$hdr" 2>/dev/null || true
fi
echo "$hdr"
