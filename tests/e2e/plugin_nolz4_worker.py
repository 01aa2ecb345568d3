"""`python -m plugin_nolz4_worker ARGS`: `dask worker ARGS` in a Python that
lacks python-lz4, zstandard and python-snappy (test support for
test_plugin_mixed.py; this folder on PYTHONPATH). The modules are hidden
before distributed is imported, as bridge_client.py's nolz4 client hides
them, so Dask's compressions table has zlib alone."""
import runpy
import sys

for name in ("lz4", "lz4.block", "lz4.frame", "zstandard", "snappy"):
    sys.modules[name] = None

runpy.run_module("distributed.cli.dask_worker", run_name="__main__", alter_sys=True)
