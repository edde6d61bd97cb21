"""Finding and rewriting the tail of a Fetch response that is streamed, not assembled."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import CodecError
from protocol.fetch_tail import PAD_TAG, FetchTailFinder, decode_tail, fit_tail
from protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
)

VERSIONS = (16, 17, 18)


def _response(partitions: list[tuple[int, int, bool]], endpoints: int) -> FetchResponse:
    """Topics of (records bytes, aborted transactions, NOT_LEADER with a current leader)."""
    topics = []
    for t, spec in enumerate(partitions):
        size, aborted, moved = spec
        topics.append(FetchableTopicResponse(
            topic_id=bytes([t + 1]) * 16,
            partitions=[PartitionData(
                partition_index=t,
                error_code=6 if moved else 0,
                high_watermark=size,
                records=None if moved else bytes((i * 7) % 251 for i in range(size)),
                aborted_transactions=[
                    AbortedTransaction(producer_id=i, first_offset=i) for i in range(aborted)
                ],
                current_leader=LeaderIdAndEpoch(leader_id=2, leader_epoch=5) if moved else None,
            )],
        ))
    return FetchResponse(
        session_id=7,
        responses=topics,
        node_endpoints=[
            NodeEndpoint(node_id=n, host=f"broker-{n}.kafka.internal", port=9092, rack="r1")
            for n in range(endpoints)
        ],
    )


def _payload(msg: FetchResponse, version: int) -> tuple[bytes, int]:
    """A response frame's payload (header v1 + body) and where its top-level tags start."""
    body = msg.encode(version)
    bare = FetchResponse(
        session_id=msg.session_id, responses=msg.responses, node_endpoints=[]
    ).encode(version)
    header = (12345).to_bytes(4, "big") + b"\x00"
    return header + body, len(header) + len(bare) - 1  # bare ends in an empty tag section


def _feed(payload: bytes, chunk: int, use_skips: bool) -> tuple[int, bool]:
    """Drive a finder the way the session does; return the tail offset and whether done."""
    finder = FetchTailFinder(len(payload))
    pos = 0
    while pos < len(payload) and not finder.done:
        skip = finder.skippable()
        if use_skips and skip:
            finder.skipped(skip)
            pos += skip
            continue
        part = payload[pos : pos + chunk]
        pos += finder.feed(part)
        if finder.done:
            break
    return pos, finder.done


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(VERSIONS),
    st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3), st.booleans()), max_size=4),
    st.integers(0, 3),
    st.integers(1, 700),
    st.booleans(),
)
def test_the_finder_stops_exactly_where_the_top_level_tags_begin(
    version: int, partitions: list, endpoints: int, chunk: int, use_skips: bool
) -> None:
    payload, expected = _payload(_response(partitions, endpoints), version)
    offset, done = _feed(payload, chunk, use_skips)
    assert done
    assert offset == expected
    tail = decode_tail(payload[offset:], version)
    assert len(tail.node_endpoints) == endpoints


def test_record_data_is_offered_for_skipping_not_for_reading() -> None:
    msg = _response([(100_000, 0, False)], 0)
    payload, _ = _payload(msg, 16)
    records_at = payload.index(msg.responses[0].partitions[0].records)
    finder = FetchTailFinder(len(payload))
    assert finder.feed(payload[:200]) == 200
    assert finder.skippable() == 100_000 - (200 - records_at)
    with pytest.raises(ValueError):
        finder.skipped(finder.skippable() + 1)


def test_a_records_length_past_the_frame_is_refused() -> None:
    payload, _ = _payload(_response([(5000, 0, False)], 0), 16)
    finder = FetchTailFinder(len(payload) - 1000)  # the frame claims less than its records
    with pytest.raises(CodecError, match="records runs past the end of the frame"):
        finder.feed(payload)


def test_a_truncated_response_never_reports_its_tail() -> None:
    payload, _ = _payload(_response([(500, 1, False)], 1), 17)
    finder = FetchTailFinder(len(payload))
    assert finder.feed(payload[:300]) == 300
    assert not finder.done


def test_an_overlong_varint_is_refused() -> None:
    payload = (1).to_bytes(4, "big") + b"\xff" * 8
    with pytest.raises(CodecError, match="longer than 5 bytes"):
        FetchTailFinder(len(payload)).feed(payload)


def _tail(endpoints: int, version: int = 16) -> bytes:
    payload, offset = _payload(_response([(10, 0, False)], endpoints), version)
    return payload[offset:]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_rewrite_of_the_same_length_changes_only_hosts_and_ports(version: int) -> None:
    tail = _tail(2, version)
    msg = decode_tail(tail, version)
    for e in msg.node_endpoints:
        e.host, e.port = "proxy-00.kafka.internal", 19000 + e.node_id  # same length as before
    out = fit_tail(msg, version, len(tail))
    assert len(out) == len(tail)
    back = decode_tail(out, version)
    assert [(e.node_id, e.host, e.port, e.rack) for e in back.node_endpoints] == [
        (0, "proxy-00.kafka.internal", 19000, "r1"), (1, "proxy-00.kafka.internal", 19001, "r1")
    ]
    assert not back.unknown_tagged_fields


def test_a_shorter_rewrite_is_padded_with_an_unknown_tag() -> None:
    tail = _tail(2)
    msg = decode_tail(tail, 16)
    for e in msg.node_endpoints:
        e.host, e.port = "h", 1
    out = fit_tail(msg, 16, len(tail))
    assert len(out) == len(tail)
    back = decode_tail(out, 16)
    assert [(e.host, e.port) for e in back.node_endpoints] == [("h", 1), ("h", 1)]
    assert set(back.unknown_tagged_fields) == {PAD_TAG}


def test_a_longer_rewrite_drops_endpoints_until_it_fits() -> None:
    tail = _tail(3)
    msg = decode_tail(tail, 16)
    for e in msg.node_endpoints:
        e.host = "a-much-longer-proxy-host-name.example.com"
    out = fit_tail(msg, 16, len(tail))
    assert len(out) == len(tail)
    back = decode_tail(out, 16)
    # Every endpoint kept is rewritten; none of the broker's own addresses survive.
    assert 0 < len(back.node_endpoints) < 3
    assert all(e.host.startswith("a-much-longer") for e in back.node_endpoints)
    assert b"kafka.internal" not in out


@pytest.mark.parametrize("short", range(1, 12))
def test_every_shortfall_is_made_up_exactly(short: int) -> None:
    tail = _tail(2)
    msg = decode_tail(tail, 16)
    hosts = [e.host[: len(e.host) - short] for e in msg.node_endpoints]
    for e, host in zip(msg.node_endpoints, hosts, strict=True):
        e.host = host
    out = fit_tail(msg, 16, len(tail))
    assert len(out) == len(tail)
    back = decode_tail(out, 16)
    # Two endpoints each `short` bytes shorter: always a whole pad's worth (2 bytes or more).
    assert [e.host for e in back.node_endpoints] == hosts


def test_a_single_byte_short_drops_an_endpoint_and_pads_the_rest() -> None:
    tail = _tail(2)
    msg = decode_tail(tail, 16)
    msg.node_endpoints[1].host = msg.node_endpoints[1].host[:-1]
    out = fit_tail(msg, 16, len(tail))
    assert len(out) == len(tail)
    back = decode_tail(out, 16)
    assert [e.node_id for e in back.node_endpoints] == [0]
    assert set(back.unknown_tagged_fields) == {PAD_TAG}
