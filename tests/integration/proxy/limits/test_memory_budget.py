"""The global memory budget against 100 connections that each send most of a large frame and
stop, with Herald's resident memory measured, while ordinary clients are still served."""

from __future__ import annotations

import socket
import struct
import time
import urllib.request
from collections.abc import Iterator

import pytest

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support import raw_client as raw
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.steady_producer import SteadyProducer

MIB = 1024 * 1024
BUDGET = 64 * MIB
FRAME = 16 * MIB
CONNECTIONS = 100
SENT_EACH = 8 * MIB  # 800 MiB in all, if Herald read it
PEAK = 'herald_memory_budget_bytes{kind="peak"}'


@pytest.fixture(scope="module")
def budgeted(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    config = herald_config(
        kafka.bootstrap, admin={"bind": f"127.0.0.1:{free_port()}"},
        limits={"memory_budget_bytes": BUDGET, "max_frame_bytes": FRAME,
                "frame_timeout_s": 300, "idle_timeout_s": 300},
    )
    with HeraldProcess(config) as proc:
        yield proc


def budget_metrics(proc: HeraldProcess) -> dict[str, float]:
    out = {}
    with urllib.request.urlopen(proc.admin_url + "/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(("herald_memory_budget_bytes{", "herald_memory_budget_waits")):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
    return out


def start_unfinished_frames(proc: HeraldProcess) -> list[socket.socket]:
    """CONNECTIONS sockets, each announcing a FRAME-byte request and sending up to SENT_EACH
    of it, as fast as Herald takes it; none ever finishes."""
    host, port = proc.bootstrap.rsplit(":", 1)
    socks = []
    for i in range(CONNECTIONS):
        s = socket.create_connection((host, int(port)), timeout=30,
                                     source_address=(f"127.0.1.{1 + i}", 0))
        s.sendall(struct.pack(">i", FRAME - 4) + struct.pack(">hhih", 18, 3, 1, 0))
        s.setblocking(False)
        socks.append(s)
    sent = [0] * CONNECTIONS
    chunk = b"\0" * (256 * 1024)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and min(sent) < SENT_EACH:
        progress = False
        for i, s in enumerate(socks):
            if sent[i] >= SENT_EACH:
                continue
            try:
                n = s.send(chunk[: SENT_EACH - sent[i]])
            except BlockingIOError:
                continue
            sent[i] += n
            progress = True
        if not progress:
            time.sleep(0.05)
    return socks


def test_unfinished_frames_stay_within_the_memory_budget(
    budgeted: HeraldProcess, topic_name: str,
) -> None:
    create_topic(budgeted.bootstrap, topic_name)
    before = budgeted.memory()
    with SteadyProducer(budgeted.bootstrap, topic_name, rate=50) as producer:
        socks = start_unfinished_frames(budgeted)
        time.sleep(2)
        during = budgeted.memory()
        metrics = budget_metrics(budgeted)
        # A new client is served while the budget is full.
        client = raw.SocketRawClient(budgeted.bootstrap)
        started = time.monotonic()
        client.send(raw.api_versions(1))
        assert client.recv() is not None
        answered_in = time.monotonic() - started
        client.close()
        time.sleep(1)
    producer.check(at_least=50)
    for s in socks:
        # Reset: a plain close would queue its FIN behind the data Herald is not reading,
        # and only frame_timeout_s would end those connections.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    growth = during - before
    peak = metrics[PEAK]
    print(f"RSS before {before / MIB:.0f} MiB, with {CONNECTIONS} unfinished frames "
          f"{during / MIB:.0f} MiB; budget peak {peak / MIB:.1f} MiB; "
          f"new client answered in {answered_in * 1000:.1f} ms")
    assert peak <= BUDGET
    # The budget is nearly all taken: the hostile connections were read up to it.
    assert metrics['herald_memory_budget_bytes{kind="used"}'] >= BUDGET * 3 // 4
    assert metrics["herald_memory_budget_waits_total"] > 0
    # Resident memory grew by about the budget (bytearray slack and allocator included),
    # not by the 800 MiB the clients sent.
    assert growth < BUDGET * 2, growth / MIB
    assert answered_in < 1.0
    # Once they are gone the budget is free again, though they were not being read.
    deadline = time.monotonic() + 10
    while budget_metrics(budgeted)['herald_memory_budget_bytes{kind="used"}'] > MIB:
        assert time.monotonic() < deadline
        time.sleep(0.2)
