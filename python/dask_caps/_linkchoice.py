"""The Dask plugin's codec per link (docs/link-choice.md), glue only: the
choice itself is the core's (dask_caps._core.LinkChooser).

One Link per connection this process writes to, held by the connection's
plan (dask_caps.plugin). Two hooks feed it, both installed by the plugin
and found by name in every Dask release 2022.12 to 2026.7:

  distributed.protocol.core.maybe_compress
        Dask's per-frame compression inside dumps. While the plugin's dumps
        wrapper runs for a connection with a Link (current(), a thread-local
        set around that call only, since dumps may run in Dask's offload
        thread), each frame goes to the Link: the codec the link and the
        frame's sample call for, raw, or (link not known yet) Dask's own
        call with the connection's codec, today's choice.
  distributed.comm.tcp.TCP.write
        after a message of OBSERVE_BYTES or more was handed to the kernel,
        the connection's TCP_INFO; where the socket gives none, how long
        the write took.

Every large frame compressed here (the chooser's codec, or Dask's own
while the link is unknown) is timed and told to the chooser
(observe_compress), which weighs codecs at the speed this process
compresses at now, not only at its calibration's.

The connection's TCP_INFO is also read before a frame of OBSERVE_BYTES or
more is chosen, so that what the previous message carried counts before
this one is coded. The core takes the rate from what the connection
carried while busy between readings, and from the kernel's sample of the
last ACK near that (docs/link-choice.md), so any moment will do and an
extra reading costs one getsockopt.

Before a large frame is chosen on a connection that knows no rate yet,
the host's other connections are read too (look(), through this module's
index of Links by host), and the chooser takes the rate the core's memory
of links holds for the host.

Data this process relays as it came (Serialized objects under a message's
"data" key: the scheduler's gather replies) never reaches maybe_compress;
the plugin's dumps wrapper hands its raw frames to the same Link.compress,
and its frames in another codec than the link's to Link.recode
(code_relayed()).

A frame is only ever compressed with a codec the receiver decodes: the
chooser is made with the receiver's codecs alone. Nothing here raises into
Dask: a failure of the choice falls back to Dask's own maybe_compress.
"""
from __future__ import annotations

import logging
import threading
import time
import weakref

import dask_caps
from dask_caps._core import LinkChooser

logger = logging.getLogger("distributed.dask_caps")

#: A write at least this large is a measurement of the link.
OBSERVE_BYTES = 1 << 20

_current = threading.local()


