"""dask_caps: the dask-caps core for Python.

The same rules and the same bytes as the ``dask-caps`` command, one core
function per operation (python/README.md has the details):

    probe(python=None, *, timeout=60.0) -> dict
        What ``dask-caps probe --json`` prints. python=None probes the
        running interpreter (sys.executable; "python" is None and
        "python-error" says why when it lacks distributed), a path or name
        probes that one (and raises Error when it cannot), False none.

    negotiate(local, remote, *, same_host=None, local_name="local",
              remote_name="remote", local_role=None, remote_role=None,
              local_capabilities=None, remote_capabilities=None,
              python_rule="same-minor") -> dict
        What ``dask-caps check`` says of the pair: its "a", "b", "dask",
        "recommended" and "findings", then "local-to-remote" and
        "remote-to-local" ({"compression", "pickle-protocol", "layout"}).
        local and remote are probe documents (dicts as probe files hold
        them) or handshake dicts ({"compression", "python",
        "pickle-protocol"}, optionally "capabilities").

    compress(codec, data, *, level=None, threads=0) -> bytes
    decompress(codec, data, max_output=2**31) -> bytes
        One frame in the format of Dask's compressions[codec] ("lz4",
        "zstd", "snappy", "zlib"; None for raw), from any bytes-like object.

    recode(frames, *, codec=None, pickle_protocol=None, layout=None,
           accept_codecs=None, inline_buffers=False,
           keep_unconvertible=False, zstd_level=3, zstd_threads=0,
           dask_release="2022.12",
           shard_bytes=64 MiB, limits=None) -> list
        One Dask message (the frames of distributed.protocol.dumps)
        recoded as ``dask-caps transcode`` recodes it. Frames that pass
        through are the objects given (or memoryviews on them).

    deliver(receiver, *, writes=None, codec=None, pickle_protocol=None,
            layout=None, keep_layout_for_schedulers=False) -> dict
        What a receiver gets: the core's one policy (docs/design.md §3), as
        `check`, `transcode --for` and the bridge decide it. receiver is a
        dict of published capabilities ({"codecs", "max-pickle-protocol",
        "gpu", "role"}); writes the sender's codecs in its order (None:
        dask-caps itself, which writes any codec and takes the receiver's
        order). Returns {"codec", "accept", "pickle-protocol", "layout",
        "recode"}, "recode" being the arguments of recode() for the
        receiver, or None when nothing changes.

    read_capabilities(value, *, limits=None) -> tuple
        A peer's "capabilities" value read by the core's one reader (the
        one of `check`, `serve` and the bridge), in place: a count or
        length past the limits is refused before anything of the value is
        read. (capabilities, None) with {"codecs", "max-pickle-protocol",
        "gpu", "dask-caps", "role"}, or (None, refusal) with {"problem",
        "member", "index", "count", "limit", "value" (the offending value,
        not a copy), "text" (the core's line)}.

    read_peer(handshake, *, limits=None) -> tuple
        The peer of a handshake dict Dask accepted: its published key, else
        a plain Dask peer (the codec it advertises, when within the key's
        name bound, and its pickle protocol). (peer, refusal or None), peer
        being {"codecs", "max-pickle-protocol", "gpu", "dask-caps", "role",
        "published"}.

    capabilities(codecs, *, max_pickle_protocol=5, gpu=False, role=None) -> dict
        The "capabilities" value this process publishes, written by the
        core (with this version as "dask-caps").

    LIMITS       the core's default limits, by name (limits= of the above)

    dask_release(distributed_version) -> str
        "2022.12" or "newest": the behaviour of that release, as
        recode(dask_release=...) takes it.

    inspect(frames, *, dis=False, limits=None) -> dict
        What ``dask-caps inspect --json`` says of that message.

    CODECS       the codecs of the core, ("lz4", "snappy", "zstd", "zlib")
    Error        the core's errors: str(e) the one-line message, e.kind
                 the kind ("codec_failed", "truncated", ...), e.offset
    __version__  the version of dask-caps

The GIL is released while the core works; nothing executes a pickle.
"""
from ._core import (  # noqa: F401
    CODECS,
    LIMITS,
    Error,
    __version__,
    capabilities,
    compress,
    decompress,
    deliver,
    dask_release,
    inspect,
    negotiate,
    probe,
    read_capabilities,
    read_peer,
    recode,
)

__all__ = ["CODECS", "Error", "LIMITS", "__version__", "capabilities", "compress", "dask_release", "decompress",
           "deliver", "inspect", "negotiate", "probe", "read_capabilities", "read_peer", "recode"]
