"""Dask's own context-specific serialization pattern (distributed's
protocol/tests/test_serialize.py, test_context_specific_serialization_class),
as a module a worker preloads and a client imports (test support for
test_plugin_context.py): a serializer for MyObject that msgpacks the
context Dask hands it, and a deserializer that keeps it on the object."""
import msgpack
from distributed.protocol import register_serialization


class MyObject:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def my_dumps(obj, context=None):
    header = {"serializer": "dask"}
    frames = [msgpack.dumps(obj.__dict__, use_bin_type=True),
              msgpack.dumps(context, use_bin_type=True)]
    return header, frames


def my_loads(header, frames):
    obj = MyObject(**msgpack.loads(frames[0], raw=False))
    obj.context = msgpack.loads(frames[1], raw=False)
    return obj


register_serialization(MyObject, my_dumps, my_loads)


def dask_setup(worker):
    """The preload hook: importing the module registered the serializer."""
