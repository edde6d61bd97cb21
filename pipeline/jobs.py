"""The batch and streaming jobs: Kafka → hops (Parquet) → the analysis tables, the JSON
summary and the HTML report, all under one output folder:

    <output>/hops/  links/  branches/  flows/  edges/  pathways/  audit/
             transit/  lag/  (with fetch observations)        Parquet tables
    <output>/summary.json                              what the report is drawn from
    <output>/report.html                               self-contained (inline SVG)

The stream (`pipeline.stream`) holds each flow's hops in Spark's state store until the
event-time watermark says the flow is finished, then runs these same analysis functions over
the finished flows of each micro-batch and merges the aggregates: a micro-batch costs time
proportional to its own records, not to all hops so far.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config import PipelineConfig
from pipeline.flows import analyze
from pipeline.hops import to_hops
from pipeline.kafka_source import read_batch
from pipeline.report import write_report
from pipeline.stream import query as stream_query
from pipeline.summary import summarize
from pipeline.summary_shape import Summary
from protocol.contracts import fetch_log

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

TABLES = ("links", "branches", "flows", "edges", "pathways", "audit", "transit", "lag")


def read_fetches(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    """The `fetch_log` observations (compact JSON records, `protocol.contracts.fetch_log`), one
    row per fetched record; `consumer_host` is null in observations written before `s`."""
    from pyspark.sql import functions as F

    raw = (spark.read.format("kafka").options(**config.source_options([config.fetch_topic]))
           .option("endingOffsets", "latest").load())
    value = F.from_json(F.col("value").cast("string"), fetch_log.SPARK_SCHEMA)
    obs = raw.select(value.alias("x")).select("x.*")
    return obs.where(F.col(fetch_log.TOPIC).isNotNull()).select(
        F.col(fetch_log.TOPIC).alias("topic"), F.col(fetch_log.PARTITION).alias("partition"),
        F.col(fetch_log.OFFSET).alias("offset"), F.col(fetch_log.CONSUMER).alias("consumer"),
        F.col(fetch_log.CONSUMER_HOST).alias("consumer_host"),
        F.col(fetch_log.GROUP).alias("group"), F.col(fetch_log.FETCHED_MS).alias("fetched_ms"))


def write_outputs(spark: SparkSession, hops_path: str, config: PipelineConfig,
                  extra: Mapping[str, object] | None = None, streaming: bool = False
                  ) -> Summary:
    """Analyse the hops stored at `hops_path`; write the tables, summary and report.

    `streaming`: flows later than the event-time watermark are open, not stopped.
    """
    from pyspark.sql import functions as F

    out = Path(config.output)
    hops = spark.read.parquet(hops_path)
    watermark_ms = None
    if streaming:
        newest = hops.agg(F.max("event_ms")).first()
        assert newest is not None  # an aggregate without groups has its one row, hops or not
        latest = newest[0]
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
            summary = summarize(tables, config, watermark_ms, extra)
        finally:
            branches.unpersist()
            tables.unpersist()
    finally:
        if fetches is not None:
            fetches.unpersist()
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    write_report(summary, out / "report.html")
    return summary


def run_batch(spark: SparkSession, config: PipelineConfig) -> Summary:
    """Read the configured offset range once and write every output; return the summary."""
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    hops_path = str(out / "hops")
    to_hops(read_batch(spark, config), config).write.mode("overwrite").parquet(hops_path)
    return write_outputs(spark, hops_path, config, {"mode": "batch"})


def start_stream(spark: SparkSession, config: PipelineConfig) -> StreamingQuery:
    """Start the streaming job (`pipeline.stream`); the caller waits on (or stops) it."""
    return stream_query.start_stream(spark, config)
