"""SASL sessions on the native engine, through a real broker with SASL_PLAINTEXT and KIP-368
re-authentication on: the authentication exchanges run in Python, the traffic after them on
the engine (stamped there), and the records are those Python would have written.

Passthrough: the client authenticates to the broker through Herald; its SaslHandshake and
SaslAuthenticate frames (the first ones, and each re-authentication) are read by a filter, so
they hand the session to Python and back. Credential injection: Herald authenticates its own
upstream connections; the engine hands a session back when Herald's re-authentication is due
(hand-over reason `reauth`), and takes it again once Herald is done.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from proxy.devtools.embedded_kafka import free_port
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.metrics import moved, scrape
from tests.support.native_parts import ENGINE, needs
from tests.support.secure_cluster import REAUTH_MS, USERS, SecureCluster

pytestmark = needs(ENGINE)

CHAINS = {"produce": [{"type": "trace_context"}, {"type": "audit"}]}
PYTHON_PATH = "herald_python_path_total"
HANDOVERS = "herald_native_relay_handovers_total"


def _herald(secure: SecureCluster, upstream: dict[str, Any]) -> HeraldProcess:
    config = herald_config(secure.plaintext, admin={"bind": f"127.0.0.1:{free_port()}"},
                           interceptors=CHAINS)
    config["upstream"] = upstream
    return HeraldProcess(config)


def _produce(bootstrap: str, topic: str, conf: dict[str, Any], values: list[bytes]) -> None:
    """One Produce request per record (a flush after each), every one delivered."""
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "error_cb": errors.append, **conf})
    delivered: list[Any] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(30) == 0, errors
    assert delivered == [None] * len(values) and not errors, (delivered, errors)


def test_passthrough_sessions_are_native_after_authentication(secure: SecureCluster) -> None:
    topic = f"native-sasl-{uuid.uuid4().hex[:8]}"
    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": USERS["alice"]}
    values = [f"record-{i}".encode() for i in range(200)]
    # Created with its leader ready, not by the first produce: a request refused while the
    # new leader settles would be retried, one Produce request more than the records.
    create_topic(secure.plaintext, topic)
    with _herald(secure, {"bootstrap": secure.sasl_plaintext_address}) as herald:
        before = scrape(herald)
        _produce(herald.bootstrap, topic, conf, values)
        after = scrape(herald)
    got = consume_all(secure.plaintext, topic, len(values))
    assert [m.value() for m in got] == values
    # Stamped with the principal the client authenticated as, natively or not.
    assert {dict(m.headers())["herald.principal"] for m in got} == {b"User:alice"}
    assert moved(before, after, "herald_requests_total", api="Produce") == len(values)
    # No session was Python's as a whole; the authentication frames were, for a filter.
    assert moved(before, after, PYTHON_PATH, scope="session") == 0
    assert moved(before, after, PYTHON_PATH, scope="frame", reason="filter",
                 api="SaslAuthenticate") >= 2
    assert moved(before, after, PYTHON_PATH, scope="frame", reason="filter",
                 api="SaslHandshake") >= 1
    # The Produce requests after them ran on the engine, but for a few between its phases.
    in_python = moved(before, after, PYTHON_PATH, scope="frame", api="Produce")
    assert in_python < len(values) / 4, in_python
    assert moved(before, after, HANDOVERS) > 0


def test_injected_credentials_reauthenticate_between_native_phases(
    secure: SecureCluster, tmp_path: Path
) -> None:
    """The broker grants Herald's SASL session REAUTH_MS; a producer that keeps sending for
    longer stays on the engine but for Herald's re-authentications, and loses nothing."""
    (tmp_path / "user").write_text("herald\n")
    (tmp_path / "password").write_text(USERS["herald"] + "\n")
    upstream = {"bootstrap": secure.sasl_plaintext_address, "sasl": {
        "mechanism": "SCRAM-SHA-512", "username": {"file": str(tmp_path / "user")},
        "password": {"file": str(tmp_path / "password")}}}
    topic = f"native-inj-{uuid.uuid4().hex[:8]}"
    values: list[bytes] = []
    with _herald(secure, upstream) as herald:
        before = scrape(herald)
        errors: list[Any] = []
        producer = Producer({"bootstrap.servers": herald.bootstrap, "linger.ms": 5,
                             "error_cb": errors.append})
        delivered: list[Any] = []
        # Long enough for two re-authentications of every upstream connection.
        deadline = time.monotonic() + 2.5 * REAUTH_MS / 1000
        while time.monotonic() < deadline:
            values.append(f"r{len(values)}".encode())
            producer.produce(topic, values[-1],
                             on_delivery=lambda err, msg: delivered.append(err))
            producer.poll(0.02)
        assert producer.flush(30) == 0
        assert delivered == [None] * len(values) and not errors, errors
        after = scrape(herald)
        logs = herald.logs()
    assert logs.count("upstream_reauthenticated") >= 2
    assert "upstream closed the connection" not in logs
    assert moved(before, after, HANDOVERS, reason="reauth") >= 2
    assert moved(before, after, PYTHON_PATH, scope="session") == 0
    produced = moved(before, after, "herald_requests_total", api="Produce")
    in_python = moved(before, after, PYTHON_PATH, scope="frame", api="Produce")
    assert in_python < produced / 2, (in_python, produced)
    got = consume_all(secure.plaintext, topic, len(values))
    assert sorted(m.value() for m in got) == sorted(values)
    assert {dict(m.headers())["herald.principal"] for m in got} == {b"User:herald"}
