"""The codec of an ApiVersions response body, which is not always in the version asked for: a
broker answers a version it does not know with a v0 body carrying UNSUPPORTED_VERSION, so that
the client can retry lower (KIP-511). `decode_body` and `encode_body` read and write either."""

from __future__ import annotations

from typing import Any

from protocol.contracts.kafka_errors import UNSUPPORTED_VERSION
from protocol.messages.api_versions_response import ApiVersionsResponse
from protocol.primitives import Buffer

_UNSUPPORTED_VERSION = UNSUPPORTED_VERSION.to_bytes(2, "big", signed=True)
"""The error code where every version's body starts, as it is on the wire."""


def decode_body(payload: Buffer, version: int, offset: int) -> Any:
    """The ApiVersions response body at `offset`: in `version`, or the v0 fallback (wrapped
    so that it is written back as v0 and filters see the usual attributes)."""
    cls = ApiVersionsResponse
    if payload[offset : offset + 2] == _UNSUPPORTED_VERSION:
        return _Version0(cls.decode(payload, 0, offset))
    return cls.decode(payload, version, offset)


def encode_body(msg: Any, version: int) -> bytes:
    if isinstance(msg, _Version0):
        encoded: bytes = msg.inner.encode(0)
    else:
        encoded = msg.encode(version)
    return encoded


class _Version0:
    """Wraps an ApiVersions v0 error body so filters see the usual attributes."""

    __slots__ = ("inner",)

    def __init__(self, inner: Any) -> None:
        object.__setattr__(self, "inner", inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.inner, name, value)
