#!/usr/bin/env bash
# Benchmark smoke test (seconds): runs bench/run.sh at the smoke scale into a
# temporary directory and checks that the JSON parses and has the fields the
# report needs, that every workload and allocator ran (including the churn
# and latency experiments, whose figures must be consistent: free huge blocks
# never above the bound, percentiles in order), that `--list --json` agrees
# with `--list`, that the plots are PNG files and that the report has its
# sections, including the front-end shapes (malloc only, page faults per
# run, one process per run joined by bench/merge_runs.py) and the
# memory-return experiment (bench/memreturn: its samples cover the run, trim
# and idle phases; it refuses bad options), and the pinned runs (nbbs-bench
# --pin: each thread on the CPU its mode names; run.sh's pinned cells and
# their table; a bad mode refused), and the cross-CPU probe (bench/xcpu: its
# line, its refusals, run.sh's probe files and the report's lines; ab.py
# --xcpu). No timing is asserted.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BENCH_BUILD:-build/release}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -x "$BUILD/bench/nbbs-bench" ] || [ ! -x "$BUILD/bench/nbbs-bench-count" ]; then
  [ -f "$BUILD/build.ninja" ] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD" --target nbbs-bench nbbs-bench-count
fi
B="$BUILD/bench/nbbs-bench"
[ -x "$BUILD/bench/memreturn" ] || cmake --build "$BUILD" --target memreturn
[ -x "$BUILD/bench/xcpu" ] || cmake --build "$BUILD" --target xcpu
X="$BUILD/bench/xcpu"
for bad in "--trials 0" "--trials 100" "--trips x" "--no-such-option" "--trials"; do
  # shellcheck disable=SC2086 # $bad is a list of arguments
  if "$X" $bad >/dev/null 2>&1; then
    echo "bench-smoke: xcpu accepted $bad" >&2; exit 1
  fi
done
# One line: the median round trip between the first two CPUs (-1 on one CPU).
"$X" --trials 3 --trips 1000 | grep -Eq '^xcpu cpus=[0-9]+(,[0-9]+ round_trip_ns=[0-9.]+ min=[0-9.]+ max=[0-9.]+ trials=3| round_trip_ns=-1 .*)$' \
  || { "$X" --trials 3 --trips 1000; echo "bench-smoke: xcpu printed no result line" >&2; exit 1; }
if command -v taskset > /dev/null; then
  taskset -c 0 "$X" --trials 1 --trips 10 | grep -q '^xcpu cpus=0 round_trip_ns=-1 ' \
    || { echo "bench-smoke: xcpu on one CPU did not say so" >&2; exit 1; }
fi
for bad in "--mib 0" "--interval-ms x" "--no-such-option" "--json"; do
  # shellcheck disable=SC2086 # $bad is a list of arguments
  if "$BUILD/bench/memreturn" $bad >/dev/null 2>&1; then
    echo "bench-smoke: memreturn accepted $bad" >&2; exit 1
  fi
done

# The command line must refuse what it does not know.
if "$B" --workload no-such-workload --quiet >/dev/null 2>&1; then
  echo "bench-smoke: an unknown workload was accepted" >&2; exit 1
fi
"$B" --help > "$tmp/help.txt"
# A bad --pin is refused, saying what it takes.
if "$B" --workload prodcons --allocator malloc --pin sideways --quiet > /dev/null 2> "$tmp/pin.err"; then
  echo "bench-smoke: --pin sideways was accepted" >&2; exit 1
fi
grep -q -- "--pin must be none, spread or pack, not 'sideways'" "$tmp/pin.err" \
  || { cat "$tmp/pin.err"; echo "bench-smoke: --pin sideways refused without the message" >&2; exit 1; }

# bench/ab.py (the A/B tool the docs cite): two rounds of two variants, each
# row with its median [min-max]; a malformed variant is refused.
python3 bench/ab.py -r 2 -v one="$B" -v two="$B" -m pair_ns \
  -c '--allocator nbbs-bunch --workload cached --threads 1 --scale smoke' > "$tmp/ab.txt" 2> "$tmp/ab.err" \
  || { cat "$tmp/ab.err"; echo "bench-smoke: ab.py failed" >&2; exit 1; }
