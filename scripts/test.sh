#!/usr/bin/env bash
# Runs every test. Installs what is missing (scripts/install-deps.sh), builds,
# runs the unit tests, the fuzz-corpus replays, the golden CLI runs on
# examples/ and the end-to-end tests against the real Dask (Debian's
# python3-distributed under /usr/bin/python3); then the sanitizer stage
# (scripts/sanitize.sh): the same tests on a clang AddressSanitizer +
# UndefinedBehaviorSanitizer build, and a short run of every fuzz target.
#   SKIP_SANITIZE=1  skip the sanitizer stage
#   FUZZ_SECONDS=N   seconds per fuzz target in the sanitizer stage (default 20)
#   BUILD_DIR, JOBS
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-2}" "$@"
if [ "${SKIP_SANITIZE:-0}" != 1 ]; then
  BUILD_DIR=build-san bash scripts/sanitize.sh
fi
