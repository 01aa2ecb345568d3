# Type stubs of the extension dask_caps._core (python/src/module.cpp), which
# the package dask_caps re-exports. Each signature is the one pybind11
# gives the function (its names, order, keyword-only marker and defaults),
# with the types of what the function accepts where pybind11 says only
# `object`. tests/python/test_stubs.py compares this file with the module.
import os
from typing import Any, Iterable, Literal, Mapping, final

from typing_extensions import Buffer

__version__: str
CODECS: tuple[str, ...]
LIMITS: dict[str, int]

class Error(Exception):
    """An error of the dask-caps core: str(e) is its one-line message."""

    kind: str
    offset: int | None

@final
class CoreBytes:
    """A buffer the core made, read through a read-only memoryview."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

def probe(
    python: str | bytes | os.PathLike[str] | os.PathLike[bytes] | Literal[False] | None = None,
    *,
    timeout: float = 60.0,
) -> dict[str, Any]: ...
def negotiate(
    local: Mapping[str, Any],
    remote: Mapping[str, Any],
    *,
    same_host: bool | None = None,
    local_name: str = "local",
    remote_name: str = "remote",
    local_role: str | None = None,
    remote_role: str | None = None,
    local_capabilities: Mapping[str, Any] | None = None,
    remote_capabilities: Mapping[str, Any] | None = None,
    python_rule: str = "same-minor",
) -> dict[str, Any]: ...
def compress(codec: str | None, data: Buffer, *, level: int | None = None, threads: int = 0) -> bytes: ...
def decompress(codec: str | None, data: Buffer, max_output: int = 2147483648) -> bytes: ...
def recode(
    frames: Iterable[Buffer],
    *,
    codec: str | None = None,
    pickle_protocol: int | Literal["keep"] | None = None,
    layout: Literal["keep", "cpu"] | None = None,
    accept_codecs: Iterable[str | None] | None = None,
    inline_buffers: bool = False,
    keep_unconvertible: bool = False,
    zstd_level: int = 3,
    zstd_threads: int = 0,
    dask_release: str = "2022.12",
    shard_bytes: int = 67108864,
    limits: Mapping[str, int] | None = None,
) -> list[Buffer]: ...
def deliver(
    receiver: Mapping[str, Any],
    *,
    writes: Iterable[str] | None = None,
    codec: str | Literal[False] | None = None,
    pickle_protocol: int | None = None,
    layout: Literal["cpu", "keep"] | None = None,
    keep_layout_for_schedulers: bool = False,
) -> dict[str, Any]: ...
def dask_release(distributed_version: str) -> str: ...
def read_capabilities(
    value: Any, *, limits: Mapping[str, int] | None = None
) -> tuple[dict[str, Any], None] | tuple[None, dict[str, Any]]: ...
def read_peer(
    handshake: Mapping[str, Any], *, limits: Mapping[str, int] | None = None
) -> tuple[dict[str, Any], dict[str, Any] | None]: ...
def capabilities(
    codecs: Iterable[str], *, max_pickle_protocol: int = 5, gpu: bool = False, role: str | None = None
) -> dict[str, Any]: ...
def inspect(frames: Iterable[Buffer], *, dis: bool = False, limits: Mapping[str, int] | None = None) -> dict[str, Any]: ...

@final
class LinkChooser:
    """The codec each frame of one connection should travel in (docs/link-choice.md)."""

    def __init__(
        self,
        receiver_codecs: Iterable[str | None],
        *,
        same_host: bool = False,
        pin: str | None = None,
        zstd_levels: list[int] = [1, 3],
        dask_release: str = "newest",
        vote_bytes: int = 1048576,
        margin: float = 0.15,
        votes: int = 3,
        host: str = "",
    ) -> None: ...
    def observe_socket(self, fd: int) -> bool: ...
    def observe_write(self, nbytes: int, seconds: float) -> None: ...
    def take_host_rate(self) -> bool: ...
    def observe_compress(self, codec: str, nbytes: int, seconds: float, level: int | None = None) -> None: ...
    def choose(self, frame: Buffer) -> str | None: ...
    @property
    def candidates(self) -> list[str]: ...
    @property
    def changed(self) -> bool: ...
    @property
    def changes(self) -> int: ...
    @property
    def current(self) -> str | None: ...
    @property
    def current_codec(self) -> str | None: ...
    @property
    def last_change(self) -> dict[str, Any] | None: ...
    @property
    def level(self) -> int | None: ...
    @property
    def may_code(self) -> bool: ...
    @property
    def rate(self) -> float | None: ...
    @property
    def ratio(self) -> float: ...
    @property
    def rate_source(self) -> str: ...
    @property
    def rtt(self) -> float | None: ...
    @property
    def slowdown(self) -> float: ...
