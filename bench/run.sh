#!/usr/bin/env bash
# The benchmark suite, one command (`make bench`):
#   1. installs dependencies (scripts/deps.sh) and builds nbbs-bench (gcc
#      release build in build/release);
#   2. the main suite: every workload x allocator (as `nbbs-bench --list
#      --json` lists them: nothing here names a workload) at 1, 2, 4, 8
#      threads or the workload's own thread counts (churn 4, latency 8),
#      BENCH_REPEAT runs each, interleaved;
#   3. the back-end targets (cached at order 0 and 9, fill-cost at 5% and
#      95%, 5 runs each), the frame cache against lists-sl on every
#      page-frame workload and the churn re-allocation (7 runs each,
#      interleaved in one process) and the counting build's atomic
#      operations per op;
#   4. the front-end comparison: nbbs-bench's malloc allocator under glibc
#      and each LD_PRELOADed malloc, on every workload that declares a
#      front-end run (one process per run of a workload, parameter value
#      and thread count, the mallocs' runs interleaved round-robin with the
#      order rotated each round; the workload's own thread counts, else
#      1,2,4, and at least --frontend-runs runs per cell, more if the
#      workload asks; bench/merge_runs.py joins the processes' JSON), the
#      cells whose time is set by where the scheduler puts the threads
#      (--pin-cells) once more with the threads pinned, spread and pack
#      (nbbs-bench --pin; pinned-<label>-<part>.json, the same interleaving),
#      the memory-return experiment (bench/memreturn under each malloc,
#      --memreturn-rounds interleaved rounds), plus bench/lockfree_list;
#   5. bench/plot.py: PNGs in the results directory and the report.
#
# Options (flags or environment):
#   --scale S | BENCH_SCALE=S        smoke | quick (default) | paper
#   --workload W,.. | BENCH_WORKLOADS  main-suite workloads (default all)
#   --threads T,.. | BENCH_THREADS   every workload at these (default: 1,2,4,8
#                                    or the workload's own list)
#   --repeat N | BENCH_REPEAT        every workload this many runs (default 3, or
#                                    the workload's own count; targets and front-end 5)
#   --out DIR | BENCH_OUT            results directory (default bench/results)
#   --report F | BENCH_REPORT        report file (default REPORT.md)
#   --build DIR | BENCH_BUILD        build directory (default build/release)
#   --main-only | BENCH_MAIN_ONLY=1  skip targets, counting and front-end
#   --frontend-only | BENCH_FRONTEND_ONLY=1  only the front-end comparison
#                                    (the main suite's earlier results stay)
#   --frontend-runs N | BENCH_FE_RUNS  processes per malloc and front-end cell,
#                                    at least (default 7; 1 at smoke); 3-5
#                                    left some cells with spreads of +-50-99%
#   --memreturn-rounds N | BENCH_MR_ROUNDS  interleaved bench/memreturn runs
#                                    per malloc (default 1 at smoke and quick:
#                                    ~30 s a round at quick; 3 at paper)
#   --pin-cells L | BENCH_PIN_CELLS  front-end workloads and thread counts also run
#                                    pinned, spread and pack (nbbs-bench --pin), e.g.
#                                    'prodcons:2,4 larson:2,4' (default below; none: skip)
#   --pin-runs N | BENCH_PIN_RUNS    processes per malloc, pinned cell and mode (default 5;
#                                    1 at smoke): one placement, so less spread
#   --no-deps | BENCH_NO_DEPS=1      do not run scripts/deps.sh
# A paper-scale run of three workloads, kept apart from the quick results:
#   bash bench/run.sh --scale paper --workload linux-scalability,thread-test,constant-occupancy --main-only
set -euo pipefail
cd "$(dirname "$0")/.."

