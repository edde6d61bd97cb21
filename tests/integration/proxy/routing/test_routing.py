"""Header-based routing through real brokers: two single-broker KRaft clusters, real clients.

Every test reconciles record for record: each produced record is looked for where the rules
say it goes (key, value, headers, order per source partition), and nowhere else.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer

from proxy.devtools.embedded_kafka import KafkaCluster
from proxy.routing.partitioner import key_partition
from proxy.routing.rules import ORIGIN_HEADER
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, free_port_block, herald_config
from tests.support.routing_runs import (
    assert_where_rules_say,
    by_partition,
    end_offsets,
    expect,
    header,
    is_eu,
    metric,
    mixed_records,
    produce,
    strip_origin,
)


def routing_herald(kafka: KafkaCluster, kafka_b: KafkaCluster, rules: list[dict],
                   **extra: Any) -> HeraldProcess:
    admin = f"127.0.0.1:{free_port_block(1)}"
    config = herald_config(kafka.bootstrap, admin={"bind": admin},
                           clusters={"b": {"bootstrap": kafka_b.bootstrap}},
                           routing={"rules": rules, "delivery_timeout_s": 60}, **extra)
    return HeraldProcess(config)


def test_records_go_where_their_headers_say(kafka: KafkaCluster, kafka_b: KafkaCluster,
                                             topic_name: str) -> None:
    """eu records move to cluster b (same partition), debug ones are mirrored there too,
    big amounts move to another topic of the primary; everything else stays."""
    big = f"{topic_name}-big"
    debug = f"{topic_name}-debug"
    for name in (topic_name, big):
        create_topic(kafka.bootstrap, name, 2)
    create_topic(kafka_b.bootstrap, topic_name, 2)
    create_topic(kafka_b.bootstrap, debug, 1)
    rules = [
        {"name": "debug-copy", "match": {"topics": [topic_name],
                                         "headers": {"header": "debug", "present": True}},
         "mirror": {"cluster": "b", "topic": debug, "partition": 0}},
        {"name": "eu", "match": {"topics": [topic_name],
                                 "headers": {"header": "region", "equals": "eu"}},
         "cluster": "b"},
        {"name": "big", "match": {"topics": [topic_name],
                                  "headers": {"all": [{"header": "region", "absent": True},
                                                      {"header": "amount", "gt": 250}]}},
         "topic": big},
    ]
    records = mixed_records(900, 2)
    with routing_herald(kafka, kafka_b, rules) as herald:
        assert produce(herald.bootstrap, topic_name, records) == []
        # First match wins: a debug record is mirrored, and its original stays.
        is_debug = lambda r: header(r, "debug") is not None  # noqa: E731
        is_eu = lambda r: not is_debug(r) and header(r, "region") == b"eu"  # noqa: E731
        is_big = lambda r: (not is_debug(r) and header(r, "region") is None  # noqa: E731
                            and int(header(r, "amount")) > 250)
        stay = expect(records, lambda r: not is_eu(r) and not is_big(r))
        moved_b = expect(records, is_eu, ((ORIGIN_HEADER, None),))
        moved_big = expect(records, is_big, ((ORIGIN_HEADER, None),))
        mirrored = expect(records, is_debug, ((ORIGIN_HEADER, None),))
        assert all(moved_b.values()) and all(moved_big.values()) and all(mirrored.values())
        got_stay = by_partition(consume_all(kafka.bootstrap, topic_name,
                                            sum(map(len, stay.values()))))
        got_big = by_partition(consume_all(kafka.bootstrap, big,
                                           sum(map(len, moved_big.values()))))
        got_b = by_partition(consume_all(kafka_b.bootstrap, topic_name,
                                         sum(map(len, moved_b.values()))))
        got_debug = by_partition(consume_all(kafka_b.bootstrap, debug,
                                             sum(map(len, mirrored.values()))))
        assert got_stay == stay
        assert strip_origin(got_big) == moved_big
        assert strip_origin(got_b) == moved_b
        # The mirror copies of one topic's two partitions interleave in one partition:
        # per source partition, their order is kept.
        copies = strip_origin(got_debug)[0]
        for source in (0, 1):
            assert [c for c in copies if c in mirrored[source]] == mirrored[source]
        assert sorted(copies) == sorted(mirrored[0] + mirrored[1])
        moved = [r for part in moved_b.values() for r in part]
        assert metric(herald, "herald_routing_records_total", rule="eu",
                      outcome="delivered") == len(moved)
        assert metric(herald, "herald_routing_bytes_total", rule="eu", cluster="b") == sum(
            len(key) + len(value) for key, value, _ in moved)
        assert metric(herald, "herald_routing_ack_seconds_count", cluster="b") >= 1


def test_idempotent_producer_through_a_destination_restart(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str
) -> None:
    """The destination broker is killed and restarted while one idempotent producer writes:
    every record ends up once, in order, where the rules say, and the producer sees no error
    (no sequence error, no duplicate from its own retries)."""
    create_topic(kafka.bootstrap, topic_name, 2)
    create_topic(kafka_b.bootstrap, topic_name, 2)
    records = mixed_records(3000, 2)
    with routing_herald(kafka, kafka_b, EU_TO_B) as herald:
        progress: list[int] = []
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["errors"] = produce(herald.bootstrap, topic_name, records,
                                           pause_every=50, progress=progress)
            except Exception as exc:  # shown by the assertion below
                result["exception"] = repr(exc)

        writer = threading.Thread(target=run)
        writer.start()
        try:
            deadline = time.monotonic() + 120
            while len(progress) < 1000 and time.monotonic() < deadline and writer.is_alive():
                time.sleep(0.1)
            assert writer.is_alive(), result
            kafka_b.stop_node(1)
            time.sleep(5.0)
            assert writer.is_alive(), result  # the restart falls in the middle of the run
        finally:
            kafka_b.restart_node(1)
        writer.join(timeout=300)
        assert not writer.is_alive()
        assert result.get("errors") == [], (result, herald.logs()[-3000:])
        assert_where_rules_say(kafka.bootstrap, kafka_b.bootstrap, topic_name, records, is_eu)
        assert "routing_destination_down cluster=b" in herald.logs()


EU_TO_B = [{"name": "eu", "match": {"headers": {"header": "region", "equals": "eu"}},
            "cluster": "b"}]


def test_reject_refuses_the_partition_with_its_message(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str
) -> None:
    create_topic(kafka.bootstrap, topic_name, 1)
    rules = [{"name": "no-pii", "match": {"headers": {"header": "pii", "eq": True}},
              "reject": "records marked pii may not be written here"}]
    with routing_herald(kafka, kafka_b, rules) as herald:
        records = mixed_records(20, 1)
        records[5]["headers"].append(("pii", b"true"))
        errors = produce(herald.bootstrap, topic_name, records, **{"linger.ms": 500})
        assert errors and all("INVALID_RECORD" in e or "Broker: Invalid record" in e
                              for e in errors), errors
        assert len(errors) == 20  # one batch: the whole partition refused
        assert consume_all(kafka.bootstrap, topic_name, 1, timeout=5) == []
        assert metric(herald, "herald_routing_records_total", rule="no-pii",
                      outcome="rejected") == 20
        clean = mixed_records(10, 1)
        assert produce(herald.bootstrap, topic_name, clean) == []
        assert len(consume_all(kafka.bootstrap, topic_name, 10, timeout=30)) == 10


def test_transactional_producers_are_refused_where_records_would_move(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str
) -> None:
    """Never a partial commit: the transaction cannot commit, nothing of it is written on
    either cluster; a transaction whose records all stay commits as usual."""
    create_topic(kafka.bootstrap, topic_name, 1)
    create_topic(kafka_b.bootstrap, topic_name, 1)
    with routing_herald(kafka, kafka_b, EU_TO_B) as herald:
        producer = Producer({"bootstrap.servers": herald.bootstrap,
                             "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce(topic_name, key=b"a", value=b"stays", headers=[("region", b"us")])
        producer.produce(topic_name, key=b"b", value=b"moves", headers=[("region", b"eu")])
        with pytest.raises(KafkaException) as info:
            producer.commit_transaction(60)
        assert info.value.args[0].txn_requires_abort()
        producer.abort_transaction(60)
        producer.begin_transaction()
        producer.produce(topic_name, key=b"c", value=b"stays", headers=[("region", b"us")])
        producer.commit_transaction(60)
        got = consume_all(kafka.bootstrap, topic_name, 2, timeout=10,
                          conf={"isolation.level": "read_uncommitted"})
        assert [m.value() for m in got] == [b"stays"]
        assert got[0].key() == b"c"
        assert consume_all(kafka_b.bootstrap, topic_name, 1, timeout=5) == []
        assert metric(herald, "herald_routing_records_total", rule="eu",
                      outcome="refused_transactional") >= 1


def test_shadow_changes_nothing_and_counts_what_the_live_rule_then_does(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str
) -> None:
    second = f"{topic_name}-2"
    for name in (topic_name, second):
        create_topic(kafka.bootstrap, name, 2)
        create_topic(kafka_b.bootstrap, name, 2)
    shadow = [dict(EU_TO_B[0], shadow=True)]
    records = mixed_records(300, 2)
    with routing_herald(kafka, kafka_b, shadow) as herald:
        assert produce(herald.bootstrap, topic_name, records) == []
        assert by_partition(consume_all(kafka.bootstrap, topic_name, 300)) == expect(
            records, lambda r: True)
        assert consume_all(kafka_b.bootstrap, topic_name, 1, timeout=5) == []
        would = metric(herald, "herald_routing_records_total", rule="eu", outcome="shadow")
        assert would == 100

        import yaml

        herald.config["routing"]["rules"] = EU_TO_B  # promote: SIGHUP
        # The destinations' producers keep the timeout they started with, and the log says so.
        herald.config["routing"]["delivery_timeout_s"] = 45
        herald.config_path.write_text(yaml.safe_dump(herald.config))
        herald.signal(signal.SIGHUP)
        herald.wait_for_log("event=config_reloaded", timeout=20)
        partial = [line for line in herald.logs().splitlines()
                   if "event=config_reload_partial" in line]
        assert len(partial) == 1 and "keys=routing.delivery_timeout_s " in partial[0], partial
        assert produce(herald.bootstrap, second, records) == []
        moved = consume_all(kafka_b.bootstrap, second, 101, timeout=20)
        assert len(moved) == would
        assert metric(herald, "herald_routing_records_total", rule="eu",
                      outcome="delivered") == would


def test_mirror_copies_arrive_and_originals_equal_a_run_without_rules(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str
) -> None:
    plain = f"{topic_name}-plain"
    for name in (topic_name, plain):
        create_topic(kafka.bootstrap, name, 2)
    create_topic(kafka_b.bootstrap, topic_name, 2)
    rules = [{"name": "copy", "match": {"topics": [topic_name],
                                        "headers": {"header": "debug", "present": True}},
              "mirror": {"cluster": "b"}}]
    records = mixed_records(400, 2)
    with routing_herald(kafka, kafka_b, rules) as herald:
        for name in (topic_name, plain):
            assert produce(herald.bootstrap, name, records) == []
        mirrored = by_partition(consume_all(kafka.bootstrap, topic_name, 400))
        unrouted = by_partition(consume_all(kafka.bootstrap, plain, 400))
        assert mirrored == unrouted == expect(records, lambda r: True)
        is_debug = lambda r: header(r, "debug") is not None  # noqa: E731
        copies = consume_all(kafka_b.bootstrap, topic_name, sum(map(is_debug, records)),
                             timeout=30)
        assert strip_origin(by_partition(copies)) == expect(records, is_debug,
                                                             ((ORIGIN_HEADER, None),))
        # Nothing beyond the copies: the topic ends where they do.
        assert sum(end_offsets(kafka_b.bootstrap, topic_name).values()) == len(copies)


def test_acks_zero_routing_is_best_effort_and_counted(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str
) -> None:
    create_topic(kafka.bootstrap, topic_name, 1)
    create_topic(kafka_b.bootstrap, topic_name, 1)
    with routing_herald(kafka, kafka_b, EU_TO_B) as herald:
        records = mixed_records(300, 1)
        assert produce(herald.bootstrap, topic_name, records, acks=0,
                       **{"enable.idempotence": False}) == []
        moved = consume_all(kafka_b.bootstrap, topic_name, 100, timeout=30)
        assert len(moved) == 100
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and metric(
                herald, "herald_routing_records_total", rule="eu", outcome="best_effort") < 100:
            time.sleep(0.2)
        assert metric(herald, "herald_routing_records_total", rule="eu",
                      outcome="best_effort") == 100
        assert len(consume_all(kafka.bootstrap, topic_name, 200, timeout=30)) == 200


def test_java_producer_routes_by_key_and_java_consumer_reads_what_stayed(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str
) -> None:
    """The Java console producer (idempotent by default since Kafka 3.0) through Herald:
    eu records go to b, partitioned by key as the Java client would; the Java consumer reads
    the rest through Herald; kafka-python's producer, which is not idempotent, routes too."""
    from kafka import KafkaProducer

    from tests.support.java_tools import CONSOLE_CONSUMER, CONSOLE_PRODUCER, run_tool

    create_topic(kafka.bootstrap, topic_name, 2)
    create_topic(kafka_b.bootstrap, topic_name, 3)
    rules = [dict(EU_TO_B[0], partition="key")]
    lines = []
    for i in range(200):
        region = "eu" if i % 2 else "us"
        lines.append(f"region:{region},seq:{i}\tkey-{i}\tvalue-{i}\n")
    with routing_herald(kafka, kafka_b, rules) as herald:
        run_tool(CONSOLE_PRODUCER, "--bootstrap-server", herald.bootstrap, "--topic", topic_name,
                 "--reader-property", "parse.key=true", "--reader-property", "parse.headers=true",
                 input="".join(lines), timeout=120)
        producer = KafkaProducer(bootstrap_servers=herald.bootstrap, acks="all")
        for i in range(200, 260):
            producer.send(topic_name, key=f"key-{i}".encode(), value=f"value-{i}".encode(),
                          headers=[("region", b"eu"), ("seq", str(i).encode())])
        producer.flush(60)
        producer.close()
        moved = consume_all(kafka_b.bootstrap, topic_name, 161, timeout=20)
        assert len(moved) == 160
        for m in moved:
            assert m.partition() == key_partition(m.key(), 3), m.key()
            headers = dict(m.headers())
            assert headers["region"] == b"eu" and headers[ORIGIN_HEADER]
            assert m.value() == b"value-" + headers["seq"]
        seqs = sorted(int(dict(m.headers())["seq"]) for m in moved)
        assert seqs == [*range(1, 200, 2), *range(200, 260)]
        result = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", herald.bootstrap,
                          "--topic", topic_name, "--from-beginning", "--max-messages", "100",
                          "--timeout-ms", "30000", "--property", "print.key=true")
        stayed = sorted(line.split("\t")[0] for line in result.stdout.splitlines()
                        if line.startswith("key-"))  # 4.x also prints a deprecation note
        assert stayed == sorted(f"key-{i}" for i in range(0, 200, 2))


