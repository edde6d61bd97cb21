"""The proxy's narrow view of the codec: what a session needs from a frame, and no more.

Request headers are read to learn the API, version, correlation id and client id of every
frame; bodies are decoded only when a filter asked for that (API, version). Re-encoding keeps
the original header bytes and replaces only the body.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from protocol.api_keys import ApiKey
from protocol.errors import CodecError
from protocol.headers import (
    decode_request_header,
    decode_response_header,
    peek_correlation_id,
    peek_request_header,
)
from protocol.messages import REQUESTS, RESPONSES
from protocol.peek import produce_acks

_INT16 = struct.Struct(">h")


@dataclass(slots=True)
class RequestHead:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def parse_request_header(payload: bytes) -> RequestHead:
    """API, version, correlation id and client id: the same bytes in header v1 and v2.

    Parsed by hand rather than by the header codec so that requests of APIs Herald has never
    heard of (newer than its specs) still pass through.
    """
    api_key, api_version, correlation_id = peek_request_header(payload)
    if len(payload) < 10:
        raise CodecError("request header truncated before the client id")
    (size,) = _INT16.unpack_from(payload, 8)
    if size < 0:
        client_id = None
    elif 10 + size > len(payload):
        raise CodecError("request header truncated inside the client id")
    else:
        client_id = payload[10 : 10 + size].decode("utf-8", "replace")
    return RequestHead(api_key, api_version, correlation_id, client_id)


def decode_request(head: RequestHead, payload: bytes) -> tuple[int, Any]:
    """Decode a request body (only for APIs with a codec); return (body offset, message)."""
    cls = REQUESTS.get(head.api_key)
    if cls is None:
        raise CodecError(f"no codec for API key {head.api_key}")
    _, offset = decode_request_header(payload)
    return offset, cls.decode(payload, head.api_version, offset)


def encode_request(head: RequestHead, payload: bytes, offset: int, msg: Any) -> bytes:
    return payload[:offset] + msg.encode(head.api_version)


def expects_response(head: RequestHead, payload: bytes) -> bool:
    """False only for Produce with acks=0, which the broker never answers."""
    if head.api_key != ApiKey.PRODUCE:
        return True
    _, offset = decode_request_header(payload)
    return produce_acks(payload, head.api_version, offset) != 0


def response_correlation_id(payload: bytes) -> int:
    return peek_correlation_id(payload)


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    """Decode a response body; return (body offset, message)."""
    _, offset = decode_response_header(payload, api_key, version)
    if api_key == ApiKey.API_VERSIONS and payload[offset : offset + 2] == b"\x00\x23":
        # A broker answers an ApiVersions version it does not know with a v0 body.
        return offset, _Version0(RESPONSES[api_key].decode(payload, 0, offset))
    # Decoding from a memoryview keeps `records` fields as views: a Fetch response is decoded
    # (for its node endpoints) without copying its record data.
    return offset, RESPONSES[api_key].decode(memoryview(payload), version, offset)


def encode_response(api_key: int, version: int, payload: bytes, offset: int, msg: Any) -> bytes:
    if isinstance(msg, _Version0):
        return payload[:offset] + msg.inner.encode(0)
    return payload[:offset] + msg.encode(version)


class _Version0:
    """Wraps an ApiVersions v0 error body so filters see the usual attributes."""

    __slots__ = ("inner",)

    def __init__(self, inner: Any) -> None:
        object.__setattr__(self, "inner", inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.inner, name, value)
