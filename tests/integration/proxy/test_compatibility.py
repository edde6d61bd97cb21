"""The compatibility matrix (tests/support/compatibility.py): real clients, real brokers of
each tested Kafka release, through Herald with a produce and a fetch chain; every record is
checked once, with Herald's headers on it and the header the fetch chain strips gone.

Each run covers the pinned broker; `HERALD_COMPAT_BROKERS=all` adds the previous 4.x and the
latest 3.9.x (a broker each, started here), and `HERALD_COMPAT_BROKERS=4.3.1,3.9.2` names the
releases to run. Outcomes are recorded for docs/compatibility.md.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer
from kafka import KafkaConsumer, KafkaProducer

from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_TESTED_VERSIONS, KAFKA_VERSION
from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support import compatibility
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.java_tools import CONSOLE_CONSUMER, CONSOLE_PRODUCER, run_tool

CHAINS = {
    "produce": [{"type": "trace_context"}, {"type": "audit"}],
    "fetch": [{"type": "drop_headers", "headers": ["prefix:secret."]}],
}
RECORDS = 20
_WANTED = os.environ.get("HERALD_COMPAT_BROKERS", "")
BROKERS = KAFKA_TESTED_VERSIONS if _WANTED == "all" else tuple(
    v for v in KAFKA_TESTED_VERSIONS if v in _WANTED.split(",")) or (KAFKA_VERSION,)
Seen = list[tuple[str, dict[str, bytes]]]  # (value, headers) of each record consumed


@pytest.fixture(scope="module")
def through(request: pytest.FixtureRequest) -> Iterator[tuple[str, HeraldProcess, str]]:
    """(broker version, Herald in front of a broker of it, the broker's bootstrap)."""
    version = request.param
    with KafkaCluster(size=1, version=version, heap="512m") as cluster, HeraldProcess(
            herald_config(cluster.bootstrap, interceptors=CHAINS,
                          admin={"bind": f"127.0.0.1:{free_port()}"})) as herald:
        yield version, herald, cluster.bootstrap


def _check(seen: Seen) -> None:
    values = sorted(int(v) for v, _ in seen)
    assert values == list(range(RECORDS)), values
    for _, headers in seen:
        assert "traceparent" in headers and "herald.msg_id" in headers, headers
        assert not any(k.startswith("secret.") for k in headers), headers


def _librdkafka_produce(bootstrap: str, topic: str, **conf: object) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    if "transactional.id" in conf:
        producer.init_transactions(30)
        producer.begin_transaction()
    for i in range(RECORDS):
        producer.produce(topic, str(i).encode(), headers=[("secret.token", b"x")])
    if "transactional.id" in conf:
        producer.commit_transaction(30)
    assert producer.flush(30) == 0


def _librdkafka_consume(bootstrap: str, topic: str, **conf: object) -> Seen:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", **conf})
    consumer.subscribe([topic])
    seen: Seen = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.append((msg.value().decode(), dict(msg.headers() or [])))
    finally:
        consumer.close()
    return seen


def _share_group(broker: str, group: str) -> None:
    run_tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", broker, "--alter",
             "--entity-type", "groups", "--entity-name", group,
             "--add-config", "share.auto.offset.reset=earliest")


def _librdkafka_share(bootstrap: str, topic: str, broker: str) -> Seen:
    group = f"sg-{uuid.uuid4().hex[:8]}"
    _share_group(broker, group)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    seen: Seen = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < RECORDS and time.monotonic() < deadline:
            for msg in consumer.poll(1.0):
                if not msg.error():
                    seen.append((msg.value().decode(), dict(msg.headers() or [])))
        consumer.commit_sync()
    finally:
        consumer.close()
    return seen


def _legacy(version: str) -> bool:
    """3.9's console producer lives in `kafka.tools`, and its console tools take
    `--property` where 4.x's take `--reader-property` and `--formatter-property`."""
    return version.startswith("3.")


def _java_produce(bootstrap: str, topic: str, version: str) -> None:
    lines = "".join(f"secret.token:x\t{i}\n" for i in range(RECORDS))
    tool = "kafka.tools.ConsoleProducer" if _legacy(version) else CONSOLE_PRODUCER
    flag = "--property" if _legacy(version) else "--reader-property"
    run_tool(tool, "--bootstrap-server", bootstrap, "--topic", topic,
             flag, "parse.headers=true", version=version, input=lines)


def _java_lines(stdout: str) -> Seen:
    seen: Seen = []
    for line in stdout.splitlines():
        if "\t" not in line:
            continue
        head, value = line.rsplit("\t", 1)
        headers = {k: v.encode() for k, _, v in (h.partition(":") for h in head.split(","))}
        seen.append((value, headers))
    return seen


