"""Learns which consumer group each client reads for, from the group requests it sends.

Only members that use the consumer groups need this (`interceptors.services.CONSUMER_GROUPS`;
`fetch_log`, to say which group fetched a record), so the filter asks for the group requests
to be decoded only while such a member is configured; otherwise it wants nothing and those
frames stay opaque. It only reads: nothing is changed. The map it fills is
`proxy.filters.consumer_groups.ConsumerGroups`, handed to the members as `ProxyInfo.groups`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from interceptors import Chains, ProxyInfo
from interceptors.services import CONSUMER_GROUPS
from protocol.api_keys import ApiKey
from proxy.filters.chain import NATIVE_NOTHING, Exchange, Filter, SessionContext
from proxy.filters.consumer_groups import ConsumerGroups

GROUP_REQUESTS = frozenset({
    ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH, ApiKey.LEAVE_GROUP, ApiKey.CONSUMER_GROUP_HEARTBEAT,
    ApiKey.SHARE_GROUP_HEARTBEAT,  # a share group's member (KIP-932) reads for it likewise
})
_HEARTBEATS = (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_HEARTBEAT)
# ConsumerGroupHeartbeat's member epoch when a member leaves (-1) or a static member leaves
# for now (-2, KIP-848); ShareGroupHeartbeat's when a member leaves (-1).
_LEAVING_EPOCHS = (-1, -2)


def groups_named(api_key: int, msg: Any) -> list[str]:
    """The group ids a group request names (OffsetFetch v8+ may name several)."""
    if api_key == ApiKey.OFFSET_FETCH and msg.groups:
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
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Any
    ) -> bool:
        named = groups_named(api_key, msg)
        if len(named) != 1:  # offsets of several groups at once: an admin tool, not a member
            return False
        group = named[0]
        leaving = api_key == ApiKey.LEAVE_GROUP or (
            api_key in _HEARTBEATS and msg.member_epoch in _LEAVING_EPOCHS)
        if leaving:
            self.groups.forget(ctx.client_address, ctx.client_id, group)
        else:
            self.groups.learn(ctx.client_address, ctx.client_id, group)
        return False
