#!/usr/bin/env bash
# setup.sh: install what building and training need (Debian 12 packages) and build
# ctrain into ./build. The CUDA backend is built when the CUDA Toolkit is found
# (/usr/local/cuda); otherwise a CPU-only build is made.
#
#   scripts/setup.sh            install what is missing, configure, build
#   scripts/setup.sh --tests    the same, plus what only the tests need (cmocka, PyTorch,
#                               Open MPI, clang's fuzzing runtime, rsvg, onnxruntime, ...);
#                               scripts/test.sh runs this itself
#   scripts/setup.sh --werror   warnings as errors (CI)
# CTRAIN_MESON_ARGS: extra `meson setup` options for a new build directory.
#
# Nothing optional stops it: where the package index cannot be reached (offline),
# the PyPI packages (TensorBoard, used at build time for event files; onnxruntime,
# used by a test) and the test-only Debian packages are skipped with one line each,
# and the build goes on without what they give (a test that needs one skips).
set -euo pipefail
cd "$(dirname "$0")/.."

werror=false tests=false
for a in "$@"; do
  case "$a" in
    --werror) werror=true ;;
    --tests) tests=true ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
updated=false
# install_missing REQUIRED PACKAGE...: apt-get install of those not installed yet; with
# REQUIRED=no a failure (no network, no such package) is one line and no stop.
install_missing() {
  local required=$1 p missing=()
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "setup.sh: installing ${missing[*]}"
  if { $updated || $sudo apt-get update -qq; } &&
     DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null; then
    updated=true
    return 0
  fi
  updated=true
  [ "$required" = yes ] && { echo "setup.sh: could not install ${missing[*]}" >&2; exit 1; }
  echo "setup.sh: skipped ${missing[*]} (could not be installed); the tests that need them skip"
}

# Building and training: the compiler and Meson, libyaml, zlib, jansson, libpng and
# libjpeg-turbo (PNG and JPEG images), oneDNN, protobuf-c with ONNX's definition (export --onnx),
# python3-venv (TensorBoard's package below).
install_missing yes gcc g++ meson ninja-build pkg-config libyaml-dev zlib1g-dev libjansson-dev \
  libpng-dev libjpeg62-turbo-dev libdnnl-dev protobuf-c-compiler libprotobuf-c-dev libonnx-dev python3-venv

# TensorBoard (PyPI, in .venv-tensorboard): its package holds the protocol definitions
# the event-file writer is generated from at build time (-Dtensorboard=auto), and the
# reader tests/test_tensorboard.py checks the files with. Optional.
venv_package() { # DIR PACKAGE MODULE WHAT
  local dir=$1 pkg=$2 mod=$3 what=$4
  [ -x "$dir/bin/python3" ] && "$dir/bin/python3" -c "import $mod" 2>/dev/null && return 0
  echo "setup.sh: installing $pkg (PyPI) into $dir"
  if /usr/bin/python3 -m venv "$dir" &&
     "$dir/bin/pip" install -q --retries 1 --timeout 15 "$pkg" >/dev/null 2>&1; then
    return 0
  fi
  echo "setup.sh: skipped $pkg (PyPI could not be reached or refused it): $what"
}
venv_package .venv-tensorboard tensorboard tensorboard \
  "ctrain is built without TensorBoard event files"

if $tests; then
  # cmocka: the test programs. man-db, bsdextrautils (col), zsh: the install check
  # reads the installed man page and parses the zsh completion. python3-torch, -yaml,
  # -numpy: the PyTorch parity test and scripts/reference_pytorch.py. librsvg2-bin:
  # the plot test renders its SVG. Open MPI: the multi-process cases (and
  # mpirun-launched data parallelism). clang with its sanitizer and libFuzzer
  # runtimes and OpenMP: scripts/fuzz.sh. dataset-fashion-mnist: test_images_fashion
  # reads Debian's copy. libopenblas0-pthread: PyTorch's optimized BLAS, without which
  # scripts/bench-vs-pytorch refuses to compare.
  install_missing yes libcmocka-dev
  install_missing no man-db bsdextrautils zsh librsvg2-bin python3-torch python3-yaml \
    python3-numpy libopenmpi-dev openmpi-bin clang libclang-rt-dev libomp-dev \
    dataset-fashion-mnist libopenblas0-pthread
  # onnxruntime (PyPI, in .venv-onnx): tests/test_onnx.py runs the exported models.
  venv_package .venv-onnx onnxruntime onnxruntime "test_onnx skips"
fi

# nvcc is usually not on PATH for non-login shells; the toolkit lives here.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# The test programs are built where cmocka is installed.
build_tests=false
dpkg-query -W -f='${Status}' libcmocka-dev 2>/dev/null | grep -q "install ok installed" && build_tests=true
if [ ! -f build/build.ninja ]; then
  # shellcheck disable=SC2086
  meson setup build -Dwerror="$werror" -Dtests="$build_tests" ${CTRAIN_MESON_ARGS:-}
else # reconfigured only for a change (a reconfiguration rebuilds a lot)
  opts=()
  [ "$(meson configure build | awk '$1 == "tests" {print $2}')" = "$build_tests" ] ||
    opts+=(-Dtests="$build_tests")
  $werror && [ "$(meson configure build | awk '$1 == "werror" {print $2}')" != true ] &&
    opts+=(-Dwerror=true)
  ((${#opts[@]} == 0)) || meson configure build "${opts[@]}" >/dev/null
fi
ninja -C build
