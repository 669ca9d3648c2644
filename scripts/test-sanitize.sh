#!/usr/bin/env bash
# test-sanitize.sh: build ctrain and its tests with AddressSanitizer and
# UndefinedBehaviorSanitizer into ./build-asan and run the whole suite there, one
# test at a time. Any report fails the run: a heap or stack overflow, a use after
# free, a leak, undefined behaviour (signed overflow, a misaligned load, a shift out
# of range, a float-to-int conversion out of range, ...), in a test program or in
# a ctrain process a test starts (also the ranks under mpirun, which inherit the
# environment).
#   - Every report aborts its process (abort_on_error; UBSan built not to recover).
#   - LeakSanitizer is on; tests/sanitizers/lsan.supp suppresses the leaks of
#     Open MPI's runtime and nothing else.
#   - Every malloc'd block is filled with ASan's 0xbe bytes (by default only its
#     first 4 KiB), so a read of memory nothing wrote gives garbage, not zeros.
#   - ASan and LeakSanitizer reports go to files under build-asan/meson-logs/
#     sanitizers/, UBSan's to the stderr of its process, which the tests capture
#     (GCC's UBSan runtime ignores log_path next to ASan). A report file, or a
#     UBSan report in the test log, fails the run even where a test accepts any
#     failure of the ctrain it started; they are printed at the end.
#   - CUDA is off (-Dcuda=disabled): there is no GPU here to run its code.
#     test_alloc preloads an allocation counter, which ASan's runtime (it must come
#     first) rules out; it is skipped, visibly (exit 77).
# Extra arguments go to meson test (e.g. a test name).
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-asan
options=(-Dcuda=disabled -Dwerror=true -Db_sanitize=address,undefined
         -Dbuildtype=debugoptimized
         "-Dc_args=-fno-sanitize-recover=all -fsanitize=float-cast-overflow")
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "${options[@]}" >/dev/null
else
  meson configure "$build" "${options[@]}" >/dev/null
fi
ninja --quiet -C "$build"

reports="$PWD/$build/meson-logs/sanitizers"
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:max_malloc_fill_size=1073741824:log_path=$reports/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:abort_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"

echo "== sanitizers: address,undefined =="
rc=0
meson test -C "$build" --no-rebuild --print-errorlogs "$@" || rc=$?
n=0
for f in "$reports"/*; do
  [ -e "$f" ] || continue
  echo "== sanitizer report ${f#"$PWD/"} =="
  cat "$f"
  n=$((n + 1))
done
log="$build/meson-logs/testlog.txt"
ub=$(grep -c "runtime error: " "$log" || true)
if ((ub)); then
  echo "== UBSan reports in $log =="
  grep -A6 "runtime error: " "$log"
fi
if ((n || ub)); then
  echo "sanitizers: $n ASan/LSan report file(s) above, $ub UBSan report(s) in the test log" >&2
  rc=1
fi
exit "$rc"
