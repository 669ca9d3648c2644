#!/usr/bin/env bash
# test.sh: build (if needed) and run the whole test suite with meson test.
# Extra arguments go to meson test (e.g. a test name, or -v).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
[ -f build/build.ninja ] || scripts/setup.sh
ninja -C build
meson test -C build --print-errorlogs "$@"
