"""Learns which consumer group each client reads for, from the group requests it sends.

Only members that use the consumer groups need this (`interceptors.services.CONSUMER_GROUPS`;
`fetch_log`, to say which group fetched a record), so the filter asks for the group requests
to be decoded only while such a member is configured; otherwise it wants nothing and those
frames stay opaque. It only reads: nothing is changed. The map it fills is
`proxy.filters.consumer_groups.ConsumerGroups`, handed to the members as `ProxyInfo.groups`.
"""

from __future__ import annotations

from collections.abc import Callable

from interceptors import Chains, ProxyInfo
from interceptors.services import CONSUMER_GROUPS
from protocol.api_keys import ApiKey
from protocol.message import Message
from protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ShareGroupHeartbeatRequest,
    SyncGroupRequest,
)
from proxy.filters.chain import NATIVE_NOTHING, Exchange, Filter, SessionContext
from proxy.filters.consumer_groups import ConsumerGroups

_GROUP_REQUEST_CLASSES = (
    JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, OffsetCommitRequest,
    OffsetFetchRequest, LeaveGroupRequest, ConsumerGroupHeartbeatRequest,
    ShareGroupHeartbeatRequest,  # a share group's member (KIP-932) reads for it likewise
)
GroupRequest = (
    JoinGroupRequest | SyncGroupRequest | HeartbeatRequest | OffsetCommitRequest
    | OffsetFetchRequest | LeaveGroupRequest | ConsumerGroupHeartbeatRequest
    | ShareGroupHeartbeatRequest
)
"""The requests that name the group a member reads for, as `_GROUP_REQUEST_CLASSES` narrows a
message to them: a class added there alone fails the type check where `groups_named` is
called."""
GROUP_REQUESTS = frozenset(cls.API_KEY for cls in _GROUP_REQUEST_CLASSES)
_HEARTBEATS = (ConsumerGroupHeartbeatRequest, ShareGroupHeartbeatRequest)
# ConsumerGroupHeartbeat's member epoch when a member leaves (-1) or a static member leaves
# for now (-2, KIP-848); ShareGroupHeartbeat's when a member leaves (-1).
_LEAVING_EPOCHS = (-1, -2)


def groups_named(msg: GroupRequest) -> list[str]:
    """The group ids a group request names (OffsetFetch v8+ may name several)."""
    if isinstance(msg, OffsetFetchRequest) and msg.groups:
        return [g.group_id for g in msg.groups]
    return [msg.group_id]


class ConsumerGroupLearner(Filter):
    name = "group_learner"
    # The engine takes over nothing this member reads: it learns consumer groups in Python.
    native = NATIVE_NOTHING

    def __init__(self, chains: Callable[[], Chains], proxy_info: ProxyInfo,
                 groups: ConsumerGroups | None = None) -> None:
        self.chains = chains  # the current chains (a reload replaces them)
        self.groups = groups or ConsumerGroups()
        proxy_info.groups = self.groups

    def enabled(self) -> bool:
        """A member that uses the consumer groups is configured (the chains may change on
        reload; the filter chain then asks again)."""
        return self.chains().uses(CONSUMER_GROUPS)

    def wants_request(self, api_key: int, version: int) -> bool:
        return api_key in GROUP_REQUESTS and self.enabled()

    async def on_request(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        assert isinstance(msg, _GROUP_REQUEST_CLASSES), "wants_request asks for no other"
        named = groups_named(msg)
        if len(named) != 1:  # offsets of several groups at once: an admin tool, not a member
            return False
        group = named[0]
        leaving = api_key == ApiKey.LEAVE_GROUP or (
            isinstance(msg, _HEARTBEATS) and msg.member_epoch in _LEAVING_EPOCHS)
        if leaving:
            self.groups.forget(ctx.client_address, ctx.client_id, group)
        else:
            self.groups.learn(ctx.client_address, ctx.client_id, group)
        return False
