#!/usr/bin/env bash
# test-isa.sh: the CPU parity, kernel, random-net, training, amp and end-to-end tests once per
# instruction-set leg, so that the paths another CPU would take run on this one too:
#   native  as this machine is
#   avx512  oneDNN limited to AVX-512 without bf16 (ONEDNN_MAX_CPU_ISA=AVX512_CORE):
#           nChw16c layouts with amp bf16 emulated, on a CPU with bf16 instructions
#           (elsewhere the same as native)
#   avx2    oneDNN limited to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2) and ctrain's loops
#           too (CTRAIN_MAX_CPU_ISA=avx2): nChw8c layouts and ctrain's loops that take
#           them, with their AVX2 bodies, even on an AVX-512 machine
#   sse41   oneDNN limited to SSE4.1 and ctrain's loops in portable C
#           (CTRAIN_MAX_CPU_ISA=sse41): what a CPU without AVX2 runs
# A leg can only lower the ISA, never raise it. Each leg prints the ISA oneDNN and
# ctrain's loops ran with (`ctrain devices`). Extra arguments go to meson test.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || scripts/setup.sh
ninja --quiet -C build
tests=(test_cpu_parity test_cpu_parity_bf16native test_conv_kernels test_random_nets test_train
       test_amp test_amp_bf16native test_e2e)
legs=("native||" "avx512|AVX512_CORE|" "avx2|AVX2|avx2" "sse41|SSE41|sse41")
rc=0
for leg in "${legs[@]}"; do
  IFS='|' read -r name dnnl own <<<"$leg"
  vars=()
  [ -n "$dnnl" ] && vars+=("ONEDNN_MAX_CPU_ISA=$dnnl")
  [ -n "$own" ] && vars+=("CTRAIN_MAX_CPU_ISA=$own")
  isa=$(env "${vars[@]}" ./build/ctrain devices | sed -n 's/^oneDNN: .*ISA \(.*\)$/oneDNN \1/p;s/^ctrain.s CPU loops: \(.*\)$/ctrain loops \1/p' | paste -sd, -)
  echo "== ISA leg $name (${vars[*]:-no caps}): $isa =="
  env "${vars[@]}" meson test -C build --print-errorlogs "${tests[@]}" "$@" || rc=1
done
exit "$rc"
