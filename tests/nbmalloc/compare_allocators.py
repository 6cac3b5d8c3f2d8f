#!/usr/bin/env python3
"""compare_allocators.py - nbmalloc against the system allocators on the
front-end workloads of bench/'s nbbs-bench, each allocator LD_PRELOADed.

Not a test: a measuring aid for the closing figures. Prints one table per
workload: median wall time (s), throughput (Mops/s) and median peak RSS
(MiB) at each thread count, median of --repeat runs.

  compare_allocators.py --bench build/release/bench/nbbs-bench \
      --nbm build/release/src/nbmalloc/libnbmalloc.so [--threads 1,2,4]
      [--repeat 5] [--scale quick] [--workloads larson,...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

LIBS = "/usr/lib/x86_64-linux-gnu/"
SYSTEM = [
    ("glibc", ""),
    ("jemalloc", LIBS + "libjemalloc.so.2"),
    ("mimalloc", LIBS + "libmimalloc.so.2"),
    ("tcmalloc", LIBS + "libtcmalloc_minimal.so.4"),
]


def run(bench, preload, workload, threads, repeat, scale, extra):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        env = dict(os.environ)
        if preload:
            env["LD_PRELOAD"] = preload
        cmd = [bench, "--workload", workload, "--allocator", "malloc", "--threads", str(threads),
               "--repeat", str(repeat), "--scale", scale, "--json", f.name, "--quiet"] + extra
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        d = json.load(open(f.name))
    r = d["results"][0]
    runs = r["runs"]
    return (statistics.median(x["wall_s"] for x in runs),
            statistics.median(x["ops_per_s"] for x in runs) / 1e6,
            statistics.median(x.get("peak_rss_kb", 0) for x in runs) / 1024.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--nbm", required=True)
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scale", default="quick")
    ap.add_argument("--workloads", default="larson,thread-test,linux-scalability,prodcons,hybrid-pool")
    ap.add_argument("--size", default="64", help="request bytes for linux-scalability/thread-test")
    ap.add_argument("--larson-seconds", default=None, help="override larson's measuring window")
    a = ap.parse_args()
    allocs = [("nbmalloc", os.path.abspath(a.nbm))] + [s for s in SYSTEM if not s[1] or os.path.exists(s[1])]
    threads = [int(t) for t in a.threads.split(",")]
    for w in a.workloads.split(","):
        extra = ["--size", a.size] if w in ("linux-scalability", "thread-test") else []
        if w == "larson" and a.larson_seconds:
            extra = ["--seconds", a.larson_seconds]
        print("\n%s (%s)  median of %d: time s / Mops/s / peak RSS MiB" % (w, a.scale, a.repeat))
        print("%-10s" % "allocator" + "".join("%28s" % ("T=%d" % t) for t in threads))
        for name, so in allocs:
            cells = []
            for t in threads:
                try:
                    s, mops, rss = run(a.bench, so, w, t, a.repeat, a.scale, extra)
                    cells.append("%9.4f %8.2f %7.1f" % (s, mops, rss))
                except subprocess.CalledProcessError:
                    cells.append("%28s" % "failed")
            print("%-10s" % name + "".join("%28s" % c for c in cells))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
