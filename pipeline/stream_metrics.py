"""The stream's answers as Prometheus metrics, served from the Spark driver
(docs/observability.md, "The stream's metrics").

Why from the merged aggregates. After each micro-batch the stream holds, in one small value
(`pipeline.stream.aggregates`, kept as `aggregates/N.json`), every count, histogram and sketch
its tables are drawn from, merged from the checkpoint onwards. The exporter keeps a reference
to the newest one and turns it into metric families when Prometheus scrapes
(`StreamCollector.collect`), so a micro-batch pays nothing but that reference, a scrape pays
for the aggregates' size (edges, paths, groups: not records), and the metrics say exactly what
the tables say. Counters are the aggregates' totals
since the checkpoint began, so they survive a restart of the stream instead of starting again
from zero.

Histograms are exact. Edge waits and pathway durations are counted per bucket of
`pipeline.flows.HISTOGRAM_BOUNDS_MS` (a value falls in the first bound at or above it), which
are Prometheus's cumulative `le` buckets in seconds, with the exact sum beside them; the
sketches (`pipeline.sketch`) give the tables' percentiles and the lag.

Label values are bounded (`LabelBudget`): topics come from the configuration; edges, paths and
consumer groups take the first `stream.metrics_top` by volume and keep them for the life of the
process (a series that moved to `other` would break its counter); the rest are added up under
`other`, exactly, histograms bucket by bucket and sketches merged.

Edges carry the names and labels of the service-graph metrics that Tempo's metrics generator
and the OpenTelemetry Collector's `servicegraph` connector write (`client` and `server`, here
the parent and the child topic, `connection_type="messaging_system"`), so Grafana's service
graph and node graph views draw Kafka flows from them unchanged.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from pipeline.flows import HISTOGRAM_BOUNDS_MS
from pipeline.graph import FETCH_EVIDENCE, HEADER, LOST_REASONS, TIME, evidence_counts
from pipeline.sketch import Sketch

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from pipeline.config import PipelineConfig
    from pipeline.stream.aggregates import Aggregates, EdgeKey, Entry
    from pipeline.stream.progress_record import ProgressRecord

log = logging.getLogger("herald.pipeline.metrics")

Key = TypeVar("Key", bound=Hashable)  # what a label's values come from: an edge, path, group

# prometheus_client leaves floatToGoString unannotated: a number in, Prometheus's text of it out.
_go_float = cast(Callable[[float], str], floatToGoString)

OTHER = "other"
CONNECTION_TYPE = "messaging_system"  # the service-graph connection type of a queue
EDGE_LABELS = ("client", "server", "connection_type")
# Upper bounds (s) of the micro-batch duration histogram.
BATCH_BOUNDS_S = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
LE = (*(_go_float(b / 1000) for b in HISTOGRAM_BOUNDS_MS), "+Inf")
BATCH_LE = (*(_go_float(b) for b in BATCH_BOUNDS_S), "+Inf")

Where = tuple[str, ...]
"""A place in the aggregates: attribute names, then keys of their dicts (`_path`)."""

# Counters of the merged aggregates without labels: (metric, help, where in the aggregates).
# A figure the aggregates do not have yet (an older checkpoint) is left out, never shown as 0.
PLAIN_COUNTERS: tuple[tuple[str, str, Where], ...] = (
    ("herald_stream_flows", "Flows finalised (each counted once, when the watermark passed it)",
     ("flows", "total")),
    ("herald_stream_flows_broken", "Finalised flows with a broken branch", ("flows", "broken")),
    ("herald_stream_branches", "Branches (root-to-leaf paths) of finalised flows",
     ("branches", "total")),
    ("herald_stream_branches_broken",
     "Branches that stopped before a terminal topic or waited longer than max_wait_ms",
     ("branches", "broken")),
    # Lost parents (`herald.parents_lost`): where the aggregates count them.
    ("herald_stream_branches_incomplete",
     "Branches through a hop with parents Herald knew of but could not name (parents_lost)",
     ("incomplete", "branches")),
    ("herald_stream_flows_incomplete", "Flows with an incomplete branch",
     ("incomplete", "flows")),
    ("herald_stream_hops_incomplete", "Traced hops declaring lost parents",
     ("incomplete", "hops")),
    ("herald_stream_parents_lost", "Parents declared lost by the hops (their counts summed)",
     ("incomplete", "parents_lost")),
    ("herald_stream_links_unresolved", "Hops whose parent headers name only records not read",
     ("links", "unresolved")),
    ("herald_stream_flows_evicted", "Flows finalised early: over max_flow_hops or max_flow_age_s",
     ("stream", "evicted_flows")),
    ("herald_stream_hops_evicted", "Hops of evicted flows", ("stream", "evicted_hops")),
    ("herald_stream_hops_late", "Hops arriving after their flow was finalised (not merged)",
     ("stream", "late_hops")),
    ("herald_stream_fetches_late", "Fetch observations arriving after their flow was finalised",
     ("stream", "late_fetches")),
    ("herald_stream_fetches_unmeasured",
     "Fetch observations of records whose time the stream no longer held: counted, left "
     "to batch",
     ("stream", "no_record_time")),
)
# Counters by one label: (metric, help, label, where, {label value: path under `where`},
# how what is at `where` is read: None as it is). Without `where` in the aggregates the family
# is left out; a value not there yet is 0.
LABELLED_COUNTERS: tuple[tuple[str, str, str, Where, dict[str, Where],
                               Callable[[Mapping[str, int]], dict[str, int]] | None], ...] = (
    ("herald_stream_branch_breaks", "Broken branches by reason (a branch both stopped and slow "
     "counts under each)", "reason", ("branches",), {"stopped": ("stopped",),
                                                     "slow": ("slow",)}, None),
    ("herald_stream_branch_losses", "Incomplete branches by the reason their parents were "
     "lost (a branch with several reasons counts under each)", "reason",
     ("incomplete", "by_reason"), {r: (r, "branches") for r in LOST_REASONS}, None),
    ("herald_stream_links", "Parent links of hops by evidence: header (herald.parent), "
     "inferred from the same service's fetch (matched by host, host and client id, or client "
     "id), inferred by time", "evidence", ("links",),
     {e: (e,) for e in (HEADER, *FETCH_EVIDENCE, TIME)}, evidence_counts),
)
# Per edge and per pathway: (metric, help, key in the entry). The service graph's request
# count is the edge's hops.
EDGE_COUNTERS = (
    ("traces_service_graph_request", "Hops from a record of the client topic to a record of "
     "the server topic (edges of finalised flows)", None),
    ("herald_stream_edge_inferred", "Hops of the edge whose parent was inferred, not linked",
     "inferred"),
    ("herald_stream_edge_incomplete", "Hops of the edge into a hop with lost parents",
     "incomplete"),
)
PATHWAY_COUNTERS = (
    ("herald_stream_pathway_branches", "Branches of finalised flows along the path", None),
    ("herald_stream_pathway_branches_broken", "Broken branches along the path", "broken"),
    ("herald_stream_pathway_branches_inferred",
     "Branches along the path with an inferred edge", "inferred"),
    ("herald_stream_pathway_branches_incomplete",
     "Branches along the path through a hop with lost parents", "incomplete"),
)
STATE_GAUGES = (("herald_stream_held_hops", "Hops held in the state, waiting for their flow"),
                ("herald_stream_held_flows", "Open flows held in the state"),
                ("herald_stream_tombstones", "Finalised traces remembered to recognise late hops"))


class LabelBudget:
    """At most `limit` distinct values of one label; the first admitted by volume, then kept
    for the life of the process (so a counter never moves between series). A value left out
    is reported as `other`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept: set[Hashable] = set()

    def admit(self, volumes: Mapping[Key, int]) -> Callable[[Key], Key | None]:
        """Admit the largest of `volumes` while there is room; the returned function gives
        each key itself or None (`other`)."""
        for key in sorted(volumes, key=lambda k: (-volumes[k], json.dumps(k, default=str))):
            if len(self.kept) >= self.limit:
                break
            self.kept.add(key)
        return lambda key: key if key in self.kept else None


