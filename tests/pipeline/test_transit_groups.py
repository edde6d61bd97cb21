"""Transit latency per consumer group, through Herald with fetch_log and a real broker.

Four readers fetch the same records: a confluent-kafka consumer in a classic group (JoinGroup,
SyncGroup, Heartbeat, OffsetFetch), the Java console consumer in a KIP-848 group
(ConsumerGroupHeartbeat), Kafka's Java console share consumer in a share group (KIP-932:
ShareGroupHeartbeat, ShareFetch) and a kafka-python consumer with no group at all (`assign()`).
Herald learns each client's group from its group requests and stamps it on the observations;
the pipeline's transit and lag tables then have one row per group (a lag row per time
bucket), each equal to what that group fetched.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from pipeline.config import PipelineConfig
from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess
from tests.support.java_tools import (
    CONSOLE_CONSUMER,
    CONSOLE_SHARE_CONSUMER,
    command_properties,
    run_tool,
    share_group_from_start,
)
from tests.support.pipeline.observations import FETCH_TOPIC, read_observations
from tests.support.pipeline.scenario import expected_transit

RECORDS = 24
PARTITIONS = 2


def _read_without_group(bootstrap: str, topic: str) -> set[tuple[int, int]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             client_id="reader-solo", enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        got: set[tuple[int, int]] = set()
        for _ in range(120):
            for records in consumer.poll(timeout_ms=500).values():
                got.update((r.partition, r.offset) for r in records)
            if len(got) >= RECORDS:
                break
        return got
    finally:
        consumer.close()


def test_transit_is_reported_per_consumer_group(spark, herald_traced: HeraldProcess,
                                                kafka: KafkaCluster, tmp_path) -> None:
    from pipeline.jobs import run_batch

    topic = f"transit-{uuid.uuid4().hex[:8]}"
    alpha, beta = f"alpha-{uuid.uuid4().hex[:6]}", f"beta-{uuid.uuid4().hex[:6]}"
    gamma = f"gamma-{uuid.uuid4().hex[:6]}"  # the share group
    share_group_from_start(kafka.bootstrap, gamma)
    create_topic(kafka.bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": herald_traced.bootstrap,
                         "client.id": "transit-writer"})
    for i in range(RECORDS):
        producer.produce(topic, f"r{i}".encode(), f"k{i}".encode())
    assert producer.flush(30) == 0

    got_alpha = consume_all(herald_traced.bootstrap, topic, RECORDS,
                            conf={"group.id": alpha, "client.id": "reader-alpha"})
    result = run_tool(
        CONSOLE_CONSUMER, "--bootstrap-server", herald_traced.bootstrap, "--topic", topic,
        "--group", beta, "--from-beginning", "--max-messages", str(RECORDS),
        "--timeout-ms", "30000",
        *command_properties(CONSOLE_CONSUMER, {"client.id": "reader-beta",
                                               "group.protocol": "consumer"}), timeout=90)
    assert f"Processed a total of {RECORDS} messages" in result.stderr, result.stderr[-2000:]
    got_solo = _read_without_group(herald_traced.bootstrap, topic)
    result = run_tool(
        CONSOLE_SHARE_CONSUMER, "--bootstrap-server", herald_traced.bootstrap, "--topic", topic,
        "--group", gamma, "--max-messages", str(RECORDS), "--timeout-ms", "30000",
        "--command-property", "client.id=reader-share", timeout=90, check=False)
    assert len(result.stdout.split()) == RECORDS, result.stderr[-2000:]

    offsets = {(m.partition(), m.offset()) for m in got_alpha}
    assert len(offsets) == RECORDS and got_solo == offsets
    hop_time = {(topic, m.partition(), m.offset()): int(dict(m.headers())["herald.time"])
                for m in got_alpha}

    group_of = {"reader-alpha": alpha, "reader-beta": beta, "reader-share": gamma,
                "reader-solo": None}

    def every_reader_seen_every_record(found: list[dict]) -> bool:
        return all({(o["p"], o["o"]) for o in found if o["c"] == c} == offsets
                   for c in group_of)

    fetches = read_observations(kafka.bootstrap, {topic}, len(group_of) * RECORDS,
                                every_reader_seen_every_record)
    by_consumer: dict[str, set[tuple[int, int]]] = {c: set() for c in group_of}
    for o in fetches:
        assert o["g"] == group_of[o["c"]], o
        by_consumer[o["c"]].add((o["p"], o["o"]))
    assert by_consumer == dict.fromkeys(group_of, offsets)  # each fetched every record

    config = PipelineConfig(bootstrap=kafka.bootstrap, topics=[topic], output=str(tmp_path),
                            shuffle_partitions=2, fetch_topic=FETCH_TOPIC)
    summary = run_batch(spark, config)
    want = expected_transit(fetches, hop_time)
    assert set(want) == {(topic, alpha), (topic, beta), (topic, gamma), (topic, None)}
    rows = [r.asDict(recursive=True) for r in spark.read.parquet(f"{tmp_path}/transit").collect()]
    got = {(r["topic"], r["group"]): r for r in rows}
    assert set(got) == set(want)
    for key, exp in want.items():
        assert got[key]["count"] == exp["count"] == RECORDS
        assert got[key]["consumers"] == exp["consumers"] == [
            c for c, g in group_of.items() if (topic, g) == key]
        for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms"):
            assert got[key][k] == pytest.approx(exp[k]), (key, k)
        row = got[key]
        assert 0 <= row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"] <= row["max_ms"], row
    assert [t["group"] for t in summary["transit"]] == sorted([alpha, beta, gamma]) + [None]
    # Lag too: every group's first fetch of every record, counted in its time buckets.
    lag: dict[tuple[str, str | None], int] = {}
    for r in spark.read.parquet(f"{tmp_path}/lag").collect():
        assert r["p50_s"] >= 0 and r["max_s"] >= r["p50_s"], r
        lag[(r["topic"], r["group"])] = lag.get((r["topic"], r["group"]), 0) + r["fetches"]
    assert lag == dict.fromkeys(want, RECORDS)
