#!/usr/bin/env bash
# bench-dist.sh: data parallelism on the CPU, side by side in one run: for each
# config, one process with 2 OpenMP threads, 2 MPI ranks with 1 thread each
# (mpirun), and 2 replicas in one process (--device cpu:2, 1 thread each). Prints
# the epoch lines and a table: training seconds per epoch (60000 samples over the
# median samples/s),
# samples/s, the all-reduce share of training time, and the final test accuracy.
#
#   scripts/bench-dist.sh [--epochs N] [CONFIG...]   (default: configs/mlp.yaml configs/cnn.yaml, 2 epochs)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=2
configs=()
while (($#)); do
  case "$1" in
    --epochs) epochs="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) configs+=("$1"); shift ;;
  esac
done
((${#configs[@]})) || configs=(configs/mlp.yaml configs/cnn.yaml)
[ -x build/ctrain ] || scripts/setup.sh
command -v mpirun >/dev/null || { echo "bench-dist.sh: mpirun not found (openmpi-bin)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1)

echo "# $(date -u +%Y-%m-%d) $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
     "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
rows=()
for cfg in "${configs[@]}"; do
  name=$(basename "$cfg" .yaml)
  for mode in "1 process x 2 threads" "2 ranks x 1 thread (mpirun)" "2 replicas x 1 thread (cpu:2)"; do
    args=(fit "$cfg" --epochs "$epochs" --out "$tmp/run" --no-progress)
    log="$tmp/log"
    case "$mode" in
      1*) OMP_NUM_THREADS=2 ./build/ctrain "${args[@]}" --device cpu >"$log" ;;
      2\ ranks*) "${mpirun[@]}" ./build/ctrain "${args[@]}" --device cpu >"$log" ;;
      *) OMP_NUM_THREADS=2 ./build/ctrain "${args[@]}" --device cpu:2 >"$log" ;;
    esac
    echo "## $name, $mode"
    grep '^Epoch' "$log"
    # training seconds = training samples / samples/s; median over epochs
    read -r secs sps share acc <<<"$(python3 - "$log" <<'PY'
import re, statistics, sys
sps, share, acc = [], "-", 0.0
for line in open(sys.argv[1]):
    if not line.startswith("Epoch"):
        continue
    sps.append(float(re.search(r"([0-9.]+) samples/s", line).group(1)))
    acc = float(re.search(r"Val Loss: [0-9.]+, Acc: ([0-9.]+)", line).group(1))
    m = re.search(r"all-reduce [0-9.]+s \(([0-9]+)%\)", line)
    if m:
        share = m.group(1) + "%"
med = statistics.median(sps)
print(f"{60000 / med:.2f} {med:.0f} {share} {acc:.4f}")
PY
)"
    rows+=("$(printf '| %-4s | %-30s | %6s | %6s | %5s | %s |' "$name" "$mode" "$secs" "$sps" "$share" "$acc")")
    rm -rf "$tmp/run"
  done
done
echo
echo "| config | layout | train s/epoch | samples/s | all-reduce share | test acc |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
