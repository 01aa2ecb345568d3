#!/usr/bin/env bash
# Golden CLI runs on the bundled examples (docs/design.md §9.5): each case runs the
# built binary, checks its exit code and compares its JSON with
# examples/golden/NAME.json. Every file in examples/ is exercised here.
#   bash examples/examples.golden.sh BUILD/dask-caps           check
#   bash examples/examples.golden.sh BUILD/dask-caps --update  rewrite the golden files
set -u
bin=$(realpath "$1")
update=${2:-}
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# case NAME EXPECTED_EXIT dask-caps-args...
case_() {
  local name=$1 want=$2
  shift 2
  local got rc
  "$bin" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  rc=$?
  got=$(sed "s|$tmp|TMP|g" "$tmp/stdout")
  if [ "$rc" != "$want" ]; then
    echo "FAIL $name: exit $rc, expected $want"; cat "$tmp/stderr"; failures=$((failures + 1)); return
  fi
  if [ "$update" = "--update" ]; then
    printf '%s\n' "$got" >"golden/$name.json"
  elif ! diff -u "golden/$name.json" <(printf '%s\n' "$got") >"$tmp/diff"; then
    echo "FAIL $name: output differs from golden/$name.json"; head -40 "$tmp/diff"; failures=$((failures + 1)); return
  fi
  echo "ok   $name"
}

for f in *.stream; do
  case_ "inspect-${f%.stream}" 0 inspect --json "$f"
done
case_ "check-gpu-worker-laptop" 1 check --json gpu-worker.probe.json laptop.probe.json
case_ "check-fail-on-error-only-info" 0 check --json --fail-on error --as gpu-worker.probe.json gpu-worker.probe.json

# Gates: policies (a profile, a file), baselines (nothing new; a new endpoint
# and its findings), SARIF.
case_ "check-gpu-worker-laptop-strict" 1 check --json --policy strict gpu-worker.probe.json laptop.probe.json
case_ "check-gpu-worker-laptop-ci-policy" 1 check --json --policy ci/policy.json gpu-worker.probe.json laptop.probe.json
case_ "check-baseline-unchanged" 0 check --json --fail-on info --baseline golden/check-gpu-worker-laptop.json \
  gpu-worker.probe.json laptop.probe.json
case_ "check-baseline-new" 1 check --json --fail-on warning --baseline golden/check-fail-on-error-only-info.json \
  gpu-worker.probe.json laptop.probe.json
case_ "check-gpu-worker-laptop-sarif" 0 check --format sarif --policy ci/policy.json \
  --baseline golden/check-gpu-worker-laptop.json gpu-worker.probe.json laptop.probe.json

# transcode for the laptop, then what the laptop receives.
case_ "transcode-gpu-result-for-laptop" 0 transcode --json gpu-result.stream -o "$tmp/laptop.stream" --for laptop.probe.json
case_ "inspect-gpu-result-for-laptop" 0 inspect --json "$tmp/laptop.stream"
case_ "transcode-pickle5-protocol4" 0 transcode --json pickle5.stream -o "$tmp/p4.stream" --pickle-protocol 4
case_ "inspect-pickle5-protocol4" 0 inspect --json "$tmp/p4.stream"

# The CI gate example: findings on the bundled pair (exit 1), none on one host.
if bash ci-gate.sh "$bin" >"$tmp/gate.out" 2>&1; then gate=0; else gate=$?; fi
if [ "$gate" = 1 ] && grep -q "pickle-protocol-downgrade" "$tmp/gate.out"; then echo "ok   ci-gate findings"
else echo "FAIL ci-gate: exit $gate"; cat "$tmp/gate.out"; failures=$((failures + 1)); fi
if bash ci-gate.sh "$bin" --as gpu-worker.probe.json gpu-worker.probe.json >"$tmp/gate.out" 2>&1; then echo "ok   ci-gate clean"
else echo "FAIL ci-gate on one host"; cat "$tmp/gate.out"; failures=$((failures + 1)); fi

# Python regenerates the captures; it must still run.
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import distributed" 2>/dev/null; then
  if /usr/bin/python3 generate.py "$tmp" >"$tmp/gen.log" 2>&1; then
    echo "ok   generate.py"
  else
    echo "FAIL generate.py"; cat "$tmp/gen.log"; failures=$((failures + 1))
  fi
fi

[ "$failures" -eq 0 ] || { echo "$failures golden case(s) failed"; exit 1; }
