"""Herald in front of a secured cluster: TLS on both sides, SASL passthrough, credential
injection, the principal in the audit headers, and what bad clients get.

One broker with SSL (client certificates required) and SASL_SSL (PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER in Kafka's unsecured-JWS mode) listeners; a Herald process per case, configured as
users configure it; real clients (librdkafka, the Java console tools, kafka-python).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaProducer

from proxy.devtools.embedded_kafka import free_port
from tests.support import raw_client as raw
from tests.support.certs import CertificateAuthority, Issued
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.java_tools import CONSOLE_CONSUMER, CONSOLE_PRODUCER, run_tool
from tests.support.secure_cluster import REAUTH_MS, USERS, SecureCluster

CHAINS = {
    "produce": [{"type": "trace_context"}, {"type": "audit"}],
    "fetch": [{"type": "drop_headers", "headers": ["internal.debug"]}],
}
CN_RULES = ["RULE:^CN=([^,]+),O=.*$/$1/L", "DEFAULT"]


@pytest.fixture(scope="module")
def certs(secure: SecureCluster) -> dict[str, Issued]:
    ca = secure.ca
    other = CertificateAuthority(secure.folder / "other-ca", "Untrusted CA")
    return {
        "herald": ca.issue("herald", "herald", hosts=("127.0.0.1", "localhost")),
        "herald-upstream": ca.issue("herald-up", "herald-proxy"),
        "alice": ca.issue("alice", "Alice"),
        "expired": ca.issue("expired", "old", expired=True),
        "untrusted": other.issue("stranger", "stranger"),
    }


def _listen_tls(secure: SecureCluster, certs: dict[str, Issued], mtls: bool) -> dict[str, Any]:
    tls: dict[str, Any] = {"cert_file": str(certs["herald"].cert),
                           "key_file": str(certs["herald"].key), "handshake_timeout_s": 1.5}
    if mtls:
        tls.update(client_ca_file=str(secure.ca.pem), principal_mapping_rules=CN_RULES)
    return tls


def _herald(secure: SecureCluster, certs: dict[str, Issued], mode: str,
            tmp: Path) -> HeraldProcess:
    """Herald configured for one of the ways users run it in front of this cluster."""
    ca = str(secure.ca.pem)
    if mode in ("tls", "mtls"):
        upstream = {"bootstrap": secure.ssl_address, "tls": {
            "ca_file": ca, "cert_file": str(certs["herald-upstream"].cert),
            "key_file": str(certs["herald-upstream"].key)}}
        listen = {"tls": _listen_tls(secure, certs, mtls=mode == "mtls")}
    elif mode == "sasl":  # passthrough: the client's own SASL, over TLS on both sides
        upstream = {"bootstrap": secure.sasl_address, "tls": {"ca_file": ca}}
        listen = {"tls": _listen_tls(secure, certs, mtls=False)}
    elif mode == "sasl-plaintext-client":  # passthrough, the pod's loopback unencrypted
        upstream = {"bootstrap": secure.sasl_address, "tls": {"ca_file": ca}}
        listen = {}
    else:
        raise AssertionError(mode)
    config = herald_config(secure.plaintext, listen=listen, interceptors=CHAINS)
    config["upstream"] = upstream
    return HeraldProcess(config)


def _injection(secure: SecureCluster, mechanism: str, tmp: Path) -> tuple[HeraldProcess, str]:
    """Herald holding the credentials (sidecar mode); the expected audit principal."""
    sasl: dict[str, Any] = {"mechanism": mechanism}
    env: dict[str, str] = {}
    if mechanism == "OAUTHBEARER":
        token = tmp / "token"
        token.write_text(unsecured_jwt("herald-oauth") + "\n")
        sasl["token"] = {"file": str(token)}
        who = "herald-oauth"
    elif mechanism == "PLAIN":  # from the environment
        env = {"KAFKA_USER": "herald", "KAFKA_PASSWORD": USERS["herald"]}
        sasl.update(username={"env": "KAFKA_USER"}, password={"env": "KAFKA_PASSWORD"})
        who = "herald"
    else:  # from files, as a mounted Secret gives them
        (tmp / "user").write_text("herald\n")
        (tmp / "password").write_text(USERS["herald"] + "\n")
        sasl.update(username={"file": str(tmp / "user")},
                    password={"file": str(tmp / "password")})
        who = "herald"
    upstream = {"bootstrap": secure.sasl_address, "tls": {"ca_file": str(secure.ca.pem)},
                "sasl": sasl}
    config = herald_config(secure.plaintext, interceptors=CHAINS)
    config["upstream"] = upstream
    return HeraldProcess(config, env=env), f"User:{who}"


def unsecured_jwt(sub: str, lifetime_s: int = 3600) -> str:
    """A token in Kafka's unsecured-JWS test mode (alg none, empty signature)."""
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': sub, 'iat': now, 'exp': now + lifetime_s})}."


