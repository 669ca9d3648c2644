#!/usr/bin/env bash
# same-weights.sh: whether two ctrain binaries train to the same bits, for a change
# that is to change no results (a move, a rename, a new seam).
#
#   scripts/same-weights.sh OLD_CTRAIN NEW_CTRAIN [WORKDIR]
#   CONFIGS="mlp-wide odd-widths" scripts/same-weights.sh ...   other configs
#
# Trains configs/cnn.yaml, configs/mlp.yaml and configs/resnet-fashion.yaml (or the
# MNIST / Fashion-MNIST configs CONFIGS names, by file name without .yaml) for two
# epochs on the first 5000 training and 1000 test images of MNIST / Fashion-MNIST
# (resnet-fashion holds 500 of them out for validation) with each binary, once per
# instruction-set leg of scripts/test-isa.sh (native, avx512, avx2, sse41), and on
# the native leg also with train.amp=bf16 (native bf16 where the CPU has it), and
# compares the sha256 of the weights: model.bin's tensors (names, shapes, types and
# bytes; not its metadata, which names the binary). Prints one line per run, "same"
# or "DIFFERENT", and exits 1 when any differs or fails.
# Each fit runs with 2 OpenMP threads. Needs python3 (for the subsets) and
# Fashion-MNIST under /usr/share/datasets/fashion-mnist (Debian's
# dataset-fashion-mnist).
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,19p "$0"; exit 2; }
old=$(realpath "$1"); new=$(realpath "$2")
root=$(cd "$(dirname "$0")/.." && pwd)
work=${3:-$(mktemp -d)}
mkdir -p "$work/data"

# The first N records of an IDX file (gzip or not), written uncompressed.
subset() {
  python3 - "$1" "$2" "$3" <<'PY'
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
raw = (gzip.open if src.endswith(".gz") else open)(src, "rb").read()
ndim = raw[3]
dims = list(struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim]))
per = 1
for d in dims[1:]:
    per *= d
head = raw[:4] + struct.pack(">" + "I" * ndim, n, *dims[1:])
body = raw[4 + 4 * ndim:4 + 4 * ndim + n * per]
open(dst, "wb").write(head + body)
PY
}

sets=("mnist|$root/data/mnist" "fashion|/usr/share/datasets/fashion-mnist")
for s in "${sets[@]}"; do
  IFS='|' read -r name dir <<<"$s"
  [ -f "$work/data/$name-train-images" ] && continue
  subset "$dir/train-images-idx3-ubyte.gz" "$work/data/$name-train-images" 5000
  subset "$dir/train-labels-idx1-ubyte.gz" "$work/data/$name-train-labels" 5000
  subset "$dir/t10k-images-idx3-ubyte.gz" "$work/data/$name-test-images" 1000
  subset "$dir/t10k-labels-idx1-ubyte.gz" "$work/data/$name-test-labels" 1000
done

# sha256 of a safetensors file's tensors without its __metadata__.
weights_sum() {
  python3 - "$1" <<'PY'
import hashlib, json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
header.pop("__metadata__", None)
h = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
h.update(raw[8 + n:])
print(h.hexdigest()[:16])
PY
}

data_keys() {
  local d=$work/data/$1
  echo "data.train_images=$d-train-images data.train_labels=$d-train-labels" \
       "data.test_images=$d-test-images data.test_labels=$d-test-labels"
  [ "$1" = fashion ] && echo "data.val_split=500"
}

runs=()
for leg in "native||" "avx512|AVX512_CORE|" "avx2|AVX2|avx2" "sse41|SSE41|sse41"; do
  for cfg in ${CONFIGS:-cnn mlp resnet-fashion}; do
    runs+=("$leg|$cfg|off")
    [ "${leg%%|*}" = native ] && [ "$cfg" != mlp ] && runs+=("$leg|$cfg|bf16")
  done
done

rc=0
for r in "${runs[@]}"; do
  IFS='|' read -r leg dnnl own cfg amp <<<"$r"
  vars=(OMP_NUM_THREADS=2)
  [ -n "$dnnl" ] && vars+=("ONEDNN_MAX_CPU_ISA=$dnnl")
  [ -n "$own" ] && vars+=("CTRAIN_MAX_CPU_ISA=$own")
  set=mnist
  grep -q 'fashion' "$root/configs/$cfg.yaml" && set=fashion
  sums=()
  for bin in "$old" "$new"; do
    out=$work/run-$leg-$cfg-$amp-$(basename "$(dirname "$bin")")-$([ "$bin" = "$old" ] && echo old || echo new)
    rm -rf "$out"
    # shellcheck disable=SC2046
    if ! env "${vars[@]}" "$bin" fit "$root/configs/$cfg.yaml" $(data_keys $set) train.epochs=2 \
         train.amp=$amp --out "$out" -q --no-progress >"$out.log" 2>&1; then
      sums+=("FAILED")
      continue
    fi
    sums+=("$(weights_sum "$out/model.bin")")
  done
  verdict=same
  if [ "${sums[0]}" != "${sums[1]}" ] || [ "${sums[0]}" = FAILED ]; then verdict=DIFFERENT; rc=1; fi
  printf '%-7s %-15s amp %-4s  old %s  new %s  %s\n' "$leg" "$cfg" "$amp" "${sums[0]}" "${sums[1]}" "$verdict"
done
exit "$rc"
