"""dask_caps.plugin: the capability exchange of dask/distributed#4011, inside Dask.

Load it with Dask's own preload mechanism on every process that should take
part (docs/plugin.md has the details):

    dask scheduler --preload dask_caps.plugin
    dask worker tcp://scheduler:8786 --preload dask_caps.plugin   # --preload-nanny for the nanny
    DASK_DISTRIBUTED__CLIENT__PRELOAD='["dask_caps.plugin"]' python my_client.py

or in a Dask config file (distributed.scheduler.preload, distributed.worker.preload,
distributed.nanny.preload, distributed.client.preload: ["dask_caps.plugin"]).

Importing the module changes nothing in the process. Dask's preload hooks
do the work: dask_setup(server) installs the patches below (once per process;
every scheduler, worker, nanny or client that calls it holds them), and
dask_teardown(server) of the last holder puts everything back as it was.

  Comm.handshake_info           adds one key, "capabilities", to the handshake a
                                connection sends (docs/plugin.md, "The capabilities
                                key"), with the role of the server the connection
                                belongs to; Dask without the plugin ignores it
  Comm.handshake_configuration  per connection, after Dask's own rule: the codec to
                                write with (the first codec of this side's list that
                                the peer decodes) and the plan for recoding what is
                                written to that peer, kept by the plugin (never in
                                the options Dask hands to serializers)
  distributed.protocol.dumps    (what comm.utils.to_frames calls, with the comm's
                                context) recodes the frames of each outgoing message
                                with the plan of its connection (dask_caps.recode)
  the compressions table        the core's lz4, zstd and snappy under Dask's names
                                where python-lz4, zstandard or python-snappy are missing
  the config defaults           of the dask-caps.* keys (DEFAULTS)
  each holder's handshake_overrides (connection_args), which Dask merges into
                                the handshake of every connection that server opens:
                                its "capabilities" with its role

Each behaviour has a switch in Dask's config (DEFAULTS below; as environment
variables DASK_DASK_CAPS__RECODE=False and so on). Each connection logs one
debug line on the logger "distributed.dask_caps". Nothing here raises out of
Dask's comm code: where the plugin's own work fails, Dask's result is used
and one line is logged. Nothing here executes a pickle: recoding is done by
the core on the frames. The "capabilities" key is read and written by the
core alone (dask_caps.read_peer, dask_caps.capabilities), under its bounds,
in place (a refused count or length costs one len()); what a peer sent is
escaped before it is logged.

All the plugin's state lives in one object, STATE.
"""
from __future__ import annotations

import copy
import functools
import importlib.util
import inspect
import logging
import weakref

import dask
import dask.config
import dask.utils
import distributed
from distributed import protocol as _protocol
from distributed.comm import core as _comm_core
from distributed.protocol import compression as _compression

import dask_caps
from dask_caps import _linkchoice, _metrics

logger = logging.getLogger("distributed.dask_caps")

#: The handshake key this plugin publishes (and dask-caps check and serve send).
CAPABILITIES_KEY = "capabilities"

#: The core's bounds on what a peer's "capabilities" key may hold (the
#: defaults of its Limits; the core reads the key, dask_caps.read_peer): a
#: codec name, the role and the version are at most MAX_NAME printable
#: ASCII bytes, and "codecs" names at most MAX_CODECS. A value past them
#: makes the peer a plain peer.
MAX_NAME = dask_caps.LIMITS["max_capability_name"]
MAX_CODECS = dask_caps.LIMITS["max_capability_codecs"]
#: How much of a refused value one log line shows (escaped).
SHOWN_CHARS = 40

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
        # f. per connection and frame, the codec (or none) that delivers soonest on
        #    the measured link (docs/link-choice.md); False: b's choice, or Dask's
        "link-choice": True,
        # with link-choice: this codec for every frame Dask would compress, if the
        # peer decodes it (null: chosen per link)
        "pin-codec": None,
    }
}

