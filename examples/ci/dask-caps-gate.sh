#!/usr/bin/env bash
# A ready CI job on dask-caps: probe each image of a cluster, check them
# against each other (and against live endpoints) with a policy and a
# baseline, fail on new findings, and leave a SARIF log for code scanning.
#
#   examples/ci/dask-caps-gate.sh [TARGET...]
#
# TARGET is a container image (image:NAME), a probe file, or a live Dask
# endpoint (tcp://host:port, tls://host:port). Images are probed by running
# their own python3 through the container engine, so the probe file says what
# a Dask process in that image sends and has (Python, dask, distributed,
# codecs, packages); the codecs and GPU in it are those of the host running
# the job.
#
# Settings (environment):
#   DASK_CAPS         the dask-caps binary              (dask-caps)
#   IMAGES            images to probe, space-separated, as image: targets
#   CONTAINER         the container engine              (docker; podman works)
#   POLICY            policy file or profile            (policy.json beside this script)
#   BASELINE          the accepted report               (dask-caps-baseline.json)
#   FAIL_ON           info, warning or error            (warning)
#   OUT_DIR           where the outputs go              (dask-caps-out)
#   UPDATE_BASELINE=1 make this run's report the baseline (after review!)
#
# Outputs in OUT_DIR: probes/*.json (one per image), check.json (the report,
# schema dask-caps.check/1; the next baseline once accepted) and
# dask-caps.sarif (SARIF 2.1.0, its results pointing at the policy file).
#
# Exit status: 0 nothing new at FAIL_ON or above; 1 new findings (listed);
# 2, 3, 4 the gate could not run (usage, bad input, network): see
# dask-caps(1). Without a baseline file every finding counts as new: run
# once with UPDATE_BASELINE=1 to accept what the cluster has today.
#
# Try it on your machine with two dask-caps serve endpoints (docs/cli.md §3.4).
set -uo pipefail

# Paths stay as given (relative to the repository root when run from there):
# SARIF results name the policy file, and code scanning wants it relative.
here=$(dirname "$0")
bin=${DASK_CAPS:-dask-caps}
container=${CONTAINER:-docker}
policy=${POLICY:-$here/policy.json}
baseline=${BASELINE:-dask-caps-baseline.json}
fail_on=${FAIL_ON:-warning}
out=${OUT_DIR:-dask-caps-out}

targets=()
for image in ${IMAGES:-}; do targets+=("image:$image"); done
targets+=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  echo "dask-caps gate: nothing to check: name images (IMAGES or image:NAME), probe files or endpoints" >&2
  exit 2
fi
mkdir -p "$out/probes" || exit 3

# 1. Probe each image.
endpoints=()
for t in "${targets[@]}"; do
  case $t in
    image:*)
      image=${t#image:}
      file="$out/probes/$(printf '%s' "$image" | tr -c 'A-Za-z0-9._-' '_').json"
      wrapper="$out/probes/.python-in-image"
      printf '#!/usr/bin/env bash\nexec %q run --rm %q python3 "$@"\n' "$container" "$image" >"$wrapper"
      chmod +x "$wrapper"
      echo "dask-caps gate: probing $image"
      "$bin" probe --json --python "$wrapper" -o "$file" >/dev/null || {
        rc=$?
        echo "dask-caps gate: could not probe $image (exit $rc)" >&2
        exit $rc
      }
      endpoints+=("$file")
      ;;
    *) endpoints+=("$t") ;;
  esac
done

# 2. Check them against each other: text on the log, the report and the
# SARIF log in files, one run.
args=(check --policy "$policy" --fail-on "$fail_on" -o "$out/check.json" --sarif-output "$out/dask-caps.sarif")
if [ -f "$baseline" ]; then
  args+=(--baseline "$baseline")
else
  echo "dask-caps gate: no baseline $baseline yet: every finding counts as new"
fi
# SARIF results point at the policy file, else the baseline; SARIF_LOCATION
# names another file of the repository.
[ -n "${SARIF_LOCATION:-}" ] && args+=(--sarif-location "$SARIF_LOCATION")
"$bin" "${args[@]}" "${endpoints[@]}"
rc=$?

# 3. Say what decided.
case $rc in
  0) echo "dask-caps gate: ok: nothing new at $fail_on or above" ;;
  1) echo "dask-caps gate: FAILED: new findings at $fail_on or above (marked [new] above)"
     echo "dask-caps gate: fix them, or accept them: UPDATE_BASELINE=1 $0 $*" ;;
  *) echo "dask-caps gate: could not run (exit $rc)" ;;
esac
if [ "${UPDATE_BASELINE:-0}" = 1 ] && [ $rc -le 1 ]; then
  cp "$out/check.json" "$baseline" && echo "dask-caps gate: $baseline now accepts this report"
  rc=0
fi
exit $rc
