#!/usr/bin/env python3
"""test_onnx.py: `ctrain export --onnx` read back by onnxruntime, whose logits must be
ctrain's own.

Five models are trained for one epoch on the first 2000 MNIST training images on
the CPU: configs/mlp.yaml, configs/cnn.yaml, an MLP on those images exported as a
PNG folder (data.format folder, data.resize 32), configs/resnet-fashion.yaml (residual
blocks with identity and 1x1-projection shortcuts, batch norms everywhere; its data
keys pointed at the subset) and EVERY_LAYER below, which has every layer kind: max
and average pools with padding in floor mode, each activation, dropout inside and
as the last layer, both batch norms (one with a non-default eps), conv and linear
layers without bias, and residual blocks with an identity and with a conv + batch
norm shortcut, on 3-channel images with a different mean and std per channel. The
batch norms of each checkpoint must hold trained running statistics.

Each checkpoint is exported, and onnxruntime loads the file (which checks the
model). Its input is prepared from the raw test pixels with the normalization the
file's own metadata gives; ctrain's logits for the same images come from
`ctrain predict --json`. They must agree within TOL of the largest logit's
magnitude, and the predicted classes must be the same (unless ctrain's two best
logits are closer than that). The file's header must say IR version 8, opset 17,
producer ctrain, input "input" [N, C, H, W] and output "logits" [N, 10]; the folder
model's metadata says how its images were sized ("image_size"), the others' do not.

One export writes --onnx and --safetensors at once. A safetensors file without an
embedded config (that --safetensors output), and a checkpoint with a batch norm's
running variance taken out, are refused with one line naming the problem, and
nothing is written.

    PYTHON_WITH_ONNXRUNTIME tests/test_onnx.py BUILD_DIR/ctrain

Exits 77 (skipped) when this Python has no onnxruntime (scripts/setup.sh installs it
in .venv-onnx) or the build has no ONNX support.
"""
import gzip
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnxruntime as ort
except ImportError as e:
    print(f"test_onnx: skipped: {e} (scripts/setup.sh installs onnxruntime in .venv-onnx)")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MNIST = os.path.join(ROOT, "data", "mnist")
N_TRAIN, N_TEST = 2000, 100
TOL = 1e-4

# Every layer kind; 3 x 28 x 28 inputs (IDX [N, 3, 28, 28]).
EVERY_LAYER = """name: every-layer
model:
  input: [3, 28, 28]
  layers:
    - conv2d: {out_channels: 8, kernel: 3, padding: 1, bias: false}
    - batchnorm2d: {eps: 0.001}
    - leaky_relu: {slope: 0.1}
    - maxpool2d: {kernel: 3, stride: 2, padding: 1}   # 28 -> 14, floor mode
    - residual:
        body:
          - conv2d: {out_channels: 8, kernel: 3, padding: 1}
          - batchnorm2d
          - gelu
          - conv2d: {out_channels: 8, kernel: 3, padding: 1}
    - silu
    - residual:
        body:
          - conv2d: {out_channels: 12, kernel: 3, stride: 2, padding: 1}
          - batchnorm2d
          - tanh
        shortcut:
          - conv2d: {out_channels: 12, kernel: 1, stride: 2, bias: false}
          - batchnorm2d
    - avgpool2d: {kernel: 3, stride: 1, padding: 1}   # padding counted in the mean
    - sigmoid
    - global_avgpool
    - flatten
    - linear: {out_features: 32, bias: false}
    - batchnorm1d
    - relu
    - dropout: {p: 0.3}
    - linear: {out_features: 10}
    - dropout: {p: 0.1}
  loss: cross_entropy
optimizer: {type: adam, lr: 0.003}
data:
  train_images: train-images-rgb.gz
  train_labels: train-labels.gz
  test_images: test-images-rgb.gz
  test_labels: test-labels.gz
  num_classes: 10
  normalize: {mean: [0.1, 0.2, 0.7], std: [0.3, 0.4, 0.25]}
train: {epochs: 1, batch_size: 64, seed: 5}
device: cpu
"""


def fail(what):
    sys.exit(f"test_onnx: {what}")


def run(args, expect=0):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != expect:
        fail(f"{' '.join(args)}: exit {p.returncode}, not {expect}:\n{p.stdout}{p.stderr}")
    return p