for v in one two; do
  grep -Eq "nbbs-bunch:0 +$v: pair_ns [0-9.e+]+ \[[0-9.e+]+-[0-9.e+]+\]$" "$tmp/ab.txt" \
    || { cat "$tmp/ab.txt"; echo "bench-smoke: ab.py printed no row for $v" >&2; exit 1; }
done
python3 bench/ab.py -r 1 -v one="$B" -m pair_ns --xcpu "$X" \
  -c '--allocator nbbs-bunch --workload cached --threads 1 --scale smoke' > "$tmp/abx.txt" 2> "$tmp/abx.err" \
  || { cat "$tmp/abx.err"; echo "bench-smoke: ab.py --xcpu failed" >&2; exit 1; }
grep -Eq '^xcpu round trip before each round, ns: -?[0-9.]+$' "$tmp/abx.txt" \
  || { cat "$tmp/abx.txt"; echo "bench-smoke: ab.py --xcpu printed no probe" >&2; exit 1; }
if python3 bench/ab.py -r 1 -v one="$B" --xcpu "$tmp/no-such-xcpu" -c '--workload cached' > /dev/null 2>&1; then
  echo "bench-smoke: ab.py accepted an --xcpu that does not exist" >&2; exit 1
fi
if python3 bench/ab.py -v "$B" -c '--workload cached' > /dev/null 2>&1; then
  echo "bench-smoke: ab.py accepted a variant without a name" >&2; exit 1
fi

bash bench/run.sh --scale smoke --threads 1,2 --repeat 1 --no-deps --build "$BUILD" \
  --out "$tmp/results" --report "$tmp/REPORT.md" > "$tmp/run.log" 2>&1 \
  || { tail -40 "$tmp/run.log"; echo "bench-smoke: run.sh failed" >&2; exit 1; }

PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
"$PY" - "$tmp" "$B" <<'PYEOF'
import json, os, subprocess, sys
tmp, bench = sys.argv[1], sys.argv[2]
res = os.path.join(tmp, "results")
errors = []

def check(cond, msg):
    if not cond:
        errors.append(msg)

names = subprocess.run([bench, "--list"], capture_output=True, text=True, check=True).stdout
wl_names = [l.split()[0] for l in names.split("Allocators:")[0].splitlines()[1:] if l.strip()]
al_names = [l.split()[0] for l in names.split("Allocators:")[1].splitlines() if l.strip()]
help_text = open(os.path.join(tmp, "help.txt")).read()
lst = json.loads(subprocess.run([bench, "--list", "--json"], capture_output=True, text=True, check=True).stdout)
check([w["name"] for w in lst["workloads"]] == wl_names, "--list --json workloads differ from --list")
check([a["name"] for a in lst["allocators"]] == al_names, "--list --json allocators differ from --list")
for w in lst["workloads"]:
    for k in ("source", "help", "group", "param", "metric", "plot"):
        check(w.get(k), f"--list --json: workload {w['name']} has no {k}")
for w in wl_names:
    check(w in help_text, f"--help does not describe {w}")

SUMMARY = ["wall_s", "ops_per_s", "ns_per_op", "pair_ns", "cpu_pair_ns", "alloc_ns", "free_ns", "alloc_cpu_ns",
           "free_cpu_ns", "int_frag"]
RUN = ["wall_s", "ops", "allocs", "frees", "failed", "ops_per_s", "ns_per_op", "alloc_ns", "free_ns",
       "alloc_cpu_ns", "free_cpu_ns",
       "thread_ops_min", "thread_ops_max", "int_frag", "peak_rss_kb", "minflt", "start_skew_us", "rq_wait_us",
       "vcsw", "frag"]

def load(name):
    path = os.path.join(res, name)
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:
        errors.append(f"{name}: {e}")
        return None

