"""dask_caps.plugin: the capability exchange of dask/distributed#4011, inside Dask.

Load it with Dask's own preload mechanism on every process that should take
part (README.md, "Inside Dask", has the details):

    dask scheduler --preload dask_caps.plugin
    dask worker tcp://scheduler:8786 --preload dask_caps.plugin   # --preload-nanny for the nanny
    DASK_DISTRIBUTED__CLIENT__PRELOAD='["dask_caps.plugin"]' python my_client.py

or in a Dask config file (distributed.scheduler.preload, distributed.worker.preload,
distributed.nanny.preload, distributed.client.preload: ["dask_caps.plugin"]).

Importing it installs, once per process, four patches and the defaults of its
config keys, and nothing else:

  Comm.handshake_info           adds one key, "capabilities", to the handshake this
                                process sends (README.md, "Inside Dask", "The capabilities
                                key"); Dask without the plugin ignores it
  Comm.handshake_configuration  per connection, after Dask's own rule: the codec to
                                write with (the first codec of this side's list that
                                the peer decodes) and the plan for recoding what is
                                written to that peer, kept in comm.handshake_options
  distributed.protocol.dumps    (what comm.utils.to_frames calls, with the comm's
                                context) recodes the frames of each outgoing message
                                with the plan of its connection (dask_caps.recode)
  the compressions table        the core's lz4, zstd and snappy under Dask's names
                                where python-lz4, zstandard or python-snappy are missing

Each behaviour has a switch in Dask's config (DEFAULTS below; as environment
variables DASK_DASK_CAPS__RECODE=False and so on). Each connection logs one
debug line on the logger "distributed.dask_caps". Nothing here raises out of
Dask's comm code: where the plugin's own work fails, Dask's result is used
and one line is logged. Nothing here executes a pickle: recoding is done by
the core on the frames.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
import logging
import sys

import dask
import dask.config
import dask.utils
from distributed import protocol as _protocol
from distributed.comm import core as _comm_core
from distributed.protocol import compression as _compression

import dask_caps

logger = logging.getLogger("distributed.dask_caps")

#: The handshake key this plugin publishes (and dask-caps check and serve send).
CAPABILITIES_KEY = "capabilities"
#: The key of the per-connection plan in comm.handshake_options (and so in the
#: context Comm.write hands to dumps). Never sent.
PLAN_KEY = "dask-caps"

DEFAULTS = {
    "dask-caps": {
        # a. publish this process's capabilities in the handshake
        "publish": True,
        # b. write to each peer with the first codec of this side's list it decodes
        "choose-codec": True,
        # c. register the core's codecs where python-lz4, zstandard, python-snappy are missing
        "register-codecs": True,
        # d. recode outgoing messages the peer could not read (codec, pickle protocol)
        "recode": True,
        # e. CuPy layout -> NumPy for a peer that published "gpu": false
        "downgrade-gpu": True,
        # this side's codec preference after distributed.comm.compression's codec
        "codecs": ["lz4", "snappy", "zstd", "zlib"],
        # what to publish for "gpu": null detects (CuPy importable and a GPU found)
        "gpu": None,
    }
}

_NEWEST_TABLE = hasattr(_compression, "Compression")  # 2023.5 on: Compression(name, compress, decompress)
_SAME_HOST_RULE = hasattr(_comm_core.Comm, "same_host")  # 2023.5 on: None to a peer on the same host
# maybe_compress's ratio: 0.9 in 2022.12, 0.7 (min_ratio) later; recode follows the same rule.
_DASK_RELEASE = "newest" if "min_ratio" in inspect.signature(_compression.maybe_compress).parameters else "2022.12"
_CORE_CODECS = tuple(dask_caps.CODECS)
_PACKAGES = {"lz4": "python-lz4", "zstd": "zstandard", "snappy": "python-snappy", "zlib": "zlib"}

_installed = False
_originals: dict = {}
_registered: list[str] = []
_role: str | None = None
_gpu: bool | None = None


def _config(name: str):
    return dask.config.get("dask-caps." + name, default=DEFAULTS["dask-caps"][name])


# ---- codecs ---------------------------------------------------------------


def table_codecs() -> list[str]:
    """The codecs Dask's compressions table of this process holds (its
    aliases None, False and 2023.5's "auto" left out)."""
    out = []
    for key, entry in _compression.compressions.items():
        if not isinstance(key, str) or key == "auto":
            continue
        if getattr(entry, "name", key) == key:
            out.append(key)
    return out


