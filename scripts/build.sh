#!/usr/bin/env bash
# Configures and builds dask-caps into BUILD_DIR (default: build).
#   scripts/build.sh            RelWithDebInfo build in build/
#   BUILD_DIR=build-asan SANITIZE=ON scripts/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B "$build_dir" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DDASKCAPS_SANITIZE="${SANITIZE:-OFF}" >/dev/null
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}"
