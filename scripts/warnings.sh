#!/usr/bin/env bash
# Builds everything (library, binary, module, tests, benchmarks, layer
# checks) with each compiler and build type the project promises zero
# warnings for: GCC and clang, each in Debug, RelWithDebInfo and Release
# (-O3), with -Wall -Wextra -Wpedantic, and prints how many warnings each
# build printed. CI (scripts/test.sh) builds three of the six with -Werror
# (GCC RelWithDebInfo, GCC Release, clang Debug under the sanitizers); this
# is the whole grid, about 45 minutes on 2 cores from nothing (ccache, when
# installed, makes a second run quick). Exits 1 when any build warned or
# failed; each build's log is build-warnings/COMPILER-TYPE.log.
#   COMPILERS="gcc clang"  TYPES="Debug RelWithDebInfo Release"  JOBS
set -uo pipefail
cd "$(dirname "$0")/.."
root=build-warnings
mkdir -p "$root"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
status=0
for compiler in ${COMPILERS:-gcc clang}; do
  case $compiler in
    gcc) cc=gcc cxx=g++ ;;
    clang) cc=clang cxx=clang++ ;;
    *) echo "warnings: unknown compiler $compiler" >&2; exit 2 ;;
  esac
  for type in ${TYPES:-Debug RelWithDebInfo Release}; do
    dir=$root/$compiler-$type
    log=$root/$compiler-$type.log
    start=$SECONDS
    if CC=$cc CXX=$cxx cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" -DDASKCAPS_WERROR=OFF \
         "${launcher[@]}" >"$log" 2>&1 &&
       cmake --build "$dir" --clean-first -j "${JOBS:-$(nproc)}" >>"$log" 2>&1; then
      built=built
    else
      built=FAILED
      status=1
    fi
    # A cached object's warnings are replayed by ccache, so a rebuild counts them too.
    n=$(grep -c 'warning:' "$log" || true)
    [ "$n" = 0 ] || status=1
    printf '%-6s %-15s %-6s %3s warnings  %4d s  %s\n' "$compiler" "$type" "$built" "$n" $((SECONDS - start)) "$log"
  done
done
exit $status
