"""Herald at its open-files limit, a real process in front of a real broker: accepting pauses
and resumes as one logged, counted episode (no traceback, no `trio` logger spam), connections
already open keep being served, and a connection Herald accepted with no descriptor left for
its upstream socket is closed as `out of file descriptors`, not `upstream unreachable`."""

from __future__ import annotations

import re
import resource
import socket
import time
from collections.abc import Iterator

import pytest

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.metrics import scrape, total
from tests.support.raw_client import SocketRawClient, api_versions, correlation_id

SERVED = 4  # client connections open when the limit is reached
STARTED_WITH = (160, 256)  # Herald raises the soft limit to the hard one, and no further
MAX_CONNECTIONS = 1000  # more than 256 descriptors can serve: fd_limit_low at start


@pytest.fixture
def herald(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    config = herald_config(kafka.bootstrap, admin={"bind": f"127.0.0.1:{free_port()}"},
                           limits={"max_connections": MAX_CONNECTIONS})
    with HeraldProcess(config, nofile=STARTED_WITH) as proc:
        yield proc


def events(proc: HeraldProcess, name: str, having: str = "") -> list[str]:
    return [line for line in proc.logs().splitlines()
            if f"event={name} " in line + " " and having in line]


def wait_for_event(proc: HeraldProcess, name: str, count: int = 1,
                   timeout: float = 15, having: str = "") -> list[str]:
    deadline = time.monotonic() + timeout
    while len(found := events(proc, name, having)) < count:
        assert time.monotonic() < deadline, f"no {name} in the log:\n{proc.logs()}"
        time.sleep(0.05)
    return found


def field(line: str, key: str) -> str:
    match = re.search(rf"\b{key}=(\"[^\"]*\"|\S+)", line)
    assert match, f"{key} not in {line}"
    return match.group(1).strip('"')


def answered(client: SocketRawClient, corr: int) -> None:
    client.send(api_versions(corr))
    payload = client.recv()
    assert payload is not None and correlation_id(payload) == corr


def settled_fds(proc: HeraldProcess, expected: int, timeout: float = 15) -> set[int]:
    """The process's descriptors once there are `expected` of them (closes take a moment)."""
    deadline = time.monotonic() + timeout
    while len(fds := proc.open_fds()) != expected:
        assert time.monotonic() < deadline, f"{len(fds)} descriptors open, not {expected}"
        time.sleep(0.05)
    return fds


def limit_leaving(proc: HeraldProcess, free: int) -> int:
    """Set the process's soft open-files limit (as `prlimit --pid` would) so that exactly
    `free` descriptor numbers are left below it; the limit."""
    held = proc.open_fds()
    unheld = (n for n in range(1 << 20) if n not in held)
    for _ in range(free):
        next(unheld)
    limit = next(unheld)  # the first number the process may not have
    assert proc.process is not None
    resource.prlimit(proc.process.pid, resource.RLIMIT_NOFILE, (limit, STARTED_WITH[1]))
    return limit


def test_accepting_pauses_and_resumes_once_at_the_descriptor_limit(
    herald: HeraldProcess,
) -> None:
    # At start: the limit raised to the hard one, and max_connections found too high for it.
    fd_limit = wait_for_event(herald, "fd_limit")[0]
    assert (field(fd_limit, "before"), field(fd_limit, "after")) == ("160", "256")
    low = wait_for_event(herald, "fd_limit_low")[0]
    assert field(low, "key") == "limits.max_connections"
    assert field(low, "max_connections") == str(MAX_CONNECTIONS)
    assert field(low, "connections_served") == str((256 - 128) // 4)

    # Each client connection costs two descriptors (its socket and its upstream one).
    idle = len(herald.open_fds())
    clients = [SocketRawClient(herald.bootstrap) for _ in range(SERVED)]
    for i, client in enumerate(clients):
        answered(client, i + 1)
    settled_fds(herald, idle + 2 * SERVED)

    # One descriptor left: the connection is accepted, its upstream socket cannot be opened.
    # Taking the last descriptor pauses accepting too: accept(2) fails with EMFILE even when
    # no connection waits.
    limit = limit_leaving(herald, 1)
    last = SocketRawClient(herald.bootstrap)
    assert last.recv() is None
    closed = wait_for_event(herald, "connection_closed")
    assert [field(line, "reason") for line in closed] == ["out of file descriptors"]
    assert field(closed[0], "error") == "EMFILE"
    assert "upstream unreachable" not in herald.logs()
    paused = wait_for_event(herald, "accept_paused")[0]
    assert field(paused, "error") == "EMFILE" and field(paused, "target") == "bootstrap"
    assert field(paused, "open_connections") == str(SERVED)
    assert (field(paused, "nofile_soft"), field(paused, "nofile_hard")) == (str(limit), "256")
    last.close()

    # None left: a new connection waits in the backlog while accepts keep failing; the
    # connections already open are served meanwhile.
    settled_fds(herald, idle + 2 * SERVED)
    limit = limit_leaving(herald, 0)
    waiting = SocketRawClient(herald.bootstrap)
    waiting.send(api_versions(100))
    answered(clients[0], 50)
    time.sleep(2)  # several retries fail meanwhile, each waiting longer
    # Two more descriptors (the operator's prlimit): the waiting connection is accepted and
    # served. That leaves none: the episode goes on.
    assert herald.process is not None
    resource.prlimit(herald.process.pid, resource.RLIMIT_NOFILE, (limit + 2, STARTED_WITH[1]))
    payload = waiting.recv()
    assert payload is not None and correlation_id(payload) == 100

    # Three connections close: a new connection is accepted and served, and the episode ends.
    for client in clients[1:]:
        client.close()
    settled_fds(herald, idle + 2 * (SERVED + 1 - 3))
    fresh = SocketRawClient(herald.bootstrap)
    answered(fresh, 200)
    resumed = wait_for_event(herald, "accept_resumed")
    assert len(resumed) == 1 and field(resumed[0], "target") == "bootstrap"
    failures = int(field(resumed[0], "failed_accepts"))
    assert failures >= 3, resumed[0]
    assert float(field(resumed[0], "paused_s")) >= 2

    samples = scrape(herald)
    assert total(samples, "herald_accept_errors_total", reason="EMFILE") == failures, \
        herald.logs()
    assert total(samples, "herald_upstream_connect_failures_total",
                 reason="out_of_descriptors") == 1
    assert total(samples, "herald_upstream_connect_failures_total", reason="unreachable") == 0
    assert len(events(herald, "accept_paused")) == 1
    logs = herald.logs()
    assert "Traceback" not in logs and "trio" not in logs and "accept returned" not in logs
    for client in (clients[0], waiting, fresh):
        client.close()


def _readyz_on(conn: socket.socket) -> tuple[int, str]:
    """(status, body) of GET /readyz sent on an admin connection Herald already accepted."""
    conn.sendall(b"GET /readyz HTTP/1.1\r\nHost: herald\r\n\r\n")
    response = b""
    while chunk := conn.recv(4096):
        response += chunk
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body.decode()


def test_readyz_says_herald_could_not_ask_the_cluster() -> None:
    """With no descriptor left for the metadata refresh's socket, /readyz answers 503 with
    that reason, not "upstream unreachable" (the cluster was never asked); with descriptors
    again, the cluster is asked and the reason is what it answered. The upstream is a port
    nothing listens on, so every refresh opens a fresh socket (a reachable cluster's kept
    connection would need none)."""
    config = herald_config(f"127.0.0.1:{free_port()}",
                           admin={"bind": f"127.0.0.1:{free_port()}"})
    with HeraldProcess(config, nofile=STARTED_WITH) as herald:
        host, port = herald.config["admin"]["bind"].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as first:
            assert _readyz_on(first) == (503, "upstream unreachable\n")
        limit_leaving(herald, 1)
        # The admin connection takes the last descriptor; the next refresh cannot ask.
        probe = socket.create_connection((host, int(port)), timeout=30)
        failed = wait_for_event(herald, "metadata_refresh_failed",
                                having="reason=\"out of file descriptors\"")
        assert field(failed[0], "error") == "EMFILE"
        assert _readyz_on(probe) == (503, "out of file descriptors\n")
        probe.close()

        assert herald.process is not None
        resource.prlimit(herald.process.pid, resource.RLIMIT_NOFILE, STARTED_WITH[1:] * 2)
        asked = len(events(herald, "metadata_refresh_failed"))
        wait_for_event(herald, "metadata_refresh_failed", count=asked + 1)
        with socket.create_connection((host, int(port)), timeout=30) as again:
            assert _readyz_on(again) == (503, "upstream unreachable\n")
