#!/usr/bin/env bash
# gpu-bundle.sh: pack a CUDA build into one small, self-contained folder to carry to
# a GPU machine that has the NVIDIA driver, the CUDA toolkit and cuDNN/NCCL (from
# the toolkit or Python wheels) but none of Debian's -dev packages.
#
#   scripts/gpu-bundle.sh [--build DIR] [--out DIR] [--max-mib N]
#       --build DIR   the CUDA build to pack (default: build)
#       --out DIR     the bundle folder, replaced (default: gpu-bundle)
#       --max-mib N   fail when the bundle is larger (default 40)
#
# The bundle, all from one build (nothing is reused from an earlier bundle):
#   ctrain, libctrain-cuda.so          the binary and, next to it, its CUDA backend
#   tests/test_*                        the programs scripts/gpu-check.sh runs
#   tests/fake_cuda_*.so                test_cuda_loader's stand-ins
#   lib/                                every other shared library ldd lists for
#                                       them, except glibc's, the C++ runtime
#                                       (libstdc++, libgcc_s) and CUDA's own (cudart,
#                                       cuBLAS, cuDNN, cuRAND, NCCL, ...), which the
#                                       GPU machine provides; files over 1 MiB
#                                       (oneDNN) are stored xz-compressed (NAME.xz)
#                                       and gpu-check.sh unpacks them
#   MANIFEST                            commit, date, build options, sizes
# Executables and libraries are stripped. Afterwards the script checks that, with
# the bundle's libraries first on the search path, every library ldd lists is
# either in the bundle or one of the excluded kinds, and that the folder is at most
# --max-mib MiB; it exits non-zero otherwise.
set -euo pipefail
here=$(pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
build=build out=gpu-bundle max_mib=40
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --max-mib) max_mib=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "gpu-bundle.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
abspath() { case $1 in /*) echo "$1" ;; *) echo "$here/$1" ;; esac; }
build=$(abspath "$build")
out=$(abspath "$out")
die() { echo "gpu-bundle.sh: $*" >&2; exit 1; }
[ -x "$build/ctrain" ] || die "$build/ctrain is not built"
[ -f "$build/libctrain-cuda.so" ] || die "$build has no libctrain-cuda.so (not a CUDA build: meson setup -Dcuda=enabled)"

# The test programs gpu-check.sh runs (keep in step with its step list).
tests="test_cuda_loader test_cuda_parity test_bench test_amp test_cuda_graph test_predict
test_random_nets test_conv_algo test_image_folder"
for t in $tests; do
  [ -x "$build/tests/$t" ] || die "$build/tests/$t is not built (a build with -Dtests=true)"
done

# gpu_provided_lib, gpu_libs_outside: what the GPU machine provides itself;
# gpu_unpack_libs.
. "$root/scripts/gpu-libs.sh"

rm -rf "$out"
mkdir -p "$out/tests" "$out/lib"
cp "$build/ctrain" "$build/libctrain-cuda.so" "$out/"
for t in $tests; do cp "$build/tests/$t" "$out/tests/"; done
cp "$build"/tests/fake_cuda_*.so "$out/tests/"
strip --strip-unneeded "$out/ctrain" "$out/libctrain-cuda.so" "$out"/tests/*

# Every library the binaries need, other than the provided ones, resolved on this
# machine (the build's own libctrain-cuda.so is already there).
bins=("$out/ctrain" "$out/libctrain-cuda.so" "$out"/tests/test_*)
ldd "${bins[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    gpu_provided_lib "$name" && continue
    [ "$name" = libctrain-cuda.so ] && continue
    cp -L "$path" "$out/lib/$name"
  done
strip --strip-unneeded "$out"/lib/* 2>/dev/null || true
for f in "$out"/lib/*; do
  [ "$(stat -c %s "$f")" -gt 1048576 ] && xz -T0 -6 "$f"
done

# Self-containment: with the bundle first on the search path (the .xz files
# unpacked into a scratch copy), nothing may resolve outside it except the
# provided kinds, and nothing may be missing.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
gpu_unpack_libs "$out" "$scratch" || die "cannot unpack the bundle's libraries"
bad=$(LD_LIBRARY_PATH="$scratch:$out:/usr/local/cuda/lib64" ldd "${bins[@]}" 2>&1 |
  gpu_libs_outside "$scratch" "$out")
[ -z "$bad" ] || die "the bundle is not self-contained:
$bad"

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | head -1)
{
  echo "commit: $commit${dirty:+ (with uncommitted changes)}"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
  echo "build: $build"
  grep -E '^#define CT_(HAVE|VERSION)' "$build/ct_build_config.h" | sed 's/^#define /  /'
  echo "files (bytes):"
  (cd "$out" && find . -type f ! -name MANIFEST -printf '  %s %P\n' | sort -k2)
} > "$out/MANIFEST"

bytes=$(du -sb "$out" | cut -f1)
mib=$(( (bytes + 1048575) / 1048576 ))
echo "gpu-bundle.sh: $out: $(find "$out" -type f | wc -l) files, $mib MiB (limit $max_mib MiB), commit $commit"
[ "$mib" -le "$max_mib" ] || die "the bundle is $mib MiB, over the $max_mib MiB limit"