def test_a_failed_destination_fails_the_partition_and_client_retries_deliver_once(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str
) -> None:
    """With the destination down longer than Herald's delivery timeout, the client gets a
    retriable error and retries; once the destination is back, every record is there once,
    and the records that stayed were not written twice either."""
    create_topic(kafka.bootstrap, topic_name, 1)
    create_topic(kafka_b.bootstrap, topic_name, 1)
    admin = f"127.0.0.1:{free_port_block(1)}"
    config = herald_config(kafka.bootstrap, admin={"bind": admin},
                           clusters={"b": {"bootstrap": kafka_b.bootstrap}},
                           routing={"rules": EU_TO_B, "delivery_timeout_s": 2})
    records = mixed_records(300, 1)
    with HeraldProcess(config) as herald:
        assert "b=up" in _readyz(herald)
        assert metric(herald, "herald_cluster_up", cluster="b") == 1
        kafka_b.stop_node(1)
        result: dict[str, Any] = {}
        writer = threading.Thread(target=lambda: result.update(
            errors=produce(herald.bootstrap, topic_name, records, pause_every=100)))
        writer.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and metric(
                herald, "herald_routing_records_total", rule="eu", outcome="failed") == 0:
            time.sleep(0.5)
        assert metric(herald, "herald_routing_records_total", rule="eu", outcome="failed") > 0
        assert "b=down" in _readyz(herald)
        kafka_b.restart_node(1)
        writer.join(timeout=300)
        assert result.get("errors") == []
        got_stay = by_partition(consume_all(kafka.bootstrap, topic_name, 201, timeout=20))
        got_b = by_partition(consume_all(kafka_b.bootstrap, topic_name, 101, timeout=20))
        assert got_stay == expect(records, lambda r: not is_eu(r))
        assert strip_origin(got_b) == expect(records, is_eu, ((ORIGIN_HEADER, None),))
        logs = herald.logs()
        assert logs.count("routing_destination_down cluster=b") == 1
        assert logs.count("routing_destination_up cluster=b") == 2  # at start, and back


