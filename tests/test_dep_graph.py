#!/usr/bin/env python3
"""test_dep_graph.py: scripts/dep-graph.py finds circles, and reads the real build.

    test_dep_graph.py BUILD_DIR

1. Its circle finder on small graphs: a chain has none; a two-file and a three-file
   loop are found whole; a loop hanging off a chain holds only the loop's files;
   one long chain (deeper than Python's recursion limit) is walked.
2. On BUILD_DIR (the suite's build): every source unit of src/backend/cpu is read
   (as many units as the folder has .c files and headers by stem), the ops' and the
   vtable file's edges are seen both as includes (ninja's dependency log) and as
   calls (nm), and --check finds no circle: none among the units of src/backend/cpu,
   src/backend/cuda and src/ops (the ops stand on cpu_tensors.c / cuda_tensors.c
   and the policy, never on the vtable file that calls them) and none among the
   folders (no lower folder includes or calls a higher one).
"""
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "dep-graph.py")


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def load():
    spec = importlib.util.spec_from_file_location("dep_graph", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_circles(dg):
    cases = [
        ({"a", "b", "c"}, {("a", "b"), ("b", "c")}, []),
        ({"a", "b"}, {("a", "b"), ("b", "a")}, [["a", "b"]]),
        ({"a", "b", "c", "d"}, {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")},
         [["a", "b", "c"]]),
        ({"x", "a", "b", "y"}, {("x", "a"), ("a", "b"), ("b", "a"), ("b", "y")}, [["a", "b"]]),
        ({"a", "b", "c", "d"}, {("a", "b"), ("b", "a"), ("c", "d"), ("d", "c")},
         [["a", "b"], ["c", "d"]]),
    ]
    for nodes, edges, want in cases:
        got = dg.circles(nodes, edges)
        if got != want:
            fail(f"circles({sorted(edges)}) = {got}, want {want}")
    n = 5000
    chain = {(f"n{i:05d}", f"n{i + 1:05d}") for i in range(n - 1)}
    if dg.circles({f"n{i:05d}" for i in range(n)}, chain) != []:
        fail("a long chain has a circle")
    chain.add((f"n{n - 1:05d}", "n00000"))
    got = dg.circles({f"n{i:05d}" for i in range(n)}, chain)
    if len(got) != 1 or len(got[0]) != n:
        fail("a long loop was not found whole")
    print(f"circle finder: {len(cases) + 2} graphs right")


def run(build, *args):
    return subprocess.run([sys.executable, SCRIPT, build, *args], capture_output=True,
                          text=True)


def check_build(build):
    cpu = os.path.join(ROOT, "src", "backend", "cpu")
    stems = {os.path.splitext(f)[0] for f in os.listdir(cpu) if f.endswith((".c", ".h"))}
    r = run(build, "--under", "src/backend/cpu", "--edges")
    if r.returncode != 0:
        fail(f"dep-graph.py exited {r.returncode}: {r.stderr}")
    head = r.stdout.splitlines()[0]
    if not head.startswith(f"src/backend/cpu: {len(stems)} units, "):
        fail(f"src/backend/cpu has {len(stems)} units by stem; the script says '{head}'")
    edges = [l for l in r.stdout.splitlines() if l.startswith("  edge ")]
    incl = [l for l in edges if "includes" in l]
    calls = [l for l in edges if "calls" in l]
    if not any(l.startswith("  edge cpu_conv -> cpu_internal ") for l in incl):
        fail("cpu_conv.c's include of cpu_internal.h was not read from ninja's deps")
    if not any(l.startswith("  edge cpu_backend -> cpu_conv ") for l in calls):
        fail("cpu_backend.c's use of cpu_conv.c's functions was not read from nm")
    chk = run(build, "--check", "--under", "src/backend/cpu", "src/backend/cuda", "src/ops")
    if chk.returncode != 0 or "circle of" in chk.stdout:
        fail(f"src/ is to have no circle of units or folders (--check exited "
             f"{chk.returncode}):\n{chk.stdout}")
    heads = [l for l in chk.stdout.splitlines() if not l.startswith(" ")]
    if len(heads) != 4 or not all(l.endswith(" 0 circles") for l in heads):
        fail(f"want three folders and the folder graph with 0 circles each:\n{chk.stdout}")
    print(f"the build: {len(stems)} units of src/backend/cpu, {len(incl)} include and "
          f"{len(calls)} call edges; no circle in src/backend/cpu, src/backend/cuda, src/ops "
          f"or among the folders")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test_dep_graph.py BUILD_DIR")
    dg = load()
    check_circles(dg)
    check_build(sys.argv[1])


if __name__ == "__main__":
    main()