_NEWEST_TABLE = hasattr(_compression, "Compression")  # 2023.5 on: Compression(name, compress, decompress)
_SAME_HOST_RULE = hasattr(_comm_core.Comm, "same_host")  # 2023.5 on: None to a peer on the same host
# maybe_compress's ratio: 0.9 in 2022.12, 0.7 (min_ratio) later; recode follows the same rule.
_DASK_RELEASE = dask_caps.dask_release(distributed.__version__)  # the core's one vocabulary of releases
_CORE_CODECS = tuple(dask_caps.CODECS)
_PACKAGES = {"lz4": "python-lz4", "zstd": "zstandard", "snappy": "python-snappy", "zlib": "zlib"}
# The classes a preload is handed, by their names in the distributed package
# (every release exports them there); the first that matches wins, so a
# subclass of Worker is a worker.
_ROLE_CLASSES = (("scheduler", "Scheduler"), ("nanny", "Nanny"), ("worker", "Worker"), ("client", "Client"))
# Plans of handshake_configuration calls made without a comm (Dask always
# has one; a caller of Comm.handshake_configuration may not): the newest ones
# are kept, since nothing says when such a "connection" ends.
_LOOSE_PLANS = 256


def _config(name: str):
    return dask.config.get("dask-caps." + name, default=DEFAULTS["dask-caps"][name])


def shown(value, limit: int = SHOWN_CHARS) -> str:
    """What a log line may show of a value a peer sent: a string escaped as
    ascii() escapes it (no newline, NUL or other control character gets
    through) and cut to `limit` characters with the count of the rest;
    anything else by its type and size only."""
    if isinstance(value, str):
        if len(value) <= limit and value.isascii() and value.isprintable():
            return value
        out = ascii(value[:limit])
        if len(value) > limit:
            out += " (+%d characters)" % (len(value) - limit)
        return out
    if isinstance(value, (bool, int, float)) or value is None:
        return ascii(value)[:limit]
    try:
        size = " of %d" % len(value)
    except Exception:  # noqa: BLE001 - a size is only a hint
        size = ""
    return "a %s%s" % (type(value).__name__[:limit], size)


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


def register_codecs() -> dict:
    """Puts the core's codecs into Dask's compressions table under Dask's
    names, for each one this Python lacks (both table layouts: 2022.12's
    {"compress", "decompress"} dicts and 2023.5's Compression tuples).
    Returns {name: entry} of those added."""
    added = {}
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
        added[codec] = entry
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


def _host_of(address) -> str:
    """The host (IP) of a Dask address, "" where there is none: the key of
    the core's memory of links (a new connection to a host starts from the
    rate another connection to it measured)."""
    from distributed.comm.addressing import get_address_host, resolve_address

    try:
        host = get_address_host(resolve_address(address))
    except Exception:  # noqa: BLE001 - no host: nothing remembered
        return ""
    return host if isinstance(host, str) else ""


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


def published(advertised=None, role: str | None = None) -> dict:
    """The value of the "capabilities" key this process sends, for a
    handshake advertising `advertised` as its compression, from a server of
    `role` (None: no "role" member), written by the core
    (dask_caps.capabilities). Before the plugin is set up here it is what
    the process will publish once it is (the core's codecs counted where
    dask-caps.register-codecs will add them)."""
    if STATE.gpu is None:
        STATE.gpu = _detect_gpu()
    decodes = table_codecs()
    if not STATE.installed and _config("register-codecs"):
        decodes += [c for c in _CORE_CODECS if c not in decodes]
    preferred = [c for c in _preference_order(advertised) if c in decodes]
    return dask_caps.capabilities(preferred + [c for c in decodes if c not in preferred],
                                  max_pickle_protocol=int(_comm_core.HIGHEST_PROTOCOL), gpu=bool(STATE.gpu),
                                  role=role or None)


def role_of(dask_object) -> str | None:
    """The role of an object Dask hands a preload: "scheduler", "nanny",
    "worker" or "client" by isinstance against distributed's own classes
    (subclasses included), None for anything else."""
    import distributed

    for role, name in _ROLE_CLASSES:
        cls = getattr(distributed, name, None)
        if isinstance(cls, type) and isinstance(dask_object, cls):
            return role
    return None


# ---- what a peer published -----------------------------------------------


class Peer:
    """What this side knows of the peer of one connection, as the core read
    it (dask_caps.read_peer; every string in it within the bounds:
    printable ASCII of at most MAX_NAME bytes)."""

    __slots__ = ("codecs", "max_pickle_protocol", "gpu", "version", "role", "published")

    def __init__(self, codecs, max_pickle_protocol, gpu=None, version=None, role=None, published=False):
        self.codecs = tuple(codecs)
        self.max_pickle_protocol = max_pickle_protocol
        self.gpu = gpu
        self.version = version
        self.role = role
        self.published = published

    @classmethod
    def of(cls, doc: dict, published: bool) -> "Peer":
        """From a dict of the module (read_peer's, read_capabilities')."""
        return cls(doc["codecs"], doc["max-pickle-protocol"], doc["gpu"], doc["dask-caps"], doc["role"], published)

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


