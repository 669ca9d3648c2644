#!/usr/bin/env python3
"""test_plot.py: `ctrain plot` on two real runs, checked by parsing the SVG and by
rendering it.

Two fits of configs/mlp.yaml (two epochs, step records every 10 steps, Adam and
SGD) write runs; `ctrain plot RUN1 RUN2 -o curves.svg` must write one SVG that:
  - parses as XML with an <svg> root of the stated size and viewBox;
  - has, per run, the curves train_loss, val_loss, train_acc, val_acc with one
    point per epoch, and step_loss, step_acc with one point per step record, all
    inside the plot and in increasing x;
  - places the points of each curve in the order of its values in metrics.jsonl
    (a larger loss is drawn higher), every curve of a panel (loss, accuracy) on one
    shared linear y axis (so a curve drawn from another series' values is off it),
    and one run's curves in its legend colour;
  - names both runs in its legend and title.
rsvg-convert (librsvg2-bin) then renders it to a PNG of that size, which must not
be blank. Bad input: no run (exit 2), a directory without metrics (exit 1, one
line naming the file).

    /usr/bin/python3 tests/test_plot.py BUILD_DIR/ctrain

Exits 77 (skipped) when rsvg-convert is missing.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

SVG = "{http://www.w3.org/2000/svg}"


def run(ctrain, args, cwd, expect=0):
    p = subprocess.run([ctrain] + args, cwd=cwd, capture_output=True, text=True)
    if p.returncode != expect:
        sys.exit(f"ctrain {' '.join(args)}: exit {p.returncode} (wanted {expect})\n"
                 f"{p.stdout}{p.stderr}")
    return p


def records(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def check(cond, what):
    if not cond:
        sys.exit(f"test_plot: {what}")


def points(poly):
    return [tuple(map(float, p.split(","))) for p in poly.get("points").split()]


def check_svg(path, runs):
    root = ET.parse(path).getroot()
    check(root.tag == SVG + "svg", "the root is not <svg>")
    w, h = int(root.get("width")), int(root.get("height"))
    check(root.get("viewBox") == f"0 0 {w} {h}", "viewBox does not match the size")
    polys = root.findall(f".//{SVG}polyline")
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    panels = {"loss": [], "acc": []}  # (value, y) of every point, per shared y axis
    for name, recs in runs.items():
        check(name in texts, f"{name} is not in the legend")
        epochs = [r for r in recs if r["type"] == "epoch"]
        steps = [r for r in recs if r["type"] == "step"]
        mine = {p.get("data-series"): p for p in polys if p.get("data-run") == name}
        want = {"train_loss": ("train_loss", epochs), "val_loss": ("val_loss", epochs),
                "train_acc": ("train_acc", epochs), "val_acc": ("val_acc", epochs),
                "step_loss": ("loss", steps), "step_acc": ("acc", steps)}
        colours = {p.get("stroke") for p in mine.values()}
        check(len(colours) == 1, f"{name}'s curves have {len(colours)} colours")
        for series, (key, recs_of) in want.items():
            check(series in mine, f"{name} has no {series} curve")
            pts = points(mine[series])
            check(len(pts) == len(recs_of), f"{name} {series}: {len(pts)} points for "
                  f"{len(recs_of)} records")
            xs = [x for x, _ in pts]
            check(xs == sorted(xs) and len(set(xs)) == len(xs), f"{name} {series}: x not increasing")
            check(all(0 <= x <= w and 0 <= y <= h for x, y in pts), f"{name} {series}: outside")
            vals = [r[key] for r in recs_of]
            panels["loss" if series.endswith("loss") else "acc"] += list(
                zip(vals, [y for _, y in pts]))
            for i in range(len(pts)):
                for j in range(len(pts)):
                    if vals[i] > vals[j]:  # drawn higher: a smaller y
                        check(pts[i][1] < pts[j][1], f"{name} {series}: point {i} ({vals[i]}) "
                              f"not above point {j} ({vals[j]})")
    # Every curve of a panel shares its y axis: y is one decreasing linear function of
    # the value for all of them, so a curve drawn from another series' values (or
    # another run's) is off it by the values' difference.
    for panel, pairs in panels.items():
        n = len(pairs)
        mv = sum(v for v, _ in pairs) / n
        my = sum(y for _, y in pairs) / n
        var = sum((v - mv) ** 2 for v, _ in pairs)
        check(var > 0, f"the {panel} panel's values are all equal")
        slope = sum((v - mv) * (y - my) for v, y in pairs) / var
        check(slope < 0, f"the {panel} panel's axis does not rise with the value")
        worst = max(abs(my + slope * (v - mv) - y) for v, y in pairs)
        check(worst <= 1.0, f"the {panel} panel: a point is {worst:.1f} px off the axis "
              f"all the others share (drawn from another series' values?)")
    return w, h


def check_png(path, w, h):
    data = open(path, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "rsvg-convert wrote no PNG")
    pw, ph = struct.unpack(">II", data[16:24])
    check((pw, ph) == (w, h), f"the PNG is {pw}x{ph}, not {w}x{h}")
    idat, pos = b"", 8
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    pixels = zlib.decompress(idat)
    check(len(set(pixels)) > 16, "the rendered PNG is blank")


def main():
    ctrain = os.path.abspath(sys.argv[1])
    rsvg = shutil.which("rsvg-convert")
    if not rsvg:
        print("test_plot: skipped: rsvg-convert not found (apt-get install librsvg2-bin)")
        return 77
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = os.path.join(root, "configs", "mlp.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        common = ["--device", "cpu", "--epochs", "2", "--no-progress", "-q",
                  "train.batch_size=1000", "log.every_steps=10"]
        run(ctrain, ["fit", cfg, "--out", "adam"] + common, tmp)
        run(ctrain, ["fit", cfg, "--out", "sgd", "optimizer.type=sgd", "optimizer.lr=0.05",
                     "optimizer.momentum=0.9"] + common, tmp)
        p = run(ctrain, ["plot", "adam", "sgd", "-o", "curves.svg"], tmp)
        check("Wrote curves.svg (2 runs)" in p.stdout, f"plot said: {p.stdout}")
        runs = {name: records(os.path.join(tmp, name)) for name in ("adam", "sgd")}
        w, h = check_svg(os.path.join(tmp, "curves.svg"), runs)
        png = os.path.join(tmp, "curves.png")
        subprocess.run([rsvg, os.path.join(tmp, "curves.svg"), "-o", png], check=True)
        check_png(png, w, h)
        run(ctrain, ["plot"], tmp, expect=2)
        os.mkdir(os.path.join(tmp, "empty"))
        p = run(ctrain, ["plot", "empty"], tmp, expect=1)
        check(p.stderr.count("\n") == 1 and "empty/metrics.jsonl" in p.stderr,
              f"plot of a directory without metrics: {p.stderr}")
    print("test_plot: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
