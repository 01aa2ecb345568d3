#!/usr/bin/env bash
# One command on a fresh Debian 12 machine (as root): install what is
# missing, build, and run the main job on the bundled examples — probe this
# host, inspect the example captures written by the real Dask, check this
# host against a `dask-caps serve` endpoint on loopback that plays an older
# peer (zstd, pickle protocol 4, Python 3.7), check two example hosts against
# each other, and transcode a GPU result for a laptop.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
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
