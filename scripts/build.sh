#!/usr/bin/env bash
# Configures and builds dask-caps into BUILD_DIR (default: build).
#   scripts/build.sh                      RelWithDebInfo build of everything in build/
#   BUILD_TYPE=Release scripts/build.sh   another build type
#   LEAN=1 scripts/build.sh               only what the main job runs: the binary and
#                                         the library (no tests, benchmarks or layer checks)
#   WERROR=ON scripts/build.sh            warnings are errors (scripts/test.sh, CI);
#                                         unset: as the build folder was configured
#   TARGETS="dask-caps" scripts/build.sh  only these targets
#   BUILD_DIR=build-asan SANITIZE=ON scripts/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
all=ON
[ "${LEAN:-0}" = 1 ] && all=OFF
options=(-DDASKCAPS_BUILD_TESTS=$all -DDASKCAPS_BUILD_BENCH=$all -DDASKCAPS_BUILD_LAYER_CHECKS=$all)
[ -n "${WERROR:-}" ] && options+=(-DDASKCAPS_WERROR="$WERROR")
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B "$build_dir" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DDASKCAPS_SANITIZE="${SANITIZE:-OFF}" "${options[@]}" >/dev/null
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" "${targets[@]}"
