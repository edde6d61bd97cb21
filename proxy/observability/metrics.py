"""Prometheus metrics, in a registry of their own (one per proxy instance).

Label sets are bounded: API names and versions come from the fixed table of Kafka API keys
(anything else a client sends is counted as `unknown`), interceptor labels are the configured
member names, and a topic label is only ever a topic on the configured allowlist (everything
else is counted under `other`). Client ids never become label values.

Two kinds of metrics live here. Per-request ones (requests, latency, bytes) are ordinary
prometheus_client objects updated by the sessions. Everything the interceptor layer counts is
*not*: the chains keep plain ints (`interceptors.stats`), the proxy keeps plain ints for
re-encoding and compression (`CodecStats`) and per-topic shares (`TopicTally`), and
`InterceptorCollector` turns them into metric families only when /metrics is scraped. The hot
path pays an integer addition, never a label lookup or a lock.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString as _untyped_float_to_go

from interceptors import Chains, ChainStats
from protocol.api_keys import API_KEYS
from protocol.compression import CODEC_NAMES
from protocol.kafka_versions import KAFKA_VERSION

_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
LATENCY_BUCKETS = _LATENCY_BUCKETS
_float_to_go: Callable[[float], str] = _untyped_float_to_go
"""prometheus_client's formatting of a bucket bound (`+Inf`, `0.5`), which it leaves untyped."""
OTHER_TOPIC = "other"
UNKNOWN_LABEL = "unknown"
"""The one label value that API keys and versions no Kafka release defines fold into."""

try:
    from importlib.metadata import version as _dist_version

    HERALD_VERSION = _dist_version("herald")
except Exception:  # not installed as a distribution (e.g. run from a source tree)
    HERALD_VERSION = "0.0.0"


class CodecStats:
    """Batches re-encoded and seconds spent (de)compressing, by codec id (bits 0-2).

    Plain floats and ints in lists indexed by codec id: updating them costs an index and an
    addition, and they are read only at scrape time.
    """

    __slots__ = ("reencoded", "compress_seconds", "decompress_seconds")

    def __init__(self) -> None:
        self.reencoded = [0] * 8
        self.compress_seconds = [0.0] * 8
        self.decompress_seconds = [0.0] * 8


# A record counter of one chain member: (member name, outcome, reason).
RecordKey = tuple[str, str, str]


def record_counts(stats: ChainStats) -> dict[RecordKey, int]:
    """Every record counter of a chain's members, flat (zero counters left out). A shadow
    member's outcomes are what it would have done: ``shadow_changed``, ``shadow_rejected``,
    ``shadow_dropped`` (as routing counts its shadow rules)."""
    out: dict[RecordKey, int] = {}
    for name, m in stats.members.items():
        would = "shadow_" if m.shadow else ""
        if m.records_seen:
            out[(name, "seen", "")] = m.records_seen
        if m.records_changed:
            out[(name, would + "changed", "")] = m.records_changed
        for reason, n in m.records_rejected.items():
            out[(name, would + "rejected", reason)] = n
        for reason, n in m.records_dropped.items():
            out[(name, would + "dropped", reason)] = n
    return out


class TopicTally:
    """The share of allowlisted topics in the interceptor record counters.

    The chains count per member only. For a partition of an allowlisted topic the proxy takes
    `before()` and calls `after()` around the chain, and the difference is booked to the
    topic; at scrape time `other` is the member's total minus the booked shares. Topics off
    the list cost one set lookup per partition.
    """

    def __init__(self, allowlist: frozenset[str]) -> None:
        self.allowlist = allowlist
        # (path, member, outcome, reason) -> {topic: records}
        self.shares: dict[tuple[str, str, str, str], dict[str, int]] = {}

    def before(self, stats: ChainStats) -> dict[RecordKey, int]:
        return record_counts(stats)

    def after(self, stats: ChainStats, topic: str, before: dict[RecordKey, int]) -> None:
        for key, n in record_counts(stats).items():
            delta = n - before.get(key, 0)
            if delta:
                per_topic = self.shares.setdefault((stats.path, *key), {})
                per_topic[topic] = per_topic.get(topic, 0) + delta


