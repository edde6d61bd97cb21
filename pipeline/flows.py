"""Hops → flows, edges, pathways and audit summaries: the analysis, the same for batch and
streaming (the stream feeds the hops it has collected so far through these functions).

Definitions (docs/pipeline.md):
* a *flow* is every traced hop with one trace id, ordered by event time (Herald's receive
  time by default), then topic, partition, offset;
* an *edge* is two consecutive hops of a flow, topic A → topic B; its latency is the second
  hop's event time minus the first's (the hop's *wait*);
* a *pathway* is a flow's whole sequence of topics; its latency is the flow's duration;
* a flow is *broken* when it stops before a terminal topic (`stopped`) or one of its hops
  waited longer than `max_wait_ms` (`slow`). With no terminal topics configured, no flow is
  `stopped`;
* in a stream, a flow that has not reached a terminal topic but whose last hop is later than
  the event-time *watermark* (the latest hop time seen minus `stream.watermark_s`) is `open`,
  not stopped: it may still move on. A batch has no watermark: every flow is settled.

Percentiles are exact (Spark's `percentile`, linear interpolation between ranks), so results
can be checked to the millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.config import PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

PERCENTILES = (0.5, 0.9, 0.99)
# Upper bounds (ms) of the latency histogram's buckets; the last bucket is open-ended.
HISTOGRAM_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000,
                       60000)


@dataclass
class Tables:
    hops: DataFrame
    steps: DataFrame      # traced hops with their step number, previous topic and wait
    flows: DataFrame
    edges: DataFrame
    pathways: DataFrame
    audit: DataFrame
    transit: DataFrame | None = None  # with fetch observations only


def transit_of(hops: DataFrame, fetches: DataFrame) -> DataFrame:
    """Produce-to-consume latency per topic and consumer group: each record's first fetch by
    each group, minus the record's hop time (Herald's receive time).

    A group reads a record once, whichever member fetched it (a record fetched again after a
    rebalance counts once, at its first fetch). Consumers without a group (`assign()`) each
    read on their own: their first fetch per consumer counts, and they share the row whose
    `group` is null. `consumers` lists the client ids that fetched for the row.
    """
    from pyspark.sql import functions as F

    reader = F.when(F.col("group").isNull(), F.col("consumer"))  # a group-less reader
    first = fetches.groupBy("topic", "partition", "offset", "group", reader.alias("solo")).agg(
        F.min("fetched_ms").alias("fetched_ms"), F.collect_set("consumer").alias("consumers"))
    joined = first.join(hops.select("topic", "partition", "offset", "event_ms"),
                        ["topic", "partition", "offset"])
    return (joined.withColumn("transit_ms", F.col("fetched_ms") - F.col("event_ms"))
            .groupBy("topic", "group")
            .agg(*_latency_stats("transit_ms"),
                 F.array_sort(F.array_distinct(F.flatten(F.collect_list("consumers"))))
                 .alias("consumers")))


def _latency_stats(col: str) -> list[Column]:
    from pyspark.sql import functions as F

    pct = F.percentile(F.col(col), F.array(*[F.lit(p) for p in PERCENTILES]))
    return [
        F.count(F.lit(1)).alias("count"),
        pct.getItem(0).alias("p50_ms"),
        pct.getItem(1).alias("p90_ms"),
        pct.getItem(2).alias("p99_ms"),
        F.max(col).cast("long").alias("max_ms"),
    ]


def steps_of(hops: DataFrame) -> DataFrame:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy("trace_id").orderBy("event_ms", "topic", "partition", "offset")
    return (
        hops.where(F.col("trace_id").isNotNull())
        .withColumn("step", F.row_number().over(order))
        .withColumn("prev_topic", F.lag("topic").over(order))
        .withColumn("wait_ms", F.col("event_ms") - F.lag("event_ms").over(order))
    )


def flows_of(steps: DataFrame, config: PipelineConfig, watermark_ms: int | None = None
             ) -> DataFrame:
    from pyspark.sql import functions as F

    hop = F.struct("event_ms", "topic", "partition", "offset", "wait_ms", "client_id")
    flows = steps.groupBy("trace_id").agg(
        F.sort_array(F.collect_list(F.struct(F.col("step"), hop.alias("hop")))).alias("s"),
        F.min("event_ms").alias("start_ms"),
        F.max("event_ms").alias("end_ms"),
        F.count(F.lit(1)).alias("hop_count"),
        F.max("wait_ms").alias("max_wait_ms"),
    )
    flows = (
        flows.withColumn("hops", F.expr("transform(s, x -> x.hop)")).drop("s")
        .withColumn("path", F.expr("array_join(transform(hops, h -> h.topic), ' > ')"))
        .withColumn("first_topic", F.expr("hops[0].topic"))
        .withColumn("last_topic", F.expr("element_at(hops, -1).topic"))
        .withColumn("duration_ms", F.col("end_ms") - F.col("start_ms"))
    )
    terminal = list(config.terminal_topics)
    unfinished = (~F.col("last_topic").isin(terminal)) if terminal else F.lit(False)
    is_open = unfinished & (F.lit(False) if watermark_ms is None
                            else F.col("end_ms") > F.lit(watermark_ms))
    slow = F.coalesce(F.col("max_wait_ms") > config.max_wait_ms, F.lit(False))
    return (
        flows.withColumn("open", is_open).withColumn("stopped", unfinished & ~is_open)
        .withColumn("slow", slow)
        .withColumn("broken", F.col("stopped") | F.col("slow"))
    )


def edges_of(steps: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return (
        steps.where(F.col("prev_topic").isNotNull())
        .groupBy(F.col("prev_topic").alias("from_topic"), F.col("topic").alias("to_topic"))
        .agg(*_latency_stats("wait_ms"))
    )


def pathways_of(flows: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return flows.groupBy("path").agg(
        *_latency_stats("duration_ms"),
        F.sum(F.col("broken").cast("long")).alias("broken"),
    )


def audit_of(hops: DataFrame) -> DataFrame:
    """Records and bytes per hour, client id, principal and origin cluster (all records,
    traced or not; a record that did not pass through Herald has null audit columns)."""
    from pyspark.sql import functions as F

    return hops.groupBy(
        F.date_trunc("hour", F.col("event_time")).alias("hour"),
        "client_id", "principal", "origin",
    ).agg(
        F.count(F.lit(1)).alias("records"),
        F.sum("size").alias("bytes"),
        F.sum(F.col("trace_id").isNull().cast("long")).alias("untraced"),
    )


def analyze(hops: DataFrame, config: PipelineConfig, watermark_ms: int | None = None
            ) -> Tables:
    steps = steps_of(hops)
    flows = flows_of(steps, config, watermark_ms)
    return Tables(hops=hops, steps=steps, flows=flows, edges=edges_of(steps),
                  pathways=pathways_of(flows), audit=audit_of(hops))


def edge_histograms(steps: DataFrame) -> DataFrame:
    """Per edge, how many waits fell in each bucket of `HISTOGRAM_BOUNDS_MS`."""
    from pyspark.sql import functions as F

    bucket = F.lit(len(HISTOGRAM_BOUNDS_MS))
    for i in reversed(range(len(HISTOGRAM_BOUNDS_MS))):
        bucket = F.when(F.col("wait_ms") <= HISTOGRAM_BOUNDS_MS[i], F.lit(i)).otherwise(bucket)
    return (
        steps.where(F.col("prev_topic").isNotNull())
        .groupBy(F.col("prev_topic").alias("from_topic"), F.col("topic").alias("to_topic"),
                 bucket.alias("bucket"))
        .agg(F.count(F.lit(1)).alias("count"))
    )


def edge_percentiles_over_time(steps: DataFrame, bucket_s: int) -> DataFrame:
    """Per edge and time bucket (of the later hop's event time): count and percentiles."""
    from pyspark.sql import functions as F

    bucket_ms = bucket_s * 1000
    return (
        steps.where(F.col("prev_topic").isNotNull())
        .groupBy(F.col("prev_topic").alias("from_topic"), F.col("topic").alias("to_topic"),
                 (F.floor(F.col("event_ms") / bucket_ms) * bucket_ms).alias("bucket_ms"))
        .agg(*_latency_stats("wait_ms"))
    )
