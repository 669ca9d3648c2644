#!/usr/bin/env python3
"""test_tensorboard.py: ctrain's TensorBoard event files, read back by TensorBoard's
own event reader (tensorboard.backend.event_processing.event_file_loader, from the
tensorboard package on PyPI).

A fit of configs/mlp.yaml (two epochs, a validation split, a step record every 10
steps) must leave one events.out.tfevents.* file in its run directory, which
TensorBoard reads whole (it stops at the first record whose CRC-32C is wrong): a
file_version event "brain.Event:2", then one event per metrics.jsonl record at
that record's step, with the scalars of train/metrics_log.h equal to the record's
values in float32. log.tensorboard=false writes no event file; --overwrite removes
the earlier run's, and a run in a directory without results removes the event
file a stopped fit left there, not another writer's.

    PYTHON_WITH_TENSORBOARD tests/test_tensorboard.py BUILD_DIR/ctrain

Exits 77 (skipped) when this Python has no tensorboard package, or the build has
no TensorBoard support.
"""
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
except ImportError as e:
    print(f"test_tensorboard: skipped: {e} (scripts/setup.sh installs it in .venv-tensorboard)")
    sys.exit(77)

EPOCH_TAGS = {"epoch/train_loss": "train_loss", "epoch/train_acc": "train_acc",
              "epoch/val_loss": "val_loss", "epoch/val_acc": "val_acc", "epoch/lr": "lr",
              "epoch/seconds": "seconds", "epoch/samples_per_sec": "samples_per_sec",
              "epoch/grad_norm": "grad_norm"}
STEP_TAGS = {"train/loss": "loss", "train/acc": "acc", "train/lr": "lr",
             "train/samples_per_sec": "samples_per_sec", "train/data_wait": "data_wait",
             "train/grad_norm": "grad_norm"}
TEST_TAGS = {"test/loss": "test_loss", "test/acc": "test_acc"}


def fail(what):
    sys.exit(f"test_tensorboard: {what}")


def scalar(value):
    """A scalar as TensorBoard hands it over (simple_value, or a float tensor)."""
    if value.HasField("simple_value"):
        return value.simple_value
    return value.tensor.float_val[0]


def fit(ctrain, cfg, out, cwd, *extra):
    args = [ctrain, "fit", cfg, "--out", out, "--device", "cpu", "--epochs", "2", "-q",
            "train.batch_size=1000", "data.val_split=5000", "log.every_steps=10"] + list(extra)
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{' '.join(args)}: exit {p.returncode}: {p.stderr}")


def main():
    ctrain = os.path.abspath(sys.argv[1])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = os.path.join(root, "configs", "mlp.yaml")
    probe = subprocess.run([ctrain, "summary", cfg, "log.tensorboard=true", "--print-config"],
                           capture_output=True, text=True)
    if probe.returncode != 0 and "TensorBoard support" in probe.stderr:
        print("test_tensorboard: skipped: this build has no TensorBoard support")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        fit(ctrain, cfg, "run", tmp)
        files = glob.glob(os.path.join(tmp, "run", "events.out.tfevents.*"))
        if len(files) != 1:
            fail(f"{len(files)} event files in the run directory")
        events = list(EventFileLoader(files[0]).Load())
        with open(os.path.join(tmp, "run", "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]
        if len(events) != 1 + len(records):
            fail(f"TensorBoard read {len(events)} events for {len(records)} records "
                 "(a bad CRC ends its reading)")
        if events[0].WhichOneof("what") != "file_version" or events[0].file_version != "brain.Event:2":
            fail(f"the first event is not the file version: {events[0]}")
        last_step = 0
        for ev, rec in zip(events[1:], records):
            tags = {"epoch": EPOCH_TAGS, "step": STEP_TAGS, "test": TEST_TAGS}[rec["type"]]
            step = rec.get("step", last_step)
            last_step = step
            if ev.step != step:
                fail(f"{rec['type']} record at step {step}, event at {ev.step}")
            got = {v.tag: scalar(v) for v in ev.summary.value}
            for tag, key in tags.items():
                want = rec[key]
                if want is None:
                    if tag in got:
                        fail(f"{tag}: written, but the record has no value")
                    continue
                if tag not in got:
                    fail(f"step {step}: no {tag} (tags: {sorted(got)})")
                if not math.isclose(got[tag], want, rel_tol=1e-6, abs_tol=1e-30):
                    fail(f"step {step} {tag}: {got[tag]} vs the record's {want}")
            if ev.wall_time < 1.6e9:
                fail(f"wall time {ev.wall_time}")
        kinds = [r["type"] for r in records]
        if kinds.count("epoch") != 2 or kinds.count("test") != 1 or kinds.count("step") < 2:
            fail(f"records: {kinds}")

        fit(ctrain, cfg, "quiet", tmp, "log.tensorboard=false")
        if glob.glob(os.path.join(tmp, "quiet", "events.out.tfevents.*")):
            fail("log.tensorboard=false wrote an event file")
        # a directory without results: ctrain's stale event file goes, another
        # writer's stays
        stale = os.path.join(tmp, "stale")
        os.mkdir(stale)
        for name in ("events.out.tfevents.1.host.1.ctrain", "events.out.tfevents.1.other"):
            open(os.path.join(stale, name), "wb").write(b"junk")
        fit(ctrain, cfg, "stale", tmp)
        left = sorted(os.path.basename(p) for p in glob.glob(os.path.join(stale, "events.*")))
        if len(left) != 2 or "events.out.tfevents.1.other" not in left or \
                "events.out.tfevents.1.host.1.ctrain" in left:
            fail(f"event files after a run in a directory without results: {left}")
        fit(ctrain, cfg, "run", tmp, "--overwrite")
        again = glob.glob(os.path.join(tmp, "run", "events.out.tfevents.*"))
        if len(again) != 1 or again[0] == files[0]:
            fail(f"--overwrite left {again} (the first run's was {files[0]})")
    print("test_tensorboard: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
