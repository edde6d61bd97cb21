"""Prometheus metrics over real HTTP, moved by known traffic from real clients.

Every test scrapes /metrics before and after its traffic and checks that the counters moved by
exactly what that traffic implies. The Herald process is this module's own, so no other test's
traffic can leak into the differences.
"""

from __future__ import annotations

import signal
import socket
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
import yaml
from confluent_kafka import Producer

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.metrics import http_get, moved, scrape, wait_for

LABELLED = f"labelled-{uuid.uuid4().hex[:8]}"
CHAINS = {
    "produce": [
        {"type": "trace_context"},
        {"type": "insert_header", "header": "app.id", "value": "checkout"},
    ],
    "fetch": [],
}


@pytest.fixture(scope="module")
def herald_admin(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    config = herald_config(
        kafka.bootstrap,
        admin={"bind": f"127.0.0.1:{free_port()}", "topic_labels": [LABELLED]},
        interceptors=CHAINS,
    )
    with HeraldProcess(config) as proc:
        yield proc


def produce_one_by_one(bootstrap: str, topic: str, values: list[bytes], **conf: object) -> None:
    """One Produce request per record: linger 0 and a flush after every record."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **conf})
    for v in values:
        producer.produce(topic, v)
        assert producer.flush(30) == 0
    producer.flush(30)


def test_health_endpoints(herald_admin: HeraldProcess) -> None:
    assert http_get(herald_admin.admin_url + "/healthz") == (200, "ok\n")
    assert http_get(herald_admin.admin_url + "/readyz") == (200, "ready\n")
    assert http_get(herald_admin.admin_url + "/nope")[0] == 404


def test_oversized_frame_is_refused_and_counted_once(herald_admin: HeraldProcess) -> None:
    before = scrape(herald_admin)
    host, port = herald_admin.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        me = "{}:{}".format(*raw.getsockname()[:2])
        raw.sendall(struct.pack(">i", 1 << 30) + b"\x00" * 16)  # announces a 1 GiB frame
        assert raw.recv(1024) == b""  # Herald closed the connection
    after = wait_for(herald_admin, lambda s: moved(before, s, "herald_frames_refused_total") > 0)
    # Logged once, with the reason and who it was.
    deadline = time.monotonic() + 5
    while True:
        lines = [x for x in herald_admin.logs().splitlines() if f"client={me} " in x]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(lines) == 1, lines
    assert "level=warning event=connection_closed" in lines[0]
    assert 'reason="frame too large' in lines[0] and "client_id=None" in lines[0]
    assert moved(before, after, "herald_frames_refused_total", reason="too_large") == 1
    assert moved(before, after, "herald_frames_refused_total") == 1
    assert moved(before, after, "herald_connections_total", side="client") == 1
    assert moved(before, after, "herald_connections_total", side="upstream") == 1


def test_produce_traffic_moves_the_counters_by_exact_amounts(
    herald_admin: HeraldProcess, topic_name: str
) -> None:
    create_topic(herald_admin.bootstrap, LABELLED)
    create_topic(herald_admin.bootstrap, topic_name)
    labelled = [b"L" * 100 for _ in range(5)]
    other = [b"O" * 100 for _ in range(3)]
    n = len(labelled) + len(other)
    before = scrape(herald_admin)
    produce_one_by_one(herald_admin.bootstrap, LABELLED, labelled)
    produce_one_by_one(herald_admin.bootstrap, topic_name, other)
    after = scrape(herald_admin)

    assert moved(before, after, "herald_requests_total", api="Produce") == n
    assert moved(before, after, "herald_request_duration_seconds_count", api="Produce") == n
    assert moved(before, after, "herald_upstream_duration_seconds_count", api="Produce") == n

    rec = "herald_interceptor_records_total"
    for member in ("trace_context", "insert_header"):
        seen = {"path": "produce", "interceptor": member, "outcome": "seen"}
        assert moved(before, after, rec, **seen, topic=LABELLED) == len(labelled)
        assert moved(before, after, rec, **seen, topic="other") == len(other)
        assert moved(before, after, rec, path="produce", interceptor=member,
                     outcome="changed") == n
        assert moved(before, after, "herald_interceptor_headers_added_total",
                     path="produce", interceptor=member) == n
    assert moved(before, after, rec, outcome="rejected") == 0
    assert moved(before, after, "herald_interceptor_events_total",
                 interceptor="trace_context", event="trace_new_context") == n
    assert moved(before, after, "herald_interceptor_batches_total",
                 path="produce", outcome="changed") == n
    assert moved(before, after, "herald_batches_reencoded_total", compression="none") == n

    payload = sum(map(len, labelled + other))
    into = moved(before, after, "herald_bytes_total", direction="client_to_proxy")
    up = moved(before, after, "herald_bytes_total", direction="proxy_to_upstream")
    assert into > payload
    # Every record left with a traceparent (~68 bytes) and app.id (~16 bytes) more.
    assert up - into >= 70 * n


def test_compressed_batches_are_timed_and_counted(
    herald_admin: HeraldProcess, topic_name: str
) -> None:
    before = scrape(herald_admin)
    produce_one_by_one(herald_admin.bootstrap, topic_name, [b"x" * 500] * 4,
                       **{"compression.codec": "gzip"})
    after = scrape(herald_admin)
    assert moved(before, after, "herald_batches_reencoded_total", compression="gzip") == 4
    seconds = "herald_compression_seconds_total"
    assert moved(before, after, seconds, compression="gzip", operation="compress") > 0
    assert moved(before, after, seconds, compression="gzip", operation="decompress") > 0
    assert moved(before, after, seconds, compression="lz4") == 0


def test_reloads_are_counted_and_interceptor_counters_stay_monotonic(
    herald_admin: HeraldProcess, topic_name: str
) -> None:
    before = scrape(herald_admin)
    config = dict(herald_admin.config)
    config["interceptors"] = {"produce": [
        {"type": "trace_context"},
        {"type": "insert_header", "header": "app.id", "value": "checkout-v2"},
    ]}
    herald_admin.config_path.write_text(yaml.safe_dump(config))
    herald_admin.signal(signal.SIGHUP)
    reloaded = wait_for(
        herald_admin,
        lambda s: moved(before, s, "herald_config_reloads_total", outcome="applied") >= 1,
    )
    assert moved(before, reloaded, "herald_config_reloads_total", outcome="applied") == 1
    assert moved(before, reloaded, "herald_config_reloads_total", outcome="rejected") == 0
    # New chains start from zero; the exported counters must not notice.
    for (name, labels), value in before.items():
        if name.startswith("herald_interceptor_"):
            assert reloaded.get((name, labels), 0) >= value, (name, labels)

    produce_one_by_one(herald_admin.bootstrap, topic_name, [b"a", b"b"])
    after = scrape(herald_admin)
    seen = {"path": "produce", "interceptor": "insert_header", "outcome": "seen"}
    assert moved(before, after, "herald_interceptor_records_total", **seen) == 2
    assert moved(reloaded, after, "herald_interceptor_headers_added_total",
                 interceptor="trace_context") == 2

    config["interceptors"] = {"produce": [{"type": "no_such_interceptor"}]}
    herald_admin.config_path.write_text(yaml.safe_dump(config))
    herald_admin.signal(signal.SIGHUP)
    rejected = wait_for(
        herald_admin,
        lambda s: moved(before, s, "herald_config_reloads_total", outcome="rejected") >= 1,
    )
    assert moved(before, rejected, "herald_config_reloads_total", outcome="rejected") == 1
    assert moved(before, rejected, "herald_config_reloads_total", outcome="applied") == 1
