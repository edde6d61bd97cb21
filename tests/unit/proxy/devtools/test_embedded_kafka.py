"""The broker harness's configuration for extra listeners, and the slices of free ports that
parallel harnesses pick from (no broker is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.devtools.embedded_kafka import (
    PORT_SHARE_ENV,
    ExtraListener,
    KafkaCluster,
    KafkaNode,
    port_share,
    unassigned_ports,
)


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


def test_parallel_harnesses_pick_ports_from_disjoint_slices(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Three workers' blocks of 16 ports never overlap, and together they cover what one
    harness alone picks from."""
    monkeypatch.delenv(PORT_SHARE_ENV, raising=False)
    assert port_share() == (0, 1)
    whole = set(unassigned_ports(16))
    slices = []
    for i in range(3):
        monkeypatch.setenv(PORT_SHARE_ENV, f"{i}/3")
        bases = unassigned_ports(16)
        assert bases, i
        slices.append({p for base in bases for p in range(base, base + 16)})
    assert not (slices[0] & slices[1] or slices[0] & slices[2] or slices[1] & slices[2])
    covered = {base for base in whole if any(base in s for s in slices)}
    assert len(covered) >= 0.95 * len(whole)  # only blocks across a slice edge are left out


@pytest.mark.parametrize("value", ["2/2", "x/2", "1", "-1/3"])
def test_a_bad_port_share_is_refused_by_name(monkeypatch: pytest.MonkeyPatch,
                                              value: str) -> None:
    monkeypatch.setenv(PORT_SHARE_ENV, value)
    with pytest.raises(ValueError, match=PORT_SHARE_ENV):
        unassigned_ports()