SCALE=${BENCH_SCALE:-quick}
WORKLOADS=${BENCH_WORKLOADS:-all}
THREADS=${BENCH_THREADS:-}
REPEAT=${BENCH_REPEAT:-}
OUT=${BENCH_OUT:-bench/results}
REPORT=${BENCH_REPORT:-REPORT.md}
BUILD=${BENCH_BUILD:-build/release}
MAIN_ONLY=${BENCH_MAIN_ONLY:-0}
FRONTEND_ONLY=${BENCH_FRONTEND_ONLY:-0}
NO_DEPS=${BENCH_NO_DEPS:-0}
MR_ROUNDS=${BENCH_MR_ROUNDS:-}
FE_RUNS=${BENCH_FE_RUNS:-7}
# The cells where the placement sets the time (docs/nbmalloc.md, "Thread
# placement"): prodcons at T=2 (both threads on one CPU: 0.02 s; on two: 0.08 s)
# and T=4, larson at T=2, thread-test at T=2 (2.7 ms against 5.5) and
# remote-free at T=2 (17 ms against 49); larson at T=4, where stop 27 had a
# miss, measures the same in every placement and shows that.
PIN_CELLS=${BENCH_PIN_CELLS-prodcons:2,4 larson:2,4 thread-test:2 remote-free:2}
PIN_RUNS=${BENCH_PIN_RUNS:-5}
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) SCALE=$2; shift 2 ;;
    --workload) WORKLOADS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --report) REPORT=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --main-only) MAIN_ONLY=1; shift ;;
    --frontend-only) FRONTEND_ONLY=1; shift ;;
    --memreturn-rounds) MR_ROUNDS=$2; shift 2 ;;
    --frontend-runs) FE_RUNS=$2; shift 2 ;;
    --pin-cells) PIN_CELLS=$2; shift 2 ;;
    --pin-runs) PIN_RUNS=$2; shift 2 ;;
    --no-deps) NO_DEPS=1; shift ;;
    -h|--help) sed -n '2,51p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case "$SCALE" in smoke|quick|paper) ;; *) echo "run.sh: --scale must be smoke, quick or paper" >&2; exit 2 ;; esac
case "$MR_ROUNDS" in ''|[1-9]|[1-9][0-9]) ;; *) echo "run.sh: --memreturn-rounds must be 1..99" >&2; exit 2 ;; esac
case "$FE_RUNS" in [1-9]|[1-9][0-9]) ;; *) echo "run.sh: --frontend-runs must be 1..99" >&2; exit 2 ;; esac
case "$PIN_RUNS" in [1-9]|[1-9][0-9]) ;; *) echo "run.sh: --pin-runs must be 1..99" >&2; exit 2 ;; esac
[ "$PIN_CELLS" != none ] || PIN_CELLS=
for c in $PIN_CELLS; do
  case "$c" in *:[1-9]*) ;; *) echo "run.sh: --pin-cells: '$c' is not workload:T,T..." >&2; exit 2 ;; esac
done
if [ "$MAIN_ONLY" = 1 ] && [ "$FRONTEND_ONLY" = 1 ]; then
  echo "run.sh: --main-only and --frontend-only exclude each other" >&2; exit 2
fi
# The targets and the front-end use 5 runs, except in the seconds-long smoke.
REPEAT5=5
[ "$SCALE" = smoke ] && REPEAT5=1
# The frame cache against lists-sl: 7 runs (5 at paper scale, where stress
# alone runs 5 s; 1 at smoke).
case "$SCALE" in smoke) REPEAT_CL=1 ;; paper) REPEAT_CL=5 ;; *) REPEAT_CL=7 ;; esac

[ "$NO_DEPS" = 1 ] || bash scripts/deps.sh

# --- build ---------------------------------------------------------------
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ >/dev/null
fi
cmake --build "$BUILD" --target nbbs-bench nbbs-bench-count
# Other engineers' programs the comparison uses; absent or broken is not fatal.
cmake --build "$BUILD" --target lockfree_list memreturn xcpu
# nbmalloc is this project's own: built unconditionally, a failure is fatal.
# (It was looked up first with `ninja -t targets all | grep -q`: once that
# listing outgrew the pipe's 64 KiB, grep's early exit killed ninja with
# SIGPIPE, pipefail made the test false, and the front-end comparison ran
# without nbmalloc, saying only "skipped".)
cmake --build "$BUILD" --target nbmalloc
BENCH="$BUILD/bench/nbbs-bench"
COUNT="$BUILD/bench/nbbs-bench-count"

