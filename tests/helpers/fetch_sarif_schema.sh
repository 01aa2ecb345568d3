#!/usr/bin/env bash
# Test setup: fetches the official SARIF 2.1.0 JSON Schema, sarif-2.1.0.json,
# which ships inside the npm package @microsoft/sarif-multitool-linux, into
# BUILD_DIR/sarif/ (kept there for later runs). dask-caps itself never
# fetches anything; the SARIF test validates against this file.
#   tests/helpers/fetch_sarif_schema.sh BUILD_DIR
# Exit 77 (ctest: skipped) with a notice when npm is not installed.
set -euo pipefail
package=@microsoft/sarif-multitool-linux
version=5.7.0
dest=$1/sarif
schema=$dest/sarif-2.1.0.json
if [ -s "$schema" ]; then
  echo "sarif-2.1.0.json: cached in $dest"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "SKIP: npm is not installed (scripts/install-deps.sh installs Debian's): the SARIF output is not validated against the official schema"
  exit 77
fi
mkdir -p "$dest"
work=$(mktemp -d "$dest/fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent --cache "$work/npm-cache" "$package@$version" >/dev/null)
tar -xzf "$work"/microsoft-sarif-multitool-linux-"$version".tgz -C "$work" package/sarif-2.1.0.json
mv "$work/package/sarif-2.1.0.json" "$schema.tmp"
mv "$schema.tmp" "$schema"
echo "sarif-2.1.0.json: fetched from $package@$version into $dest"