def check_doc(name, doc, counting=False):
    for k in ("tool", "label", "scale", "repeat", "machine", "results", "elapsed_s"):
        check(k in doc, f"{name}: no '{k}'")
    check(doc.get("results"), f"{name}: no results")
    for r in doc.get("results", []):
        tag = f"{name}: {r.get('workload')}/{r.get('allocator')}/T={r.get('threads')}"
        for k in ("workload", "allocator", "threads", "param", "value", "metric", "config", "meta_bytes",
                  "summary", "runs"):
            check(k in r, f"{tag}: no '{k}'")
        for k in SUMMARY:
            s = r["summary"].get(k, {})
            check(all(x in s for x in ("median", "min", "max")), f"{tag}: summary {k} incomplete")
        check(len(r["runs"]) == doc["repeat"], f"{tag}: {len(r['runs'])} runs, expected {doc['repeat']}")
        for x in r["runs"]:
            for k in RUN:
                check(k in x, f"{tag}: run has no '{k}'")
            check(x.get("ops", 0) > 0 and x.get("wall_s", 0) > 0, f"{tag}: a run did no work")
            if counting:
                at = x.get("atomics")
                check(at and at["cas"] + at["rmw"] > 0, f"{tag}: counting run counted no atomic operation")

main = load("main-smoke.json")
if main:
    check_doc("main-smoke.json", main)
    seen_w = {r["workload"] for r in main["results"]}
    seen_a = {r["allocator"] for r in main["results"]}
    check(seen_w == set(wl_names), f"main: workloads missing: {set(wl_names) - seen_w}")
    check(seen_a == set(al_names), f"main: allocators missing: {set(al_names) - seen_a}")
    check({r["threads"] for r in main["results"]} == {1, 2}, "main: thread counts are not 1,2")
    only = {w["name"] for w in lst["workloads"] if w.get("malloc_only")}
    check(only, "no malloc-only workload")
    for r in main["results"]:
        if r["workload"] in only:
            check(r["allocator"] == "malloc", f"main: malloc-only {r['workload']} ran on {r['allocator']}")
    plots = {w["name"]: w["plot"] for w in lst["workloads"]}
    churn = [r for r in main["results"] if plots.get(r["workload"]) == "churn"]
    lat = [r for r in main["results"] if plots.get(r["workload"]) == "cdf"]
    check(churn and lat, "main: no churn or no latency results")
    for r in churn:
        tag = f"{r['workload']}/{r['allocator']}/T={r['threads']}/{r['value']}"
        for x in r["runs"]:
            m = x.get("metrics", {})
            check(all(k in m for k in ("huge_free", "huge_ideal", "huge_bound", "huge_failed")),
                  f"{tag}: churn metrics missing")
            if "huge_bound" in m:
                check(m["huge_free"] <= m["huge_bound"] and m["huge_ideal"] <= m["huge_bound"],
                      f"{tag}: more free huge blocks than the bound allows: {m}")
    splits = set()
    for r in lat:
        tag = f"{r['workload']}/{r['allocator']}/T={r['threads']}"
        for x in r["runs"]:
            m = x.get("metrics", {})
            ps = [m.get(k) for k in ("p50", "p99", "p99.9", "max")]
            check(None not in ps and m.get("samples", 0) > 0, f"{tag}: latency metrics missing")
            if None not in ps:
                check(ps == sorted(ps), f"{tag}: percentiles out of order: {ps}")
            # The on-CPU split (rseq + schedstat) is made exactly where the
            # run says so, and each on-CPU figure is at most the figure of
            # the same windows as timed (one histogram step of 3 % aside).
            split = m.get("desched_split")
            on = [m.get(k) for k in ("oncpu_p99.9", "oncpu_max", "desched_share", "floor_oncpu_max")]
            check(split in (0, 1), f"{tag}: desched_split missing")
            check((None not in on) == (split == 1), f"{tag}: on-CPU metrics {on} with desched_split {split}")
            if split == 1 and None not in on and None not in ps:
                check(m["oncpu_max"] <= m["max"] and m["oncpu_p99.9"] <= 1.04 * m["p99.9"],
                      f"{tag}: an on-CPU figure above the timed one: {m}")
                check(0 <= m["desched_share"] <= 1 and m["floor_oncpu_max"] <= m["floor_max"],
                      f"{tag}: desched_share or the floor's on-CPU max out of range: {m}")
                splits.add(r["allocator"])
    print("bench smoke: latency's on-CPU split " + (f"made for {', '.join(sorted(splits))}" if splits
                                                     else "not available here (no rseq area or schedstat)"))
