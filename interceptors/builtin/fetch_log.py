"""``fetch_log``: publish what the fetch path hands to consumers, for produce-to-consume latency
(fetch path; off unless configured).

For every record a consumer fetches through Herald, one compact JSON record goes to `topic`:

    {"tr": trace id or null, "o": offset, "h": record time or null, "t": topic,
     "p": partition, "c": consumer client id, "s": consumer host,
     "g": group or null, "f": fetch time, ms since the epoch}

keyed by the trace id (the layout is `protocol.contracts.fetch_log`, which the pipeline reads
back with). The analytics pipeline joins these to the hops (`pipeline.fetch_topic`) and
reports transit latency (fetch time minus Herald's receive time on produce) per topic and
consumer group. `h` is the record's own Herald receive time, the value of its `time_header`
(default `herald.time`, what `audit` writes; null without one), so that the stream can measure
transit and lag from the observations alone, per partition, without looking each record up.
`s` is the host of the consumer's address (as `trace_context`'s link memory keys a service by
it, `source_host`), so that the pipeline can tell which producer belongs to the same service
when it infers a parent: by the host of the record's `herald.source`, which Java and
librdkafka clients share between a service's consumer and producer where client ids differ.
A Fetch request does not name the consumer group: Herald learns it from the group requests
the same client sends (`CONSUMER_GROUPS`), and ``g`` is null for a consumer that reads without
a group (`assign()`). The `group` setting, when given, is stamped instead of what was learned
(one application per Herald, as a sidecar).

Cost is bounded: `on_record` looks up two headers and appends a tuple to a bounded queue (no
I/O, nothing that can block the event loop; the time header's value is checked and written
as text by the publisher's thread); a thread of its own drains the queue into a
confluent-kafka producer and serves its delivery callbacks (`poll`). When the queue is full,
observations are dropped and counted (``fetch_log_dropped``), never waited for;
``fetch_log_queued`` counts what was accepted. The publisher itself counts deliveries and
delivery failures (`Publisher.delivered`, `Publisher.failed`); librdkafka reports failures
only (`delivery.report.only.error`), so no Python callback runs per delivered observation.
Failures are counted as ``fetch_log_failed`` too, and logged once per episode
(`fetch_log_delivery_failed` with the cluster's last error, `fetch_log_delivery_recovered`
once observations are delivered again): librdkafka's own log, a line of prose on stderr per
reconnect attempt, is kept to critical messages, as for the routing destinations' producers.

The producer writes to `bootstrap` directly (the upstream cluster, not through Herald), so the
observations are not themselves intercepted. Towards a secured cluster it takes `tls` and
`sasl` sections with the keys of `upstream.tls` / `upstream.sasl` (secrets named by file or
environment variable). The member does not read them itself: it uses the proxy's Kafka
clients (`KAFKA_CLIENTS`), which check them and map them to librdkafka settings with the
same functions that serve `upstream` and the routing destinations (a second parser of the
same sections would drift). Without a proxy to check them (a chain built on its own), only a
plaintext cluster can be written to. The learned groups come the same way
(`CONSUMER_GROUPS`).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from configuration import InvalidConfig
from interceptors.api import FETCH, Interceptor
from interceptors.context import ProxyInfo, RecordContext
from interceptors.headers import Headers
from interceptors.services import CONSUMER_GROUPS, KAFKA_CLIENTS, KafkaClient
from interceptors.trace_links import source_host
from interceptors.tracing import parse_traceparent
from protocol.contracts.fetch_log import DEFAULT_TOPIC, batch_tail, observation
from protocol.contracts.headers import AUDIT_TIME, RESERVED_PREFIX, TRACEPARENT, audit_header

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message

log = logging.getLogger("herald.interceptors")

# What one fetched batch's observations share: (topic, partition, client id, group, fetch
# time, consumer host), the arguments of `batch_tail`.
_BatchFields = tuple[str, int, str | None, str | None, int, str | None]
# One observation waiting for the producer: (trace id, offset, the record's time header value,
# its batch's fields).
_Observation = tuple[str | None, int, bytes | None, _BatchFields]


@dataclass
class FetchLogConfig:
    bootstrap: str = ""             # the cluster the observations are written to
    topic: str = DEFAULT_TOPIC
    group: str = ""                 # stamped instead of the learned group when set
    time_header: str = audit_header(AUDIT_TIME, RESERVED_PREFIX)  # the record time, `h`
    queue_size: int = 100_000       # observations waiting for the producer; more are dropped
    linger_ms: int = 50
    delivery_timeout_s: float = 60.0  # an observation not acknowledged by then is failed
    tls: Any = None                 # TLS towards `bootstrap`: the keys of `upstream.tls`
    sasl: Any = None                # SASL towards `bootstrap`: the keys of `upstream.sasl`
    # `bootstrap`, `tls` and `sasl` as the proxy's Kafka clients checked them (set by the
    # member when it is built with them), or None.
    cluster: KafkaClient | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if not self.bootstrap:
            raise InvalidConfig("bootstrap", "required")
        if not self.topic:
            raise InvalidConfig("topic", "must not be empty")
        if not self.time_header:
            raise InvalidConfig("time_header", "must not be empty")
        if self.queue_size < 1:
            raise InvalidConfig("queue_size", "must be >= 1")
        if not self.delivery_timeout_s > 0:
            raise InvalidConfig("delivery_timeout_s", "must be > 0")

    def producer_settings(self) -> dict[str, Any]:
        """librdkafka settings of the observations' producer (secrets are read now)."""
        settings: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "client.id": "herald-fetch-log",
            "linger.ms": self.linger_ms, "enable.idempotence": False, "acks": 1,
            "delivery.report.only.error": True,
            "message.timeout.ms": max(1, int(self.delivery_timeout_s * 1000)),
            # librdkafka's own log goes to stderr unstructured, a line per reconnect attempt:
            # the publisher logs a failing cluster once itself (`DeliveryHealth`).
            "log_level": 2,
        }
        if self.cluster is not None:
            settings.update(self.cluster.librdkafka())
        elif self.tls is not None or self.sasl is not None:
            raise RuntimeError("fetch_log: tls and sasl need the proxy's Kafka clients "
                               "(ProxyInfo.kafka), which check them and map them")
        return settings


