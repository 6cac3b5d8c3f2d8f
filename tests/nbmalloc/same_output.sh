#!/bin/sh
# same_output.sh SO PROGRAM ARGS...: runs PROGRAM with and without
# LD_PRELOAD=SO; fails unless both succeed with identical stdout and the
# preloaded run really used nbmalloc (NBM_SHOW_STATS output on stderr).
set -eu
so=$1; shift
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$@" > "$tmp/ref.out"
NBM_SHOW_STATS=1 LD_PRELOAD="$so" "$@" > "$tmp/nbm.out" 2> "$tmp/nbm.err"
grep -q "nbmalloc: statistics" "$tmp/nbm.err" || { echo "nbmalloc was not active"; cat "$tmp/nbm.err"; exit 1; }
cmp "$tmp/ref.out" "$tmp/nbm.out" || { echo "outputs differ"; diff "$tmp/ref.out" "$tmp/nbm.out" | head; exit 1; }
echo "same output: $* ($(wc -l < "$tmp/ref.out") lines)"
