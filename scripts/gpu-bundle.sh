#!/usr/bin/env bash
# gpu-bundle.sh: prepare a build to be carried to a GPU machine that has the CUDA
# driver and toolkit but none of Debian's -dev packages: copies the shared
# libraries that build/ctrain and the tests need, other than glibc's own and the
# CUDA/cuDNN libraries (which the GPU machine provides), into BUILD/gpu-libs.
#
#   scripts/gpu-bundle.sh [BUILD_DIR]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -x "$build/ctrain" ] || { echo "gpu-bundle.sh: $build/ctrain not built" >&2; exit 1; }
dest="$build/gpu-libs"
rm -rf "$dest"
mkdir -p "$dest"
for exe in "$build/ctrain" "$build"/tests/test_*; do
  [ -x "$exe" ] && [ -f "$exe" ] || continue
  ldd "$exe" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libresolv.so*) continue ;;
    libcuda.so*|libcudart*|libcublas*|libcudnn*|libcurand*|libnccl*|libnvrtc*|libnvJitLink*) continue ;;
  esac
  cp -L "$lib" "$dest/"
done
du -sh "$dest" "$build"
