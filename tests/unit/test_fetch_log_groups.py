"""The consumer-group directory fetch_log reads, and the learner that fills it from decoded
group requests (built here as the codecs decode them from bytes)."""

from __future__ import annotations

from interceptors import ProxyInfo
from interceptors.builtin.fetch_log_groups import MAX_ID, ConsumerGroups, source_host
from interceptors.config import build_chains
from protocol.api_keys import ApiKey
from protocol.messages import REQUESTS
from protocol.messages.offset_fetch_request import OffsetFetchRequestGroup
from proxy.filters import Exchange, SessionContext
from proxy.group_learner import ConsumerGroupLearner


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
