"""The topic id <-> name map and the cluster id, learned from Metadata responses.

Produce v13 and Fetch v13+ name topics only by id (a UUID); interceptors are configured by
topic name. Clients always ask Metadata (through Herald) before producing or fetching, so the
map is filled before it is needed. One map serves all connections of the process. The cluster
id (Metadata v2+) is what the audit interceptor stamps as the upstream cluster. The chain
member that fills it from Metadata responses is `proxy/filters/topic_ids.py`.
"""

from __future__ import annotations

from collections.abc import Callable

from protocol.contracts.features import TOPIC_ID_VERSION


def topic_key(name: str | None, topic_id: bytes, version: int) -> str | bytes | None:
    """How a Produce or Fetch message of `version` identifies a topic: its name, or its id."""
    return name if version < TOPIC_ID_VERSION else topic_id


class TopicIds:
    def __init__(self, on_cluster_id: Callable[[str], None] | None = None) -> None:
        self.names: dict[bytes, str] = {}
        self.ids: dict[str, bytes] = {}
        self.cluster_id: str | None = None
        self._on_cluster_id = on_cluster_id

    def learn_cluster_id(self, cluster_id: str | None) -> None:
        if cluster_id and cluster_id != self.cluster_id:
            self.cluster_id = cluster_id
            if self._on_cluster_id is not None:
                self._on_cluster_id(cluster_id)

    def learn(self, topic_id: bytes, name: str) -> None:
        if self.names.get(topic_id) != name:
            self.names[topic_id] = name
            self.ids[name] = topic_id

    def name(self, topic_id: bytes) -> str | None:
        return self.names.get(topic_id)

    def topic(self, name: str | None, topic_id: bytes, version: int) -> str | None:
        """The name of a topic of a Produce or Fetch message of `version` (None for an id
        not learned yet)."""
        return name if version < TOPIC_ID_VERSION else self.names.get(topic_id)
