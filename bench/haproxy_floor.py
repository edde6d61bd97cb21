"""HAProxy as a benchmark floor: a TLS relay that does nothing to the records.

It terminates the client's TLS and opens its own TLS connection to a broker listener, `mode
tcp`, one thread, and copies bytes: SASL (SCRAM) runs end to end between the client and the
broker inside those bytes. That is the least a TLS-terminating proxy can spend in user space
with OpenSSL, so Herald's TLS profiles are compared to it in the same run.

The broker listener it relays to must advertise HAProxy's own port (an `ExtraListener` whose
`advertised_port` is `port`): HAProxy does not rewrite Metadata, so that is what keeps every
later connection of the client going through it.

HAProxy is Debian's `haproxy` package (scripts/setup.sh installs it where it can).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def haproxy_binary() -> str:
    found = shutil.which("haproxy")
    if found is None:
        raise RuntimeError("haproxy is not installed (Debian's 'haproxy' package: "
                           "apt-get install haproxy); leave out the haproxy-* profiles")
    return found


def haproxy_config(port: int, listen_pem: Path, broker_port: int, ca_pem: Path) -> str:
    """TLS from the client on `port` (key and certificate in `listen_pem`), TLS to the broker
    at `broker_port`, its certificate checked against `ca_pem` and the name `localhost`."""
    return "\n".join([
        "global",
        "    nbthread 1",
        "    maxconn 4096",
        "defaults",
        "    mode tcp",
        "    timeout connect 10s",
        "    timeout client 10m",
        "    timeout server 10m",
        "frontend kafka",
        f"    bind 127.0.0.1:{port} ssl crt {listen_pem}",
        "    default_backend broker",
        "backend broker",
        f"    server broker 127.0.0.1:{broker_port} ssl verify required ca-file {ca_pem} "
        "verifyhost localhost",
        "",
    ])


@contextmanager
def run_haproxy(config: str, folder: Path, port: int, timeout: float = 20.0) -> Iterator[int]:
    """HAProxy in the foreground with `config` (written into `folder`) until it accepts on
    `port`; yields its pid."""
    path = folder / "haproxy.cfg"
    path.write_text(config)
    binary = haproxy_binary()
    check = subprocess.run([binary, "-c", "-q", "-f", str(path)], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"haproxy rejected {path}:\n{check.stdout}{check.stderr}")
    process = subprocess.Popen([binary, "-db", "-f", str(path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_listening(process, port, timeout)
        yield process.pid
    finally:
        process.kill()
        process.wait()


def _wait_listening(process: subprocess.Popen[bytes], port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode() if process.stderr else ""
            raise RuntimeError(f"haproxy exited {process.returncode}:\n{err}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"haproxy did not listen on port {port} within {timeout:.0f} s")
