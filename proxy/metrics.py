"""Prometheus metrics, in a registry of their own (one per proxy instance).

Label sets are bounded: API names come from the fixed table of Kafka API keys, versions are
small integers, interceptor labels are the configured member names, and a topic label is only
ever a topic on the configured allowlist (everything else is counted under `other`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from protocol.api_keys import api_name
from protocol.kafka_versions import KAFKA_VERSION

_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)

try:
    from importlib.metadata import version as _dist_version

    HERALD_VERSION = _dist_version("herald")
except Exception:  # not installed as a distribution (e.g. run from a source tree)
    HERALD_VERSION = "0.0.0"


class Metrics:
    def __init__(self, topic_allowlist: frozenset[str] = frozenset()) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.topic_allowlist = topic_allowlist
        self.connections_active = Gauge(
            "herald_connections_active", "Open connections", ["side"], registry=r)
        self.connections_total = Counter(
            "herald_connections", "Connections opened", ["side"], registry=r)
        self.requests = Counter(
            "herald_requests", "Requests forwarded, by API and version",
            ["api", "version"], registry=r)
        self.request_latency = Histogram(
            "herald_request_duration_seconds",
            "Client-facing latency: request received from the client to response sent to it",
            ["api"], buckets=_LATENCY_BUCKETS, registry=r)
        self.upstream_latency = Histogram(
            "herald_upstream_duration_seconds",
            "Upstream latency: request sent to the broker to its response received",
            ["api"], buckets=_LATENCY_BUCKETS, registry=r)
        self.bytes = Counter(
            "herald_bytes", "Bytes moved, by direction", ["direction"], registry=r)
        self.frames_refused = Counter(
            "herald_frames_refused", "Frames refused and their connection closed",
            ["reason"], registry=r)
        self.records = Counter(
            "herald_interceptor_records", "Records seen/changed/rejected/dropped by interceptors",
            ["interceptor", "outcome", "reason", "topic"], registry=r)
        self.headers_added = Counter(
            "herald_headers_added", "Headers added to records", ["interceptor"], registry=r)
        self.interceptor_errors = Counter(
            "herald_interceptor_errors", "Interceptor failures", ["interceptor"], registry=r)
        self.batches_reencoded = Counter(
            "herald_batches_reencoded", "Record batches re-encoded after a change",
            ["compression"], registry=r)
        self.compression_seconds = Counter(
            "herald_compression_seconds", "Time spent compressing and decompressing",
            ["compression", "operation"], registry=r)
        self.config_reloads = Counter(
            "herald_config_reloads", "Configuration reloads by outcome", ["outcome"], registry=r)
        self.build = Info("herald_build", "Build information", registry=r)
        self.build.info({"version": HERALD_VERSION, "kafka_protocol": KAFKA_VERSION})
        self._api_labels: dict[tuple[int, int], tuple[str, str]] = {}
        self._api_children: dict[tuple[int, int], ApiMetrics] = {}

    def api_labels(self, api_key: int, version: int) -> tuple[str, str]:
        key = (api_key, version)
        labels = self._api_labels.get(key)
        if labels is None:
            labels = self._api_labels[key] = (api_name(api_key), str(version))
        return labels

    def topic_label(self, topic: str | None) -> str:
        return topic if topic in self.topic_allowlist else "other"

    def for_api(self, api_key: int, version: int) -> ApiMetrics:
        """The per-(API, version) metric children, resolved once (label lookups cost)."""
        key = (api_key, version)
        found = self._api_children.get(key)
        if found is None:
            api, ver = self.api_labels(api_key, version)
            found = self._api_children[key] = ApiMetrics(
                self.requests.labels(api, ver),
                self.request_latency.labels(api),
                self.upstream_latency.labels(api),
            )
        return found


class ApiMetrics:
    __slots__ = ("requests", "latency", "upstream_latency")

    def __init__(self, requests: Counter, latency: Histogram, upstream: Histogram) -> None:
        self.requests = requests
        self.latency = latency
        self.upstream_latency = upstream
