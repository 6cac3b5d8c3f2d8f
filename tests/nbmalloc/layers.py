#!/usr/bin/env python3
"""nbmalloc's layers, checked: every reference between two of its source
files (a call, or a use of a variable) must go down the order below, so the
files form no circle and a reader can follow any path one way (issue 13,
"layers a reader can follow one way"; docs/architecture.md, "nbmalloc's
layers").

Reads the object files of nbmalloc_static with nm: a symbol a file defines
(T, D, B, R, C) and another file uses (U) is an edge from the user to the
definer. An edge that goes up (or across, between two files of one rank) is
a failure unless KNOWN lists it with the reason it is still there; a KNOWN
edge that no longer exists is a failure too, so the list only shrinks.

usage: layers.py SRCDIR OBJECT...
"""
import os
import subprocess
import sys

# Top to bottom; a file may use only files below it.
ORDER = [
    "override_new", "override",  # the C++ operators and the C names, preloaded
    "alloc", "free", "stats",    # the nbm_* API: malloc, free, statistics
    "heap", "remote",            # a thread's heap (bins, pages of classes) and cross-thread frees
    "spare",                     # empty pages kept for any class
    "medium",                    # medium blocks and their cache
    "decay",                     # the memory policy: what the caches keep
    "page",                      # a page of objects of one class
    "huge",                      # one mapping per huge request
    "arena",                     # arenas over the buddy back-end, the address map
    "desc",                      # descriptor pools, lock-free stacks
    "state",                     # the process's options, counters, tag secret and start-up
    "class",                     # the size classes
    "os",                        # system calls
]

# The private headers and the files that may include them (every file
# includes internal.h, the declarations of all layers).
HEADERS = {
    "fast.h": {"alloc", "free", "override", "override_new"},  # the API's fast paths
    "bin.h": {"heap"},                                        # a bin's page lists
}

# Edges still going up, each with why: (user, definer, symbol) -> reason.
KNOWN = {
}


def edges(objs):
    defs, uses = {}, {}
    for o in objs:
        f = os.path.basename(o)
        f = f[: f.index(".")]
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBRCV":
                defs[p[2]] = f
            elif len(p) == 2 and p[0] == "U":
                uses.setdefault(f, set()).add(p[1])
    return {(f, defs[s], s) for f, us in uses.items() for s in us if s in defs and defs[s] != f}, set(defs.values())


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: layers.py SRCDIR OBJECT...")
    # CMake may pass $<TARGET_OBJECTS:...> as one ;-separated argument.
    src, objs = sys.argv[1], [o for a in sys.argv[2:] for o in a.split(";") if o]
    found, files = edges(objs)
    rank = {f: i for i, f in enumerate(ORDER)}
    bad = []
    for f in sorted(files):
        if f not in rank:
            bad.append(f"{f}.c has no place in ORDER (tests/nbmalloc/layers.py)")
    up = {e for e in found if e[0] in rank and e[1] in rank and rank[e[0]] >= rank[e[1]]}
    for u, d, s in sorted(up - set(KNOWN)):
        bad.append(f"{u}.c uses {s} of {d}.c, which is not below it")
    for u, d, s in sorted(set(KNOWN) - up):
        bad.append(f"KNOWN lists {u}.c -> {d}.c ({s}), which is gone: remove it from the list")
    for name in sorted(os.listdir(src)):
        if not name.endswith((".c", ".h")):
            continue
        with open(os.path.join(src, name)) as fh:
            for line in fh:
                t = line.split()
                if len(t) >= 2 and t[0] == "#include" and t[1].strip('"') in HEADERS:
                    h = t[1].strip('"')
                    if name[: name.index(".")] not in HEADERS[h] and name != h:
                        bad.append(f"{name} includes {h}, which only {', '.join(sorted(HEADERS[h]))} may")
    down = len(found) - len(up)
    if bad:
        print("\n".join("layers: " + b for b in bad))
        sys.exit(1)
    print(f"layers: ok ({len(files)} files, {down} references down, {len(up)} known to go up)")


if __name__ == "__main__":
    main()
