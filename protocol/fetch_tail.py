"""The tail of a Fetch response, found while the response is still arriving.

A Fetch response of a megabyte or more is mostly record data that Herald never needs to see.
Holding the whole frame before forwarding it doubles the time a consumer waits for every
fetch, so the proxy forwards such a response as it arrives. The one part it may have to change
is at the very end: the top-level tagged fields, where Fetch v16+ puts the KIP-951 node
endpoints. `FetchTailFinder` walks the structure chunk by chunk (skipping record data by its
length) to learn where that tail begins; `fit_tail` re-encodes a rewritten tail to exactly the
original length, because the frame's size prefix has already gone out.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from protocol.api_keys import ApiKey
from protocol.contracts.features import FETCH_FLEXIBLE_VERSION, TOPIC_ID_VERSION
from protocol.errors import CodecError
from protocol.messages.fetch_response import FetchResponse

# The first Fetch version the finder can walk: topics by id, flexible encoding. (The node
# endpoints that may need rewriting come later still: FETCH_NODE_ENDPOINTS_VERSION.)
FIRST_WALKABLE_VERSION = max(TOPIC_ID_VERSION, FETCH_FLEXIBLE_VERSION)
_FETCH_KEY = int(ApiKey.FETCH)

# A tagged field no Kafka version defines, used to pad a tail that shrank; readers skip tags
# they do not know. It sorts after every real tag, as the protocol wants tags ascending, and
# is below 128 so that it costs one byte: a pad costs two bytes at least (tag and length), so
# every shortfall but a single byte can be made up.
PAD_TAG = 127

_Step = tuple[int, bool]  # (byte count, skip): what the walk needs next
_Walk = Generator[_Step, bytes | None, None]

# throttle_time_ms, error_code, session_id: the fixed head of the body, then an empty
# `responses` array; `fit_tail` decodes a tail behind this to reuse the generated codec.
_EMPTY_BODY = bytes(10) + b"\x01"


def tail_walkable(api_key: int, version: int) -> bool:
    """Whether a response to `api_key`/`version` is a Fetch response whose tail
    `FetchTailFinder` can find while the rest streams past."""
    return api_key == _FETCH_KEY and version >= FIRST_WALKABLE_VERSION


class FetchTailFinder:
    """Fed a Fetch response of v13+ (without its size prefix) in chunks, in order.

    `feed` answers how many leading bytes of each chunk come before the top-level tagged
    fields; once `done`, the rest of the frame is the tail. Only structure bytes are kept
    (a few at a time); record data is counted past, never copied.
    """

    __slots__ = ("_walk", "_need", "_skip", "_pending", "done")

    def __init__(self, size: int) -> None:
        self._walk = _walk_response(size)
        self._need, self._skip = next(self._walk)
        self._pending = bytearray()
        self.done = False

    def feed(self, data: bytes | memoryview) -> int:
        """How many leading bytes of `data` precede the tail (all of them until it is found)."""
        i, n = 0, len(data)
        while not self.done and i < n:
            if self._skip:
                take = min(self._need, n - i)
                i += take
                self._need -= take
                if self._need:
                    break
                self._advance(None)
            else:
                take = min(self._need - len(self._pending), n - i)
                self._pending += data[i : i + take]
                i += take
                if len(self._pending) < self._need:
                    break
                chunk = bytes(self._pending)
                self._pending.clear()
                self._advance(chunk)
        return i

    def skippable(self) -> int:
        """How many bytes come next that the walk passes over unread (record data, mostly):
        they may be forwarded without being fed, then reported with `skipped`."""
        return self._need if self._skip and not self.done else 0

    def skipped(self, n: int) -> None:
        if not 0 < n <= self.skippable():
            raise ValueError(f"cannot skip {n} bytes here")
        self._need -= n
        if not self._need:
            self._advance(None)

    def _advance(self, value: bytes | None) -> None:
        try:
            self._need, self._skip = self._walk.send(value)
        except StopIteration:
            self.done = True


class _Cursor:
    """Position bookkeeping for the walk, so every length is checked against the frame."""

    __slots__ = ("pos", "size")

    def __init__(self, size: int) -> None:
        self.pos = 0
        self.size = size

    def take(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.size:
            raise CodecError(f"Fetch response: {what} runs past the end of the frame")
        self.pos += n
        return n


def _read(cur: _Cursor, n: int, what: str) -> Generator[_Step, bytes | None, bytes]:
    data = yield (cur.take(n, what), False)
    assert data is not None
    return data


def _skip(cur: _Cursor, n: int, what: str) -> Generator[_Step, bytes | None, None]:
    if n:
        yield (cur.take(n, what), True)


def _varint(cur: _Cursor, what: str) -> Generator[_Step, bytes | None, int]:
    value = shift = 0
    for _ in range(5):
        (b,) = yield from _read(cur, 1, what)
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7
    raise CodecError(f"Fetch response: {what} is a varint longer than 5 bytes")


def _compact_length(cur: _Cursor, what: str) -> Generator[_Step, bytes | None, int]:
    """A compact array or bytes length: -1 for null."""
    return (yield from _varint(cur, what)) - 1


def _skip_tags(cur: _Cursor, what: str) -> Generator[_Step, bytes | None, None]:
    for _ in range((yield from _varint(cur, what))):
        yield from _varint(cur, what)
        yield from _skip(cur, (yield from _varint(cur, what)), what)


def _walk_response(size: int) -> _Walk:
    """Response header v1, then the FetchResponse body of v13+ up to its tagged fields."""
    cur = _Cursor(size)
    yield from _skip(cur, 4, "correlation id")
    yield from _skip_tags(cur, "header tagged fields")
    yield from _skip(cur, 10, "throttle, error code and session id")
    topics = yield from _compact_length(cur, "responses")
    if topics < 0:
        raise CodecError("Fetch response: null responses array")
    for _ in range(topics):
        yield from _skip(cur, 16, "topic id")
        for _ in range((yield from _compact_length(cur, "partitions"))):
            yield from _skip(cur, 30, "partition header")
            for _ in range((yield from _compact_length(cur, "aborted transactions"))):
                yield from _skip(cur, 16, "aborted transaction")
                yield from _skip_tags(cur, "aborted transaction tagged fields")
            yield from _skip(cur, 4, "preferred read replica")
            records = yield from _compact_length(cur, "records")
            yield from _skip(cur, max(records, 0), "records")
            yield from _skip_tags(cur, "partition tagged fields")
        yield from _skip_tags(cur, "topic tagged fields")


def decode_tail(tail: bytes, version: int) -> Any:
    """The top-level tagged fields of a Fetch response, as a FetchResponse with no topics."""
    return FetchResponse.decode(_EMPTY_BODY + tail, version)


def fit_tail(msg: Any, version: int, size: int) -> bytes:
    """Encode the tagged fields of `msg` in exactly `size` bytes.

    A shorter encoding is padded with an unknown tag. One that does not fit (longer, or
    exactly one byte shorter) loses node endpoints from the end until it does: a client that
    misses a leader's endpoint asks for Metadata instead, which is the behaviour before
    KIP-951, so nothing is lost but time.
    """
    while True:
        encoded = _encode_tail(msg, version)
        short = size - len(encoded)
        if short == 0:
            return encoded
        if short > 0:
            padded = _pad(msg, version, size, short)
            if padded is not None:
                return padded
        if not msg.node_endpoints:
            raise CodecError(f"Fetch response tail of {len(encoded)} bytes cannot fit {size}")
        msg.node_endpoints = msg.node_endpoints[:-1]


def _encode_tail(msg: Any, version: int) -> bytes:
    encoded: bytes = msg.encode(version)
    return encoded[len(_EMPTY_BODY) :]


def _pad(msg: Any, version: int, size: int, short: int) -> bytes | None:
    """Add a PAD_TAG field bringing the tail to `size`, if some payload length does that."""
    fields = dict(msg.unknown_tagged_fields or {})
    if PAD_TAG in fields:
        return None
    # The field costs its tag, its length varint and a possibly longer count: try payloads
    # from the largest that could fit down to empty.
    for payload in range(short - 2, max(short - 8, -1), -1):
        msg.unknown_tagged_fields = {**fields, PAD_TAG: bytes(payload)}
        encoded = _encode_tail(msg, version)
        if len(encoded) == size:
            return encoded
    msg.unknown_tagged_fields = fields or None
    return None
