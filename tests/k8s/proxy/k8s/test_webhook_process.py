"""`herald k8s webhook` as a process, spoken to over HTTPS as the API server speaks to it.

Reviews on one kept-alive connection, what is not a review (malformed, oversized, chunked,
wrong route), a client sending garbage slowly while others are answered, a certificate
rotated under the running process, health, metrics, and a clean stop on SIGTERM.
"""

from __future__ import annotations

import http.client
import json
import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from proxy.k8s import admission, sidecar
from tests.support.admission_reviews import patched, pod_of, review_of
from tests.support.k8s_tools import REPO, workload
from tests.support.webhook_process import (
    MAX_REVIEW,
    Webhook,
    events,
    install,
    issue,
    start_webhook,
)


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    started = start_webhook(tmp_path_factory.mktemp("webhook"), "--request-timeout-s", "3")
    try:
        yield started
    finally:
        if started.proc.poll() is None:
            started.proc.kill()
            started.proc.wait()


def _review_body(kind: str = "Deployment", **pod_changes: Any) -> tuple[dict, bytes]:
    pod = pod_of(workload(kind, "web"))
    pod["metadata"].update(pod_changes)
    review = review_of(pod)
    return review, json.dumps(review).encode()


def test_reviews_are_answered_on_a_kept_alive_connection(webhook: Webhook) -> None:
    conn = webhook.connection()
    try:
        for kind in ("Deployment", "StatefulSet", "CronJob"):
            review, body = _review_body(kind)
            status, answer = webhook.post(conn, "/mutate/namespace", body)
            assert status == 200
            response = json.loads(answer)["response"]
            assert response["uid"] == review["request"]["uid"] and response["allowed"]
            assert response["patchType"] == "JSONPatch"
            pod = patched(review["request"]["object"], response)
            assert pod["metadata"]["annotations"][sidecar.INJECTED] == "native"
        # Not opted in: the pod route wants the pod to ask.
        review, body = _review_body()
        status, answer = webhook.post(conn, "/mutate/pod", body)
        response = json.loads(answer)["response"]
        assert status == 200 and response["allowed"] and "patch" not in response
        review, body = _review_body(annotations={admission.INJECT: "true"})
        status, answer = webhook.post(conn, "/mutate/pod", body)
        assert "patch" in json.loads(answer)["response"]
        # A pod that cannot be injected: allowed, with the reason.
        review, body = _review_body(annotations={admission.SCOPE: "galaxy"})
        status, answer = webhook.post(conn, "/mutate/namespace", body)
        response = json.loads(answer)["response"]
        assert status == 200 and response["allowed"] and "patch" not in response
        assert admission.SCOPE in response["warnings"][0]
    finally:
        conn.close()


@pytest.mark.parametrize("path, body, headers, status, message", [
    ("/mutate/namespace", b"{not json", {}, 400, "not JSON"),
    ("/mutate/namespace", b'{"kind": "Pod"}', {}, 400, "AdmissionReview"),
    ("/mutate/namespace", b"[" * 200_000, {}, 400, "nested too deeply"),
    ("/mutate/namespace", b"x" * (MAX_REVIEW + 1), {}, 413, "over the limit"),
    ("/mutate/namespace", b"{}", {"Content-Type": "text/yaml"}, 415, "application/json"),
    ("/mutate", b"{}", {}, 404, "no route"),
])
def test_what_is_not_a_review_gets_an_http_error(webhook: Webhook, path: str, body: bytes,
                                                  headers: dict, status: int,
                                                  message: str) -> None:
    conn = webhook.connection()
    try:
        got, answer = webhook.post(conn, path, body, headers)
        assert got == status and message in answer.decode()
    finally:
        conn.close()


def _raw_tls(webhook: Webhook) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", webhook.port), timeout=30)
    return webhook.context().wrap_socket(sock, server_hostname="localhost")


