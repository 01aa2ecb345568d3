#!/usr/bin/env bash
# Runs every test. Installs what is missing (scripts/install-deps.sh), builds
# everything with GCC in Release (-O3, where GCC warns of things -O2 does
# not see; BUILD_TYPE=RelWithDebInfo for another), runs the unit tests, the
# fuzz-corpus replays, the golden CLI runs on examples/, the library's
# install tests and the end-to-end tests against the real Dask (Debian's
# python3-distributed under /usr/bin/python3); then the sanitizer stage
# (scripts/sanitize.sh): the same tests on a clang AddressSanitizer +
# UndefinedBehaviorSanitizer build (Debug), and a short run of every fuzz
# target. Every build treats warnings as errors, so a new warning fails.
#   SKIP_SANITIZE=1  skip the sanitizer stage
#   FUZZ_SECONDS=N   seconds per fuzz target in the sanitizer stage (default 10 here;
#                    scripts/sanitize.sh alone: 20; longer runs: bench/RESULTS.md)
#   WERROR=OFF       warnings do not fail the builds (another compiler, say)
#   BUILD_DIR, BUILD_TYPE, JOBS
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's wall time goes to stderr, so a slow CI run says where it went.
stage() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "test.sh: $name took $((SECONDS - start)) s" >&2
}
stage install-deps bash scripts/install-deps.sh
export WERROR=${WERROR:-ON}
# One GCC build, for the warnings of -O3 and for the tests (a second one in
# RelWithDebInfo cost CI 5.5 minutes; scripts/warnings.sh checks that type
# and the others).
stage build env BUILD_TYPE="${BUILD_TYPE:-Release}" bash scripts/build.sh
stage tests ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-2}" "$@"
if [ "${SKIP_SANITIZE:-0}" != 1 ]; then
  stage sanitize env BUILD_DIR=build-san FUZZ_SECONDS="${FUZZ_SECONDS:-10}" bash scripts/sanitize.sh
fi