class DeliveryHealth:
    """Failures of the observations' delivery as episodes: the first failure logs one event
    with the cluster's last error (why it failed: a refused connection, a failed
    authentication); an observation delivered after the last failure, with no failure for
    `QUIET_S`, logs its end (so a cluster that takes some observations and fails others is
    one episode, not a line per poll). The publisher's thread calls all three methods:
    `failed` from a delivery report, `delivered` after each poll with the count as it is then
    (the first count after a failure is the one later deliveries must exceed)."""

    QUIET_S = 10.0

    def __init__(self, bootstrap: str, topic: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.failing = False
        self.last_error: str | None = None
        self._clock = clock
        self._last_failure = 0.0
        self._failed_at_start = 0
        self._delivered_at_failure: int | None = 0

    def cluster_error(self, text: str) -> None:
        self.last_error = text

    def failed(self, error: str, failed: int) -> None:
        self._last_failure = self._clock()
        self._delivered_at_failure = None  # the next count, which includes this poll's
        if self.failing:
            return
        self.failing = True
        self._failed_at_start = failed - 1
        log.warning("fetch_log_delivery_failed", extra={"fields": {
            "bootstrap": self.bootstrap, "topic": self.topic, "error": error,
            "cluster_error": self.last_error,
            "note": "observations are lost while this lasts; counted as fetch_log_failed"}})

    def delivered(self, failed: int, delivered: int) -> None:
        if self._delivered_at_failure is None:
            self._delivered_at_failure = delivered
        elif (self.failing and delivered > self._delivered_at_failure
                and self._clock() - self._last_failure >= self.QUIET_S):
            self.failing = False
            log.warning("fetch_log_delivery_recovered", extra={"fields": {
                "bootstrap": self.bootstrap, "topic": self.topic,
                "failed": failed - self._failed_at_start}})


class Publisher:
    """A bounded queue drained by a thread into a confluent-kafka producer."""

    def __init__(self, config: FetchLogConfig) -> None:
        self.config = config
        self.queue: deque[_Observation] = deque()
        self.limit = config.queue_size
        self.dropped = 0
        self.delivered = 0
        self.failed = 0
        self.settings = config.producer_settings()  # before the thread: errors surface here
        self.health = DeliveryHealth(config.bootstrap, config.topic)
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="herald-fetch-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def offer(self, item: _Observation) -> bool:
        """Queue one observation without ever blocking; False (and counted) when full."""
        if len(self.queue) >= self.limit:
            self.dropped += 1
            return False
        self.queue.append(item)
        if len(self.queue) == 1:
            self._wake.set()
        return True

    def _failed(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.failed += 1
            self.health.failed(err.str(), self.failed)

    def _cluster_error(self, err: KafkaError) -> None:
        from confluent_kafka import KafkaError

        if err.code() != KafkaError._ALL_BROKERS_DOWN:  # the reason, not its sum ("1/1 down")
            self.health.cluster_error(err.str())

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({**self.settings, "error_cb": self._cluster_error})
        queue, topic = self.queue, self.config.topic
        where, suffix, sent = None, "", 0
        while True:
            self._wake.wait(0.1)
            self._wake.clear()
            while queue:
                trace, offset, herald_time, batch = queue.popleft()
                if batch is not where:  # once per fetched batch: what its records share
                    where = batch
                    suffix = batch_tail(*batch)
                text = observation(trace, offset, suffix, herald_time)
                while True:
                    try:
                        producer.produce(topic, text.encode(), trace.encode() if trace else None,
                                         on_delivery=self._failed)
                        break
                    except BufferError:  # librdkafka's own queue is full: let it drain
                        producer.poll(0.05)
                sent += 1
                if not sent & 1023:  # serve delivery reports now and then, not per record
                    producer.poll(0)
            producer.poll(0.05)
            self.delivered = sent - self.failed - len(producer)
            self.health.delivered(self.failed, self.delivered)
            if self._stop and not queue:
                break
        producer.flush(10)
        self.delivered = sent - self.failed - len(producer)

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(15)


_publishers: dict[tuple[str, str, int, int, float, KafkaClient | None], Publisher] = {}
_lock = threading.Lock()


def publisher_for(config: FetchLogConfig) -> Publisher:
    """One publisher per distinct setting, kept across chain reloads (SIGHUP)."""
    key = (config.bootstrap, config.topic, config.queue_size, config.linger_ms,
           config.delivery_timeout_s, config.cluster)
    with _lock:
        pub = _publishers.get(key)
        if pub is None:
            pub = _publishers[key] = Publisher(config)
        return pub


class FetchLog(Interceptor):
    """Reads headers only (`needs = "read"`), so a chain of read-only members builds no
    record objects for it. A record's offset is then the batch's base offset plus the
    record's index, which is its offset delta whenever the deltas run 0..n-1 (the last delta
    is n-1); a batch with gaps (compacted) has its deltas read once in `on_batch`."""

    Config = FetchLogConfig
    paths = frozenset({FETCH})
    needs = "read"
    uses = frozenset({CONSUMER_GROUPS, KAFKA_CLIENTS})

    def __init__(self, config: FetchLogConfig, env: ProxyInfo) -> None:
        super().__init__(config, env)
        if env.kafka is not None:  # checks `tls` and `sasl` now, naming a bad key
            config.cluster = env.kafka.client(config.bootstrap, config.tls, config.sasl)
        self._publisher: Publisher | None = None
        self._failed = 0  # the publisher's failures counted as `fetch_log_failed` so far
        self._time_header = config.time_header
        self._batch: _BatchFields | tuple[()] = ()  # set per batch (`on_batch`)
        self._base = 0
        self._deltas: list[int] | None = None  # a batch's offset deltas when they have gaps

    def on_batch(self, ctx: RecordContext) -> None:
        pub = self._publisher
        if pub is None:  # started on first use, not when the config is checked
            pub = self._publisher = publisher_for(self.config)
            self._failed = pub.failed  # a publisher kept across a reload counted its own
        if pub.failed != self._failed:  # the thread's count, read once per batch
            failed = pub.failed
            self.stats.count("fetch_log_failed", failed - self._failed)
            self._failed = failed
        if self.config.group:
            group: str | None = self.config.group
        else:
            groups = self.env.groups
            group = None if groups is None else groups.group_of(ctx.conn.address,
                                                                ctx.conn.client_id)
        self._batch = (ctx.topic, ctx.partition, ctx.conn.client_id, group, self.env.time_ms(),
                       source_host(ctx.conn.address) or None)
        batch = ctx.batch
        assert batch is not None  # the engine sets it before `on_batch`
        self._base = batch.base_offset
        self._deltas = (None if batch.last_offset_delta == batch.record_count - 1
                        else [r.offset_delta for r in batch.records])

    def gauges(self) -> dict[str, float]:
        """`fetch_log_failing`: 1 while observations fail to be delivered (the episode
        `DeliveryHealth` logs), current at every scrape; `fetch_log_failed` is counted as the
        next fetched batch passes. `fetch_log_waiting`: observations queued for the
        producer."""
        pub = self._publisher
        if pub is None:
            return {}
        return {"fetch_log_failing": float(pub.health.failing),
                "fetch_log_waiting": float(len(pub.queue))}

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        tp = parse_traceparent(headers.first(TRACEPARENT))
        record, deltas = ctx.record, self._deltas
        offset = self._base + (record.offset_delta if record is not None
                               else ctx.index if deltas is None else deltas[ctx.index])
        assert self._publisher is not None
        batch = self._batch
        assert batch  # `on_batch` set the batch's fields
        item = (tp.trace_id if tp else None, offset, headers.first(self._time_header), batch)
        if self._publisher.offer(item):
            self.stats.count("fetch_log_queued")
        else:
            self.stats.count("fetch_log_dropped")
        return None
