#!/usr/bin/env python3
"""torch_parity.py: ctrain against PyTorch, one training epoch and one evaluation.

For each model below (residual blocks of every kind, batch norms in blocks and
shortcuts, each activation layer, global average pooling, label smoothing): PyTorch (scripts/reference_pytorch.py builds the same module
tree, so state_dict names equal ctrain's checkpoint names) writes its initial
weights as safetensors; `ctrain fit --init-from` trains one epoch from them on the
first 600 MNIST training images in order (no shuffling, no dropout or augmentation,
SGD with Nesterov momentum and weight decay, a partial last batch); PyTorch trains
the same epoch. Every tensor of PyTorch's state_dict (weights, and batch-norm
buffers where a model has them) must match ctrain's within 2e-3 of the tensor's
largest magnitude; integer buffers exactly. Then PyTorch loads ctrain's checkpoint
with load_state_dict(strict=True) (optimizer tensors aside) and must get the test
accuracy `ctrain eval` prints, sample for sample, on 300 test images; and the file
`ctrain export --safetensors` writes from it loads with strict=True as it is,
holding exactly the checkpoint's weights and buffers.

    /usr/bin/python3 tests/torch_parity.py BUILD_DIR/ctrain

Exits 77 (skipped) when PyTorch (Debian's python3-torch) is not installed.
"""
import gzip
import os
import re
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import yaml
except ImportError as e:  # the suite's visible skip
    print(f"torch_parity: skipped: {e} (install python3-torch, python3-yaml)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import reference_pytorch as ref  # noqa: E402

TOL = 2e-3
N_TRAIN, N_TEST = 600, 300

# name -> (model.layers (YAML), extra train keys); each ends with 10 outputs. No
# dropout: PyTorch's stream is not ctrain's.
MODELS = {
    "residual": ("""
    - conv2d: {out_channels: 8, kernel: 3, padding: 1, bias: false}
    - relu
    - residual:
        body:
          - conv2d: {out_channels: 8, kernel: 3, padding: 1}
          - relu
          - conv2d: {out_channels: 8, kernel: 3, padding: 1}
    - relu
    - residual:
        body:
          - relu
          - conv2d: {out_channels: 16, kernel: 3, stride: 2, padding: 1}
          - relu
          - conv2d: {out_channels: 16, kernel: 3, padding: 1}
        shortcut:
          - conv2d: {out_channels: 16, kernel: 1, stride: 2, bias: false}
    - maxpool2d: {kernel: 2}
    - flatten
    - residual:
        body: [linear: {out_features: 784}, relu, linear: {out_features: 784}]
    - linear: {out_features: 10}
""", ""),
    # Batch norms in the stem, the blocks, a projection shortcut and the head, with
    # silu: a relu after a batch norm sees many values at its kink (the norm centres
    # them on 0), fp32 rounding flips some, and ten SGD steps then carry PyTorch's
    # own fp32 run about 10% (of a tensor's largest value) from its float64 run, so
    # no fp32 implementation could meet the tolerance there; with silu both stay
    # within about 1e-5 of each other and of float64.
    "resnet_bn": ("""
    - conv2d: {out_channels: 8, kernel: 3, padding: 1, bias: false}
    - batchnorm2d
    - silu
    - residual:
        body:
          - conv2d: {out_channels: 8, kernel: 3, padding: 1, bias: false}
          - batchnorm2d
          - silu
          - conv2d: {out_channels: 8, kernel: 3, padding: 1, bias: false}
          - batchnorm2d: {momentum: 0.2}
    - silu
    - residual:
        body:
          - conv2d: {out_channels: 16, kernel: 3, stride: 2, padding: 1, bias: false}
          - batchnorm2d
          - silu
          - conv2d: {out_channels: 16, kernel: 3, padding: 1, bias: false}
          - batchnorm2d
        shortcut:
          - conv2d: {out_channels: 16, kernel: 1, stride: 2, bias: false}
          - batchnorm2d
    - silu
    - global_avgpool
    - flatten
    - linear: {out_features: 32}
    - batchnorm1d
    - silu
    - linear: {out_features: 10}
""", ""),
    "activations": ("""
    - conv2d: {out_channels: 8, kernel: 3, padding: 1}
    - gelu
    - residual:
        body: [silu, conv2d: {out_channels: 8, kernel: 3, padding: 1}, tanh]
    - maxpool2d: {kernel: 2}
    - residual:
        body: [conv2d: {out_channels: 12, kernel: 3, padding: 1}, sigmoid]
        shortcut: [conv2d: {out_channels: 12, kernel: 1}, leaky_relu: {slope: 0.1}]
    - global_avgpool
    - flatten
    - linear: {out_features: 10}
""", "label_smoothing: 0.1, "),
}

def idx_subset(src, dst, n):
    with gzip.open(src, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    per = 1
    for d in dims[1:]:
        per *= d
    head = data[:4] + n.to_bytes(4, "big") + data[8:4 + 4 * ndim]
    with gzip.open(dst, "wb") as f:
        f.write(head + data[4 + 4 * ndim:4 + 4 * ndim + n * per])


SGD = "{type: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 0.0005}"


def write_config(tmp, name, layers, train_extra, optimizer=SGD):
    text = f"""name: {name}
model:
  input: [1, 28, 28]
  layers:{layers}
data:
  train_images: {tmp}/train-images.gz
  train_labels: {tmp}/train-labels.gz
  test_images: {tmp}/test-images.gz
  test_labels: {tmp}/test-labels.gz
  normalize: {{mean: 0.1307, std: 0.3081}}
  shuffle: false
optimizer: {optimizer}
train: {{{train_extra}epochs: 1, batch_size: 64, seed: 3}}
device: cpu
"""
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def run(args):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"torch_parity: {' '.join(args)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout


def check_model(ctrain, tmp, name, layers, train_extra):
    cfg_path = write_config(tmp, name, layers, train_extra)
    cfg = yaml.safe_load(open(cfg_path))
    torch.manual_seed(11)
    net = ref.build_model(cfg)
    init = os.path.join(tmp, name + "-init.safetensors")
    ref.write_safetensors(init, net.state_dict())
    out = os.path.join(tmp, name + "-run")
    run([ctrain, "fit", cfg_path, "--init-from", init, "--out", out])

    x, y = ref.load_split(cfg, cfg_path, "train")
    opt = ref.make_optimizer(cfg, net.parameters())
    net.train()
    for i in range(0, len(x), 64):
        opt.zero_grad()
        eps = cfg["train"].get("label_smoothing", 0.0)
        nn.functional.cross_entropy(net(x[i:i + 64]), y[i:i + 64], label_smoothing=eps).backward()
        opt.step()

    got = ref.read_safetensors(os.path.join(out, "model.bin"))
    worst, bad = 0.0, []
    for k, want in net.state_dict().items():
        if k not in got:
            bad.append(f"{k}: missing from ctrain's checkpoint")
            continue
        g = got[k]
        if tuple(g.shape) != tuple(want.shape):
            bad.append(f"{k}: shape {tuple(g.shape)}, PyTorch {tuple(want.shape)}")
        elif not want.is_floating_point():
            if not torch.equal(g, want):
                bad.append(f"{k}: {g.tolist()}, PyTorch {want.tolist()}")
        else:
            scale = max(want.abs().max().item(), 1e-12)
            rel = (g - want).abs().max().item() / scale
            worst = max(worst, rel)
            if not rel <= TOL:
                bad.append(f"{k}: differs by {rel:.3g} of its largest value")
    print(f"{name}: {len(net.state_dict())} tensors after one epoch, worst {worst:.2e} "
          f"of a tensor's largest value (tolerance {TOL})")
    if bad:
        sys.exit(f"torch_parity: {name}: " + "; ".join(bad))

    # PyTorch evaluates ctrain's checkpoint
    params = {k: v for k, v in got.items() if not k.startswith("optimizer.")}
    net.load_state_dict(params, strict=True)
    xt, yt = ref.load_split(cfg, cfg_path, "test")
    net.eval()
    with torch.no_grad():
        pt_correct = int((net(xt).argmax(1) == yt).sum().item())
    text = run([ctrain, "eval", "--checkpoint", os.path.join(out, "model.bin")])
    m = re.search(r"Accuracy: [0-9.]+ \((\d+)/(\d+)\)", text)
    if not m:
        sys.exit(f"torch_parity: no accuracy line in ctrain eval's output:\n{text}")
    ct_correct, total = int(m.group(1)), int(m.group(2))
    print(f"{name}: test accuracy ctrain {ct_correct}/{total}, PyTorch on ctrain's checkpoint "
          f"{pt_correct}/{len(yt)}")
    if total != len(yt) or ct_correct != pt_correct:
        sys.exit(f"torch_parity: {name}: ctrain eval {ct_correct}/{total}, PyTorch "
                 f"{pt_correct}/{len(yt)}")

    # `ctrain export --safetensors`: the weights alone, which PyTorch loads as they are
    exported = os.path.join(out, "weights.safetensors")
    run([ctrain, "export", "--checkpoint", os.path.join(out, "model.bin"),
         "--safetensors", exported])
    weights = ref.read_safetensors(exported)
    net.load_state_dict(weights, strict=True)
    if set(weights) != set(params) or any(not torch.equal(weights[k], params[k]) for k in params):
        sys.exit(f"torch_parity: {name}: the exported weights are not the checkpoint's")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: torch_parity.py CTRAIN")
    ctrain = os.path.abspath(sys.argv[1])
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="ctrain-torch-") as tmp:
        mnist = os.path.join(ROOT, "data", "mnist")
        idx_subset(os.path.join(mnist, "train-images-idx3-ubyte.gz"), f"{tmp}/train-images.gz", N_TRAIN)
        idx_subset(os.path.join(mnist, "train-labels-idx1-ubyte.gz"), f"{tmp}/train-labels.gz", N_TRAIN)
        idx_subset(os.path.join(mnist, "t10k-images-idx3-ubyte.gz"), f"{tmp}/test-images.gz", N_TEST)
        idx_subset(os.path.join(mnist, "t10k-labels-idx1-ubyte.gz"), f"{tmp}/test-labels.gz", N_TEST)
        for name, (layers, train_extra) in MODELS.items():
            check_model(ctrain, tmp, name, layers, train_extra)


if __name__ == "__main__":
    main()
