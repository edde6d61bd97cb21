"""The chain member that fills the process's topic id map and cluster id
(`proxy/upstream/topic_ids.py`) from the Metadata responses clients ask for through Herald."""

from __future__ import annotations

from protocol.api_keys import ApiKey
from protocol.contracts.features import METADATA_CLUSTER_ID_VERSION, METADATA_TOPIC_ID_VERSION
from protocol.message import Message
from protocol.messages import MetadataResponse
from protocol.primitives import ZERO_UUID
from proxy.filters.chain import NATIVE_NOTHING, Exchange, Filter, SessionContext
from proxy.upstream.topic_ids import TopicIds


class TopicIdLearner(Filter):
    name = "topic_ids"
    # The engine takes over nothing this member reads: it learns topic ids from Metadata
    # responses, in Python.
    native = NATIVE_NOTHING

    def __init__(self, topics: TopicIds) -> None:
        self.topics = topics

    def wants_response(self, api_key: int, version: int) -> bool:
        return api_key == ApiKey.METADATA and version >= METADATA_CLUSTER_ID_VERSION

    async def on_response(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        assert isinstance(msg, MetadataResponse), "wants_response asks for no other"
        self.topics.learn_cluster_id(msg.cluster_id)
        if version >= METADATA_TOPIC_ID_VERSION:
            for t in msg.topics:
                if t.name is not None and t.topic_id != ZERO_UUID:
                    self.topics.learn(t.topic_id, t.name)
        return False
