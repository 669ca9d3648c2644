#!/usr/bin/env bash
# test_gpu_bundle.sh: the GPU bundle and check, as a GPU machine would receive them,
# on a machine without a GPU (CI).
#
#   tests/test_gpu_bundle.sh [BUILD_DIR]     (default: build; a CUDA build with tests)
#
# 1. scripts/gpu-bundle.sh packs BUILD_DIR; it fails on its own when the bundle is
#    over 40 MiB or not self-contained.
# 2. A received copy: the repository's files (tracked and untracked, not ignored)
#    and the bundle, in a scratch directory, without BUILD_DIR: what reaches the GPU
#    machine.
# 3. scripts/gpu-check.sh --dry-run from that copy three ways: the bundle by an
#    absolute path from another directory, by a relative path, and by default. Each
#    must pass, list every step in its table (the GPU steps as skipped) and pass the
#    steps that need no GPU.
#    --only runs the chosen steps alone.
# 4. Broken bundles must fail the check: a library taken out (the preflight), and
#    libctrain-cuda.so swapped for a library of another build (the loader's ABI
#    test, and a test program that loads the backend itself: a dry run accepts a
#    skip only for a missing driver or device, never for a backend not found).
# 5. scripts/gpu_vs_torch.py's mechanics on the CPU: a tiny side-by-side of ctrain
#    and PyTorch (skipped, visibly, without PyTorch).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "test_gpu_bundle: $*" >&2; exit 1; }

bash "$root/scripts/gpu-bundle.sh" --build "$build" --out "$scratch/bundle"

recv="$scratch/recv"
mkdir -p "$recv"
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$recv"
cp -a "$scratch/bundle" "$recv/gpu-bundle"
[ ! -e "$recv/build" ] || fail "the received copy has a build directory"

steps="preflight loader_abi devices test_cuda_parity test_amp_gpu test_cuda_graph test_bench_gpu
test_predict_gpu test_image_folder_gpu test_conv_algo_gpu test_cuda_parity_own cublas_ref matmul_fp32 matmul_tf32 matmul_fp16 matmul_bf16 cnn_off cnn_off_nograph
cnn_bf16 cnn_fp16 cnn_cuda_all mlp_off mlp_bf16 mlp_fp16 cnn_goal eval_on_cpu profile_cuda oom_advice
summary_bf16 test_random_nets_cuda profile_8192 profile_8192_own vs_torch cpu_fit cpu_eval"
no_gpu_steps="preflight loader_abi devices cpu_fit cpu_eval"

# check_table LOG: every step has a row; the no-GPU steps passed, the others skipped.
check_table() {
  local log=$1 s row
  for s in $steps; do
    row=$(grep -E "^\| $s \|" "$log") || fail "no row for step $s in $log"
    case " $(echo $no_gpu_steps) " in
      *" $s "*) echo "$row" | grep -q "^| $s | pass |" || fail "step $s did not pass: $row" ;;
      *) echo "$row" | grep -q "^| $s | skip |" || fail "GPU step $s not skipped in a dry run: $row" ;;
    esac
  done
  grep -q "every step that ran passed" "$log" || fail "no closing line in $log"
}

echo "== dry run: absolute bundle path, from another directory =="
(cd "$scratch" && bash "$recv/scripts/gpu-check.sh" --dry-run --logs "$scratch/logs" "$recv/gpu-bundle") >"$scratch/abs.txt" 2>&1 ||
  { cat "$scratch/abs.txt"; fail "the dry run failed (absolute path)"; }
check_table "$scratch/abs.txt"
[ -s "$scratch/logs/cpu_fit.log" ] || fail "--logs kept no step output"
echo "== dry run: relative bundle path =="
(cd "$recv/scripts" && bash ./gpu-check.sh --dry-run ../gpu-bundle) >"$scratch/rel.txt" 2>&1 ||
  { cat "$scratch/rel.txt"; fail "the dry run failed (relative path)"; }
