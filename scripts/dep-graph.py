#!/usr/bin/env python3
"""dep-graph.py: the include and call graph of ctrain's sources, and its circles.

    scripts/dep-graph.py [BUILD_DIR] [--check] [--under FOLDER ...] [--edges]

Read from a configured and built tree (default: build):
  includes  the compiler's dependency output as ninja keeps it (`ninja -t deps`):
            every project header a source file includes, directly or not;
  calls     the object files' symbols (`nm`): a file that uses a function or object
            another file defines depends on that file (the vtable file that names
            the ops' functions depends on each op; an op that calls a helper of the
            vtable file depends on it).
A unit is a source file and the header of the same name (cpu_conv.c + cpu_conv.h); a
folder is a unit's directory (src/train, src/backend/cpu). Printed:
  - each circle of units (a strongly connected set: every unit in it reaches every
    other) under each FOLDER given with --under (default: src/backend/cpu and
    src/backend/cuda), with the edges that close it;
  - each circle of folders (a lower folder that includes or calls a higher one),
    with one edge from each folder to the next;
  - with --edges, every unit edge under the FOLDERs.
--check: exit 1 when any circle is printed (0 when there is none).
"""
import collections
import os
import re
import signal
import subprocess
import sys


def project_units(root):
    """Maps every source and header under src/ and kernels/ to its unit name."""
    units = {}
    for top in ("src", "kernels"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                stem, ext = os.path.splitext(f)
                if ext in (".c", ".h", ".cu", ".cuh"):
                    rel = os.path.relpath(os.path.join(d, f), root)
                    units[rel] = os.path.join(os.path.dirname(rel), stem)
    return units


def object_sources(build, units):
    """Object file (relative to build) -> its source (relative to the root), for the
    objects of the project's own libraries and binary."""
    flat = {p.replace("/", "_"): p for p in units}
    objs = {}
    for d in os.listdir(build):
        if not (d.endswith(".p") and d.startswith(("libctrain", "ctrain"))):
            continue
        for f in os.listdir(os.path.join(build, d)):
            if f.endswith(".o") and f[:-2] in flat:
                objs[os.path.join(d, f)] = flat[f[:-2]]
    return objs


def include_edges(build, root, objs, units):
    """(unit, unit) pairs: a source's unit includes a header's unit."""
    text = subprocess.run(["ninja", "-C", build, "-t", "deps"] + sorted(objs),
                          capture_output=True, text=True, check=True).stdout
    edges = set()
    src = None
    for line in text.splitlines():
        m = re.match(r"^(\S.*): #deps", line)
        if m:
            src = objs.get(m.group(1))
            continue
        dep = line.strip()
        if not src or not dep:
            continue
        rel = os.path.relpath(os.path.normpath(os.path.join(build, dep)), root)
        if rel in units and units[rel] != units[src]:
            edges.add((units[src], units[rel]))
    return edges


def call_edges(build, objs, units):
    """(unit, unit) pairs: a unit uses a symbol another unit's object defines."""
    defined, used = {}, collections.defaultdict(set)
    for obj, src in objs.items():
        out = subprocess.run(["nm", "-P", os.path.join(build, obj)], capture_output=True,
                             text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            name, kind = parts[0], parts[1]
            if kind == "U":
                used[units[src]].add(name)
            elif kind in "TDBRVWC":
                defined.setdefault(name, units[src])
    edges = set()
    for unit, names in used.items():
        for n in names:
            d = defined.get(n)
            if d and d != unit:
                edges.add((unit, d))
    return edges


def circles(nodes, edges):
    """The strongly connected sets of more than one node (Tarjan), each sorted."""
    succ = collections.defaultdict(list)
    for a, b in edges:
        succ[a].append(b)
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        work = [(v, iter(succ[v]))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter[0]
                counter[0] += 1
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(succ[nxt])))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sorted(out)


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    check, show_edges = "--check" in argv, "--edges" in argv
    under = []
    if "--under" in argv:
        i = argv.index("--under") + 1
        while i < len(argv) and not argv[i].startswith("--"):
            under.append(argv[i].rstrip("/"))
            i += 1
        args = [a for a in args if a not in under]
    under = under or ["src/backend/cpu", "src/backend/cuda"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.path.abspath(args[0] if args else os.path.join(root, "build"))
    if not os.path.exists(os.path.join(build, "build.ninja")):
        sys.exit(f"dep-graph.py: {build} is not a configured build directory")
    units = project_units(root)
    objs = object_sources(build, units)
    if not objs:
        sys.exit(f"dep-graph.py: no object files of ctrain under {build} (build it first)")
    inc, call = include_edges(build, root, objs, units), call_edges(build, objs, units)
    edges = inc | call
    why = lambda a, b: "+".join(k for k, s in (("includes", inc), ("calls", call)) if (a, b) in s)
    found = 0
    for folder in under:
        nodes = {u for u in units.values() if os.path.dirname(u) == folder}
        sub = {(a, b) for a, b in edges if a in nodes and b in nodes}
        cs = circles(nodes, sub)
        print(f"{folder}: {len(nodes)} units, {len(sub)} edges, {len(cs)} circles")
        for c in cs:
            found += 1
            names = [os.path.basename(u) for u in c]
            print(f"  circle of {len(c)}: {' '.join(names)}")
            for a, b in sorted(sub):
                if a in c and b in c:
                    print(f"    {os.path.basename(a)} -> {os.path.basename(b)} ({why(a, b)})")
        if show_edges:
            for a, b in sorted(sub):
                print(f"  edge {os.path.basename(a)} -> {os.path.basename(b)} ({why(a, b)})")
    folder_edges = {}
    for a, b in sorted(edges):
        fa, fb = os.path.dirname(a), os.path.dirname(b)
        if fa != fb:
            folder_edges.setdefault((fa, fb), (a, b))
    folders = {f for e in folder_edges for f in e}
    fcs = circles(folders, set(folder_edges))
    print(f"folders: {len(folders)}, {len(folder_edges)} edges between them, {len(fcs)} circles")
    for c in fcs:
        found += 1
        print(f"  circle of {len(c)}: {' '.join(c)}")
        for (fa, fb), (a, b) in sorted(folder_edges.items()):
            if fa in c and fb in c:
                print(f"    {fa} -> {fb}: {a} -> {b} ({why(a, b)})")
    return 1 if check and found else 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly
    sys.exit(main(sys.argv[1:]))
