"""Share groups (KIP-932, Kafka's queues) through Herald's fetch chain, with real share
consumers: Kafka's Java console share consumer and librdkafka's (confluent-kafka's
ShareConsumer), against the real broker.

What the chain enforces holds for a queue's consumer as for a classic group's: headers it
strips are gone, records it drops are not handed out, and the records it dropped do not come
back (the consumer acknowledges them as gaps, which the broker archives: the group's lag
ends at 0 and nothing is redelivered).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, ShareConsumer

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.java_tools import CONSOLE_SHARE_CONSUMER, run_tool, share_group_from_start
from tests.support.metrics import Samples, scrape, total, wait_for

SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"

CHAINS = {
    "fetch": [
        {"type": "drop_headers", "headers": ["prefix:secret."]},
        {"type": "filter", "header": "tier", "equals": "hidden"},
    ],
}
RECORDS = 200  # every other one hidden


@pytest.fixture(scope="module")
def herald_share(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    config = herald_config(kafka.bootstrap, interceptors=CHAINS,
                           admin={"bind": f"127.0.0.1:{free_port()}"})
    with HeraldProcess(config) as proc:
        yield proc


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(RECORDS):
        tier = b"hidden" if i % 2 else b"visible"
        producer.produce(topic, f"{i}".encode(),
                         headers=[("tier", tier), ("secret.token", b"s3cr3t"), ("keep", b"1")])
    assert producer.flush(30) == 0


def _lag(kafka: KafkaCluster, group: str, topic: str) -> list[str]:
    """The group's rows for `topic` as ShareGroupCommand describes its offsets."""
    out = run_tool(SHARE_GROUP_COMMAND, "--bootstrap-server", kafka.bootstrap, "--describe",
                   "--group", group, "--offsets").stdout
    return [line for line in out.splitlines() if topic in line]


def _start(herald: HeraldProcess, kafka: KafkaCluster) -> tuple[str, str, Samples]:
    """A topic of RECORDS records, a share group reading it from the start, and Herald's
    metrics before the group reads."""
    topic = f"share-{uuid.uuid4().hex[:8]}"
    create_topic(herald.bootstrap, topic)
    _produce(herald.bootstrap, topic)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    share_group_from_start(kafka.bootstrap, group)
    return topic, group, scrape(herald)


def _settled(kafka: KafkaCluster, group: str, topic: str) -> list[str]:
    """Waits until the group acknowledged (or archived) every record of `topic`: the share
    partition's start offset reaches its end. Rows as the command prints them."""
    deadline = time.monotonic() + 60
    rows = _lag(kafka, group, topic)
    while time.monotonic() < deadline:
        if rows and all(row.split()[-1] == "0" for row in rows):
            return rows
        time.sleep(1)
        rows = _lag(kafka, group, topic)
    raise AssertionError(f"share group {group} did not settle {topic}: {rows}")


def test_the_java_share_consumer_gets_what_the_chain_lets_through(
    herald_share: HeraldProcess, kafka: KafkaCluster
) -> None:
    topic, group, before = _start(herald_share, kafka)
    result = run_tool(
        CONSOLE_SHARE_CONSUMER, "--bootstrap-server", herald_share.bootstrap, "--topic", topic,
        "--group", group, "--max-messages", str(RECORDS // 2), "--timeout-ms", "60000",
        "--formatter-property", "print.headers=true", "--formatter-property", "print.offset=true",
        timeout=120, check=False)
    lines = [line for line in result.stdout.splitlines() if "tier:" in line]
    assert len(lines) == RECORDS // 2, (result.stdout[-2000:], result.stderr[-2000:],
                                        herald_share.logs()[-3000:])
    assert all("tier:visible" in line and "keep:1" in line for line in lines), lines[:3]
    assert not any("secret." in line for line in lines), lines[:3]
    rows = _settled(kafka, group, topic)
    after = wait_for(herald_share, lambda s: total(s, "herald_share_records_dropped_total")
                     >= total(before, "herald_share_records_dropped_total") + RECORDS // 2)
    assert total(after, "herald_share_records_dropped_total") - total(
        before, "herald_share_records_dropped_total") == RECORDS // 2
    assert total(after, "herald_share_records_redelivered_total") == total(
        before, "herald_share_records_redelivered_total"), rows


def test_librdkafkas_share_consumer_gets_what_the_chain_lets_through(
    herald_share: HeraldProcess, kafka: KafkaCluster
) -> None:
    topic, group, before = _start(herald_share, kafka)
    consumer = ShareConsumer({"bootstrap.servers": herald_share.bootstrap, "group.id": group})
    consumer.subscribe([topic])
    seen: list[tuple[int, dict[str, bytes | None]]] = []
    deadline = time.monotonic() + 90
    try:
        while len(seen) < RECORDS // 2 and time.monotonic() < deadline:
            for msg in consumer.poll(1.0):  # a batch (Messages)
                if msg.error():
                    continue
                seen.append((msg.offset(), dict(msg.headers() or [])))
        # Implicit acknowledgement: the last poll's records are accepted by the next poll or
        # a commit (librdkafka's close alone leaves them acquired, straight to the broker too).
        consumer.commit_sync()
    finally:
        consumer.close()
    assert len(seen) == RECORDS // 2, (len(seen), herald_share.logs()[-3000:])
    assert sorted(offset for offset, _ in seen) == list(range(0, RECORDS, 2))
    assert all(h["tier"] == b"visible" and h["keep"] == b"1" for _, h in seen)
    assert not any(k.startswith("secret.") for _, h in seen for k in h)
    rows = _settled(kafka, group, topic)
    after = scrape(herald_share)
    assert total(after, "herald_share_records_dropped_total") - total(
        before, "herald_share_records_dropped_total") == RECORDS // 2
    assert total(after, "herald_share_records_redelivered_total") == total(
        before, "herald_share_records_redelivered_total"), rows


def test_fetch_log_observes_what_a_share_group_fetched_under_its_group(
    kafka: KafkaCluster,
) -> None:
    """`fetch_log` publishes an observation for each record a share consumer was given (and
    none for those the chain dropped), naming the share group as the group that fetched it,
    learnt from the member's ShareGroupHeartbeat: transit and lag for a queue's readers."""
    observations = f"fetches-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap, observations)
    chains = {"produce": [{"type": "trace_context"}],
              "fetch": [*CHAINS["fetch"], {"type": "fetch_log", "bootstrap": kafka.bootstrap,
                                           "topic": observations}]}
    with HeraldProcess(herald_config(kafka.bootstrap, interceptors=chains,
                                     admin={"bind": f"127.0.0.1:{free_port()}"})) as herald:
        topic, group, _ = _start(herald, kafka)
        result = run_tool(
            CONSOLE_SHARE_CONSUMER, "--bootstrap-server", herald.bootstrap, "--topic", topic,
            "--group", group, "--max-messages", str(RECORDS // 2), "--timeout-ms", "60000",
            "--command-property", "client.id=queue-reader", timeout=120, check=False)
        assert len(result.stdout.split()) == RECORDS // 2, result.stderr[-2000:]
        seen = consume_all(kafka.bootstrap, observations, RECORDS // 2, timeout=60)
    obs = [json.loads(m.value()) for m in seen]
    assert sorted(o["o"] for o in obs) == list(range(0, RECORDS, 2))
    assert all(o["t"] == topic and o["g"] == group and o["c"] == "queue-reader" for o in obs), \
        obs[:2]
