#!/usr/bin/env bash
# Makes a busybox initramfs (gzip'd newc cpio) whose /init loads one module
# with the given parameters and powers the VM off.
#   initramfs.sh MODULE.ko OUT.cpio.gz [module parameters...]
# The module reports its verdict in the kernel log; /init does not rely on
# insmod's exit status (busybox insmod retries a module whose init fails).
set -euo pipefail
ko=$1 out=$2; shift 2
bb=$(command -v busybox)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,dev,proc,sys}
cp "$bb" "$root/bin/busybox"
# The kernel gives /init its stdio on /dev/console; as root we make the node,
# else /init mounts devtmpfs and reopens it.
mknod -m 600 "$root/dev/console" c 5 1 2>/dev/null || true
cp "$ko" "$root/nbbs.ko"
cat > "$root/init" <<INIT
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
[ -c /dev/console ] || { /bin/busybox mount -t devtmpfs devtmpfs /dev; exec >/dev/console 2>&1; }
echo "init: insmod nbbs.ko $*"
/bin/busybox insmod /nbbs.ko $*
echo "init: insmod status \$?"
/bin/busybox poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet --owner=0:0) | gzip -1 > "$out"
