#!/usr/bin/env bash
# Instructions per decode+encode, the own msgpack layer against msgpack-cxx,
# counted by callgrind over the measured loop alone (run_ours / run_theirs in
# bench/msgpack_bench.cpp). Counts do not depend on how busy the machine is.
#   bench/msgpack_callgrind.sh [build/bench/msgpack_bench] [iterations]
set -euo pipefail
bench=${1:-build/bench/msgpack_bench}
n=${2:-20}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Total Ir that callgrind collected (only inside the toggled function).
count() {
  valgrind --tool=callgrind --callgrind-out-file="$out/cg" --toggle-collect="*run_$1*" \
    "$bench" "$n" "$1" "$2" >/dev/null 2>"$out/log"
  sed -n 's/^summary: //p' "$out/cg"
}
printf '%-26s %14s %14s %7s\n' input dask-caps msgpack-cxx ratio
for input in "numpy sub-header" "task-finished" "compute-task" "frame 0"; do
  # The bench runs small inputs (< 1000 B) 100 times as often.
  reps=$n
  case "$input" in "frame 0") ;; *) reps=$((n * 100)) ;; esac
  ours=$(count ours "$input")
  theirs=$(count theirs "$input")
  printf '%-26s %14d %14d %7.2f\n' "$input" $((ours / reps)) $((theirs / reps)) \
    "$(echo "$theirs / $ours" | bc -l)"
done
echo "(instructions per decode+encode; ratio = msgpack-cxx / dask-caps, above 1 means the own layer is faster)"
