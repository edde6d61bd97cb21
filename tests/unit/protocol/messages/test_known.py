"""Hand-checked wire encodings and the behaviours around versions, defaults and tags."""

from __future__ import annotations

import pytest

from protocol.errors import CodecError
from protocol.messages import REQUESTS, RESPONSES
from protocol.messages.api_versions_request import ApiVersionsRequest
from protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from protocol.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    PartitionData,
)
from protocol.messages.find_coordinator_request import FindCoordinatorRequest
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from protocol.messages.metadata_response import MetadataResponse, MetadataResponseBroker
from protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from protocol.messages.produce_response import LeaderIdAndEpoch as ProduceLeader
from protocol.messages.produce_response import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from protocol.primitives import ZERO_UUID


def test_registry() -> None:
    assert set(REQUESTS) == set(RESPONSES) == {0, 1, 3, 8, 9, 10, 11, 12, 13, 14, 17, 18, 36, 60,
                                                68, 76, 78, 79}
    for key, cls in REQUESTS.items():
        assert cls.API_KEY == key
        assert cls.__name__.endswith("Request")
        assert RESPONSES[key].__name__ == cls.__name__.replace("Request", "Response")
    assert REQUESTS[3] is MetadataRequest


def test_version_ranges_cover_both_kafka_releases() -> None:
    # 4.x dropped Produce v0-2 and Fetch v0-3 (KIP-896); 3.9 brokers still accept them
    assert (ProduceRequest.MIN_VERSION, ProduceRequest.MAX_VERSION) == (0, 13)
    assert (FetchResponse.MIN_VERSION, FetchResponse.MAX_VERSION) == (0, 18)
    assert (MetadataResponse.MIN_VERSION, MetadataResponse.MAX_VERSION) == (0, 13)
    assert ApiVersionsRequest.FLEXIBLE_MIN_VERSION == 3
    assert REQUESTS[17].FLEXIBLE_MIN_VERSION is None


def test_api_versions_request_v3_bytes() -> None:
    msg = ApiVersionsRequest(client_software_name="herald", client_software_version="0.1")
    wire = msg.encode(3)
    assert wire == b"\x07herald\x040.1\x00"
    assert ApiVersionsRequest.decode(wire, 3) == msg
    assert ApiVersionsRequest().encode(0) == b""  # v0-2 have no fields
    # a field that does not exist in v0 but is ignorable is silently left out
    assert msg.encode(0) == b""


def test_api_versions_response_v0_bytes() -> None:
    wire = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x03\x00\x00\x00\x0d"
    msg = ApiVersionsResponse.decode(wire, 0)
    assert msg.error_code == 0
    assert msg.api_keys == [ApiVersion(api_key=3, min_version=0, max_version=13)]
    assert msg.encode(0) == wire


def test_metadata_request_null_topics() -> None:
    all_topics = MetadataRequest(topics=None)
    assert all_topics.encode(1) == b"\xff\xff\xff\xff"
    assert all_topics.encode(9)[:1] == b"\x00"  # compact null array
    assert MetadataRequest.decode(all_topics.encode(12), 12).topics is None
    with pytest.raises(CodecError, match="non-nullable"):
        all_topics.encode(0)  # v0 cannot express "all topics"
    assert MetadataRequest().topics == []  # the default is an empty list, not null


def test_metadata_request_versions_check_non_ignorable_fields() -> None:
    msg = MetadataRequest(topics=[MetadataRequestTopic(name="a")], allow_auto_topic_creation=False)
    with pytest.raises(CodecError, match="allow_auto_topic_creation"):
        msg.encode(3)  # added in v4, not ignorable
    assert MetadataRequest.decode(msg.encode(4), 4) == msg


def test_find_coordinator_key_type_not_in_v0() -> None:
    with pytest.raises(CodecError, match="key_type"):
        FindCoordinatorRequest(key="g", key_type=1).encode(0)
    assert FindCoordinatorRequest(key="g").encode(0) == b"\x00\x01g"
    with pytest.raises(CodecError, match="coordinator_keys"):
        FindCoordinatorRequest(coordinator_keys=["g"]).encode(3)


def test_none_in_non_nullable_field() -> None:
    with pytest.raises(CodecError, match="host"):
        MetadataResponse(brokers=[MetadataResponseBroker(host=None)]).encode(9)  # type: ignore[arg-type]


def test_out_of_range_integer() -> None:
    out = bytearray(b"keep")
    with pytest.raises(CodecError):
        MetadataResponse(throttle_time_ms=2**31).encode_into(out, 3)
    assert out == b"keep"  # a failed encode leaves the buffer as it was


