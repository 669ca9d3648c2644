#!/usr/bin/env bash
# make-corpus.sh: (re)writes the seed inputs of tests/fuzz/corpus/<target>/ and the
# crafted inputs of tests/fuzz/regressions/<target>/ that this script knows about
# (inputs saved from fuzzer crashes are kept as they are).
#
#   tests/fuzz/make-corpus.sh [BUILD]     BUILD holds ctrain (default: build)
#
# Seeds named valid-* must be accepted by their reader (test_fuzz_regressions
# checks it); the others are edge cases a reader must refuse cleanly. The idx
# target's inputs start with a mode byte (tests/fuzz/targets.h): bit 0, the harness
# compresses the rest; bit 1, the rest is read as images; bit 2, through a pipe.
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build}"
[ -x "$build/ctrain" ] || { echo "make-corpus.sh: no $build/ctrain; build first" >&2; exit 2; }
out=tests/fuzz
mkdir -p "$out"/corpus/{config,idx,checkpoint,image,list,cache} \
         "$out"/regressions/{config,idx,checkpoint,image,list,cache}

# ---- config -----------------------------------------------------------------------
cp configs/cnn.yaml "$out/corpus/config/valid-cnn.yaml"
cp configs/mlp.yaml "$out/corpus/config/valid-mlp.yaml"
cat > "$out/corpus/config/valid-every-key.yaml" <<'YAML'
name: every.key-1
model:
  input: [3, 9, 7]
  layers:
    - conv2d: {out_channels: 4, kernel: 3, stride: 2, padding: 1, bias: false}
    - relu: {checkpoint: true}
    - avgpool2d: {kernel: 2, stride: 1, padding: 1}
    - maxpool2d: {kernel: 2}
    - batchnorm2d: {momentum: 0.2, eps: 0.001}
    - dropout: {p: 0.25}
    - gelu
    - silu
    - tanh: {checkpoint: true}
    - sigmoid
    - leaky_relu: {slope: 0.2}
    - global_avgpool
    - flatten
    - batchnorm1d
    - linear: {out_features: 5, bias: true, checkpoint: true}
  loss: cross_entropy
optimizer: {type: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 1e-4}
schedule: {type: step, step_size: 2, gamma: 0.5, warmup_epochs: 1}
data: {train_images: a.gz, train_labels: b.gz, test_images: c.gz, test_labels: d.gz,
       num_classes: 5, normalize: {mean: -0.25, std: 2}, shuffle: no}
train: {epochs: 3, batch_size: 7, grad_accum_steps: 2, amp: bf16, seed: 18446744073709551615,
        out: runs/x, graph: off, cpu_loops: portable, cpu_bf16: emulated, cpu_winograd: off,
        label_smoothing: 0.1}
device: cpu:2
YAML
cat > "$out/corpus/config/valid-anchors.yaml" <<'YAML'
model:
  input: [1, 4, 4]
  layers: [flatten, linear: &head {out_features: 3}, relu, linear: *head]
optimizer: {type: adamw, lr: .5, betas: [0.8, 0.99], eps: 1e-6}
schedule: {type: cosine, min_lr: 1e-5}
data: &d {train_images: &p x, train_labels: *p, test_images: *p, test_labels: *p, num_classes: 3}
YAML
printf '' > "$out/corpus/config/empty.yaml"
printf 'model: {input: [1, 2, 2], layers: [flatten]}\n---\ndata: {}\n' > "$out/corpus/config/two-documents.yaml"
printf 'model: &m {input: [1, 2, 2], layers: *m}\n' > "$out/corpus/config/alias-cycle.yaml"
printf '? {a: 1}\n: 2\nmodel: [1, 2]\n' > "$out/corpus/config/mapping-key.yaml"
printf '\xef\xbb\xbfmodel:\n\tinput: [1, 2, 2]\ndata: "\xff\xfe"\n' > "$out/corpus/config/bom-tab-bad-utf8.yaml"
python3 -c 'print("model: " + "[" * 300 + "]" * 300)' > "$out/corpus/config/deep-nesting.yaml"
cat > "$out/corpus/config/huge-dims.yaml" <<'YAML'
model:
  input: [65536, 65536, 65536]
  layers: [conv2d: {out_channels: 1048576, kernel: 65536, padding: 32768}, flatten,
           linear: {out_features: 1048576}, linear: {out_features: 2}]