for f in ("backend-cached.json", "backend-fill.json"):
    d = load(f)
    if d:
        check_doc(f, d)
# The frame cache against lists-sl (issue 11): both allocators on every
# page-frame workload, and the churn experiment's four variants at 90 %.
page_wls = {w["name"] for w in lst["workloads"] if w["group"] in ("page", "llfree") and w["plot"] == "threads"}
for f, want_w in (("cache-vs-lists.json", page_wls),
                  ("cache-vs-lists-churn.json", {"churn", "churn-mixed", "churn-o4", "churn-o4-mixed"})):
    d = load(f)
    if d:
        check_doc(f, d)
        check({r["workload"] for r in d["results"]} == want_w, f"{f}: workloads {sorted({r['workload'] for r in d['results']})}")
        check({r["allocator"] for r in d["results"]} == {"nbbs-cache", "lists-sl"}, f"{f}: allocators")
d = load("count.json")
if d:
    check(d.get("counting") == 1, "count.json: not from the counting build")
    check_doc("count.json", d, counting=True)
# The cache's locked instructions beside lists-sl's (issue 11): lists-sl's
# lock is counted (one exchange or more per operation), so the table compares
# like with like; the cache takes at least one per operation (a claim or a mark).
d = load("count-cache.json")
if d:
    check(d.get("counting") == 1, "count-cache.json: not from the counting build")
    check_doc("count-cache.json", d, counting=True)
    check({r["workload"] for r in d["results"]} == page_wls, "count-cache.json: workloads")
    check({r["allocator"] for r in d["results"]} == {"nbbs-cache", "nbbs-bunch", "lists-sl"}, "count-cache.json: allocators")
    for r in d["results"]:
        x = r["runs"][0]
        at, ops = x.get("atomics"), x.get("ops", 0)
        if r["allocator"] in ("nbbs-cache", "lists-sl") and at and ops:
            check((at["cas"] + at["rmw"]) >= ops, f"count-cache.json: {r['workload']}/{r['allocator']}: "
                  f"{at['cas'] + at['rmw']} locked instructions for {ops} operations")
fe = [f for f in os.listdir(res) if f.startswith("frontend-") and f.endswith(".json")]
check(any(f.startswith("frontend-glibc") for f in fe), "no glibc front-end results")
# nbmalloc is the product the comparison is for: its absence is a failure,
# not a note (run.sh once skipped it, saying only "skipped").
check(any(f.startswith("frontend-nbmalloc") for f in fe), "no nbmalloc front-end results")
fe_seen = set()
for f in fe:
    d = load(f)
    if d:
        check_doc(f, d)
        check(f.startswith("frontend-" + d["label"] + "-"), f"{f}: label {d['label']}")
        fe_seen |= {r["workload"] for r in d["results"]}
        # One process per run (bench/merge_runs.py joined them): as many
        # processes as runs, each run tagged with its round and slot.
        nruns = sum(len(r["runs"]) for r in d["results"])
        check(d.get("processes") == nruns, f"{f}: {d.get('processes')} processes for {nruns} runs")
        for r in d["results"]:
            check(all("round" in x and "slot" in x for x in r["runs"]), f"{f}: a run has no round or slot")
            check(sorted(x["round"] for x in r["runs"]) == list(range(1, len(r["runs"]) + 1)),
                  f"{f}: {r['workload']} T={r['threads']}: rounds are not 1..{len(r['runs'])}")
fe_want = {w["name"] for w in lst["workloads"] if w["malloc_ok"] and w["frontend"] is not None}
check(fe_seen == fe_want, f"front-end: workloads missing: {fe_want - fe_seen}")
check(not os.path.exists(os.path.join(res, "frontend-runs.tmp")), "front-end: per-process files left behind")
# merge_runs.py on three one-run documents (the smoke run has one round):
# runs in the listed order, summaries over them, not-measured (-1) left out.
import importlib.util
spec = importlib.util.spec_from_file_location("merge_runs", "bench/merge_runs.py")
mrg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mrg)
def one(w, free_ns, m):
    run = {"wall_s": w, "ops_per_s": 10 / w, "free_ns": free_ns, "peak_rss_kb": 100, "metrics": {"x": m}}
    return {"label": "t", "repeat": 1, "elapsed_s": w, "loadavg_end": 1.0, "results": [
        {"workload": "w", "allocator": "malloc", "param": "none", "value": 0, "threads": 2, "runs": [run]}]}
