"""The production shape on the native data plane, through a real broker and real clients: TLS
towards the clients and towards the broker, the client's own SCRAM-SHA-512 passed through,
lz4 and zstd producers, a produce chain the engine stamps (`trace_context` + `audit`) and a
fetch chain it scans (`drop_headers`). `performance.native_relay: auto` against `off`:

* librdkafka and the Java clients read back the same records and the same headers from both;
* the interceptor counters match, the compressed batches re-encoded with the producer's codec
  among them;
* with `auto`, the records travelled through the engine's TLS, and no Produce or Fetch request
  was handled in Python because the engine could not (`herald_python_path_total` with reason
  `produce_chain`, `fetch_chain` or `engine_declined`), nor was any session Python's whole.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from protocol.contracts.headers import AUDIT_FIELDS, audit_header
from protocol.contracts.headers import TRACEPARENT as TRACEPARENT_KEY
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess
from tests.support.java_tools import CONSOLE_CONSUMER, PRODUCER_PERF, command_properties, run_tool
from tests.support.metrics import by_labels, moved, scrape, wait_for
from tests.support.native_parts import TLS, needs
from tests.support.secure_cluster import USERS, SecureCluster, tls_herald_config

pytestmark = needs(TLS)

# The fetch chain drops a header the records do not carry: the engine scans every response and
# finds nothing to change (a response it must change goes to Python, counted as such).
CHAINS = {"produce": [{"type": "trace_context"}, {"type": "audit"}],
          "fetch": [{"type": "drop_headers", "headers": ["internal.secret"]}]}
PYTHON_PATH = "herald_python_path_total"
TLS_BYTES = "herald_native_relay_tls_bytes_total"
ENGINE_COULD_NOT = ("produce_chain", "fetch_chain", "engine_declined")
COUNTERS = ("herald_interceptor_records_total", "herald_interceptor_headers_added_total",
            "herald_batches_reencoded_total")
TRACEPARENT = re.compile(rb"00-[0-9a-f]{32}-[0-9a-f]{16}-01")
# What `trace_context` + `audit` put on a record that had no headers, in order.
STAMPED_KEYS = (TRACEPARENT_KEY, *(audit_header(field) for field in AUDIT_FIELDS))
ROUNDS, PER_ROUND = 16, 10


def _herald(secure: SecureCluster, mode: str) -> HeraldProcess:
    # Passthrough: the client's SCRAM exchange goes to the broker's SASL_SSL listener.
    upstream = {"bootstrap": secure.sasl_address, "tls": {"ca_file": str(secure.ca.pem)}}
    return HeraldProcess(tls_herald_config(secure, f"herald-prod-{mode}", mode, upstream,
                                           interceptors=CHAINS))


@pytest.fixture(scope="module")
def herald_for(secure: SecureCluster) -> Callable[[str], HeraldProcess]:
    return partial(_herald, secure)


def _scram(secure: SecureCluster) -> dict[str, Any]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": USERS["alice"],
            "ssl.ca.location": str(secure.ca.pem)}


def _send(bootstrap: str, topic: str, codec: str, conf: dict[str, Any]
          ) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """ROUNDS batches of PER_ROUND records that compress."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "acks": "all",
                         "batch.num.messages": PER_ROUND, "compression.type": codec,
                         "client.id": "prod-test", **conf})
    sent = []
    for r in range(ROUNDS):
        for i in range(PER_ROUND):
            n = r * PER_ROUND + i
            value = f"payment-{n}:".encode() + b'{"amount": 12.5, "currency": "EUR"}' * (i % 4 + 2)
            headers = [("app", b"%d" % n)]
            producer.produce(topic, value, key=b"k%d" % (n % 3), headers=headers)
            sent.append((value, headers))
        assert producer.flush(30) == 0
    return sent


def _counted(before: dict, after: dict) -> dict[str, dict]:
    return {name: by_labels(before, after, name) for name in COUNTERS}


def _most_on_the_engine(before: dict, after: dict) -> None:
    """Most Produce and Fetch requests ran on the engine (those Python handled came between
    its phases, after a frame a filter reads), and records went through the engine's TLS both
    ways. (Small fetches: a batch or two each, so there are enough of them to tell.)"""
    for api in ("Produce", "Fetch"):
        requests = moved(before, after, "herald_requests_total", api=api)
        in_python = moved(before, after, PYTHON_PATH, scope="frame", api=api)
        assert requests >= 8 and in_python < requests / 2, (api, in_python, requests)
    for way in ("client_to_proxy", "proxy_to_client"):
        assert moved(before, after, TLS_BYTES, direction=way) > 0, way