def flatten(chains: Chains) -> dict[tuple[str, ...], float]:
    """All counters of both chains as {(family, *labels): value}, for carrying over reloads."""
    out: dict[tuple[str, ...], float] = {}
    for stats in (chains.produce.stats, chains.fetch.stats):
        path = stats.path
        out[("batches", path, "seen")] = stats.batches_seen
        out[("batches", path, "changed")] = stats.batches_changed
        for (member, outcome, reason), n in record_counts(stats).items():
            out[("records", path, member, outcome, reason)] = n
        for name, m in stats.members.items():
            if m.shadow:
                out[("shadow_headers", path, name, "added")] = m.headers_added
                out[("shadow_headers", path, name, "removed")] = m.headers_removed
            else:
                out[("headers", path, name)] = m.headers_added
                out[("headers_removed", path, name)] = m.headers_removed
            for error, n in m.errors.items():
                out[("errors", path, name, error)] = n
            for event, n in m.events.items():
                out[("events", path, name, event)] = n
    return out


class InterceptorCollector(Collector):
    """Reads the chains' plain counters at scrape time and exports them as counters.

    A SIGHUP reload replaces the chains, and with them their counters. `retire()` adds the
    outgoing chains' totals to a base that is added to every later scrape, so the exported
    counters never go backwards (Prometheus would read a drop as a counter reset, and a rate
    over it would be wrong).
    """

    def __init__(
        self, source: Callable[[], Chains], codec: CodecStats, tally: TopicTally
    ) -> None:
        self.source = source
        self.codec = codec
        self.tally = tally
        self.base: dict[tuple[str, ...], float] = {}

    def retire(self, chains: Chains) -> None:
        for key, n in flatten(chains).items():
            self.base[key] = self.base.get(key, 0) + n

    def describe(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        return iter([*self._families(), self._levels()])

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        chains = self.source()
        totals = dict(self.base)
        for key, n in flatten(chains).items():
            totals[key] = totals.get(key, 0) + n
        levels = self._levels()
        for chain in (chains.produce, chains.fetch):
            for m in chain.members:
                for name, value in sorted(m.interceptor.gauges().items()):
                    levels.add_metric([chain.path, m.name, name], value)
        families = self._families()
        records, headers, removed, shadow, errors, events, batches, reencoded, seconds = \
            families
        for key, n in sorted(totals.items()):
            family, labels = key[0], list(key[1:])
            if family == "records":
                rest = n
                _, path, member, outcome, reason = key  # as `flatten` writes a record counter
                shares = self.tally.shares.get((path, member, outcome, reason), {})
                for topic, share in sorted(shares.items()):
                    records.add_metric([*labels, topic], share)
                    rest -= share
                records.add_metric([*labels, OTHER_TOPIC], rest)
            elif family == "headers":
                headers.add_metric(labels, n)
            elif family == "headers_removed":
                removed.add_metric(labels, n)
            elif family == "shadow_headers":
                shadow.add_metric(labels, n)
            elif family == "errors":
                errors.add_metric(labels, n)
            elif family == "events":
                events.add_metric(labels, n)
            else:
                batches.add_metric(labels, n)
        codec = self.codec
        for cid, name in CODEC_NAMES.items():
            reencoded.add_metric([name], codec.reencoded[cid])
            if cid:
                seconds.add_metric([name, "compress"], codec.compress_seconds[cid])
                seconds.add_metric([name, "decompress"], codec.decompress_seconds[cid])
        return iter([*families, levels])

    @staticmethod
    def _levels() -> GaugeMetricFamily:
        # Levels, not totals: the current chains' alone (a reload starts them afresh).
        return GaugeMetricFamily(
            "herald_interceptor_level",
            "What interceptor chain members hold now (e.g. link_memory_entries)",
            labels=["path", "interceptor", "level"])

    @staticmethod
    def _families() -> list[CounterMetricFamily]:
        return [
            CounterMetricFamily(
                "herald_interceptor_records",
                "Records seen/changed/rejected/dropped by interceptor chain members",
                labels=["path", "interceptor", "outcome", "reason", "topic"]),
            CounterMetricFamily(
                "herald_interceptor_headers_added", "Headers added to records",
                labels=["path", "interceptor"]),
            CounterMetricFamily(
                "herald_interceptor_headers_removed", "Headers removed from records",
                labels=["path", "interceptor"]),
            CounterMetricFamily(
                "herald_interceptor_shadow_headers",
                "Headers shadow members would have added or removed (nothing was changed)",
                labels=["path", "interceptor", "change"]),
            CounterMetricFamily(
                "herald_interceptor_errors", "Failures of interceptor chain members",
                labels=["path", "interceptor", "error"]),
            CounterMetricFamily(
                "herald_interceptor_events", "Events counted by the members themselves",
                labels=["path", "interceptor", "event"]),
            CounterMetricFamily(
                "herald_interceptor_batches", "Record batches run through a chain",
                labels=["path", "outcome"]),
            CounterMetricFamily(
                "herald_batches_reencoded", "Record batches re-encoded after a change",
                labels=["compression"]),
            CounterMetricFamily(
                "herald_compression_seconds",
                "Time spent compressing and decompressing record batches",
                labels=["compression", "operation"]),
        ]


class Metrics:
    def __init__(self, topic_allowlist: frozenset[str] = frozenset()) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.codec = CodecStats()
        self.topics = TopicTally(topic_allowlist)
        self.interceptor_collector: InterceptorCollector | None = None
        self.connections_active = Gauge(
            "herald_connections_active", "Open connections", ["side"], registry=r)
        self.connections_total = Counter(
            "herald_connections", "Connections opened", ["side"], registry=r)
        self.requests = PlainCounter(
            "herald_requests", "Requests forwarded, by API and version", ("api", "version"))
        r.register(self.requests)
        self.request_latency = LatencyHistogram(
            "herald_request_duration_seconds",
            "Client-facing latency: request received from the client to response sent to it")
        self.upstream_latency = LatencyHistogram(
            "herald_upstream_duration_seconds",
            "Upstream latency: request sent to the broker to its response received")
        r.register(self.request_latency)
        r.register(self.upstream_latency)
        self.bytes = PlainCounter("herald_bytes", "Bytes moved, by direction", ("direction",))
        r.register(self.bytes)
        self.frames_refused = Counter(
            "herald_frames_refused", "Frames refused and their connection closed",
            ["reason"], registry=r)
        self.versions_answered = Counter(
            "herald_unreadable_versions_answered",
            "Requests in a version newer (or older) than Herald's codec reads, answered by "
            "Herald so that the client asks again in one it reads (an ApiVersions request "
            "newer than Herald: UNSUPPORTED_VERSION), by API", ["api"], registry=r)
        self.share_dropped = Counter(
            "herald_share_records_dropped",
            "Records of share groups (KIP-932) the fetch chain dropped: left in the acquired "
            "ranges and out of the records, for the consumer to acknowledge as gaps",
            registry=r)
        self.share_redelivered = Counter(
            "herald_share_records_redelivered",
            "Records the fetch chain had dropped that a share group's broker acquired again "
            "for a consumer (expected 0: the consumer acknowledged them as gaps)", registry=r)
        self.responses_streamed = Counter(
            "herald_responses_streamed",
            "Large responses forwarded to the client as they arrived instead of whole",
            registry=r)
        self.native_handovers = Counter(
            "herald_native_relay_handovers",
            "Native relay phases of sessions that ended, by reason (request: a frame a filter "
            "reads went to Python)", ["reason"], registry=r)
        self.python_path = Counter(
            "herald_python_path",
            "Sessions (scope=session, counted once when they begin) and requests "
            "(scope=frame) handled on the Python path rather than the native engine, by "
            "reason (docs/performance.md lists each and what changes it) and, for frames, API",
            ["scope", "reason", "api"], registry=r)
        self.native_spliced = Counter(
            "herald_native_relay_spliced_bytes",
            "Bytes the native relay moved socket to socket with splice(2), never copied into "
            "Herald (they are also in herald_bytes_total)", registry=r)
        self.native_tls_bytes = Counter(
            "herald_native_relay_tls_bytes",
            "Plaintext bytes the native relay decrypted from or encrypted to TLS connections, "
            "by direction (they are also in herald_bytes_total)", ["direction"], registry=r)
        self.config_reloads = Counter(
            "herald_config_reloads", "Configuration reloads by outcome", ["outcome"], registry=r)
        self.tls_handshakes = Counter(
            "herald_tls_handshakes", "TLS handshakes with clients, by outcome "
            "(ok, failed, timeout, refused: no principal mapping rule matched)",
            ["outcome"], registry=r)
        self.tls_reloads = Counter(
            "herald_tls_reloads", "Certificate files re-read after they changed, by outcome",
            ["outcome"], registry=r)
        self.sasl_authentications = Counter(
            "herald_sasl_authentications",
            "SASL exchanges of clients through Herald as the broker answered them "
            "(mechanism: one of Kafka's, else other)",
            ["mechanism", "outcome"], registry=r)
        self.spans_skipped = Counter(
            "herald_tracing_spans_skipped",
            "Trace contexts Herald wrote but exported no span for (per-partition span limit)",
            registry=r)
        self.connection_limit_hits = Counter(
            "herald_connection_limit_hits",
            "Client connections refused (max_connections, max_connections_per_source) or "
            "closed (idle_timeout, frame_timeout) by a limit", ["limit"], registry=r)
        self.accept_errors = Counter(
            "herald_accept_errors",
            "Accepts that failed for lack of capacity, by errno (EMFILE: the process is out "
            "of file descriptors; ENFILE: the system is; ENOBUFS, ENOMEM: socket memory); the "
            "connection waits in the backlog and the accept is retried", ["reason"], registry=r)
        self.upstream_connect_failures = Counter(
            "herald_upstream_connect_failures",
            "Client connections closed because their upstream connection could not be opened "
            "(unreachable: no broker address answered; out_of_descriptors: Herald had no file "
            "descriptor for the socket)", ["reason"], registry=r)
        self.build = Info("herald_build", "Build information", registry=r)
        self.build.info({"version": HERALD_VERSION, "kafka_protocol": KAFKA_VERSION})
        self._api_children: dict[tuple[str, str], ApiMetrics] = {}
        self._by_pair: dict[tuple[int, int], ApiMetrics] = {}
        # Called before every scrape: counters kept outside Python (the native relay's)
        # are folded in then.
        self.before_scrape: list[Callable[[], None]] = []

    def refresh(self) -> None:
        """Bring every metric up to date before it is exported."""
        for fold in self.before_scrape:
            fold()

    def watch_interceptors(self, source: Callable[[], Chains]) -> None:
        """Export the counters of the chains `source()` returns (the current ones) on scrape."""
        if self.interceptor_collector is None:
            self.interceptor_collector = InterceptorCollector(source, self.codec, self.topics)
            self.registry.register(self.interceptor_collector)

    def retire_chains(self, chains: Chains) -> None:
        """`chains` are being replaced: keep their totals so the counters stay monotonic."""
        if self.interceptor_collector is not None:
            self.interceptor_collector.retire(chains)

    def for_api(self, api_key: int, version: int) -> ApiMetrics:
        """The per-(API, version) metric children, resolved once (label lookups cost).

        Cached by label values, and by (key, version) only for pairs some release defines, so
        hostile keys and versions cost one entry in all, like the series they are counted in.
        """
        found = self._by_pair.get((api_key, version))
        if found is not None:
            return found
        labels = bounded_api_labels(api_key, version)
        found = self._api_children.get(labels)
        if found is None:
            api, ver = labels
            found = self._api_children[labels] = ApiMetrics(
                self.requests.labels(api, ver),
                self.request_latency.labels(api),
                self.upstream_latency.labels(api),
            )
        if UNKNOWN_LABEL not in labels:
            self._by_pair[(api_key, version)] = found  # bounded by the table, like the labels
        return found


def _known_versions() -> dict[int, range]:
    """Every version of every API key some Kafka release Herald knows defines."""
    out = {}
    for key, info in API_KEYS.items():
        lows = [v for v in (info.min_version, info.legacy_min_version) if v is not None]
        highs = [v for v in (info.max_version, info.legacy_max_version) if v is not None]
        if lows and highs:
            out[key] = range(min(lows), max(highs) + 1)
    return out


_KNOWN_VERSIONS = _known_versions()


def bounded_api_labels(api_key: int, version: int) -> tuple[str, str]:
    """(api, version) label values from a request header, which the client chose.

    An API key outside the table, or a version no release defines, folds into `unknown`: the
    label set is bounded by the table, whatever clients send.
    """
    versions = _KNOWN_VERSIONS.get(api_key)
    if versions is None:
        return UNKNOWN_LABEL, UNKNOWN_LABEL
    name = API_KEYS[api_key].name
    return name, (str(version) if version in versions else UNKNOWN_LABEL)


class LatencySeries:
    """One label value's buckets and sum: an observation is a bisection and two additions."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(_LATENCY_BUCKETS) + 1)  # the last one: above every bound
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(_LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds


class LatencyHistogram(Collector):
    """A latency histogram by `api`, kept in plain lists and exported when scraped.

    Two are observed for every request. prometheus_client's Histogram takes a lock and checks
    for exemplars on each observation (about 4 us here, a good share of what Herald spends on
    a small request); this keeps the same buckets, sum and count for a fraction of that.
    """

    def __init__(self, name: str, documentation: str) -> None:
        self.name = name
        self.documentation = documentation
        self._series: dict[str, LatencySeries] = {}

    def labels(self, api: str) -> LatencySeries:
        series = self._series.get(api)
        if series is None:
            series = self._series[api] = LatencySeries()
        return series

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=["api"])

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=["api"])
        for api, series in sorted(self._series.items()):
            total = 0
            buckets = []
            for bound, n in zip((*_LATENCY_BUCKETS, math.inf), series.counts, strict=True):
                total += n
                buckets.append((_float_to_go(bound), total))
            family.add_metric([api], buckets, series.sum)
        yield family


class CounterSeries:
    """One label set's count: an increment is one addition."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class PlainCounter(Collector):
    """A counter kept in plain numbers and exported when scraped.

    For the counters every request and every read moves (requests, bytes): prometheus_client's
    Counter takes a lock on each increment, which the event loop, the only writer, does not
    need. Exported as prometheus_client would export it, without the `_created` samples.
    """

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self._series: dict[tuple[str, ...], CounterSeries] = {}

    def labels(self, *values: str) -> CounterSeries:
        series = self._series.get(values)
        if series is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: labels {self.labelnames}, got {values}")
            series = self._series[values] = CounterSeries()
        return series

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation, labels=list(self.labelnames))

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation,
                                     labels=list(self.labelnames))
        for values, series in sorted(self._series.items()):
            family.add_metric(list(values), series.value)
        yield family


class ApiMetrics:
    __slots__ = ("requests", "latency", "upstream_latency")

    def __init__(self, requests: CounterSeries, latency: LatencySeries, upstream: LatencySeries
                 ) -> None:
        self.requests = requests
        self.latency = latency
        self.upstream_latency = upstream
