"""After a SASL login, every Produce and Fetch of the session runs on the engine: the production
shape (TLS towards the clients and the broker, the client's SCRAM-SHA-512 passed through,
`trace_context` + `audit` stamped, `drop_headers` scanned), a short-lived producer and a
short-lived consumer (librdkafka), each on fresh connections.

The login, the metadata and the group coordination are frames filters read: each ends a native
phase that forwarded little. Those phases end by design, not because the data path needs
Python, so they never hold the Produce and Fetch requests after them in Python
(`herald_python_path_total`, any reason).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess
from tests.support.metrics import by_labels, moved, scrape, wait_for
from tests.support.native_parts import TLS, needs
from tests.support.secure_cluster import USERS, SecureCluster, tls_herald_config

pytestmark = needs(TLS)

CHAINS = {"produce": [{"type": "trace_context"}, {"type": "audit"}],
          "fetch": [{"type": "drop_headers", "headers": ["internal.secret"]}]}
PYTHON_PATH = "herald_python_path_total"
TRACEPARENT = re.compile(rb"00-[0-9a-f]{32}-[0-9a-f]{16}-01")
RECORDS = 120


@pytest.fixture(scope="module")
def herald(secure: SecureCluster) -> HeraldProcess:
    upstream = {"bootstrap": secure.sasl_address, "tls": {"ca_file": str(secure.ca.pem)}}
    with HeraldProcess(tls_herald_config(secure, "herald-sasl-data", "auto", upstream,
                                         interceptors=CHAINS)) as proc:
        yield proc


def _scram(secure: SecureCluster) -> dict[str, Any]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": USERS["alice"],
            "ssl.ca.location": str(secure.ca.pem)}


def _produce(bootstrap: str, topic: str, conf: dict[str, Any]
             ) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """A producer that sends its records in many small Produce requests, then goes away."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all",
                         "compression.type": "lz4", "client.id": "short-producer", **conf})
    sent = []
    for n in range(RECORDS):
        value = f"event-{n}:".encode() + b'{"kind": "click", "page": "/home"}' * (n % 3 + 1)
        headers = [("app", b"%d" % n)]
        producer.produce(topic, value, key=b"k%d" % (n % 2), headers=headers)
        sent.append((value, headers))
        if n % 10 == 9:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0
    return sent


def _in_python(before: dict, after: dict) -> dict:
    return {labels: n for labels, n in by_labels(before, after, PYTHON_PATH).items()
            if ("api", "Produce") in labels or ("api", "Fetch") in labels}


def test_short_lived_clients_over_tls_with_scram_run_their_data_path_natively(
        secure: SecureCluster, herald: HeraldProcess) -> None:
    conf = _scram(secure)
    topic = f"sasl-data-{uuid.uuid4().hex[:8]}"
    create_topic(secure.plaintext, topic)
    before = scrape(herald)
    sent = _produce(herald.bootstrap, topic, conf)
    got = consume_all(herald.bootstrap, topic, RECORDS,
                      conf={**conf, "client.id": "short-consumer",
                            "max.partition.fetch.bytes": 512})
    after = wait_for(herald, lambda s: moved(
        before, s, "herald_interceptor_records_total", outcome="seen") >= 2 * RECORDS)
    assert [m.value() for m in got] == [value for value, _ in sent]
    for (_, own), m in zip(sent, got, strict=True):
        headers = dict(m.headers())
        assert headers["app"] == own[0][1]
        assert TRACEPARENT.fullmatch(headers["traceparent"])
        assert headers["herald.principal"] == b"User:alice"
        assert headers["herald.client_id"] == b"short-producer"
    produces = moved(before, after, "herald_requests_total", api="Produce")
    fetches = moved(before, after, "herald_requests_total", api="Fetch")
    assert produces >= RECORDS // 10 and fetches >= 8, (produces, fetches)
    assert moved(before, after, PYTHON_PATH, scope="session") == 0
    # The login and the rest went through Python: the test sees the phases it is about.
    assert moved(before, after, PYTHON_PATH, scope="frame", api="SaslAuthenticate") > 0
    assert _in_python(before, after) == {}, by_labels(before, after, PYTHON_PATH)
