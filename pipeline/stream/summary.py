"""The stream's `summary.json`: the batch job's summary (same keys, `pipeline.summary`) drawn
from the merged aggregates and their tables, plus what only the stream has: the micro-batch
it was drawn after and the hold's side (`stream`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pipeline.config import PipelineConfig
from pipeline.stream.aggregates import Aggregates, StreamCounts
from pipeline.stream.tables import AggregateRows, stats
from pipeline.summary import SummaryFigures, summary_from
from pipeline.summary_shape import (
    AuditTableRow,
    BrokenBranch,
    EdgeRow,
    Lag,
    OverTime,
    PartitionCounts,
    Pathway,
    StreamSection,
    StreamSummary,
    Transit,
)

if TYPE_CHECKING:
    from pipeline.stream.progress_record import ProgressRecord


def figures_of(agg: Aggregates, rows: AggregateRows) -> SummaryFigures:
    """The summary's figures from the merged aggregates and the tables drawn from them."""
    partitions: list[PartitionCounts] = [
        {"topic": o.topic, "partition": o.partition, "first": o.first, "last": o.last,
         "records": o.records, "untraced": o.untraced, "bytes": o.bytes}
        for o in agg.offsets.values()]
    over_time: list[OverTime] = [{"from_topic": a, "to_topic": b, "bucket_ms": t, **stats(sk)}
                                 for (a, b, t), sk in agg.over_time.items()]
    # The merged tables' rows and the broken branches are untyped dicts of the batch job's
    # columns (`pipeline.stream.tables`, collected JSON), which the casts name.
    broken = [{k: v for k, v in b.items() if k != "leaf"} for b in agg.broken_branches]
    return SummaryFigures(
        partitions=partitions, flows=agg.flows, branches=agg.branches, evidence=agg.links,
        unresolved=agg.links.get("unresolved", 0), incomplete=agg.incomplete or {},
        edges=cast(list[EdgeRow], rows.edges),
        histograms={key: e.histogram for key, e in agg.edges.items()},
        pathways=cast(list[Pathway], rows.pathways), over_time=over_time,
        broken_branches=cast(list[BrokenBranch], broken),
        transit=cast(list[Transit], rows.transit), lag=cast(list[Lag], rows.lag),
        audit=cast(list[AuditTableRow], rows.audit))


def stream_section(st: StreamCounts, config: PipelineConfig,
                   progress: ProgressRecord | None) -> StreamSection:
    """The summary's `stream`: the hold's counts (not per bucket, which only the aggregates
    keep), what the state holds, and Spark's figures of the state store."""
    held = st.held()
    section: StreamSection = {
        "finalized_flows": st.finalized_flows, "evicted_flows": st.evicted_flows,
        "evicted_hops": st.evicted_hops, "late_hops": st.late_hops, "untraced": st.untraced,
        "watermark_ms": st.watermark_ms, "held_hops": held.held_hops,
        "held_flows": held.held_flows, "tombstones": held.tombstones,
        "accuracy": config.stream.accuracy,
        "state": None if progress is None else progress.get("state")}
    # Left out, as the aggregates' file leaves them out, while they were never counted.
    if st.late_fetches is not None:
        section["late_fetches"] = st.late_fetches
    if st.no_record_time is not None:
        section["no_record_time"] = st.no_record_time
    return section


def summary_of(agg: Aggregates, rows: AggregateRows, config: PipelineConfig,
               progress: ProgressRecord | None) -> StreamSummary:
    """The summary from the merged aggregates; `progress`, Spark's newest (`progress.jsonl`),
    gives the state store's figures."""
    shared = summary_from(figures_of(agg, rows), config, "stream", agg.stream.watermark_ms)
    return {**shared, "last_batch_id": agg.batch_id,
            "stream": stream_section(agg.stream, config, progress)}