data: {train_images: a, train_labels: b, test_images: c, test_labels: d, num_classes: 2}
train: {epochs: 2147483647, batch_size: 2147483647, seed: 18446744073709551616}
YAML
# Aliases that would expand to 10^8 scalars if anything copied them.
python3 - "$out/regressions/config/alias-expansion.yaml" <<'PY'
import sys
lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
for i in range(1, 9):
    lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i-1}"] * 10) + "]")
lines.append("model: {input: [1, 2, 2], layers: *l8}")
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY

# ---- idx and a tiny data set --------------------------------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$out" "$tmp" <<'PY'
import gzip, struct, sys, zlib
out, tmp = sys.argv[1], sys.argv[2]

def idx(dims, payload):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload

def gz(data):  # deterministic: no name, no timestamp
    return gzip.compress(data, mtime=0)

def put(path, data):
    open(path, "wb").write(data)

# The tiny data set: 8 images of 4x4, labels 0..1 (the checkpoint seed trains on it).
images = idx([8, 4, 4], bytes((i * 37 + 11) % 256 for i in range(8 * 16)))
labels = idx([8], bytes(i % 2 for i in range(8)))
for name, data in [("images", images), ("labels", labels)]:
    put(f"{tmp}/{name}.gz", gz(data))

c = f"{out}/corpus/idx"
put(f"{c}/valid-images-plain", b"\x02" + images)
put(f"{c}/valid-labels-plain", b"\x00" + labels)
put(f"{c}/valid-images-gzip", b"\x03" + images)
put(f"{c}/valid-labels-gzip", b"\x01" + labels)
put(f"{c}/valid-images-gzfile", b"\x02" + gz(images))
put(f"{c}/valid-labels-gzfile", b"\x00" + gz(labels))
put(f"{c}/valid-labels-two-members", b"\x00" + gz(labels[:6]) + gz(labels[6:]))
put(f"{c}/valid-labels-pipe", b"\x04" + labels)
put(f"{c}/valid-images-gzip-pipe", b"\x07" + images)
put(f"{c}/valid-images-gzfile-pipe", b"\x06" + gz(images))
put(f"{c}/truncated-images-pipe", b"\x06" + images[:-1])
put(f"{c}/truncated-images", b"\x02" + images[:-1])
put(f"{c}/trailing-labels", b"\x01" + labels + b"\x00")
put(f"{c}/bad-dtype", b"\x01" + bytes([0, 0, 0x0D, 1]) + labels[4:])
put(f"{c}/zero-dim", b"\x03" + idx([8, 0, 4], b""))
put(f"{c}/short-header", b"\x02" + images[:9])
bad_crc = bytearray(gz(labels))
bad_crc[-5] ^= 0xFF
put(f"{c}/bad-crc-gzfile", b"\x00" + bytes(bad_crc))
put(f"{c}/cut-gzfile", b"\x02" + gz(images)[:-12])

# Crafted claims (they never crashed, but once made the reader allocate the claim).
r = f"{out}/regressions/idx"
claim = idx([2739000, 28, 28], b"")
put(f"{r}/claim-2.1GB-images.gz", b"\x02" + gz(claim))
put(f"{r}/claim-2.1GB-images-plain", b"\x02" + claim)
put(f"{r}/claim-2GB-labels-3MiB-held.gz", b"\x00" + gz(idx([0x7FFFFFFF], bytes(3 << 20))))
put(f"{r}/claim-2.1GB-images-pipe", b"\x06" + claim)
put(f"{r}/claim-2GB-labels-3MiB-held-pipe.gz", b"\x04" + gz(idx([0x7FFFFFFF], bytes(3 << 20))))
PY

# ---- image: PNG written here chunk by chunk (zlib, CRC-32), PGM and PPM ------------
python3 - "$out" <<'PY'
import struct, sys, zlib
out = sys.argv[1]

def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

def png(w, h, depth, color, rows, extra=b""):
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0)
    raw = b"".join(b"\x00" + r for r in rows)  # filter 0 on every row
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

def put(path, data):
    open(path, "wb").write(data)

c = f"{out}/corpus/image"
gray = [bytes((x * 9 + y * 31) % 256 for x in range(28)) for y in range(28)]
put(f"{c}/valid-gray.png", png(28, 28, 8, 0, gray))
put(f"{c}/valid-rgba.png", png(14, 14, 8, 6, [bytes((x + y + k) % 256 for x in range(14)
                                                      for k in range(4)) for y in range(14)]))
put(f"{c}/valid-gray16.png", png(8, 8, 16, 0, [bytes(range(16 * y, 16 * y + 16)) for y in range(8)]))
put(f"{c}/valid-palette-trns.png",
    png(4, 4, 2, 3, [bytes([0b00011011]) for _ in range(4)],
        chunk(b"PLTE", bytes(range(12))) + chunk(b"tRNS", bytes([0, 128]))))