def refusal_text(refusal: dict) -> str:
    """The log line's words for a refusal of the core's reader (its
    "problem", "member", "count", "limit" and the offending "value", shown
    escaped and cut)."""
    problem, member = refusal["problem"], refusal["member"]
    if problem == "not-a-map":
        return "not a map but %s" % shown(refusal["value"])
    if problem == "too-many-codecs":
        return "\"codecs\" names %d codecs (at most %d)" % (refusal["count"], refusal["limit"])
    if member == "codecs" and problem in ("not-a-list", "not-a-string"):
        return "\"codecs\" is not a list of names"
    if problem in ("not-printable-ascii", "too-long"):
        what = "a codec name" if member == "codecs" else "\"%s\"" % member
        return "%s is not a string of at most %d printable ASCII characters: %s" % (what, refusal["limit"],
                                                                                    shown(refusal["value"]))
    if problem == "not-a-string":
        return "\"%s\" is not a string" % member
    if problem == "bad-pickle-protocol":
        return "\"max-pickle-protocol\" is not a non-negative integer"
    if problem == "not-a-boolean":
        return "\"gpu\" is not a boolean"
    return shown(refusal["text"], 400)


def read_capabilities(value):
    """The peer's "capabilities" value as a Peer, or (None, why) when the
    core's reader refuses it (dask_caps.read_capabilities: malformed, or
    past the bounds). `why` is bounded and escaped; nothing of a refused
    value is kept, and nothing past a count or length it refuses is read."""
    doc, refusal = dask_caps.read_capabilities(value)
    if doc is None:
        return None, refusal_text(refusal)
    return Peer.of(doc, published=True), None


def read_peer(remote: dict):
    """(Peer, why or None) of a handshake Dask accepted: its published
    "capabilities" key, else a plain Dask peer, as the core reads them
    (dask_caps.read_peer); `why` says why a key was refused."""
    doc, refusal = dask_caps.read_peer(remote)
    return Peer.of(doc, published=doc["published"]), (refusal_text(refusal) if refusal is not None else None)


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
            STATE.stats.recode_failures += 1
            logger.warning("dask-caps: a message to %s passes unchanged: the core cannot recode it "
                           "(%s: %s)", self.peer_address, e.kind, e)
            return frames
        except Exception as e:  # noqa: BLE001 - never out of Dask's comm code
            STATE.stats.recode_failures += 1
            logger.warning("dask-caps: a message to %s passes unchanged: %s: %s",
                           self.peer_address, type(e).__name__, e)
            return frames
        STATE.stats.recodes += 1
        return out if isinstance(out, list) else list(out)


def make_plan(local: dict, remote: dict, dask_options: dict):
    """(codec to write with, Plan or None, Peer, problem) for one connection."""
    peer, problem = read_peer(remote)

    # What the peer gets is the core's decision (dask_caps.deliver, the one
    # policy of core/caps/delivery.h). This side writes what
    # dask-caps.choose-codec lets it choose (its codecs in its order, where
    # Dask's settings allow compression), else what Dask negotiated.
    choose = bool(_config("choose-codec"))
    negotiated = dask_options.get("compression")
    if choose:
        writes = _write_list(local, remote)
    else:
        writes = [negotiated] if isinstance(negotiated, str) else []
    delivery = dask_caps.deliver(
        {"codecs": list(peer.codecs), "max-pickle-protocol": peer.max_pickle_protocol, "gpu": peer.gpu,
         "role": peer.role},
        writes=writes, layout=None if _config("downgrade-gpu") else "keep", keep_layout_for_schedulers=True)
    write = delivery["codec"] if choose else negotiated

    plan = None
    recode = delivery["recode"]
    if _config("recode") and recode is not None:
        plan = Plan(recode["codec"], recode["accept_codecs"], recode["pickle_protocol"], recode["layout"],
                    shown(remote.get("address"), 200))
    return write, plan, peer, problem


