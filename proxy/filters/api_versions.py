"""ApiVersions negotiation, as an ordinary filter-chain member.

Clients pick the highest version both sides support. For every API Herald has a codec for,
the broker's range is narrowed to what Herald can parse; advertising a version Herald cannot
decode would break the client the first time that API needs decoding. APIs Herald has no codec
for pass through exactly as the broker advertises them: their frames are never decoded.

The body of an ApiVersions response is not always in the version asked for; its codec is
`protocol/api_versions.py`. An ApiVersions request newer than Herald's codec is answered by
Herald as a broker answers one newer than itself (KIP-511): `UNSUPPORTED_VERSION` in a v0
body naming the ApiVersions versions Herald reads, so the client asks again in one of them.
Forwarded, the broker might answer it in a version Herald cannot read, and the client would
learn nothing Herald narrowed.
"""

from __future__ import annotations

from typing import cast

from protocol.api_keys import ApiKey
from protocol.contracts.kafka_errors import UNSUPPORTED_VERSION
from protocol.message import Message
from protocol.messages import REQUESTS
from protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from proxy.filters.chain import NATIVE_NOTHING, Exchange, Filter, SessionContext

# SaslHandshake v0 is followed by bare SASL tokens that are not Kafka frames; from v1 on the
# tokens travel in SaslAuthenticate requests, which Herald can read and pass on.
_MIN_VERSIONS: dict[int, int] = {ApiKey.SASL_HANDSHAKE: 1}


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

    def answer_unreadable(self, api_key: int, version: int) -> tuple[Message, int] | None:
        if api_key != ApiKey.API_VERSIONS:
            return None
        low, high = codec_range(ApiKey.API_VERSIONS) or (0, 0)
        own = ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=low, max_version=high)
        return ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=[own]), 0

    async def on_response(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        # Not narrowed by isinstance: a v0 fallback body is a wrapper (protocol/api_versions.py)
        # that reads and writes through to the ApiVersionsResponse it holds.
        body = cast(ApiVersionsResponse, msg)
        kept = []
        changed = False
        for entry in body.api_keys:
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
        body.api_keys = kept
        return changed
