"""Three brokers behind Herald: each broker has its own Herald port; clients use only those."""

from __future__ import annotations

import os
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all
from tests.support.herald_process import HeraldProcess


def _remote_ports_of_this_process() -> set[int]:
    """Remote TCP ports of this process's established connections (Linux /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[9] in inodes and cols[3] == "01":  # ESTABLISHED
                    ports.add(int(cols[2].rsplit(":", 1)[1], 16))
    return ports


def test_partitions_on_every_broker_flow_through_herald_ports(
    kafka_cluster: KafkaCluster, herald_cluster: HeraldProcess, topic_name: str
) -> None:
    admin = AdminClient({"bootstrap.servers": herald_cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=6)])[topic_name].result(30)
    deadline = time.monotonic() + 30
    while True:
        md = admin.list_topics(timeout=10)
        parts = md.topics.get(topic_name)
        if parts and parts.error is None and all(p.leader > 0 for p in parts.partitions.values()):
            break
        assert time.monotonic() < deadline, "no leaders"
        time.sleep(0.2)

    # The metadata clients see names Herald's ports only, one per broker.
    base = herald_cluster.port_base
    assert {b.id: b.port for b in md.brokers.values()} == {1: base + 1, 2: base + 2, 3: base + 3}
    assert {b.host for b in md.brokers.values()} == {"127.0.0.1"}
    leaders = {p.leader for p in md.topics[topic_name].partitions.values()}
    assert len(leaders) >= 2, f"partitions should be led by several brokers: {leaders}"

    producer = Producer({"bootstrap.servers": herald_cluster.bootstrap, "acks": "all"})
    for i in range(600):
        producer.produce(topic_name, str(i).encode(), partition=i % 6)
    producer.poll(0)
    broker_ports = {n.port for n in kafka_cluster.nodes}
    assert not _remote_ports_of_this_process() & broker_ports
    assert producer.flush(30) == 0

    got = consume_all(herald_cluster.bootstrap, topic_name, 600)
    assert sorted(int(m.value()) for m in got) == list(range(600))
    assert {m.partition() for m in got} == set(range(6))
    # Checked while clients are connected: none of them talks to a broker directly.
    assert not _remote_ports_of_this_process() & broker_ports
