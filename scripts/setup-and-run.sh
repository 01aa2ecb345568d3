#!/usr/bin/env bash
# One command on a fresh Debian 12 machine (as root): install what is
# missing, build, and run the main job on the bundled examples — probe this
# host, then inspect the example captures written by the real Dask.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bin=build/dask-caps
echo
echo "== dask-caps probe"
"$bin" probe
for f in examples/*.stream; do
  echo
  echo "== dask-caps inspect $f"
  "$bin" inspect "$f"
done
