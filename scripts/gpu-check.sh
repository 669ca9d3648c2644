#!/usr/bin/env bash
# gpu-check.sh: every GPU check in one command, from a bundle made by
# scripts/gpu-bundle.sh, within a time budget (default 8 minutes), ending with one
# results table.
#
#   scripts/gpu-check.sh [--dry-run] [--budget SECONDS] [--logs DIR] [--only STEPS] [BUNDLE]
#       BUNDLE        the bundle folder, relative to the current directory or
#                     absolute (default: gpu-bundle, then the repository's)
#       --dry-run     run the steps that need no GPU (the library preflight, the
#                     loader test, `ctrain devices`, a CPU fit from the bundle) and
#                     the GPU test programs, which must exit 77 (skipped) without
#                     a GPU; every other GPU step is reported as skipped. For CI
#                     on machines without a GPU: the script's own mechanics.
#       --budget S    the whole check's seconds (default 600): a step's timeout
#                     is cut to what is left, and with under 15 s left the
#                     remaining steps are reported as not run
#       --logs DIR    keep every step's full output there (default: only the
#                     last lines of failed steps are printed)
#       --only STEPS  run only these steps (names as in the table, comma-separated;
#                     eval_on_cpu reads cnn_off's checkpoint): a rerun after a fix
#
# Steps, each under its own timeout: the library preflight (ldd of every bundled
# program with the bundle's libraries, then the CUDA libraries of the toolkit and
# of Python's NVIDIA wheels: nothing may be missing), the loader's ABI test,
# `ctrain devices`, the GPU test programs (parity, amp, captured steps, the bench
# and predict GPU cases, the convolution algorithm choice: the same bits twice with
# train.deterministic, the timed search and its cache), `bench matmul --n 5000` in fp32, tf32, fp16 and bf16 set
# against cuBLAS's own rate measured through PyTorch (scripts/gpu_matmul_ref.py),
# CNN fits with amp off, bf16 and fp16 and train.graph auto and off, the CNN on
# cuda:all, MLP fits in the three amp modes, the CNN's 10-epoch bf16 goal run
# (>= 0.990 test accuracy in <= 1.0 s of training), a CPU evaluation of a CUDA
# checkpoint, a CUDA profile, the out-of-memory advice, the conv algorithms
# summary picks in bf16 and random nets against the double reference
# (test_random_nets cuda), `fit --profile` of the CNN at batch 8192, and the CNN,
# the MLP and the ResNet side by side with PyTorch eager and torch.compile at several
# batch sizes (scripts/gpu_vs_torch.py, its table in the step's log and
# vs_torch.json under --logs). The table gives each step's result (pass, FAIL, skip),
# its seconds and what it measured. Exit status 0 only when every step that ran
# passed; on a GPU machine a test program that skips (exit 77: no usable GPU)
# is a failure.
set -uo pipefail
here=$(pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
dry=0 budget=600 logs='' bundle='' only=''
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1; shift ;;
    --budget) budget=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    --only) only=",$2,"; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    -*) echo "gpu-check.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) bundle=$1; shift ;;
  esac
