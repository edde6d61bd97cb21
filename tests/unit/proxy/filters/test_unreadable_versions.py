"""Versions beyond Herald's codec: members never decode what the codec cannot read; an
ApiVersions request newer than Herald gets Herald's UNSUPPORTED_VERSION answer, which a client
reads as a broker's (KIP-511); an API no member reads passes whatever its version."""

from __future__ import annotations

from typing import Any

from protocol.api_keys import API_KEYS, ApiKey
from protocol.api_versions import decode_body
from protocol.contracts.kafka_errors import UNSUPPORTED_VERSION
from protocol.frame_headers import encode_response_header
from protocol.messages import REQUESTS
from proxy.config.proxy_yaml import parse_config
from proxy.filters.address_rewrite import AddressRewriter
from proxy.filters.api_versions import ApiVersionsNegotiator, codec_range
from proxy.filters.chain import Filter, FilterChain, decodable
from proxy.native.capabilities import CAPABILITIES
from proxy.native.path_choice import PYTHON, passable_table
from proxy.upstream.brokers import BrokerDirectory

CONFIG = parse_config({"upstream": {"bootstrap": "127.0.0.1:9092"},
                       "listen": {"bootstrap": "127.0.0.1:0"}})
BEYOND = 127  # versions walked past each codec's newest


class _ReadsEverything(Filter):
    """A member that asks for every request and response, as a policy member may."""

    name = "everything"

    def wants_request(self, api_key: int, version: int) -> bool:
        return True

    def wants_response(self, api_key: int, version: int) -> bool:
        return True


def _chain(*extra: Filter) -> FilterChain:
    return FilterChain([ApiVersionsNegotiator(), AddressRewriter(BrokerDirectory(CONFIG.listen)),
                        *extra])


def _walk() -> list[tuple[int, int]]:
    """Every API key of the pinned releases and three no release defines, at every version
    from 0 to BEYOND past the newest the codec (or the releases) know."""
    pairs = []
    for api in [*API_KEYS, 200, 1000, 32767]:
        cls = REQUESTS.get(api)
        newest = cls.MAX_VERSION if cls is not None else (
            API_KEYS[api].max_version if api in API_KEYS else 0) or 0
        pairs += [(api, v) for v in range(newest + BEYOND + 1)]
    return pairs


def test_members_never_get_a_version_the_codec_cannot_read() -> None:
    chain = _chain(_ReadsEverything())
    for api, version in _walk():
        wanting = {f for f in chain.filters
                   if f.wants_request(api, version) or f.wants_response(api, version)}
        readers = set(chain.for_request(api, version) + chain.for_response(api, version))
        if decodable(api, version):
            assert readers == wanting and not chain.unreadable(api, version), (api, version)
        else:
            assert not readers and set(chain.unreadable(api, version)) == wanting, (api, version)


def test_every_version_is_read_forwarded_or_answered() -> None:
    """The walk's outcomes: read by members (decodable), forwarded unread (no member asks),
    answered by Herald (ApiVersions beyond the codec), or refused as a broker refuses a
    version it does not know (a member must read it and cannot); nothing else."""
    chain = _chain()
    answered = refused = forwarded = read = 0
    for api, version in _walk():
        if chain.for_request(api, version) or chain.for_response(api, version):
            read += 1
            continue
        if not chain.unreadable(api, version):
            forwarded += 1
            continue
        answer = chain.answer_unreadable(api, version)
        if api == ApiKey.API_VERSIONS:
            assert answer is not None, version
            answered += 1
        else:
            assert answer is None
            refused += 1
    assert answered == BEYOND  # every ApiVersions version past the codec, none within it
    assert read and forwarded and refused


def test_the_api_versions_answer_is_what_a_client_reads_as_a_brokers() -> None:
    chain = _chain()
    newest = REQUESTS[ApiKey.API_VERSIONS].MAX_VERSION
    for version in (newest + 1, newest + 64, newest + BEYOND):
        answer = chain.answer_unreadable(ApiKey.API_VERSIONS, version)
        assert answer is not None
        body, body_version = answer
        assert body_version == 0
        frame = bytearray()
        encode_response_header(7, ApiKey.API_VERSIONS, version, frame)
        assert len(frame) == 4  # header v0 whatever the version: the client reads it first
        frame += body.encode(body_version)
        # The client decodes the v0 fallback from the error code, as Herald does a broker's.
        msg: Any = decode_body(bytes(frame), version, 4)
        assert msg.error_code == UNSUPPORTED_VERSION
        assert [(k.api_key, k.min_version, k.max_version) for k in msg.api_keys] == [
            (ApiKey.API_VERSIONS, *codec_range(ApiKey.API_VERSIONS))]


def test_unreadable_versions_are_never_passed_by_the_engine() -> None:
    """The native engine's table marks a version members would read and cannot Python's,
    so the engine hands it over instead of passing it around the negotiation."""
    chain = _chain()
    table = passable_table(chain)
    width = CAPABILITIES.max_version
    newest = REQUESTS[ApiKey.API_VERSIONS].MAX_VERSION
    for version in range(newest + 1, width):
        assert chain.unreadable(ApiKey.API_VERSIONS, version)
        assert table[ApiKey.API_VERSIONS * width + version] == PYTHON, version


def test_the_lookup_cache_is_bounded() -> None:
    chain = _chain()
    for version in range(10_000):
        chain.for_request(5000, version)
    assert len(chain._members) <= 4096