m = mrg.merge([(1, 0, one(3.0, -1, 5)), (2, 4, one(1.0, 7, 1)), (3, 3, one(2.0, 9, 2))])
r = m["results"][0] if m else {}
check(m and m["repeat"] == 3 and m["processes"] == 3 and len(m["results"]) == 1, "merge_runs: wrong shape")
check([x.get("round") for x in r.get("runs", [])] == [1, 2, 3] and r["runs"][1]["slot"] == 4,
      "merge_runs: runs out of order or untagged")
check(r.get("summary", {}).get("wall_s") == {"median": 2.0, "min": 1.0, "max": 3.0}, "merge_runs: wall_s summary")
check(r.get("summary", {}).get("free_ns") == {"median": 8.0, "min": 7, "max": 9}, "merge_runs: -1 not left out")
check(r.get("metrics", {}).get("x") == {"median": 2, "min": 1, "max": 5}, "merge_runs: metric summary")
check(mrg.merge([]) is None, "merge_runs: merged nothing into a document")
# The scheduler figures of a run: two CPU-bound threads pinned to one CPU
# wait for each other, so their run-queue wait is a good share of the wall
# time; one thread has no start skew.
import shutil
if shutil.which("taskset") and os.path.exists("/proc/thread-self/schedstat"):
    def run1(pin, threads):
        out = os.path.join(tmp, "sched.json")
        cmd = (["taskset", "-c", "0"] if pin else []) + [bench, "--allocator", "malloc", "--workload", "thread-test",
               "--threads", str(threads), "--scale", "quick", "--size", "8", "--rounds", "100", "--repeat", "1",
               "--quiet", "--json", out]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.load(open(out))["results"][0]["runs"][0]
    x = run1(True, 2)
    wall_us, rq = x["wall_s"] * 1e6, x.get("rq_wait_us", -1)
    check(rq >= 0.25 * wall_us, f"pinned thread-test T=2: rq_wait_us {rq} for {wall_us:.0f} us")
    check(x.get("vcsw", -1) >= 0, f"pinned thread-test T=2: vcsw {x.get('vcsw')}")
    x = run1(False, 1)
    check(x.get("start_skew_us") == 0 and x.get("rq_wait_us", -1) >= 0 and x.get("vcsw", -1) >= 0,
          f"thread-test T=1: scheduler figures {x.get('start_skew_us')} {x.get('rq_wait_us')} {x.get('vcsw')}")
else:
    print("bench-smoke: no taskset or schedstat, scheduler figures not checked")
