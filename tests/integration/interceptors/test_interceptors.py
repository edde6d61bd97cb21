"""Interceptor chains through Herald, against the real broker, with real clients."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.java_tools import CONSOLE_CONSUMER, CONSOLE_PRODUCER, run_tool

TRACEPARENT = re.compile(rb"^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$")
AUDIT = ["herald.client_id", "herald.principal", "herald.source", "herald.proxy",
         "herald.cluster", "herald.time", "herald.msg_id", "herald.origin"]

CHAINS = {
    "produce": [
        {"type": "trace_context"},
        {"type": "audit"},
        {"type": "insert_header", "header": "app.id", "value": "checkout"},
        {"type": "require_headers", "headers": ["tenant"], "topics": ["prefix:strict."]},
    ],
    "fetch": [
        {"type": "drop_headers", "headers": ["internal.debug"]},
        {"type": "filter", "header": "skip", "present": True, "topics": ["prefix:filtered."]},
    ],
}


@pytest.fixture(scope="module")
def herald_chains(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    with HeraldProcess(herald_config(kafka.bootstrap, interceptors=CHAINS)) as proc:
        yield proc


def headers_of(msg: object) -> dict[str, list[bytes | None]]:
    out: dict[str, list[bytes | None]] = {}
    for k, v in msg.headers() or []:  # type: ignore[attr-defined]
        out.setdefault(k, []).append(v)
    return out


def assert_stamped(h: dict[str, list[bytes | None]], client_id: str | None) -> None:
    assert len(h["traceparent"]) == 1 and TRACEPARENT.match(h["traceparent"][0])
    for name in AUDIT:
        assert len(h[name]) == 1, (name, h)
    if client_id is not None:
        assert h["herald.client_id"] == [client_id.encode()]
    assert h["herald.source"][0].startswith(b"127.0.0.1:")
    assert re.fullmatch(rb"[0-9a-f-]{36}", h["herald.msg_id"][0])
    assert abs(int(h["herald.time"][0]) - time.time() * 1000) < 120_000
    assert h["app.id"] == [b"checkout"]


def test_librdkafka_records_get_trace_and_audit_headers_and_forgeries_are_stripped(
    herald_chains: HeraldProcess, topic_name: str
) -> None:
    given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    producer = Producer({"bootstrap.servers": herald_chains.bootstrap, "client.id": "rdk-app"})
    producer.produce(topic_name, b"plain", b"k1")
    producer.produce(topic_name, b"traced", b"k2", headers=[("traceparent", given.encode())])
    producer.produce(topic_name, b"forged", b"k3", headers=[
        ("herald.principal", b"User:admin"), ("herald.msg_id", b"fake"), ("keep", b"me"),
        ("internal.debug", b"secret"),
    ])
    assert producer.flush(30) == 0
    got = consume_all(herald_chains.bootstrap, topic_name, 3)
    assert [m.value() for m in got] == [b"plain", b"traced", b"forged"]
    hs = [headers_of(m) for m in got]
    for h in hs:
        assert_stamped(h, "rdk-app")
    assert hs[1]["traceparent"] == [given.encode()]
    assert hs[0]["traceparent"] != hs[2]["traceparent"]  # record mode: one context each
    assert hs[2]["herald.principal"] == [b"User:ANONYMOUS"]
    assert hs[2]["herald.msg_id"] != [b"fake"]
    assert hs[2]["keep"] == [b"me"]
    assert "internal.debug" not in hs[2]  # stripped on the fetch path
    assert len({h["herald.msg_id"][0] for h in hs}) == 3


def test_java_console_producer_records_are_stamped(
    herald_chains: HeraldProcess, topic_name: str
) -> None:
    create_topic(herald_chains.bootstrap, topic_name)
    lines = "".join(f"src:java\tk{i}\tv{i}\n" for i in range(5))
    run_tool(CONSOLE_PRODUCER, "--bootstrap-server", herald_chains.bootstrap, "--topic",
             topic_name, "--reader-property", "parse.key=true", "--reader-property",
             "parse.headers=true", input=lines)
    out = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", herald_chains.bootstrap, "--topic",
                   topic_name, "--from-beginning", "--max-messages", "5",
                   "--formatter-property", "print.headers=true",
                   "--formatter-property", "print.key=true", "--timeout-ms", "30000").stdout
    rows = [line for line in out.splitlines() if "\t" in line]
    assert len(rows) == 5
    for i, row in enumerate(rows):
        headers, key, value = row.split("\t")
        assert (key, value) == (f"k{i}", f"v{i}")
        assert headers.startswith("src:java,traceparent:00-")
        for name in AUDIT:
            assert f"{name}:" in headers
        assert headers.endswith("app.id:checkout")


def test_kafka_python_records_are_stamped(
    herald_chains: HeraldProcess, topic_name: str
) -> None:
    producer = KafkaProducer(bootstrap_servers=herald_chains.bootstrap, client_id="kp-app")
    for i in range(10):
        producer.send(topic_name, value=f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic_name, bootstrap_servers=herald_chains.bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=15000)
    got = [m for _, m in zip(range(10), consumer, strict=False)]
    consumer.close()
    assert [m.value for m in got] == [f"v{i}".encode() for i in range(10)]
    for m in got:
        h: dict[str, list[bytes | None]] = {}
        for k, v in m.headers:
            h.setdefault(k, []).append(v)
        assert h["herald.client_id"] == [b"kp-app"]
        assert TRACEPARENT.match(h["traceparent"][0])


def test_require_headers_rejects_the_partition_and_writes_nothing(
    herald_chains: HeraldProcess, kafka: KafkaCluster
) -> None:
    topic = f"strict.{uuid.uuid4().hex[:8]}"
    create_topic(herald_chains.bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": herald_chains.bootstrap, "linger.ms": 50,
                         "retries": 0})
    errors: dict[int, list] = {0: [], 1: []}
    producer.produce(topic, b"ok-1", partition=0, headers=[("tenant", b"a")],
                     on_delivery=lambda err, msg: errors[0].append(err))
    producer.produce(topic, b"missing", partition=1,
                     on_delivery=lambda err, msg: errors[1].append(err))
    producer.produce(topic, b"ok-2", partition=1, headers=[("tenant", b"b")],
                     on_delivery=lambda err, msg: errors[1].append(err))
    producer.flush(30)
    assert errors[0] == [None]
    assert len(errors[1]) == 2
    for err in errors[1]:
        assert err is not None and err.code() == KafkaError.INVALID_RECORD
    # Partition 1 got nothing, not even the valid record of the refused batch; read directly.
    got = consume_all(kafka.bootstrap, topic, 1, timeout=10)
    assert [(m.partition(), m.value()) for m in got] == [(0, b"ok-1")]
    probe = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "probe"})
    low, high = probe.get_watermark_offsets(TopicPartition(topic, 1), timeout=10)
    probe.close()
    assert (low, high) == (0, 0)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_from_librdkafka_is_re_encoded_and_read_back(
    herald_chains: HeraldProcess, topic_name: str, codec: str
) -> None:
    producer = Producer({"bootstrap.servers": herald_chains.bootstrap,
                         "compression.type": codec, "linger.ms": 20})
    # Recent: the broker deletes records older than its 7-day retention at its checks (30 s
    # after it starts, then every 5 minutes), which fell between this write and the Java
    # consumer's read now and then.
    stamp = (int(time.time()) - 60) * 1000
    for i in range(200):
        producer.produce(topic_name, b"x" * 500 + str(i).encode(), f"k{i}".encode(),
                         timestamp=stamp + i, headers=[("n", str(i).encode())])
    assert producer.flush(30) == 0
    got = consume_all(herald_chains.bootstrap, topic_name, 200)
    for i, m in enumerate(got):
        assert m.key() == f"k{i}".encode()
        assert m.value() == b"x" * 500 + str(i).encode()
        assert m.timestamp()[1] == stamp + i
        h = headers_of(m)
        assert h["n"] == [str(i).encode()]
        assert_stamped(h, None)
    # The Java consumer reads the re-encoded batches too (it checks the CRC).
    java = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", herald_chains.bootstrap, "--topic",
                    topic_name, "--from-beginning", "--max-messages", "200",
                    "--formatter-property", "print.timestamp=true",
                    "--formatter-property", "print.headers=true",
                    "--formatter-property", "print.key=true", "--timeout-ms", "30000")
    rows = [line.split("\t") for line in java.stdout.splitlines() if "\t" in line]
    assert len(rows) == 200, (java.stdout[-2000:], java.stderr[-3000:],
                              herald_chains.logs()[-3000:])
    for i, (timestamp, headers, key, value) in enumerate(rows):
        assert timestamp == f"CreateTime:{stamp + i}"
        assert (key, value) == (f"k{i}", "x" * 500 + str(i))
        assert headers.startswith(f"n:{i},traceparent:00-")
        assert headers.endswith(",app.id:checkout")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_from_the_java_producer_is_re_encoded(
    herald_chains: HeraldProcess, topic_name: str, codec: str
) -> None:
    create_topic(herald_chains.bootstrap, topic_name)
    lines = "".join(f"j:{i}\tk{i}\tvalue-{i}\n" for i in range(50))
    run_tool(CONSOLE_PRODUCER, "--bootstrap-server", herald_chains.bootstrap, "--topic",
             topic_name, "--compression-codec", codec, "--reader-property", "parse.key=true",
             "--reader-property", "parse.headers=true", input=lines)
    got = consume_all(herald_chains.bootstrap, topic_name, 50)
    assert [(m.key(), m.value()) for m in got] == [
        (f"k{i}".encode(), f"value-{i}".encode()) for i in range(50)
    ]
    for i, m in enumerate(got):
        h = headers_of(m)
        assert h["j"] == [str(i).encode()]
        assert_stamped(h, None)


def test_idempotent_producer_with_chains_sees_no_sequence_errors(
    herald_chains: HeraldProcess, topic_name: str
) -> None:
    create_topic(herald_chains.bootstrap, topic_name, partitions=3)
    # batch.size leaves room for the ~300 bytes of headers the chain adds to each record: a
    # batch must still fit the broker's max.message.bytes after enrichment.
    producer = Producer({"bootstrap.servers": herald_chains.bootstrap,
                         "enable.idempotence": True, "linger.ms": 5, "batch.size": 200_000,
                         "batch.num.messages": 1000})
    errors: list = []
    n = 12_000
    for i in range(n):
        producer.produce(topic_name, str(i).encode(), partition=i % 3,
                         on_delivery=lambda err, msg: err and errors.append(err))
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    got = consume_all(herald_chains.bootstrap, topic_name, n, timeout=120)
    assert sorted(int(m.value()) for m in got) == list(range(n))
    assert all("herald.msg_id" in headers_of(m) for m in got[:100])


def test_transactions_with_chains(herald_chains: HeraldProcess, topic_name: str) -> None:
    create_topic(herald_chains.bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": herald_chains.bootstrap,
                         "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"c1")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"a1")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"c2")
    producer.commit_transaction(30)
    got = consume_all(herald_chains.bootstrap, topic_name, 2,
                      conf={"isolation.level": "read_committed"})
    assert [m.value() for m in got] == [b"c1", b"c2"]
    for m in got:
        assert_stamped(headers_of(m), None)


def test_group_behind_a_filtering_fetch_chain_commits_past_filtered_records(
    herald_chains: HeraldProcess, kafka: KafkaCluster
) -> None:
    topic = f"filtered.{uuid.uuid4().hex[:8]}"
    create_topic(herald_chains.bootstrap, topic)
    producer = Producer({"bootstrap.servers": herald_chains.bootstrap})
    for i in range(101):
        headers = [("skip", b"1")] if i % 3 == 0 or 90 <= i < 100 else []
        producer.produce(topic, str(i).encode(), headers=headers)
    assert producer.flush(30) == 0

    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": herald_chains.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    expected = [i for i in range(90) if i % 3] + [100]
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while len(seen) < len(expected) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        seen.append(int(msg.value()))
        assert msg.offset() == int(msg.value())  # offsets are the broker's, gaps and all
    assert seen == expected
    # Ten filtered records precede the last one; the consumer moved and commits past them.
    assert consumer.position([TopicPartition(topic, 0)])[0].offset == 101
    consumer.commit(asynchronous=False)
    consumer.close()
    probe = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    committed = probe.committed([TopicPartition(topic, 0)], timeout=30)
    probe.close()
    assert committed[0].offset == 101


def test_rejected_produce_error_surfaces_through_java_tools(
    herald_chains: HeraldProcess,
) -> None:
    topic = f"strict.{uuid.uuid4().hex[:8]}"
    create_topic(herald_chains.bootstrap, topic)
    result = run_tool(CONSOLE_PRODUCER, "--bootstrap-server", herald_chains.bootstrap,
                      "--topic", topic, "--command-property", "retries=0",
                      input="no-tenant\n", check=False)
    assert "InvalidRecordException" in result.stderr or "INVALID_RECORD" in result.stderr


def test_large_compressed_partitions_round_trip_through_both_chains(
    herald_chains: HeraldProcess, topic_name: str
) -> None:
    """Over 256 KiB of compressed records: (de)compression runs off the event loop."""
    import os

    values = [os.urandom(100_000) for _ in range(9)]  # incompressible: ~900 KB compressed
    producer = Producer({"bootstrap.servers": herald_chains.bootstrap, "compression.type": "zstd",
                         "linger.ms": 200, "message.max.bytes": 1_000_000})
    for i, value in enumerate(values):
        producer.produce(topic_name, value, headers=[("internal.debug", b"x"), ("i", b"%d" % i)])
    assert producer.flush(30) == 0
    got = consume_all(herald_chains.bootstrap, topic_name, len(values))
    assert [m.value() for m in got] == values
    for i, m in enumerate(got):
        h = headers_of(m)
        assert h["i"] == [b"%d" % i]
        assert "internal.debug" not in h
        assert_stamped(h, None)


TRANSFORMS = {
    "produce": [
        {"type": "rename_header", "from": "legacy-id", "to": "request.id"},
        {"type": "header_from", "fields": ["order.id", "order.region"],
         "headers": ["order.id", "region"], "operation": "move"},
        {"type": "insert_header", "header": "schema", "typed": 3},
        {"type": "insert_header", "header": "tenant-topic", "template": "{client_id}@{topic}"},
        {"type": "header_limits", "max_count": 6, "topics": ["prefix:limited."]},
    ],
    "fetch": [
        {"type": "header_to", "headers": ["region"], "fields": ["meta.region"],
         "operation": "copy"},
        {"type": "drop_headers", "headers": ["glob:internal.*"]},
    ],
}


@pytest.fixture(scope="module")
def herald_transforms(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    with HeraldProcess(herald_config(kafka.bootstrap, interceptors=TRANSFORMS)) as proc:
        yield proc


def test_header_transforms_do_what_their_config_says(
    herald_transforms: HeraldProcess, kafka: KafkaCluster, topic_name: str
) -> None:
    import json

    producer = Producer({"bootstrap.servers": herald_transforms.bootstrap, "client.id": "shop"})
    value = {"order": {"id": 42, "region": "eu", "total": 9.5}, "note": "x"}
    producer.produce(topic_name, json.dumps(value).encode(), headers=[
        ("legacy-id", b"r-1"), ("internal.trace", b"secret")])
    assert producer.flush(30) == 0

    # What the broker stored: the produce chain's work.
    (stored,) = consume_all(kafka.bootstrap, topic_name, 1)
    assert json.loads(stored.value()) == {"order": {"total": 9.5}, "note": "x"}
    assert stored.headers() == [
        ("request.id", b"r-1"), ("internal.trace", b"secret"), ("order.id", b"42"),
        ("region", b"eu"), ("schema", b"3"), ("tenant-topic", f"shop@{topic_name}".encode()),
    ]
    # What a consumer through Herald sees: the fetch chain's work on top.
    (seen,) = consume_all(herald_transforms.bootstrap, topic_name, 1)
    assert json.loads(seen.value()) == {"order": {"total": 9.5}, "note": "x",
                                        "meta": {"region": "eu"}}
    assert [k for k, _ in seen.headers()] == [
        "request.id", "order.id", "region", "schema", "tenant-topic"]


def test_header_limits_refuse_records_over_the_limit(herald_transforms: HeraldProcess) -> None:
    topic = f"limited.{uuid.uuid4().hex[:8]}"
    create_topic(herald_transforms.bootstrap, topic)
    producer = Producer({"bootstrap.servers": herald_transforms.bootstrap, "retries": 0})
    results: list = []
    producer.produce(topic, b"{}", headers=[("a", b"1")],
                     on_delivery=lambda err, msg: results.append(err))
    producer.flush(30)
    producer.produce(topic, b"{}", headers=[(f"h{i}", b"x") for i in range(5)],
                     on_delivery=lambda err, msg: results.append(err))
    producer.flush(30)
    assert results[0] is None  # 1 + 2 inserted = 3 headers
    assert results[1] is not None and results[1].code() == KafkaError.INVALID_RECORD  # 7 > 6