def _core_compress(codec: str):
    if codec == "zstd":
        level = int(dask.config.get("distributed.comm.zstd.level", default=3))
        threads = int(dask.config.get("distributed.comm.zstd.threads", default=0))
        return functools.partial(dask_caps.compress, codec, level=level, threads=threads)
    return functools.partial(dask_caps.compress, codec)


def register_codecs() -> list[str]:
    """Puts the core's codecs into Dask's compressions table under Dask's
    names, for each one this Python lacks (both table layouts: 2022.12's
    {"compress", "decompress"} dicts and 2023.5's Compression tuples).
    Returns the names added."""
    added = []
    for codec in _CORE_CODECS:
        if codec in _compression.compressions:
            continue
        compress = _core_compress(codec)
        decompress = functools.partial(dask_caps.decompress, codec)
        if _NEWEST_TABLE:
            entry = _compression.Compression(codec, compress, decompress)
        else:
            entry = {"compress": compress, "decompress": decompress}
        _compression.compressions[codec] = entry
        added.append(codec)
    return added


def _dedupe(names):
    seen = []
    for n in names:
        if n not in seen:
            seen.append(n)
    return seen


def _preference_order(advertised) -> list[str]:
    """This side's codecs in the order it prefers to write them: the codec
    its handshake advertises first, then dask-caps.codecs."""
    order = _config("codecs") or []
    if isinstance(order, str):
        order = [order]
    first = [advertised] if isinstance(advertised, str) else []
    return _dedupe(first + [c for c in order if isinstance(c, str)])


def _same_host(local: dict, remote: dict) -> bool:
    """Dask's Comm.same_host from the two addresses (only where Dask has the rule)."""
    if not _SAME_HOST_RULE:
        return False
    from distributed.comm.addressing import get_address_host, resolve_address

    try:
        return get_address_host(resolve_address(local["address"])) == get_address_host(
            resolve_address(remote["address"]))
    except Exception:  # noqa: BLE001 - as Dask: an address it cannot read is not this host
        return False


def _write_list(local: dict, remote: dict) -> list[str]:
    """The codecs this side may write to this peer, in order. Empty where
    Dask's own setting says not to compress: distributed.comm.compression
    None or False, or the same-host rule (2023.5 on). With "auto" resolved
    to nothing because Python has no codec, the core's codecs take its place."""
    advertised = local.get("compression")
    if not isinstance(advertised, str):
        if dask.config.get("distributed.comm.compression", default=None) != "auto":
            return []
        if _same_host(local, remote):
            return []
    have = set(table_codecs())
    return [c for c in _preference_order(advertised) if c in have]


# ---- what this process publishes -----------------------------------------


def _detect_gpu() -> bool:
    setting = _config("gpu")
    if setting is not None:
        return bool(setting)
    try:
        if importlib.util.find_spec("cupy") is None:
            return False
    except (ImportError, ValueError):  # hidden (sys.modules["cupy"] = None) or broken
        return False
    try:
        return bool(dask_caps.probe(python=False)["gpu"]["available"])
    except Exception:  # noqa: BLE001 - no GPU that can be found is no GPU
        return False


def published(advertised=None) -> dict:
    """The value of the "capabilities" key this process sends, for a
    handshake advertising `advertised` as its compression."""
    global _gpu
    if _gpu is None:
        _gpu = _detect_gpu()
    decodes = table_codecs()
    preferred = [c for c in _preference_order(advertised) if c in decodes]
    doc = {
        "codecs": preferred + [c for c in decodes if c not in preferred],
        "max-pickle-protocol": int(_comm_core.HIGHEST_PROTOCOL),
        "gpu": _gpu,
        "dask-caps": dask_caps.__version__,
    }
    if _role:
        doc["role"] = _role
    return doc