# Pinned runs (nbbs-bench --pin): each thread on the CPU its mode gives it,
# as sched_getcpu saw it after pinning; nothing pinned with one thread.
cpus = sorted(os.sched_getaffinity(0))
def pinned_run(mode, threads):
    out = os.path.join(tmp, "pin.json")
    subprocess.run([bench, "--allocator", "malloc", "--workload", "prodcons", "--threads", str(threads),
                    "--scale", "smoke", "--pin", mode, "--repeat", "1", "--quiet", "--json", out], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = json.load(open(out))["results"][0]
    return r["pin"], r["pinned"], r["runs"][0]["pin_cpus"]
check(pinned_run("none", 4) == ("none", 0, ""), f"--pin none: {pinned_run('none', 4)}")
check(pinned_run("spread", 1) == ("spread", 0, ""), f"--pin spread T=1: {pinned_run('spread', 1)}")
if len(cpus) >= 2:
    n = len(cpus)
    for mode, T, want in (("spread", 4, [cpus[t % n] for t in range(4)]),
                          ("pack", 2, [cpus[0], cpus[0]]),
                          ("pack", 4, [cpus[(t // max(2, -(-4 // n))) % n] for t in range(4)])):
        got = pinned_run(mode, T)
        check(got == (mode, 1, ",".join(map(str, want))), f"--pin {mode} T={T}: {got}, expected CPUs {want}")
else:
    print("bench-smoke: one CPU, pinning only checked as a no-op")
# run.sh ran its pinned cells (spread and pack) into pinned-*.json, apart
# from the unpinned front-end files, and the report tabulates them.
pn = [f for f in os.listdir(res) if f.startswith("pinned-") and f.endswith(".json")]
modes = set()
for f in pn:
    d = load(f)
    if d:
        check_doc(f, d)
        for r in d["results"]:
            modes.add(r.get("pin"))
            check(r.get("pinned") == (len(cpus) >= 2 and r["threads"] >= 2),
                  f"{f}: {r['workload']} T={r['threads']} pinned {r.get('pinned')}")
check(modes == {"spread", "pack"}, f"pinned runs: modes {modes}")
for f in fe:
    d = load(f)
    check(not d or all(r.get("pin") == "none" for r in d["results"]), f"{f}: a pinned run among the unpinned")
mr = load("memreturn-glibc-1.json") if os.path.exists(os.path.join(res, "memreturn-glibc-1.json")) else None
check(mr is not None, "no memreturn-glibc-1.json")
if mr:
    check({s[1] for s in mr["samples"]} == {"run", "trim", "idle"}, "memreturn: a phase has no sample")
    check(all(s[2] > 0 for s in mr["samples"]), "memreturn: a sample has no RSS")
    check(mr["rss_alloc_kb"] > mr["rss_before_kb"], "memreturn: allocating did not raise the RSS")

pngs = [f for f in os.listdir(res) if f.endswith(".png")]
for w in wl_names:
    check(f"smoke-{w}.png" in pngs, f"no plot for {w}")
for f in pngs:
    with open(os.path.join(res, f), "rb") as fh:
        check(fh.read(8) == b"\x89PNG\r\n\x1a\n", f"{f} is not a PNG")
report = open(os.path.join(tmp, "REPORT.md")).read()
for s in ("## Back-end targets", "## Main suite, scale `smoke`", "## Front-end comparison",
          "nbbs-bunch vs bunch-sl", "nbbs-tree vs lists-sl", "Atomic operations per operation",
          "### Huge frames under churn", "### Tail latency", "### Memory return", "memreturn.png",
          "### nbmalloc against the targets", "### nbmalloc by thread placement",
          "### The frame cache against `lists-sl` (issue 11)", "Cells meeting the target: 1 thread, faster",
          "Locked instructions (CAS and RMW) per operation at 1 thread",
          "time / best, runs without wait (runs) | xcpu |"):
    check(s in report, f"REPORT.md has no '{s}'")
check("**On a CPU.**" in report or "No on-CPU split in these runs" in report,
      "REPORT.md has no on-CPU latency table or note")
# run.sh's cross-CPU probes (bench/xcpu): around the main suite, and before
# the front-end runs and after each workload's; the report prints each set
# under its section's machine line.
def probes(name):
    path = os.path.join(res, name)
    if not os.path.exists(path):
        errors.append(f"no {name}")
        return []
    with open(path) as fh:
        return [l.split()[0] for l in fh if l.startswith("when=") and " round_trip_ns=" in l]
check(probes("xcpu-main.txt") == ["when=start", "when=end"], f"xcpu-main.txt: {probes('xcpu-main.txt')}")
check(probes("xcpu.txt") == ["when=start"] + [f"when={w}" for w in sorted(fe_want, key=[w["name"] for w in lst["workloads"]].index)],
      f"xcpu.txt: {probes('xcpu.txt')}")
want = 2 if len(cpus) >= 2 else 0  # one CPU: the probe prints -1 and the report says nothing
check(report.count("Cross-CPU cache-line round trip (`bench/xcpu`") == want, f"REPORT.md: not {want} cross-CPU probe lines")

if errors:
    print("bench-smoke: FAILED", *errors[:40], sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"bench-smoke: ok ({len(main['results'])} main results, {len(pngs)} plots, {len(fe)} front-end files)")
PYEOF
