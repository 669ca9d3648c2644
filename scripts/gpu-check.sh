#!/usr/bin/env bash
# gpu-check.sh: the GPU checks in one command (must finish within 8 minutes on one
# H200). Uses a build carried from the CI-like machine (see scripts/gpu-bundle.sh)
# or builds one when meson is available. Runs, in order:
#   1. ctrain devices
#   2. the CUDA parity tests and the GPU cases of the bench tests (`test_bench gpu`,
#      meson's test_bench_gpu)
#   3. a one-epoch MNIST CNN fit on CUDA, then `ctrain eval` of its checkpoint on
#      the CPU (portability: same accuracy)
#   4. ctrain bench matmul --n 5000 for fp32 and bf16
#   5. mixed precision and memory on CUDA: the GPU cases of test_amp (`test_amp gpu`,
#      meson's test_amp_gpu), a one-epoch fp16 fit, a per-layer profile, and the
#      out-of-memory advice
#   6. captured steps: test_cuda_graph (train.graph auto and off give the same
#      bits), and the step-3 fit again with --graph off, both epoch times shown
#   7. data parallelism in one process: the step-3 fit with --device cuda:all
#      (one replica thread per GPU, NCCL all-reduce when there are several)
#   8. predictions on CUDA against the CPU's (`test_predict gpu`)
# and prints a short table last. Exit status: non-zero when any step failed or a
# GPU test was skipped (exit 77: no usable GPU, which on this machine is a failure).
#
#   scripts/gpu-check.sh [BUILD_DIR]       (default: build)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ ! -x "$build/ctrain" ]; then
  if command -v meson >/dev/null; then
    meson setup "$build" -Dcuda=enabled && ninja -C "$build" || exit 1
  else
    echo "gpu-check.sh: no $build/ctrain and no meson to build one" >&2
    exit 1
  fi
fi

# Libraries: the carried ones, the toolkit's, and cuDNN/cuBLAS/NCCL from a Python
# environment's NVIDIA wheels when the toolkit has none.
libpath="$PWD/$build/gpu-libs:/usr/local/cuda/lib64"
if command -v python3 >/dev/null; then
  wheel_libs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = set()
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    for lib in glob.glob(os.path.join(sp, "nvidia", "*", "lib")):
        dirs.add(lib)
print(":".join(sorted(dirs)))
PY
)
  [ -n "$wheel_libs" ] && libpath="$libpath:$wheel_libs"
fi
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
export CT_BUILD_ROOT="$PWD/$build"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
declare -A result
step() { # name, command...
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  timeout 300 "$@" 2>&1 | tee "$tmp/$name.log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    result[$name]="ok ($((SECONDS - t0))s)"
  elif [ "$rc" -eq 77 ]; then # a test program's "skipped"
    result[$name]="SKIPPED: no usable GPU"; status=1
  else
    result[$name]="FAILED"; status=1
  fi
}

step devices "$build/ctrain" devices
step parity "$build/tests/test_cuda_parity"
[ -x "$build/tests/test_bench" ] && step bench_tests "$build/tests/test_bench" gpu
step fit_cuda "$build/ctrain" fit configs/cnn.yaml --epochs 1 --device cuda --out "$tmp/cnn" --no-progress
step eval_cpu "$build/ctrain" eval --checkpoint "$tmp/cnn/model.bin" --device cpu
step matmul_fp32 "$build/ctrain" bench matmul --n 5000 --dtype fp32
step matmul_bf16 "$build/ctrain" bench matmul --n 5000 --dtype bf16
[ -x "$build/tests/test_amp" ] && step amp_tests "$build/tests/test_amp" gpu
step fit_cuda_fp16 "$build/ctrain" fit configs/cnn.yaml --epochs 1 --device cuda --amp fp16 --out "$tmp/cnn16" --no-progress
step profile_cuda "$build/ctrain" fit configs/cnn.yaml --device cuda --profile --profile-steps 50
step oom_advice "$build/ctrain" summary configs/cnn.yaml --device cuda --batch-size 65536 --max-memory 512M
[ -x "$build/tests/test_cuda_graph" ] && step graph_tests "$build/tests/test_cuda_graph"
step fit_cuda_nograph "$build/ctrain" fit configs/cnn.yaml --epochs 1 --device cuda --graph off --out "$tmp/cnn_nograph" --no-progress
step fit_cuda_all "$build/ctrain" fit configs/cnn.yaml --epochs 1 --device cuda:all --out "$tmp/cnn_all" --no-progress
[ -x "$build/tests/test_predict" ] && step predict_tests "$build/tests/test_predict" gpu

fit_line=$(grep -m1 '^Epoch 01' "$tmp/fit_cuda.log" 2>/dev/null)
cpu_acc=$(sed -n 's/.*Accuracy: \([0-9.]*\).*/\1/p' "$tmp/eval_cpu.log" 2>/dev/null)
gpu_name=$(grep -m1 -i 'name' "$tmp/devices.log" 2>/dev/null | sed 's/^ *//')
echo
echo "| check | result |"
echo "|---|---|"
for k in devices parity bench_tests fit_cuda eval_cpu matmul_fp32 matmul_bf16 amp_tests \
         fit_cuda_fp16 profile_cuda oom_advice graph_tests fit_cuda_nograph fit_cuda_all \
         predict_tests; do
  [ -n "${result[$k]:-}" ] && echo "| $k | ${result[$k]} |"
done
echo "| device | ${gpu_name:-?} |"
echo "| CNN epoch 1 on CUDA | ${fit_line:-none} |"
echo "| same checkpoint, eval on CPU | accuracy ${cpu_acc:-?} |"
echo "| CNN epoch 1 on CUDA, fp16 | $(grep -m1 '^Epoch 01' "$tmp/fit_cuda_fp16.log" 2>/dev/null) |"
# Epoch time: the "| 12.3s, 4567 samples/s" field of the epoch line.
epoch_time() { grep -m1 '^Epoch 01' "$1" 2>/dev/null | sed -n 's/.*| \([0-9.]*s, [0-9]* samples\/s\).*/\1/p'; }
echo "| CNN epoch 1 on CUDA, train.graph auto / off | $(epoch_time "$tmp/fit_cuda.log") / $(epoch_time "$tmp/fit_cuda_nograph.log") |"
grep -h 'captured training steps are off' "$tmp/fit_cuda.log" "$tmp/fit_cuda_nograph.log" 2>/dev/null |
  head -1 | sed 's/^/| graph notice | /; s/$/ |/'
echo "| CNN epoch 1, --device cuda:all | $(grep -m1 '^Epoch 01' "$tmp/fit_cuda_all.log" 2>/dev/null) |"
echo "| profiled step on CUDA | $(grep -m1 '^Profile:' "$tmp/profile_cuda.log" 2>/dev/null) |"
for d in fp32 bf16; do
  echo "| matmul n=5000 $d | $(grep -i 'gflop' "$tmp/matmul_$d.log" 2>/dev/null | tr -s ' ' | paste -sd ';' -) |"
done
exit $status
