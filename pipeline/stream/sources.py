"""The Kafka sources as the stateful operator's rows, and the held stream over them: records
become hops (keyed by trace, and with a twin per partition clock), fetch observations become
rows keyed by trace and by the fetched record's partition; one union, one watermark, then the
operator (`pipeline.stream.hold`). See `pipeline.stream`, steps 1 and 3."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.config import PipelineConfig
from pipeline.flow_hold import HOP
from pipeline.hops import HOP_COLUMNS, to_hops
from pipeline.stream.hold import hold_flows
from pipeline.stream.rows import (
    CLOCK,
    EMITTED_SCHEMA,
    FETCH,
    JSON_COLUMNS,
    PARTITION_KEY,
    STATE_SCHEMA,
)
from protocol.contracts import fetch_log

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

TRACE_ID_RE = "^[0-9a-f]{32}$"


def _partition_key(topic: str = "topic", partition: str = "partition") -> Column:
    """`\\0topic\\0partition`: a partition clock's key."""
    from pyspark.sql import functions as F

    return F.concat(F.lit(PARTITION_KEY), F.col(topic), F.lit(PARTITION_KEY),
                    F.col(partition).cast("string"))


def hop_rows(hops: DataFrame, clocks: bool) -> DataFrame:
    """The operator's rows of the hops: each keyed by its trace id (null: untraced), and with
    `clocks` a twin keyed by its partition that carries only its place and time."""
    from pyspark.sql import functions as F

    rows = hops.select(F.col("trace_id").alias("key"), *HOP_COLUMNS, F.lit(HOP).alias("kind"),
                       F.lit(None).cast("string").alias("consumer"),
                       F.lit(None).cast("string").alias("consumer_host"),
                       F.lit(None).cast("string").alias("group"),
                       F.lit(None).cast("long").alias("record_ms"))
    if not clocks:
        return rows
    twin = F.col("_clock")
    kept = {"topic", "partition", "offset", "event_ms", "event_time"}
    return rows.withColumn("_clock", F.explode(F.array(F.lit(False), F.lit(True)))).select(
        F.when(twin, _partition_key()).otherwise(F.col("key")).alias("key"),
        *[F.col(c) if c in kept else F.when(~twin, F.col(c)).alias(c) for c in HOP_COLUMNS],
        F.when(twin, F.lit(CLOCK)).otherwise(F.lit(HOP)).alias("kind"),
        "consumer", "consumer_host", "group", "record_ms")


def fetch_rows(raw: DataFrame, config: PipelineConfig, like: DataFrame) -> DataFrame:
    """The operator's rows of the `fetch_log` observations (Kafka source rows of the fetch
    topic): one keyed by the trace id, held with the flow as evidence for inferred parents;
    one keyed by the fetched record's partition, for its clock (topics read only). Their
    event time is the fetch time. `like`: the hop rows, whose column types they take.
    Under `time_source: broker` the record time `h` is not the hops' clock: it is left out,
    and the partition's clock takes each fetched record's time from the record itself."""
    from pyspark.sql import functions as F

    value = F.from_json(F.col("value").cast("string"), fetch_log.SPARK_SCHEMA)
    obs = raw.select(value.alias("x")).select("x.*").where(
        F.col(fetch_log.TOPIC).isNotNull() & F.col(fetch_log.PARTITION).isNotNull()
        & F.col(fetch_log.OFFSET).isNotNull() & F.col(fetch_log.FETCHED_MS).isNotNull())
    trace = F.col(fetch_log.TRACE_ID)
    record_ms = (F.col(fetch_log.RECORD_MS) if config.time_source == "herald"
                 else F.lit(None).cast("long"))
    per = F.col("_per_partition")
    given = {
        "key": F.when(per & F.col(fetch_log.TOPIC).isin(config.topics),
                      _partition_key(fetch_log.TOPIC, fetch_log.PARTITION))
        .when(~per & trace.rlike(TRACE_ID_RE), trace),
        "trace_id": F.when(~per, trace), "topic": F.col(fetch_log.TOPIC),
        "partition": F.col(fetch_log.PARTITION), "offset": F.col(fetch_log.OFFSET),
        "event_ms": F.col(fetch_log.FETCHED_MS),
        "event_time": F.timestamp_millis(F.col(fetch_log.FETCHED_MS)),
        "kind": F.lit(FETCH), "consumer": F.col(fetch_log.CONSUMER),
        "consumer_host": F.col(fetch_log.CONSUMER_HOST),
        "group": F.col(fetch_log.GROUP), "record_ms": record_ms}
    types = {f.name: f.dataType for f in like.schema.fields}
    both = obs.withColumn("_per_partition", F.explode(F.array(F.lit(False), F.lit(True))))
    rows = both.select(*[given.get(c, F.lit(None)).cast(types[c]).alias(c)
                         for c in like.columns])
    return rows.where(F.col("key").isNotNull())


def read_fetch_stream(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    """The fetch topic as a second Kafka source, with the records' options."""
    reader = (spark.readStream.format("kafka")
              .options(**config.source_options([config.fetch_topic])))
    if config.stream.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(config.stream.max_offsets_per_trigger))
    return reader.load()


def held_stream(spark: SparkSession, config: PipelineConfig, records: DataFrame) -> DataFrame:
    """Kafka rows → hops (and, with `fetch_topic`, observations and partition clocks) → the
    stateful operator; emits hops of finalised flows (and late and untraced ones) with their
    `status`, the finalised flows' observations, and each partition's released reads."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    hops = to_hops(records, config)
    for name in JSON_COLUMNS:  # arrays cross into pandas as JSON text
        hops = hops.withColumn(name, F.to_json(name))
    measured = bool(config.fetch_topic) and config.time_source == "herald"
    rows = hop_rows(hops, clocks=measured)
    if config.fetch_topic:  # one union, then one watermark over both sources
        rows = rows.unionByName(fetch_rows(read_fetch_stream(spark, config), config, rows))
    # Traces go to one of `state_buckets` keys (`pipeline.flow_hold` says why); partition
    # clocks keep their own keys, untraced hops the null one.
    key = F.col("key")
    bucket = F.pmod(F.xxhash64(key), F.lit(config.stream.state_buckets)).cast("string")
    rows = rows.withColumn("key", F.when(key.isNull() | key.startswith(PARTITION_KEY), key)
                           .otherwise(bucket))
    delay = f"{int(config.stream.watermark_s * 1000)} milliseconds"
    return (rows.withWatermark("event_time", delay)
            .groupBy("key")
            .applyInPandasWithState(hold_flows(config), EMITTED_SCHEMA, STATE_SCHEMA,
                                    "append", GroupStateTimeout.EventTimeTimeout))

