#!/usr/bin/python3
"""Which real Dasks the end-to-end tests run against (daskversions.py).

Each version's interpreter must start its oracle and report the release it
stands for: Debian's 2022.12.1 under /usr/bin/python3, and 2026.7.1 through
../shared/dask-2026.7.1/python3 (or whatever DASK_CAPS_DASK_NEWEST names, a
release of 2023.5 or later). When the newest is missing (a fresh clone
without ../shared), this test says so in one line and exits 77, which CTest
reports as skipped: the newest cases of every other e2e test are skipped
then, and this line is where that shows without -V.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daskversions  # noqa: E402


def main():
    failures = []
    for v in daskversions.VERSIONS:
        if not v.available:
            continue
        info = v.info()
        print(f"Dask {info['distributed']} (dask {info['dask']}, Python {'.'.join(map(str, info['python']))}, "
              f"codecs {' '.join(info['codecs'])}) through {v.python}")
        if v.release and not info["distributed"].startswith(v.release):
            failures.append(f"{v.python} has distributed {info['distributed']}, not {v.release}")
        if v is daskversions.NEWEST and not v.newest_rules:
            failures.append(f"{v.python} has distributed {info['distributed']}: the newest must be 2023.5 or later")
    for f in failures:
        print("FAIL: " + f)
    if failures:
        sys.exit(1)
    if not daskversions.NEWEST.available:
        daskversions.notice()
        sys.exit(77)


if __name__ == "__main__":
    main()
