"""librdkafka (confluent-kafka) through Herald against a real broker."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_and_consume_with_each_acks(
    herald: HeraldProcess, topic_name: str, acks: str
) -> None:
    create_topic(herald.bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": herald.bootstrap, "acks": acks, "linger.ms": 5})
    reports: list = []
    sent = [(f"k{i}".encode(), f"value-{i}".encode()) for i in range(500)]
    for key, value in sent:
        producer.produce(topic_name, value, key, headers=[("h", key)],
                         on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0
    assert reports == [None] * len(sent)

    got = consume_all(herald.bootstrap, topic_name, len(sent))
    assert [(m.key(), m.value()) for m in got] == sent
    assert [m.headers() for m in got] == [[("h", k)] for k, _ in sent]
    if acks != "0":
        # With acks the broker reports real offsets back through Herald.
        assert [m.offset() for m in got] == list(range(len(sent)))


def test_idempotent_producer(herald: HeraldProcess, topic_name: str) -> None:
    create_topic(herald.bootstrap, topic_name, partitions=3)
    producer = Producer({
        "bootstrap.servers": herald.bootstrap,
        "enable.idempotence": True,
        "linger.ms": 2,
    })
    errors: list = []
    n = 3000
    for i in range(n):
        producer.produce(topic_name, str(i).encode(), partition=i % 3,
                         on_delivery=lambda err, msg: err and errors.append(err))
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    got = consume_all(herald.bootstrap, topic_name, n)
    assert sorted(int(m.value()) for m in got) == list(range(n))


def test_transactional_producer_and_read_committed(
    herald: HeraldProcess, topic_name: str
) -> None:
    create_topic(herald.bootstrap, topic_name)
    producer = Producer({
        "bootstrap.servers": herald.bootstrap,
        "transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
    })
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic_name, f"committed-{i}".encode(), headers=[("tx", b"yes")])
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic_name, f"aborted-{i}".encode())
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"committed-last")
    producer.commit_transaction(30)

    got = consume_all(herald.bootstrap, topic_name, 11, conf={"isolation.level": "read_committed"})
    values = [m.value().decode() for m in got]
    assert values == [f"committed-{i}" for i in range(10)] + ["committed-last"]
    assert got[0].headers() == [("tx", b"yes")]


def test_consumer_group_rebalances_and_commits(herald: HeraldProcess, topic_name: str) -> None:
    create_topic(herald.bootstrap, topic_name, partitions=4)
    producer = Producer({"bootstrap.servers": herald.bootstrap})
    for i in range(400):
        producer.produce(topic_name, str(i).encode(), partition=i % 4)
    assert producer.flush(30) == 0

    group = f"group-{uuid.uuid4().hex[:8]}"
    assigned: dict[str, set[int]] = {"a": set(), "b": set()}

    def member(name: str) -> Consumer:
        c = Consumer({
            "bootstrap.servers": herald.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        })

        def on_assign(consumer: Consumer, parts: list[TopicPartition]) -> None:
            assigned[name] = {p.partition for p in parts}

        c.subscribe([topic_name], on_assign=on_assign)
        return c

    a = member("a")
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while len(assigned["a"]) < 4 and time.monotonic() < deadline:
        msg = a.poll(0.2)
        if msg is not None and not msg.error():
            seen.append(int(msg.value()))
    assert assigned["a"] == {0, 1, 2, 3}

    b = member("b")
    # Both members poll until the group rebalanced to two members sharing the partitions.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for c in (a, b):
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                seen.append(int(msg.value()))
        if assigned["a"] and assigned["b"] and not assigned["a"] & assigned["b"] and (
            assigned["a"] | assigned["b"] == {0, 1, 2, 3}
        ):
            break
    assert assigned["a"] and assigned["b"], assigned
    assert assigned["a"] | assigned["b"] == {0, 1, 2, 3}

    deadline = time.monotonic() + 60
    while len(set(seen)) < 400 and time.monotonic() < deadline:
        for c in (a, b):
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                seen.append(int(msg.value()))
    assert set(seen) == set(range(400))
    a.commit(asynchronous=False)
    b.commit(asynchronous=False)
    a.close()
    b.close()

    # The commits went through Herald to the group coordinator: a new member sees them.
    probe = Consumer({"bootstrap.servers": herald.bootstrap, "group.id": group})
    committed = probe.committed([TopicPartition(topic_name, p) for p in range(4)], timeout=30)
    probe.close()
    assert sorted(tp.offset for tp in committed) == [100, 100, 100, 100]
