"""Request/response headers, the API key table, and the Produce acks peek."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.api_keys import API_KEYS, API_KEYS_BY_NAME, ApiKey, api_name, is_flexible
from protocol.errors import CodecError
from protocol.frame_headers import (
    RequestHeader,
    ResponseHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    peek_correlation_id,
    peek_request_header,
    request_header_version,
    response_header_version,
)
from protocol.messages.produce_request import ProduceRequest
from protocol.peek import produce_acks
from tests.support.message_strategies import message_strategy


def test_api_key_table() -> None:
    assert API_KEYS[0].name == "Produce"
    assert API_KEYS[18].flexible_min_version == 3
    assert API_KEYS[17].flexible_min_version is None  # SaslHandshake never became flexible
    produce = API_KEYS[0]
    assert (produce.min_version, produce.legacy_min_version) == (3, 0)
    controlled_shutdown = API_KEYS[7]  # gone in 4.x, still in 3.9
    assert controlled_shutdown.min_version is None
    assert controlled_shutdown.legacy_max_version == 3
    assert API_KEYS_BY_NAME["Metadata"] == 3
    assert api_name(60) == "DescribeCluster"
    assert api_name(9999) == "Unknown(9999)"
    assert is_flexible(3, 9) and not is_flexible(3, 8)
    assert max(API_KEYS) >= 92
    assert ApiKey.API_VERSIONS == 18 and ApiKey.DESCRIBE_CLUSTER == 60
    assert {k.value for k in ApiKey} == set(API_KEYS)


@pytest.mark.parametrize(
    ("api_key", "version", "request_v", "response_v"),
    [
        (18, 0, 1, 0),
        (18, 3, 2, 0),  # ApiVersions responses always use header v0
        (3, 8, 1, 0),
        (3, 9, 2, 1),
        (0, 2, 1, 0),
        (1, 12, 2, 1),
        (17, 1, 1, 0),
        (36, 2, 2, 1),
        (60, 0, 2, 1),
        (7, 0, 0, 0),  # ControlledShutdown v0 has no client id
        (7, 3, 2, 1),
    ],
)
def test_header_versions(api_key: int, version: int, request_v: int, response_v: int) -> None:
    assert request_header_version(api_key, version) == request_v
    assert response_header_version(api_key, version) == response_v


def test_unknown_api_key() -> None:
    with pytest.raises(CodecError):
        request_header_version(12345, 0)


def test_request_header_v2() -> None:
    header = RequestHeader(
        request_api_key=3, request_api_version=12, correlation_id=7, client_id="app"
    )
    out = bytearray()
    encode_request_header(header, out)
    # the client id keeps its int16 length even in flexible header v2
    assert bytes(out) == b"\x00\x03\x00\x0c\x00\x00\x00\x07\x00\x03app\x00"
    frame = bytes(out) + b"BODY"
    assert peek_request_header(frame) == (3, 12, 7)
    decoded, body_offset = decode_request_header(frame)
    assert decoded == header
    assert frame[body_offset:] == b"BODY"


def test_headers_decode_in_the_version_the_frame_or_its_request_calls_for() -> None:
    frame = b"\x00\x03\x00\x0c\x00\x00\x00\x07\x00\x03app\x00BODY"
    header, offset = decode_request_header(frame)
    assert (header.client_id, frame[offset:]) == ("app", b"BODY")
    response, offset = decode_response_header(b"\x00\x00\x00\x07\x00BODY", 3, 12)
    assert (response.correlation_id, offset) == (7, 5)
    assert decode_response_header(b"\x00\x00\x00\x07\x00BODY", 18, 3)[1] == 4


def test_request_header_v1_null_client_id() -> None:
    frame = b"\x00\x00\x00\x02\x00\x00\x00\x09\xff\xffBODY"
    header, offset = decode_request_header(frame)
    assert header.client_id is None
    assert frame[offset:] == b"BODY"


def test_request_header_unknown_tags_survive() -> None:
    frame = b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x00" + b"\x01\x07\x02hi" + b"BODY"
    header, offset = decode_request_header(frame)
    assert header.unknown_tagged_fields == {7: b"hi"}
    assert frame[offset:] == b"BODY"
    out = bytearray()
    encode_request_header(header, out)
    assert bytes(out) == frame[:offset]


def test_response_headers() -> None:
    out = bytearray()
    encode_response_header(42, 3, 12, out)
    assert bytes(out) == b"\x00\x00\x00\x2a\x00"
    header, offset = decode_response_header(bytes(out) + b"B", 3, 12)
    assert header == ResponseHeader(correlation_id=42)
    assert offset == 5
    out = bytearray()
    encode_response_header(42, 18, 3, out)
    assert bytes(out) == b"\x00\x00\x00\x2a"
    assert peek_correlation_id(b"\x00\x00\x00\x2a\x00") == 42


def test_peek_truncated() -> None:
    with pytest.raises(CodecError):
        peek_request_header(b"\x00\x03\x00")
    with pytest.raises(CodecError):
        peek_correlation_id(b"\x00")
    with pytest.raises(CodecError):
        decode_request_header(b"\x00\x03\x00\x0c\x00\x00\x00\x07\x00\x09ab")


PRODUCE_VERSIONS = range(ProduceRequest.MIN_VERSION, ProduceRequest.MAX_VERSION + 1)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_produce_acks_matches_full_decode(version: int, data: st.DataObject) -> None:
    msg = data.draw(message_strategy("ProduceRequest", version))
    body = msg.encode(version)
    assert produce_acks(body, version) == msg.acks
    assert produce_acks(b"HDR" + body, version, offset=3) == msg.acks


def test_produce_acks_truncated() -> None:
    with pytest.raises(CodecError):
        produce_acks(b"\x00", 2)
    with pytest.raises(CodecError):
        produce_acks(b"\x00\x05abc", 3)
    with pytest.raises(CodecError):
        produce_acks(b"\x05ab", 9)
    assert produce_acks(b"\x00\x00\x00", 9) == 0  # null transactional id, acks=0