def _java_consume(bootstrap: str, topic: str, version: str, *extra: str) -> Seen:
    flag = "--property" if _legacy(version) else "--formatter-property"
    result = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", bootstrap, "--topic", topic,
                      "--from-beginning", "--max-messages", str(RECORDS), "--timeout-ms",
                      "60000", "--group", f"g-{uuid.uuid4().hex[:8]}", *extra,
                      flag, "print.headers=true", version=version, timeout=120)
    return _java_lines(result.stdout)


def _java_share(bootstrap: str, topic: str, broker: str) -> Seen:
    group = f"sg-{uuid.uuid4().hex[:8]}"
    _share_group(broker, group)
    result = run_tool("org.apache.kafka.tools.consumer.ConsoleShareConsumer",
                      "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                      "--max-messages", str(RECORDS), "--timeout-ms", "60000",
                      "--formatter-property", "print.headers=true", timeout=120)
    return _java_lines(result.stdout)


def _kafka_python(bootstrap: str, topic: str) -> Seen:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(RECORDS):
        producer.send(topic, str(i).encode(), headers=[("secret.token", b"x")])
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             group_id=f"g-{uuid.uuid4().hex[:8]}", consumer_timeout_ms=30000)
    seen: Seen = []
    for msg in consumer:
        seen.append((msg.value.decode(), dict(msg.headers)))
        if len(seen) == RECORDS:
            break
    consumer.close()
    return seen


Cell = Callable[[str, str, str], Seen]  # (Herald bootstrap, topic, broker bootstrap) -> seen


def _java(version: str, *extra: str) -> Cell:
    def cell(bootstrap: str, topic: str, broker: str) -> Seen:
        _java_produce(bootstrap, topic, version)
        return _java_consume(bootstrap, topic, version, *extra)
    return cell


def _java_share_cell(bootstrap: str, topic: str, broker: str) -> Seen:
    _java_produce(bootstrap, topic, KAFKA_VERSION)
    return _java_share(bootstrap, topic, broker)


def _librdkafka(produce: dict[str, object], consume: dict[str, object]) -> Cell:
    def cell(bootstrap: str, topic: str, broker: str) -> Seen:
        _librdkafka_produce(bootstrap, topic, **produce)
        return _librdkafka_consume(bootstrap, topic, **consume)
    return cell


def _librdkafka_share_cell(bootstrap: str, topic: str, broker: str) -> Seen:
    _librdkafka_produce(bootstrap, topic)
    return _librdkafka_share(bootstrap, topic, broker)


def _transactions(bootstrap: str, topic: str, broker: str) -> Seen:
    _librdkafka_produce(bootstrap, topic, **{"transactional.id": f"tx-{topic}"})
    return _librdkafka_consume(bootstrap, topic, **{"isolation.level": "read_committed"})


_JAVA, _RDK = "Java 4.4 (console tools)", "librdkafka (confluent-kafka)"
CELLS: dict[tuple[str, str], Cell] = {
    (_JAVA, "produce, classic group"): _java(KAFKA_VERSION),
    (_JAVA, "KIP-848 group"): _java(KAFKA_VERSION, "--consumer-property",
                                    "group.protocol=consumer"),
    (_JAVA, "share group"): _java_share_cell,
    ("Java 3.9 (console tools)", "produce, classic group"): _java(KAFKA_LEGACY_VERSION),
    **{(_RDK, f"produce {codec}"): _librdkafka({"compression.type": codec}, {})
       for codec in ("none", "gzip", "snappy", "lz4", "zstd")},
    (_RDK, "KIP-848 group"): _librdkafka({}, {"group.protocol": "consumer"}),
    (_RDK, "share group"): _librdkafka_share_cell,
    (_RDK, "transactions"): _transactions,
    ("kafka-python", "produce, classic group"): lambda b, t, _: _kafka_python(b, t),
}


def test_every_row_of_the_document_is_a_cell() -> None:
    assert set(CELLS) == set(compatibility.ROWS)


PAIRS = [(version, row) for version in BROKERS for row in compatibility.ROWS
         if compatibility.not_applicable(version, row[1]) is None]


@pytest.mark.parametrize(("through", "row"), PAIRS, indirect=["through"],
                         ids=[f"{v}-{c}-{f}" for v, (c, f) in PAIRS])
def test_cell(through: tuple[str, HeraldProcess, str], row: tuple[str, str]) -> None:
    version, herald, broker = through
    cell = CELLS[row]
    topic = f"compat-{uuid.uuid4().hex[:8]}"
    create_topic(herald.bootstrap, topic)
    try:
        _check(cell(herald.bootstrap, topic, broker))
    except BaseException as exc:
        compatibility.record(version, *row, "failed", repr(exc))
        raise
    compatibility.record(version, *row, "passed")