done
abspath() { case $1 in /*) echo "$1" ;; *) echo "$here/$1" ;; esac; }
if [ -z "$bundle" ]; then
  bundle=gpu-bundle
  [ -d "$here/$bundle" ] || bundle="$root/gpu-bundle"
fi
bundle=$(abspath "$bundle")
if [ ! -x "$bundle/ctrain" ] || [ ! -f "$bundle/libctrain-cuda.so" ]; then
  echo "gpu-check.sh: $bundle is not a GPU bundle (make one with scripts/gpu-bundle.sh)" >&2
  exit 2
fi
bundle=$(cd "$bundle" && pwd)
[ -n "$logs" ] && { logs=$(abspath "$logs"); mkdir -p "$logs"; }
cd "$root" || exit 2 # configs/ and data/ of the working tree

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t_start=$SECONDS

# ---- libraries: the bundle's (xz-compressed ones unpacked), then CUDA's ----------
. "$root/scripts/gpu-libs.sh" # gpu_unpack_libs, gpu_libs_outside, gpu_provided_lib
mkdir -p "$tmp/lib"
gpu_unpack_libs "$bundle" "$tmp/lib" || { echo "gpu-check.sh: cannot unpack $bundle/lib" >&2; exit 2; }
libpath="$tmp/lib:$bundle"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libpath="$libpath:$d"
done
if command -v python3 >/dev/null; then
  wheel_libs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = set()
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    dirs.update(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
print(":".join(sorted(dirs)))
PY
)
  [ -n "$wheel_libs" ] && libpath="$libpath:$wheel_libs"
fi
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CT_BUILD_ROOT="$bundle" # the test programs run $CT_BUILD_ROOT/ctrain
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
ctrain="$bundle/ctrain"

# ---- the step runner -------------------------------------------------------------
declare -a order=()
# The only skip reasons a dry run accepts from a test program (tests/helpers.c): no
# driver or no device. A program that cannot load the bundle's backend fails (exit 1).
no_gpu_reason='SKIP: no usable GPU: (no NVIDIA driver is installed|no CUDA device found)'

declare -A result=() secs=() detail=()
status=0
# step NAME KIND TIMEOUT COMMAND...
#   KIND gpu:     needs a GPU; not run in a dry run
#        gpu-opt: the same, but exit 77 (something optional missing) is a skip
#        test:    a test program; exit 77 (no usable GPU) is a skip in a dry run
#                 and a failure otherwise
#        any:     runs everywhere
step() {
  local name=$1 kind=$2 limit=$3; shift 3
  order+=("$name")
  if [ -n "$only" ] && [[ $only != *",$name,"* ]]; then
    result[$name]=skip; detail[$name]="not selected (--only)"
    return
  fi
  if [ "$dry" = 1 ] && [ "${kind%-opt}" = gpu ]; then
    if [ -x "$1" ] || command -v "$1" >/dev/null; then
      result[$name]=skip; detail[$name]="dry run"
    else
      result[$name]=FAIL; detail[$name]="not executable: $1"; status=1
    fi
    return
  fi
  local left=$((budget - (SECONDS - t_start)))
  if [ "$left" -lt 15 ]; then
    result[$name]=FAIL; detail[$name]="not run: ${left}s of the budget left"
    status=1
    return
  fi
  [ "$limit" -le "$left" ] || limit=$left
  echo "=== $name: $*"
  local log="$tmp/$name.log" t0 rc
  t0=$(date +%s.%N)
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  secs[$name]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  [ -n "$logs" ] && cp "$log" "$logs/$name.log"
  if [ "$rc" -eq 0 ]; then
    result[$name]=pass
  elif [ "$rc" -eq 77 ] && [ "$kind" = test ] && [ "$dry" = 1 ] && grep -qE "$no_gpu_reason" "$log"; then
    result[$name]=skip; detail[$name]="no GPU here (exit 77)"
  elif [ "$rc" -eq 77 ] && [ "$kind" = test ] && [ "$dry" = 1 ]; then
    result[$name]=FAIL; detail[$name]="skipped for another reason than a missing GPU: $(grep -m1 -i 'skip' "$log" | cut -c1-100)"
    status=1
  elif [ "$rc" -eq 77 ] && [ "$kind" = gpu-opt ]; then
    result[$name]=skip; detail[$name]=$(tail -n 1 "$log" | cut -c1-100)
  elif [ "$rc" -eq 77 ]; then
    result[$name]=FAIL; detail[$name]="skipped (77): $(grep -m1 -i 'skip' "$log" | cut -c1-100)"
    status=1
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    result[$name]=FAIL; detail[$name]="timed out after ${limit}s"; status=1
  else
    result[$name]=FAIL; detail[$name]="exit $rc"; status=1
  fi
  if [ "${result[$name]}" = FAIL ]; then
    echo "--- $name failed; its last lines:"
    tail -n 15 "$log" | cut -c1-300
  fi
}
# Marks a step that ran as failed after a check of its output.
fail_step() { result[$1]=FAIL; detail[$1]=$2; status=1; }
log_of() { cat "$tmp/$1.log" 2>/dev/null; }

# ---- preflight: every bundled program's libraries resolve, to the bundle's own ------
# copies except for what the machine provides (gpu-libs.sh)
preflight() {
  local bad
  bad=$(ldd "$ctrain" "$bundle/libctrain-cuda.so" "$bundle"/tests/test_* 2>&1 |
    gpu_libs_outside "$tmp/lib" "$bundle" | tr '\n' ' ')
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$bundle/libctrain-cuda.so" | grep -E 'cud|cublas|nccl|stdc'
  ldd --version | head -1
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  if [ -n "$bad" ]; then echo "libraries: $bad"; return 1; fi
}
export -f preflight gpu_libs_outside gpu_provided_lib
export ctrain bundle tmp
step preflight any 60 bash -c preflight
if [ "${result[preflight]}" = FAIL ]; then
  detail[preflight]=$(grep -m1 '^libraries: ' "$tmp/preflight.log" | cut -c1-200)
elif [ "${result[preflight]}" = pass ]; then
  detail[preflight]="all found; $(log_of preflight | awk '$1 ~ /^libcudnn.so|^libcublas.so|^libnccl.so/ {printf "%s%s from %s", sep, $1, $3; sep = ", "}' | cut -c1-200)"
fi

step loader_abi any 60 "$bundle/tests/test_cuda_loader"
step devices any 60 "$ctrain" devices
if [ "${result[devices]}" = pass ]; then
  detail[devices]=$(log_of devices | grep -E '^(CUDA available|CUDA libraries|cuda:0:)' | cut -c1-120 | paste -sd ';' -)
  if [ "$dry" = 0 ] && ! log_of devices | grep -q '^CUDA available: yes'; then
    fail_step devices "no usable GPU: $(log_of devices | grep -m1 '^Reason' | cut -c1-100)"
  fi
fi

# ---- the GPU test programs ------------------------------------------------------------
step test_cuda_parity test 150 "$bundle/tests/test_cuda_parity"
step test_amp_gpu test 120 "$bundle/tests/test_amp" gpu
step test_cuda_graph test 180 "$bundle/tests/test_cuda_graph"
step test_bench_gpu test 120 "$bundle/tests/test_bench" gpu
step test_predict_gpu test 120 "$bundle/tests/test_predict" gpu
step test_image_folder_gpu test 120 "$bundle/tests/test_image_folder" gpu
step test_conv_algo_gpu test 150 "$bundle/tests/test_conv_algo" gpu
# ctrain's own kernels in cuDNN's place (CTRAIN_CUDA_KERNELS=all: max pooling with its
# argmax, small-channel weight gradients, chunked batch norms): off by default until
# this step has passed on a GPU and the profile shows them faster.
step test_cuda_parity_own test 150 "$bundle/tests/test_cuda_parity" own
for t in test_cuda_parity test_amp_gpu test_cuda_graph test_bench_gpu test_predict_gpu \
  test_image_folder_gpu test_conv_algo_gpu test_cuda_parity_own; do
  [ "${result[$t]}" = pass ] || continue
  detail[$t]=$(log_of "$t" | grep -E '^\[  PASSED  \]' | tr -s ' ' | paste -sd ';' - | cut -c1-80)
done

# ---- matmul against cuBLAS's own rate -----------------------------------------------
json_get() { # FILE PYTHON-EXPRESSION-ON-d (the last JSON object in FILE)
  python3 - "$1" "$2" <<'PY' 2>/dev/null
import json, sys
objs = []
text = open(sys.argv[1]).read()
dec = json.JSONDecoder()
i = text.find("{")
while 0 <= i < len(text):
    try:
        o, j = dec.raw_decode(text, i)
        objs.append(o)
        i = text.find("{", j)
    except ValueError:
        i = text.find("{", i + 1)
d = objs[-1] if objs else {}
print(eval(sys.argv[2], {"d": d, "objs": objs}))
PY
}
step cublas_ref gpu-opt 150 python3 "$root/scripts/gpu_matmul_ref.py" --n 5000
for dt in fp32 tf32 fp16 bf16; do
  step "matmul_$dt" gpu 120 "$ctrain" bench matmul --n 5000 --dtype "$dt" --json
  [ "${result[matmul_$dt]}" = pass ] || continue
  if [ "$(json_get "$tmp/matmul_$dt.log" 'd["gpu"].get("gflops") is not None')" != True ]; then
    fail_step "matmul_$dt" "the GPU did not run: $(json_get "$tmp/matmul_$dt.log" 'd["gpu"].get("reason")')"
    continue
  fi
  got=$(json_get "$tmp/matmul_$dt.log" 'round(d["gpu"]["gflops"])')
  ref=$(json_get "$tmp/cublas_ref.log" "round(d['gflops']['$dt'])")
  check=$(json_get "$tmp/matmul_$dt.log" '("pass" if d["gpu"]["pass"] else "FAIL") + " (rel diff %.1e)" % d["gpu"]["max_rel_diff"]')
  if [ -n "$ref" ] && [ "$ref" != None ] && [ -n "$got" ]; then
    ratio=$(awk -v a="$got" -v b="$ref" 'BEGIN {printf "%.2f", a / b}')
    detail[matmul_$dt]="$got GFLOP/s, cuBLAS via PyTorch $ref: ${ratio}x (goal >= 0.90); check $check"
  else
    detail[matmul_$dt]="${got:-?} GFLOP/s; check $check"
  fi
done
[ "${result[cublas_ref]}" = pass ] &&
  detail[cublas_ref]=$(json_get "$tmp/cublas_ref.log" '", ".join(f"{k} {v:.0f}" for k, v in d["gflops"].items()) + " GFLOP/s, torch " + d["torch"]')

# ---- fits -----------------------------------------------------------------------------
# fit NAME KIND TIMEOUT CONFIG ARGS...: a fit with --json into $tmp/runs/NAME; the
# detail gives the epochs, the last val accuracy, the median epoch's training
# seconds and the training total.
fit() {
  local name=$1 kind=$2 limit=$3 config=$4; shift 4
  step "$name" "$kind" "$limit" "$ctrain" fit "$root/configs/$config" --json --no-progress \
    --out "$tmp/runs/$name" "$@"
  [ "${result[$name]}" = pass ] || return 0
  detail[$name]=$(python3 - "$tmp/$name.log" <<'PY' 2>/dev/null
import json, statistics, sys
ep = []
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("type") == "epoch":
        ep.append(r)
if not ep:
    print("no epoch records")
elif "train_seconds" not in ep[-1]:
    print("epoch records without train_seconds (a bundle older than its scripts?)")
else:
    tr = [e["train_seconds"] for e in ep]
    s = (f"{len(ep)} ep, val acc {ep[-1]['val_acc']:.4f}, train {statistics.median(tr):.2f} s/epoch "
         f"(first {tr[0]:.2f}), total {sum(tr):.2f} s, {ep[-1]['samples_per_sec']:.0f} samples/s")
    if ep[-1].get("loss_scale") is not None:
        s += f", scale {ep[-1]['loss_scale']:.0f}"
    print(s)
PY
)
}
fit cnn_off gpu 120 cnn.yaml --epochs 2 --device cuda --amp off
fit cnn_off_nograph gpu 120 cnn.yaml --epochs 2 --device cuda --amp off --graph off
fit cnn_bf16 gpu 120 cnn.yaml --epochs 2 --device cuda --amp bf16
fit cnn_fp16 gpu 120 cnn.yaml --epochs 2 --device cuda --amp fp16
fit cnn_cuda_all gpu 120 cnn.yaml --epochs 2 --device cuda:all
fit mlp_off gpu 90 mlp.yaml --epochs 2 --device cuda --amp off
fit mlp_bf16 gpu 90 mlp.yaml --epochs 2 --device cuda --amp bf16
fit mlp_fp16 gpu 90 mlp.yaml --epochs 2 --device cuda --amp fp16
# The goal: 10 epochs of the tutorial's CNN, data on the GPU, captured steps, bf16.
fit cnn_goal gpu 180 cnn.yaml --epochs 10 --device cuda --amp bf16 --graph auto
if [ "${result[cnn_goal]}" = pass ]; then
  total=$(json_get "$tmp/cnn_goal.log" 'sum(o["train_seconds"] for o in objs if o.get("type") == "epoch")')
  acc=$(json_get "$tmp/cnn_goal.log" '[o for o in objs if o.get("type") == "epoch"][-1]["val_acc"]')
  met=$(awk -v t="${total:-99}" -v a="${acc:-0}" 'BEGIN {print (t <= 1.0 && a >= 0.990) ? "met" : "NOT met"}')
  verdict=$(printf 'goal %s: %.2f s of training (<= 1.0), test acc %.4f (>= 0.990)' "$met" "${total:-0}" "${acc:-0}")
  detail[cnn_goal]="${detail[cnn_goal]}; $verdict"
fi

# eval_on_cpu NAME KIND FIT: FIT's checkpoint evaluated on the CPU must give FIT's
# last val accuracy (within 0.002).
eval_on_cpu() {
  local name=$1 kind=$2 fit_name=$3
  step "$name" "$kind" 90 "$ctrain" eval --checkpoint "$tmp/runs/$fit_name/model.bin" --device cpu
  [ "${result[$name]}" = pass ] || return 0
  local cpu_acc fit_acc
  cpu_acc=$(log_of "$name" | sed -n 's/.*Accuracy: \([0-9.]*\).*/\1/p' | head -1)
  fit_acc=$(json_get "$tmp/$fit_name.log" '[o for o in objs if o.get("type") == "epoch"][-1]["val_acc"]')
  detail[$name]="CPU accuracy ${cpu_acc:-?}, $fit_name's last val acc ${fit_acc:-?}"
  if ! awk -v a="${cpu_acc:-0}" -v b="${fit_acc:-1}" 'BEGIN {exit !((a - b) ^ 2 <= 0.002 ^ 2)}'; then
    fail_step "$name" "${detail[$name]}: more than 0.002 apart"
  fi
}
eval_on_cpu eval_on_cpu gpu cnn_off
step profile_cuda gpu 90 "$ctrain" fit "$root/configs/cnn.yaml" --device cuda --profile --profile-steps 50
[ "${result[profile_cuda]}" = pass ] && detail[profile_cuda]=$(log_of profile_cuda | grep -m1 '^Profile:' | cut -c1-120)
# A plan over --max-memory: summary must exit 1 and print the batch size that fits.
oom_advice() {
  "$ctrain" summary "$root/configs/cnn.yaml" --device cuda --batch-size 65536 --max-memory 512M
  local rc=$?
  [ "$rc" -eq 1 ] || { echo "oom_advice: summary exited $rc, expected 1 (the plan does not fit)"; return 1; }
}
export -f oom_advice
export root
step oom_advice gpu 60 bash -c oom_advice
if [ "${result[oom_advice]}" = pass ]; then
  detail[oom_advice]=$(log_of oom_advice | grep -m1 'fits (arena' | sed 's/^ *- //' | cut -c1-100)
  [ -n "${detail[oom_advice]}" ] || fail_step oom_advice "no batch-size advice in the output"
