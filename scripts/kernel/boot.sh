#!/usr/bin/env bash
# Builds nbbs.ko, boots it in a VM and judges the kernel log.
#   boot.sh [--bug N] [--expect-fail] [--name NAME] [module parameters...]
# Installs what it needs first (scripts/kernel/install.sh). The VM is
# qemu-system-x86_64 -smp 2 with Debian's kernel (the vmlinuz matching the
# installed headers) and a busybox initramfs whose /init loads the module and
# powers off; KVM when /dev/kvm really works, else TCG (software emulation).
# Boot parameters make any kernel warning, oops or soft lockup a panic, and a
# panic ends the VM at once (panic=-1 with -no-reboot).
# Output: build/kernel/NAME/{build.log,initramfs.cpio.gz,boot.log}; the
# module's result lines ("nbbs: ...") are echoed.
set -euo pipefail
cd "$(dirname "$0")/../.."
bug="" expect="" name=""
while [ $# -gt 0 ]; do
  case $1 in
    --bug) bug=$2; shift 2 ;;
    --expect-fail) expect=--expect-fail; shift ;;
    --name) name=$2; shift 2 ;;
    *) break ;;
  esac
done
name=${name:-${bug:+bug$bug}}
name=${name:-boot}
t0=$(date +%s)
krel=$(bash scripts/kernel/install.sh)
out=build/kernel/$name
bash scripts/kernel/build.sh "$krel" "$out" "$bug"
bash scripts/kernel/initramfs.sh "$out/kernel/nbbs.ko" "$out/initramfs.cpio.gz" "$@"

# TCG unless NBBS_KERNEL_ACCEL=kvm: on this project's machines /dev/kvm exists
# (nested) but a guest does not run on it: with -cpu host qemu aborts on an
# MSR write, with qemu64/kvm64 the guest hangs before its first message. A
# probe that could tell would cost a boot attempt and a timeout on every run.
accel=${NBBS_KERNEL_ACCEL:-tcg}
cpu=max accel_opt=tcg,thread=multi # one host thread per vCPU: the vCPUs really run at once
[ "$accel" = kvm ] && cpu=host accel_opt=kvm
echo "kernel boot: $krel, qemu $accel, -smp 2${bug:+, planted bug $bug}"
# preempt=full: the most preemption points Debian's kernel offers, so the
# self-test's threads are interleaved as much as the kernel allows.
# init_on_alloc=0: Debian's kernel zeroes every page alloc_pages hands out
# (CONFIG_INIT_ON_ALLOC_DEFAULT_ON); the benchmark compares allocators, not
# memset, and nbbs hands out frames without touching them.
append="console=ttyS0 panic=-1 panic_on_warn=1 oops=panic softlockup_panic=1 preempt=full nokaslr init_on_alloc=0"
set +e
echo "nbbs-boot: kernel=$krel accel=$accel smp=2 mem_mib=1024 bug=${bug:-none} cmdline=\"$append\"" > "$out/boot.log"
timeout "${NBBS_KERNEL_TIMEOUT:-300}" qemu-system-x86_64 -accel $accel_opt -cpu $cpu -smp 2 -m 1024 \
  -kernel "build/kernel/vmlinuz-$krel" -initrd "$out/initramfs.cpio.gz" \
  -append "$append" -nographic -no-reboot -monitor none -serial stdio \
  < /dev/null >> "$out/boot.log" 2>&1
rc=$?
set -e
[ $rc -eq 124 ] && echo "kernel boot: VM timed out" && echo "nbbs-boot: timed out" >> "$out/boot.log"
tr -d '\r' < "$out/boot.log" | grep -E '^\[ *[0-9.]+\] nbbs: ' | sed 's/^\[ *[0-9.]*\] //' || true
if bash scripts/kernel/check-log.sh $expect "$out/boot.log"; then
  echo "kernel boot: ${expect:+as expected, }passed in $(( $(date +%s) - t0 )) s (log: $out/boot.log)"
else
  echo "kernel boot: FAILED in $(( $(date +%s) - t0 )) s (log: $out/boot.log)"
  exit 1
fi
