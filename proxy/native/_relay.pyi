"""The types of the C extension `proxy/native/_relay.c` (the native relay engine and its pure
pieces), for the type checker: the C code parses its arguments itself and raises TypeError on
anything else. The aliases below exist only here; the plan modules import them for checking.
"""

from collections.abc import Sequence
from typing import TypedDict, final

from protocol.primitives import Buffer

MAX_API: int
MAX_VERSION: int

ColumnWire = tuple[int, bytes, bytes | None, bool, bool, bool]
"""One column of a plan: (kind, key wire form, value or None, sampled, per batch, keeps)."""

LinksWire = (tuple[object, bytes, bytes, bool]
             | tuple[object, bytes, bytes, bool, Buffer | None]
             | tuple[object, bytes, bytes, bool, Buffer | None, Buffer])
"""A plan's links: (link memory capsule, scope, link header key's wire form, linked records
to Python[, the names of the topic ids or None[, the lost parents header key's wire form]])."""

PlanWire = tuple[tuple[ColumnWire, ...], tuple[bytes, ...], tuple[bytes, ...], int, int, int,
                 bytes, int, int, LinksWire | None]
"""A stamp or fetch plan as the plan modules build it: (columns, watched keys, watched
prefixes, max batch records, max request records, max batch bytes, sorted topic ids 16 bytes
each, max batch decompressed, max request decompressed, links or None). The C also takes it
without its last one, two or three."""

Counts = tuple[int, int, int, int, tuple[int, ...], tuple[int, ...]]
"""(batches, records, kept, kept_batches, compressed batches by codec id, link counts in the
order of `protocol.contracts.native_relay.LINK_COUNTS`)."""

_Pair = tuple[int, tuple[int, ...], float, tuple[int, ...], float]
_Directions = tuple[int, int, int, int]  # by direction, in the order of
# protocol.contracts.native_relay.BYTE_DIRECTIONS (a direction's place: BYTE_COUNT)

class _Stamping(TypedDict):
    api: int
    versions: tuple[int, int]
    codecs: tuple[str, ...]
    columns: tuple[str, ...]

class _Scanning(TypedDict):
    api: int
    versions: tuple[int, int]
    codecs: tuple[str, ...]
    share_api: int
    share_versions: tuple[int, int]

class _Capabilities(TypedDict):
    max_api: int
    max_version: int
    table_values: tuple[str, ...]
    reasons: dict[str, str]
    stamp: _Stamping
    scan: _Scanning
    tags: dict[int, tuple[int, int]]
    tls: bool
    openssl_version: int

def capabilities() -> _Capabilities: ...
def stamp_produce(frame: Buffer, plan: PlanWire, trace_draws: Buffer, msg_draws: Buffer,
                  now_ms: int, /) -> tuple[bytes, Counts] | tuple[None, str]: ...
def scan_fetch(frame: Buffer, api: int, version: int, plan: PlanWire, check_tags: bool, /
               ) -> Counts | tuple[None, str]: ...
def valid_traceparent(value: bytes | None, /) -> bool: ...
def valid_tracestate(value: bytes | None, /) -> bool: ...
def crc32c(data: Buffer, table: bool = ..., /) -> int: ...
def codec_decompress(codec: int, data: Buffer, limit: int, /) -> bytes | tuple[None, str]: ...
def codec_compress(codec: int, data: Buffer, /) -> bytes: ...

@final
class Engine:
    def __init__(self, bounds: Sequence[float], grow_limit: int = ...) -> None: ...
    def register(self, session_id: int, client_fd: int, upstream_fd: int, table: Buffer,
                 max_frame: int, max_in_flight: int, buffer_size: int, idle_timeout: float,
                 frame_timeout: float, prefill: Buffer,
                 stamp: tuple[PlanWire, int, int] | None = ...,
                 fetch: tuple[PlanWire, int, int] | None = ..., frame_age: float = ...,
                 handover_s: float = ..., client_tls: object | None = ...,
                 upstream_tls: object | None = ...) -> None: ...
    def stop(self, session_id: int, /) -> bool: ...
    def events(self) -> list[int]: ...
    def take(self, session_id: int, /) -> tuple[str, str, bytes, bytes,
                                                list[tuple[int, int, int, float]], int, int,
                                                float]: ...
    def collect(self) -> tuple[_Directions, dict[tuple[int, int], _Pair]]: ...
    def collect_stamped(self) -> dict[int, Counts]: ...
    def close(self) -> None: ...
    @property
    def notify_fd(self) -> int: ...
    @property
    def tls_bytes(self) -> _Directions: ...
    @property
    def grown(self) -> int: ...
    @property
    def walks(self) -> tuple[int, int, int]: ...
    @property
    def spliced(self) -> int: ...
