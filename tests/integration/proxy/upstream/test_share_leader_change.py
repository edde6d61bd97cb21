"""A share group's consumer through Herald while its partition's leader moves to another broker.

The broker that led the partition answers the consumer's next ShareFetch with
NOT_LEADER_OR_FOLLOWER and the new leader's endpoint (`NodeEndpoints`, KIP-932 as KIP-951 for
Fetch). Herald's scan hands such a response to Python, which rewrites the endpoint to Herald's
port for that broker: the consumer follows the leader through Herald, never around it, and
gets every record, the chain's policies applied, on both sides of the move. Kafka's Java share
consumer connects to the endpoint it is given (with the endpoint left as the broker wrote it,
it reads from the new leader directly and gets the headers the chain strips); librdkafka's
asks Metadata again, which Herald rewrites too.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.connections import remote_ports_of_this_process
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.java_tools import (
    CONSOLE_SHARE_CONSUMER,
    run_tool,
    share_group_from_start,
    tool_command,
)

REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
ELECT = "org.apache.kafka.tools.LeaderElectionCommand"
CHAINS = {"produce": [{"type": "trace_context", "link": {"scope": "client_id"}}],
          "fetch": [{"type": "drop_headers", "headers": ["prefix:secret."]}]}
HALF = 300


def _leader(admin: AdminClient, topic: str) -> int:
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader


def _produce(bootstrap: str, topic: str, first: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(first, first + HALF):
        headers = [("n", str(i).encode())]
        if i % 50 == 7:
            headers.append(("secret.token", b"s3cr3t"))
        producer.produce(topic, str(i).encode(), headers=headers)
    assert producer.flush(30) == 0


def _move_leader(cluster: KafkaCluster, topic: str, tmp_path: Path) -> None:
    """Broker 2 first in the replica list, then a preferred leader election: it leads."""
    broker = cluster.nodes[0].address
    plan = tmp_path / "reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2, 1, 3]}]}))
    run_tool(REASSIGN, "--bootstrap-server", broker, "--reassignment-json-file", str(plan),
             "--execute")
    deadline = time.monotonic() + 60
    while "is complete" not in run_tool(
            REASSIGN, "--bootstrap-server", broker, "--reassignment-json-file", str(plan),
            "--verify").stdout:
        assert time.monotonic() < deadline, "the reassignment did not complete"
        time.sleep(1)
    run_tool(ELECT, "--bootstrap-server", broker, "--election-type", "PREFERRED", "--topic",
             topic, "--partition", "0")


class LibrdkafkaReader:
    """librdkafka's share consumer, in this process."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                       "client.id": "queue-reader"})
        self.consumer.subscribe([topic])
        self.pid: int | str = "self"

    def read(self) -> list[tuple[int, dict]]:
        return [(int(m.value()), dict(m.headers() or [])) for m in self.consumer.poll(1.0)
                if not m.error()]

    def close(self) -> None:
        self.consumer.commit_sync()
        self.consumer.close()


class JavaReader:
    """Kafka's Java console share consumer, its output read as it prints."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.process = subprocess.Popen(
            tool_command(CONSOLE_SHARE_CONSUMER, "--bootstrap-server", bootstrap, "--topic",
                         topic, "--group", group, "--max-messages", str(2 * HALF),
                         "--timeout-ms", "120000", "--formatter-property",
                         "print.headers=true", "--command-property", "client.id=queue-reader"),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.pid = self.process.pid
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def read(self) -> list[tuple[int, dict]]:
        got = []
        try:
            while True:
                line = self.lines.get(timeout=0.2 if not got else 0)
                headers_text, _, value = line.rstrip("\n").rpartition("\t")
                headers = dict(h.split(":", 1) for h in headers_text.split(",") if ":" in h)
                got.append((int(value), {k: v.encode() for k, v in headers.items()}))
        except queue.Empty:
            return got

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(30)


@pytest.mark.parametrize("reader", [LibrdkafkaReader, JavaReader],
                         ids=["librdkafka", "java"])
def test_a_share_consumer_follows_a_leader_change_through_herald(
    kafka_cluster: KafkaCluster, tmp_path: Path, reader: type
) -> None:
    config = herald_config(kafka_cluster.nodes[0].address, interceptors=CHAINS,
                           admin={"bind": f"127.0.0.1:{free_port()}"})
    topic = f"share-move-{uuid.uuid4().hex[:8]}"
    group = f"sg-move-{uuid.uuid4().hex[:8]}"
    broker_ports = {n.port for n in kafka_cluster.nodes}
    with HeraldProcess(config) as herald:
        admin = AdminClient({"bootstrap.servers": herald.bootstrap})
        admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]])])[topic].result(
            30)
        share_group_from_start(kafka_cluster.nodes[0].address, group)
        deadline = time.monotonic() + 30
        while _leader(admin, topic) != 1:
            assert time.monotonic() < deadline, "broker 1 never led the partition"
            time.sleep(0.2)
        _produce(herald.bootstrap, topic, 0)
        consumer = reader(herald.bootstrap, topic, group)
        seen: dict[int, dict] = {}
        around: set[int] = set()
        moved = False
        deadline = time.monotonic() + 150
        try:
            while len(seen) < 2 * HALF and time.monotonic() < deadline:
                seen.update(consumer.read())
                around |= remote_ports_of_this_process(consumer.pid) & broker_ports
                if not moved and len(seen) >= HALF // 2:
                    _move_leader(kafka_cluster, topic, tmp_path)
                    moved = True
                    _produce(herald.bootstrap, topic, HALF)
        finally:
            consumer.close()
        leader = _leader(admin, topic)
        logs = herald.logs()
    assert moved and leader == 2, leader
    assert sorted(seen) == list(range(2 * HALF)), (len(seen), logs[-3000:])
    assert all(h["n"] == str(n).encode() and "traceparent" in h for n, h in seen.items())
    assert not any(k.startswith("secret.") for h in seen.values() for k in h)
    assert around == set(), f"the consumer reached brokers around Herald: {around}"
