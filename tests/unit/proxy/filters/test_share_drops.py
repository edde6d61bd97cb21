"""Share-group records the fetch chain drops, on bytes: taken out of the acquired ranges the
consumer sees, counted, carried as gaps in the session's next acknowledgements beside the
consumer's own, and recognised when the broker hands them out again; ShareFetch and
ShareAcknowledge responses get their node endpoints rewritten."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from protocol.messages.share_acknowledge_request import (
    AcknowledgementBatch as AckBatch,
)
from protocol.messages.share_acknowledge_request import (
    AcknowledgePartition,
    AcknowledgeTopic,
    ShareAcknowledgeRequest,
)
from protocol.messages.share_acknowledge_response import NodeEndpoint as AckEndpoint
from protocol.messages.share_acknowledge_response import ShareAcknowledgeResponse
from protocol.messages.share_fetch_request import AcknowledgementBatch as FetchAckBatch
from protocol.messages.share_fetch_request import FetchPartition, FetchTopic, ShareFetchRequest
from protocol.messages.share_fetch_response import AcquiredRecords, ShareFetchResponse
from protocol.messages.share_fetch_response import NodeEndpoint as FetchEndpoint
from protocol.records import Record, build_batch
from proxy.config.proxy_yaml import parse_config
from proxy.filters.address_rewrite import AddressRewriter
from proxy.filters.chain import Exchange, SessionContext
from proxy.filters.share_drops import (
    GAP,
    PendingGaps,
    ShareDrops,
    carry,
    record_offsets,
    runs,
    without,
)
from proxy.upstream.brokers import BrokerDirectory

TOPIC = b"\x01" * 16


def _drops() -> tuple[ShareDrops, Counter, Counter]:
    registry = CollectorRegistry()
    dropped = Counter("d", "", registry=registry)
    redelivered = Counter("r", "", registry=registry)
    return ShareDrops(dropped, redelivered, capacity=50), dropped, redelivered


def _records(offsets: list[int], base: int = 0) -> bytes:
    return build_batch([Record(value=b"v", offset_delta=o - base) for o in offsets],
                       base_offset=base, assign_offsets=False)


def test_runs_and_ranges_without_the_dropped() -> None:
    assert runs({5, 1, 2, 3, 9}) == [(1, 3), (5, 5), (9, 9)]
    acquired = [AcquiredRecords(first_offset=0, last_offset=9, delivery_count=1),
                AcquiredRecords(first_offset=20, last_offset=21, delivery_count=2)]
    kept = without(acquired, {0, 4, 5, 9, 21})
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in kept] == [
        (1, 3, 1), (6, 8, 1), (20, 20, 2)]
    assert without(acquired, set()) is acquired


def test_dropped_offsets_are_counted_and_their_return_is_seen() -> None:
    drops, dropped, redelivered = _drops()
    before = _records(list(range(10)))
    after = _records([0, 2, 4, 6, 8])
    assert record_offsets(before) == set(range(10))
    acquired = [AcquiredRecords(first_offset=0, last_offset=9, delivery_count=1)]
    gone = drops.dropped(TOPIC, 0, acquired, before, after)
    assert gone == {1, 3, 5, 7, 9}
    assert dropped._value.get() == 5 and redelivered._value.get() == 0
    # Unchanged records drop nothing; a first delivery is no return.
    assert drops.dropped(TOPIC, 0, acquired, before, None) == set()
    # The broker acquires 3..4 again: offset 3 was dropped, so it came back.
    again = [AcquiredRecords(first_offset=3, last_offset=4, delivery_count=2)]
    drops.dropped(TOPIC, 0, again, _records([3, 4], base=3), None)
    assert redelivered._value.get() == 1
    # Another partition's offsets are its own.
    drops.dropped(TOPIC, 1, again, _records([3, 4], base=3), None)
    assert redelivered._value.get() == 1


def test_the_remembered_offsets_are_bounded() -> None:
    drops, _, _ = _drops()
    before = _records(list(range(200)))
    acquired = [AcquiredRecords(first_offset=0, last_offset=199, delivery_count=1)]
    drops.dropped(TOPIC, 0, acquired, before, _records([0]))
    assert len(drops) == 50


def test_gaps_ride_on_the_partitions_the_next_request_names() -> None:
    gaps = PendingGaps()
    gaps.add(TOPIC, 0, {1, 3, 4})
    gaps.add(TOPIC, 7, {10})
    own = [AckBatch(first_offset=0, last_offset=0, acknowledge_types=[1]),
           AckBatch(first_offset=2, last_offset=2, acknowledge_types=[1])]
    msg = ShareAcknowledgeRequest(group_id="g", member_id="m", share_session_epoch=3, topics=[
        AcknowledgeTopic(topic_id=TOPIC, partitions=[
            AcknowledgePartition(partition_index=0, acknowledgement_batches=list(own))])])
    assert carry(msg, gaps, AckBatch) == 3
    batches = msg.topics[0].partitions[0].acknowledgement_batches
    assert [(b.first_offset, b.last_offset, b.acknowledge_types) for b in batches] == [
        (0, 0, [1]), (1, 1, [GAP]), (2, 2, [1]), (3, 4, [GAP])]
    # Partition 7 is not named: its gap waits for a request that names it.
    assert len(msg.topics) == 1 and len(msg.topics[0].partitions) == 1
    assert gaps.offsets == {(TOPIC, 7): {10}}
    # The encoded request is what the broker reads back.
    assert ShareAcknowledgeRequest.decode(msg.encode(2), 2) == msg


def test_a_request_opening_a_share_session_carries_no_gap() -> None:
    gaps = PendingGaps()
    gaps.add(TOPIC, 0, {5})
    msg = ShareFetchRequest(group_id="g", member_id="m", share_session_epoch=0, topics=[
        FetchTopic(topic_id=TOPIC, partitions=[FetchPartition(partition_index=0)])])
    assert carry(msg, gaps, FetchAckBatch) == 0
    assert gaps.offsets
    msg.share_session_epoch = 1
    assert carry(msg, gaps, FetchAckBatch) == 1
    assert msg.topics[0].partitions[0].acknowledgement_batches[0].acknowledge_types == [GAP]


async def test_share_responses_get_their_node_endpoints_rewritten() -> None:
    config = parse_config({"upstream": {"bootstrap": "127.0.0.1:9092"},
                           "listen": {"bootstrap": "127.0.0.1:0", "advertised_host": "proxy",
                                      "broker_port_base": 30000}})
    rewriter = AddressRewriter(BrokerDirectory(config.listen))
    ctx = SessionContext("127.0.0.1:1", "bootstrap", "127.0.0.1:9092")
    fetch = ShareFetchResponse(node_endpoints=[FetchEndpoint(node_id=2, host="b2", port=9)])
    ack = ShareAcknowledgeResponse(node_endpoints=[AckEndpoint(node_id=3, host="b3", port=9)])
    for api_key, msg in ((78, fetch), (79, ack)):
        assert rewriter.wants_response(api_key, 1)
        assert await rewriter.on_response(ctx, Exchange(), api_key, 1, msg)
    assert [(e.host, e.port) for e in fetch.node_endpoints] == [("proxy", 30002)]
    assert [(e.host, e.port) for e in ack.node_endpoints] == [("proxy", 30003)]


async def test_the_fetch_chain_settles_what_it_drops_and_withholds_unnamed_topics() -> None:
    """The member itself, on a ShareFetch response: dropped records out of the acquired
    ranges and owed as gaps to the session's next request; a topic id no Metadata named
    keeps its records and its acquisitions from the consumer (unacknowledged, the broker
    hands them out again once their lock ends)."""
    from protocol.messages.share_fetch_response import PartitionData, ShareFetchableTopicResponse
    from proxy.filters.interception import InterceptorFilter
    from proxy.filters.member_services import build_chains
    from proxy.upstream.topic_ids import TopicIds

    topics = TopicIds()
    topics.learn(TOPIC, "orders")
    member = InterceptorFilter(build_chains({"fetch": [
        {"type": "filter", "header": "tier", "equals": "hidden"}]}), topics)
    assert member.wants_response(78, 2) and member.wants_request(78, 2)
    assert member.wants_request(79, 2) and not member.wants_response(79, 2)
    records = build_batch([Record(value=b"v", headers=[("tier", b"hidden" if o % 2 else b"x")],
                                  offset_delta=o) for o in range(6)], assign_offsets=False)
    unknown = b"\x02" * 16

    def partition() -> PartitionData:
        return PartitionData(partition_index=0, records=records, acquired_records=[
            AcquiredRecords(first_offset=0, last_offset=5, delivery_count=1)])

    msg = ShareFetchResponse(responses=[
        ShareFetchableTopicResponse(topic_id=TOPIC, partitions=[partition()]),
        ShareFetchableTopicResponse(topic_id=unknown, partitions=[partition()])])
    ctx = SessionContext("127.0.0.1:1", "broker-1", "127.0.0.1:9092")
    assert await member.on_response(ctx, Exchange(), 78, 2, msg)
    kept, withheld = msg.responses[0].partitions[0], msg.responses[1].partitions[0]
    assert record_offsets(kept.records) == {0, 2, 4}
    assert [(r.first_offset, r.last_offset) for r in kept.acquired_records] == [
        (0, 0), (2, 2), (4, 4)]
    assert withheld.records == b"" and withheld.error_code == 100
    assert withheld.acquired_records == []
    request = ShareFetchRequest(group_id="g", member_id="m", share_session_epoch=1, topics=[
        FetchTopic(topic_id=TOPIC, partitions=[FetchPartition(partition_index=0)])])
    assert await member.on_request(ctx, Exchange(), 78, 2, request)
    assert [(b.first_offset, b.last_offset, b.acknowledge_types) for b in
            request.topics[0].partitions[0].acknowledgement_batches] == [
        (1, 1, [GAP]), (3, 3, [GAP]), (5, 5, [GAP])]
