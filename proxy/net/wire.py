"""The proxy's narrow view of the codec: what a session needs from a frame, and no more.

Request headers are read to learn the API, version, correlation id and client id of every
frame; bodies are decoded only when a filter asked for that (API, version). Re-encoding keeps
the original header bytes and replaces only the body.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from protocol import api_versions
from protocol.api_keys import ApiKey
from protocol.errors import CodecError
from protocol.frame_headers import (
    decode_response_header,
    peek_correlation_id,
    peek_request_header,
    request_header_version,
)
from protocol.message import Message
from protocol.messages import REQUESTS, RESPONSES
from protocol.peek import answered, skip_tagged_fields
from protocol.primitives import Buffer

_INT16 = struct.Struct(">h")


@dataclass(slots=True)
class RequestHead:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the body starts; -1 for APIs whose header length is unknown


# Header version (0, 1, 2) by (api key, version), -1 for API keys no pinned release defines.
_HEADER_VERSION: dict[tuple[int, int], int] = {}


def _header_version(api_key: int, api_version: int) -> int:
    key = (api_key, api_version)
    version = _HEADER_VERSION.get(key)
    if version is None:
        try:
            version = request_header_version(api_key, api_version)
        except CodecError:
            version = -1
        if len(_HEADER_VERSION) < 4096:  # bounded: a client picks the versions it sends
            _HEADER_VERSION[key] = version
    return version


def parse_request_header(payload: Buffer) -> RequestHead:
    """API, version, correlation id, client id and where the body starts: every request is
    read this once, and whatever needs the body (a filter's decode, the acks of a Produce)
    starts from `body_offset`.

    Parsed by hand rather than by the header codec so that requests of APIs Herald has never
    heard of (newer than its specs) still pass through.
    """
    api_key, api_version, correlation_id = peek_request_header(payload)
    version = _header_version(api_key, api_version)
    if version == 0:
        return RequestHead(api_key, api_version, correlation_id, None, 8)
    if len(payload) < 10:
        raise CodecError("request header truncated before the client id")
    (size,) = _INT16.unpack_from(payload, 8)
    if size < 0:
        client_id = None
        offset = 10
    elif 10 + size > len(payload):
        raise CodecError("request header truncated inside the client id")
    else:
        offset = 10 + size
        client_id = str(payload[10:offset], "utf-8", "replace")
    if version == 2:
        try:
            offset = skip_tagged_fields(payload, offset)
        except CodecError:
            # Only a member decoding the body needs it; the frame itself still passes, and
            # the broker answers (or closes on) a header it cannot read.
            offset = -1
    elif version < 0:
        offset = -1
    return RequestHead(api_key, api_version, correlation_id, client_id, offset)


def decode_request(head: RequestHead, payload: bytes) -> tuple[int, Message]:
    """Decode a request body (only for APIs with a codec); return (body offset, message)."""
    cls = REQUESTS.get(head.api_key)
    if cls is None or head.body_offset < 0:
        raise CodecError(f"no codec for API key {head.api_key}")
    return head.body_offset, cls.decode(payload, head.api_version, head.body_offset)


def encode_request(head: RequestHead, payload: bytes, offset: int, msg: Message) -> bytes:
    return payload[:offset] + msg.encode(head.api_version)


def expects_response(head: RequestHead, payload: Buffer) -> bool:
    """False only for a request the broker never answers (Produce with acks=0)."""
    return answered(head.api_key, head.api_version, payload, head.body_offset)


def response_correlation_id(payload: Buffer) -> int:
    return peek_correlation_id(payload)


# Responses whose body is not always in the version asked for: (decode, encode) of the body.
_BODY_CODECS: dict[
    int, tuple[Callable[[Buffer, int, int], Message], Callable[[Message, int], bytes]]
] = {
    ApiKey.API_VERSIONS: (api_versions.decode_body, api_versions.encode_body),
}


def decode_response(api_key: int, version: int, payload: Buffer) -> tuple[int, Message]:
    """Decode a response body; return (body offset, message)."""
    _, offset = decode_response_header(payload, api_key, version)
    special = _BODY_CODECS.get(api_key)
    if special is not None:
        return offset, special[0](payload, version, offset)
    # Decoding from a memoryview keeps `records` fields as views: a Fetch response is decoded
    # (for its node endpoints) without copying its record data.
    return offset, RESPONSES[api_key].decode(memoryview(payload), version, offset)


def encode_response(
    api_key: int, version: int, payload: Buffer, offset: int, msg: Message
) -> bytes:
    special = _BODY_CODECS.get(api_key)
    body = msg.encode(version) if special is None else special[1](msg, version)
    return bytes(payload[:offset]) + body
