"""ApiVersions negotiation, as an ordinary filter-chain member.

Clients pick the highest version both sides support. For every API Herald has a codec for,
the broker's range is narrowed to what Herald can parse; advertising a version Herald cannot
decode would break the client the first time that API needs decoding. APIs Herald has no codec
for pass through exactly as the broker advertises them: their frames are never decoded.

The body of an ApiVersions response is not always in the version asked for: a broker answers a
version it does not know with a v0 body carrying UNSUPPORTED_VERSION, so that the client can
retry lower (KIP-511). `decode_body` and `encode_body` are the session's codec for it.
"""

from __future__ import annotations

from typing import Any

from protocol.api_keys import ApiKey
from protocol.contracts.kafka_errors import UNSUPPORTED_VERSION
from protocol.messages import REQUESTS, RESPONSES
from protocol.primitives import Buffer
from proxy.filters.chain import NATIVE_NOTHING, Exchange, Filter, SessionContext

# SaslHandshake v0 is followed by bare SASL tokens that are not Kafka frames; from v1 on the
# tokens travel in SaslAuthenticate requests, which Herald can read and pass on.
_MIN_VERSIONS = {ApiKey.SASL_HANDSHAKE: 1}
_UNSUPPORTED_VERSION = UNSUPPORTED_VERSION.to_bytes(2, "big")  # where every version's body
# starts: the error code


def decode_body(payload: Buffer, version: int, offset: int) -> Any:
    """The ApiVersions response body at `offset`: in `version`, or the v0 fallback (wrapped
    so that it is written back as v0 and filters see the usual attributes)."""
    cls = RESPONSES[ApiKey.API_VERSIONS]
    if payload[offset : offset + 2] == _UNSUPPORTED_VERSION:
        return _Version0(cls.decode(payload, 0, offset))
    return cls.decode(payload, version, offset)


def encode_body(msg: Any, version: int) -> bytes:
    if isinstance(msg, _Version0):
        return msg.inner.encode(0)
    return msg.encode(version)


class _Version0:
    """Wraps an ApiVersions v0 error body so filters see the usual attributes."""

    __slots__ = ("inner",)

    def __init__(self, inner: Any) -> None:
        object.__setattr__(self, "inner", inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.inner, name, value)


def codec_range(api_key: int) -> tuple[int, int] | None:
    cls = REQUESTS.get(api_key)
    if cls is None:
        return None
    return max(cls.MIN_VERSION, _MIN_VERSIONS.get(api_key, 0)), cls.MAX_VERSION


class ApiVersionsNegotiator(Filter):
    name = "api_versions"
    # The engine takes over nothing this member reads: it negotiates versions in Python.
    native = NATIVE_NOTHING

    def wants_response(self, api_key: int, version: int) -> bool:
        return api_key == ApiKey.API_VERSIONS

    async def on_response(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Any
    ) -> bool:
        kept = []
        changed = False
        for entry in msg.api_keys:
            limits = codec_range(entry.api_key)
            if limits is None:
                kept.append(entry)
                continue
            low = max(entry.min_version, limits[0])
            high = min(entry.max_version, limits[1])
            if low > high:
                changed = True
                continue
            if (low, high) != (entry.min_version, entry.max_version):
                entry.min_version, entry.max_version = low, high
                changed = True
            kept.append(entry)
        msg.api_keys = kept
        return changed