def test_readiness_reports_each_destination_as_first_probed(
    kafka: KafkaCluster, kafka_b: KafkaCluster
) -> None:
    """The first probe of every destination is part of starting: the moment Herald says it
    is ready, /readyz and the metric tell which clusters answered, never a guess."""
    admin = f"127.0.0.1:{free_port_block(1)}"
    nobody = f"127.0.0.1:{free_port_block(1)}"
    config = herald_config(kafka.bootstrap, admin={"bind": admin},
                           clusters={"b": {"bootstrap": kafka_b.bootstrap},
                                     "gone": {"bootstrap": nobody}},
                           routing={"rules": EU_TO_B})
    with HeraldProcess(config) as herald:
        assert _readyz(herald) == "ready (clusters: b=up, gone=down)\n"
        assert metric(herald, "herald_cluster_up", cluster="b") == 1
        assert metric(herald, "herald_cluster_up", cluster="gone") == 0


def _readyz(herald: HeraldProcess) -> str:
    import urllib.request

    return urllib.request.urlopen(f"{herald.admin_url}/readyz", timeout=10).read().decode()


def test_a_span_per_routed_batch_links_the_records_trace_contexts(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str, request: pytest.FixtureRequest
) -> None:
    collected, port = request.getfixturevalue("receiver")
    create_topic(kafka.bootstrap, topic_name, 1)
    create_topic(kafka_b.bootstrap, topic_name, 1)
    config = herald_config(kafka.bootstrap, clusters={"b": {"bootstrap": kafka_b.bootstrap}},
                           routing={"rules": EU_TO_B},
                           interceptors={"produce": [{"type": "trace_context",
                                                      "mode": "record"}]})
    env = {"OTEL_TRACES_EXPORTER": "otlp",
           "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
           "OTEL_BSP_SCHEDULE_DELAY": "200"}
    with HeraldProcess(config, env=env):
        records = [r for r in mixed_records(30, 1) if header(r, "region") == b"eu"]
        assert produce(config["listen"]["bootstrap"], topic_name, records) == []
        moved = consume_all(kafka_b.bootstrap, topic_name, 10)
        contexts = set()
        for m in moved:
            _, trace_id, span_id, _ = dict(m.headers())["traceparent"].decode().split("-")
            contexts.add((trace_id, span_id))
        name = f"send {topic_name}"
        spans = collected.wait(lambda spans: {link for s in spans if s.name == name
                                              for link in s.links} >= contexts)
        routed = [s for s in spans if s.name == name]
        assert routed and all(s.attributes["herald.route.cluster"] == "b" for s in routed)
        assert {link for s in routed for link in s.links} == contexts
        assert sum(s.attributes["messaging.batch.message_count"] for s in routed) == 10


