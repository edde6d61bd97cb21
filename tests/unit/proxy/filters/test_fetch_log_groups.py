"""The consumer-group directory fetch_log reads, and the learner that fills it from decoded
group requests (built here as the codecs decode them from bytes)."""

from __future__ import annotations

from interceptors import ProxyInfo
from interceptors.chains_from_yaml import build_chains
from protocol.api_keys import ApiKey
from protocol.messages import REQUESTS
from protocol.messages.offset_fetch_request import OffsetFetchRequestGroup
from proxy.filters.chain import Exchange, SessionContext
from proxy.filters.consumer_groups import MAX_ID, ConsumerGroups, source_host
from proxy.filters.group_learner import ConsumerGroupLearner


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_source_host_drops_the_port() -> None:
    assert source_host("10.0.0.7:53122") == "10.0.0.7"
    assert source_host("[::1]:53122") == "[::1]"
    assert source_host("unix") == "unix"


def test_a_client_is_known_by_host_and_client_id_across_connections() -> None:
    groups = ConsumerGroups()
    groups.learn("10.0.0.7:1111", "reader", "billing")
    assert groups.group_of("10.0.0.7:2222", "reader") == "billing"  # another connection
    assert groups.group_of("10.0.0.8:2222", "reader") is None       # another host
    assert groups.group_of("10.0.0.7:2222", "other") is None
    assert groups.group_of("10.0.0.7:2222", None) is None
    groups.learn("10.0.0.7:1111", "reader", "audit")                # the latest group wins
    assert groups.group_of("10.0.0.7:1", "reader") == "audit"
    groups.forget("10.0.0.7:1", "reader", "billing")                # not its group any more
    assert groups.group_of("10.0.0.7:1", "reader") == "audit"
    groups.forget("10.0.0.7:1", "reader", "audit")
    assert groups.group_of("10.0.0.7:1", "reader") is None


def test_the_directory_is_bounded_by_size_age_and_id_length() -> None:
    clock = _Clock()
    groups = ConsumerGroups(capacity=3, ttl_s=60, clock=clock)
    for i in range(5):
        groups.learn("h:1", f"c{i}", f"g{i}")
    assert len(groups) == 3 and groups.evicted == 2
    assert [groups.group_of("h:1", f"c{i}") for i in range(5)] == [None, None, "g2", "g3", "g4"]
    groups.learn("h:1", "c2", "g2")  # confirmed again: now the most recent
    groups.learn("h:1", "c5", "g5")
    assert groups.group_of("h:1", "c2") == "g2" and groups.group_of("h:1", "c3") is None
    clock.now += 61
    assert groups.group_of("h:1", "c2") is None  # not confirmed within the TTL
    groups.learn("h:1", "x" * (MAX_ID + 1), "g")
    groups.learn("h:1", "c9", "g" * (MAX_ID + 1))
    groups.learn("h:1", "c9", "")
    assert groups.group_of("h:1", "x" * (MAX_ID + 1)) is None
    assert groups.group_of("h:1", "c9") is None


def _decoded(api_key: int, version: int, **fields: object) -> object:
    cls = REQUESTS[api_key]
    return cls.decode(cls(**fields).encode(version), version)


async def test_the_learner_reads_group_requests_only_with_fetch_log() -> None:
    info = ProxyInfo()
    off = build_chains({}, info)
    assert not ConsumerGroupLearner(lambda: off, ProxyInfo()).wants_request(ApiKey.JOIN_GROUP, 9)
    on = build_chains({"fetch": [{"type": "fetch_log", "bootstrap": "127.0.0.1:1"}]}, info)
    learner = ConsumerGroupLearner(lambda: on, info)
    assert info.groups is learner.groups
    assert learner.wants_request(ApiKey.JOIN_GROUP, 9)
    assert learner.wants_request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0)
    assert not learner.wants_request(ApiKey.FETCH, 17)

    ctx = SessionContext("10.1.1.1:4000", "broker-0", "b:9092", client_id="app-1")
    ex = Exchange()
    msg = _decoded(ApiKey.JOIN_GROUP, 9, group_id="orders", protocol_type="consumer")
    assert await learner.on_request(ctx, ex, ApiKey.JOIN_GROUP, 9, msg) is False
    assert learner.groups.group_of("10.1.1.1:5000", "app-1") == "orders"
    msg = _decoded(ApiKey.LEAVE_GROUP, 5, group_id="orders")
    await learner.on_request(ctx, ex, ApiKey.LEAVE_GROUP, 5, msg)
    assert learner.groups.group_of("10.1.1.1:5000", "app-1") is None

    msg = _decoded(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id="kip848", member_epoch=0)
    await learner.on_request(ctx, ex, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, msg)
    assert learner.groups.group_of("10.1.1.1:1", "app-1") == "kip848"
    msg = _decoded(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id="kip848", member_epoch=-1)
    await learner.on_request(ctx, ex, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, msg)
    assert learner.groups.group_of("10.1.1.1:1", "app-1") is None

    # OffsetFetch v8+ names groups in a list: one group is a member's own, several an admin's.
    one = _decoded(ApiKey.OFFSET_FETCH, 9, groups=[OffsetFetchRequestGroup(group_id="solo")])
    await learner.on_request(ctx, ex, ApiKey.OFFSET_FETCH, 9, one)
    assert learner.groups.group_of("10.1.1.1:1", "app-1") == "solo"
    two = _decoded(ApiKey.OFFSET_FETCH, 9, groups=[OffsetFetchRequestGroup(group_id="a"),
                                                   OffsetFetchRequestGroup(group_id="b")])
    await learner.on_request(ctx, ex, ApiKey.OFFSET_FETCH, 9, two)
    assert learner.groups.group_of("10.1.1.1:1", "app-1") == "solo"
    old = _decoded(ApiKey.OFFSET_FETCH, 7, group_id="classic")
    await learner.on_request(ctx, ex, ApiKey.OFFSET_FETCH, 7, old)
    assert learner.groups.group_of("10.1.1.1:1", "app-1") == "classic"