# ---- what a peer published -----------------------------------------------


class Peer:
    """What this side knows of the peer of one connection."""

    __slots__ = ("codecs", "max_pickle_protocol", "gpu", "version", "role", "published")

    def __init__(self, codecs, max_pickle_protocol, gpu=None, version=None, role=None, published=False):
        self.codecs = tuple(codecs)
        self.max_pickle_protocol = max_pickle_protocol
        self.gpu = gpu
        self.version = version
        self.role = role
        self.published = published

    def describe(self) -> str:
        if not self.published:
            return "plain peer: codecs %s, pickle <= %s" % (",".join(self.codecs) or "none",
                                                            self.max_pickle_protocol)
        who = "dask-caps %s" % (self.version or "?")
        if self.role:
            who += " " + self.role
        return "%s: codecs %s, pickle <= %s, gpu %s" % (who, ",".join(self.codecs) or "none",
                                                        self.max_pickle_protocol,
                                                        "yes" if self.gpu else "no")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def read_capabilities(value):
    """The peer's "capabilities" value as a Peer, or (None, why) when it is
    malformed. msgpack hands lists over as tuples (use_list=False)."""
    if not isinstance(value, dict):
        return None, "not a map but %s" % type(value).__name__
    codecs = value.get("codecs")
    if not isinstance(codecs, (list, tuple)) or not all(isinstance(c, str) for c in codecs):
        return None, "\"codecs\" is not a list of names"
    pickle_max = value.get("max-pickle-protocol", 5)
    if not _is_int(pickle_max) or pickle_max < 0:
        return None, "\"max-pickle-protocol\" is not a non-negative integer"
    gpu = value.get("gpu", None)
    if gpu is not None and not isinstance(gpu, bool):
        return None, "\"gpu\" is not a boolean"
    version = value.get("dask-caps")
    role = value.get("role")
    if version is not None and not isinstance(version, str):
        return None, "\"dask-caps\" is not a string"
    if role is not None and not isinstance(role, str):
        return None, "\"role\" is not a string"
    return Peer(codecs, pickle_max, gpu, version, role, published=True), None


def _plain_peer(remote: dict) -> Peer:
    advertised = remote.get("compression")
    codecs = [advertised] if isinstance(advertised, str) else []
    protocol = remote.get("pickle-protocol")
    return Peer(codecs, protocol if _is_int(protocol) else 5)


# ---- the plan of one connection ------------------------------------------


class Plan:
    """How to recode what this side writes on one connection (None: keep)."""

    __slots__ = ("codec", "accept", "pickle_protocol", "layout", "peer_address", "shard_bytes")

    def __init__(self, codec, accept, pickle_protocol, layout, peer_address):
        self.codec = codec                      # None: keep every frame's codec; False: raw; a name
        self.accept = accept                    # codecs the peer reads as they are
        self.pickle_protocol = pickle_protocol  # None: keep
        self.layout = layout                    # None or "cpu"
        self.peer_address = peer_address
        # Dask's shard size, for a dumps called without frame_split_size
        self.shard_bytes = int(dask.utils.parse_bytes(dask.config.get("distributed.comm.shard", default="64MiB")))

    def describe(self) -> str:
        parts = []
        if self.codec is not None:
            parts.append("frames in %s -> %s" % (
                ",".join(c for c in _CORE_CODECS if c not in self.accept), self.codec or "raw"))
        if self.pickle_protocol is not None:
            parts.append("pickle -> %d" % self.pickle_protocol)
        if self.layout:
            parts.append("layout cpu")
        return "recode " + ", ".join(parts)

    def recode(self, frames, shard_bytes):
        try:
            out = dask_caps.recode(frames, codec=self.codec, pickle_protocol=self.pickle_protocol,
                                   layout=self.layout, accept_codecs=self.accept,
                                   keep_unconvertible=True, dask_release=_DASK_RELEASE,
                                   shard_bytes=shard_bytes)
        except dask_caps.Error as e:
            logger.warning("dask-caps: a message to %s passes unchanged: the core cannot recode it "
                           "(%s: %s)", self.peer_address, e.kind, e)
            return frames
        except Exception as e:  # noqa: BLE001 - never out of Dask's comm code
            logger.warning("dask-caps: a message to %s passes unchanged: %s: %s",
                           self.peer_address, type(e).__name__, e)
            return frames
        return out if isinstance(out, list) else list(out)


