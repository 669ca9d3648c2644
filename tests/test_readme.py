#!/usr/bin/env python3
"""test_readme.py: every command example of README.md runs, and says what README shows.

    test_readme.py CTRAIN

The examples are the lines of README.md's code blocks (indented or fenced, not the
YAML) that start with `$ `, `ctrain ` or `./build/ctrain `, `mpirun ` included, in
README order; the synopsis block under "## Commands" (the one with placeholders such
as CONFIG and FILE) is not an example. Each runs in one scratch directory that holds
links to the source tree's configs/ and data/ (so runs/ and exports land there) and
build/ctrain, with `ctrain` on PATH, so later examples read what earlier ones wrote
(eval reads the fit's checkpoint). A command must exit 0, and every output line
README shows under a `$ ` command (up to the first digit, quote or `(`, `...` lines
left out; a number inside a word or path, as in t10k, stays) must begin some line of
what it printed (stdout and stderr together).

Skipped, each with a line: examples that need a GPU (`cuda` in the command, when
`ctrain devices` finds none), mpirun when it is missing or the build has no MPI (run
with --allow-run-as-root --oversubscribe, which only mpirun reads), and the Quick
start's lines (scripts/setup.sh installs packages, scripts/test.sh runs the whole
suite). Exit 1 on a failure, 77
when README has no example at all.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def code_blocks(text):
    """(heading, lines) of each code block: fenced (not yaml) or indented 4 spaces."""
    blocks, heading, lines, fence = [], "", text.split("\n"), None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#") and fence is None:
            heading = line.lstrip("#").strip()
        if line.startswith("```"):
            lang = line[3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if lang not in ("yaml", "yml"):
                blocks.append((heading, lines[i + 1:j]))
            i = j + 1
            continue
        if line.startswith("    ") and (i == 0 or lines[i - 1].strip() == ""):
            j = i
            block = []
            while j < len(lines) and (lines[j].startswith("    ") or lines[j].strip() == ""):
                block.append(lines[j][4:])
                j += 1
            while block and not block[-1].strip():
                block.pop()
            blocks.append((heading, block))
            i = j
            continue
        i += 1
    return blocks


def examples(text):
    """[(command, [shown output lines])] in README order."""
    out = []
    for heading, block in code_blocks(text):
        if heading == "Commands":  # the synopsis, with placeholders
            continue
        k = 0
        while k < len(block):
            line = block[k].rstrip()
            cmd = None
            if line.startswith("$ "):
                cmd = line[2:]
            elif re.match(r"(\./build/)?ctrain |mpirun ", line) or line.startswith("./scripts/"):
                cmd = line
            if cmd is None:
                k += 1
                continue
            while cmd.endswith("\\") and k + 1 < len(block):  # continued lines
                k += 1
                cmd = cmd[:-1] + " " + block[k].strip()
            shown = []
            if line.startswith("$ "):
                while k + 1 < len(block) and block[k + 1].strip() and \
                        not block[k + 1].startswith("$ "):
                    k += 1
                    shown.append(block[k].strip())
            out.append((cmd.split("  #")[0].strip(), shown))
            k += 1
    return out


def prefix(line):
    """What a shown output line must begin with: up to its first number (a digit not
    inside a word or path), quote or '('."""
    m = re.search(r"(?<![A-Za-z_./-])[0-9]|['\"(]", line)
    return (line[:m.start()] if m else line).rstrip()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test_readme.py CTRAIN")
    ctrain = os.path.abspath(sys.argv[1])
    exs = examples(open(os.path.join(ROOT, "README.md")).read())
    if not exs:
        print("README.md has no command example")
        sys.exit(77)
    devices = subprocess.run([ctrain, "devices"], capture_output=True, text=True).stdout
    has_gpu = re.search(r"^CUDA devices: [1-9]", devices, re.M) is not None
    has_mpi = shutil.which("mpirun") is not None and "MPI none" not in devices
    ran = skipped = 0
    with tempfile.TemporaryDirectory() as work:
        os.symlink(os.path.join(ROOT, "configs"), os.path.join(work, "configs"))
        os.symlink(os.path.join(ROOT, "data"), os.path.join(work, "data"))
        os.makedirs(os.path.join(work, "build"))
        os.makedirs(os.path.join(work, "bin"))
        os.symlink(ctrain, os.path.join(work, "build", "ctrain"))
        os.symlink(ctrain, os.path.join(work, "bin", "ctrain"))
        env = dict(os.environ, PATH=os.path.join(work, "bin") + os.pathsep + os.environ["PATH"],
                   OMP_NUM_THREADS="2")
        for cmd, shown in exs:
            why = None
            if cmd.startswith("./scripts/setup.sh"):
                why = "installs packages"
            elif cmd.startswith("./scripts/"):
                why = "builds and runs the whole suite"
            elif "cuda" in cmd and not has_gpu:
                why = "needs a GPU"
            elif cmd.startswith("mpirun") and not has_mpi:
                why = "no mpirun, or a build without MPI"
            if why:
                print(f"skip: {cmd} ({why})")
                skipped += 1
                continue
            run = cmd
            if run.startswith("mpirun "):
                run = "timeout 300 mpirun --allow-run-as-root --oversubscribe " + run[len("mpirun "):]
            p = subprocess.run(run, shell=True, cwd=work, env=env, capture_output=True, text=True,
                               timeout=600)
            if p.returncode != 0:
                fail(f"README example `{cmd}` exited {p.returncode}:\n{p.stdout}{p.stderr}")
            printed = [l.strip() for l in (p.stdout + p.stderr).splitlines()]
            for line in shown:
                if line == "..." or line.endswith(": ..."):
                    want = line[:-len("...")].strip()
                else:
                    want = prefix(line)
                if want and not any(l.startswith(want) for l in printed):
                    fail(f"README example `{cmd}` shows a line beginning '{want}'; it printed:\n"
                         + "\n".join(printed))
            print(f"ok: {cmd} ({len(shown)} shown lines found)")
            ran += 1
    print(f"README examples: {ran} ran, {skipped} skipped")


if __name__ == "__main__":
    main()
