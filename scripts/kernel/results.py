#!/usr/bin/env python3
"""Turns the serial log of one boot of nbbs.ko into the benchmark's results.

    results.py LOG OUT.json OUT.md

The module prints one line per result (docs/kernel.md); this keeps every
figure of one boot: the per-repetition times, their median, min and max, the
ratio of nbbs's median to alloc_pages's median in the same boot, the churn
figures and the verdict. The VM's acceleration is read from the script's
header line (boot.sh writes it to the log's first line): under TCG absolute
times are those of an emulated CPU, so the ratios are what to compare.
"""
import json
import re
import statistics
import sys


def kv(line):
    return dict(re.findall(r"(\w+)=(\S+)", line))


def num(v):
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def main():
    log, out_json, out_md = sys.argv[1:4]
    text = open(log, encoding="utf-8", errors="replace").read().replace("\r", "")
    doc = {"kind": "nbbs-kernel-bench", "vm": {}, "params": {}, "verdict": None,
           "bench": [], "ratios": [], "churn": []}
    runs = {}
    for line in text.splitlines():
        if line.startswith("nbbs-boot:"):
            doc["vm"] = {k: num(v) for k, v in kv(re.sub(r'cmdline="[^"]*"', "", line)).items()}
            m = re.search(r'cmdline="([^"]*)"', line)
            if m:
                doc["vm"]["cmdline"] = m.group(1)
        m = re.search(r"\] nbbs: (START|BENCH|RATIO|CHURN|RESULT) (.*)$", line)
        if not m:
            continue
        tag, rest = m.groups()
        d = {k: num(v) for k, v in kv(rest).items()}
        if tag == "START":
            doc["params"] = d
        elif tag == "BENCH":
            runs.setdefault((d["workload"], d["alloc"], d["threads"]), []).append(d["ns_per_pair"])
        elif tag == "CHURN":
            doc["churn"].append(d)
        elif tag == "RESULT":
            doc["verdict"] = rest.split()[0]
            doc["checks"] = d.get("checks")
            doc["failed"] = d.get("failed")
    for (wl, alloc, thr), v in runs.items():
        doc["bench"].append({"workload": wl, "alloc": alloc, "threads": thr, "ns_per_pair": v,
                             "median": statistics.median(v), "min": min(v), "max": max(v)})
    for b in doc["bench"]:
        if b["alloc"] == "alloc_pages":
            continue
        base = next(x for x in doc["bench"] if x["alloc"] == "alloc_pages"
                    and x["workload"] == b["workload"] and x["threads"] == b["threads"])
        doc["ratios"].append({"workload": b["workload"], "alloc": b["alloc"], "vs": "alloc_pages",
                              "threads": b["threads"], "median_ns": b["median"],
                              "base_median_ns": base["median"],
                              "ratio": round(b["median"] / base["median"], 3) if base["median"] else None})
    with open(out_json, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    vm = doc["vm"]
    accel = str(vm.get("accel", "?")).upper()
    p = doc["params"]
    md = ["### In-kernel benchmark (nbbs.ko vs alloc_pages, one boot)\n",
          f"Kernel {vm.get('kernel', '?')} in qemu, **{accel}**"
          + (" (software-emulated CPU: absolute times are those of the emulator; compare the ratios)"
             if accel == "TCG" else "")
          + f", {vm.get('smp', '?')} vCPUs, one kthread per CPU; {p.get('iters', '?')} pairs per thread"
          f" per loop, {p.get('reps', '?')} interleaved repetitions (median, min-max); held loop"
          f" with {p.get('held', '?')} blocks per thread. Verdict of the same boot's self-test:"
          f" {doc['verdict']} ({doc.get('checks')} checks).\n",
          "| workload | allocator | ns per alloc+free pair (median) | min-max | vs alloc_pages |",
          "|---|---|---|---|---|"]
    for b in sorted(doc["bench"], key=lambda x: (x["workload"], x["alloc"])):
        r = next((x["ratio"] for x in doc["ratios"] if x["workload"] == b["workload"]
                  and x["alloc"] == b["alloc"]), None)
        md.append(f"| {b['workload']} | {b['alloc']} | {b['median']:.1f} | {b['min']:.1f}-{b['max']:.1f} | "
                  + (f"{r:.3f}x" if r is not None else "1 (baseline)") + " |")
    if doc["churn"]:
        md += ["", "Churn in the same boot (fill, free a random half, refill; order 0 from every CPU):", "",
               "| layout | fill % | free 2 MiB blocks | bound |", "|---|---|---|---|"]
        for c in doc["churn"]:
            md.append(f"| {c['layout']} | {c['fill_pct']} | {c['free_2m']} | {c['bound_2m']} |")
    with open(out_md, "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if doc["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
