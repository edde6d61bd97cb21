"""The batch and streaming jobs: Kafka → hops (Parquet) → the analysis tables, the JSON
summary and the HTML report, all under one output folder:

    <output>/hops/  links/  branches/  flows/  edges/  pathways/  audit/
             transit/  lag/  (with fetch observations)        Parquet tables
    <output>/summary.json                              what the report is drawn from
    <output>/report.html                               self-contained (inline SVG)

The stream appends hops per micro-batch, each batch into its own folder written with
overwrite, so a batch that Spark replays after a crash replaces itself instead of adding its
records twice (the checkpoint holds the offsets of every batch, so none is read twice or
skipped); after each batch the tables are recomputed from all hops with the same functions the
batch job uses, the event-time watermark deciding which unfinished branches are still open.
Nothing is dropped for being late: a late hop joins its flow in the next recomputation.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import PipelineConfig
from pipeline.flows import analyze
from pipeline.hops import to_hops
from pipeline.report import write_report
from pipeline.summary import summarize
from protocol.contracts import fetch_log

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

TABLES = ("links", "branches", "flows", "edges", "pathways", "audit", "transit", "lag")


def read_batch(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    return (spark.read.format("kafka").options(**config.source_options())
            .option("endingOffsets", config.ending_offsets).load())


def read_stream(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    return spark.readStream.format("kafka").options(**config.source_options()).load()


def read_fetches(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    """The `fetch_log` observations (compact JSON records, `protocol.contracts.fetch_log`), one
    row per fetched record."""
    from pyspark.sql import functions as F

    raw = (spark.read.format("kafka").options(**config.source_options([config.fetch_topic]))
           .option("endingOffsets", "latest").load())
    value = F.from_json(F.col("value").cast("string"), fetch_log.SPARK_SCHEMA)
    obs = raw.select(value.alias("x")).select("x.*")
    return obs.where(F.col(fetch_log.TOPIC).isNotNull()).select(
        F.col(fetch_log.TOPIC).alias("topic"), F.col(fetch_log.PARTITION).alias("partition"),
        F.col(fetch_log.OFFSET).alias("offset"), F.col(fetch_log.CONSUMER).alias("consumer"),
        F.col(fetch_log.GROUP).alias("group"), F.col(fetch_log.FETCHED_MS).alias("fetched_ms"))


def write_outputs(spark: SparkSession, hops_path: str, config: PipelineConfig,
                  extra: dict[str, Any] | None = None, streaming: bool = False
                  ) -> dict[str, Any]:
    """Analyse the hops stored at `hops_path`; write the tables, summary and report.

    `streaming`: flows later than the event-time watermark are open, not stopped.
    """
    from pyspark.sql import functions as F

    out = Path(config.output)
    hops = spark.read.parquet(hops_path)
    watermark_ms = None
    if streaming:
        latest = hops.agg(F.max("event_ms")).first()[0]
        watermark_ms = None if latest is None else latest - int(config.stream.watermark_s * 1000)
    # The observations are read once: inference, transit and lag all use them.
    fetches = read_fetches(spark, config).cache() if config.fetch_topic else None
    try:
        tables = analyze(hops, config, watermark_ms, fetches)
        branches = tables.branches = tables.branches.cache()
        try:
            for name in TABLES:
                table = getattr(tables, name)
                if table is not None:
                    table.write.mode("overwrite").parquet(str(out / name))
            summary = summarize(tables, config)
        finally:
            branches.unpersist()
            tables.unpersist()
    finally:
        if fetches is not None:
            fetches.unpersist()
    summary.update(extra or {})
    summary["watermark_ms"] = watermark_ms
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    write_report(summary, out / "report.html")
    return summary


def run_batch(spark: SparkSession, config: PipelineConfig) -> dict[str, Any]:
    """Read the configured offset range once and write every output; return the summary."""
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    hops_path = str(out / "hops")
    to_hops(read_batch(spark, config), config).write.mode("overwrite").parquet(hops_path)
    return write_outputs(spark, hops_path, config, {"mode": "batch"})


def start_stream(spark: SparkSession, config: PipelineConfig) -> StreamingQuery:
    """Start the streaming job; the caller waits on (or stops) the returned query."""
    if not config.stream.checkpoint:
        raise ValueError("pipeline.stream.checkpoint: required for the stream")
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    hops_root = out / "hops"

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        folder = hops_root / f"batch_id={batch_id}"
        batch.write.mode("overwrite").parquet(str(folder))
        write_outputs(spark, str(hops_root), config,
                      {"mode": "stream", "last_batch_id": batch_id}, streaming=True)

    hops = to_hops(read_stream(spark, config), config)
    writer = (hops.writeStream.foreachBatch(each_batch)
              .option("checkpointLocation", config.stream.checkpoint))
    if config.stream.trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.stream.interval_s} seconds")
    return writer.start()


def reset_output(config: PipelineConfig) -> None:
    """Remove the output folder (and the stream's checkpoint): a fresh start."""
    shutil.rmtree(config.output, ignore_errors=True)
    if config.stream.checkpoint:
        shutil.rmtree(config.stream.checkpoint, ignore_errors=True)
