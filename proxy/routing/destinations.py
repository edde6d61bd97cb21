"""The clusters routed records are written to, each with a real Kafka producer.

Records that leave their partition are written by librdkafka (confluent-kafka), not by a
producer of Herald's own: it batches, retries, keeps order per partition and is idempotent,
so a destination broker that restarts costs a delay, not a duplicate or a reordering.

librdkafka is driven from trio without blocking the event loop: `produce()` only enqueues (it
is called on the loop, in record order, which is what keeps per-partition order), and a
thread of the destination's own calls `poll()`, which runs the delivery callbacks. Those
count down a `Delivery` per routed batch under a lock, and the last one wakes the waiting
task through the trio token: one cross-thread call per batch, none per record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import trio

from protocol.records import Record
from proxy.observability.logs import get_logger
from proxy.security.config import librdkafka_security
from proxy.upstream.cluster import AuthRequired, UpstreamCluster
from proxy.upstream.config import UpstreamConfig

log = get_logger("routing")

PROBE_PERIOD_S = 2.0
_POLL_S = 0.05


def producer_settings(config: UpstreamConfig, delivery_timeout_s: float) -> dict[str, Any]:
    """librdkafka settings for a cluster section: its bootstrap, TLS and SASL, plus what
    routing needs (idempotence, acks=all, a bounded delivery time).

    TLS and SASL map as for every client Herald makes (`librdkafka_security`).
    """
    settings: dict[str, Any] = {
        "bootstrap.servers": ",".join(str(hp) for hp in config.bootstrap),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": int(delivery_timeout_s * 1000),
        "socket.connection.setup.timeout.ms": max(1000, int(config.connect_timeout_s * 1000)),
        "partitioner": "murmur2_random",  # the Java client's choice for keyed records
        "client.id": "herald-router",
        # librdkafka's own log goes to stderr unstructured, a line per reconnect attempt:
        # Herald logs a destination going down and coming back once, itself.
        "log_level": 2,
    }
    settings.update(librdkafka_security(config.tls, config.sasl))
    return settings


class Delivery:
    """The outcome of one routed batch: done when every record is acknowledged or failed."""

    __slots__ = ("_left", "_lock", "_token", "error", "event", "started", "seconds", "records",
                 "on_done")

    def __init__(self, records: int, token: trio.lowlevel.TrioToken) -> None:
        self.records = records
        self.on_done: Callable[[Delivery, int], None] | None = None  # called on the loop
        self._left = records
        self._lock = threading.Lock()
        self._token = token
        self.error: str | None = None
        self.event = trio.Event()
        self.started = time.monotonic()
        self.seconds = 0.0
        if records == 0:
            self.event.set()

    @property
    def done(self) -> bool:
        return self.event.is_set()

    @property
    def ok(self) -> bool:
        return self.event.is_set() and self.error is None

    def on_delivery(self, err: Any, _msg: Any) -> None:
        """librdkafka's delivery callback (the poll thread)."""
        self._settle(1, None if err is None else str(err))

    def give_up(self, records: int, error: str) -> None:
        """Records that never reached the producer (on the loop)."""
        self._settle(records, error)

    def _settle(self, records: int, error: str | None) -> None:
        with self._lock:
            if error is not None and self.error is None:
                self.error = error
            self._left -= records
            last = self._left == 0
        if last:
            self.seconds = time.monotonic() - self.started
            try:
                trio.lowlevel.current_trio_token()
                on_loop = True
            except RuntimeError:
                on_loop = False
            if on_loop:
                self._finish()
            else:
                try:
                    self._token.run_sync_soon(self._finish)
                except trio.RunFinishedError:
                    pass

    def _finish(self) -> None:
        self.event.set()
        if self.on_done is not None:
            self.on_done(self, self.records)


class Destination:
    """One cluster routed records go to: its probe (for /readyz) and its producer."""

    def __init__(self, name: str, config: UpstreamConfig, delivery_timeout_s: float,
                 on_state: Callable[[str, bool], None] | None = None) -> None:
        self.name = name
        self.cluster = UpstreamCluster(config, name)
        self.settings = producer_settings(config, delivery_timeout_s)
        self.reachable: bool | None = None
        self._on_state = on_state
        self._producer: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    def start(self) -> None:
        """Make the producer and its poll thread (on the loop: both return at once)."""
        from confluent_kafka import Producer

        self._token = trio.lowlevel.current_trio_token()
        self._producer = Producer(self.settings)
        self._thread = threading.Thread(target=self._poll, name=f"herald-route-{self.name}",
                                        daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        producer = self._producer
        while not self._stop.is_set():
            producer.poll(_POLL_S)

    async def close(self, flush_s: float = 5.0) -> None:
        """Deliver what is queued (up to `flush_s`), then stop the poll thread."""
        if self._producer is None:
            return
        producer = self._producer
        left = await trio.to_thread.run_sync(producer.flush, flush_s)
        if left:
            log.warning("routing_flush_incomplete", cluster=self.name, records=left)
        self._stop.set()
        if self._thread is not None:
            await trio.to_thread.run_sync(self._thread.join)
        self._producer = None

    def delivery(self, records: int) -> Delivery:
        assert self._token is not None
        return Delivery(records, self._token)

    def send_records(self, delivery: Delivery, topic: str, partition: int, records: list[Record],
                     extra_header: Callable[[bytes | None, bytes | None], tuple[str, bytes]],
                     base_timestamp: int) -> int:
        """Enqueue records of a batch in order, each with the header `extra_header` makes of
        its key and value after its own (on the loop; never blocks); the key and value bytes
        handed over. A record the producer refuses at once (queue full, unknown partition)
        fails the delivery for it.

        This is the per-record path of routing: one loop, the producer's method looked up
        once, the record's parsed header list read without a copy."""
        produce = self._producer.produce
        report = delivery.on_delivery
        size = 0
        for rec in records:
            key, value = rec.key, rec.value
            try:
                produce(topic, value=value, key=key, partition=partition,
                        headers=[*rec.current_headers(), extra_header(key, value)],
                        timestamp=base_timestamp + rec.timestamp_delta, on_delivery=report)
            except BufferError:
                delivery.give_up(1, f"{self.name}: local queue full")
                continue
            except Exception as exc:  # KafkaException, or a bad argument: this record only
                delivery.give_up(1, f"{self.name}: {exc}")
                continue
            size += (len(key) if key else 0) + (len(value) if value else 0)
        return size

    async def watch(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        """Probe the cluster; log once when it goes down and once when it comes back.
        Started once the first probe has answered, so readiness never reports a cluster
        Herald has not tried yet."""
        first = True
        while True:
            try:
                await self.cluster.fetch_brokers()
                up = True
            except AuthRequired:
                up = True
            except ConnectionError as exc:
                up = False
                reason = str(exc)
            if up != self.reachable:
                if up and self.reachable is None:
                    log.info("routing_destination_up", cluster=self.name)
                elif up:
                    log.warning("routing_destination_up", cluster=self.name)
                else:
                    log.warning("routing_destination_down", cluster=self.name, error=reason)
                self.reachable = up
                if self._on_state is not None:
                    self._on_state(self.name, up)
            if first:
                task_status.started()
                first = False
            await trio.sleep(PROBE_PERIOD_S)
