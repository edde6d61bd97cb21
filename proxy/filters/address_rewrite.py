"""Broker address rewriting, as an ordinary filter-chain member.

Every response that tells a client where a broker is gets Herald's address for that broker
instead, so no client ever connects to a broker directly: Metadata (all versions),
FindCoordinator (single-key v0-3 and batched v4+), DescribeCluster, the KIP-951 node
endpoints of Produce v10+ and Fetch v16+ responses (leader hints after NOT_LEADER errors), and
the node endpoints of share groups' ShareFetch and ShareAcknowledge responses (the same hints,
as an ordinary field there). A streams group's endpoints (`PartitionsByUserEndpoint` in
StreamsGroupHeartbeat and Describe responses) are the application's own instances, not
brokers: they pass as they are.
"""

from __future__ import annotations

from protocol.api_keys import ApiKey
from protocol.contracts.features import (
    FETCH_NODE_ENDPOINTS_VERSION,
    FIND_COORDINATOR_BATCHED_VERSION,
    PRODUCE_NODE_ENDPOINTS_VERSION,
)
from protocol.message import Message
from protocol.messages import (
    DescribeClusterResponse,
    FetchResponse,
    FindCoordinatorResponse,
    MetadataResponse,
    ProduceResponse,
    ShareAcknowledgeResponse,
    ShareFetchResponse,
)
from proxy.filters.chain import NATIVE_NOTHING, Exchange, Filter, SessionContext
from proxy.upstream.brokers import BrokerDirectory

_SHARE_RESPONSES = (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)
_LEADER_HINTS = (FetchResponse, ProduceResponse, ShareFetchResponse, ShareAcknowledgeResponse)
"""The responses whose broker addresses are leader hints (`node_endpoints`), read alike."""

# DescribeCluster v1+ may describe controllers (KIP-919); those are not proxied.
_CONTROLLER_ENDPOINTS = 2


class AddressRewriter(Filter):
    name = "address_rewrite"
    # The engine takes over nothing this member reads: it rewrites broker addresses in Python
    # (leader hints in tagged fields pass when a response has none: `tagged_only`).
    native = NATIVE_NOTHING

    def __init__(self, directory: BrokerDirectory) -> None:
        self.directory = directory

    def wants_response(self, api_key: int, version: int) -> bool:
        if api_key in (ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER):
            return True
        if api_key == ApiKey.PRODUCE:
            return version >= PRODUCE_NODE_ENDPOINTS_VERSION
        if api_key == ApiKey.FETCH:
            return version >= FETCH_NODE_ENDPOINTS_VERSION
        return api_key in _SHARE_RESPONSES

    def tail_only(self, api_key: int, version: int) -> bool:
        # Node endpoints are a top-level tagged field of Fetch v16+.
        return api_key == ApiKey.FETCH

    def tagged_only(self, api_key: int, version: int) -> bool:
        # Leader hints are the only thing read in Produce v10+, Fetch v16+ and ShareFetch
        # responses (ShareFetch's are a field, NodeEndpoints, which the engine's scan reads:
        # a response with any goes to Python). ShareAcknowledge responses stay Python's.
        return api_key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH)

    async def on_response(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        learn = self.directory.learn
        # Leader hints first: they are what this member reads of every Produce and Fetch
        # response, and usually there are none.
        if isinstance(msg, _LEADER_HINTS):
            endpoints = msg.node_endpoints
            for e in endpoints:
                e.host, e.port = await learn(e.node_id, e.host, e.port)
            return bool(endpoints)
        if isinstance(msg, MetadataResponse):
            for b in msg.brokers:
                b.host, b.port = await learn(b.node_id, b.host, b.port)
            return bool(msg.brokers)
        if isinstance(msg, FindCoordinatorResponse):
            if version < FIND_COORDINATOR_BATCHED_VERSION:
                if msg.node_id < 0:
                    return False
                msg.host, msg.port = await learn(msg.node_id, msg.host, msg.port)
                return True
            changed = False
            for c in msg.coordinators:
                if c.node_id >= 0:
                    c.host, c.port = await learn(c.node_id, c.host, c.port)
                    changed = True
            return changed
        assert isinstance(msg, DescribeClusterResponse), "wants_response asks for no other"
        if msg.endpoint_type == _CONTROLLER_ENDPOINTS:  # 1 (brokers) as decoded before v1
            return False
        for d in msg.brokers:
            d.host, d.port = await learn(d.broker_id, d.host, d.port)
        return bool(msg.brokers)
