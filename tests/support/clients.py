"""Small conveniences over confluent-kafka used by many integration tests."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec


def create_topic(bootstrap: str, name: str, partitions: int = 1, replicas: int = -1,
                 config: dict[str, str] | None = None) -> None:
    """Create a topic (with `config`, if given) and wait until the leader of every partition
    answers for it (`replicas`: the broker's default when -1). A KRaft broker lists a new
    leader in its metadata a moment before its replica manager leads the partition: a
    request sent in between is refused (NOT_LEADER_OR_FOLLOWER) and retried by the client,
    one Produce request more than the test sent."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=replicas,
                                            config=config or {})])
    futures[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
            p.leader >= 0 for p in md.partitions.values()
        ) and _leaders_answer(admin, name, partitions):
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {name} has no leaders")


def _leaders_answer(admin: AdminClient, name: str, partitions: int) -> bool:
    """Every partition's leader answers a ListOffsets request for it."""
    asked = {TopicPartition(name, p): OffsetSpec.latest() for p in range(partitions)}
    try:
        for future in admin.list_offsets(asked, request_timeout=10).values():
            future.result(timeout=15)
    except KafkaException:
        return False
    return True


def consume_all(
    bootstrap: str,
    topic: str,
    expected: int,
    timeout: float = 60.0,
    conf: dict[str, object] | None = None,
) -> list[Message]:
    """Consume from the start with a fresh group until `expected` records arrived."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **(conf or {}),
    })
    consumer.subscribe([topic])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consume error: {msg.error()}")
            out.append(msg)
    finally:
        consumer.close()
    return out