def _client_conf(secure: SecureCluster, certs: dict[str, Issued], kind: str) -> dict[str, Any]:
    """librdkafka settings for a client of Herald (the same a client of the brokers uses)."""
    tls = {"security.protocol": "SSL", "ssl.ca.location": str(secure.ca.pem)}
    if kind == "tls":
        return tls
    if kind == "mtls":
        return {**tls, "ssl.certificate.location": str(certs["alice"].cert),
                "ssl.key.location": str(certs["alice"].key)}
    if kind == "plaintext":
        return {}
    mechanism, user = kind.split(":")
    conf = {**tls, "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        conf.update({"enable.sasl.oauthbearer.unsecure.jwt": True,
                     "sasl.oauthbearer.config": f"principal={user}"})
    else:
        conf.update({"sasl.username": user, "sasl.password": USERS.get(user, "wrong")})
    return conf


def _produce(bootstrap: str, conf: dict[str, Any], topic: str, n: int = 5,
             headers: list[tuple[str, bytes]] | None = None) -> list[Any]:
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "error_cb": errors.append, **conf})
    delivered: list[Any] = []
    for i in range(n):
        producer.produce(topic, value=f"v{i}".encode(), key=b"k", headers=headers,
                         on_delivery=lambda err, msg: delivered.append(err))
    left = producer.flush(30)
    assert left == 0, f"{left} records undelivered; client errors: {errors}"
    assert delivered == [None] * n, f"delivery errors {delivered}; client errors: {errors}"
    return errors


def _headers_of(msgs: list[Any]) -> list[dict[str, bytes]]:
    return [dict(m.headers() or []) for m in msgs]


def _assert_no_secrets(herald: HeraldProcess) -> None:
    logs = herald.logs()
    for secret in USERS.values():
        assert secret not in logs


# ---- the ways users run it: produce and consume with the chains on -----------------------


@pytest.mark.parametrize(
    ("mode", "client", "principal"),
    [
        ("tls", "tls", "User:ANONYMOUS"),
        ("mtls", "mtls", "User:alice"),
        ("sasl", "PLAIN:alice", "User:alice"),
        ("sasl", "SCRAM-SHA-512:bob", "User:bob"),
        ("sasl", "SCRAM-SHA-256:alice", "User:alice"),
        ("sasl", "OAUTHBEARER:carol", "User:carol"),
    ],
)
def test_produce_and_consume_through_secured_herald(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path,
    mode: str, client: str, principal: str,
) -> None:
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    conf = _client_conf(secure, certs, client)
    with _herald(secure, certs, mode, tmp_path) as herald:
        _produce(herald.bootstrap, conf, topic, headers=[("internal.debug", b"x")])
        got = consume_all(herald.bootstrap, topic, 5, conf=conf)
        assert [m.value() for m in got] == [f"v{i}".encode() for i in range(5)]
        for headers in _headers_of(got):
            assert headers["herald.principal"] == principal.encode()
            assert "traceparent" in headers
            assert "internal.debug" not in headers  # the fetch chain ran
        _assert_no_secrets(herald)
    # The records really are in the cluster, with the same headers, seen directly.
    direct = consume_all(secure.plaintext, topic, 5)
    assert [h["herald.principal"] for h in _headers_of(direct)] == [principal.encode()] * 5


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"])
def test_credential_injection(
    secure: SecureCluster, tmp_path: Path, mechanism: str
) -> None:
    """The application speaks plaintext on loopback; Herald authenticates every upstream
    connection with credentials from files or the environment."""
    topic = f"inj-{uuid.uuid4().hex[:8]}"
    proc, principal = _injection(secure, mechanism, tmp_path)
    with proc as herald:
        _produce(herald.bootstrap, {"client.id": "app-7"}, topic)
        got = consume_all(herald.bootstrap, topic, 5)
        for headers in _headers_of(got):
            assert headers["herald.principal"] == principal.encode()
            assert headers["herald.client_id"] == b"app-7"
        _assert_no_secrets(herald)