class Link:
    """The codec choice of one connection, in the direction this process writes."""

    __slots__ = ("chooser", "peer", "peer_kind", "ratio", "stats", "comm_ref", "host", "undecided",
                 "__weakref__")

    def __init__(self, receiver_codecs, *, same_host: bool, pin, dask_release: str, peer: str,
                 peer_kind: str, stats, comm=None, host: str = ""):
        # host: the peer's IP, so that this connection starts from the rate
        # another connection of this process to it measured (the core's
        # memory of links), and leaves its own there; the Links to the same
        # host are read for that while this one knows nothing (_HOSTS)
        self.chooser = LinkChooser(list(receiver_codecs), same_host=same_host, pin=pin,
                                   dask_release=dask_release, host=host)
        self.host = host
        if host:
            _HOSTS.add(host, self)
        self.peer = peer  # already bounded and escaped by the caller
        self.peer_kind = peer_kind  # the peer's published role, or "plain"
        # Dask's rule: a compressed frame must be this much smaller than the
        # raw one (the core's, for this release: core/wire/dask_release.h)
        self.ratio = self.chooser.ratio
        self.stats = stats  # the plugin's counters (dask_caps/_metrics.py)
        # What the chooser knew of the link when a relayed frame it decoded
        # left it undecided (recode()); None once it decided.
        self.undecided = None
        # The connection, weakly (its socket is read before large frames);
        # None where there is none or it cannot be referred to weakly.
        self.comm_ref = None
        if comm is not None:
            try:
                self.comm_ref = weakref.ref(comm)
            except TypeError:
                self.comm_ref = None

    def compress(self, original, payload, args, kwargs):
        """maybe_compress for one frame written on this connection."""
        found, choice = self._choose(payload)
        if not found:  # the link is not known yet: today's choice
            return self._timed(original, payload, args, kwargs)
        if choice == "none":
            self.stats.count_written("none", memoryview(payload).nbytes)
            return None, payload
        coded = self._encode(choice, payload)
        if coded is None:
            return original(payload, *args, **kwargs)
        if len(coded) > self.ratio * memoryview(payload).nbytes:
            self.stats.count_written("none", memoryview(payload).nbytes)
            return None, payload
        self.stats.count_written(choice, len(coded))
        return choice, coded

    def recode(self, frame, codec: str):
        """A relayed frame that came in `codec` (a core codec): (codec, bytes)
        in the codec the link calls for where that is another codec and
        its bytes are fewer, else None (the frame goes as it came). The
        frame is decoded only where the connection's choice (a pin
        included) is not already `codec`, at any zstd level; what the link
        calls for is then chosen on its raw bytes, as for any frame (one
        vote, one count). A connection with no choice yet that a decoded
        frame left undecided (a rate borrowed from its host, a close call)
        decodes no more relayed frames until its rate or its source
        changes (docs/link-choice.md, "Relayed data")."""
        current = self.chooser.current_codec
        if current == codec or current == "none":
            return None
        if current is None and self.undecided is not None and self.undecided == self._knows():
            return None
        try:
            raw = dask_caps.decompress(codec, frame)
        except Exception:  # noqa: BLE001 - a frame the core cannot read goes as it came
            self.stats.relayed_recode_failures += 1
            return None
        found, choice = self._choose(raw)
        self.undecided = None if found else self._knows()
        if not found or choice == "none" or choice == codec:
            return None
        coded = self._encode(choice, raw)
        if coded is None or len(coded) >= memoryview(frame).nbytes:
            return None
        self.stats.count_written(choice, len(coded))
        self.stats.relayed_recodes += 1
        return choice, coded

    def _knows(self):
        """What the chooser knows of the link that could decide a frame: its
        rate, and where the rate comes from."""
        try:
            return self.chooser.rate_source, self.chooser.rate
        except Exception:  # noqa: BLE001 - never out of Dask's comm code
            return None

    def _choose(self, payload):
        """(True, the codec or "none") the chooser names for `payload`, or
        (False, None) while it names none (the link is not known yet); one
        debug line and one count where the connection's choice changed."""
        try:
            if memoryview(payload).nbytes >= OBSERVE_BYTES:
                self.look()
            choice = self.chooser.choose(payload)
        except Exception:  # noqa: BLE001 - a frame the chooser cannot read: Dask decides
            choice = None
        if choice is None:
            return False, None
        if self.chooser.changed:
            self.stats.count_change(self.peer_kind)
            if logger.isEnabledFor(logging.DEBUG):
                change = self.chooser.last_change or {}
                logger.debug("dask-caps: %s: %s", self.peer, change.get("line", "codec " + str(choice)))
        return True, choice

    def _encode(self, choice: str, payload):
        """`payload` compressed with `choice` at the chooser's level, the
        time it took told to the chooser; None where the core failed."""
        level = self.chooser.level
        try:
            start = time.perf_counter()
            data = (dask_caps.compress(choice, payload, level=level) if level is not None
                    else dask_caps.compress(choice, payload))
            nbytes = memoryview(payload).nbytes
            if nbytes >= OBSERVE_BYTES:  # smaller frames say nothing: not worth a call
                self.chooser.observe_compress(choice, nbytes, time.perf_counter() - start, level)
        except Exception:  # noqa: BLE001 - never out of Dask's comm code
            return None
        return data

    def look(self) -> None:
        """Before a large frame is chosen: the connection's TCP_INFO, and
        while that gives no rate, the other connections to the same host
        (their spans close on what they carried since their last reading,
        which leaves their rate in the core's memory), then the rate the
        memory holds. A connection opened while another to the host was
        busy so starts from what that one carried."""
        comm = self.comm_ref() if self.comm_ref is not None else None
        fd = _fd_of(comm)
        if fd >= 0:
            self.chooser.observe_socket(fd)
        if self.chooser.rate is not None or not self.host:
            return
        for other in _HOSTS.of(self.host):
            if other is self or other.comm_ref is None:
                continue
            other_fd = _fd_of(other.comm_ref())
            if other_fd >= 0:
                other.chooser.observe_socket(other_fd)
        self.chooser.take_host_rate()

    def may_code(self) -> bool:
        """Whether a frame could go in a codec now (a pin, or a link slow
        enough); False where that cannot be told."""
        try:
            return bool(self.chooser.may_code)
        except Exception:  # noqa: BLE001 - never out of Dask's comm code
            return False

    def _timed(self, original, payload, args, kwargs):
        """Dask's own maybe_compress, timed: what a frame it coded took here
        tells the chooser how fast this process compresses now."""
        start = time.perf_counter()
        result = original(payload, *args, **kwargs)
        try:
            codec = result[0]
            nbytes = memoryview(payload).nbytes
            if isinstance(codec, str) and nbytes >= OBSERVE_BYTES:
                # Dask's level: distributed.comm.zstd.level, 0 (zstd's own) by default.
                self.chooser.observe_compress(codec, nbytes, time.perf_counter() - start)
        except Exception:  # noqa: BLE001 - a measurement must not fail a write
            pass
        return result

    def observe(self, comm, nbytes: int, seconds: float) -> None:
        """What the write of `nbytes` that just returned says of the link."""
        fd = _fd_of(comm)
        if fd >= 0 and self.chooser.observe_socket(fd):
            return
        self.chooser.observe_write(nbytes, seconds)