fi
step summary_bf16 gpu 60 "$ctrain" summary "$root/configs/cnn.yaml" --device cuda --amp bf16
[ "${result[summary_bf16]}" = pass ] &&
  detail[summary_bf16]="layer rows naming tensor-op math: $(log_of summary_bf16 | grep -c 'tensor-op math'), fma math: $(log_of summary_bf16 | grep -c 'fma math'); $(log_of summary_bf16 | grep -m1 -E '^ +batch\+metrics' | tr -s ' ' | cut -c2-60) (the datasets, when kept on the GPU)"

# ---- random nets against the double reference on CUDA: last of the GPU steps, so that
# a short budget cuts them first -------------------------------------------------------
step test_random_nets_cuda test 150 "$bundle/tests/test_random_nets" cuda
[ "${result[test_random_nets_cuda]}" = pass ] &&
  detail[test_random_nets_cuda]=$(log_of test_random_nets_cuda | grep -E '^\[  PASSED  \]' | tr -s ' ' | cut -c1-40)

# ---- side by side with PyTorch, and where the time goes at batch 8192: the longest
# steps, after the checks, so that a short budget cuts them first ---------------------
step profile_8192 gpu 90 "$ctrain" fit "$root/configs/cnn.yaml" --device cuda --profile \
  --profile-steps 20 train.batch_size=8192
