"""The proxy's narrow view of the codec: what a session needs from a frame, and no more.

Request headers are read to learn the API, version, correlation id and client id of every
frame; bodies are decoded only when a filter asked for that (API, version). Re-encoding keeps
the original header bytes and replaces only the body.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import trio

from protocol.api_keys import ApiKey
from protocol.errors import CodecError
from protocol.framing import FrameDecoder, frame
from protocol.headers import RequestHeader, response_header_version
from protocol.messages import REQUESTS, RESPONSES
from protocol.peek import produce_acks

__all__ = ["frame", "ZERO_UUID"]

ZERO_UUID = UUID(int=0)
_INT32 = struct.Struct(">i")
_UNSUPPORTED_VERSION = 35


@dataclass(slots=True)
class RequestHead:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def parse_request_header(payload: bytes) -> RequestHead:
    header, offset = RequestHeader.decode_frame(payload)
    return RequestHead(
        header.request_api_key, header.request_api_version, header.correlation_id,
        header.client_id, offset,
    )


def decode_request(head: RequestHead, payload: bytes) -> Any:
    cls = REQUESTS.get(head.api_key)
    if cls is None:
        raise CodecError(f"no codec for API key {head.api_key}")
    return cls.decode(memoryview(payload)[head.body_offset:], head.api_version)


def encode_request(head: RequestHead, payload: bytes, msg: Any) -> bytes:
    return payload[: head.body_offset] + msg.encode(head.api_version)


def expects_response(head: RequestHead, payload: bytes) -> bool:
    """False only for Produce with acks=0, which the broker never answers."""
    if head.api_key != ApiKey.PRODUCE:
        return True
    return produce_acks(memoryview(payload)[head.body_offset:], head.api_version) != 0


def response_correlation_id(payload: bytes) -> int:
    if len(payload) < 4:
        raise CodecError("response shorter than its correlation id")
    return _INT32.unpack_from(payload)[0]


def _response_body_offset(api_key: int, version: int, payload: bytes) -> int:
    if response_header_version(api_key, version) == 0:
        return 4
    # Response header v1: correlation id, then a tagged-field section.
    from protocol.primitives import Reader

    reader = Reader(payload, 4)
    reader.skip_tagged_fields()
    return reader.pos


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    """Decode a response body; return (body offset, message)."""
    offset = _response_body_offset(api_key, version, payload)
    body = memoryview(payload)[offset:]
    if api_key == ApiKey.API_VERSIONS and len(body) >= 2 and body[0:2] == b"\x00\x23":
        # A broker answers an ApiVersions version it does not know with a v0 body.
        return offset, _Version0(RESPONSES[api_key].decode(body, 0))
    return offset, RESPONSES[api_key].decode(body, version)


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


async def fetch_brokers(host: str, port: int) -> list[tuple[int, str, int]]:
    """Herald's own Metadata request (no topics) to learn the cluster's brokers."""
    version = 12  # accepted by Kafka 3.x and 4.x alike
    request = REQUESTS[ApiKey.METADATA](topics=[], allow_auto_topic_creation=False)
    header = RequestHeader(
        request_api_key=ApiKey.METADATA, request_api_version=version,
        correlation_id=1, client_id="herald",
    )
    payload = header.encode(2) + request.encode(version)
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(frame(payload))
        decoder = FrameDecoder()
        while True:
            data = await stream.receive_some(65536)
            if not data:
                raise ValueError("broker closed the connection during Metadata")
            decoder.feed(data)
            frames = decoder.frames()
            if frames:
                break
    _, msg = decode_response(ApiKey.METADATA, version, frames[0])
    return [(b.node_id, b.host, b.port) for b in msg.brokers]
