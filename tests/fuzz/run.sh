#!/usr/bin/env bash
# Runs the libFuzzer targets of a fuzz build for a fixed time each.
#
#   tests/fuzz/run.sh BUILD_FUZZ_DIR SECONDS [TARGET...]
#
# BUILD_FUZZ_DIR is a build configured with clang and -DDASKCAPS_FUZZ=ON
# (see tests/fuzz/CMakeLists.txt) whose `fuzz` target has been built.
# TARGETs are names such as `pickle` or `fuzz_pickle`; default: all of them.
#
# Each target runs for SECONDS (-max_total_time) with -rss_limit_mb=2048
# and -timeout=10, two at a time, on a fresh copy of its seed corpus
# (BUILD_FUZZ_DIR/fuzz-corpus/<name>, made by make_corpus.py when missing);
# the copy grows with what the run finds interesting and is kept in
# BUILD_FUZZ_DIR/fuzz-work/<name>. Crashes, timeouts, leaks and
# out-of-memory inputs go to $FUZZ_OUT/<name>/ (default ./fuzz-out), with
# the run's log as $FUZZ_OUT/<name>/fuzz.log. A finding is reproduced with
#   BUILD_FUZZ_DIR/fuzz/fuzz_<name> $FUZZ_OUT/<name>/crash-...
# and belongs, once fixed, in tests/fuzz/regressions/<name>/.
#
# Exit status: 0 when no target found anything, 1 when one did, 2 on usage.
# Environment: FUZZ_OUT, FUZZ_JOBS (parallel runs, default 2),
# DASK_CAPS (a dask-caps binary, for the probe-file seeds), FUZZ_ARGS
# (extra libFuzzer flags).
set -uo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_FUZZ_DIR SECONDS [TARGET...]" >&2
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
seconds=$2
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${FUZZ_OUT:-$PWD/fuzz-out}
jobs=${FUZZ_JOBS:-2}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [[ ! "$seconds" =~ ^[0-9]+$ ]]; then
  echo "$0: SECONDS must be a whole number, not '$seconds'" >&2
  exit 2
fi

targets=()
if [[ $# -eq 0 ]]; then
  for src in "$here"/fuzz_*.cpp; do
    n=$(basename "$src" .cpp)
    targets+=("${n#fuzz_}")
  done
else
  for t in "$@"; do targets+=("${t#fuzz_}"); done
fi
for t in "${targets[@]}"; do
  if [[ ! -x "$build/fuzz/fuzz_$t" ]]; then
    echo "$0: $build/fuzz/fuzz_$t is missing: build it with cmake --build $build --target fuzz" >&2
    exit 2
  fi
done

# Seed corpora, once per build directory.
corpus="$build/fuzz-corpus"
if [[ ! -d "$corpus" ]]; then
  caps=${DASK_CAPS:-}
  for c in "$build/dask-caps" "$root/build/dask-caps"; do
    [[ -z "$caps" && -x "$c" ]] && caps=$c
  done
  echo "making the seed corpora in $corpus"
  rm -rf "$corpus.tmp"
  if ! /usr/bin/python3 "$here/make_corpus.py" "$corpus.tmp" ${caps:+--dask-caps "$caps"}; then
    echo "$0: make_corpus.py failed" >&2
    exit 2
  fi
  mv "$corpus.tmp" "$corpus"
fi

run_one() {
  local t=$1
  local work="$build/fuzz-work/$t" dest="$out/$t"
  rm -rf "$work" "$dest"
  mkdir -p "$work/corpus" "$dest"
  cp -r "$corpus/$t/." "$work/corpus/" 2>/dev/null
  # Regressions join the run as read-only seeds (they must not crash either).
  local extra=()
  [[ -d "$here/regressions/$t" ]] && extra+=("$here/regressions/$t")
  # shellcheck disable=SC2086
  "$build/fuzz/fuzz_$t" "$work/corpus" "${extra[@]}" \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$dest/" -print_final_stats=1 ${FUZZ_ARGS:-} \
    >"$dest/fuzz.log" 2>&1
  echo $? >"$dest/status"
}

for t in "${targets[@]}"; do
  while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n; done
  echo "fuzzing $t for ${seconds}s"
  run_one "$t" &
done
wait

found=0
printf '\n%-11s %10s %8s %8s %8s %10s  %s\n' target executions exec/s cov ft corpus result
for t in "${targets[@]}"; do
  dest="$out/$t"
  log="$dest/fuzz.log"
  status=$(cat "$dest/status" 2>/dev/null || echo 99)
  # The last status line: "#123 DONE cov: 1 ft: 2 corp: 3/4Kb lim: ... exec/s: 5 rss: ..."
  line=$(grep -E '^#[0-9]+[[:space:]]+(DONE|INITED|NEW|REDUCE|pulse)' "$log" | tail -1)
  execs=$(grep -oE 'stat::number_of_executed_units:[[:space:]]+[0-9]+' "$log" | awk '{print $2}')
  [[ -z "$execs" ]] && execs=$(sed -E 's/^#([0-9]+).*/\1/' <<<"$line")
  rate=$(grep -oE 'stat::average_exec_per_sec:[[:space:]]+[0-9]+' "$log" | awk '{print $2}')
  cov=$(grep -oE 'cov: [0-9]+' <<<"$line" | awk '{print $2}')
  ft=$(grep -oE 'ft: [0-9]+' <<<"$line" | awk '{print $2}')
  corp=$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' <<<"$line" | awk '{print $2}')
  artifacts=$(find "$dest" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | sort)
  result=ok
  if [[ "$status" != 0 || -n "$artifacts" ]]; then
    result="FINDING (exit $status)"
    found=1
  fi
  printf '%-11s %10s %8s %8s %8s %10s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" \
    "${corp:-?}" "$result"
  if [[ $result != ok ]]; then
    grep -E 'ERROR:|SUMMARY:|fuzz property violated|runtime error' "$log" | head -5 | sed 's/^/    /'
    for a in $artifacts; do echo "    reproduce: $build/fuzz/fuzz_$t $a"; done
    echo "    log: $log"
  fi
done
exit $found
