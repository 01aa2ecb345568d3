#!/usr/bin/env bash
# One command on a fresh Debian 12 machine (as root): install what is
# missing, build, and run the main job on the bundled examples — probe this
# host, inspect the example captures written by the real Dask, check two
# example hosts against each other, and transcode a GPU result for a laptop.
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
run check examples/gpu-worker.probe.json examples/laptop.probe.json
out=$(mktemp -d)
run transcode examples/gpu-result.stream -o "$out/laptop.stream" --for examples/laptop.probe.json
run inspect "$out/laptop.stream"
rm -rf "$out"