def _make_link(local: dict, remote: dict, peer, comm=None):
    """The connection's codec per link (dask-caps.link-choice), among the
    codecs the peer decodes that the core writes; None where it is off or
    cannot be made (a pinned codec the peer lacks: one warning line)."""
    if not _config("link-choice"):
        return None
    pin = _config("pin-codec")
    try:
        return _linkchoice.Link([c for c in peer.codecs if c in _CORE_CODECS], same_host=_same_host(local, remote),
                                pin=pin if isinstance(pin, str) else None, dask_release=_DASK_RELEASE,
                                peer=shown(remote.get("address"), 200),
                                peer_kind=(peer.role or "unknown") if peer.published else "plain",
                                stats=STATE.stats, comm=comm, host=_host_of(remote.get("address")))
    except Exception as e:  # noqa: BLE001 - today's choice stands
        logger.warning("dask-caps: %s: no codec per link (%s: %s)", shown(remote.get("address"), 200),
                       type(e).__name__, shown(str(e), 200))
        return None


# ---- where Dask's arguments are -------------------------------------------


class ArgReader:
    """Finds named arguments of calls to one function by its signature, read
    once: a call's value for `name` whether it came by position or by
    keyword, else the parameter's default (None where the function has no
    such parameter)."""

    __slots__ = ("where",)

    def __init__(self, func, names):
        params = inspect.signature(func).parameters
        var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        positions = [p.name for p in params.values()
                     if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        self.where = {}
        for name in names:
            p = params.get(name)
            if p is None:
                self.where[name] = (None, var_kw, None)
                continue
            position = positions.index(name) if name in positions else None
            keyword = p.kind is not inspect.Parameter.POSITIONAL_ONLY
            default = None if p.default is inspect.Parameter.empty else p.default
            self.where[name] = (position, keyword, default)

    def accepts(self, name: str) -> bool:
        position, keyword, _ = self.where[name]
        return position is not None or keyword

    def get(self, name: str, args: tuple, kwargs: dict):
        position, keyword, default = self.where[name]
        if keyword and name in kwargs:
            return kwargs[name]
        if position is not None and position < len(args):
            return args[position]
        return default

    def replace(self, name: str, args: tuple, kwargs: dict, value):
        """(args, kwargs) with `value` where the call gave `name`; unchanged
        where it did not give it."""
        position, keyword, _ = self.where[name]
        if keyword and name in kwargs:
            return args, {**kwargs, name: value}
        if position is not None and position < len(args):
            return args[:position] + (value,) + args[position + 1:], kwargs
        return args, kwargs


class _CommOrClass:
    """Puts a function where Dask has a static method (2022.12's
    handshake_info, handshake_configuration in every release): called on
    the class, as Comm.handshake_info(), it gets None first; called on a
    comm, as Dask's connect() and Listener.on_connection() call it, it gets
    the comm first."""

    def __init__(self, func):
        self.func = func
        functools.update_wrapper(self, func)

    def __get__(self, obj, objtype=None):
        return functools.partial(self.func, obj)


class _Holder:
    """One server (scheduler, worker, nanny or client) that set the plugin up."""

    __slots__ = ("ref", "role", "args", "overrides_created", "before")

    def __init__(self, server, role):
        try:
            self.ref = weakref.ref(server)
        except TypeError:
            self.ref = lambda server=server: server
        self.role = role
        self.args = None               # its connection_args, where the plugin put "capabilities"
        self.overrides_created = False
        self.before = _MISSING         # what that dict held under the key before


_MISSING = object()
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def _listening_match(listening, local) -> int:
    """2 where `local` (a comm's local address) is the address `listening`
    (a listener's) accepts on, 1 where the listener listens on every
    interface at that port, 0 otherwise."""
    if not isinstance(listening, str) or not isinstance(local, str):
        return 0
    if listening == local:
        return 2
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme_l, loc_l = parse_address(listening)
        scheme_c, loc_c = parse_address(local)
        if scheme_l != scheme_c:
            return 0
        host_l, port_l = parse_host_port(loc_l)
        host_c, port_c = parse_host_port(loc_c)
    except Exception:  # noqa: BLE001 - an address of another form is not this one
        return 0
    if port_l != port_c:
        return 0
    if host_l == host_c:
        return 2
    return 1 if host_l in _WILDCARD_HOSTS else 0


class PluginState:
    """Everything the plugin holds in a process (one instance: STATE).

    holders    the servers that called dask_setup and not yet dask_teardown,
               by id; the patches are in while there is one (or install())
    originals  what the patches replaced (None: not installed)
    registered the compressions entries the plugin added, by name
    gpu        what "gpu" publishes (detected once)
    plans      per connection, the plan for recoding what this side writes
               to it and its codec per link (dask-caps.link-choice), by the
               id of the connection's remote_info (which Dask hands dumps as
               context["recipient"]); each entry (remote_info, plan or None,
               finalizer, link or None) holds that dict, so the id stays its
               own, until the comm is collected
    stats      the counters the Prometheus collector shows (dask_caps/_metrics.py)
    """

    def __init__(self):
        self.holders: dict = {}
        self.explicit = False
        self.originals: dict | None = None
        self.registered: dict = {}
        self.gpu: bool | None = None
        self.plans: dict = {}
        self.loose: list = []
        self.args: ArgReader | None = None
        self.config_before: dict = {}
        self.stats = _metrics.Stats()

    @property
    def installed(self) -> bool:
        return self.originals is not None

    # -- roles of connections --

    def role_of_comm(self, comm) -> str | None:
        """The role of the holder whose listener accepted `comm` (matched
        by the comm's local address), or None: a connection this process
        opened, or one no holder accepted."""
        local = getattr(comm, "local_address", None) if comm is not None else None
        if not isinstance(local, str) or not self.holders:
            return None
        best, best_score = None, 0
        for holder in list(self.holders.values()):
            server = holder.ref()
            for listener in list(getattr(server, "listeners", None) or ()):
                for attr in ("listen_address", "contact_address"):
                    try:
                        score = _listening_match(getattr(listener, attr, None), local)
                    except Exception:  # noqa: BLE001 - a listener not started has no address
                        score = 0
                    if score > best_score:
                        best, best_score = holder.role, score
                        if score == 2:
                            return best
        return best

    # -- plans --

    def keep_plan(self, comm, remote: dict, plan, link=None) -> None:
        key = id(remote)
        old = self.plans.pop(key, None)
        if old is not None and old[2] is not None:
            old[2].detach()
        if plan is None and link is None:
            return
        finalizer = None
        if comm is not None:
            try:
                finalizer = weakref.finalize(comm, self.plans.pop, key, None)
                finalizer.atexit = False
            except TypeError:  # not weakly referable: kept as a loose plan
                finalizer = None
        self.plans[key] = (remote, plan, finalizer, link)
        if finalizer is None:
            self.loose.append(key)
            while len(self.loose) > _LOOSE_PLANS:
                gone = self.plans.get(self.loose.pop(0))
                if gone is not None and gone[2] is None:
                    self.plans.pop(id(gone[0]), None)

    def plan_for(self, recipient):
        entry = self.plans.get(id(recipient))
        if entry is not None and entry[0] is recipient:
            return entry[1]
        return None

    def link_for(self, recipient):
        """The codec per link (an _linkchoice.Link) of the connection whose
        handshake is `recipient`, or None."""
        entry = self.plans.get(id(recipient))
        if entry is not None and entry[0] is recipient:
            return entry[3]
        return None

    # -- install and uninstall --

    def hold(self, server) -> bool:
        """Notes `server` as a holder (once per object) and installs the
        patches for the first; True where this call installed them."""
        first = not self.installed
        self.install()
        key = id(server)
        holder = self.holders.get(key)
        if holder is not None and holder.ref() is server:
            return False
        holder = _Holder(server, role_of(server))
        self.holders[key] = holder
        self._publish_for(holder, server)
        return first

    def release(self, server) -> None:
        holder = self.holders.get(id(server))
        if holder is None or holder.ref() is not server:
            return
        del self.holders[id(server)]
        self._unpublish_for(holder)
        self._uninstall_if_unheld()

    def _publish_for(self, holder, server) -> None:
        """Puts this server's "capabilities" (with its role) into the
        handshake_overrides of its connection_args, which Dask passes to
        connect() for every connection the server opens and merges into the
        handshake it sends."""
        args = getattr(server, "connection_args", None)
        if not isinstance(args, dict) or not _config("publish"):
            return
        overrides = args.get("handshake_overrides")
        if overrides is None:
            overrides = {}
            args["handshake_overrides"] = overrides
            holder.overrides_created = True
        elif not isinstance(overrides, dict):
            return
        holder.before = overrides.get(CAPABILITIES_KEY, _MISSING)
        overrides[CAPABILITIES_KEY] = published(dask_caps_advertised(), role=holder.role)
        holder.args = args

    @staticmethod
    def _unpublish_for(holder) -> None:
        args, holder.args = holder.args, None
        if args is None:
            return
        overrides = args.get("handshake_overrides")
        if not isinstance(overrides, dict):
            return
        if holder.overrides_created:
            if set(overrides) <= {CAPABILITIES_KEY}:
                args.pop("handshake_overrides", None)
            else:
                overrides.pop(CAPABILITIES_KEY, None)
        elif holder.before is _MISSING:
            overrides.pop(CAPABILITIES_KEY, None)
        else:
            overrides[CAPABILITIES_KEY] = holder.before

    def _uninstall_if_unheld(self) -> None:
        if not self.holders and not self.explicit:
            self.uninstall_all()

    def install(self) -> None:
        """Installs the patches and config defaults (once)."""
        if self.installed:
            return
        cfg = dask.config.config
        self.config_before = {k: copy.deepcopy(cfg[k]) for k in ("dask-caps", "dask_caps") if k in cfg}
        dask.config.update_defaults(DEFAULTS)
        Comm = _comm_core.Comm
        raw_info = Comm.__dict__["handshake_info"]
        raw_conf = Comm.__dict__["handshake_configuration"]
        original_dumps = _protocol.dumps
        conf = raw_conf.__func__ if isinstance(raw_conf, staticmethod) else raw_conf
        self.args = ArgReader(original_dumps, ("msg", "context", "frame_split_size"))
        self.originals = {"handshake_info": raw_info, "handshake_configuration": raw_conf,
                          "dumps": original_dumps}
        self._install_link_hooks()
        try:
            self.stats.register(self.links)
        except Exception as e:  # noqa: BLE001 - the metrics are a view, not a behaviour
            logger.warning("dask-caps: no Prometheus metrics: %s: %s", type(e).__name__, e)

        if isinstance(raw_info, staticmethod):  # 2022.12
            original_info = raw_info.__func__

            def handshake_info(comm):
                return _add_capabilities(comm, original_info())

            functools.update_wrapper(handshake_info, original_info)
            Comm.handshake_info = _CommOrClass(handshake_info)
        else:  # 2023.5 on: a method (the same-host rule needs the comm)
            original_method = raw_info

            def handshake_info(self):
                return _add_capabilities(self, original_method(self))

            Comm.handshake_info = functools.wraps(original_method)(handshake_info)
        Comm.handshake_configuration = _CommOrClass(functools.wraps(conf)(functools.partial(
            _handshake_configuration, conf)))
        _protocol.dumps = _wrap_dumps(original_dumps, self.args)
        if not self.args.accepts("context"):
            logger.warning("dask-caps: this Dask's distributed.protocol.dumps takes no context: "
                           "nothing will be recoded")

        if _config("register-codecs"):
            self.registered = register_codecs()
            if self.registered:
                logger.info("dask-caps: the core's %s registered in Dask's compressions (this Python lacks %s)",
                            ", ".join(self.registered), ", ".join(_PACKAGES[c] for c in self.registered))

    def uninstall_all(self) -> None:
        """Puts back everything install() and the holders changed: the
        patched functions, the compressions entries, the config defaults,
        the holders' handshake_overrides; forgets every plan."""
        for holder in list(self.holders.values()):
            self._unpublish_for(holder)
        self.holders.clear()
        self.explicit = False
        originals, self.originals = self.originals, None
        if originals is None:
            return
        Comm = _comm_core.Comm
        Comm.handshake_info = originals["handshake_info"]
        Comm.handshake_configuration = originals["handshake_configuration"]
        if _protocol.dumps is not originals["dumps"]:
            _protocol.dumps = originals["dumps"]
        for owner, name, original in originals.get("link", ()):
            setattr(owner, name, original)
        self.stats.unregister()
        for codec, entry in self.registered.items():
            if _compression.compressions.get(codec) is entry:
                del _compression.compressions[codec]
        self.registered = {}
        for _, _, finalizer, _ in list(self.plans.values()):
            if finalizer is not None:
                finalizer.detach()
        self.plans.clear()
        self.loose.clear()
        self.args = None
        self.gpu = None
        self._restore_config()

    def _install_link_hooks(self) -> None:
        """The two hooks of the codec per link (dask_caps/_linkchoice.py),
        found by name: distributed.protocol.core.maybe_compress, which
        dumps calls per frame, and distributed.comm.tcp.TCP.write. Where a
        release lacks one, link choice is off in this process (one line)."""
        if not _config("link-choice"):
            return
        try:
            core = importlib.import_module("distributed.protocol.core")
            tcp = importlib.import_module("distributed.comm.tcp")
            compress = core.__dict__["maybe_compress"]
            tcp_class = tcp.TCP
            write = tcp_class.__dict__["write"]
        except Exception as e:  # noqa: BLE001 - the rest of the plugin works without it
            logger.warning("dask-caps: no codec per link in this Dask (%s: %s)", type(e).__name__, e)
            return
        core.maybe_compress = _linkchoice.wrap_maybe_compress(compress)
        tcp_class.write = _linkchoice.wrap_write(write, self.link_of)
        self.originals["link"] = ((core, "maybe_compress", compress), (tcp_class, "write", write))

    def links(self):
        """The codec per link of every open connection that has one."""
        return [entry[3] for entry in list(self.plans.values()) if entry[3] is not None]

    def link_of(self, comm):
        """The codec per link of what this process writes on `comm`, or None."""
        return self.link_for(getattr(comm, "remote_info", None))

    def _restore_config(self) -> None:
        defaults = dask.config.defaults
        for i, d in enumerate(defaults):
            if d is DEFAULTS:
                del defaults[i]
                break
        cfg = dask.config.config
        ours = DEFAULTS["dask-caps"]
        for top in ("dask-caps", "dask_caps"):
            current = cfg.get(top)
            if not isinstance(current, dict):
                continue
            before = self.config_before.get(top, {})
            for key in list(current):
                name = key.replace("_", "-")
                if name in ours and key not in before and current[key] == ours[name]:
                    del current[key]
            if not current and top not in self.config_before:
                del cfg[top]
        self.config_before = {}


STATE = PluginState()


# ---- the patches ----------------------------------------------------------


def _add_capabilities(comm, info: dict) -> dict:
    try:
        if _config("publish"):
            info[CAPABILITIES_KEY] = published(info.get("compression"), role=STATE.role_of_comm(comm))
    except Exception as e:  # noqa: BLE001 - the handshake goes out as Dask makes it
        logger.warning("dask-caps: capabilities not published: %s: %s", type(e).__name__, e)
    return info


def _describe_published(ours) -> str:
    if not isinstance(ours, dict):
        return "nothing"
    out = "codecs %s, pickle <= %s, gpu %s" % (",".join(ours["codecs"]), ours["max-pickle-protocol"],
                                                "yes" if ours["gpu"] else "no")
    if ours.get("role"):
        out += ", role " + ours["role"]
    return out


def _handshake_configuration(original, comm, local, remote):
    out = original(local, remote)  # Dask's rule, and its errors
    try:
        write, plan, peer, problem = make_plan(local, remote, out)
        peer_address = shown(remote.get("address"), 200)
        if problem:
            # Nothing of a refused value stays: not in the plugin, and not in
            # the handshake Dask keeps for the connection (Dask ignores the key).
            remote.pop(CAPABILITIES_KEY, None)
            logger.warning("dask-caps: %s sent a malformed %r key (%s): ignored, Dask's rule applies",
                           peer_address, CAPABILITIES_KEY, problem)
        dask_choice = out.get("compression")
        if _config("choose-codec"):
            out["compression"] = write
        STATE.keep_plan(comm, remote, plan, _make_link(local, remote, peer, comm))
        STATE.stats.peers["published" if peer.published else "plain"] += 1
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "dask-caps: %s -> %s: published %s; peer %s; writing %s (Dask: %s), pickle %s; %s",
                shown(local.get("address"), 200), peer_address, _describe_published(local.get(CAPABILITIES_KEY)),
                peer.describe(), out.get("compression"), dask_choice, shown(out.get("pickle-protocol")),
                plan.describe() if plan else "no recoding")
    except Exception as e:  # noqa: BLE001 - Dask's options stand
        logger.warning("dask-caps: %s: Dask's rule applies: %s: %s", shown(remote.get("address"), 200),
                       type(e).__name__, e)
    return out


