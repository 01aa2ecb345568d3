"""The loading side of nested_objects.py: a process of the Dask version
without cupy on its path, served as an oracle script (test support for
test_nested.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import daskoracle  # noqa: E402
import nested_objects  # noqa: E402

if __name__ == "__main__":
    daskoracle.serve({"check": nested_objects.check})