def make_plan(local: dict, remote: dict, dask_options: dict):
    """(codec to write with, Plan or None, Peer, problem) for one connection."""
    problem = None
    peer = None
    if CAPABILITIES_KEY in remote:
        peer, problem = read_capabilities(remote[CAPABILITIES_KEY])
    if peer is None:
        peer = _plain_peer(remote)

    write = dask_options.get("compression")
    if _config("choose-codec"):
        decodes = set(peer.codecs)
        write = next((c for c in _write_list(local, remote) if c in decodes), None)

    plan = None
    if _config("recode"):
        accept = [c for c in peer.codecs if c in _CORE_CODECS]
        codec = None
        if any(c not in accept for c in _CORE_CODECS):
            # Frames in a codec the peer lacks (relayed as they came) become
            # what this side writes to it, or raw.
            codec = write if write in accept else False
        protocol = peer.max_pickle_protocol if peer.max_pickle_protocol < 5 else None
        layout = "cpu" if (_config("downgrade-gpu") and peer.published and peer.gpu is False
                           and peer.role != "scheduler") else None
        if codec is not None or protocol is not None or layout is not None:
            plan = Plan(codec, accept, protocol, layout, remote.get("address"))
    return write, plan, peer, problem


# ---- the patches ----------------------------------------------------------


def _add_capabilities(info: dict) -> dict:
    try:
        if _config("publish"):
            info[CAPABILITIES_KEY] = published(info.get("compression"))
    except Exception as e:  # noqa: BLE001 - the handshake goes out as Dask makes it
        logger.warning("dask-caps: capabilities not published: %s: %s", type(e).__name__, e)
    return info


def _handshake_configuration(local, remote):
    out = _originals["handshake_configuration"](local, remote)  # Dask's rule, and its errors
    try:
        write, plan, peer, problem = make_plan(local, remote, out)
        if problem:
            logger.warning("dask-caps: %s sent a malformed %r key (%s): ignored, Dask's rule applies",
                           remote.get("address"), CAPABILITIES_KEY, problem)
        dask_choice = out.get("compression")
        if _config("choose-codec"):
            out["compression"] = write
        if plan is not None:
            out[PLAN_KEY] = plan
        if logger.isEnabledFor(logging.DEBUG):
            ours = local.get(CAPABILITIES_KEY)
            logger.debug(
                "dask-caps: %s -> %s: published %s; peer %s; writing %s (Dask: %s), pickle %s; %s",
                local.get("address"), remote.get("address"),
                "codecs %s, pickle <= %s, gpu %s" % (",".join(ours["codecs"]), ours["max-pickle-protocol"],
                                                     "yes" if ours["gpu"] else "no")
                if isinstance(ours, dict) else "nothing",
                peer.describe(), out.get("compression"), dask_choice, out.get("pickle-protocol"),
                plan.describe() if plan else "no recoding")
    except Exception as e:  # noqa: BLE001 - Dask's options stand
        logger.warning("dask-caps: %s: Dask's rule applies: %s: %s", remote.get("address"),
                       type(e).__name__, e)
    return out


def _dumps(msg, *args, **kwargs):
    frames = _originals["dumps"](msg, *args, **kwargs)
    context = kwargs.get("context") if len(args) < 3 else args[2]
    if not context:
        return frames
    try:
        plan = context.get(PLAN_KEY)
    except AttributeError:
        return frames
    if plan is None or (len(frames) < 2 and plan.pickle_protocol is None):
        return frames
    shard = kwargs.get("frame_split_size") if len(args) < 4 else args[3]
    return plan.recode(frames, shard or plan.shard_bytes)


