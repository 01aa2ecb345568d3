#!/usr/bin/env bash
# One command on a fresh Debian 12 machine (as root): install what is
# missing, build, and run the main job on the bundled examples — probe this
# host, inspect the example captures written by the real Dask, check this
# host against a `dask-caps serve` endpoint on loopback that plays an older
# peer (zstd, pickle protocol 4, Python 3.7), check two example hosts against
# each other, and transcode a GPU result for a laptop. Then the bridge: a real
# Dask scheduler and worker with lz4 on loopback addresses that Dask treats
# as other hosts, a client without lz4 that fails against them directly with
# the real KeyError: 'lz4', and the same client getting its result through
# `dask-caps bridge`. Everything started here is stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
LEAN=1 bash scripts/build.sh  # only what runs here: no tests, benchmarks or layer checks
bin=build/dask-caps
run() {
  echo
  echo "== dask-caps $*"
  "$bin" "$@" || echo "(exit $?)"
}
run probe
for f in examples/*.stream; do
  run inspect "$f"
done

# A live peer with other capabilities: `check` does the real handshake.
serve_out=$(mktemp)
"$bin" serve --compression zstd --codecs zstd,zlib --pickle-protocol 4 --python 3.7.9 \
  --dask-version 2022.12.1 >"$serve_out" 2>&1 &
serve_pid=$!
trap 'kill "$serve_pid" 2>/dev/null || true; rm -f "$serve_out"' EXIT
address=""
for _ in $(seq 100); do
  address=$(sed -n 's/^listening on //p' "$serve_out" | head -1)
  [ -n "$address" ] && break
  sleep 0.05
done
if [ -n "$address" ]; then
  run check "$address"
else
  echo "dask-caps serve did not start:" >&2
  cat "$serve_out" >&2
fi
kill "$serve_pid" 2>/dev/null || true
wait "$serve_pid" 2>/dev/null || true

run check examples/gpu-worker.probe.json examples/laptop.probe.json
out=$(mktemp -d)
run transcode examples/gpu-result.stream -o "$out/laptop.stream" --for examples/laptop.probe.json
run inspect "$out/laptop.stream"
rm -rf "$out"

# ---- bridge: a client without lz4 and a cluster that uses it ----------------
py=/usr/bin/python3  # Debian's python3-distributed 2022.12.1
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
wait_for_line() {  # FILE PATTERN: prints the first match, waits up to 30 s
  for _ in $(seq 300); do
    line=$(grep -m1 -o "$2" "$1" 2>/dev/null || true)
    [ -n "$line" ] && { echo "$line"; return 0; }
    sleep 0.1
  done
  return 1
}
echo
echo "== a Dask scheduler (127.0.0.2) and worker (127.0.0.3), both with lz4"
DASK_DISTRIBUTED__COMM__COMPRESSION=lz4 setsid "$py" -m distributed.cli.dask_scheduler --host 127.0.0.2 --port 0 \
  --no-dashboard >"$work/scheduler.log" 2>&1 &
pids+=($!)
scheduler=$(wait_for_line "$work/scheduler.log" 'tcp://127\.0\.0\.2:[0-9]*') || { cat "$work/scheduler.log"; exit 1; }
DASK_DISTRIBUTED__COMM__COMPRESSION=lz4 setsid "$py" -m distributed.cli.dask_worker "$scheduler" --host 127.0.0.3 \
  --nthreads 1 --no-nanny --no-dashboard >"$work/worker.log" 2>&1 &
pids+=($!)
wait_for_line "$work/worker.log" 'Registered to' >/dev/null || { cat "$work/worker.log"; exit 1; }
echo "scheduler at $scheduler"
echo
echo "== a client without lz4 (lz4, zstandard and snappy hidden), directly:"
"$py" tests/e2e/bridge_client.py nolz4 "$scheduler" 300000 2>/dev/null || true
"$bin" bridge --listen tcp://127.0.0.1:0 --upstream "$scheduler" >"$work/bridge.log" 2>&1 &
pids+=($!)
bridge=$(wait_for_line "$work/bridge.log" 'tcp://127\.0\.0\.1:[0-9]*') || { cat "$work/bridge.log"; exit 1; }
echo
echo "== the same client through dask-caps bridge --upstream $scheduler (at $bridge):"
"$py" tests/e2e/bridge_client.py nolz4 "$bridge" 300000 2>/dev/null || true
kill -TERM "${pids[2]}"; wait "${pids[2]}" 2>/dev/null || true
echo
echo "== what the bridge said:"
cat "$work/bridge.log"