mkdir -p "$OUT"
[ "$FRONTEND_ONLY" = 1 ] || rm -f "$OUT"/main-"$SCALE".json
# What the suite holds, for this script and for plot.py.
"$BENCH" --list --json > "$OUT/workloads.json"
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
if [ "$MAIN_ONLY" != 1 ]; then
  [ "$FRONTEND_ONLY" = 1 ] || rm -f "$OUT"/backend-*.json "$OUT"/count.json "$OUT"/count-cache.json
  rm -f "$OUT"/frontend-*.json "$OUT"/pinned-*.json "$OUT"/memreturn-*.json "$OUT"/lockfree_list.txt "$OUT"/notes.txt
fi
note() { echo "$*" | tee -a "$OUT/notes.txt"; }
t0=$(date +%s)
src="git $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD -- src include 2>/dev/null || src="$src plus uncommitted changes in src/ or include/"
# Kept per scale: a later quick run must not drop what the paper run was built from.
echo "scale $SCALE: library source $src, built in $BUILD, $(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$OUT/source-$SCALE.txt"

# The machine's cost of moving a cache line between two CPUs (bench/xcpu),
# probed around the main suite (xcpu-main.txt) and before the front-end runs
# and after each workload's (xcpu.txt): a virtual machine's host may move its
# vCPUs between cores that share a cache and cores that do not, and every
# cross-thread cell pays it per hand-off (stop 32: 90-440 ns).
XCPU="$BUILD/bench/xcpu"
xcpu_probe() {
  local l
  [ -x "$XCPU" ] || return 0
  l=$("$XCPU" < /dev/null 2>/dev/null | grep '^xcpu ') && echo "when=$1 $l" >> "$OUT/$2"
  return 0
}
[ -x "$XCPU" ] || note "xcpu: $XCPU not built, the cross-CPU probe skipped"

# --- main suite ------------------------------------------------------------
if [ "$FRONTEND_ONLY" != 1 ]; then
  rm -f "$OUT/xcpu-main.txt"
  xcpu_probe start xcpu-main.txt
  echo "== main suite: scale $SCALE, threads ${THREADS:-1,2,4,8 or each workload own list}, ${REPEAT:-3 or each workload own count} runs each"
  "$BENCH" --scale "$SCALE" --workload "$WORKLOADS" ${THREADS:+--threads "$THREADS"} ${REPEAT:+--repeat "$REPEAT"} \
    --json "$OUT/main-$SCALE.json"
  xcpu_probe end xcpu-main.txt
fi

