"""kafka-python through Herald: a pure-Python client with its own protocol code."""

from __future__ import annotations

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from tests.support.herald_process import HeraldProcess


def test_kafka_python_produce_consume_with_headers(
    herald: HeraldProcess, topic_name: str
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=herald.bootstrap)
    # The broker's metadata lags the controller's answer a moment (KRaft): wait for it.
    admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)],
                        wait_for_metadata=True)
    described = admin.describe_topics([topic_name])
    admin.close()
    assert described[0]["name"] == topic_name
    assert len(described[0]["partitions"]) == 2

    producer = KafkaProducer(bootstrap_servers=herald.bootstrap, acks="all")
    for i in range(100):
        producer.send(topic_name, key=f"k{i}".encode(), value=f"v{i}".encode(),
                      headers=[("n", str(i).encode()), ("empty", b"")], partition=i % 2)
    producer.flush(30)
    producer.close()

    consumer = KafkaConsumer(
        topic_name, bootstrap_servers=herald.bootstrap, auto_offset_reset="earliest",
        group_id="kp-group", consumer_timeout_ms=15000, enable_auto_commit=False,
    )
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) == 100:
            break
    consumer.commit()
    consumer.close()
    assert sorted(int(m.value[1:]) for m in got) == list(range(100))
    for m in got:
        assert m.key == b"k" + m.value[1:]
        assert list(m.headers) == [("n", m.value[1:]), ("empty", b"")]
