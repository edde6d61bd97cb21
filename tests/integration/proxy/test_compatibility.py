"""The compatibility matrix (tests/support/compatibility.py): real clients, real brokers of
each tested Kafka release, through Herald with a produce and a fetch chain; every record is
checked once, with Herald's headers on it and the header the fetch chain strips gone.

Each run covers the pinned broker; `HERALD_COMPAT_BROKERS=all` adds the previous 4.x and the
latest 3.9.x (a broker each, started here), and `HERALD_COMPAT_BROKERS=4.3.1,3.9.2` names the
releases to run. Outcomes are recorded for docs/compatibility.md.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, ConsumerGroupType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer

from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_TESTED_VERSIONS, KAFKA_VERSION
from proxy.devtools.embedded_kafka import free_port
from tests.support import compatibility, foreign_clients
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.java_tools import CONSOLE_CONSUMER, CONSOLE_PRODUCER, run_tool
from tests.support.required_parts import require
from tests.support.secure_cluster import USERS, start_secure_cluster, tls_herald_config
from tests.support.streams.app import running_app

CHAINS = {
    "produce": [{"type": "trace_context"}, {"type": "audit"}],
    "fetch": [{"type": "drop_headers", "headers": ["prefix:secret."]}],
}
RECORDS = 20
_WANTED = os.environ.get("HERALD_COMPAT_BROKERS", "")
BROKERS = KAFKA_TESTED_VERSIONS if _WANTED == "all" else tuple(
    v for v in KAFKA_TESTED_VERSIONS if v in _WANTED.split(",")) or (KAFKA_VERSION,)
Seen = list[tuple[str, dict[str, bytes]]]  # (value, headers) of each record consumed


@dataclass(frozen=True)
class Through:
    """One column's broker (plaintext and secured listeners) and the two Heralds in front of
    it: one plaintext to plaintext, one serving TLS to its clients and passing their SASL
    through to the broker's SASL_SSL listener."""

    version: str
    herald: HeraldProcess
    broker: str
    secured: HeraldProcess
    ca: Path


@pytest.fixture(scope="module")
def through(request: pytest.FixtureRequest) -> Iterator[Through]:
    version = request.param
    cluster = start_secure_cluster(version)
    try:
        upstream = {"bootstrap": cluster.sasl_address, "tls": {"ca_file": str(cluster.ca.pem)}}
        with HeraldProcess(herald_config(
                cluster.plaintext, interceptors=CHAINS,
                admin={"bind": f"127.0.0.1:{free_port()}"})) as herald, HeraldProcess(
                tls_herald_config(cluster, "herald-compat", "auto", upstream,
                                  interceptors=CHAINS)) as secured:
            yield Through(version, herald, cluster.plaintext, secured, cluster.ca.pem)
    finally:
        cluster.stop()


def _check(seen: Seen, principal: str | None = None) -> None:
    """Every record once, with Herald's headers and without the stripped one; through the
    secured Herald, the audit names the client's own SASL user."""
    values = sorted(int(v) for v, _ in seen)
    assert values == list(range(RECORDS)), values
    for _, headers in seen:
        assert "traceparent" in headers and "herald.msg_id" in headers, headers
        assert not any(k.startswith("secret.") for k in headers), headers
        if principal is not None:
            assert headers.get("herald.principal") == principal.encode(), headers


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


def _java_produce(bootstrap: str, topic: str, version: str, *extra: str) -> None:
    lines = "".join(f"secret.token:x\t{i}\n" for i in range(RECORDS))
    tool = "kafka.tools.ConsoleProducer" if _legacy(version) else CONSOLE_PRODUCER
    flag = "--property" if _legacy(version) else "--reader-property"
    run_tool(tool, "--bootstrap-server", bootstrap, "--topic", topic, *extra,
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


def _kafka_python(bootstrap: str, topic: str, **conf: Any) -> Seen:
    producer = KafkaProducer(bootstrap_servers=bootstrap, **conf)
    for i in range(RECORDS):
        producer.send(topic, str(i).encode(), headers=[("secret.token", b"x")])
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             group_id=f"g-{uuid.uuid4().hex[:8]}", consumer_timeout_ms=30000,
                             **conf)
    seen: Seen = []
    for msg in consumer:
        seen.append((msg.value.decode(), dict(msg.headers)))
        if len(seen) == RECORDS:
            break
    consumer.close()
    return seen