@pytest.mark.parametrize("mode", ["SCRAM-SHA-512", "mtls"])
def test_fetch_log_writes_to_a_secured_cluster(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path, mode: str
) -> None:
    """fetch_log's producer takes the `tls` and `sasl` sections `upstream` takes: SCRAM over
    TLS with secrets from files, or a client certificate (mTLS)."""
    topic, fetches = f"fl-{uuid.uuid4().hex[:8]}", f"fl-obs-{uuid.uuid4().hex[:8]}"
    create_topic(secure.plaintext, fetches)
    tls: dict[str, Any] = {"ca_file": str(secure.ca.pem)}
    if mode == "mtls":
        tls.update(cert_file=str(certs["herald-upstream"].cert),
                   key_file=str(certs["herald-upstream"].key))
        sink: dict[str, Any] = {"bootstrap": secure.ssl_address, "tls": tls}
    else:
        (tmp_path / "user").write_text("herald\n")
        (tmp_path / "password").write_text(USERS["herald"] + "\n")
        sink = {"bootstrap": secure.sasl_address, "tls": tls, "sasl": {
            "mechanism": mode, "username": {"file": str(tmp_path / "user")},
            "password": {"file": str(tmp_path / "password")}}}
    chains = {**CHAINS, "fetch": [{"type": "fetch_log", "topic": fetches, **sink}]}
    config = herald_config(secure.plaintext, interceptors=chains)
    with HeraldProcess(config) as herald:
        _produce(herald.bootstrap, {"client.id": "app-8"}, topic)
        got = consume_all(herald.bootstrap, topic, 5, conf={"client.id": "reader-8"})
        seen = consume_all(secure.plaintext, fetches, 5)
        _assert_no_secrets(herald)
    assert sorted((o["t"], o["p"], o["o"], o["c"]) for o in map(json.loads,
                                                                (m.value() for m in seen))) \
        == sorted((m.topic(), m.partition(), m.offset(), "reader-8") for m in got)


def test_client_sasl_on_an_injection_listener_gets_a_clear_error(
    secure: SecureCluster, tmp_path: Path
) -> None:
    proc, _ = _injection(secure, "SCRAM-SHA-512", tmp_path)
    with proc as herald:
        errors: list[Any] = []
        producer = Producer({
            "bootstrap.servers": herald.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "x",
            "error_cb": errors.append,
        })
        producer.produce("anything", b"v")
        producer.flush(3)
        assert errors, "the client was not told"
        assert any("PLAIN" in str(e) or "mechanism" in str(e).lower() for e in errors), errors
        assert "client attempted SASL" in herald.logs()
        # Other clients of the same Herald are unaffected.
        _produce(herald.bootstrap, {}, f"inj-{uuid.uuid4().hex[:8]}")


def test_java_clients_through_herald_with_scram_over_tls(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path
) -> None:
    topic = f"java-{uuid.uuid4().hex[:8]}"
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{USERS["alice"]}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={secure.ca.pem}\n"
    )
    with _herald(secure, certs, "sasl", tmp_path) as herald:
        run_tool(CONSOLE_PRODUCER, "--bootstrap-server", herald.bootstrap, "--topic", topic,
                 "--command-config", str(props), input="one\ntwo\nthree\n")
        out = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", herald.bootstrap,
                       "--topic", topic, "--from-beginning", "--max-messages", "3",
                       "--command-config", str(props),
                       "--property", "print.headers=true", timeout=120)
    lines = [line for line in out.stdout.splitlines() if "\t" in line]  # not tool warnings
    assert [line.rsplit("\t", 1)[-1] for line in lines] == ["one", "two", "three"]
    assert all("herald.principal:User:alice" in line for line in lines)


