"""TLS sessions on the native relay through a real broker and real clients, compared with the
Python path: TLS towards the clients and towards the broker (with Herald's own client
certificate), `performance.native_relay: auto` against `off`.

librdkafka (confluent_kafka) and kafka-python produce and consume through each; the same
records must arrive, and with `auto` the engine's counters must show the bytes it carried
through TLS itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer

from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess
from tests.support.metrics import moved, scrape, wait_for
from tests.support.native_parts import TLS, needs
from tests.support.secure_cluster import SecureCluster, tls_herald_config

pytestmark = needs(TLS)

TLS_BYTES = "herald_native_relay_tls_bytes_total"
HANDOVERS = "herald_native_relay_handovers_total"
STAMPING = {"produce": [{"type": "trace_context"}, {"type": "audit"}]}


def _herald(secure: SecureCluster, mode: str, **overrides: Any) -> HeraldProcess:
    """TLS on both sides: Herald serves TLS and speaks mTLS to the broker's SSL listener."""
    own = secure.ca.issue(f"herald-up-{mode}", "herald-proxy")
    upstream = {"bootstrap": secure.ssl_address, "tls": {
        "ca_file": str(secure.ca.pem), "cert_file": str(own.cert), "key_file": str(own.key)}}
    return HeraldProcess(tls_herald_config(secure, f"herald-{mode}", mode, upstream,
                                           **overrides))


@pytest.fixture(scope="module")
def herald_for(secure: SecureCluster) -> Callable[[str], HeraldProcess]:
    return partial(_herald, secure)


def _tls(secure: SecureCluster) -> dict[str, Any]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(secure.ca.pem)}


def _produce(bootstrap: str, conf: dict[str, Any], topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", **conf})
    for value in values:
        producer.produce(topic, value, headers=[("h", value[:8])])
        assert producer.flush(30) == 0  # one Produce request per record


def test_librdkafka_same_records_natively_and_in_python(
    secure: SecureCluster, herald_on: HeraldProcess, herald_off: HeraldProcess
) -> None:
    values = [f"record-{i}-".encode() * (i % 50 + 1) for i in range(200)]
    payload = sum(map(len, values))
    conf = _tls(secure)
    carried = {}
    topics = {}
    for proc in (herald_on, herald_off):
        topic = topics[proc is herald_on] = f"ntls-{uuid.uuid4().hex[:8]}"
        create_topic(secure.plaintext, topic)
        before = scrape(proc)
        _produce(proc.bootstrap, conf, topic, values)
        # Small fetches: many of them, so most pass while the session is on the engine (the
        # first goes through Python, where every session starts).
        got = consume_all(proc.bootstrap, topic, len(values),
                          conf={**conf, "max.partition.fetch.bytes": 2048})
        assert [m.value() for m in got] == values
        assert [m.headers() for m in got] == [[("h", v[:8])] for v in values]
        # Every byte read from one side went to the other, on either path: once the closing
        # consumer's last requests, read from it, have reached the broker too.
        after = wait_for(proc, lambda s, b=before: moved(
            b, s, "herald_requests_total", api="Produce") >= len(values) and moved(
            b, s, "herald_bytes_total", direction="client_to_proxy") == moved(
            b, s, "herald_bytes_total", direction="proxy_to_upstream"))
        assert moved(before, after, "herald_requests_total", api="Produce") == len(values)
        assert moved(before, after, "herald_bytes_total", direction="client_to_proxy") == moved(
            before, after, "herald_bytes_total", direction="proxy_to_upstream")
        carried[proc is herald_on] = (
            moved(before, after, TLS_BYTES, direction="client_to_proxy"),
            moved(before, after, TLS_BYTES, direction="proxy_to_client"),
            moved(before, after, HANDOVERS),
        )
    # The records went through the engine's TLS both ways: produced, then (most) fetched.
    assert carried[True][0] > payload and carried[True][1] > payload / 2
    assert carried[True][2] > 0
    assert carried[False] == (0, 0, 0)
    # The same records are in the cluster, as each Herald put them there: read straight from
    # the broker, the engine's topic and the Python path's alike.
    for on, topic in topics.items():
        direct = consume_all(secure.plaintext, topic, len(values))
        assert [m.value() for m in direct] == values, on
        assert [m.headers() for m in direct] == [[("h", v[:8])] for v in values], on


def test_kafka_python_produces_and_consumes_natively(
    secure: SecureCluster, herald_on: HeraldProcess
) -> None:
    topic = f"ntls-kp-{uuid.uuid4().hex[:8]}"
    create_topic(secure.plaintext, topic)
    before = scrape(herald_on)
    values = [f"kp-{i}".encode() * (i % 30 + 1) for i in range(100)]
    tls = {"security_protocol": "SSL", "ssl_cafile": str(secure.ca.pem)}
    producer = KafkaProducer(bootstrap_servers=herald_on.bootstrap, acks="all",
                             linger_ms=0, **tls)
    for value in values:
        producer.send(topic, value, headers=[("kp", value[:4])]).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=herald_on.bootstrap,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             group_id=f"g-{uuid.uuid4().hex[:8]}", consumer_timeout_ms=30_000,
                             max_partition_fetch_bytes=1024, **tls)
    got = []
    for message in consumer:
        got.append((message.value, message.headers))
        if len(got) == len(values):
            break
    consumer.close()
    assert got == [(v, [("kp", v[:4])]) for v in values]
    after = scrape(herald_on)
    assert moved(before, after, TLS_BYTES, direction="client_to_proxy") > sum(map(len, values))
    assert moved(before, after, TLS_BYTES, direction="proxy_to_client") > sum(map(len, values)) / 2


def test_stamping_through_tls_natively(secure: SecureCluster) -> None:
    """The produce chain the engine stamps with (trace context, audit with the client's
    principal) over TLS on both sides: every record stamped, as the Python path does."""
    conf = _tls(secure)
    with _herald(secure, "auto", interceptors=STAMPING) as herald:
        topic = f"ntls-stamp-{uuid.uuid4().hex[:8]}"
        create_topic(secure.plaintext, topic)
        before = scrape(herald)
        values = [f"s{i}".encode() * 20 for i in range(50)]
        _produce(herald.bootstrap, conf, topic, values)
        after = scrape(herald)
    got = consume_all(secure.plaintext, topic, len(values))
    assert [m.value() for m in got] == values
    for message in got:
        headers = dict(message.headers())
        assert headers["h"] == message.value()[:8]
        assert "traceparent" in headers and headers["herald.principal"] == b"User:ANONYMOUS"
    assert moved(before, after, TLS_BYTES, direction="proxy_to_upstream") > sum(map(len, values))
