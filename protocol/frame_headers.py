"""Request and response headers, and which header version goes with which API version.

A request frame (after the 4-byte size) is a request header followed by the body; the header
version depends on the API and its version: v2 (with tagged fields) for flexible API versions,
v1 otherwise, and v0 (no client id) only for ControlledShutdown v0. Responses use header v1 for
flexible versions and v0 otherwise, except ApiVersions, whose response header is always v0 so
that a client can parse it before it knows what the broker supports (KIP-511).

The first 8 bytes of every request header are the same in all versions (api key, api version,
correlation id), which is all the proxy needs to route a frame it does not decode:
:func:`peek_request_header`.
"""

from __future__ import annotations

from struct import Struct
from struct import error as StructError

from protocol.api_keys import API_KEYS, ApiKey
from protocol.errors import CodecError
from protocol.messages.request_header import RequestHeader
from protocol.messages.response_header import ResponseHeader
from protocol.primitives import Buffer

__all__ = [
    "RequestHeader",
    "ResponseHeader",
    "decode_request_header",
    "decode_response_header",
    "encode_request_header",
    "encode_response_header",
    "peek_request_header",
    "request_header_version",
    "response_header_version",
]

API_VERSIONS_KEY = int(ApiKey.API_VERSIONS)
CONTROLLED_SHUTDOWN_KEY = int(ApiKey.CONTROLLED_SHUTDOWN)

_PEEK = Struct(">hhi")
_CORRELATION_ID = Struct(">i")


def _flexible(api_key: int, api_version: int) -> bool:
    info = API_KEYS.get(api_key)
    if info is None:
        raise CodecError(f"unknown API key {api_key}")
    first = info.flexible_min_version
    return first is not None and api_version >= first


def request_header_version(api_key: int, api_version: int) -> int:
    """The request header version (0, 1 or 2) of ``api_version`` of ``api_key``.

    Raises CodecError for an API key unknown to both pinned Kafka releases: its flexibility,
    and so the length of its header, cannot be known.
    """
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 2 if _flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """The response header version (0 or 1); always 0 for ApiVersions."""
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if _flexible(api_key, api_version) else 0


def peek_request_header(frame: Buffer, offset: int = 0) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` from the fixed first 8 bytes of a request."""
    try:
        return _PEEK.unpack_from(frame, offset)
    except StructError:
        raise CodecError(f"request shorter than 8 bytes ({len(frame) - offset})") from None


def peek_correlation_id(frame: Buffer, offset: int = 0) -> int:
    """The correlation id of a response: its first 4 bytes, in every header version."""
    try:
        correlation_id: int = _CORRELATION_ID.unpack_from(frame, offset)[0]
        return correlation_id
    except StructError:
        raise CodecError(f"response shorter than 4 bytes ({len(frame) - offset})") from None


def decode_request_header(frame: Buffer, offset: int = 0) -> tuple[RequestHeader, int]:
    """Decode the request header at ``offset``; return it and the offset of the body."""
    api_key, api_version, _ = peek_request_header(frame, offset)
    version = request_header_version(api_key, api_version)
    return RequestHeader.decode_from(frame, version, offset)


def decode_response_header(
    frame: Buffer, api_key: int, api_version: int, offset: int = 0
) -> tuple[ResponseHeader, int]:
    """Decode the header of a response to ``api_key``/``api_version``; return it and the body
    offset. The request the response answers determines the header version."""
    version = response_header_version(api_key, api_version)
    return ResponseHeader.decode_from(frame, version, offset)


def encode_request_header(header: RequestHeader, out: bytearray) -> None:
    """Append ``header`` in the version its api key and version call for."""
    version = request_header_version(header.request_api_key, header.request_api_version)
    header.encode_into(out, version)


def encode_response_header(
    correlation_id: int, api_key: int, api_version: int, out: bytearray
) -> None:
    """Append a response header (no tagged fields) for a response to ``api_key``/``api_version``."""
    out += _CORRELATION_ID.pack(correlation_id)
    if response_header_version(api_key, api_version) >= 1:
        out.append(0)