if [ "$MAIN_ONLY" != 1 ] && [ "$FRONTEND_ONLY" != 1 ]; then
  # --- back-end targets ----------------------------------------------------
  echo "== back-end targets ($REPEAT5 runs each)"
  "$BENCH" --scale "$SCALE" --workload cached --order 0,9 --threads 1,2,8 --repeat "$REPEAT5" \
    --allocator nbbs-tree,nbbs-bunch --json "$OUT/backend-cached.json"
  "$BENCH" --scale "$SCALE" --workload fill-cost --fill 5,95 --threads 1 --repeat "$REPEAT5" \
    --allocator nbbs-tree,nbbs-bunch --json "$OUT/backend-fill.json"

  # --- the frame cache against lists-sl (issue 11) -------------------------
  # Both allocators in one process, runs interleaved run by run (nbbs-bench
  # --repeat), on every page-frame workload (groups page and llfree) at
  # every thread count, and the churn experiment's re-allocation at 90 %.
  PAGE_WLS=$("$PY" -c 'import json, sys
print(",".join(w["name"] for w in json.load(open(sys.argv[1]))["workloads"]
               if w["group"] in ("page", "llfree") and w["plot"] == "threads"))' "$OUT/workloads.json")
  echo "== frame cache against lists-sl ($REPEAT_CL runs each, interleaved)"
  "$BENCH" --scale "$SCALE" --workload "$PAGE_WLS" --allocator nbbs-cache,lists-sl \
    --threads "${THREADS:-1,2,4,8}" --repeat "$REPEAT_CL" --quiet --json "$OUT/cache-vs-lists.json"
  "$BENCH" --scale "$SCALE" --workload churn,churn-mixed,churn-o4,churn-o4-mixed --fill 90 \
    --allocator nbbs-cache,lists-sl --repeat "$REPEAT_CL" --quiet --json "$OUT/cache-vs-lists-churn.json"

  # --- counting build ------------------------------------------------------
  echo "== counting build: atomic operations per operation"
  "$COUNT" --scale "$SCALE" --workload cached,linux-scalability,thread-test,constant-occupancy,larson \
    --allocator nbbs-tree,nbbs-bunch --threads "${THREADS:-1,2,4,8}" --repeat 1 --quiet --json "$OUT/count.json"
  # The frame cache's locked instructions beside lists-sl's (its lock's
  # exchanges) on the page-frame workloads, at 1 thread (issue 11).
  "$COUNT" --scale "$SCALE" --workload "$PAGE_WLS" --allocator nbbs-cache,nbbs-bunch,lists-sl --threads 1 \
    --repeat 1 --quiet --json "$OUT/count-cache.json"
fi

if [ "$MAIN_ONLY" != 1 ]; then
  # --- front-end comparison -------------------------------------------------
  echo "== front-end comparison: one process per run, runs interleaved across the mallocs"
  LIBDIR=/usr/lib/x86_64-linux-gnu
  mimalloc=$( (dpkg -L libmimalloc2.0 2>/dev/null || true) | grep -E '/libmimalloc\.so\.2$' | head -1)
  [ -n "$mimalloc" ] || mimalloc=$LIBDIR/libmimalloc.so.2
  nbmalloc=$(find "$BUILD" -path '*src/nbmalloc/*' -name libnbmalloc.so 2>/dev/null | head -1)
  FE_MALLOCS=("glibc:" "jemalloc:$LIBDIR/libjemalloc.so.2" "mimalloc:$mimalloc"
              "tcmalloc:$LIBDIR/libtcmalloc_minimal.so.4" "nbmalloc:$nbmalloc")
  # The mallocs present: FE_LABELS[i] under LD_PRELOAD=FE_LIBS[i] (glibc: none).
  FE_LABELS=()
  FE_LIBS=()
  for pair in "${FE_MALLOCS[@]}"; do
    label=${pair%%:*}
    lib=${pair#*:}
    if [ "$label" != glibc ] && [ ! -f "$lib" ]; then
      note "front-end: $label skipped (library ${lib:-libnbmalloc.so} not found)"
      continue
    fi
    FE_LABELS+=("$label")
    FE_LIBS+=("$lib")
  done
  nm=${#FE_LABELS[@]}
  echo "   mallocs: ${FE_LABELS[*]}"
  # One line per workload in the comparison: name, its flags at this scale
  # without its parameter option, its parameter option and values ("-" when
  # the workload sweeps no parameter), its thread counts (its own list, else
  # 1,2,4) and runs (its own count, else 5).
  FE_LIST=$("$PY" -c 'import json, sys
scale = sys.argv[2]
for w in json.load(open(sys.argv[1]))["workloads"]:
    if not w["malloc_ok"] or w["frontend"] is None:
        continue
    flags = (w["frontend"] or "").split()
    if scale == "quick":
        flags += (w["frontend_quick"] or "").split()
    opt, values, rest = "-", "-", []
    i = 0
    while i < len(flags):  # the parameter option, last one wins as in nbbs-bench
        f = flags[i]
        if w["param"] != "none" and f == "--" + w["param"] and i + 1 < len(flags):
            opt, values = f, flags[i + 1]
            i += 2
            continue
        if w["param"] != "none" and f.startswith("--" + w["param"] + "="):
            opt, values = f.split("=", 1)
        else:
            rest.append(f)
        i += 1
    print(w["name"], " ".join(rest) or "-", opt, values, w["threads"] or "1,2,4", w["repeat"] or 5,
          sep="\t")' "$OUT/workloads.json" "$SCALE")
  # Every run is a process of its own (a fresh heap: nothing kept from an
  # earlier run, and VmHWM the peak of that run alone). Per workload,
  # parameter value and thread count: round 1 of every malloc, then round
  # 2, ..., each round's order rotated by one, so a change in the machine's
  # load falls on all mallocs alike and none always runs first or last.
  # Each process's JSON goes to $fetmp; merge_runs.py then joins the runs of
  # one malloc and workload into frontend-<label>-<part>.json, the document
  # nbbs-bench --repeat would have written.
  fetmp="$OUT/frontend-runs.tmp"
  rm -rf "$fetmp"
  mkdir -p "$fetmp"
  # fe_part PREFIX PART ROUNDS THREADS PIN: every malloc's runs of workload
  # $wl (flags $fe, parameter $popt over $pvals) at the thread counts THREADS
  # with nbbs-bench --pin PIN, ROUNDS interleaved rounds, merged into
  # $OUT/PREFIX-<label>-PART.json; counts its processes in nproc.
  fe_part() {
    local prefix=$1 pt=$2 rounds=$3 threads=$4 pin=$5 T v r s i label lib f extra
    local -a tl vl
    for i in $(seq 0 $((nm - 1))); do : > "$fetmp/${FE_LABELS[$i]}-$prefix-$pt.list"; done
    IFS=, read -r -a tl <<< "$threads"
    IFS=, read -r -a vl <<< "$pvals"
    for T in "${tl[@]}"; do
      for v in "${vl[@]}"; do
        extra="--workload $wl"
        [ "$fe" = - ] || extra="$extra $fe"
        [ "$popt" = - ] || extra="$extra $popt $v"
        for r in $(seq "$rounds"); do
          for s in $(seq 0 $((nm - 1))); do
            i=$(( (s + r - 1) % nm ))
            label=${FE_LABELS[$i]}
            lib=${FE_LIBS[$i]}
            f="$fetmp/$label-$prefix-$pt-T$T-v$v-r$r.json"
            nproc=$((nproc + 1))
            # shellcheck disable=SC2086 # $extra is a list of flags
            if env ${lib:+LD_PRELOAD=$lib} "$BENCH" --allocator malloc $extra --threads "$T" --pin "$pin" \
                 --repeat 1 --scale "$SCALE" --label "$label" --quiet --json "$f" > /dev/null < /dev/null; then
              echo "$r $s $f" >> "$fetmp/$label-$prefix-$pt.list"
            else
              note "front-end: $label run FAILED ($extra --threads $T --pin $pin, round $r), that run is left out"
            fi
          done
        done
      done
    done
    for label in "${FE_LABELS[@]}"; do
      "$PY" bench/merge_runs.py --list "$fetmp/$label-$prefix-$pt.list" --out "$OUT/$prefix-$label-$pt.json" \
        || { note "front-end: $label has no result for $wl (--pin $pin)"; rm -f "$OUT/$prefix-$label-$pt.json"; }
    done
  }
  for c in $PIN_CELLS; do
    cut -f1 <<< "$FE_LIST" | grep -qx "${c%%:*}" || note "front-end: --pin-cells names ${c%%:*}, not a front-end workload"
  done
  rm -f "$OUT/xcpu.txt"
  xcpu_probe start xcpu.txt
  tfe=$(date +%s)
  part=0
  ppart=0
  tpin=0
  while IFS=$'\t' read -r wl fe popt pvals fet fer; do
    part=$((part + 1))
    [ "$fer" -ge "$FE_RUNS" ] || fer=$FE_RUNS
    [ "$SCALE" != smoke ] || fer=1
    tp=$(date +%s)
    nproc=0
    fe_part frontend "$part" "$fer" "$fet" none
    echo "   $wl: $(( $(date +%s) - tp )) s, $nproc processes ($fer rounds)"
    xcpu_probe "$wl" xcpu.txt
    # The same cells pinned, where the placement sets the time: both modes
    # of one workload in parts of their own (merge_runs.py keys no pin).
    for c in $PIN_CELLS; do
      [ "${c%%:*}" = "$wl" ] || continue
      pr=$PIN_RUNS
      [ "$SCALE" != smoke ] || pr=1
      tp=$(date +%s)
      nproc=0
      for pin in spread pack; do
        ppart=$((ppart + 1))
        fe_part pinned "$ppart" "$pr" "${c#*:}" "$pin"
      done
      tpin=$((tpin + $(date +%s) - tp))
      echo "   $wl pinned (T=${c#*:}, spread and pack): $(( $(date +%s) - tp )) s, $nproc processes ($pr rounds)"
    done
  done <<< "$FE_LIST"
  rm -rf "$fetmp"
  echo "   front-end runs: $(( $(date +%s) - tfe )) s, of which pinned $tpin s"
  # The memory-return experiment: bench/memreturn under each malloc (1 GiB
  # of 64-byte objects freed, then RSS sampled while running, after
  # malloc_trim and idle), MR_ROUNDS processes per malloc interleaved the
  # same way: memreturn-<label>-<round>.json. A round costs ~6 s per malloc
  # at quick scale, so quick makes one unless asked for more.
  mr="$BUILD/bench/memreturn"
  case "$SCALE" in
    smoke) mr_args="--mib 16 --run-s 0.2 --trim-s 0.1 --idle-s 0.1"; : "${MR_ROUNDS:=1}" ;;
    quick) mr_args="--mib 1024 --run-s 2.5 --trim-s 0.5 --idle-s 1.5"; : "${MR_ROUNDS:=1}" ;;
    paper) mr_args="--mib 1024 --run-s 6 --trim-s 2 --idle-s 6"; : "${MR_ROUNDS:=3}" ;;
  esac
  if [ -x "$mr" ]; then
    echo "-- memory return ($mr_args, $MR_ROUNDS rounds)"
    tp=$(date +%s)
    for r in $(seq "$MR_ROUNDS"); do
      for s in $(seq 0 $((nm - 1))); do
        i=$(( (s + r - 1) % nm ))
        label=${FE_LABELS[$i]}
        lib=${FE_LIBS[$i]}
        # shellcheck disable=SC2086 # $mr_args is a list of flags
        env ${lib:+LD_PRELOAD=$lib} "$mr" $mr_args --label "$label" --json "$OUT/memreturn-$label-$r.json" \
          < /dev/null || { note "memreturn: $label round $r FAILED, left out"; rm -f "$OUT/memreturn-$label-$r.json"; }
      done
    done
    echo "   memreturn: $(( $(date +%s) - tp )) s"
  else
    note "memreturn: $mr not built, skipped"
  fi
  lfl="$BUILD/bench/lockfree_list"
  if [ -x "$lfl" ]; then
    secs=0.5
    [ "$SCALE" = smoke ] && secs=0.2
    for pair in "glibc:" "nbmalloc:$nbmalloc"; do
      label=${pair%%:*}
      lib=${pair#*:}
      [ "$label" = glibc ] || [ -f "$lib" ] || { note "lockfree_list: $label skipped (no library)"; continue; }
      for T in 1 2 4; do
        for r in $(seq "$REPEAT5"); do
          line=$(env ${lib:+LD_PRELOAD=$lib} "$lfl" --threads "$T" --seconds "$secs" 2>/dev/null | grep '^lockfree_list ' | tail -1) \
            || line=""
          [ -n "$line" ] && echo "label=$label $line" >> "$OUT/lockfree_list.txt" \
            || note "lockfree_list: $label T=$T run $r printed no result line"
        done
      done
    done
  else
    note "lockfree_list: $lfl not built, skipped"
  fi
fi

# --- plots and report ------------------------------------------------------
echo "== plots and report"
"$PY" bench/plot.py --results "$OUT" --report "$REPORT"
echo "== done in $(( $(date +%s) - t0 )) s: $REPORT, plots in $OUT/"