def _read_all(sock: ssl.SSLSocket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_an_oversized_review_is_refused_before_its_body_is_read(webhook: Webhook) -> None:
    with _raw_tls(webhook) as sock:
        sock.sendall(b"POST /mutate/namespace HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 999999999\r\n\r\n")
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 413 ") and b"Connection: close" in answer
    with _raw_tls(webhook) as sock:
        sock.sendall(b"POST /mutate/namespace HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                     b"chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        assert _read_all(sock).startswith(b"HTTP/1.1 411 ")


def test_garbage_gets_an_answer_or_a_closed_connection_and_nothing_else(
        webhook: Webhook) -> None:
    with _raw_tls(webhook) as sock:
        sock.sendall(b"\x00\x01garbage\r\n\r\n")
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 400 ") and b"request line" in answer
    with _raw_tls(webhook) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n" + b"X: " + b"y" * 20000)
        assert _read_all(sock).startswith(b"HTTP/1.1 431 ")
    # Plain HTTP on the HTTPS port: the handshake fails, the connection is closed.
    with socket.create_connection(("127.0.0.1", webhook.port), timeout=30) as plain:
        plain.sendall(b"POST /mutate/namespace HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        try:
            answer = plain.recv(65536)  # a TLS alert, or nothing
        except ConnectionResetError:
            answer = b""
        assert b"HTTP/1.1" not in answer
    conn = webhook.connection()
    review, body = _review_body()
    assert webhook.post(conn, "/mutate/namespace", body)[0] == 200
    conn.close()


def test_a_slow_client_sending_garbage_holds_up_nobody(webhook: Webhook) -> None:
    slow = _raw_tls(webhook)
    try:
        slow.sendall(b"POST /mutate/namespace HTTP/1.1\r\nContent-Le")  # and nothing more
        # Meanwhile the API server's reviews are answered.
        conn = webhook.connection()
        try:
            for _ in range(3):
                review, body = _review_body()
                status, answer = webhook.post(conn, "/mutate/namespace", body)
                assert status == 200 and "patch" in json.loads(answer)["response"]
        finally:
            conn.close()
        # The slow request ends at its deadline, with an answer saying so.
        answer = _read_all(slow)
        assert answer.startswith(b"HTTP/1.1 408 ") and b"within 3s" in answer
    finally:
        slow.close()


def _served_serial(webhook: Webhook) -> int:
    with _raw_tls(webhook) as sock:
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_a_rotated_certificate_is_served_to_the_next_connection(webhook: Webhook) -> None:
    before = x509.load_pem_x509_certificate(webhook.cert.read_bytes()).serial_number
    assert _served_serial(webhook) == before
    kept = webhook.connection()
    review, body = _review_body()
    assert webhook.post(kept, "/mutate/namespace", body)[0] == 200
    renewed = issue(webhook.authority, "renewed")
    install(renewed, webhook.cert, webhook.key)
    assert _served_serial(webhook) == renewed.serial != before
    # The connection made before the rotation goes on with its own session.
    assert webhook.post(kept, "/mutate/namespace", body)[0] == 200
    kept.close()
    status, metrics = webhook.get("/metrics")
    assert 'herald_webhook_tls_reloads_total{result="applied"} 1.0' in metrics


def test_health_and_metrics(webhook: Webhook) -> None:
    assert webhook.get("/healthz") == (200, "ok\n")
    assert webhook.get("/readyz") == (200, "ready\n")
    # The review routes are not on the plain-HTTP health listener.
    conn = http.client.HTTPConnection("127.0.0.1", webhook.health_port, timeout=30)
    review, body = _review_body()
    assert webhook.post(conn, "/mutate/namespace", body)[0] == 404
    conn.close()
    before = _counts(webhook)
    conn = webhook.connection()
    webhook.post(conn, "/mutate/namespace", body)
    webhook.post(conn, "/mutate/namespace", _review_body(annotations={
        admission.INJECT: "false"})[1])
    webhook.post(conn, "/mutate/namespace", b"[]")
    conn.close()
    after = _counts(webhook)
    assert after['reviews_total{outcome="injected"}'] == (
        before['reviews_total{outcome="injected"}'] + 1)
    assert after['reviews_total{outcome="skipped"}'] == (
        before['reviews_total{outcome="skipped"}'] + 1)
    assert after['rejected_requests_total{status="400"}'] == (
        before.get('rejected_requests_total{status="400"}', 0) + 1)
    # HTTPS serves the same routes; HEAD gets the head only.
    conn = webhook.connection()
    conn.request("GET", "/readyz")
    response = conn.getresponse()
    assert (response.status, response.read()) == (200, b"ready\n")
    conn.request("HEAD", "/healthz")
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Content-Length") == "3"
    assert response.read() == b""
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b"ok\n"  # the kept-alive connection is in step
    conn.close()


def _counts(webhook: Webhook) -> dict[str, float]:
    status, text = webhook.get("/metrics")
    assert status == 200
    out = {}
    for line in text.splitlines():
        if line.startswith("herald_webhook_") and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name.removeprefix("herald_webhook_")] = float(value)
    return out


def test_sigterm_stops_it_cleanly(tmp_path: Path) -> None:
    """A webhook of its own, which has reviewed, rejected a request and reloaded its
    certificate: SIGTERM ends it with 0, and its log holds all of it."""
    webhook = start_webhook(tmp_path, "--request-timeout-s", "3")
    try:
        conn = webhook.connection()
        assert webhook.post(conn, "/mutate/namespace", _review_body()[1])[0] == 200
        assert webhook.post(conn, "/mutate/namespace", b"{not json")[0] == 400
        conn.close()
        renewed = issue(webhook.authority, "renewed")
        install(renewed, webhook.cert, webhook.key)
        assert _served_serial(webhook) == renewed.serial  # reloaded for the new connection
        webhook.proc.send_signal(signal.SIGTERM)
        assert webhook.proc.wait(timeout=30) == 0
    finally:
        if webhook.proc.poll() is None:
            webhook.proc.kill()
            webhook.proc.wait()
    logged = events(webhook.log)
    assert {"webhook_stopping", "review", "webhook_request_rejected", "tls_reloaded"} <= {
        e["event"] for e in logged}
    (injected, *_) = [e for e in logged if e.get("outcome") == admission.INJECTED]
    assert injected["namespace"] == "shop" and injected["pod"].startswith("web-")


def test_bad_certificate_files_stop_it_at_start_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "tls.key").write_text("not a key")
    done = subprocess.run(
        [sys.executable, "-m", "herald", "k8s", "webhook", "--cert", str(tmp_path / "none.crt"),
         "--key", str(tmp_path / "tls.key")],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=60)
    assert done.returncode == 2
    assert "herald k8s webhook: --cert/--key: cannot read" in done.stderr


def test_connections_beyond_the_limit_are_closed_and_the_probes_still_answer(
        tmp_path: Path) -> None:
    webhook = start_webhook(tmp_path, "--max-connections", "2", "--request-timeout-s", "60")
    held = []
    try:
        held = [_raw_tls(webhook) for _ in range(2)]  # idle: they hold their slots
        with pytest.raises((ssl.SSLError, OSError)):
            with _raw_tls(webhook) as third:
                third.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
                if not _read_all(third):
                    raise ConnectionResetError("closed without an answer")
        assert webhook.get("/healthz") == (200, "ok\n")  # the health listener is not counted
        assert _counts(webhook)["refused_connections_total"] >= 1
        held.pop().close()
        # Once a slot is free the next connection is served (the webhook notices the close
        # at its own pace, so a refused attempt before that is retried).
        for _attempt in range(100):
            try:
                conn = webhook.connection()
                review, body = _review_body()
                status, _ = webhook.post(conn, "/mutate/namespace", body)
                conn.close()
                break
            except (ssl.SSLError, OSError, http.client.HTTPException):
                time.sleep(0.1)
        else:
            raise AssertionError("no connection was served after one was closed")
        assert status == 200
    finally:
        for sock in held:
            sock.close()
        webhook.proc.kill()
        webhook.proc.wait()


def _wait_event(webhook: Webhook, name: str, timeout: float = 15) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while not (found := [e for e in events(webhook.log) if e["event"] == name]):
        assert time.monotonic() < deadline, f"no {name}:\n{webhook.log.read_text()}"
        time.sleep(0.05)
    return found


def test_out_of_descriptors_it_pauses_once_and_serves_the_waiting_review(
        tmp_path: Path) -> None:
    """At its open-files limit the webhook logs one `accept_paused`, counts the failed
    accepts, and serves the review that waited in the backlog once a descriptor is free; no
    traceback, no `trio` logger line."""
    webhook = start_webhook(tmp_path)
    pid = webhook.proc.pid
    try:
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        held = {int(n) for n in os.listdir(f"/proc/{pid}/fd")}
        limit = next(n for n in range(1 << 20) if n not in held)  # none left
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
        answer: dict[str, Any] = {}

        def review() -> None:
            conn = webhook.connection()
            try:
                answer["status"], answer["body"] = webhook.post(
                    conn, "/mutate/namespace", _review_body()[1])
            finally:
                conn.close()

        waiting = threading.Thread(target=review, daemon=True)
        waiting.start()
        (paused,) = _wait_event(webhook, "accept_paused")
        assert (paused["error"], paused["target"]) == ("EMFILE", "webhook")
        time.sleep(1.5)  # retries fail meanwhile, each waiting longer
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        waiting.join(30)
        assert answer.get("status") == 200, answer
        assert "patch" in json.loads(answer["body"])["response"]
        (resumed,) = _wait_event(webhook, "accept_resumed")
        assert resumed["target"] == "webhook" and resumed["failed_accepts"] >= 2
        assert _counts(webhook)['accept_errors_total{reason="EMFILE"}'] == (
            resumed["failed_accepts"])
        log = webhook.log.read_text()
        assert "Traceback" not in log and "accept returned" not in log
        assert len([e for e in events(webhook.log) if e["event"] == "accept_paused"]) == 1
    finally:
        webhook.proc.kill()
        webhook.proc.wait()