def _wrap_dumps(original, reader):
    """distributed.protocol.dumps, then the plan of the connection its
    context names (found by name in the call: `reader`)."""

    @functools.wraps(original)
    def dumps(*args, **kwargs):
        if not STATE.plans:  # no connection needs anything: the common case, first
            return original(*args, **kwargs)
        context = reader.get("context", args, kwargs)
        if not context:
            return original(*args, **kwargs)
        try:
            recipient = context.get("recipient")
        except AttributeError:
            return original(*args, **kwargs)
        link = STATE.link_for(recipient)
        if link is not None:
            # Data relayed as it came (Serialized) never reaches Dask's
            # maybe_compress: coded here, by the same choice.
            msg = reader.get("msg", args, kwargs)
            try:
                coded = _linkchoice.code_relayed(link, msg)
            except Exception as e:  # noqa: BLE001 - never out of Dask's comm code: as it came
                logger.debug("dask-caps: relayed data to %s goes as it came: %s: %s", link.peer,
                             type(e).__name__, shown(str(e), 200))
                coded = msg
            if coded is not msg:
                args, kwargs = reader.replace("msg", args, kwargs, coded)
            frames = _linkchoice.call_with(link, original, args, kwargs)
        else:
            frames = original(*args, **kwargs)
        plan = STATE.plan_for(recipient)
        if plan is None or (len(frames) < 2 and plan.pickle_protocol is None):
            return frames
        shard = reader.get("frame_split_size", args, kwargs)
        return plan.recode(frames, shard or plan.shard_bytes)

    return dumps


