"""The session's one pass over a request header agrees with the header codec."""

from __future__ import annotations

import pytest

from protocol.api_keys import API_KEYS, ApiKey
from protocol.errors import CodecError
from protocol.frame_headers import RequestHeader, decode_request_header, encode_request_header
from protocol.messages import REQUESTS
from proxy.net import wire


def _frame(api_key: int, version: int, client_id: str | None, tags: dict | None = None) -> bytes:
    out = bytearray()
    header = RequestHeader(request_api_key=api_key, request_api_version=version,
                           correlation_id=7, client_id=client_id)
    header.unknown_tagged_fields = tags
    encode_request_header(header, out)
    return bytes(out) + b"BODY"


@pytest.mark.parametrize("api_key", sorted(API_KEYS))
def test_body_offset_matches_the_header_codec_for_every_api_version(api_key):
    info = API_KEYS[api_key]
    bounds = [v for v in (info.min_version, info.max_version, info.legacy_min_version,
                          info.legacy_max_version) if v is not None]
    for version in range(min(bounds), max(bounds) + 1):
        for client_id in ("producer-1", "", None, "ünï"):
            for tags in (None, {3: b"xyz", 40: b""}):
                payload = _frame(api_key, version, client_id, tags)
                head = wire.parse_request_header(payload)
                decoded, offset = decode_request_header(payload)
                assert head.body_offset == offset
                assert payload[head.body_offset:] == b"BODY"
                assert (head.api_key, head.api_version, head.correlation_id) == (
                    api_key, version, 7)
                if version > 0 or api_key != ApiKey.CONTROLLED_SHUTDOWN:
                    assert head.client_id == decoded.client_id


def test_an_api_no_release_defines_passes_with_an_unknown_body_offset():
    payload = (999).to_bytes(2, "big") + (3).to_bytes(2, "big") + (5).to_bytes(4, "big")
    payload += (2).to_bytes(2, "big") + b"id" + b"rest"
    head = wire.parse_request_header(payload)
    assert (head.api_key, head.api_version, head.correlation_id, head.client_id) == (
        999, 3, 5, "id")
    assert head.body_offset == -1
    assert wire.expects_response(head, payload)
    with pytest.raises(CodecError):
        wire.decode_request(head, payload)


@pytest.mark.parametrize("truncate", [9, 12, 16])
def test_headers_truncated_in_the_client_id_are_refused(truncate):
    payload = _frame(ApiKey.PRODUCE, 9, "client-id", {1: b"abc"})
    with pytest.raises(CodecError):
        wire.parse_request_header(payload[:truncate])


def test_a_header_cut_in_its_tagged_fields_passes_but_its_body_is_unknown():
    payload = _frame(ApiKey.METADATA, 12, "client-id", {1: b"abc"})
    head = wire.parse_request_header(payload[:21])
    assert (head.client_id, head.body_offset) == ("client-id", -1)
    assert wire.expects_response(head, payload)
    with pytest.raises(CodecError):
        wire.decode_request(head, payload)
    produce = _frame(ApiKey.PRODUCE, 9, "client-id", {1: b"abc"})[:21]
    with pytest.raises(CodecError):
        wire.expects_response(wire.parse_request_header(produce), produce)


@pytest.mark.parametrize("version", [3, 8, 9, 11])
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_acks_zero_produce_is_the_one_request_without_a_response(version, acks):
    cls = REQUESTS[ApiKey.PRODUCE]
    body = cls(transactional_id="tx-1", acks=acks, timeout_ms=1000, topic_data=[])
    payload = _frame(ApiKey.PRODUCE, version, "c", {2: b"q"} if version >= 9 else None)
    payload = payload[:-4] + body.encode(version)
    head = wire.parse_request_header(payload)
    assert wire.expects_response(head, payload) is (acks != 0)
    offset, msg = wire.decode_request(head, payload)
    assert msg.acks == acks and msg.transactional_id == "tx-1"