async def _aiokafka_cell(bootstrap: str, topic: str, **conf: Any) -> Seen:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **conf)
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send(topic, str(i).encode(), headers=[("secret.token", b"x")])
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                group_id=f"g-{uuid.uuid4().hex[:8]}", **conf)
    await consumer.start()
    seen: Seen = []
    try:
        async with asyncio.timeout(60):
            async for msg in consumer:
                seen.append((msg.value.decode(), dict(msg.headers)))
                if len(seen) == RECORDS:
                    break
    finally:
        await consumer.stop()
    return seen


def _aiokafka(bootstrap: str, topic: str, **conf: Any) -> Seen:
    return asyncio.run(_aiokafka_cell(bootstrap, topic, **conf))


Cell = Callable[[str, str, str], Seen]  # (Herald bootstrap, topic, broker bootstrap) -> seen


def _streams(protocol: str) -> Cell:
    """Kafka Streams (the pinned release) upper-cases the records of an input topic into
    `topic`, exactly once, through Herald; they are read back committed. Its input carries
    the header the fetch chain strips, which Streams forwards with the rest."""
    def cell(bootstrap: str, topic: str, broker: str) -> Seen:
        source = f"{topic}-in"
        create_topic(bootstrap, source)
        with running_app(bootstrap, f"app-{uuid.uuid4().hex[:8]}", source, topic, protocol):
            _librdkafka_produce(bootstrap, source)
            seen = _librdkafka_consume(bootstrap, topic, **{"isolation.level": "read_committed"})
        return seen
    return cell


def _group_type(broker: str, group: str) -> ConsumerGroupType:
    """The protocol of `group` as the broker holds it (classic, or KIP-848's consumer)."""
    admin = AdminClient({"bootstrap.servers": broker})  # held until the answer is in
    listed = admin.list_consumer_groups(request_timeout=30).result(timeout=60)
    types = {g.group_id: g.type for g in listed.valid}
    assert group in types, (group, sorted(types))
    return types[group]


def _go(library: str, group_type: ConsumerGroupType = ConsumerGroupType.CLASSIC) -> Cell:
    """A Go library's cell; the broker is asked which protocol its group ran, since a client
    that finds a KIP-848 API missing from ApiVersions falls back to the classic one."""
    def cell(bootstrap: str, topic: str, broker: str) -> Seen:
        require(foreign_clients.GO_CLIENTS)
        group = f"g-{uuid.uuid4().hex[:8]}"
        seen = foreign_clients.go_cell(library, bootstrap, topic, RECORDS, group)
        assert _group_type(broker, group) == group_type
        return seen
    return cell


def _kafkajs(bootstrap: str, topic: str, broker: str) -> Seen:
    require(foreign_clients.KAFKAJS)
    return foreign_clients.kafkajs_cell(bootstrap, topic, RECORDS, f"g-{uuid.uuid4().hex[:8]}")


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
_STREAMS = "Kafka Streams 4.4"
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
    ("aiokafka", "produce, classic group"): lambda b, t, _: _aiokafka(b, t),
    ("franz-go", "produce, classic group"): _go("franz-go"),
    ("franz-go", "KIP-848 group"): _go("franz-go-kip848", ConsumerGroupType.CONSUMER),
    ("Sarama", "produce, classic group"): _go("sarama"),
    ("kafka-go", "produce, classic group"): _go("kafka-go"),
    ("KafkaJS", "produce, classic group"): _kafkajs,
    (_STREAMS, "classic group, exactly once"): _streams("classic"),
    (_STREAMS, "streams group, exactly once"): _streams("streams"),
}