def test_trailing_bytes_rejected() -> None:
    wire = MetadataRequest(topics=None).encode(12)
    with pytest.raises(CodecError, match="trailing"):
        MetadataRequest.decode(wire + b"\x00", 12)
    msg, end = MetadataRequest.decode_from(wire + b"\x00", 12)
    assert end == len(wire)


def test_legacy_produce_v2_layout() -> None:
    msg = ProduceRequest(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(
                name="t", partition_data=[PartitionProduceData(index=0, records=b"xyz")]
            )
        ],
    )
    wire = msg.encode(2)
    assert wire == (
        b"\xff\xff" + b"\x00\x00\x03\xe8" + b"\x00\x00\x00\x01" + b"\x00\x01t"
        + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x03xyz"
    )
    assert ProduceRequest.decode(wire, 2) == msg
    with pytest.raises(CodecError, match="transactional_id"):
        ProduceRequest(transactional_id="tx").encode(2)


def test_produce_v13_uses_topic_ids() -> None:
    tid = bytes(range(16))
    msg = ProduceRequest(acks=1, topic_data=[TopicProduceData(topic_id=tid)])
    decoded = ProduceRequest.decode(msg.encode(13), 13)
    assert decoded.topic_data[0].topic_id == tid
    assert decoded.topic_data[0].name == ""
    # name is ignorable: dropped in v13, topic id dropped in v12
    assert ProduceRequest.decode(msg.encode(12), 12).topic_data[0].topic_id == ZERO_UUID
    with pytest.raises(CodecError, match="uuid"):
        ProduceRequest(topic_data=[TopicProduceData(topic_id=b"short")]).encode(13)


def fetch_response(**partition: object) -> FetchResponse:
    return FetchResponse(
        responses=[FetchableTopicResponse(topic="t", partitions=[PartitionData(**partition)])]
    )


def test_tagged_fields_and_unknown_tags_interleave() -> None:
    msg = fetch_response(
        partition_index=1,
        current_leader=LeaderIdAndEpoch(leader_id=2, leader_epoch=3),
        unknown_tagged_fields={0x40: b"z", 0: b"never"},
    )
    with pytest.raises(CodecError, match="collides"):
        msg.encode(12)  # tag 0 is the known DivergingEpoch in v12
    partition = msg.responses[0].partitions[0]
    partition.unknown_tagged_fields = {5: b"five", 0x40: b"z"}
    wire = msg.encode(12)
    # the partition's tag section: known and unknown tags in ascending order (1, 5, 0x40);
    # the struct in tag 1 ends with its own (empty) tag section
    leader = b"\x00\x00\x00\x02\x00\x00\x00\x03\x00"
    tail = b"\x03" + b"\x01\x09" + leader + b"\x05\x04five" + b"\x40\x01z"
    assert tail in wire
    decoded = FetchResponse.decode(wire, 12)
    assert decoded == msg
    assert decoded.encode(12) == wire


def test_default_tagged_struct_is_not_written() -> None:
    with_default = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name="t",
                partition_responses=[PartitionProduceResponse(current_leader=ProduceLeader())],
            )
        ]
    )
    without = ProduceResponse(
        responses=[TopicProduceResponse(name="t", partition_responses=[PartitionProduceResponse()])]
    )
    assert with_default.encode(10) == without.encode(10)
    assert ProduceResponse.decode(with_default.encode(10), 10) == without


def test_records_slices_follow_the_input_buffer() -> None:
    wire = fetch_response(records=b"RECORDS").encode(16)
    frame = bytearray(b"header" + wire)
    view = memoryview(frame)
    msg = FetchResponse.decode(view, 16, offset=6)
    records = msg.responses[0].partitions[0].records
    assert isinstance(records, memoryview)
    assert records.obj is frame  # zero-copy
    assert bytes(records) == b"RECORDS"
    assert FetchResponse.decode(wire, 16).responses[0].partitions[0].records == b"RECORDS"
    assert msg.encode(16) == wire


def test_string_too_long() -> None:
    with pytest.raises(CodecError, match="too long"):
        MetadataRequest(topics=[MetadataRequestTopic(name="x" * 40000)]).encode(12)
    # a compact string that claims 40000 bytes is refused on decode too
    wire = b"\x02" + bytes(16) + b"\xc2\xb8\x02" + b"x" * 40000 + b"\x00" + b"\x01\x00\x00"
    with pytest.raises(CodecError):
        MetadataRequest.decode(wire, 12)


def test_repr_and_eq() -> None:
    a = MetadataResponseBroker(node_id=1, host="h", port=1)
    assert repr(a).startswith("MetadataResponseBroker(node_id=1, host='h'")
    assert a == MetadataResponseBroker(node_id=1, host="h", port=1, unknown_tagged_fields={})
    assert a != MetadataResponseBroker(node_id=2, host="h", port=1)
    assert a != "not a broker"
    with pytest.raises(TypeError):
        hash(a)
