#!/usr/bin/env python3
"""reference_pytorch.py: the same training as `ctrain fit CONFIG`, written in PyTorch.

Builds the config's layer list as an nn.Sequential stored as `layers` (so its
state_dict names equal ctrain's checkpoint names, batch norms' buffers included), PyTorch's default init (the
Kaiming-uniform scheme ctrain copies), the config's optimizer (sgd/adam/adamw with
lr, momentum, weight decay, betas, eps), batch size, normalization, epochs and
train.label_smoothing (training and evaluation loss), with the whole dataset
preloaded as tensors. Prints one JSON object per epoch and a
final summary line, for scripts/bench-vs-pytorch.

    /usr/bin/python3 scripts/reference_pytorch.py configs/cnn.yaml [--epochs N]
        [--threads N] [--bf16] [--seed N]

Only for comparison runs; needs Debian's python3-torch and python3-yaml.
"""
import argparse
import gzip
import json
import os
import resource
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


def load_split(cfg, config_path, which):
    d = cfg["data"]
    norm = d.get("normalize", {}) or {}
    mean, std = norm.get("mean", 0.0), norm.get("std", 1.0)
    x = read_idx(resolve(d[f"{which}_images"], config_path)).astype(np.float32)
    y = read_idx(resolve(d[f"{which}_labels"], config_path)).astype(np.int64)
    x = (x / 255.0 - mean) / std
    c, h, w = cfg["model"]["input"]
    return torch.from_numpy(x.reshape(-1, c, h, w).astype(np.float32)), torch.from_numpy(y)


def evaluate(net, x, y, batch, bf16, smoothing):
    net.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for i in range(0, len(x), batch):
            out = net(x[i:i + batch]).float()
            loss_sum += nn.functional.cross_entropy(out, y[i:i + batch], reduction="sum",
                                                    label_smoothing=smoothing).item()
            correct += (out.argmax(1) == y[i:i + batch]).sum().item()
    return loss_sum / len(x), correct / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast")
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = yaml.safe_load(f)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train = cfg.get("train", {}) or {}
    epochs = a.epochs or train.get("epochs", 10)
    batch = train.get("batch_size", 64)
    xtr, ytr = load_split(cfg, a.config, "train")
    xte, yte = load_split(cfg, a.config, "test")
    net = build_model(cfg)
    opt = make_optimizer(cfg, net.parameters())
    smoothing = train.get("label_smoothing", 0.0)
    lossf = nn.CrossEntropyLoss(label_smoothing=smoothing)
    for epoch in range(epochs):
        net.train()
        t0 = time.perf_counter()
        perm = torch.randperm(len(xtr))
        loss_sum, correct = 0.0, 0
        for i in range(0, len(xtr), batch):
            idx = perm[i:i + batch]
            x, y = xtr[idx], ytr[idx]
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                out = net(x)
                loss = lossf(out.float(), y)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
        t_train = time.perf_counter() - t0
        t1 = time.perf_counter()
        vloss, vacc = evaluate(net, xte, yte, batch, a.bf16, smoothing)
        t_eval = time.perf_counter() - t1
        print(json.dumps({"epoch": epoch + 1, "train_s": round(t_train, 3), "eval_s": round(t_eval, 3),
                          "samples_per_s": round(len(xtr) / t_train, 1),
                          "train_loss": round(loss_sum / len(xtr), 4),
                          "train_acc": round(correct / len(xtr), 4),
                          "val_loss": round(vloss, 4), "val_acc": round(vacc, 4)}), flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"summary": True, "threads": torch.get_num_threads(), "bf16": a.bf16,
                      "torch": torch.__version__, "peak_rss_mib": round(rss, 1)}), flush=True)


if __name__ == "__main__":
    main()
