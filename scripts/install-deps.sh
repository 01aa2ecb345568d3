#!/usr/bin/env bash
# Installs what dask-caps needs on Debian 12, from Debian's packages only.
# Runs as root (or through sudo); installs only what is missing.
set -euo pipefail

packages=(
  # build
  build-essential cmake ninja-build pkg-config git
  # libraries
  libcli11-dev nlohmann-json3-dev liblz4-dev libzstd-dev libsnappy-dev zlib1g-dev
  doctest-dev libmsgpack-cxx-dev libssl-dev
  # the Python module dask_caps: Debian's pybind11 and the headers of its
  # python3; pip, setuptools and venv install it from ./python, offline
  pybind11-dev python3-pybind11 python3-dev python3-pip python3-setuptools python3-wheel python3-venv
  # the reference implementations the end-to-end tests run against: Debian's
  # Dask 2022.12.1, and what Dask 2026.7.1 (../shared) needs on Python 3.11
  python3-distributed python3-lz4 python3-zstandard python3-snappy python3-numpy python3-pandas
  python3-importlib-metadata
  # tests: the plugin's Prometheus metrics at Dask's /metrics
  python3-prometheus-client
  # tests: certificates, captures, fuzzing
  openssl tcpdump clang libclang-rt-14-dev
  # tests: peak RSS of a child (GNU time)
  time
  # tests: JSON Schemas of the outputs, the CI example's workflow, the man page
  python3-jsonschema python3-yaml groff-base
  # tests: the Wireshark dissector (tshark), the zsh and fish completions
  tshark zsh fish
)
# The SARIF test fetches the official schema with npm (a Node.js that brings
# its own npm is fine too).
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: everything is installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# wireshark-common asks whether non-root users may capture: they may not.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
