#!/usr/bin/env bash
# Runs every test: builds, then the unit tests, the golden CLI runs on
# examples/, and the end-to-end tests against the real Dask
# (Debian's python3-distributed under /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-2}" "$@"