@dataclass
class Histogram:
    """Counts per bucket of the bounds `le` (not cumulative; `HISTOGRAM_BOUNDS_MS` in seconds
    unless told) and the exact sum (ms); `sum_ms` None when some part did not keep one."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(HISTOGRAM_BOUNDS_MS) + 1))
    sum_ms: float | None = 0
    le: tuple[str, ...] = LE

    def add(self, entry: Entry) -> None:
        for i, c in enumerate(entry.histogram or ()):
            self.counts[i] += c
        self.sum_ms = (None if self.sum_ms is None or entry.sum_ms is None
                       else self.sum_ms + entry.sum_ms)

    def buckets(self) -> list[tuple[str, float]]:
        running = 0
        out: list[tuple[str, float]] = []
        for le, c in zip(self.le, self.counts, strict=True):
            running += c
            out.append((le, running))
        return out

    def export(self, family: HistogramMetricFamily, labels: list[str]) -> None:
        """One series of `family`: the cumulative buckets, and `_sum` (s) with `_count` where
        the sum is known. Without a sum there is no `_count` either: OpenMetrics has both or
        neither, and the `+Inf` bucket states the count all the same."""
        family.add_metric(labels, self.buckets(),
                          None if self.sum_ms is None else self.sum_ms / 1000)


def _complete(entry: Entry) -> bool:
    """The entry's histogram counts every value its sketch does (an entry merged partly by an
    older version does not, and is exported without a histogram)."""
    return entry.histogram is not None and sum(entry.histogram) == _count(entry)


def _count(entry: Entry) -> int:
    return entry.sketch.count if entry.sketch is not None else 0


def _path(value: object, where: Where) -> Any:
    """What is at `where` in the aggregates (attributes, then keys of their dicts); None
    where they do not have it."""
    for key in where:
        value = value.get(key) if isinstance(value, dict) else getattr(value, key, None)
        if value is None:
            return None
    return value


@dataclass
class Folded:
    """One exported series: entries of the aggregates added up under one label set."""

    count: int = 0
    sums: dict[str, int | None] = field(default_factory=dict)  # None: some entry lacks it
    histogram: Histogram | None = field(default_factory=Histogram)

    def add(self, entry: Entry, keys: Iterable[str]) -> None:
        self.count += _count(entry)
        for k in keys:
            was, value = self.sums.get(k, 0), getattr(entry, k)
            self.sums[k] = None if was is None or value is None else was + int(value)
        if self.histogram is not None:
            if _complete(entry):
                self.histogram.add(entry)
            else:
                self.histogram = None


def fold(entries: Mapping[Key, Entry], budget: LabelBudget,
         keys: Iterable[str]) -> dict[Key | None, Folded]:
    """Entries (with a `sketch`, and maybe a histogram) by label value, the ones over the
    budget added up under None (`other`)."""
    keys = list(keys)
    label = budget.admit({k: _count(e) for k, e in entries.items()})
    out: dict[Key | None, Folded] = {}
    for k, e in entries.items():
        out.setdefault(label(k), Folded()).add(e, keys)
    return out


class Budgets:
    def __init__(self, limit: int) -> None:
        self.edges, self.paths, self.groups = (LabelBudget(limit) for _ in range(3))


@dataclass(frozen=True)
class EntryMetrics(Generic[Key]):
    """How one kind of merged entry (edges, pathways) is exported: its counters (metric, help,
    key in the entry: None for the entry's count), its histogram, its label names, and the
    label values of an entry's key (None: `other`)."""

    counters: tuple[tuple[str, str, str | None], ...]
    histogram: tuple[str, str]
    labels: tuple[str, ...]
    label_values: Callable[[Key | None], list[str]]

    def families(self, entries: Mapping[Key, Entry], budget: LabelBudget
                 ) -> Iterator[Metric]:
        folded = fold(entries, budget, [k for _, _, k in self.counters if k])
        counters = {name: CounterMetricFamily(name, doc, labels=self.labels)
                    for name, doc, _ in self.counters}
        hist = HistogramMetricFamily(*self.histogram, labels=self.labels)
        for key, f in sorted(folded.items(), key=lambda kv: kv[0] is None):
            labels = self.label_values(key)
            for name, _, k in self.counters:
                _add_count(counters[name], labels, f, k)
            if f.histogram is not None:
                f.histogram.export(hist, labels)
        yield from (c for c in counters.values() if c.samples)
        yield hist


def _add_count(family: CounterMetricFamily, labels: list[str], f: Folded, key: str | None
               ) -> None:
    """The series' count (`key` None) or sum of `key`, unless some entry lacks it (aggregates
    written before that figure existed): left out rather than shown as 0."""
    value = f.count if key is None else f.sums[key]
    if value is not None:
        family.add_metric(labels, value)


EDGES: EntryMetrics[EdgeKey] = EntryMetrics(
    EDGE_COUNTERS,
    ("traces_service_graph_request_server_seconds",
     "Wait from the parent record (client topic) to the child record (server topic), s"),
    EDGE_LABELS, lambda key: [*(key or (OTHER, OTHER)), CONNECTION_TYPE])
PATHWAYS: EntryMetrics[str] = EntryMetrics(
    PATHWAY_COUNTERS,
    ("herald_stream_pathway_duration_seconds",
     "Branch duration along the path: its first hop to its last, s"),
    ("path",), lambda key: [key if key is not None else OTHER])


def edge_families(agg: Aggregates, budgets: Budgets) -> Iterator[Metric]:
    return EDGES.families(agg.edges, budgets.edges)


def pathway_families(agg: Aggregates, budgets: Budgets) -> Iterator[Metric]:
    return PATHWAYS.families(agg.pathways, budgets.paths)


def count_families(agg: Aggregates) -> Iterator[Metric]:
    for name, doc, where in PLAIN_COUNTERS:
        value = _path(agg, where)
        if value is not None:
            yield CounterMetricFamily(name, doc, value=value)
    for name, doc, label, where, values, read in LABELLED_COUNTERS:
        found = _path(agg, where)
        if found is None:
            continue
        if read is not None:
            found = read(found)
        family = CounterMetricFamily(name, doc, labels=[label])
        for value, inner in values.items():
            family.add_metric([value], _path(found, inner) or 0)
        yield family


def record_families(agg: Aggregates, topics: list[str]) -> Iterator[Metric]:
    """Records read per topic, and those without trace context (no flow can hold them)."""
    known = set(topics)
    totals: dict[str, list[int]] = {}
    for o in agg.offsets.values():
        t = totals.setdefault(o.topic if o.topic in known else OTHER, [0, 0])
        t[0] += o.records
        t[1] += o.untraced
    records = CounterMetricFamily("herald_stream_records", "Records read and analysed",
                                  labels=["topic"])
    untraced = CounterMetricFamily("herald_stream_records_untraced",
                                   "Records without trace context (part of no flow)",
                                   labels=["topic"])
    for topic, (n, u) in sorted(totals.items()):
        records.add_metric([topic], n)
        untraced.add_metric([topic], u)
    yield records
    yield untraced


def lag_families(agg: Aggregates, topics: list[str], budgets: Budgets) -> Iterator[Metric]:
    """Per topic and consumer group: the lag of the newest bucket of fetch time (its max and
    median, and when that bucket starts) and the fetches counted (each reader's first fetch of
    a record). An empty `group` is readers without one."""
    known = set(topics)
    newest: dict[tuple[str, str], tuple[int, Sketch]] = {}
    for (topic, group, bucket_ms), sketch in agg.lag.items():
        k = (topic, group or "")
        if k not in newest or newest[k][0] < bucket_ms:
            newest[k] = (bucket_ms, sketch)
    fetches = {}
    for (topic, group), t in agg.transit.items():
        if t.sketch is not None:
            fetches[(topic, group or "")] = t.sketch.count
    label = budgets.groups.admit(_group_volumes(fetches))

    def labels(k: tuple[str, str]) -> tuple[str, str]:
        topic = k[0] if k[0] in known else OTHER
        return topic, k[1] if label(k[1]) is not None else OTHER

    lags: dict[tuple[str, str], tuple[int, Sketch]] = {}
    for k, (bucket_ms, sketch) in newest.items():
        sk = copy.deepcopy(sketch)  # merged below: the aggregates' own stays as it is
        was = lags.get(labels(k))
        if was is not None:
            sk.merge(was[1])
            bucket_ms = max(bucket_ms, was[0])
        lags[labels(k)] = (bucket_ms, sk)
    maxima = GaugeMetricFamily(
        "herald_stream_consumer_lag_seconds",
        "Consumer lag (newest record time minus the fetched record's), the maximum over the "
        "newest bucket of fetch time", labels=["topic", "group"])
    medians = GaugeMetricFamily("herald_stream_consumer_lag_median_seconds",
                                "Median consumer lag over the newest bucket of fetch time",
                                labels=["topic", "group"])
    since = GaugeMetricFamily("herald_stream_consumer_lag_bucket_timestamp_seconds",
                              "Start (fetch time) of the bucket the lag figures come from",
                              labels=["topic", "group"])
    for k, (bucket_ms, sk) in sorted(lags.items()):
        top, median = sk.max, sk.quantile(0.5)
        assert top is not None and median is not None  # a lag sketch holds its fetches' lags
        maxima.add_metric(list(k), top / 1000)
        medians.add_metric(list(k), median / 1000)
        since.add_metric(list(k), bucket_ms / 1000)
    counted = CounterMetricFamily("herald_stream_consumer_fetches",
                                  "Records fetched (each reader's first fetch of a record)",
                                  labels=["topic", "group"])
    summed: dict[tuple[str, str], int] = {}
    for k, n in fetches.items():
        summed[labels(k)] = summed.get(labels(k), 0) + n
    for k, n in sorted(summed.items()):
        counted.add_metric(list(k), n)
    yield from (maxima, medians, since, counted)


def _group_volumes(fetches: dict[tuple[str, str], int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for (_, group), n in fetches.items():
        out[group] = out.get(group, 0) + n
    return out


def state_families(agg: Aggregates) -> Iterator[Metric]:
    st = agg.stream
    for (name, doc), value in zip(STATE_GAUGES, st.held(), strict=True):
        yield GaugeMetricFamily(name, doc, value=value)
    if st.watermark_ms is not None:
        yield GaugeMetricFamily("herald_stream_watermark_timestamp_seconds",
                                "The event-time watermark", value=st.watermark_ms / 1000)
    yield GaugeMetricFamily("herald_stream_last_batch_id", "The newest micro-batch merged",
                            value=agg.batch_id)


def aggregate_families(agg: Aggregates, topics: list[str], budgets: Budgets
                       ) -> Iterator[Metric]:
    """Every metric drawn from the merged aggregates."""
    yield from edge_families(agg, budgets)
    yield from pathway_families(agg, budgets)
    yield from count_families(agg)
    yield from record_families(agg, topics)
    yield from lag_families(agg, topics, budgets)
    yield from state_families(agg)


@dataclass
class Progress:
    """What the exporter adds up from Spark's progress events (this process's, from its
    start): micro-batches, their durations and input rows, rows dropped behind the watermark;
    and the latest state size."""

    batches: int = 0
    input_rows: int = 0
    dropped: int = 0
    duration: Histogram = field(default_factory=lambda: Histogram(
        counts=[0] * (len(BATCH_BOUNDS_S) + 1), le=BATCH_LE))
    state_rows: int | None = None
    state_bytes: int | None = None
    last_s: float | None = None

    def add(self, record: ProgressRecord) -> None:
        self.batches += 1
        self.input_rows += int(record.get("input_rows") or 0)
        state = record.get("state") or {}
        self.dropped += int(state.get("numRowsDroppedByWatermark") or 0)
        if state:
            self.state_rows = state.get("numRowsTotal")
            self.state_bytes = state.get("memoryUsedBytes")
        ms = record.get("duration_ms")
        if ms is not None:
            i = next((i for i, b in enumerate(BATCH_BOUNDS_S) if ms <= b * 1000),
                     len(BATCH_BOUNDS_S))
            self.duration.counts[i] += 1
            self.duration.sum_ms = (self.duration.sum_ms or 0) + ms
        self.last_s = time.time()

    def families(self) -> Iterator[Metric]:
        yield CounterMetricFamily("herald_stream_batches", "Micro-batches run by this process",
                                  value=self.batches)
        yield CounterMetricFamily("herald_stream_input_rows",
                                  "Rows read by this process's micro-batches (records and "
                                  "fetch observations)", value=self.input_rows)
        yield CounterMetricFamily("herald_stream_rows_dropped_by_watermark",
                                  "Rows behind the watermark, dropped before the state",
                                  value=self.dropped)
        hist = HistogramMetricFamily("herald_stream_batch_duration_seconds",
                                     "Micro-batch duration (Spark's triggerExecution), s")
        self.duration.export(hist, [])
        yield hist
        if self.state_rows is not None:
            yield GaugeMetricFamily("herald_stream_state_rows",
                                    "Keys in the state store (trace buckets, partition clocks)",
                                    value=self.state_rows)
        if self.state_bytes is not None:
            yield GaugeMetricFamily("herald_stream_state_memory_bytes",
                                    "Memory of the state store", value=self.state_bytes)
        if self.last_s is not None:
            yield GaugeMetricFamily("herald_stream_last_progress_timestamp_seconds",
                                    "When the stream last reported progress (a micro-batch, "
                                    "or idle)", value=self.last_s)


class StreamCollector:
    """The collector of one stream: the newest aggregates and the progress so far, turned
    into metric families when scraped."""

    def __init__(self, config: PipelineConfig) -> None:
        self.lock = threading.Lock()
        self.reset(config)

    def reset(self, config: PipelineConfig) -> None:
        with self.lock:
            self.topics = list(config.topics)
            self.budgets = Budgets(config.stream.metrics_top)
            self.agg: Aggregates | None = None
            self.progress = Progress()

    def publish(self, agg: Aggregates) -> None:
        """The merged aggregates after a micro-batch (never changed afterwards: the next
        batch reads its own copy from the file)."""
        with self.lock:
            self.agg = agg

    def on_progress(self, record: ProgressRecord) -> None:
        with self.lock:
            self.progress.add(record)

    def on_idle(self) -> None:
        with self.lock:
            self.progress.last_s = time.time()

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            families = list(self.progress.families())
            if self.agg is not None:
                families += aggregate_families(self.agg, self.topics, self.budgets)
        yield from families


@dataclass
class Exporter:
    collector: StreamCollector
    server: WSGIServer
    bind: str

    @property
    def port(self) -> int:
        return self.server.server_address[1]


_EXPORTERS: dict[str, Exporter] = {}  # one HTTP server per bind, for the process


def exporter_for(config: PipelineConfig) -> Exporter | None:
    """The exporter serving `stream.metrics_bind` (None when off, or when the port cannot be
    taken: reported, and the stream runs without metrics, since a busy port must never stop
    the analysis). A stream started later in the same process on the same bind takes the
    exporter over with its own figures."""
    from prometheus_client import start_http_server

    from configuration import parse_host_port

    bind = config.stream.metrics_bind
    if not bind:
        return None
    if bind in _EXPORTERS:
        _EXPORTERS[bind].collector.reset(config)
        return _EXPORTERS[bind]
    where = parse_host_port(bind, "pipeline.stream.metrics_bind")
    collector = StreamCollector(config)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, _ = start_http_server(where.port, where.host, registry)
    except OSError as exc:
        log.warning("pipeline.stream.metrics_bind %s: %s; the stream runs without metrics",
                    bind, exc)
        return None
    exporter = Exporter(collector, server, bind)
    _EXPORTERS[bind] = exporter
    log.info("stream metrics on http://%s/metrics", bind)
    return exporter
