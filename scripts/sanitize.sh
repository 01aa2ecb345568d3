#!/usr/bin/env bash
# The sanitizer stage: builds everything with clang under AddressSanitizer
# and UndefinedBehaviorSanitizer (plus libFuzzer's coverage hooks), runs the
# whole test suite on that build (unit, fuzz replays, golden, end-to-end
# against the real Dask), then each libFuzzer target for a short while.
#
#   scripts/sanitize.sh                 build-san/, 20 s per fuzz target
#   FUZZ_SECONDS=600 scripts/sanitize.sh
#   FUZZ_SECONDS=0 scripts/sanitize.sh  tests only, no fuzzing
#
# Fails on any compiler warning (WERROR=OFF: does not), on any failing
# test, on any sanitizer report (each is written to
# $BUILD_DIR/sanitizer-logs/ as well, even from a dask-caps process that an
# end-to-end test started and whose exit status it tolerated), and on any
# fuzzer finding (see tests/fuzz/run.sh for where they go).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build-san}
seconds=${FUZZ_SECONDS:-20}

# -O1 with line tables only: a third of the compile time of -O2 -g, and the
# reports still name file and line.
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" \
  -DCMAKE_C_FLAGS_DEBUG="-O1 -gline-tables-only" \
  -DDASKCAPS_FUZZ=ON -DDASKCAPS_BUILD_BENCH=OFF -DDASKCAPS_WERROR="${WERROR:-ON}" >/dev/null
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}"
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" --target fuzz
echo "sanitize: build took $SECONDS s" >&2

logs=$(cd "$build_dir" && pwd)/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
export ASAN_OPTIONS="log_path=$logs/asan:abort_on_error=0:detect_leaks=1:strict_string_checks=1"
export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
# Leaks inside the C library, not ours (each one named and explained there).
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"

status=0
start=$SECONDS
ctest --test-dir "$build_dir" --output-on-failure -j "${JOBS:-2}" "$@" || status=1
echo "sanitize: tests took $((SECONDS - start)) s" >&2
if [ -n "$(ls -A "$logs")" ]; then
  echo "sanitize: sanitizer reports in $logs:" >&2
  for f in "$logs"/*; do
    echo "== $f" >&2
    head -40 "$f" >&2
  done
  status=1
fi

if [ "$seconds" -gt 0 ]; then
  # libFuzzer prints its own reports; keep them on stderr, not in $logs.
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
  FUZZ_OUT="$build_dir/fuzz-out" DASK_CAPS="$build_dir/dask-caps" \
    bash tests/fuzz/run.sh "$build_dir" "$seconds" || status=1
fi
exit $status
