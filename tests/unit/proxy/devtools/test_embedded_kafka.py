"""The broker harness's configuration for extra listeners (no broker is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.devtools.embedded_kafka import ExtraListener, KafkaCluster, KafkaNode


def test_an_extra_listener_is_listened_on_and_advertises_its_own_port(tmp_path: Path) -> None:
    cluster = KafkaCluster(extra_listeners=[ExtraListener("RELAYED", 40001, 40002)])
    node = KafkaNode(1, 40000, 40003, tmp_path)
    props = cluster._properties(node, "1@127.0.0.1:40003")
    assert props["listeners"].split(",") == [
        "PLAINTEXT://127.0.0.1:40000", "CONTROLLER://127.0.0.1:40003",
        "RELAYED://127.0.0.1:40001",
    ]
    assert props["advertised.listeners"].split(",") == [
        "PLAINTEXT://127.0.0.1:40000", "RELAYED://127.0.0.1:40002",
    ]
    assert "RELAYED:PLAINTEXT" in props["listener.security.protocol.map"].split(",")
    assert props["inter.broker.listener.name"] == "PLAINTEXT"


def test_extra_listeners_are_refused_on_a_multi_node_cluster() -> None:
    cluster = KafkaCluster(size=3, extra_listeners=[ExtraListener("RELAYED", 40001, 40002)])
    with pytest.raises(ValueError, match="single-node"):
        cluster.start()
    assert cluster.nodes == []