class _LinksByHost:
    """The open Links of this process by peer host, held weakly (a Link
    lives as long as its connection's plan). Links are made on the event
    loop and read from dumps, which may run in Dask's offload thread: a lock."""

    #: hosts kept before entries without a live Link are dropped
    PRUNE_AT = 4096

    def __init__(self):
        self._lock = threading.Lock()
        self._by_host: dict[str, weakref.WeakSet] = {}

    def add(self, host: str, link) -> None:
        with self._lock:
            links = self._by_host.get(host)
            if links is None:
                if len(self._by_host) >= self.PRUNE_AT:
                    self._by_host = {h: s for h, s in self._by_host.items() if len(s)}
                links = self._by_host[host] = weakref.WeakSet()
            links.add(link)

    def of(self, host: str) -> list:
        with self._lock:
            links = self._by_host.get(host)
            return list(links) if links is not None else []


_HOSTS = _LinksByHost()


def _fd_of(comm) -> int:
    """The descriptor of a TCP comm's socket, or -1 (none, or closed)."""
    sock = getattr(getattr(comm, "stream", None), "socket", None)
    try:
        return sock.fileno() if sock is not None else -1
    except Exception:  # noqa: BLE001 - a closed socket has no figures
        return -1


#: Dask's maybe_compress min_size (every release): a smaller relayed frame
#: stays as it came without asking the chooser.
RELAY_MIN_BYTES = 10_000
#: The codecs a relayed frame may come in and be recoded from: the core's.
RECODE_FROM = frozenset(dask_caps.CODECS)
#: How deep code_relayed looks into a message: Dask's nest a few levels
#: ({"status": "OK", "data": {key: Serialized}}, batched lists of those).
RELAY_DEPTH = 8


def _keep_raw(payload, *args, **kwargs):
    """maybe_compress for a relayed frame while the link is unknown: as
    Dask's dumps, which never compresses a frame it relays, raw."""
    return None, payload


def code_relayed(link, msg):
    """`msg` with the frames of the Serialized objects under its "data" key
    (data this process relays as it came: the scheduler's gather replies,
    scatter's update_data) in the codec the link calls for. Dask's dumps
    writes a Serialized's frames as they are, so without this a client
    behind a slow link got whatever the worker chose for its own link to
    the scheduler (docs/link-choice.md, "Relayed data"):
      - a raw frame goes through Link.compress, as dumps' own frames go
        (one choice, one vote and one count per frame);
      - a frame in a core codec goes through Link.recode: it changes only
        where the connection's choice is another codec and that codec
        makes it smaller.
    Only "data" is looked at, so that no other message costs a walk;
    "data" is walked once, and its containers are copied again only where
    a frame changed. The objects in `msg` are never changed."""
    if type(msg) is not dict:
        return msg
    data = msg.get("data")
    if data is None:
        return msg
    serialized_type = _SERIALIZED.get()
    if serialized_type is None:
        return msg
    found = []
    total = _find_serialized(data, serialized_type, 0, found)
    if total < RELAY_MIN_BYTES:
        return msg
    if total >= OBSERVE_BYTES:
        link.look()  # what the last messages carried counts before this one is coded
    if not link.may_code():
        return msg  # unknown, or a link where none wins for any data: as it came
    coded, seen = {}, set()
    for obj in found:
        if id(obj) in seen:  # one object under two keys: coded once
            continue
        seen.add(id(obj))
        new = _code_serialized(link, obj, serialized_type)
        if new is not obj:
            coded[id(obj)] = new
    if not coded:
        return msg
    out = dict(msg)
    out["data"] = _replaced(data, serialized_type, 0, coded)
    return out


class _SerializedType:
    """Dask's Serialized, looked up by name once (every release has it in
    distributed.protocol.serialize), or None where it is not there."""

    _UNSET = object()

    def __init__(self):
        self._type = self._UNSET

    def get(self):
        if self._type is self._UNSET:
            try:
                from distributed.protocol.serialize import Serialized
            except ImportError:
                Serialized = None
            self._type = Serialized
        return self._type


_SERIALIZED = _SerializedType()


