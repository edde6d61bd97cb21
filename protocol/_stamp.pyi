"""The types of the C extension `protocol/_stamp.c` (the stamper's hot loops and the link
memory), for the type checker: the C code parses its arguments itself and raises TypeError on
anything else; `protocol.stamping` and `interceptors.trace_links` are its Python references."""

from typing import final

from protocol.primitives import Buffer

_Column = bytes | list[bytes] | tuple[bytes, list[bytes | None]]
_Position = tuple[str, int, int]

def hex_column(head: bytes, raw: bytes, n: int, chunk: int,
               spec: tuple[tuple[bytes, int], ...]) -> list[bytes]: ...
def watched(buf: Buffer, start: int, end: int, count: int, keys: tuple[bytes, ...],
            prefixes: tuple[bytes, ...]) -> list[int]: ...
def append(buf: Buffer, start: int, end: int, count: int, added: int,
           columns: tuple[_Column, ...]) -> bytes: ...

@final
class LinkMemory:
    def __init__(self, capacity: int, ttl_s: float, max_parents: int) -> None: ...
    def remember(self, scope: Buffer, trace: Buffer, topic: str | Buffer, partition: int,
                 offset: int, now: float) -> tuple[int, int]: ...
    def parents(self, scope: Buffer, trace: Buffer, now: float
                ) -> tuple[tuple[_Position, ...] | str, tuple[int, int, int] | None]: ...
    def counters(self) -> tuple[int, ...]: ...
    def capsule(self) -> object: ...  # the same memory, for the native relay
    def __len__(self) -> int: ...