def install() -> None:
    """Installs the patches (once; importing the module calls it)."""
    global _installed
    if _installed:
        return
    dask.config.update_defaults(DEFAULTS)
    Comm = _comm_core.Comm
    raw_info = Comm.__dict__["handshake_info"]
    raw_conf = Comm.__dict__["handshake_configuration"]
    _originals.update(handshake_info=raw_info, handshake_configuration_raw=raw_conf,
                      handshake_configuration=raw_conf.__func__ if isinstance(raw_conf, staticmethod)
                      else raw_conf, dumps=_protocol.dumps)

    if isinstance(raw_info, staticmethod):  # 2022.12
        original_info = raw_info.__func__

        def handshake_info():
            return _add_capabilities(original_info())

        Comm.handshake_info = staticmethod(functools.wraps(original_info)(handshake_info))
    else:  # 2023.5 on: a method (the same-host rule needs the comm)
        original_method = raw_info

        def handshake_info(self):
            return _add_capabilities(original_method(self))

        Comm.handshake_info = functools.wraps(original_method)(handshake_info)
    Comm.handshake_configuration = staticmethod(
        functools.wraps(_originals["handshake_configuration"])(_handshake_configuration))
    _protocol.dumps = functools.wraps(_originals["dumps"])(_dumps)

    if _config("register-codecs"):
        _registered[:] = register_codecs()
        if _registered:
            logger.info("dask-caps: the core's %s registered in Dask's compressions (this Python lacks %s)",
                        ", ".join(_registered), ", ".join(_PACKAGES[c] for c in _registered))
    _installed = True


def uninstall() -> None:
    """Puts back what install() replaced (the registered codecs go too)."""
    global _installed, _gpu
    if not _installed:
        return
    Comm = _comm_core.Comm
    Comm.handshake_info = _originals["handshake_info"]
    Comm.handshake_configuration = _originals["handshake_configuration_raw"]
    _protocol.dumps = _originals["dumps"]
    for codec in _registered:
        _compression.compressions.pop(codec, None)
    _registered.clear()
    _gpu = None
    _installed = False


def _role_of(dask_object) -> str | None:
    name = type(dask_object).__name__.lower()
    for role in ("scheduler", "worker", "nanny", "client"):
        if role in name:
            return role
    return None


def _role_from_preload_stack() -> str | None:
    """The role of the Dask object whose preload imports this module:
    preloading.process_preloads / Preload.__init__ hold it as dask_server or
    dask_object (read only)."""
    frame = sys._getframe(1)
    while frame is not None:
        for name in ("dask_server", "dask_object"):
            obj = frame.f_locals.get(name)
            if obj is not None and not isinstance(obj, (str, bytes)):
                return _role_of(obj)
        frame = frame.f_back
    return None


def dask_setup(dask_object) -> None:
    """Dask's preload hook: notes the process's role and says what it publishes."""
    global _role
    role = _role_of(dask_object)
    if role == "scheduler" or _role is None:
        _role = role
    try:
        doc = published(dask_caps_advertised())
        logger.info("dask-caps plugin %s in this %s: publishing codecs %s, pickle <= %d, gpu %s; "
                    "publish %s, choose-codec %s, register-codecs %s (%s), recode %s, downgrade-gpu %s",
                    dask_caps.__version__, role or type(dask_object).__name__, ",".join(doc["codecs"]),
                    doc["max-pickle-protocol"], "yes" if doc["gpu"] else "no", _config("publish"),
                    _config("choose-codec"), _config("register-codecs"), ",".join(_registered) or "none needed",
                    _config("recode"), _config("downgrade-gpu"))
    except Exception as e:  # noqa: BLE001 - a log line must not stop a Dask process
        logger.warning("dask-caps plugin: %s: %s", type(e).__name__, e)


def dask_caps_advertised():
    """The compression this process's handshake advertises to another host."""
    try:
        if hasattr(_compression, "get_default_compression"):
            return _compression.get_default_compression()
        return _compression.get_compression_settings("distributed.comm.compression")
    except Exception:  # noqa: BLE001
        return None


install()
if _role is None:
    _role = _role_from_preload_stack()
