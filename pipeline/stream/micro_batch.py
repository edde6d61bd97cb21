"""The `foreachBatch` function (`pipeline.stream`, steps 4 to 6): the finalised flows analysed
by the batch job's code and written per micro-batch (`<table>/batch_id=N/`, overwritten if
Spark replays the batch), their figures merged into the aggregates, and what is drawn from
those (tables, summary, report, metrics) redrawn."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config import PipelineConfig
from pipeline.flow_hold import EVICTED, FINAL, HOP, LATE
from pipeline.flows import analyze
from pipeline.hops import HOP_COLUMNS
from pipeline.report import write_report
from pipeline.stream.aggregates import Aggregates
from pipeline.stream.figures import (
    StatusCount,
    batch_figures,
    read_figures,
    state_sizes,
    status_counts,
)
from pipeline.stream.merge import merge_batch, merge_reads
from pipeline.stream.progress import last_progress
from pipeline.stream.rows import DUPLICATE, FETCH, JSON_COLUMNS, STATE, TRANSIT
from pipeline.stream.store import latest_aggregates, save_aggregates
from pipeline.stream.summary import summary_of
from pipeline.stream.tables import aggregate_tables, write_aggregate_tables
from pipeline.stream_metrics import StreamCollector

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _write_hops(spark: SparkSession, emitted: DataFrame, out: Path, part: str,
                statuses: list[StatusCount]) -> DataFrame:
    """The finalised (and untraced) hops under `hops/`, late ones apart under `late/`; the
    hops as written, read back."""
    from pyspark.sql import functions as F

    is_hop = F.col("kind") == HOP
    hops = emitted.where(is_hop & (F.col("status") != LATE)).select(*HOP_COLUMNS)
    hops.write.mode("overwrite").parquet(str(out / "hops" / part))
    if any(r.kind == HOP and r.status == LATE for r in statuses):
        # a replay brings the same rows
        emitted.where(is_hop & (F.col("status") == LATE)).select(*HOP_COLUMNS).write.mode(
            "overwrite").parquet(str(out / "late" / part))
    return spark.read.parquet(str(out / "hops" / part))


def _log_batch(out: Path, agg: Aggregates, statuses: list[StatusCount]) -> None:
    """One line of `batches.jsonl`: the hold's side of the micro-batch."""
    with (out / "batches.jsonl").open("a") as f:
        f.write(json.dumps({"batch_id": agg.batch_id, **agg.stream.held()._asdict(),
                            "emitted": {f"{r.kind}:{r.status}": r.rows for r in statuses
                                        if r.status != STATE}}) + "\n")


def each_batch(spark: SparkSession, config: PipelineConfig,
               metrics: StreamCollector | None = None) -> Callable[[DataFrame, int], None]:
    """The `foreachBatch` function; the merged aggregates go to `metrics`
    (`pipeline.stream_metrics`) too."""
    from pyspark.sql import functions as F

    out = Path(config.output)
    agg_dir = out / "aggregates"
    agg_dir.mkdir(parents=True, exist_ok=True)

    def run(emitted: DataFrame, batch_id: int) -> None:
        for name, schema in JSON_COLUMNS.items():
            emitted = emitted.withColumn(name, F.from_json(name, schema))
        emitted = emitted.withColumn("event_time", F.timestamp_millis("event_ms")
                                     ).localCheckpoint()
        part = f"batch_id={batch_id}"
        statuses = status_counts(emitted)
        sizes = state_sizes(emitted)
        hops = _write_hops(spark, emitted, out, part, statuses)
        fetches = None
        if config.fetch_topic:  # the finalised flows' observations: evidence, as in batch
            fetches = emitted.where((F.col("kind") == FETCH)
                                    & F.col("status").isin(FINAL, EVICTED)).select(
                "topic", "partition", "offset", "consumer", "consumer_host", "group",
                F.col("event_ms").alias("fetched_ms"))
        tables = analyze(hops, config, fetches=fetches, transit=False)
        tables.branches = tables.branches.cache()
        try:
            for name in ("links", "branches", "flows"):
                getattr(tables, name).write.mode("overwrite").parquet(str(out / name / part))
            agg = latest_aggregates(agg_dir, batch_id)
            merge_batch(agg, batch_figures(tables, statuses, sizes, config), config)
            if any(r.status in (TRANSIT, DUPLICATE) for r in statuses):
                merge_reads(agg, read_figures(emitted, config), config)
        finally:
            tables.branches.unpersist()
            tables.unpersist()
        agg.batch_id = batch_id
        save_aggregates(agg_dir, agg)
        _log_batch(out, agg, statuses)
        rows = aggregate_tables(agg)
        write_aggregate_tables(spark, out, rows, bool(config.fetch_topic))
        summary = summary_of(agg, rows, config, last_progress(out))
        (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
        write_report(summary, out / "report.html")
        if metrics is not None:
            metrics.publish(agg)

    return run
