#!/usr/bin/env python3
"""gpu_vs_torch.py: ctrain's GPU training against PyTorch's, side by side, from the
same config.

For each config and batch size of the plan it runs, one after another on the same
device: ctrain with amp off and bf16 (`ctrain fit --json`), and PyTorch built from the
same config by scripts/reference_pytorch.py (same layers, init scheme, optimizer,
learning-rate schedule, normalization and crop/flip augmentation), with the whole
dataset on the device: eager fp32 with cudnn.benchmark (TF32 off), and
torch.compile(mode="reduce-overhead") with bf16 autocast (and, when named in --modes,
eager bf16 autocast); the optimizer is the config's, eager, as PyTorch makes it. Each
run trains --epochs epochs (default 2); the first is warm-up (algorithm search, graph
capture, compilation), the figure is the median of the others' training seconds.
Then it prints one table with the ratios and the goals:

    CNN bf16      ctrain <= 0.8x torch.compile's epoch, at every batch size
    CNN fp32      ctrain (amp off) <= 0.8x eager fp32's
    ResNet bf16   ctrain <= 0.8x torch.compile's

    scripts/gpu_vs_torch.py --ctrain gpu-bundle/ctrain [--device cuda] [--epochs 3]
        [--plan cnn:64,256,1024,8192 ...] [--modes ctrain-off,...] [--limit N]
        [--json FILE]

Exit 77 (skipped) when PyTorch cannot use the device.

--plan CONFIG:B1,B2,...: configs/CONFIG.yaml at those batch sizes (default: cnn and
mlp at 64, 256, 1024 and 8192, resnet-fashion at 128 and 1024). Where Fashion-MNIST
is not installed (/usr/share/datasets/fashion-mnist), resnet-fashion reads MNIST
instead, which the table says. --limit N trains on the first N training images (a
quick check of the mechanics; CI runs it on the CPU). --device cpu runs both sides on
the CPU (no compile mode unless named). Exit status 0 when every run finished; the
goals are reported, not enforced.

Internal: --torch-run CONFIG --batch B --mode MODE runs one PyTorch run and prints
JSON (a subprocess per run, so each starts with a clean device).
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FASHION = "/usr/share/datasets/fashion-mnist"
MNIST = os.path.join(ROOT, "data", "mnist")
DEFAULT_PLAN = ["cnn:64,256,1024,8192", "mlp:64,256,1024,8192", "resnet-fashion:128,1024"]
CTRAIN_MODES = {"ctrain-off": "off", "ctrain-bf16": "bf16"}
TORCH_MODES = ("torch-eager-fp32", "torch-eager-bf16", "torch-compile-bf16")
# What the goals need, and the default on a GPU (eager bf16 only when named).
DEFAULT_MODES = ("ctrain-off", "ctrain-bf16", "torch-eager-fp32", "torch-compile-bf16")
# (config, ctrain mode, torch mode): ctrain's epoch must be <= 0.8x torch's
GOALS = [("cnn", "ctrain-bf16", "torch-compile-bf16"), ("cnn", "ctrain-off", "torch-eager-fp32"),
         ("resnet-fashion", "ctrain-bf16", "torch-compile-bf16")]
GOAL_RATIO = 0.8


# ---- one PyTorch run (a subprocess) -------------------------------------------------

def torch_run(a):
    import torch
    import torch.nn as nn
    import yaml
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import reference_pytorch as ref

    with open(a.torch_run) as f:
        cfg = yaml.safe_load(f)
    dev = torch.device(a.device)
    torch.manual_seed(42)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as ctrain's
        torch.backends.cudnn.allow_tf32 = False
    bf16 = a.mode.endswith("bf16")
    train = cfg.get("train", {}) or {}
    data = cfg["data"]
    epochs, batch = a.epochs, a.batch
    xtr, ytr = ref.load_raw(cfg, a.torch_run, "train")
    split = data.get("val_split")
    if split:  # the held-out part is not trained on, as in ctrain
        n_val = int(split) if split >= 1 else int(round(split * len(xtr)))
        perm = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(42))
        xtr, ytr = xtr[perm[n_val:]], ytr[perm[n_val:]]
    xte, yte = ref.load_raw(cfg, a.torch_run, "test")
    xtr, ytr, xte, yte = (t.to(dev) for t in (xtr, ytr, xte, yte))
    norm = cfg["data"].get("normalize", {}) or {}
    c = cfg["model"]["input"][0]
    mean = torch.tensor(norm.get("mean", 0.0), dtype=torch.float32, device=dev).expand(c)
    std = torch.tensor(norm.get("std", 1.0), dtype=torch.float32, device=dev).expand(c)
    mean, std = mean.reshape(1, c, 1, 1), std.reshape(1, c, 1, 1)
    aug = data.get("augment", {}) or {}
    crop, hflip = aug.get("crop", 0), aug.get("hflip", False)

    def prep(xb):
        B, C, H, W = xb.shape
        if crop:
            xp = nn.functional.pad(xb, (crop, crop, crop, crop))
            oy = torch.randint(0, 2 * crop + 1, (B,), device=dev)
            ox = torch.randint(0, 2 * crop + 1, (B,), device=dev)
            iy = (oy[:, None] + torch.arange(H, device=dev))[:, None, :, None]
            ix = (ox[:, None] + torch.arange(W, device=dev))[:, None, None, :]
            xb = xp[torch.arange(B, device=dev)[:, None, None, None],
                    torch.arange(C, device=dev)[None, :, None, None], iy, ix]
        if hflip:
            flip = torch.rand(B, device=dev) < 0.5
            xb = torch.where(flip[:, None, None, None], xb.flip(-1), xb)
        return (xb.float() / 255.0 - mean) / std

    net = ref.build_model(cfg).to(dev)
    opt = ref.make_optimizer(cfg, net.parameters())
    model = torch.compile(net, mode="reduce-overhead") if "compile" in a.mode else net
    lossf = nn.CrossEntropyLoss(label_smoothing=train.get("label_smoothing", 0.0))
    steps = (len(xtr) + batch - 1) // batch
    times = []
    t_all = time.perf_counter()
    for epoch in range(epochs):
        net.train()
        sync(torch, dev)
        t0 = time.perf_counter()
        perm = torch.randperm(len(xtr), device=dev)
        loss_sum = torch.zeros((), device=dev)
        for k, i in enumerate(range(0, len(xtr), batch)):
            idx = perm[i:i + batch]
            x, y = prep(xtr[idx]), ytr[idx]
            for g in opt.param_groups:
                g["lr"] = ref.lr_at(cfg, epochs, epoch, k, steps)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                out = model(x)
                loss = lossf(out.float(), y)
            loss.backward()
            opt.step()
            loss_sum += loss.detach() * len(y)
        sync(torch, dev)
        times.append(time.perf_counter() - t0)
    net.eval()
    correct = 0
    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
        for i in range(0, len(xte), 1024):
            correct += (net(prep(xte[i:i + 1024])).argmax(1) == yte[i:i + 1024]).sum().item()
    print(json.dumps({"mode": a.mode, "batch": batch, "epoch_s": times,
                      "total_s": time.perf_counter() - t_all,
                      "train_loss": loss_sum.item() / len(xtr), "test_acc": correct / len(yte),
                      "torch": torch.__version__, "device": device_name(torch, dev)}), flush=True)


def sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def device_name(torch, dev):
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"


# ---- the driver -------------------------------------------------------------------------

def write_idx(path, arr):
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(bytes([0, 0, 8, arr.ndim]))
        for d in arr.shape:
            f.write(int(d).to_bytes(4, "big"))
        f.write(arr.tobytes())


def config_for(name, batch, tmp, limit):
    """configs/NAME.yaml at this batch size, with absolute data paths (MNIST for
    Fashion-MNIST where that is not installed; the first `limit` training images when
    given) in a file of its own. Returns (path, data note)."""
    import yaml
    with open(os.path.join(ROOT, "configs", name + ".yaml")) as f:
        cfg = yaml.safe_load(f)
    d, note = cfg["data"], ""
    for k in ("train_images", "train_labels", "test_images", "test_labels"):
        p = d[k]
        if p.startswith(FASHION) and not os.path.exists(p):
            p = os.path.join(MNIST, os.path.basename(p))
            note = "MNIST for Fashion-MNIST"
        elif not os.path.isabs(p):
            p = os.path.join(ROOT, p)
        d[k] = p
    if limit:
        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        import reference_pytorch as ref
        for which in ("train", "test"):
            for kind in ("images", "labels"):
                arr = ref.read_idx(d[f"{which}_{kind}"])[:limit if which == "train" else limit // 4]
                out = os.path.join(tmp, f"{name}-{which}-{kind}.gz")
                if not os.path.exists(out):
                    write_idx(out, arr)
                d[f"{which}_{kind}"] = out
        if isinstance(d.get("val_split"), int) and d["val_split"] >= limit // 2:
            d["val_split"] = limit // 10
        note = (note + "; " if note else "") + f"first {limit} images"
    cfg.setdefault("train", {})["batch_size"] = batch
    path = os.path.join(tmp, f"{name}-b{batch}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    return path, note


def run_ctrain(a, cfg, mode, tmp, tag):
    amp = CTRAIN_MODES[mode]
    cmd = [a.ctrain, "fit", cfg, "--json", "--no-progress", "--epochs", str(a.epochs),
           "--device", a.device, "--amp", amp, "--out", os.path.join(tmp, "runs", tag)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=a.timeout)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
    ep = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    ep = [e for e in ep if e.get("type") == "epoch"]
    return {"epoch_s": [e["train_seconds"] for e in ep],
            "test_acc": ep[-1].get("test_acc", ep[-1].get("val_acc")) if ep else None}


def run_torch(a, cfg, mode, batch):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-run", cfg, "--batch", str(batch),
           "--mode", mode, "--epochs", str(a.epochs), "--device", a.device]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=a.timeout)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def torch_usable(device):
    code = "import torch, sys; sys.exit(0 if %s else 1)" % (
        "torch.cuda.is_available()" if device.startswith("cuda") else "True")
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def steady(r):
    """The median epoch after the first (the warm-up); the only one when there is one."""
    t = r.get("epoch_s") or []
    return statistics.median(t[1:]) if len(t) > 1 else (t[0] if t else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctrain", default=os.path.join(ROOT, "build", "ctrain"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--plan", nargs="*", default=None)
    ap.add_argument("--modes", default=None)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--torch-run", metavar="CONFIG")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--mode")
    a = ap.parse_args()
    if a.torch_run:
        return torch_run(a)
    if a.epochs < 1:
        sys.exit("gpu_vs_torch.py: --epochs must be >= 1")
    modes = a.modes.split(",") if a.modes else [
        m for m in DEFAULT_MODES if a.device != "cpu" or "compile" not in m]
    bad = [m for m in modes if m not in CTRAIN_MODES and m not in TORCH_MODES]
    if bad:
        sys.exit(f"gpu_vs_torch.py: unknown mode {bad[0]} (modes: "
                 f"{', '.join(list(CTRAIN_MODES) + list(TORCH_MODES))})")
    if not torch_usable(a.device):
        print(f"SKIP: PyTorch cannot run on {a.device} here", flush=True)
        return 77
    plan = []
    for item in a.plan or DEFAULT_PLAN:
        name, _, sizes = item.partition(":")
        if not os.path.exists(os.path.join(ROOT, "configs", name + ".yaml")) or not sizes:
            sys.exit(f"gpu_vs_torch.py: bad plan entry '{item}' (CONFIG:B1,B2,...)")
        plan += [(name, int(b)) for b in sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, batch in plan:
            cfg, note = config_for(name, batch, tmp, a.limit)
            row = {"config": name, "batch": batch, "note": note, "runs": {}}
            for m in modes:
                t0 = time.perf_counter()
                try:
                    r = (run_ctrain(a, cfg, m, tmp, f"{name}-{batch}-{m}") if m in CTRAIN_MODES
                         else run_torch(a, cfg, m, batch))
                except subprocess.TimeoutExpired:
                    r = {"error": f"timed out after {a.timeout} s"}
                r["steady_s"] = steady(r)
                row["runs"][m] = r
                print(f"{name} batch {batch} {m}: "
                      + (r["error"] if "error" in r else f"{r['steady_s']:.3f} s/epoch")
                      + f" ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
            rows.append(row)
    print_table(rows, modes)
    goals = check_goals(rows)
    for g in goals:
        print(g["line"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "epochs": a.epochs, "rows": rows, "goals": goals}, f,
                      indent=1)
    failed = [f"{r['config']}:{r['batch']}:{m}" for r in rows for m, x in r["runs"].items()
              if "error" in x]
    if failed:
        print("runs that failed: " + ", ".join(failed))
    return 1 if failed else 0


def print_table(rows, modes):
    print("\n| config | batch | " + " | ".join(modes) + " | ctrain bf16 / compile bf16 | "
          "ctrain off / eager fp32 | data |")
    print("|---|---|" + "---|" * (len(modes) + 3))
    for r in rows:
        cells = []
        for m in modes:
            x = r["runs"].get(m, {})
            s = "FAIL" if "error" in x else f"{x['steady_s']:.3f} s"
            if x.get("test_acc") is not None:
                s += f" ({x['test_acc']:.4f})"
            cells.append(s)
        print(f"| {r['config']} | {r['batch']} | " + " | ".join(cells) + " | "
              + ratio(r, "ctrain-bf16", "torch-compile-bf16") + " | "
              + ratio(r, "ctrain-off", "torch-eager-fp32") + f" | {r['note'] or 'as configured'} |")
    print("\nEach cell: the median training epoch after the first, in seconds, and the accuracy "
          "after the last (ctrain: the epoch's val_acc, the held-out part with data.val_split; "
          "PyTorch: the test set).")


def ratio(r, a, b):
    x, y = r["runs"].get(a, {}).get("steady_s"), r["runs"].get(b, {}).get("steady_s")
    return f"{x / y:.2f}x" if x and y else "-"


def check_goals(rows):
    out = []
    for cfg, mine, theirs in GOALS:
        sel = [r for r in rows if r["config"] == cfg]
        vals = [(r["batch"], r["runs"].get(mine, {}).get("steady_s"),
                 r["runs"].get(theirs, {}).get("steady_s")) for r in sel]
        vals = [(b, x / y) for b, x, y in vals if x and y]
        if not vals:
            continue
        met = all(v <= GOAL_RATIO for _, v in vals)
        out.append({"config": cfg, "ctrain": mine, "torch": theirs, "met": met,
                    "ratios": {str(b): round(v, 3) for b, v in vals},
                    "line": f"goal {cfg} {mine} <= {GOAL_RATIO}x {theirs}: "
                            + ("met" if met else "NOT met") + " ("
                            + ", ".join(f"batch {b} {v:.2f}x" for b, v in vals) + ")"})
    return out


if __name__ == "__main__":
    sys.exit(main())
