#!/usr/bin/env python3
"""reference_pytorch.py: the same training as `ctrain fit CONFIG`, written in PyTorch.

Builds the config's layer list as an nn.Sequential stored as `layers` (residual
blocks as modules with `body` and `shortcut` Sequentials), so its state_dict names
equal ctrain's checkpoint names, batch norms' buffers included; PyTorch's default
init (the Kaiming-uniform scheme ctrain copies); the config's optimizer
(sgd/adam/adamw with lr, momentum, weight decay, betas, eps, clip_grad_norm) and learning-rate
schedule per step (constant, step, cosine, linear warmup, as ctrain computes it);
batch size, per-channel normalization, epochs, train.label_smoothing (training and
evaluation loss), data.val_split (a seeded hold-out: each epoch reports it, the
test set is evaluated once at the end) and data.augment (random crop with zero
padding and horizontal flip on the uint8 images, random erasing on the normalized
ones, from PyTorch's own random stream), with
the whole dataset preloaded as tensors. Prints one JSON object per epoch and a
final summary line, for scripts/bench-vs-pytorch.

    /usr/bin/python3 scripts/reference_pytorch.py configs/cnn.yaml [--epochs N]
        [--threads N] [--bf16] [--seed N]
    /usr/bin/python3 scripts/reference_pytorch.py CONFIG --eval-checkpoint model.bin

--eval-checkpoint loads a ctrain checkpoint (safetensors) into the model with
load_state_dict(strict=True), the optimizer's tensors aside, and prints the test
loss and accuracy as JSON, and the seconds and images/s of that evaluation under
torch.inference_mode() in batches of train.batch_size, after one warm-up batch (the
time ctrain eval reports: no loading, no model building).

Only for comparison runs; needs Debian's python3-torch and python3-yaml.
"""
import argparse
import glob
import gzip
import json
import os
import math
import resource
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import yaml


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def resolve_glob(pattern, config_path):
    """The files a data path or pattern names, sorted, tried as ctrain does: as given,
    then from the config's directory and its parent."""
    base = os.path.dirname(os.path.abspath(config_path))
    for cand in (pattern, os.path.join(base, pattern), os.path.join(base, "..", pattern)):
        found = sorted(glob.glob(cand))
        if found:
            return found
    sys.exit(f"reference_pytorch.py: no file matches {pattern}")


def read_cifar10(paths):
    """CIFAR-10 binary records (1 label byte, 3072 pixel bytes: R, G, B planes of
    32x32): uint8 images [N, 3, 32, 32] and labels [N]."""
    raw = np.concatenate([np.fromfile(p, np.uint8) for p in paths])
    rec = raw.reshape(-1, 3073)
    return rec[:, 1:].reshape(-1, 3, 32, 32), rec[:, 0].astype(np.int64)


def resolve(path, config_path):
    if os.path.exists(path):
        return path
    base = os.path.dirname(os.path.abspath(config_path))
    for cand in (os.path.join(base, path), os.path.join(base, "..", path)):
        if os.path.exists(cand):
            return cand
    return path


class Residual(nn.Module):
    """ctrain's residual block: body(x) + shortcut(x); an absent shortcut is the
    identity (no parameters, so state_dict names are layers.<t>.body.<j>.* and
    layers.<t>.shortcut.<j>.*)."""

    def __init__(self, body, shortcut):
        super().__init__()
        self.body = body
        self.shortcut = shortcut if shortcut is not None else nn.Identity()

    def forward(self, x):
        return self.body(x) + self.shortcut(x)


