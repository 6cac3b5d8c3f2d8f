#!/usr/bin/env python3
"""Interleaved A/B runs of nbbs-bench variants: the tool behind the figures in docs/.

    python3 bench/ab.py -r ROUNDS -v NAME=BENCH[,PRELOAD] [-v ...] -c 'nbbs-bench args' [-c ...]
                        [-m wall_s,cpu_pair_ns,...]

A variant is a bench binary, optionally with a library to LD_PRELOAD (a malloc
for `--allocator malloc`). Each round runs every cell once per variant, one
process per run (`--repeat 1`), the variants' order rotated from round to round,
so that a drift of the machine's load falls on all of them alike. At the end it
prints, per cell and variant, the median [min-max] over the rounds of each
metric asked for (a top-level field of the run in the JSON, or one of its
`metrics`). AB_ALL=1 in the environment also prints every value. --xcpu
<build>/bench/xcpu probes the cross-CPU cache-line round trip before each
round and prints it per round: on a virtual machine the host may move the
vCPUs between cores that share a cache and cores that do not, and every
cross-thread cell moves with it (stop 32: 90-130 against 370-440 ns).

Give one workload and one thread count per cell: results are keyed by cell,
allocator and swept value. A run that exits non-zero is reported and left out.

Examples:
  B=build/release/bench/nbbs-bench
  python3 bench/ab.py -r 11 -v main=/tmp/main/nbbs-bench -v new=$B \\
      -c '--allocator nbbs-bunch --workload cached --threads 2' -m pair_ns
  python3 bench/ab.py -r 11 -v nb=$B,build/release/src/nbmalloc/libnbmalloc.so \\
      -v tc=$B,/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \\
      -c '--allocator malloc --workload larson --threads 4 --ops 1000000' -m ops_per_s,peak_rss_kb

Back-end runs: a context's hint cell is a hash of its stack address, so address
space randomisation makes some runs bimodal; wrap the bench in
`setarch x86_64 -R` (a two-line script) to compare builds.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-r", "--rounds", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("-v", "--variant", action="append", required=True, metavar="NAME=BENCH[,PRELOAD]")
    ap.add_argument("-c", "--cell", action="append", required=True, metavar="'BENCH ARGS'")
    ap.add_argument("-m", "--metrics", default="wall_s,cpu_pair_ns,alloc_ns,free_ns,failed",
                    help="comma-separated run fields or metrics (default %(default)s)")
    ap.add_argument("--xcpu", metavar="PATH",
                    help="bench/xcpu binary: probe the cross-CPU cache-line round trip before each round "
                         "and print it per round (a cross-thread cell moves with it on a virtual machine)")
    a = ap.parse_args()
    variants = []
    for v in a.variant:
        name, sep, rest = v.partition("=")
        bench, _, lib = rest.partition(",")
        if not sep or not name or not bench:
            ap.error(f"variant '{v}' is not NAME=BENCH[,PRELOAD]")
        variants.append((name, bench, lib))
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    if a.xcpu and not os.access(a.xcpu, os.X_OK):
        ap.error(f"--xcpu {a.xcpu}: not an executable (build it: cmake --build <build> --target xcpu)")
    return a, variants, a.metrics.split(",")


def run_all(a, variants, metrics):
    res = {}  # (cell index, allocator:value, variant) -> metric -> [values]
    out = os.path.join(tempfile.mkdtemp(prefix="ab-"), "o.json")
    n = len(variants)
    probes = []
    for r in range(a.rounds):
        if a.xcpu:
            probes.append(xcpu_probe(a.xcpu))
        for ci, cell in enumerate(a.cell):
            for s in range(n):
                name, bench, lib = variants[(s + r) % n]
                env = dict(os.environ)
                if lib:
                    env["LD_PRELOAD"] = lib
                cmd = [bench] + shlex.split(cell) + ["--repeat", "1", "--quiet", "--json", out]
                p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if p.returncode != 0:
                    print(f"FAILED rc={p.returncode}: {name}: {cell}", flush=True)
                    continue
                with open(out) as f:
                    d = json.load(f)
                for result in d["results"]:
                    run = result["runs"][0]
                    m = res.setdefault((ci, f"{result['allocator']}:{result.get('value')}", name), {})
                    for k in metrics:
                        v = run.get(k, run.get("metrics", {}).get(k))
                        if v is not None:
                            m.setdefault(k, []).append(v)
        xc = f" (xcpu {probes[-1]})" if a.xcpu else ""
        print(f"round {r + 1}/{a.rounds} done{xc}", file=sys.stderr, flush=True)
    if a.xcpu:
        print("xcpu round trip before each round, ns: " + ", ".join(probes))
    return res


def xcpu_probe(path):
    """The median round trip bench/xcpu prints, as text ('?' if it printed none)."""
    p = subprocess.run([path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for word in p.stdout.split():
        if word.startswith("round_trip_ns="):
            return word.split("=", 1)[1]
    return "?"


def report(a, variants, metrics, res):
    every = bool(os.environ.get("AB_ALL"))
    for ci, cell in enumerate(a.cell):
        print(f"\n== {cell}")
        for val in sorted({k[1] for k in res if k[0] == ci}):
            for name, _, _ in variants:
                m = res.get((ci, val, name))
                if not m:
                    continue  # this variant ran another allocator in this cell
                parts = []
                for k in metrics:
                    xs = m.get(k)
                    if xs:
                        s = f"{k} {statistics.median(xs):.4g} [{min(xs):.4g}-{max(xs):.4g}]"
                        parts.append(s + (" " + str(sorted(xs)) if every else ""))
                print(f"  {val:>16} {name:>10}: " + "  ".join(parts))


def main():
    a, variants, metrics = parse_args()
    report(a, variants, metrics, run_all(a, variants, metrics))


if __name__ == "__main__":
    main()