# ---- the public interface -------------------------------------------------


def link_written() -> dict:
    """What the codec per link wrote in this process, by codec ("none":
    raw): {codec: {"frames": n, "bytes": n}} (bytes as sent)."""
    return {codec: {"frames": n, "bytes": b} for codec, (n, b) in STATE.stats.written.items()}


def relayed_recodes() -> dict:
    """Relayed frames in another codec than the link's that this process
    recoded into the link's ("recoded"), and those the core could not
    decode, which went as they came ("failed")."""
    return {"recoded": STATE.stats.relayed_recodes, "failed": STATE.stats.relayed_recode_failures}


def plan_for(recipient):
    """The plan for what this process writes to the peer whose handshake
    (comm.remote_info, context["recipient"] in dumps) is `recipient`, or None."""
    return STATE.plan_for(recipient)


def install() -> None:
    """Installs the patches without a server to hold them (for a program
    that wants them before it makes its first connection, e.g. before
    creating a Client); uninstall() takes them out."""
    STATE.install()
    STATE.explicit = True


def uninstall() -> None:
    """Puts back everything the plugin changed in this process, whoever
    installed it."""
    STATE.uninstall_all()


def dask_setup(dask_object) -> None:
    """Dask's preload hook (every scheduler, worker, nanny and client that
    preloads the module calls it with itself): installs the patches where
    they are not yet, and publishes this object's role on its connections."""
    try:
        STATE.hold(dask_object)
        role = STATE.holders[id(dask_object)].role
        if role == "client":
            # A client runs its preloads after it has connected: the idle
            # connections of its pool were made without its role (or without
            # the plugin); closing them makes its next calls (gather,
            # scatter, run) connect with both.
            pool = getattr(dask_object, "rpc", None)
            if pool is not None and callable(getattr(pool, "collect", None)):
                pool.collect()
        doc = published(dask_caps_advertised(), role=role)
        logger.info("dask-caps plugin %s in this %s: publishing codecs %s, pickle <= %d, gpu %s; "
                    "publish %s, choose-codec %s, register-codecs %s (%s), recode %s, downgrade-gpu %s",
                    dask_caps.__version__, role or shown(type(dask_object).__name__), ",".join(doc["codecs"]),
                    doc["max-pickle-protocol"], "yes" if doc["gpu"] else "no", _config("publish"),
                    _config("choose-codec"), _config("register-codecs"),
                    ",".join(STATE.registered) or "none needed", _config("recode"), _config("downgrade-gpu"))
    except Exception as e:  # noqa: BLE001 - a plugin must not stop a Dask process
        logger.warning("dask-caps plugin: %s: %s", type(e).__name__, e)


def dask_teardown(dask_object) -> None:
    """Dask's preload hook at close: the object no longer holds the patches;
    the last holder's teardown puts the process back as it was."""
    try:
        STATE.release(dask_object)
    except Exception as e:  # noqa: BLE001 - closing goes on
        logger.warning("dask-caps plugin: teardown: %s: %s", type(e).__name__, e)


def dask_caps_advertised():
    """The compression this process's handshake advertises to another host."""
    try:
        if hasattr(_compression, "get_default_compression"):
            return _compression.get_default_compression()
        return _compression.get_compression_settings("distributed.comm.compression")
    except Exception:  # noqa: BLE001
        return None
