"""The `foreachBatch` function (`pipeline.stream`, steps 4 to 6): the finalised flows analysed
by the batch job's code and written per micro-batch (`<table>/batch_id=N/`, overwritten if
Spark replays the batch), their figures merged into the aggregates, and what is drawn from
those (tables, summary, report, metrics) redrawn."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
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
    emitted_frames,
    read_figures,
    table_frames,
)
from pipeline.stream.merge import merge_batch, merge_reads
from pipeline.stream.progress import last_progress
from pipeline.stream.rows import FETCH, JSON_COLUMNS, STATE
from pipeline.stream.steps import StepTimer
from pipeline.stream.store import latest_aggregates, save_aggregates
from pipeline.stream.summary import summary_of
from pipeline.stream.tables import aggregate_tables, write_aggregate_tables
from pipeline.stream_metrics import StreamCollector
from pipeline.summary import collect_all

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _hops(emitted: DataFrame, late: bool = False) -> DataFrame:
    """The emitted hops, in the hop table's columns: finalised, evicted and untraced ones,
    or (`late`) the late ones."""
    from pyspark.sql import functions as F

    status = F.col("status") == LATE
    return emitted.where((F.col("kind") == HOP) & (status if late else ~status)).select(
        *HOP_COLUMNS)


def _log_batch(out: Path, agg: Aggregates, statuses: list[StatusCount],
               timer: StepTimer) -> None:
    """One line of `batches.jsonl`: the hold's side of the micro-batch, the time of each
    step of it and the classes compiled for it (`pipeline.stream.steps`)."""
    with (out / "batches.jsonl").open("a") as f:
        f.write(json.dumps({"batch_id": agg.batch_id, **agg.stream.held()._asdict(),
                            "emitted": {f"{r.kind}:{r.status}": r.rows for r in statuses
                                        if r.status != STATE},
                            "steps_ms": timer.ms, "compiled": timer.compiled()}) + "\n")


def each_batch(spark: SparkSession, config: PipelineConfig,
               metrics: StreamCollector | None = None) -> Callable[[DataFrame, int], None]:
    """The `foreachBatch` function; the merged aggregates go to `metrics`
    (`pipeline.stream_metrics`) too."""
    from pyspark.sql import functions as F

    out = Path(config.output)
    agg_dir = out / "aggregates"
    agg_dir.mkdir(parents=True, exist_ok=True)

    def run(emitted: DataFrame, batch_id: int) -> None:
        timer = StepTimer(spark.sparkContext, batch_id)
        step = timer.step
        for name, schema in JSON_COLUMNS.items():
            emitted = emitted.withColumn(name, F.from_json(name, schema))
        with step("hold"):  # the Kafka sources, the shuffle by key and the stateful operator
            emitted = emitted.withColumn("event_time", F.timestamp_millis("event_ms")
                                         ).localCheckpoint()
        part = f"batch_id={batch_id}"
        hops = _hops(emitted)
        with step("hops written"):
            hops.write.mode("overwrite").parquet(str(out / "hops" / part))
        fetches = None
        if config.fetch_topic:  # the finalised flows' observations: evidence, as in batch
            fetches = emitted.where((F.col("kind") == FETCH)
                                    & F.col("status").isin(FINAL, EVICTED)).select(
                "topic", "partition", "offset", "consumer", "consumer_host", "group",
                F.col("event_ms").alias("fetched_ms"))
        with step("analysis"):
            tables = analyze(hops, config, fetches=fetches, transit=False)
        analysed = replace(tables)  # as `analyze` left them: `unpersist` frees their caches
        try:
            with step("analysis"):
                # Computed once each and cut from their plans: the writes and the figures
                # then plan over small tables, not over the whole analysis each time.
                for name in ("links", "branches", "flows", "unresolved"):
                    setattr(tables, name, getattr(tables, name).localCheckpoint())
            with step("tables written"):
                for name in ("links", "branches", "flows"):
                    getattr(tables, name).write.mode("overwrite").parquet(
                        str(out / name / part))
            with step("figures"):  # everything the merge takes, in one Spark action
                rows = collect_all({**emitted_frames(emitted, config),
                                    **table_frames(tables, config)})
        finally:
            analysed.unpersist()
        figures = batch_figures(rows)
        if any(r.kind == HOP and r.status == LATE for r in figures.statuses):
            with step("late written"):  # a replay brings the same rows
                _hops(emitted, late=True).write.mode("overwrite").parquet(
                    str(out / "late" / part))
        with step("merged"):
            agg = latest_aggregates(agg_dir, batch_id)
            merge_batch(agg, figures, config)
            merge_reads(agg, read_figures(rows), config)
            agg.batch_id = batch_id
            save_aggregates(agg_dir, agg)
        with step("merged tables"):
            tables_rows = aggregate_tables(agg)
            write_aggregate_tables(out, tables_rows, bool(config.fetch_topic))
        with step("summary"):
            summary = summary_of(agg, tables_rows, config, last_progress(out))
            (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
        with step("report"):
            write_report(summary, out / "report.html")
        if metrics is not None:
            metrics.publish(agg)
        _log_batch(out, agg, figures.statuses, timer)

    return run