check_table "$scratch/rel.txt"
echo "== dry run: default bundle =="
(cd "$recv" && bash scripts/gpu-check.sh --dry-run) >"$scratch/def.txt" 2>&1 ||
  { cat "$scratch/def.txt"; fail "the dry run failed (default bundle)"; }
check_table "$scratch/def.txt"
sed -n '/^| step /,$p' "$scratch/def.txt"
echo "== --only: a rerun of chosen steps =="
(cd "$recv" && bash scripts/gpu-check.sh --dry-run --only cpu_fit,cpu_eval) >"$scratch/only.txt" 2>&1 ||
  { cat "$scratch/only.txt"; fail "the --only dry run failed"; }
grep -q "^| cpu_eval | pass |" "$scratch/only.txt" || fail "--only did not run cpu_eval"
grep -q "^| loader_abi | skip | - | not selected" "$scratch/only.txt" || fail "--only ran loader_abi"

echo "== broken bundles fail =="
rm "$recv/gpu-bundle/lib/libyaml-0.so.2"
if (cd "$recv" && bash scripts/gpu-check.sh --dry-run) >"$scratch/nolib.txt" 2>&1; then
  fail "a bundle without libyaml passed the check"
fi
grep -q "^| preflight | FAIL | .*libyaml-0.so.2" "$scratch/nolib.txt" ||
  { cat "$scratch/nolib.txt"; fail "the preflight did not name the missing library"; }
cp "$scratch/bundle/lib/libyaml-0.so.2" "$recv/gpu-bundle/lib/"
cp "$recv/gpu-bundle/tests/fake_cuda_other.so" "$recv/gpu-bundle/libctrain-cuda.so"
if (cd "$recv" && bash scripts/gpu-check.sh --dry-run) >"$scratch/stale.txt" 2>&1; then
  fail "a bundle whose libctrain-cuda.so comes from another build passed the check"
fi
grep -q "^| loader_abi | FAIL |" "$scratch/stale.txt" ||
  { cat "$scratch/stale.txt"; fail "the loader test did not catch another build's library"; }
grep -q "was built for another ctrain" "$scratch/stale.txt" ||
  { cat "$scratch/stale.txt"; fail "the loader's reason is not shown"; }
# A test program that cannot load the backend fails; it does not pass as "no GPU".
grep -q "^| test_predict_gpu | FAIL |" "$scratch/stale.txt" ||
  { cat "$scratch/stale.txt"; fail "test_predict gpu skipped with a backend it cannot load"; }
echo "== the side-by-side with PyTorch, its mechanics on the CPU (512 images) =="
rc=0
/usr/bin/python3 "$root/scripts/gpu_vs_torch.py" --ctrain "$build/ctrain" --device cpu \
  --limit 512 --plan cnn:64 mlp:128 --json "$scratch/vs.json" >"$scratch/vs.txt" 2>&1 || rc=$?
if [ "$rc" -eq 77 ]; then
  echo "SKIP: the side-by-side's mechanics: $(tail -n 1 "$scratch/vs.txt")"
else
  [ "$rc" -eq 0 ] || { cat "$scratch/vs.txt"; fail "gpu_vs_torch.py failed on the CPU"; }
  grep -qE '^\| cnn \| 64 \| [0-9.]+ s .*\| [0-9.]+x \| first 512 images \|$' "$scratch/vs.txt" ||
    { cat "$scratch/vs.txt"; fail "gpu_vs_torch.py printed no cnn row with a ratio"; }
  grep -q '^goal cnn ctrain-off <= 0.8x torch-eager-fp32: ' "$scratch/vs.txt" ||
    { cat "$scratch/vs.txt"; fail "gpu_vs_torch.py printed no goal line"; }
  /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert len(d["rows"]) == 2 and all(r["runs"]["ctrain-off"]["steady_s"] > 0 for r in d["rows"])' "$scratch/vs.json" ||
    fail "gpu_vs_torch.py's JSON lacks the runs"
  sed -n '/^| config/,$p' "$scratch/vs.txt"
fi
echo "test_gpu_bundle: ok"
