"""Counters of the batch limits, as plain ints the hot path bumps and /metrics reads.

Like `CodecStats`: updating one costs an addition, and label values are fixed here (codec
names, the reasons below), never taken from client input. `LimitMetrics` puts them, the
memory budget and the connection limits' label values into the process's metrics: the
limits know the metrics registry, the registry knows nothing of the limits.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from protocol.compression import CODEC_NAMES
from proxy.limits.connection_guard import LIMITS as CONNECTION_LIMITS
from proxy.limits.memory_budget import MemoryBudget
from proxy.observability.metrics import Metrics

# Why a partition of a Produce request was refused by a limit rather than by the chain.
BATCH_RECORDS = "max_batch_records"
REQUEST_RECORDS = "max_request_records"
BATCH_DECOMPRESSED = "max_batch_decompressed_bytes"
REQUEST_DECOMPRESSED = "max_request_decompressed_bytes"
TOPIC_SIZE = "topic_max_message_bytes"
MEMORY = "memory_budget_bytes"
REASONS = (BATCH_RECORDS, REQUEST_RECORDS, BATCH_DECOMPRESSED, REQUEST_DECOMPRESSED, TOPIC_SIZE,
           MEMORY)


class LimitStats:
    __slots__ = ("fitted", "refused", "offloaded")

    def __init__(self) -> None:
        self.fitted = [0] * 8  # batches re-encoded to fit the topic's limit, by new codec id
        self.refused = dict.fromkeys(REASONS, 0)  # partitions refused, by limit
        self.offloaded = 0  # partitions processed off the event loop


class LimitCollector(Collector):
    def __init__(self, stats: LimitStats, memory: MemoryBudget | None = None) -> None:
        self.stats = stats
        self.memory = memory

    def describe(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        return iter(self._families())

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        families = self._families()
        fitted, refused, offloaded, budget, waits = families
        memory = self.memory
        if memory is not None:
            for kind, value in (("limit", memory.limit), ("used", memory.used),
                                ("peak", memory.peak)):
                budget.add_metric([kind], value)
            waits.add_metric([], memory.waits)
        stats = self.stats
        for cid, name in CODEC_NAMES.items():
            if cid:
                fitted.add_metric([name], stats.fitted[cid])
        for reason, n in stats.refused.items():
            refused.add_metric([reason], n)
        offloaded.add_metric([], stats.offloaded)
        return iter(families)

    @staticmethod
    def _families() -> list[CounterMetricFamily | GaugeMetricFamily]:
        return [
            CounterMetricFamily(
                "herald_batches_fitted",
                "Record batches the chain enlarged past the topic's max.message.bytes, "
                "re-encoded with a stronger codec so the broker accepts them",
                labels=["compression"]),
            CounterMetricFamily(
                "herald_partitions_refused_by_limit",
                "Produce partitions refused by a limit (no records of them written)",
                labels=["limit"]),
            CounterMetricFamily(
                "herald_big_batches_offloaded",
                "Partitions whose batches were processed off the event loop"),
            GaugeMetricFamily(
                "herald_memory_budget_bytes",
                "The global memory budget for buffered frames, responses and decompressed "
                "batches: its limit, what is used now, and the most ever used",
                labels=["kind"]),
            CounterMetricFamily(
                "herald_memory_budget_waits",
                "Times a connection or a batch waited for room in the memory budget "
                "(reading from that client paused)"),
        ]


class LimitMetrics:
    """The limits' share of a process's `Metrics`: the batch limits' counters (`stats`, handed
    to the interception member), the memory budget's limit, use, peak and waits when there is
    one, and every connection limit's label, present at zero before it is first hit."""

    def __init__(self, metrics: Metrics, memory: MemoryBudget | None = None) -> None:
        self.stats = LimitStats()
        self.collector = LimitCollector(self.stats, memory)
        metrics.registry.register(self.collector)
        for limit in CONNECTION_LIMITS:
            metrics.connection_limit_hits.labels(limit)