# Through the secured Herald: TLS to Herald (the cluster's CA), SCRAM-SHA-512 as `alice`
# passed through to the broker. `Secured` cells get (Herald bootstrap, topic, CA file).
USER, SECURED = "alice", "TLS, SASL/SCRAM passthrough"
Secured = Callable[[str, str, Path], Seen]


def _librdkafka_secured(bootstrap: str, topic: str, ca: Path) -> Seen:
    conf = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": USER, "sasl.password": USERS[USER], "ssl.ca.location": str(ca)}
    _librdkafka_produce(bootstrap, topic, **conf)
    return _librdkafka_consume(bootstrap, topic, **conf)


def _java_secured(bootstrap: str, topic: str, ca: Path) -> Seen:
    props = ca.parent / f"client-{uuid.uuid4().hex[:8]}.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{USERS[USER]}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n")
    _java_produce(bootstrap, topic, KAFKA_VERSION, "--command-config", str(props))
    return _java_consume(bootstrap, topic, KAFKA_VERSION, "--command-config", str(props))


def _kafka_python_secured(bootstrap: str, topic: str, ca: Path) -> Seen:
    return _kafka_python(bootstrap, topic, security_protocol="SASL_SSL",
                         sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=USER,
                         sasl_plain_password=USERS[USER], ssl_cafile=str(ca))


def _aiokafka_secured(bootstrap: str, topic: str, ca: Path) -> Seen:
    return _aiokafka(bootstrap, topic, security_protocol="SASL_SSL",
                     sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=USER,
                     sasl_plain_password=USERS[USER],
                     ssl_context=create_ssl_context(cafile=str(ca)))


def _go_secured(library: str) -> Secured:
    def cell(bootstrap: str, topic: str, ca: Path) -> Seen:
        require(foreign_clients.GO_CLIENTS)
        return foreign_clients.go_cell(library, bootstrap, topic, RECORDS,
                                       f"g-{uuid.uuid4().hex[:8]}",
                                       foreign_clients.Secured(ca, USER, USERS[USER]))
    return cell


def _kafkajs_secured(bootstrap: str, topic: str, ca: Path) -> Seen:
    require(foreign_clients.KAFKAJS)
    return foreign_clients.kafkajs_cell(bootstrap, topic, RECORDS, f"g-{uuid.uuid4().hex[:8]}",
                                        foreign_clients.Secured(ca, USER, USERS[USER]))


SECURED_CELLS: dict[tuple[str, str], Secured] = {
    (_JAVA, SECURED): _java_secured,
    (_RDK, SECURED): _librdkafka_secured,
    ("kafka-python", SECURED): _kafka_python_secured,
    ("aiokafka", SECURED): _aiokafka_secured,
    ("franz-go", SECURED): _go_secured("franz-go"),
    ("Sarama", SECURED): _go_secured("sarama"),
    ("kafka-go", SECURED): _go_secured("kafka-go"),
    ("KafkaJS", SECURED): _kafkajs_secured,
}


def test_every_row_of_the_document_is_a_cell() -> None:
    assert not set(CELLS) & set(SECURED_CELLS)
    assert set(CELLS) | set(SECURED_CELLS) == set(compatibility.ROWS)


PAIRS = [(version, row) for version in BROKERS for row in compatibility.ROWS
         if compatibility.not_applicable(version, row[1]) is None]


@pytest.mark.parametrize(("through", "row"), PAIRS, indirect=["through"],
                         ids=[f"{v}-{c}-{f}" for v, (c, f) in PAIRS])
def test_cell(through: Through, row: tuple[str, str]) -> None:
    topic = f"compat-{uuid.uuid4().hex[:8]}"
    create_topic(through.herald.bootstrap, topic)
    try:
        if row in SECURED_CELLS:
            _check(SECURED_CELLS[row](through.secured.bootstrap, topic, through.ca),
                   principal=f"User:{USER}")
        else:
            _check(CELLS[row](through.herald.bootstrap, topic, through.broker))
    except BaseException as exc:
        compatibility.record(through.version, *row, "failed", repr(exc))
        raise
    compatibility.record(through.version, *row, "passed")