def _python_because_engine_could_not(before: dict, after: dict) -> int:
    return sum(moved(before, after, PYTHON_PATH, scope="frame", reason=reason, api=api)
               for reason in ENGINE_COULD_NOT for api in ("Produce", "Fetch"))


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_librdkafka_over_tls_with_scram_natively_as_in_python(
    secure: SecureCluster, herald_on: HeraldProcess, herald_off: HeraldProcess, codec: str
) -> None:
    conf = _scram(secure)
    total = ROUNDS * PER_ROUND
    headers_seen = {}
    counted = {}
    for proc in (herald_on, herald_off):
        on = proc is herald_on
        topic = f"nprod-{codec}-{uuid.uuid4().hex[:8]}"
        create_topic(secure.plaintext, topic)
        before = scrape(proc)
        sent = _send(proc.bootstrap, topic, codec, conf)
        got = consume_all(proc.bootstrap, topic, total,
                          conf={**conf, "max.partition.fetch.bytes": 1024})
        after = wait_for(proc, lambda s, b=before: moved(
            b, s, "herald_interceptor_records_total", outcome="seen") >= 2 * total)
        assert [m.value() for m in got] == [v for v, _ in sent]
        for (_, own), m in zip(sent, got, strict=True):
            headers = dict(m.headers())
            assert headers["app"] == own[0][1]
            assert TRACEPARENT.fullmatch(headers["traceparent"])
            assert headers["herald.principal"] == b"User:alice"
            assert headers["herald.client_id"] == b"prod-test"
        headers_seen[on] = [[k for k, _ in m.headers()] for m in got]
        counted[on] = _counted(before, after)
        if on:
            assert moved(before, after, PYTHON_PATH, scope="session") == 0
            assert _python_because_engine_could_not(before, after) == 0
            _most_on_the_engine(before, after)
    assert headers_seen[True] == headers_seen[False]
    assert counted[True] == counted[False]
    reencoded = counted[True]["herald_batches_reencoded_total"]
    assert sum(n for labels, n in reencoded.items() if f"'{codec}'" in str(labels)) >= ROUNDS


def test_java_clients_over_tls_with_scram_lz4(
    secure: SecureCluster, herald_on: HeraldProcess, herald_off: HeraldProcess, tmp_path: Path
) -> None:
    """ProducerPerformance (lz4, idempotent, acks=all) and the console consumer, both with
    SCRAM over TLS: the same header keys on every record from both Heralds, every record
    stamped with the client's principal, and the engine's Produce and Fetch never declined."""
    records = 2_000
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{USERS["alice"]}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={secure.ca.pem}\n")
    keys = {}
    for proc in (herald_on, herald_off):
        topic = f"nprod-java-{uuid.uuid4().hex[:8]}"
        create_topic(secure.plaintext, topic, partitions=3)
        before = scrape(proc)
        result = run_tool(
            PRODUCER_PERF, "--bootstrap-server", proc.bootstrap, "--topic", topic,
            "--num-records", str(records), "--record-size", "512", "--throughput", "-1",
            "--command-config", str(props),
            *command_properties(PRODUCER_PERF, {"acks": "all", "compression.type": "lz4"}),
            timeout=180)
        assert "Exception" not in result.stderr, result.stderr[-3000:]
        result = run_tool(
            CONSOLE_CONSUMER, "--bootstrap-server", proc.bootstrap, "--topic", topic,
            "--from-beginning", "--max-messages", str(records), "--timeout-ms", "30000",
            "--command-config", str(props), "--command-property",
            "max.partition.fetch.bytes=16384", "--property", "print.headers=true", timeout=180)
        assert f"Processed a total of {records} messages" in result.stderr, \
            result.stderr[-2000:]
        after = scrape(proc)
        stamped = [line for line in result.stdout.splitlines() if "herald.msg_id:" in line]
        assert len(stamped) == records
        assert all("herald.principal:User:alice" in line and "traceparent:00-" in line
                   for line in stamped)
        keys[proc is herald_on] = {_header_keys(line) for line in stamped}
        assert moved(before, after, "herald_batches_reencoded_total", compression="lz4") > 0
        if proc is herald_on:
            assert moved(before, after, PYTHON_PATH, scope="session") == 0
            assert _python_because_engine_could_not(before, after) == 0
            assert moved(before, after, TLS_BYTES, direction="client_to_proxy") > records * 100
            _most_on_the_engine(before, after)
    # ProducerPerformance sends no headers: every record carries Herald's, the same keys in the
    # same order through the engine as through Python.
    assert keys[True] == keys[False] == {STAMPED_KEYS}


def _header_keys(line: str) -> tuple[str, ...]:
    """The header keys of a line the console consumer printed with `print.headers=true`
    (`key:value,key:value<TAB>value`; a value may hold a colon, no key or value here a comma)."""
    fields = line.split("\t", 1)[0].split(",")
    return tuple(field.split(":", 1)[0] for field in fields)
