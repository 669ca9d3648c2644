#!/usr/bin/env bash
# setup.sh: install the build dependencies (Debian 12 packages) and build ctrain
# into ./build. The CUDA backend is built when the CUDA Toolkit is found
# (/usr/local/cuda); otherwise a CPU-only build is made.
#
#   scripts/setup.sh            install what is missing, configure, build
#   scripts/setup.sh --werror   the same with warnings as errors (CI)
set -euo pipefail
cd "$(dirname "$0")/.."

werror=false
for a in "$@"; do
  case "$a" in
    --werror) werror=true ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

# openmpi: multi-process data parallelism (mpirun) and its tests. clang, its
# sanitizer and libFuzzer runtimes (libclang-rt-dev) and its OpenMP (libomp-dev):
# the fuzz build (scripts/fuzz.sh). python3-torch, -yaml, -numpy: the PyTorch parity
# test (tests/torch_parity.py) and scripts/reference_pytorch.py. librsvg2-bin
# (rsvg-convert): the plot test renders the SVG it checks (tests/test_plot.py).
# protobuf-c: TensorBoard event files (see below) and ONNX export, whose messages
# are compiled from libonnx-dev's onnx.proto at build time; python3-venv for the
# virtual environments below.
# man-db, bsdextrautils (col), zsh: the install check reads the installed man page
# and parses the zsh completion.
packages=(gcc g++ meson ninja-build pkg-config libyaml-dev zlib1g-dev libjansson-dev libpng-dev libdnnl-dev
          libcmocka-dev librsvg2-bin protobuf-c-compiler libprotobuf-c-dev libonnx-dev python3-venv
          man-db bsdextrautils zsh
          python3-torch python3-yaml python3-numpy
          libopenmpi-dev openmpi-bin clang libclang-rt-dev libomp-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup.sh: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# TensorBoard (PyPI, in .venv-tensorboard): its package holds the protocol definitions
# that the event-file writer is generated from at build time, and the event reader
# that tests/test_tensorboard.py checks the files with.
if [ ! -x .venv-tensorboard/bin/python3 ] ||
   ! .venv-tensorboard/bin/python3 -c "import tensorboard" 2>/dev/null; then
  echo "setup.sh: installing tensorboard (PyPI) into .venv-tensorboard"
  /usr/bin/python3 -m venv .venv-tensorboard
  .venv-tensorboard/bin/pip install -q tensorboard
fi

# onnxruntime (PyPI, in .venv-onnx): tests/test_onnx.py runs the models that
# `ctrain export --onnx` writes with it.
if [ ! -x .venv-onnx/bin/python3 ] ||
   ! .venv-onnx/bin/python3 -c "import onnxruntime" 2>/dev/null; then
  echo "setup.sh: installing onnxruntime (PyPI) into .venv-onnx"
  /usr/bin/python3 -m venv .venv-onnx
  .venv-onnx/bin/pip install -q onnxruntime
fi

# nvcc is usually not on PATH for non-login shells; the toolkit lives here.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

if [ ! -f build/build.ninja ]; then
  meson setup build -Dwerror="$werror"
else
  meson configure build -Dwerror="$werror" >/dev/null
fi
ninja -C build
