"""A stand-in for CuPy on a worker without a GPU (test support).

`cupy.asarray(x)` gives an object that Dask serializes exactly as it does a
CuPy array with its "dask" family (distributed/protocol/cupy.py): the
array's __cuda_array_interface__ as the sub-header and one host frame with
its bytes, under
"type": "cupy.ndarray" and a type-serialized pickle of class cupy.ndarray.
A CPU-only client, which has no cupy, fails to load it with "No module
named 'cupy'", as it would with a real GPU result. Only the worker gets
this folder on its PYTHONPATH.
"""
import numpy as np
from distributed.protocol.serialize import dask_deserialize, dask_serialize


class ndarray:
    def __init__(self, array):
        self._array = np.ascontiguousarray(array)

    @property
    def nbytes(self):
        return self._array.nbytes

    def get(self):
        return self._array


def asarray(x):
    return ndarray(np.asarray(x))


@dask_serialize.register(ndarray)
def _serialize(x):
    a = x._array
    cai = {"shape": list(a.shape), "typestr": a.dtype.str, "descr": [["", a.dtype.str]], "stream": 1,
           "version": 3, "strides": list(a.strides), "data": [140000000000000, False]}
    return cai, [a.tobytes()]


@dask_deserialize.register(ndarray)
def _deserialize(header, frames):
    cai = header
    return ndarray(np.frombuffer(frames[0], dtype=cai["typestr"]).reshape(cai["shape"]))
