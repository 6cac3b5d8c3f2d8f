#!/usr/bin/env bash
# Judges the serial log of one boot of the nbbs module.
#   check-log.sh LOG            -> exit 0 if the boot passed
#   check-log.sh --expect-fail LOG -> exit 0 if the module reported FAIL and
#                                  the boot otherwise ended cleanly (planted bug)
# A pass needs the module's verdict line "nbbs: RESULT PASS", no "nbbs: ... FAIL"
# line, and none of the kernel's trouble reports: panic, Oops, BUG, WARNING,
# lockdep, soft/hard lockup, RCU stall, general protection fault, KASAN/UBSAN.
set -uo pipefail
expect_fail=0
[ "${1:-}" = --expect-fail ] && { expect_fail=1; shift; }
log=$1
[ -s "$log" ] || { echo "kernel log: $log is empty or missing"; exit 1; }
trouble='Kernel panic|Oops|BUG:|WARNING:|general protection fault|possible circular locking|possible recursive locking|inconsistent lock state|lockdep|soft lockup|hard LOCKUP|rcu_sched self-detected stall|rcu: INFO|blocked for more than|UBSAN:|KASAN:|Call Trace:'
problems=$(tr -d '\r' < "$log" | grep -E "$trouble" | head -20)
verdict=$(tr -d '\r' < "$log" | grep -oE 'nbbs: RESULT (PASS|FAIL).*' | tail -1)
fails=$(tr -d '\r' < "$log" | grep -E 'nbbs: .*\bFAIL\b' | head -20)
if [ -n "$problems" ]; then
  echo "kernel log: the kernel reported trouble:"; echo "$problems"
fi
if [ $expect_fail -eq 1 ]; then
  # The planted bug must be caught by the module's own checks: a FAIL verdict.
  # (A crash would also show a bug, but not that the self-test can see it.)
  if [[ "$verdict" == "nbbs: RESULT FAIL"* ]]; then
    echo "kernel log: planted bug reported as expected:"; echo "$fails" | head -5
    exit 0
  fi
  echo "kernel log: planted bug NOT reported (verdict: ${verdict:-none})"; exit 1
fi
if [ -z "$verdict" ]; then echo "kernel log: no verdict line (nbbs: RESULT ...)"; exit 1; fi
if [ -n "$fails" ]; then echo "kernel log: FAIL lines:"; echo "$fails"; exit 1; fi
if [ -n "$problems" ]; then exit 1; fi
[[ "$verdict" == "nbbs: RESULT PASS"* ]] || { echo "kernel log: verdict $verdict"; exit 1; }
exit 0
