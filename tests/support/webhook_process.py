"""`herald k8s webhook` as a process with a certificate of a test CA, as its tests and the
API server's tests start it."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding

from tests.support.certs import CertificateAuthority, Issued
from tests.support.k8s_tools import REPO

MAX_REVIEW = 256 * 1024


@dataclass
class Webhook:
    proc: subprocess.Popen
    port: int
    health_port: int
    ca: Path
    cert: Path
    key: Path
    authority: CertificateAuthority
    log: Path
    flags: tuple[str, ...] = ()

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("localhost", self.port, context=self.context(),
                                           timeout=30)

    def post(self, conn: http.client.HTTPConnection, path: str, body: bytes,
             headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        conn.request("POST", path, body=body,
                     headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read()

    def get(self, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.health_port, timeout=30)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()


def issue(authority: CertificateAuthority, stem: str) -> Issued:
    return authority.issue(stem, "herald-webhook.herald-system.svc",
                           hosts=("localhost", "127.0.0.1", "herald-webhook.herald-system.svc"))


def install(issued: Issued, cert: Path, key: Path) -> None:
    """Put new files in place as a Secret volume update does: whole files, swapped in."""
    for source, target in ((issued.key, key), (issued.cert, cert)):
        tmp = target.with_suffix(".new")
        tmp.write_bytes(source.read_bytes())
        os.replace(tmp, target)


def events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def _wait_listening(proc: subprocess.Popen, log: Path, offset: int = 0) -> tuple[int, int]:
    """The review port and the health port, from the log events (after `offset` bytes of the
    log) saying where it listens."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [e for e in _events_from(log, offset) if e["event"] == "webhook_listening"]
        if len(found) == 2:
            (review,) = [e for e in found if e["reviews"]]
            (health,) = [e for e in found if not e["reviews"]]
            return (int(review["address"].rpartition(":")[2]),
                    int(health["address"].rpartition(":")[2]))
        if proc.poll() is not None:
            raise AssertionError(f"the webhook exited ({proc.returncode}): {log.read_text()}")
        time.sleep(0.1)
    raise AssertionError(f"the webhook did not listen: {log.read_text()}")


def _events_from(log: Path, offset: int) -> list[dict[str, Any]]:
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def _spawn(cert: Path, key: Path, log: Path, listen: str, health: str,
           flags: tuple[str, ...]) -> tuple[subprocess.Popen, int, int]:
    """The webhook process, its log appended to `log`, once it listens: (process, review
    port, health port)."""
    offset = log.stat().st_size if log.exists() else 0
    with log.open("a") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "herald", "k8s", "webhook", "--listen", listen,
             "--health-listen", health, "--cert", str(cert), "--key", str(key),
             "--upstream", "kafka.data:9092", "--max-review-bytes", str(MAX_REVIEW),
             "--shutdown-grace-s", "0.2", *flags],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=stderr)
    try:
        port, health_port = _wait_listening(proc, log, offset)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, port, health_port


def start_webhook(folder: Path, *flags: str, port: int = 0) -> Webhook:
    """The webhook with a certificate of a new CA, reviewing on `port` (0: one the kernel
    picks)."""
    authority = CertificateAuthority(folder / "ca")
    cert, key = folder / "tls.crt", folder / "tls.key"
    install(issue(authority, "first"), cert, key)
    ca = folder / "ca.crt"
    ca.write_bytes(authority.cert.public_bytes(Encoding.PEM))
    log = folder / "webhook.log"
    proc, port, health_port = _spawn(cert, key, log, f"127.0.0.1:{port}", "127.0.0.1:0", flags)
    return Webhook(proc, port, health_port, ca, cert, key, authority, log, flags)


def restart(webhook: Webhook) -> None:
    """A webhook that was stopped runs again on its review port (a new health port), with its
    certificate and flags, its log going on in the same file."""
    assert webhook.proc.poll() is not None, "the webhook is still running"
    webhook.proc, _, webhook.health_port = _spawn(
        webhook.cert, webhook.key, webhook.log, f"127.0.0.1:{webhook.port}", "127.0.0.1:0",
        webhook.flags)