def test_kafka_python_through_herald_with_plain_over_tls(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path
) -> None:
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    with _herald(secure, certs, "sasl", tmp_path) as herald:
        producer = KafkaProducer(
            bootstrap_servers=herald.bootstrap, security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN", sasl_plain_username="bob",
            sasl_plain_password=USERS["bob"], ssl_cafile=str(secure.ca.pem),
        )
        for i in range(3):
            producer.send(topic, f"k{i}".encode()).get(timeout=30)
        producer.close()
    got = consume_all(secure.plaintext, topic, 3)
    assert [h["herald.principal"] for h in _headers_of(got)] == [b"User:bob"] * 3


def _produce_for(bootstrap: str, conf: dict[str, Any], topic: str, seconds: float) -> int:
    """Produce steadily for `seconds`; every record must be delivered with no client error."""
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "error_cb": errors.append,
                         "linger.ms": 5, **conf})
    delivered: list[Any] = []
    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, f"r{sent}".encode(),
                         on_delivery=lambda err, msg: delivered.append(err))
        sent += 1
        producer.poll(0.1)
    assert producer.flush(30) == 0
    assert delivered == [None] * sent and not errors, errors
    return sent


def _metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_reauthentication_keeps_working(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path
) -> None:
    """The broker asks for KIP-368 re-authentication every few seconds; a producer that keeps
    sending through Herald for longer re-authenticates over its connections and loses
    nothing."""
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    proc = _herald(secure, certs, "sasl", tmp_path)
    port = free_port()
    proc.config["admin"] = {"bind": f"127.0.0.1:{port}"}
    with proc:
        sent = _produce_for(proc.bootstrap, _client_conf(secure, certs, "SCRAM-SHA-512:alice"),
                            topic, 2.5 * REAUTH_MS / 1000)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
    accepted = _metric(metrics, "herald_sasl_authentications_total",
                       mechanism="SCRAM-SHA-512", outcome="ok")
    connections = _metric(metrics, "herald_connections_total", side="client")
    assert accepted > connections, (accepted, connections)  # again on the same connections
    got = consume_all(secure.plaintext, topic, sent)
    assert len(got) == sent
    assert {h["herald.principal"] for h in _headers_of(got)} == {b"User:alice"}


def test_injected_credentials_are_renewed_on_live_connections(
    secure: SecureCluster, tmp_path: Path
) -> None:
    """The broker grants Herald's own SASL session a few seconds (KIP-368); Herald
    re-authenticates its upstream connections between the client's requests, so a client
    that keeps producing is never disconnected."""
    topic = f"inj-reauth-{uuid.uuid4().hex[:8]}"
    proc, _ = _injection(secure, "SCRAM-SHA-512", tmp_path)
    with proc as herald:
        sent = _produce_for(herald.bootstrap, {}, topic, 2.5 * REAUTH_MS / 1000)
        logs = herald.logs()
        assert logs.count("upstream_reauthenticated") >= 2
        assert "upstream closed the connection" not in logs
    assert len(consume_all(secure.plaintext, topic, sent)) == sent


# ---- bad clients: each gets a clear error and costs one connection only ------------------


def _error_text(bootstrap: str, conf: dict[str, Any]) -> str:
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "error_cb": errors.append, **conf})
    producer.produce("whatever", b"v")
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    return " | ".join(str(e) for e in errors)


def test_wrong_password_gets_the_brokers_error_unchanged(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path
) -> None:
    conf = _client_conf(secure, certs, "SCRAM-SHA-512:alice")
    conf["sasl.password"] = "not-her-password"
    direct = _error_text(secure.sasl_address, conf)
    assert "Authentication failed" in direct
    with _herald(secure, certs, "sasl", tmp_path) as herald:
        through = _error_text(herald.bootstrap, conf)
        assert "Authentication failed" in through
        # The broker's own message, not one of Herald's.
        broker_message = direct.split("Authentication failed", 1)[1].split(" (after")[0]
        assert broker_message in through
        _produce(herald.bootstrap, _client_conf(secure, certs, "SCRAM-SHA-512:alice"),
                 f"ok-{uuid.uuid4().hex[:8]}")
        logs = herald.logs()
        assert "client_auth_failed" in logs
        assert "not-her-password" not in logs


