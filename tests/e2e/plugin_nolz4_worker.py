"""`python -m plugin_nolz4_worker ARGS`: `dask worker ARGS` in a Python that
lacks python-lz4, zstandard and python-snappy (test support for
test_plugin_mixed.py; this folder on PYTHONPATH). The modules are hidden
before distributed is imported, as oldpeer.hide_codecs() hides them for
bridge_client.py's nolz4 client, so Dask's compressions table has zlib alone."""
import runpy

import oldpeer

oldpeer.hide_codecs()

runpy.run_module("distributed.cli.dask_worker", run_name="__main__", alter_sys=True)
