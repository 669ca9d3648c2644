#!/usr/bin/env bash
# fuzz.sh: build the libFuzzer harnesses (tests/fuzz) with clang into build-fuzz and
# run each for SECONDS (default 60): fuzz_config (YAML configs and shape
# inference), fuzz_idx (IDX files, gzip and plain), fuzz_checkpoint
# (safetensors), fuzz_image (PNG, JPEG, PGM and PPM files, converted to model
# inputs), fuzz_list (the list files of data.format list) and fuzz_cache (the data
# caches of image folders). Each starts from its seeds (tests/fuzz/corpus/<target>)
# and the saved regressions, and prints one line: its name, how many inputs it ran,
# and the result.
#
# A crash, a sanitizer report (AddressSanitizer, UBSan), a broken contract
# (tests/fuzz/targets.h: an error that is not one clean line naming the input), an
# input that runs over 10 s, a single allocation over 64 MiB or a leak fails the
# run. The input is saved under build-fuzz/crashes/<target>/ and printed in base64
# (so a CI log keeps it). Once the bug is fixed, add the input to
# tests/fuzz/regressions/<target>/: test_fuzz_regressions replays it from then on.
#
#   scripts/fuzz.sh [SECONDS]
# Inputs found along the way accumulate in build-fuzz/corpus/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
case "$secs" in
  ''|*[!0-9]*|0) echo "fuzz.sh: SECONDS must be a positive integer, not '$secs'" >&2; exit 2 ;;
esac
command -v clang >/dev/null || { echo "fuzz.sh: needs clang (Debian: clang libclang-rt-dev)" >&2; exit 2; }

build=build-fuzz
if [ ! -f "$build/build.ninja" ]; then
  CC=clang meson setup "$build" -Dfuzz=true -Dtests=false -Dcuda=disabled -Dmpi=disabled \
    -Dnccl=disabled -Dbuildtype=debugoptimized -Db_ndebug=false -Dwerror=true >/dev/null
fi
ninja --quiet -C "$build" fuzzers

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
failed=0
for t in config idx checkpoint image list cache; do
  work="$build/corpus/$t" crashes="$build/crashes/$t" log="$build/fuzz-$t.log"
  mkdir -p "$work" "$crashes"
  rc=0
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -malloc_limit_mb=64 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes/" \
    "$work" "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz_$t: ${execs:-?} inputs in ${secs} s, no failure"
    continue
  fi
  failed=1
  echo "fuzz_$t: FAILED (exit $rc) after ${execs:-?} inputs; the report:"
  # From the first line of the report (sanitizer, contract or libFuzzer) on.
  awk '/runtime error|contract broken|==[0-9]+== *ERROR|^ERROR|SUMMARY/ {on = 1} on' "$log" |
    grep -v '^#[0-9]' | head -60 | sed 's/^/    /'
  for f in "$crashes"/*; do
    [ -f "$f" ] || continue
    echo "  input saved as $f ($(stat -c %s "$f") bytes), base64:"
    base64 -w 76 "$f" | head -c 20000 | sed 's/^/    /'
    echo
  done
done
exit "$failed"