def test_batches_rules_only_mirror_or_shadow_reach_the_broker_byte_identical(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str
) -> None:
    """A batch whose records a mirror rule copies and a shadow rule would move is written to
    the primary as the bytes the client sent (everything the CRC covers, and the CRC), while
    the copies arrive on the destination."""
    from protocol.api_keys import ApiKey
    from protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
    from protocol.messages.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from protocol.records import Record, build_batch
    from tests.support.raw_client import round_trip

    create_topic(kafka.bootstrap, topic_name, 1)
    create_topic(kafka_b.bootstrap, topic_name, 1)
    rules = [dict(EU_TO_B[0], shadow=True),
             {"name": "copy", "match": {"headers": {"header": "debug", "present": True}},
              "mirror": {"cluster": "b"}}]
    records = mixed_records(60, 1)
    batch = build_batch([Record(r["key"], r["value"], r["headers"], offset_delta=i)
                         for i, r in enumerate(records)], base_timestamp=int(time.time() * 1000))
    request = ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[TopicProduceData(
        name=topic_name, partition_data=[PartitionProduceData(index=0, records=batch)])])
    with routing_herald(kafka, kafka_b, rules) as herald:
        produced = round_trip(herald.bootstrap, ApiKey.PRODUCE, 9, request, timeout=60)
        assert produced.responses[0].partition_responses[0].error_code == 0
        fetched = round_trip(kafka.bootstrap, ApiKey.FETCH, 12, FetchRequest(
            max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, topics=[FetchTopic(
                topic=topic_name, partitions=[FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]))
        stored = bytes(fetched.responses[0].partitions[0].records)
        # The broker sets the base offset and the leader epoch (bytes 0-16, outside the CRC).
        assert len(stored) == len(batch) and stored[16:] == batch[16:]
        is_debug = lambda r: header(r, "debug") is not None  # noqa: E731
        mirrored = sum(map(is_debug, records))
        copies = consume_all(kafka_b.bootstrap, topic_name, mirrored, timeout=30)
        assert strip_origin(by_partition(copies)) == expect(records, is_debug,
                                                             ((ORIGIN_HEADER, None),))
        assert end_offsets(kafka_b.bootstrap, topic_name) == {0: mirrored}
        assert metric(herald, "herald_routing_records_total", rule="eu",
                      outcome="shadow") == sum(map(is_eu, records))