put(f"{c}/valid-raw.pgm", b"P5\n# seed\n28 28\n255\n" + b"".join(gray))
put(f"{c}/valid-plain.ppm", b"P3 2 1 1000\n0 500 1000 7 8 9\n")
put(f"{c}/valid-raw16.ppm", b"P6 1 1 65535 " + bytes([255, 255, 0, 1, 128, 0]))
put(f"{c}/truncated.pgm", b"P5 4 4 255\n" + bytes(10))
put(f"{c}/cut.png", png(28, 28, 8, 0, gray)[:60])
bad_crc = bytearray(png(28, 28, 8, 0, gray))
bad_crc[33 + 8 + 2] ^= 0xFF  # a byte of IDAT's data: its CRC no longer matches
put(f"{c}/bad-crc.png", bytes(bad_crc))
put(f"{c}/valid-tall.pgm", b"P5 2 40 255\n" + bytes(80))  # read, then refused as input

# Crafted claims: tiny files whose headers ask for the largest image.
r = f"{out}/regressions/image"
put(f"{r}/claim-16384x16384-rgba.png", png(16384, 16384, 8, 6, [])[:33] + chunk(b"IEND", b""))
put(f"{r}/claim-16384x16384.ppm", b"P6 16384 16384 65535\n" + bytes(64))
put(f"{r}/claim-16384x16384-plain.pgm", b"P2 16384 16384 255\n1 2 3\n")
PY

# ---- image: JPEG, written by libjpeg (tests/fuzz/jpeg_seeds.c) ------------------------
cc -O1 -o "$tmp/jpeg_seeds" tests/fuzz/jpeg_seeds.c -ljpeg
"$tmp/jpeg_seeds" "$out/corpus/image" "$out/regressions/image"

# ---- list: the CSV list files of data.format list ------------------------------------
python3 - "$out" <<'PY'
import sys
out = sys.argv[1]
def put(path, data):
    open(path, "wb").write(data)
c, r = f"{out}/corpus/list", f"{out}/regressions/list"
put(f"{c}/valid-header.csv", b"path,label\ncat/1.png,cat\ndog/2.jpg,dog\n")
put(f"{c}/valid-indices.csv", b"a.png,0\nb.png,1\n\nc.png,2")
put(f"{c}/valid-quoted-crlf.csv", b'\xef\xbb\xbf"a, b.png", "x ""y"""\r\n c.png , 3 \r\n')
put(f"{c}/three-fields.csv", b"a.png,1,2\n")
put(f"{c}/unclosed.csv", b'"a.png,1\n')
put(f"{c}/empty-label.csv", b"a.png,\n")
put(f"{c}/nul.csv", b"a.png,1\nb\x00.png,1\n")
put(f"{c}/header-only.csv", b"file,class\n")
put(f"{r}/long-field.csv", b"a" * 5000 + b",1\n")
put(f"{r}/long-quoted.csv", b'"' + b"a" * 5000 + b'",1\n')
PY

# ---- cache: the data caches of image folders (train/data_cache.h) --------------------
# A mode byte first (tests/fuzz/targets.h): bit 0, read as the kept images of
# random_resized_crop; bit 1, the harness writes the right CRC-32.
python3 - "$out" <<'PY'
import struct, sys, zlib
out = sys.argv[1]
def put(path, data):
    open(path, "wb").write(data)
def cache(c, h, w, resize, labels, kind, sizes=None, px=b"", fp=0x0123456789ABCDEF,
          crc=None, classes=10, skipped=0, count=None):
    body = bytes(labels) + bytes(-len(labels) % 8)
    if sizes is not None:
        body += b"".join(struct.pack("<I", x) for x, _ in sizes)
        body += b"".join(struct.pack("<I", y) for _, y in sizes)
    body += px
    n = len(labels) if count is None else count
    head = b"CTRCACHE" + struct.pack("<9I", 1, c, h, w, resize, n, classes, skipped, kind)
    head += struct.pack("<QI", fp, zlib.crc32(body) if crc is None else crc)
    return head + bytes(64 - len(head)) + body
