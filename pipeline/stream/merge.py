"""One micro-batch's figures (`pipeline.stream.figures`) added to the merged aggregates, in
place (`pipeline.stream`, step 5). Every figure is a sum, a min/max or a sketch, so all merge
exactly; a bucket's size replaces the one it had. Plain Python: the aggregates are small."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.config import PipelineConfig
from pipeline.flow_hold import EVICTED, FINAL, HOP, LATE, UNTRACED
from pipeline.flows import HISTOGRAM_BOUNDS_MS
from pipeline.graph import INFERRED, LINKED
from pipeline.sketch import Sketch
from pipeline.stream.aggregates import (
    Aggregates,
    AuditCounts,
    Edge,
    Entry,
    PartitionOffsets,
    Pathway,
    StreamCounts,
    Transit,
)
from pipeline.stream.figures import BatchFigures, ReadFigures, SketchBucket, StatusCount
from pipeline.stream.rows import NO_RECORD_TIME, STATE


def add_counts(into: dict[str, Any], counts: Mapping[str, Any]) -> None:
    """Add `counts` (numbers, or dicts of them, nested) to `into`."""
    for k, v in counts.items():
        if isinstance(v, Mapping):
            add_counts(into.setdefault(k, {}), v)
        else:
            into[k] = into.get(k, 0) + int(v or 0)


def _add_status(st: StreamCounts, r: StatusCount) -> None:
    if r.status == STATE:
        pass
    elif r.kind != HOP:  # observations: only the ones no flow or clock took count
        if r.status == LATE:
            st.late_fetches = (st.late_fetches or 0) + r.rows
        elif r.status == NO_RECORD_TIME:
            st.no_record_time = (st.no_record_time or 0) + r.rows
    elif r.status == LATE:
        st.late_hops += r.rows
    elif r.status == EVICTED:
        st.evicted_hops += r.rows
        st.evicted_flows += r.traces
    elif r.status == FINAL:
        st.finalized_flows += r.traces
    elif r.status == UNTRACED:
        st.untraced += r.rows
    if r.watermark_ms is not None:
        st.watermark_ms = max(st.watermark_ms or 0, r.watermark_ms)


def _add_to_entry(entry: Entry, index: int, total_ms: int | None, values: SketchBucket,
               accuracy: float) -> None:
    """Add values to `entry`'s sketch, its fixed-bound histogram (bucket `index`) and their
    exact sum. An entry merged before it kept a sum (a sketch but no `sum_ms`) never gets one,
    and its histogram stays short of the sketch's count; the exporter leaves out what it
    cannot state exactly."""
    new = entry.sketch is None
    if entry.histogram is None:
        entry.histogram = [0] * (len(HISTOGRAM_BOUNDS_MS) + 1)
    entry.histogram[index] += values.n
    if new or entry.sum_ms is not None:
        entry.sum_ms = (entry.sum_ms or 0) + int(total_ms or 0)
    _add_values(entry, values, accuracy)


def _add_values(entry: Entry | Transit, values: SketchBucket, accuracy: float) -> None:
    if entry.sketch is None:
        entry.sketch = Sketch(accuracy)
    values.add_to(entry.sketch)


def _leaf_key(leaf: dict[str, Any]) -> tuple[str, int, int]:
    return (leaf["topic"], leaf["partition"], leaf["offset"])


def merge_batch(agg: Aggregates, figures: BatchFigures, config: PipelineConfig) -> None:
    """Add one micro-batch's finalised flows, emitted rows and bucket sizes to `agg`."""
    acc = config.stream.accuracy
    st = agg.stream
    for s in figures.sizes:
        if any(s.sizes):
            st.buckets[s.bucket] = s.sizes
        else:
            st.buckets.pop(s.bucket, None)
    for r in figures.statuses:
        _add_status(st, r)

    for p in figures.partitions:
        o = agg.offsets.setdefault((p.topic, p.partition), PartitionOffsets(
            p.topic, p.partition, p.first, p.last))
        o.first, o.last = min(o.first, p.first), max(o.last, p.last)
        o.records += int(p.records or 0)
        o.untraced += int(p.untraced or 0)
        o.bytes += int(p.bytes or 0)
    for a in figures.audit:
        counts = agg.audit.setdefault((a.hour_ms, a.client_id, a.principal, a.origin),
                                      AuditCounts())
        counts.records += int(a.records or 0)
        counts.bytes += int(a.bytes or 0)
        counts.untraced += int(a.untraced or 0)

    tallies = figures.tallies
    add_counts(agg.flows, tallies.flows)
    add_counts(agg.branches, tallies.branches)
    add_counts(agg.links, {**tallies.evidence, "unresolved": tallies.unresolved})
    if agg.incomplete is None:
        agg.incomplete = {}
    add_counts(agg.incomplete, tallies.incomplete)

    for w in figures.edges:
        e = agg.edges.setdefault((w.from_topic, w.to_topic), Edge())
        if w.link == LINKED:
            e.linked += w.waits.n
        elif w.link == INFERRED:
            e.inferred += w.waits.n
        else:
            raise ValueError(f"edge link {w.link!r}: expected {LINKED} or {INFERRED}")
        e.incomplete = (e.incomplete or 0) + w.incomplete
        _add_to_entry(e, w.histogram_index, w.total_ms, w.waits, acc)
        over_time = agg.over_time.setdefault((w.from_topic, w.to_topic, w.bucket_ms),
                                             Sketch(acc))
        w.waits.add_to(over_time)

    for d in figures.pathways:
        path = agg.pathways.setdefault(d.path, Pathway())
        path.broken += d.broken
        path.inferred += d.inferred
        path.incomplete = (path.incomplete or 0) + d.incomplete
        _add_to_entry(path, d.histogram_index, d.total_ms, d.durations, acc)

    both = agg.broken_branches + figures.broken
    both.sort(key=lambda b: (-b["start_ms"], b["trace_id"], b["path"], _leaf_key(b["leaf"])))
    agg.broken_branches = both[:config.top]


def merge_reads(agg: Aggregates, reads: ReadFigures, config: PipelineConfig) -> None:
    """Add one micro-batch's released reads to the merged transit and lag: per (topic, group)
    the consumers and a sketch of the first reads' transit; per (topic, group, bucket of the
    fetch time) a sketch of their lag. Counts and maxima are the sketches' exact ones."""
    acc = config.stream.accuracy
    for g in reads.groups:
        t = agg.transit.setdefault((g.topic, g.group), Transit())
        t.consumers = sorted(set(t.consumers) | set(g.consumers))
    for v in reads.transit:
        _add_values(agg.transit.setdefault((v.topic, v.group), Transit()), v.values, acc)
    for lag in reads.lag:
        lag.values.add_to(agg.lag.setdefault((lag.topic, lag.group, lag.bucket_ms),
                                             Sketch(acc)))

