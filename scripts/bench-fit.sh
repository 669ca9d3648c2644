#!/usr/bin/env bash
# bench-fit.sh: train the shipped configs and report, per config, the per-epoch
# lines, seconds per epoch, samples/s, final test accuracy, `ctrain eval`'s
# accuracy on the saved checkpoint, and peak RSS (from /usr/bin/time or getrusage).
#
#   scripts/bench-fit.sh [--epochs N] [CONFIG...]     (default: configs/cnn.yaml configs/mlp.yaml)
#
# Output directories go under a temporary folder, so runs/ is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=""
configs=()
while (($#)); do
  case "$1" in
    --epochs) epochs="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) configs+=("$1"); shift ;;
  esac
done
((${#configs[@]})) || configs=(configs/cnn.yaml configs/mlp.yaml)
[ -x build/ctrain ] || scripts/setup.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# $(date -u +%Y-%m-%d) $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
     "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
summary=()
for cfg in "${configs[@]}"; do
  name=$(basename "$cfg" .yaml)
  args=(fit "$cfg" --out "$tmp/$name" --no-progress)
  [ -n "$epochs" ] && args+=(--epochs "$epochs")
  echo "## ctrain ${args[*]}"
  log="$tmp/$name.log"
  ./build/ctrain "${args[@]}" | tee "$log"
  eval_acc=$(./build/ctrain eval --checkpoint "$tmp/$name/model.bin" | sed -n 's/.*Accuracy: \([0-9.]*\).*/\1/p')
  read -r secs sps acc n <<<"$(awk -F'|' '/^Epoch/ {
      split($3, v, "Acc: "); split($4, t, ","); gsub(/s/, "", t[1]); gsub(/[^0-9.]/, "", t[2]);
      acc = v[2] + 0; s += t[1]; p += t[2]; n++ }
      END { if (n) printf "%.2f %.0f %.4f %d", s / n, p / n, acc, n }' "$log")"
  rss=$(sed -n 's/.*peak RSS \([0-9]*\) MiB.*/\1/p' "$log")
  summary+=("$(printf '| %-4s | %2d | %6.2f | %6s | %s | %s | %4s MiB |' "$name" "$n" "$secs" "$sps" "$acc" "$eval_acc" "$rss")")
done
echo
echo "| config | epochs | s/epoch (train+eval) | train samples/s | test acc (fit) | test acc (eval) | peak RSS |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${summary[@]}"
