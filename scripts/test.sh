#!/usr/bin/env bash
# test.sh: install what the tests need (scripts/setup.sh --tests: what cannot be
# installed is skipped, and so are the tests that need it), build, and run the whole
# test suite with meson test, then print one closing line "tests: N passed, N failed,
# N skipped".
# Extra arguments go to meson test (e.g. a test name, or -v).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
scripts/setup.sh --tests # what only the tests need: installed, or skipped visibly
rc=0
meson test -C build --print-errorlogs "$@" || rc=$?
python3 - build/meson-logs/testlog.json <<'PY'
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
for line in open(sys.argv[1]):
    r = json.loads(line).get("result", "")
    counts["passed" if r == "OK" else "skipped" if r == "SKIP" else "failed"] += 1
print(f"tests: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
exit "$rc"