# ---- data -------------------------------------------------------------------------

def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def write_idx(path, array):
    head = bytes([0, 0, 8, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(head + np.ascontiguousarray(array, np.uint8).tobytes())


def rgb(images):
    """3-channel images from MNIST's: the digit, its transpose, its negative."""
    return np.stack([images, images.transpose(0, 2, 1), 255 - images], axis=1)


def write_data(tmp):
    for split, n, name in (("train", N_TRAIN, "train"), ("t10k", N_TEST, "test")):
        images = read_idx(os.path.join(MNIST, f"{split}-images-idx3-ubyte.gz"))[:n]
        labels = read_idx(os.path.join(MNIST, f"{split}-labels-idx1-ubyte.gz"))[:n]
        write_idx(os.path.join(tmp, f"{name}-images.gz"), images)
        write_idx(os.path.join(tmp, f"{name}-images-rgb.gz"), rgb(images))
        write_idx(os.path.join(tmp, f"{name}-labels.gz"), labels)


# ---- files ---------------------------------------------------------------------------

def read_safetensors(path):
    """(header without __metadata__, metadata, data section) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    return header, meta, raw[8 + n:]


def tensor(header, data, name):
    t = header[name]
    begin, end = t["data_offsets"]
    return np.frombuffer(data[begin:end], np.float32).reshape(t["shape"])


def check_running_stats(name, ckpt):
    """Every batch norm's running statistics have moved from their start (0 and 1)."""
    header, _, data = read_safetensors(ckpt)
    norms = [k[:-len(".running_var")] for k in header if k.endswith(".running_var")]
    for bn in norms:
        mean, var = tensor(header, data, bn + ".running_mean"), tensor(header, data, bn + ".running_var")
        if np.all(mean == 0) or np.all(var == 1):
            fail(f"{name}: {bn} holds untrained running statistics")
    return len(norms)


def fields(buf):
    """The top-level fields of a protocol buffer message: {number: [value, ...]},
    varints as ints, length-delimited ones as bytes."""
    out, i = {}, 0
    def varint():
        nonlocal i
        v = shift = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v
    while i < len(buf):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 2:
            n = varint()
            value, i = buf[i:i + n], i + n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            value, i = buf[i:i + n], i + n
        else:
            fail(f"wire type {wire} in the model file")
        out.setdefault(number, []).append(value)
    return out


def check_header(name, path):
    """ModelProto: ir_version (1), producer_name (2), opset_import (8: domain 1,
    version 2)."""
    with open(path, "rb") as f:
        model = fields(f.read())
    opsets = [fields(o) for o in model.get(8, [])]
    got = (model.get(1), model.get(2), [(o.get(1, [b""])[0], o.get(2)) for o in opsets])
    want = ([8], [b"ctrain"], [(b"", [17])])
    if got != want:
        fail(f"{name}: ir_version, producer and opsets are {got}, not {want}")


# ---- the comparison ------------------------------------------------------------------

def fit(ctrain, tmp, name, config, *edits):
    out = os.path.join(tmp, name)
    data = [f"data.{k}={os.path.join(tmp, v)}" for k, v in
            (("train_images", "train-images.gz"), ("train_labels", "train-labels.gz"),
             ("test_images", "test-images.gz"), ("test_labels", "test-labels.gz"))]
    if name == "every-layer":
        data = []  # its own paths, relative to its file
    run([ctrain, "fit", config, "--out", out, "--device", "cpu", "--epochs", "1", "-q"] + data +
        list(edits))
    return os.path.join(out, "model.bin")


FOLDER = """name: folder
model:
  input: [1, 28, 28]
  layers: [flatten, {linear: {out_features: 64}}, relu, {linear: {out_features: 10}}]
data:
  format: folder
  train_dir: %s/png/train
  test_dir: %s/png/test
  resize: 32
  normalize: {mean: 0.5, std: 0.5}
train: {epochs: 1, batch_size: 64}
"""


def fit_folder(ctrain, tmp):
    """A model trained on a PNG folder (written by `ctrain data export` from the subset)
    with data.resize 32: its class names are the folders' ("0".."9")."""
    mlp = os.path.join(tmp, "mlp-subset.yaml")
    with open(os.path.join(ROOT, "configs", "mlp.yaml")) as f:
        text = f.read()
    for k, v in (("train_images", "train-images.gz"), ("train_labels", "train-labels.gz"),
                 ("test_images", "test-images.gz"), ("test_labels", "test-labels.gz")):
        text = re.sub(rf"{k}: .*", f"{k}: {os.path.join(tmp, v)}", text)
    with open(mlp, "w") as f:
        f.write(text)
    run([ctrain, "data", "export", mlp, "--to", os.path.join(tmp, "png")])
    cfg = os.path.join(tmp, "folder.yaml")
    with open(cfg, "w") as f:
        f.write(FOLDER % (tmp, tmp))
    out = os.path.join(tmp, "folder")
    run([ctrain, "fit", cfg, "--out", out, "--device", "cpu", "-q"])
    return os.path.join(out, "model.bin")


def check_image_size(tmp):
    """image_size: how the folder model's images were brought to 28x28; absent for the
    models trained on IDX files."""
    for name, want in (("folder", "resize 32, center crop"), ("mlp", None)):
        session = ort.InferenceSession(os.path.join(tmp, name + ".onnx"),
                                       providers=["CPUExecutionProvider"])
        got = session.get_modelmeta().custom_metadata_map.get("image_size")
        if got != want:
            fail(f"{name}: metadata image_size {got!r}, expected {want!r}")


def onnx_logits(name, session, images):
    meta = session.get_modelmeta().custom_metadata_map
    mean = np.array(json.loads(meta["mean"]), np.float32).reshape(1, -1, 1, 1)
    std = np.array(json.loads(meta["std"]), np.float32).reshape(1, -1, 1, 1)
    if images.ndim == 3:
        images = images[:, None]
    if mean.shape[1] != images.shape[1]:
        fail(f"{name}: metadata has {mean.shape[1]} channels, the images {images.shape[1]}")
    x = (images.astype(np.float32) / np.float32(255) - mean) / std
    return session.run(["logits"], {"input": x})[0]


def ctrain_logits(ctrain, ckpt, images_path):
    """ctrain's logits [N_TEST, 10], classes, and the class names it printed {k: name}."""
    p = run([ctrain, "predict", "--checkpoint", ckpt, "--device", "cpu", "--json", images_path])
    preds = json.loads(p.stdout)["predictions"]
    preds.sort(key=lambda r: r["sample"])
    if [r["sample"] for r in preds] != list(range(N_TEST)):
        fail(f"predict {ckpt}: samples {[r['sample'] for r in preds]}")
    names = {t["class"]: t["name"] for r in preds for t in r["top"] if "name" in t}
    return (np.array([r["logits"] for r in preds], np.float64), [r["class"] for r in preds],
            names)


def check_class_names(name, session, printed, expect):
    """The metadata's class_names are the names predict prints (and there, when the
    config has them)."""
    meta = session.get_modelmeta().custom_metadata_map
    if ("class_names" in meta) != expect or bool(printed) != expect:
        fail(f"{name}: class_names in the metadata: {'class_names' in meta}, printed by "
             f"predict: {bool(printed)}, expected {expect}")
    if expect:
        names = json.loads(meta["class_names"])
        if len(names) != 10 or any(names[k] != v for k, v in printed.items()):
            fail(f"{name}: metadata class_names {names}, predict prints {printed}")


def check_model(ctrain, tmp, name, ckpt, images_path, min_norms, named):
    norms = check_running_stats(name, ckpt)
    if norms < min_norms:
        fail(f"{name}: {norms} batch norms, expected at least {min_norms}")
    path = os.path.join(tmp, name + ".onnx")
    p = run([ctrain, "export", "--checkpoint", ckpt, "--onnx", path])
    if f"Wrote {path}" not in p.stdout:
        fail(f"export {name}: {p.stdout}")
    check_header(name, path)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    images = read_idx(images_path)
    c = 1 if images.ndim == 3 else images.shape[1]
    if (inp.name, inp.shape, out.name, out.shape) != ("input", ["N", c, 28, 28], "logits", ["N", 10]):
        fail(f"{name}: input {inp.name} {inp.shape}, output {out.name} {out.shape}")
    got = onnx_logits(name, session, images).astype(np.float64)
    want, classes, printed = ctrain_logits(ctrain, ckpt, images_path)
    check_class_names(name, session, printed, named)
    scale = np.abs(want).max()
    err = np.abs(got - want).max() / scale
    top2 = np.sort(want, axis=1)[:, -2:]
    flips = [i for i in range(N_TEST) if got[i].argmax() != classes[i] and
             top2[i, 1] - top2[i, 0] > TOL * scale]
    print(f"{name}: {N_TEST} images, {norms} batch norms, logits differ by at most "
          f"{err:.2e} of the largest ({scale:.3g}), classes differ on {len(flips)}")
    if not err <= TOL:
        fail(f"{name}: onnxruntime's logits differ from ctrain's by {err:.3g} of the largest")
    if flips:
        fail(f"{name}: onnxruntime predicts other classes for samples {flips}")


def check_refusals(ctrain, tmp, ckpt):
    """Both forms at once; files export --onnx refuses."""
    both_onnx, weights = os.path.join(tmp, "both.onnx"), os.path.join(tmp, "weights.safetensors")
    run([ctrain, "export", "--checkpoint", ckpt, "--onnx", both_onnx, "--safetensors", weights])
    if not (os.path.getsize(both_onnx) > 0 and os.path.getsize(weights) > 0):
        fail("export --onnx --safetensors: a file is empty")

    header, meta, data = read_safetensors(ckpt)
    del header["layers.1.running_var"]
    meta.pop("data_crc32")  # the data changes
    kept, body = {"__metadata__": meta}, b""
    for k, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = t["data_offsets"]
        kept[k] = dict(t, data_offsets=[len(body), len(body) + end - begin])
        body += data[begin:end]
    text = json.dumps(kept).encode()
    text += b" " * (-len(text) % 8)
    broken = os.path.join(tmp, "no-running-var.bin")
    with open(broken, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)

    for src, words in ((weights, "not a ctrain checkpoint"),
                       (broken, "no tensor 'layers.1.running_var' (layer 1, batchnorm2d)")):
        out = os.path.join(tmp, "refused.onnx")
        p = run([ctrain, "export", "--checkpoint", src, "--onnx", out], expect=1)
        lines = p.stderr.strip().splitlines()
        if len(lines) != 1 or words not in lines[0] or src not in lines[0]:
            fail(f"export --onnx of {src}: {p.stderr!r} does not say '{words}' in one line")
        if os.path.exists(out):
            fail(f"export --onnx of {src} failed but wrote {out}")


def main():
    ctrain = os.path.abspath(sys.argv[1])
    probe = subprocess.run([ctrain, "export", "--checkpoint", "/nonexistent", "--onnx", "x.onnx"],
                           capture_output=True, text=True)
    if "no ONNX support" in probe.stderr:
        print("test_onnx: skipped: this build has no ONNX support")
        return 77
    with tempfile.TemporaryDirectory(prefix="ctrain-onnx-") as tmp:
        write_data(tmp)
        every = os.path.join(tmp, "every-layer.yaml")
        with open(every, "w") as f:
            f.write(EVERY_LAYER)
        cfgs = os.path.join(ROOT, "configs")
        gray, color = os.path.join(tmp, "test-images.gz"), os.path.join(tmp, "test-images-rgb.gz")
        models = [
            ("mlp", fit(ctrain, tmp, "mlp", os.path.join(cfgs, "mlp.yaml")), gray, 0, False),
            ("cnn", fit(ctrain, tmp, "cnn", os.path.join(cfgs, "cnn.yaml")), gray, 0, False),
            ("resnet-fashion", fit(ctrain, tmp, "resnet-fashion",
                                   os.path.join(cfgs, "resnet-fashion.yaml"), "data.val_split=200"),
             gray, 9, True),
            ("every-layer", fit(ctrain, tmp, "every-layer", every), color, 5, False),
        ]
        models.append(("folder", fit_folder(ctrain, tmp), gray, 0, True))
        for name, ckpt, images, min_norms, named in models:
            check_model(ctrain, tmp, name, ckpt, images, min_norms, named)
        check_image_size(tmp)
        check_refusals(ctrain, tmp, models[2][1])
    print("test_onnx: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