async def test_unknown_mechanism_gets_the_brokers_answer(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path
) -> None:
    def handshake(corr: int, mechanism: str) -> bytes:
        body = bytearray()
        mech = mechanism.encode()
        body += len(mech).to_bytes(2, "big") + mech
        return raw.request_frame(17, 1, corr, bytes(body))

    with _herald(secure, certs, "sasl-plaintext-client", tmp_path) as herald:
        client = await raw.TrioRawClient.connect(herald.bootstrap)
        await client.send(handshake(7, "GSSAPI"))
        answer = await client.recv()
        await client.aclose()
    assert answer is not None
    error_code = int.from_bytes(answer[4:6], "big", signed=True)
    assert error_code == 33  # UNSUPPORTED_SASL_MECHANISM, from the broker
    assert b"SCRAM-SHA-512" in answer and b"OAUTHBEARER" in answer


@pytest.mark.parametrize("bad", ["expired", "untrusted"])
def test_bad_client_certificates_are_refused(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path, bad: str
) -> None:
    with _herald(secure, certs, "mtls", tmp_path) as herald:
        conf = {**_client_conf(secure, certs, "tls"),
                "ssl.certificate.location": str(certs[bad].cert),
                "ssl.key.location": str(certs[bad].key)}
        assert _error_text(herald.bootstrap, conf)  # the client is told
        _produce(herald.bootstrap, _client_conf(secure, certs, "mtls"),
                 f"ok-{uuid.uuid4().hex[:8]}")
        logs = herald.logs()
        assert "tls_handshake_failed" in logs
        assert "client certificate refused" in logs or "CERTIFICATE" in logs


def _raw_peer(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def test_stalled_handshake_and_garbage_cost_one_connection_each(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path
) -> None:
    with _herald(secure, certs, "tls", tmp_path) as herald:
        stalled = _raw_peer(herald.bootstrap)  # connects, never says hello
        garbage = _raw_peer(herald.bootstrap)
        garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(64))
        # Meanwhile a real client is served.
        _produce(herald.bootstrap, _client_conf(secure, certs, "tls"),
                 f"ok-{uuid.uuid4().hex[:8]}")
        answer = _read_to_end(garbage)  # closed: a TLS alert first, or a reset
        assert answer == b"" or answer.startswith(b"\x15")
        start = time.monotonic()
        assert _read_to_end(stalled) == b""  # closed by Herald after the handshake deadline
        assert time.monotonic() - start < 10
        stalled.close()
        garbage.close()
        logs = herald.logs()
        assert "not a TLS ClientHello" in logs
        assert "TLS handshake not finished in 1.5s" in logs


