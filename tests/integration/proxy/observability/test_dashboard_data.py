"""Every panel of Herald's own dashboard (deploy/grafana/herald-dashboard.json) shows data for
real traffic: a real Herald in front of a real broker, scraped by a real Prometheus, each
query of the shipped dashboard asked of that Prometheus.

The traffic is what a running Herald meets, kept going while the queries are asked (a rate
needs two samples in its window): an lz4 producer whose batches the chain stamps and
re-encodes, a consumer whose fetch chain filters and strips, a service that consumes and
produces on (a causal link), a traced record of a trace its client never fetched (a missed
link), batches of more new trace contexts than Herald exports spans for, records a plugin
member fails on (in a topic of their own: a failed batch passes as it came, unstamped),
frames over the size limit, and configuration reloads. A panel with no series is a dashboard
that asks for a metric or a label Herald does not export, or traffic no panel can show.
"""

from __future__ import annotations

import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.otlp_receiver import Receiver
from tests.support.pipeline.monitoring import HERALD_BOARD, board, empty_panels, queries
from tests.support.prometheus import running_prometheus
from tests.support.required_parts import PROMETHEUS, needs

pytestmark = needs(PROMETHEUS)

RUN = uuid.uuid4().hex[:8]
IN, OUT, TRACED = f"dash-in-{RUN}", f"dash-out-{RUN}", f"dash-traced-{RUN}"
FAILS = f"dash-fails-{RUN}"  # the plugin fails on these; a failed batch passes unstamped
MAX_FRAME = 1 << 20
COMPRESSION = "lz4"
PLUGIN = '''
from interceptors import Interceptor


class FailOnBoom(Interceptor):
    """Fails on every record with a `boom` header: a plugin with a bug."""

    def on_record(self, ctx, headers):
        if "boom" in headers:
            raise RuntimeError("planted failure")
'''
CHAINS = {
    "produce": [
        # Links remember what a scope fetched of the topics the member covers: IN among them.
        {"type": "trace_context", "mode": "record", "topics": [IN, OUT, TRACED],
         "link": {"scope": "client_id"}},
        {"type": "audit"},
        {"type": "fail_on_boom", "on_error": "pass"},
    ],
    "fetch": [
        {"type": "filter", "header": "tier", "equals": "hidden"},
        {"type": "drop_headers", "headers": ["prefix:secret."]},
    ],
}


def _plugin(folder: Path) -> Path:
    """A distribution as pip installs one (module and .dist-info), for the Herald process's
    PYTHONPATH: plugins come only through the entry-point group."""
    site = folder / "site"
    info = site / "herald_fail_on_boom-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "herald_fail_on_boom.py").write_text(PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: herald-fail-on-boom\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[herald.interceptors]\nfail_on_boom = herald_fail_on_boom:FailOnBoom\n")
    return site


class Traffic(threading.Thread):
    """All of the module docstring's traffic, in rounds of about a second, until stopped."""

    def __init__(self, herald: HeraldProcess) -> None:
        super().__init__(daemon=True)
        self.herald = herald
        self.stop = threading.Event()
        self.rounds = 0
        self.failures: list[str] = []

    def run(self) -> None:
        bootstrap = self.herald.bootstrap
        # One client id for both: the links' scope is the client id.
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": COMPRESSION,
                             "linger.ms": 20, "batch.num.messages": 500,
                             "client.id": "dash-service"})
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dash-{RUN}",
                             "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                             "client.id": "dash-service"})
        consumer.subscribe([IN])
        try:
            while not self.stop.is_set():
                self._round(producer, consumer)
                self.rounds += 1
        except Exception as exc:  # noqa: BLE001 - kept for the test to report
            self.failures.append(repr(exc))
        finally:
            consumer.close()

    def _round(self, producer: Producer, consumer: Consumer) -> None:
        # 150 records in one partition batch: each gets a new context, 100 get a span.
        for i in range(150):
            headers = [("secret.token", b"x")]
            if i % 10 == 0:
                headers.append(("tier", b"hidden"))
            producer.produce(IN, f"{self.rounds}-{i}".encode() * 8, headers=headers)
        producer.produce(FAILS, b"f", headers=[("boom", b"1")])
        # A traced record of a trace this client never fetched: a missed link.
        producer.produce(TRACED, b"t", headers=[
            ("traceparent", f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01".encode())])
        if producer.flush(20) != 0:
            raise AssertionError("records were not sent")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None or msg.error():
                continue
            # The service: what it read, it produces on in the same trace (a causal link).
            producer.produce(OUT, msg.value(), headers=[
                (k, v) for k, v in (msg.headers() or []) if k == "traceparent"])
        producer.poll(0)
        _oversized_frame(bootstrap=self.herald.bootstrap)


def _oversized_frame(bootstrap: str) -> None:
    """A size prefix over `limits.max_frame_bytes`: Herald refuses it and closes."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(struct.pack(">i", MAX_FRAME * 4) + b"\0" * 16)
        try:
            sock.recv(1)
        except OSError:
            pass


@pytest.fixture(scope="module")
def herald(kafka: KafkaCluster, receiver: tuple[Receiver, int],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeraldProcess]:
    for topic in (IN, OUT, TRACED, FAILS):
        create_topic(kafka.bootstrap, topic)
    site = _plugin(tmp_path_factory.mktemp("plugin"))
    config = herald_config(kafka.bootstrap, interceptors=CHAINS,
                           admin={"bind": f"127.0.0.1:{free_port()}", "topic_labels": [IN]},
                           limits={"max_frame_bytes": MAX_FRAME})
    env = {"PYTHONPATH": str(site), "OTEL_TRACES_EXPORTER": "otlp",
           "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver[1]}",
           "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_SERVICE_NAME": "herald-dashboard"}
    with HeraldProcess(config, env=env) as proc:
        yield proc


def test_every_panel_of_heralds_dashboard_has_data(herald: HeraldProcess, tmp_path: Path) -> None:
    dashboard = board(HERALD_BOARD)
    assert len(queries(dashboard)) >= 20  # the board is read, its queries with it
    target = herald.admin_url.removeprefix("http://")
    traffic = Traffic(herald)
    with running_prometheus([target], tmp_path) as prom:
        traffic.start()
        try:
            # Reloads while the traffic runs (each one `applied`): the reload panels count
            # them over the rate window, so the last must fall inside it.
            deadline = time.monotonic() + 150
            empty = empty_panels(prom, dashboard)
            while empty and time.monotonic() < deadline and not traffic.failures:
                herald.config_path.write_text(yaml.safe_dump(herald.config))
                herald.signal(signal.SIGHUP)
                time.sleep(5)
                empty = empty_panels(prom, dashboard)
        finally:
            traffic.stop.set()
            traffic.join(60)
    assert traffic.failures == [], traffic.failures
    assert traffic.rounds > 0
    assert not empty, "panels without data:\n" + "\n".join(empty)
