#!/usr/bin/env python3
"""Merges one-run nbbs-bench JSON files into one document.

bench/run.sh runs the front-end comparison one process per run: for every
workload, parameter value and thread count, round 1 of every malloc, then
round 2 of every malloc, ... (the mallocs' order rotated by one each round).
Each process writes an nbbs-bench document holding one run. This script
joins the processes of one malloc and one workload into the document
nbbs-bench itself would have written with --repeat: the runs of each
configuration side by side, and the summaries (median, min, max) computed
again over them exactly as nbbs-bench does (values below zero mean "not
measured" and are left out; a workload metric over the runs that have it).

Usage: merge_runs.py --list FILE --out OUT.json
  FILE holds one line per process: its round, its place in that round's
  order (0 = first) and the path of its JSON document, separated by blanks.
  Each run in OUT.json carries its "round" and "slot". Exits with status 3
  (and writes nothing) when no listed file holds a result.
"""
import argparse
import json
import statistics
import sys

# The per-run fields nbbs-bench summarizes (bench/output.c, json_result).
SUMMARY = ["wall_s", "ops_per_s", "ns_per_op", "pair_ns", "cpu_pair_ns", "alloc_ns", "free_ns", "alloc_cpu_ns",
           "free_cpu_ns", "int_frag", "minflt"]


def summary(values, measured_only=True):
    """Median, min and max as nbbs-bench writes them ({-1, -1, -1} if none)."""
    v = [x for x in values if x is not None and (x >= 0 or not measured_only)]
    if not v:
        return {"median": -1, "min": -1, "max": -1}
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def key(r):
    return (r["workload"], r["allocator"], r["param"], r["value"], r["threads"])


def merge(entries):
    """entries: [(round, slot, document)] in the order the processes ran."""
    head = None
    results = {}
    elapsed = 0.0
    last = None
    for rnd, slot, doc in entries:
        if head is None:
            head = {k: v for k, v in doc.items() if k not in ("results", "elapsed_s", "loadavg_end")}
        elapsed += doc.get("elapsed_s", 0.0)
        last = doc
        for r in doc["results"]:
            m = results.setdefault(key(r), {k: v for k, v in r.items() if k not in ("summary", "metrics", "runs")})
            for run in r["runs"]:
                m.setdefault("runs", []).append(dict(run, round=rnd, slot=slot))
    if head is None or not results:
        return None
    out = []
    for k in sorted(results, key=lambda k: (k[3], k[4])):
        r = results[k]
        runs = r["runs"]
        r["summary"] = {f: summary([x.get(f) for x in runs]) for f in SUMMARY}
        names = []
        for x in runs:
            names += [n for n in x.get("metrics", {}) if n not in names]
        r["metrics"] = {n: summary([x["metrics"][n] for x in runs if n in x.get("metrics", {})], False)
                        for n in names}
        r["runs"] = runs  # keep "runs" last, as nbbs-bench does
        out.append(r)
    doc = dict(head)
    doc["repeat"] = max(len(r["runs"]) for r in out)
    doc["processes"] = len(entries)
    doc["interleaved"] = ("one process per run; per configuration, round 1 of every malloc, then round 2, ...; "
                          "the order of the mallocs rotated by one each round")
    doc["results"] = out
    doc["elapsed_s"] = round(elapsed, 3)
    doc["loadavg_end"] = last.get("loadavg_end")
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", required=True, help="file: one 'round slot path' line per process")
    ap.add_argument("--out", required=True, help="the merged document")
    args = ap.parse_args()
    entries = []
    with open(args.list) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.split(None, 2)
            if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
                sys.exit(f"merge_runs.py: {args.list}:{n}: expected 'round slot path', got {line.strip()!r}")
            try:
                with open(parts[2].strip()) as g:
                    doc = json.load(g)
            except (OSError, ValueError) as e:
                sys.exit(f"merge_runs.py: cannot read {parts[2].strip()}: {e}")
            entries.append((int(parts[0]), int(parts[1]), doc))
    doc = merge(entries)
    if doc is None:
        print(f"merge_runs.py: no results in the files of {args.list}", file=sys.stderr)
        sys.exit(3)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