c, r = f"{out}/corpus/cache", f"{out}/regressions/cache"
kept = [(5, 6), (6, 5), (4, 4)]
kpx = bytes(i % 251 for i in range(sum(x * y for x, y in kept)))
put(f"{c}/valid-samples.bin", b"\x00" + cache(1, 4, 4, 0, [1, 2], 0, px=bytes(range(32))))
put(f"{c}/valid-kept.bin", b"\x01" + cache(1, 4, 4, 5, [0, 3, 9], 1, kept, kpx))
put(f"{c}/valid-kept-rgb.bin", b"\x01" + cache(3, 2, 3, 2, [4], 1, [(3, 2)], bytes(18)))
put(f"{c}/bad-crc.bin", b"\x00" + cache(1, 4, 4, 0, [1, 2], 0, px=bytes(32), crc=7))
put(f"{c}/short.bin", b"\x00" + cache(1, 4, 4, 0, [1, 2], 0, px=bytes(31)))
put(f"{c}/kind-swapped.bin", b"\x00" + cache(1, 4, 4, 5, [0, 3, 9], 1, kept, kpx))
put(f"{c}/kept-too-small.bin", b"\x03" + cache(1, 4, 4, 5, [0], 1, [(3, 9)], bytes(27)))
put(f"{c}/skipped-files.bin", b"\x00" + cache(1, 4, 4, 0, [1], 0, px=bytes(16), skipped=2))
put(f"{c}/header-cut.bin", b"\x00" + cache(1, 4, 4, 0, [1], 0, px=bytes(16))[:40])
# crafted claims: a count far beyond the file, sizes whose product overflows
put(f"{r}/huge-count.bin", b"\x03" + cache(1, 4, 4, 5, [0, 1], 1, [(5, 5), (5, 5)],
                                            bytes(50), count=0x7FFFFFFF))
put(f"{r}/huge-sizes.bin", b"\x03" + cache(64, 4, 4, 5, [0, 1], 1,
                                            [(0xFFFFFFFF, 0xFFFFFFFF), (65536, 65536)], bytes(8)))
put(f"{r}/huge-samples.bin", b"\x02" + cache(0xFFFFFFFF, 0xFFFFFFFF, 0xFFFF, 0, [1], 0,
                                              px=bytes(16)))
PY

# ---- checkpoint ---------------------------------------------------------------------
cat > "$tmp/tiny.yaml" <<'YAML'
name: tiny
model:
  input: [1, 4, 4]
  layers: [flatten, linear: {out_features: 3}, relu, linear: {out_features: 2}]
data: {train_images: images.gz, train_labels: labels.gz,
       test_images: images.gz, test_labels: labels.gz, num_classes: 2}
train: {epochs: 1, batch_size: 4, out: run}
device: cpu
YAML
ctrain=$(realpath "$build/ctrain")
(cd "$tmp" && "$ctrain" fit tiny.yaml --no-progress >/dev/null)
cp "$tmp/run/model.bin" "$out/corpus/checkpoint/valid-ctrain.bin"
python3 - "$out" <<'PY'
import json, struct, sys
out = sys.argv[1]

def st(header, data=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data

def put(path, data):
    open(path, "wb").write(data)

c = f"{out}/corpus/checkpoint"
put(f"{c}/valid-empty.bin", st({}))
put(f"{c}/valid-foreign-dtypes.bin", st({
    "__metadata__": {"format": "pt"},
    "h": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]},
    "b": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 12]},
    "d": {"dtype": "F64", "shape": [], "data_offsets": [12, 20]},
    "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [20, 20]},
    "n": {"dtype": "I64", "shape": [], "data_offsets": [20, 28]},
}, struct.pack("<4H", 0x3C00, 0x8001, 0x7C00, 0x7E00) + struct.pack("<2H", 0x3F80, 0xFF80)
   + struct.pack("<d", 1e300) + struct.pack("<q", -(1 << 40))))
put(f"{c}/overlap.bin", st({
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)))
put(f"{c}/bad-crc.bin", st({"__metadata__": {"data_crc32": "00000000"},
    "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\x01\x02\x03\x04"))
put(f"{c}/unknown-dtype.bin", st({"a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}},
                                 bytes(4)))

r = f"{out}/regressions/checkpoint"
put(f"{r}/claim-100MB-header.bin", struct.pack("<Q", 100_000_000) + b"{" + b" " * 55)
put(f"{r}/claim-2.4GB-tensor.bin", st({
    "w": {"dtype": "F32", "shape": [600000000], "data_offsets": [0, 2400000000]}}, bytes(8)))
put(f"{r}/claim-2.4GB-f64-after-small.bin", st({
    "a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]},
    "b": {"dtype": "F64", "shape": [300000000], "data_offsets": [0, 2400000000]}}, bytes(8)))
PY
echo "make-corpus.sh: wrote the seeds under $out/corpus and $out/regressions"