class _Recorder:
    """What the member uses of its publisher: `offer`, and the count of failed deliveries."""

    def __init__(self) -> None:
        self.offered: list[tuple] = []
        self.failed = 0

    def offer(self, item: tuple) -> bool:
        self.offered.append(item)
        return True


def _observed(records: list, assign_offsets: bool, other_members: list[dict]) -> list[tuple]:
    from interceptors import ConnectionInfo
    from protocol.records import build_batch, split_batches

    info = ProxyInfo()
    info.groups = ConsumerGroups()
    info.groups.learn("10.0.0.9:1", "reader", "billing")
    chains = build_chains({"fetch": [*other_members, {"type": "fetch_log",
                                                      "bootstrap": "127.0.0.1:1"}]}, info)
    member = chains.fetch.members[-1].interceptor
    member._publisher = recorder = _Recorder()
    data = build_batch(records, base_offset=500, assign_offsets=assign_offsets)
    chains.fetch.process("orders", 2, split_batches(data), ConnectionInfo("reader", "10.0.0.9:7"))
    return [(trace, offset, batch[:4]) for trace, offset, _time, batch in recorder.offered]


def test_fetch_log_observes_exact_offsets_with_and_without_record_objects() -> None:
    """fetch_log reads headers only; offsets stay exact in batches with gaps (compacted) and
    when another member makes the engine build record objects."""
    from protocol.records import Record

    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    records = [Record(None, b"v", [("traceparent", tp.encode())] if i % 2 else [],
                      offset_delta=d) for i, d in enumerate((0, 3, 4, 9))]
    where = ("orders", 2, "reader", "billing")
    trace = "0af7651916cd43dd8448eb211c80319c"
    contiguous = [(None, 500, where), (trace, 501, where), (None, 502, where),
                  (trace, 503, where)]
    gaps = [(None, 500, where), (trace, 503, where), (None, 504, where), (trace, 509, where)]
    writer = [{"type": "insert_header", "header": "x", "value": "1"}]
    assert _observed(records, True, []) == contiguous
    assert _observed(records, False, []) == gaps
    assert _observed(records, False, writer) == gaps


def test_fetch_log_hands_each_records_time_header_to_the_publisher() -> None:
    """The record time `h` is the raw value of the configured time header, per record (the
    publisher's thread checks and writes it); absent, it is None."""
    from interceptors import ConnectionInfo
    from protocol.records import Record, build_batch, split_batches

    def offered(member: dict) -> list:
        chains = build_chains({"fetch": [{"type": "fetch_log", "bootstrap": "127.0.0.1:1",
                                          **member}]}, ProxyInfo())
        chains.fetch.members[-1].interceptor._publisher = recorder = _Recorder()
        records = [Record(None, b"v", [("herald.time", b"1780000000123"), ("at", b"7")]),
                   Record(None, b"v", [("x", b"1")]),
                   Record(None, b"v", [("herald.time", b"junk"), ("at", b"8")])]
        data = build_batch(records, base_offset=10, assign_offsets=True)
        chains.fetch.process("orders", 0, split_batches(data), ConnectionInfo("r", "h:1"))
        return [(offset, time) for _trace, offset, time, _batch in recorder.offered]

    assert offered({}) == [(10, b"1780000000123"), (11, None), (12, b"junk")]
    assert offered({"time_header": "at"}) == [(10, b"7"), (11, None), (12, b"8")]