def _read_to_end(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except ConnectionResetError:  # closed with our unread bytes still in its buffer
        pass
    return data


@pytest.mark.parametrize(
    ("tls", "reason"),
    [
        ({"ca_file": "untrusted"}, "CERTIFICATE_VERIFY_FAILED"),
        ({"ca_file": "ca", "server_name": "wrong.example"}, "Hostname mismatch"),
    ],
)
def test_herald_refuses_brokers_it_cannot_verify(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path,
    tls: dict[str, str], reason: str,
) -> None:
    """Towards the brokers the chain and the host name are verified by default: a broker
    with a certificate Herald cannot verify gets no client traffic."""
    ca = {"ca": str(secure.ca.pem), "untrusted": str(certs["untrusted"].cert)}
    proc = _herald(secure, certs, "sasl-plaintext-client", tmp_path)
    proc.config["upstream"]["tls"] = {**tls, "ca_file": ca[tls["ca_file"]]}
    with proc as herald:
        errors: list[Any] = []
        producer = Producer({"bootstrap.servers": herald.bootstrap, "error_cb": errors.append,
                             **_client_conf(secure, certs, "PLAIN:alice"),
                             "security.protocol": "SASL_PLAINTEXT"})
        producer.produce("never", b"v")
        deadline = time.monotonic() + 15
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
        producer.purge()
        assert errors
        logs = herald.logs()
        assert "upstream_connect_failed" in logs and reason in logs


def _served_serial(address: str, ca: Path) -> int:
    from cryptography import x509

    ctx = ssl.create_default_context(cafile=str(ca))
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def test_certificate_rotation_under_traffic(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path
) -> None:
    """New connections get the new certificate (on SIGHUP, and when the files change);
    a producer connected before keeps working on its connection."""
    live = tmp_path / "live"
    live.mkdir()
    first = certs["herald"]
    shutil.copy(first.cert, live / "tls.crt")
    shutil.copy(first.key, live / "tls.key")
    proc = _herald(secure, certs, "tls", tmp_path)
    proc.config["listen"]["tls"].update(cert_file=str(live / "tls.crt"),
                                        key_file=str(live / "tls.key"))
    conf = _client_conf(secure, certs, "tls")
    topic = f"rot-{uuid.uuid4().hex[:8]}"
    with proc as herald:
        assert _served_serial(herald.bootstrap, secure.ca.pem) == first.serial
        producer = Producer({"bootstrap.servers": herald.bootstrap, "linger.ms": 5, **conf})
        delivered: list[Any] = []

        def send(n: int) -> None:
            for i in range(n):
                producer.produce(topic, f"{len(delivered)}-{i}".encode(),
                                 on_delivery=lambda err, msg: delivered.append(err))
            assert producer.flush(30) == 0

        send(20)
        for rotation in range(2):
            fresh = secure.ca.issue(f"herald-{rotation}", "herald", hosts=("127.0.0.1",))
            # As a Secret volume is updated: new files renamed into place.
            for src, name in ((fresh.key, "tls.key"), (fresh.cert, "tls.crt")):
                shutil.copy(src, live / f".{name}.new")
                os.replace(live / f".{name}.new", live / name)
            if rotation == 0:
                herald.signal(1)  # SIGHUP
            deadline = time.monotonic() + 15  # else the periodic check finds it
            while _served_serial(herald.bootstrap, secure.ca.pem) != fresh.serial:
                assert time.monotonic() < deadline, "the new certificate was not served"
                time.sleep(0.3)
            send(20)
        assert delivered == [None] * 60
        assert herald.logs().count("tls_reloaded") == 2


def test_admin_endpoint_with_tls_and_a_bearer_token(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path
) -> None:
    token = tmp_path / "admin-token"
    token.write_text("s3cret-token\n")
    proc = _herald(secure, certs, "tls", tmp_path)
    port = free_port()
    proc.config["admin"] = {
        "bind": f"127.0.0.1:{port}",
        "tls": {"cert_file": str(certs["herald"].cert), "key_file": str(certs["herald"].key)},
        "token": {"file": str(token)},
    }
    ctx = ssl.create_default_context(cafile=str(secure.ca.pem))
    url = f"https://127.0.0.1:{port}"

    def get(path: str, token: str | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(url + path)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, context=ctx, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    with proc:
        assert get("/healthz")[0] == 200
        assert get("/readyz") == (200, b"ready\n")
        assert get("/metrics")[0] == 401
        assert get("/metrics", "wrong")[0] == 401
        status, body = get("/metrics", "s3cret-token")
        assert status == 200 and b"herald_tls_handshakes_total" in body


def test_readiness_in_passthrough_without_credentials(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path
) -> None:
    """Herald cannot ask a SASL listener for Metadata itself; it is ready when the brokers
    answer, and learns them from the clients' Metadata."""
    proc = _herald(secure, certs, "sasl", tmp_path)
    port = free_port()
    proc.config["admin"] = {"bind": f"127.0.0.1:{port}"}
    with proc as herald:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as r:
            assert r.status == 200
        _produce(herald.bootstrap, _client_conf(secure, certs, "PLAIN:alice"),
                 f"rd-{uuid.uuid4().hex[:8]}")
        assert "upstream_requires_client_auth" in herald.logs()


def test_clients_vanishing_mid_handshake_leave_herald_serving(
    secure: SecureCluster, certs: dict[str, Issued], tmp_path: Path
) -> None:
    with _herald(secure, certs, "tls", tmp_path) as herald:
        for _ in range(20):
            s = _raw_peer(herald.bootstrap)
            s.sendall(bytes.fromhex("160301"))  # the start of a TLS record, then gone
            s.close()
        _produce(herald.bootstrap, _client_conf(secure, certs, "tls"),
                 f"ok-{uuid.uuid4().hex[:8]}")
        assert "internal error" not in herald.logs()