def build_layers(entries, shape, flat=False):
    """nn.Modules for a list of config layer entries from input shape (C, H, W)
    (flat: a vector, after flatten or linear); returns (modules, shape, flat)."""
    mods = []
    for entry in entries:
        kind, p = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()))
        p = p or {}
        if kind == "conv2d":
            m = nn.Conv2d(shape[0], p["out_channels"], p["kernel"], p.get("stride", 1),
                          p.get("padding", 0), bias=p.get("bias", True))
            k, s, pad = p["kernel"], p.get("stride", 1), p.get("padding", 0)
            shape = (p["out_channels"], (shape[1] + 2 * pad - k) // s + 1,
                     (shape[2] + 2 * pad - k) // s + 1)
        elif kind in ("maxpool2d", "avgpool2d"):
            k, s, pad = p["kernel"], p.get("stride", p["kernel"]), p.get("padding", 0)
            m = (nn.MaxPool2d if kind == "maxpool2d" else nn.AvgPool2d)(k, s, pad)
            shape = (shape[0], (shape[1] + 2 * pad - k) // s + 1, (shape[2] + 2 * pad - k) // s + 1)
        elif kind == "relu":
            # not in place: inside a residual block the input is also the shortcut's
            m = nn.ReLU()
        elif kind in ("gelu", "silu", "tanh", "sigmoid"):
            m = {"gelu": nn.GELU, "silu": nn.SiLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[kind]()
        elif kind == "leaky_relu":
            m = nn.LeakyReLU(p.get("slope", 0.01))
        elif kind == "global_avgpool":
            if flat:
                sys.exit("reference_pytorch.py: global_avgpool needs a C x H x W input")
            m = nn.AdaptiveAvgPool2d(1)
            shape = (shape[0], 1, 1)
        elif kind == "flatten":
            m = nn.Flatten()
            shape, flat = (shape[0] * shape[1] * shape[2], 1, 1), True
        elif kind == "linear":
            m = nn.Linear(shape[0], p["out_features"], bias=p.get("bias", True))
            shape, flat = (p["out_features"], 1, 1), True
        elif kind == "dropout":
            m = nn.Dropout(p.get("p", 0.5))
        elif kind == "residual":
            body, out, out_flat = build_layers(p["body"], shape, flat)
            shortcut = None
            if p.get("shortcut"):
                sc, _, _ = build_layers(p["shortcut"], shape, flat)
                shortcut = nn.Sequential(*sc)
            m = Residual(nn.Sequential(*body), shortcut)
            shape, flat = out, out_flat
        elif kind in ("batchnorm2d", "batchnorm1d"):
            # ctrain's num_features is the channels (2d) or the features (1d, flat)
            bn = nn.BatchNorm2d if kind == "batchnorm2d" else nn.BatchNorm1d
            m = bn(shape[0], eps=float(p.get("eps", 1e-5)), momentum=float(p.get("momentum", 0.1)))
        else:
            sys.exit(f"reference_pytorch.py: unsupported layer '{kind}'")
        mods.append(m)
    return mods, shape, flat


def build_model(cfg):
    mods, _, _ = build_layers(cfg["model"]["layers"], tuple(cfg["model"]["input"]))
    net = nn.Module()
    net.layers = nn.Sequential(*mods)
    net.forward = net.layers.forward
    return net


def make_optimizer(cfg, params):
    o = cfg.get("optimizer", {}) or {}
    kind, lr = o.get("type", "adam"), o.get("lr", 1e-3)
    betas = tuple(o.get("betas", (0.9, 0.999)))
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=o.get("momentum", 0.0),
                               nesterov=o.get("nesterov", False),
                               weight_decay=o.get("weight_decay", 0.0))
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=o.get("eps", 1e-8),
                                 weight_decay=o.get("weight_decay", 0.01))
    return torch.optim.Adam(params, lr=lr, betas=betas, eps=o.get("eps", 1e-8),
                            weight_decay=o.get("weight_decay", 0.0))


SAFETENSORS_DTYPES = {torch.float32: ("F32", np.float32), torch.int64: ("I64", np.int64)}
SAFETENSORS_NP = {"F32": np.float32, "I64": np.int64}


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        code, npt = SAFETENSORS_DTYPES[t.dtype]
        raw = t.detach().contiguous().numpy().astype(npt).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """name -> tensor of a safetensors file (ctrain's model.bin), metadata aside."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        a, b = d["data_offsets"]
        arr = np.frombuffer(data[a:b], SAFETENSORS_NP[d["dtype"]]).reshape(d["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def load_raw(cfg, config_path, which):
    """uint8 images [N, C, H, W] and int64 labels of an IDX split."""
    d = cfg["data"]
    if d.get("format", "idx") == "cifar10":
        x, y = read_cifar10(resolve_glob(d[f"{which}_images"], config_path))
        return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y)
    if d.get("format", "idx") != "idx":
        sys.exit("reference_pytorch.py: data.format must be idx or cifar10")
    x = read_idx(resolve(d[f"{which}_images"], config_path))
    y = read_idx(resolve(d[f"{which}_labels"], config_path)).astype(np.int64)
    c, h, w = cfg["model"]["input"]
    if x.ndim == 4 and x.shape[1:] == (h, w, c) and x.shape[1:] != (c, h, w):
        x = x.transpose(0, 3, 1, 2)
    return torch.from_numpy(np.array(x).reshape(-1, c, h, w)), torch.from_numpy(y)


def normalizer(cfg):
    """uint8 [B, C, H, W] -> float32 (x / 255 - mean[c]) / std[c]."""
    norm = cfg["data"].get("normalize", {}) or {}
    c = cfg["model"]["input"][0]
    mean = torch.tensor(norm.get("mean", 0.0), dtype=torch.float64).expand(c).reshape(1, c, 1, 1)
    std = torch.tensor(norm.get("std", 1.0), dtype=torch.float64).expand(c).reshape(1, c, 1, 1)
    return lambda xb: ((xb.double() / 255.0 - mean) / std).float()


def load_split(cfg, config_path, which):
    x, y = load_raw(cfg, config_path, which)
    return normalizer(cfg)(x), y


def augment(xb, crop, hflip):
    """Random crop with `crop` zero pixels of padding, then a flip with probability 1/2,
    per sample of a uint8 batch [B, C, H, W]."""
    B, C, H, W = xb.shape
    if crop:
        xp = nn.functional.pad(xb, (crop, crop, crop, crop))
        oy = torch.randint(0, 2 * crop + 1, (B,))
        ox = torch.randint(0, 2 * crop + 1, (B,))
        iy = (oy[:, None] + torch.arange(H))[:, None, :, None]
        ix = (ox[:, None] + torch.arange(W))[:, None, None, :]
        xb = xp[torch.arange(B)[:, None, None, None], torch.arange(C)[None, :, None, None], iy, ix]
    if hflip:
        flip = torch.rand(B) < 0.5
        xb = torch.where(flip[:, None, None, None], xb.flip(-1), xb)
    return xb


def erase_sides(n):
    lo = (n + 7) // 8
    return lo, max(lo, n // 2)


def erase(x, p):
    """ctrain's data.augment.erase on a normalized batch [B, C, H, W]: with probability
    p a rectangle, sides uniform in [ceil(n / 8), max(that, n / 2)], inside the image,
    set to 0 in every channel (src/data/pixels.h)."""
    if not p:
        return x
    B, _, H, W = x.shape
    hlo, hhi = erase_sides(H)
    wlo, whi = erase_sides(W)
    x = x.clone()
    for b in torch.nonzero(torch.rand(B) < p).flatten().tolist():
        eh = int(torch.randint(hlo, hhi + 1, ()))
        ew = int(torch.randint(wlo, whi + 1, ()))
        ey = int(torch.randint(0, H - eh + 1, ()))
        ex = int(torch.randint(0, W - ew + 1, ()))
        x[b, :, ey:ey + eh, ex:ex + ew] = 0.0
    return x


def lr_at(cfg, epochs, epoch, step, steps):
    """ctrain's per-step learning rate (src/train/schedule.c)."""
    s = cfg.get("schedule", {}) or {}
    base = (cfg.get("optimizer", {}) or {}).get("lr", 1e-3)
    warm = s.get("warmup_epochs", 0)
    pos = epoch + step / steps
    if pos < warm:
        return base * (epoch * steps + step + 1) / (warm * steps)
    kind = s.get("type", "constant")
    if kind == "step":
        return base * s.get("gamma", 0.1) ** ((epoch - warm) // s.get("step_size", 1))
    if kind == "cosine":
        span = epochs - warm
        t = min((pos - warm) / span, 1.0) if span > 0 else 1.0
        lo = s.get("min_lr", 0.0)
        return lo + (base - lo) * 0.5 * (1.0 + math.cos(math.pi * t))
    return base


def evaluate(net, x, y, batch, bf16, smoothing, inference=False):
    net.eval()
    loss_sum, correct = 0.0, 0
    grad_off = torch.inference_mode() if inference else torch.no_grad()
    with grad_off, torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for i in range(0, len(x), batch):
            out = net(x[i:i + batch]).float()
            loss_sum += nn.functional.cross_entropy(out, y[i:i + batch], reduction="sum",
                                                    label_smoothing=smoothing).item()
            correct += (out.argmax(1) == y[i:i + batch]).sum().item()
    return loss_sum / len(x), correct / len(x)


def eval_checkpoint(cfg, config_path, path):
    net = build_model(cfg)
    params = {k: v for k, v in read_safetensors(path).items() if not k.startswith("optimizer.")}
    net.load_state_dict(params, strict=True)
    x, y = load_split(cfg, config_path, "test")
    train = cfg.get("train", {}) or {}
    smoothing = train.get("label_smoothing", 0.0)
    batch = train.get("batch_size", 64)
    evaluate(net, x[:batch], y[:batch], batch, False, smoothing, True)  # warm-up: one batch
    t0 = time.perf_counter()
    loss, acc = evaluate(net, x, y, batch, False, smoothing, True)
    seconds = time.perf_counter() - t0
    print(json.dumps({"checkpoint": path, "strict": True, "test_loss": round(loss, 4),
                      "test_acc": round(acc, 4), "correct": round(acc * len(y)),
                      "samples": len(y), "seconds": seconds,
                      "images_per_s": len(y) / seconds}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--eval-checkpoint", metavar="FILE")
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = yaml.safe_load(f)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.eval_checkpoint:
        return eval_checkpoint(cfg, a.config, a.eval_checkpoint)
    train = cfg.get("train", {}) or {}
    data = cfg["data"]
    epochs = a.epochs or train.get("epochs", 10)
    batch = train.get("batch_size", 64)
    norm = normalizer(cfg)
    xtr, ytr = load_raw(cfg, a.config, "train")
    xte, yte = load_split(cfg, a.config, "test")
    split = data.get("val_split")
    xval, yval = xte, yte
    if split:
        n_val = int(split) if split >= 1 else int(round(split * len(xtr)))
        perm = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(a.seed))
        xval, yval = norm(xtr[perm[:n_val]]), ytr[perm[:n_val]]
        xtr, ytr = xtr[perm[n_val:]], ytr[perm[n_val:]]
    aug = data.get("augment", {}) or {}
    crop, hflip, erase_p = aug.get("crop", 0), aug.get("hflip", False), aug.get("erase", 0.0)
    net = build_model(cfg)
    opt = make_optimizer(cfg, net.parameters())
    smoothing = train.get("label_smoothing", 0.0)
    lossf = nn.CrossEntropyLoss(label_smoothing=smoothing)
    steps = (len(xtr) + batch - 1) // batch
    for epoch in range(epochs):
        net.train()
        t0 = time.perf_counter()
        perm = torch.randperm(len(xtr)) if data.get("shuffle", True) else torch.arange(len(xtr))
        loss_sum, correct = 0.0, 0
        for k, i in enumerate(range(0, len(xtr), batch)):
            idx = perm[i:i + batch]
            x, y = erase(norm(augment(xtr[idx], crop, hflip)), erase_p), ytr[idx]
            for g in opt.param_groups:
                g["lr"] = lr_at(cfg, epochs, epoch, k, steps)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                out = net(x)
                loss = lossf(out.float(), y)
            loss.backward()
            clip = (cfg.get("optimizer", {}) or {}).get("clip_grad_norm", 0)
            if clip:
                nn.utils.clip_grad_norm_(net.parameters(), clip)
            opt.step()
            loss_sum += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
        t_train = time.perf_counter() - t0
        t1 = time.perf_counter()
        vloss, vacc = evaluate(net, xval, yval, batch, a.bf16, smoothing)
        t_eval = time.perf_counter() - t1
        print(json.dumps({"epoch": epoch + 1, "train_s": round(t_train, 3), "eval_s": round(t_eval, 3),
                          "samples_per_s": round(len(xtr) / t_train, 1),
                          "train_loss": round(loss_sum / len(xtr), 4),
                          "train_acc": round(correct / len(xtr), 4),
                          "val_loss": round(vloss, 4), "val_acc": round(vacc, 4)}), flush=True)
    summary = {"summary": True}
    if split:
        tloss, tacc = evaluate(net, xte, yte, batch, a.bf16, smoothing)
        summary.update(test_loss=round(tloss, 4), test_acc=round(tacc, 4))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    summary.update(threads=torch.get_num_threads(), bf16=a.bf16, torch=torch.__version__,
                   peak_rss_mib=round(rss, 1))
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
