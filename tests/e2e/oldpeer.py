"""A Dask peer that lacks what the cluster sends, played in this process
(test support for the clients bridge_client.py and error_client.py and the
worker plugin_nolz4_worker.py):

    hide_codecs()    python-lz4, zstandard and python-snappy look missing;
                     call it before distributed is imported, so that Dask's
                     compressions table has zlib alone
    read_pickle4()   as Python 3.7: Dask advertises pickle protocol 4, and
                     loading a protocol-5 pickle fails with "unsupported
                     pickle protocol: 5"; call it after distributed is
                     imported (distributed takes the protocol from pickle
                     at import, so it is set on its modules; set on pickle
                     before, it would send cloudpickle down its pre-3.8 path)
"""
import pickle
import sys

HIDDEN_CODECS = ("lz4", "lz4.block", "lz4.frame", "zstandard", "snappy")


def hide_codecs():
    for name in HIDDEN_CODECS:
        sys.modules[name] = None


def read_pickle4():
    import distributed.comm.core
    import distributed.protocol.pickle

    distributed.comm.core.HIGHEST_PROTOCOL = 4
    distributed.protocol.pickle.HIGHEST_PROTOCOL = 4
    _loads = pickle.loads

    def loads(data, *args, **kwargs):
        if bytes(memoryview(data)[:2]) == b"\x80\x05":
            raise ValueError("unsupported pickle protocol: 5")
        return _loads(data, *args, **kwargs)

    pickle.loads = loads
