"""/healthz and /readyz against a broker that goes away and comes back, and during a drain.

This test stops its broker, so it starts a cluster of its own instead of the session's.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.kafka_version import kafka_version
from tests.support.metrics import http_get


def wait_status(url: str, status: int, timeout: float) -> tuple[int, str, float]:
    """Poll until `url` answers `status`; return the last answer and the seconds it took."""
    start = time.monotonic()
    while True:
        got = http_get(url)
        waited = time.monotonic() - start
        if got[0] == status or waited > timeout:
            return got[0], got[1], waited
        time.sleep(0.2)


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(size=1, version=kafka_version()) as cluster:
        yield cluster


def test_readiness_follows_the_upstream_and_the_drain(own_cluster: KafkaCluster) -> None:
    config = herald_config(
        own_cluster.bootstrap,
        admin={"bind": f"127.0.0.1:{free_port()}"},
        shutdown={"grace_s": 10},
    )
    config["upstream"]["connect_timeout_s"] = 2
    with HeraldProcess(config) as proc:
        ready = proc.admin_url + "/readyz"
        assert http_get(proc.admin_url + "/healthz") == (200, "ok\n")
        assert http_get(ready) == (200, "ready\n")

        own_cluster.stop_node(1)
        status, body, waited = wait_status(ready, 503, timeout=10)
        assert (status, body) == (503, "upstream unreachable\n"), f"after {waited:.1f}s"
        assert http_get(proc.admin_url + "/healthz") == (200, "ok\n")  # alive, just not ready

        own_cluster.restart_node(1)
        status, body, waited = wait_status(ready, 200, timeout=10)
        assert (status, body) == (200, "ready\n"), f"after {waited:.1f}s"

        # A consumer long-polling an empty topic keeps a Fetch in flight: the drain waits for
        # it, and meanwhile /readyz says so instead of refusing connections.
        topic = f"idle-{uuid.uuid4().hex[:8]}"
        create_topic(proc.bootstrap, topic)
        consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": topic,
                             "fetch.wait.max.ms": 8000, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        try:
            deadline = time.monotonic() + 30
            while not consumer.assignment() and time.monotonic() < deadline:
                consumer.poll(0.2)
            assert consumer.assignment()
            consumer.poll(1.0)  # the first long-poll Fetch is now in flight
            proc.signal(signal.SIGTERM)
            status, body, _ = wait_status(ready, 503, timeout=3)
            assert (status, body) == (503, "draining\n")
        finally:
            consumer.close()
        assert proc.wait(30) == 0
