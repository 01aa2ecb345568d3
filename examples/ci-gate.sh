#!/usr/bin/env bash
# A CI gate on dask-caps check: fail the pipeline when the hosts a job will
# use cannot talk to each other the way Dask needs.
#
#   bash examples/ci-gate.sh [DASK-CAPS] [ENDPOINT...]
#
# Defaults to the bundled probe files. With live clusters, pass addresses:
#   bash examples/ci-gate.sh dask-caps tcp://scheduler:8786 --workers
# Exit 0: nothing at warning or above. Exit 1: findings (printed). 2/3/4:
# the gate itself could not run (usage, bad probe file, network).
set -u
bin=${1:-dask-caps}
shift || true
here=$(dirname "$0")
[ $# -gt 0 ] || set -- "$here/gpu-worker.probe.json" "$here/laptop.probe.json"

report=$(mktemp)
trap 'rm -f "$report"' EXIT
"$bin" check --json --fail-on warning "$@" >"$report"
rc=$?
case $rc in
  0) echo "dask-caps gate: ok" ;;
  1) echo "dask-caps gate: findings at warning or above:"
     /usr/bin/python3 - "$report" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for pair in doc.get("pairs", []):
    for f in pair.get("findings", []):
        if f["severity"] in ("warning", "error"):
            print(f"  {f['severity']:7} {f['code']:26} {pair['a']} <-> {pair['b']}")
            print(f"          hint: {f['hint']}")
PY
     ;;
  *) echo "dask-caps gate: could not run (exit $rc)" ;;
esac
exit $rc