def _frames_of(obj):
    """(compression list, frames) of a Serialized whose header Dask would
    read, or None."""
    header, frames = obj.header, obj.frames
    if not isinstance(header, dict) or not isinstance(frames, (list, tuple)):
        return None
    compression = header.get("compression")
    compression = [None] * len(frames) if compression is None else list(compression)
    if len(compression) != len(frames):
        return None  # not a header Dask would read: left to Dask
    return compression, frames


def _codable(codec, frame) -> int:
    """The bytes of a relayed frame that code_relayed may code: raw, or in
    a core codec, and of RELAY_MIN_BYTES or more; else 0."""
    if codec is not None and codec not in RECODE_FROM:
        return 0  # False (never compressed), or a codec the core lacks
    try:
        n = memoryview(frame).nbytes
    except TypeError:
        return 0
    return n if n >= RELAY_MIN_BYTES else 0


def _find_serialized(value, serialized_type, depth, found):
    """The bytes of the frames code_relayed may code (_codable) in the
    Serialized objects in `value`; those that hold any are appended to
    `found`, in order."""
    if isinstance(value, serialized_type):
        parts = _frames_of(value)
        if parts is None:
            return 0
        total = 0
        for codec, frame in zip(*parts):
            total += _codable(codec, frame)
        if total:
            found.append(value)
        return total
    if depth >= RELAY_DEPTH:
        return 0
    kind = type(value)
    if kind is dict:
        return sum(_find_serialized(v, serialized_type, depth + 1, found) for v in value.values())
    if kind is list or kind is tuple:
        return sum(_find_serialized(v, serialized_type, depth + 1, found) for v in value)
    return 0


def _replaced(value, serialized_type, depth, coded):
    """`value` with each Serialized whose id is in `coded` replaced by its
    coded copy; containers copied only on the way to one."""
    if isinstance(value, serialized_type):
        return coded.get(id(value), value)
    if depth >= RELAY_DEPTH:
        return value
    kind = type(value)
    if kind is dict:
        out = None
        for key, item in value.items():
            new = _replaced(item, serialized_type, depth + 1, coded)
            if new is not item:
                if out is None:
                    out = dict(value)
                out[key] = new
        return value if out is None else out
    if kind is list or kind is tuple:
        items = None
        for i, item in enumerate(value):
            new = _replaced(item, serialized_type, depth + 1, coded)
            if new is not item:
                if items is None:
                    items = list(value)
                items[i] = new
        return value if items is None else kind(items)
    return value


def _code_serialized(link, obj, serialized_type):
    """A copy of the Serialized `obj` with its codable frames (_codable) in
    the codec the link calls for, or `obj` itself where none changed."""
    compression, frames = _frames_of(obj)
    new_frames = None
    for i, frame in enumerate(frames):
        codec = compression[i]
        if not _codable(codec, frame):
            continue
        if codec is None:
            codec, data = link.compress(_keep_raw, frame, (), {})
            if codec is None:
                continue
        else:
            recoded = link.recode(frame, codec)
            if recoded is None:
                continue
            codec, data = recoded
        if new_frames is None:
            new_frames = list(frames)
        compression[i] = codec
        new_frames[i] = data
    if new_frames is None:
        return obj
    new_header = dict(obj.header)
    new_header["compression"] = tuple(compression)
    return serialized_type(new_header, new_frames)


def current():
    """The Link of the dumps call running in this thread, or None."""
    return getattr(_current, "link", None)


def call_with(link, original, args, kwargs):
    """original(*args, **kwargs) (Dask's dumps) with `link` choosing each frame's codec."""
    _current.link = link
    try:
        return original(*args, **kwargs)
    finally:
        _current.link = None


def wrap_maybe_compress(original):
    def maybe_compress(payload, *args, **kwargs):
        link = getattr(_current, "link", None)
        if link is None:
            return original(payload, *args, **kwargs)
        return link.compress(original, payload, args, kwargs)

    maybe_compress.__wrapped__ = original
    maybe_compress.__name__ = getattr(original, "__name__", "maybe_compress")
    maybe_compress.__doc__ = getattr(original, "__doc__", None)
    return maybe_compress


def wrap_write(original, link_of):
    """TCP.write, then the connection's Link (link_of(comm)) told of a large write."""

    async def write(self, *args, **kwargs):
        start = time.perf_counter()
        nbytes = await original(self, *args, **kwargs)
        try:
            if isinstance(nbytes, int) and nbytes >= OBSERVE_BYTES:
                link = link_of(self)
                if link is not None:
                    link.observe(self, nbytes, time.perf_counter() - start)
        except Exception:  # noqa: BLE001 - a measurement must not fail a write
            pass
        return nbytes

    write.__wrapped__ = original
    write.__name__ = getattr(original, "__name__", "write")
    write.__qualname__ = getattr(original, "__qualname__", "write")
    write.__doc__ = getattr(original, "__doc__", None)
    return write