[ "${result[profile_8192]}" = pass ] && detail[profile_8192]=$(log_of profile_8192 | grep -m1 '^Profile:' | cut -c1-120)
profile_own() { CTRAIN_CUDA_KERNELS=all "$ctrain" fit "$root/configs/cnn.yaml" --device cuda \
  --profile --profile-steps 20 train.batch_size=8192; }
export -f profile_own
step profile_8192_own gpu 90 bash -c profile_own
[ "${result[profile_8192_own]}" = pass ] && detail[profile_8192_own]=$(log_of profile_8192_own | grep -m1 '^Profile:' | cut -c1-120)
step vs_torch gpu-opt 330 python3 "$root/scripts/gpu_vs_torch.py" --ctrain "$ctrain" \
  --json "$tmp/vs_torch.json"
if [ "${result[vs_torch]}" = pass ]; then
  [ -n "$logs" ] && cp "$tmp/vs_torch.json" "$logs/"
  detail[vs_torch]=$(log_of vs_torch | grep '^goal ' | sed 's/ (batch.*//' | paste -sd ';' - | cut -c1-200)
fi

# ---- the CPU side of the bundle (also what a dry run checks of fit and eval) ----------
fit cpu_fit any 120 mlp.yaml --epochs 1 --device cpu
eval_on_cpu cpu_eval any cpu_fit

# ---- the table --------------------------------------------------------------------------
echo
bundle_commit=$(sed -n 's/^commit: //p' "$bundle/MANIFEST" 2>/dev/null)
echo "GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ), bundle ${bundle_commit:-without MANIFEST}$([ "$dry" = 1 ] && echo ', DRY RUN (no GPU steps)')"
tree_commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null)
[ -n "$tree_commit" ] && [ "${bundle_commit%% *}" != "$tree_commit" ] &&
  echo "warning: the bundle was made at ${bundle_commit%% *}, the scripts and configs here are at $tree_commit"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 | sed 's/^/device: /'
echo
echo "| step | result | seconds | detail |"
echo "|---|---|---|---|"
for k in "${order[@]}"; do
  printf '| %s | %s | %s | %s |\n' "$k" "${result[$k]}" "${secs[$k]:--}" "${detail[$k]:-}"
done
echo
echo "total $((SECONDS - t_start)) s of a ${budget} s budget; $([ "$status" = 0 ] && echo 'every step that ran passed' || echo 'FAILURES above')"
exit $status
