"""Records → hops: one row per Kafka record, its trace context and audit headers as columns.

Everything is a Spark SQL expression (no Python UDF), so the work stays in the JVM and the
same function serves a batch DataFrame and a streaming one.

Trace context rules follow `interceptors.tracing.valid_traceparent` (the check Herald applies
when it stamps): the *first* `traceparent` header is read, as OpenTelemetry does; it must be
lowercase hex fields at the version-00 positions, not version ff, with non-zero ids. A record
without a valid one keeps its row with a null `trace_id`: it is counted, never dropped.

`parents` are the records this one continues, from its `<prefix>parent` headers (see
`PARENT`): the evidence `pipeline.graph` builds the causal graph from. `parents_lost` and
`lost_reasons` are what its `<prefix>parents_lost` headers declare (see `PARENTS_LOST`): parents
Herald knew of but could not name, which make the hop *incomplete*. `source_host` is the host
of its `<prefix>source` (the producer's address): how an inferred parent is matched to the
consumer that fetched it (`pipeline.graph`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.config import PipelineConfig
from protocol.contracts.headers import (
    AUDIT_CLIENT_ID,
    AUDIT_MSG_ID,
    AUDIT_ORIGIN,
    AUDIT_PRINCIPAL,
    AUDIT_SOURCE,
    AUDIT_TIME,
    PARENT,
    PARENTS_LOST,
    TRACEPARENT,
    audit_header,
)
from protocol.contracts.headers import PARENT_VALUE_RE as PARENT_RE
from protocol.contracts.headers import PARENTS_LOST_VALUE_RE as LOST_RE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

TRACEPARENT_RE = r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$"

HOP_COLUMNS = [
    "trace_id", "parent_span", "topic", "partition", "offset", "timestamp_ms",
    "timestamp_type", "herald_time_ms", "client_id", "principal", "origin", "message_id",
    "size", "parents", "parents_lost", "lost_reasons", "source_host", "event_ms", "event_time",
]
HOST_RE = r"^(.*):[^:]*$"  # `host:port` (`[v6]:port`): the host, cut as `source_host` cuts it


def _header(name: str) -> Column:
    """The value of the first header called `name` (binary; null when absent)."""
    from pyspark.sql import functions as F

    escaped = name.replace("'", "\\'")
    return F.expr(f"try_element_at(filter(headers, h -> h.key = '{escaped}'), 1).value")


def _values(name: str) -> Column:
    """The values of every `name` header, as strings (empty when there is none)."""
    from pyspark.sql import functions as F

    escaped = name.replace("'", "\\'")
    return F.expr(f"transform(filter(coalesce(headers, array()), h -> h.key = '{escaped}'"
                  " and h.value is not null), h -> cast(h.value as string))")


def _parents(name: str) -> Column:
    """Every `name` header parsed as a record key (array of topic, partition, offset; empty
    when there is none). A value that does not parse names no record and is left out, so the
    hop falls back to inference rather than pointing at a record that cannot exist."""
    from pyspark.sql import functions as F

    values = _values(name)
    parsed = F.transform(values, lambda v: F.struct(
        F.regexp_extract(v, PARENT_RE, 1).alias("topic"),
        F.regexp_extract(v, PARENT_RE, 2).try_cast("int").alias("partition"),
        F.regexp_extract(v, PARENT_RE, 3).try_cast("long").alias("offset")))
    return F.array_distinct(F.filter(parsed, lambda k: (k["topic"] != "")
                                     & k["partition"].isNotNull() & k["offset"].isNotNull()))


def _lost(name: str) -> list[Column]:
    """`parents_lost` (the sum of the counts of every `name` header, 0 when there is none)
    and `lost_reasons` (their reasons with a count above zero, sorted, once each). A value
    that does not parse declares nothing and is left out, like a parent value that does not
    parse: it is counted nowhere as a loss."""
    from pyspark.sql import functions as F

    parsed = F.transform(_values(name), lambda v: F.struct(
        F.regexp_extract(v, LOST_RE, 1).alias("reason"),
        F.regexp_extract(v, LOST_RE, 2).try_cast("long").alias("count")))
    lost = F.filter(parsed, lambda x: (x["reason"] != "") & (x["count"] > 0))
    total = F.aggregate(lost, F.lit(0).cast("long"), lambda acc, x: acc + x["count"])
    reasons = F.array_sort(F.array_distinct(F.transform(lost, lambda x: x["reason"])))
    return [total.alias("parents_lost"), reasons.alias("lost_reasons")]


def _source_host(name: str) -> Column:
    """The host of the first `name` header (`host:port`): the value up to its last `:`, or
    all of it when it has none, as `interceptors.trace_links.source_host` cuts an address
    (null without the header, or when the host is empty, as `fetch_log` writes it)."""
    from pyspark.sql import functions as F

    source = _header(name).cast("string")
    host = F.when(source.contains(":"), F.regexp_extract(source, HOST_RE, 1)).otherwise(source)
    return F.when(host != "", host)


def to_hops(records: DataFrame, config: PipelineConfig) -> DataFrame:
    """Spark Kafka source rows (with `includeHeaders`) → hop rows (`HOP_COLUMNS`)."""
    from pyspark.sql import functions as F

    p = config.header_prefix
    tp = _header(TRACEPARENT).cast("string")
    version = F.regexp_extract(tp, TRACEPARENT_RE, 1)
    trace = F.regexp_extract(tp, TRACEPARENT_RE, 2)
    span = F.regexp_extract(tp, TRACEPARENT_RE, 3)
    rest = F.regexp_extract(tp, TRACEPARENT_RE, 5)
    valid = (
        tp.isNotNull() & (trace != "") & (version != "ff")
        & ~((version == "00") & (rest != ""))
        & (trace != "0" * 32) & (span != "0" * 16)
    )
    size = F.expr(
        "coalesce(length(key), 0) + coalesce(length(value), 0) + "
        "aggregate(coalesce(headers, array()), 0, "
        "(acc, h) -> acc + length(h.key) + coalesce(length(h.value), 0))"
    )
    herald_time = _header(audit_header(AUDIT_TIME, p)).cast("string").cast("long")
    broker_ms = F.unix_millis(F.col("timestamp"))
    event_ms = (F.coalesce(herald_time, broker_ms) if config.time_source == "herald"
                else broker_ms)
    hops = records.select(
        F.when(valid, trace).alias("trace_id"),
        F.when(valid, span).alias("parent_span"),
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        broker_ms.alias("timestamp_ms"),
        F.when(F.col("timestampType") == 1, "log_append").otherwise("create")
        .alias("timestamp_type"),
        herald_time.alias("herald_time_ms"),
        _header(audit_header(AUDIT_CLIENT_ID, p)).cast("string").alias("client_id"),
        _header(audit_header(AUDIT_PRINCIPAL, p)).cast("string").alias("principal"),
        _header(audit_header(AUDIT_ORIGIN, p)).cast("string").alias("origin"),
        _header(audit_header(AUDIT_MSG_ID, p)).cast("string").alias("message_id"),
        size.cast("long").alias("size"),
        _parents(p + PARENT).alias("parents"),
        *_lost(p + PARENTS_LOST),
        _source_host(p + AUDIT_SOURCE).alias("source_host"),
        event_ms.alias("event_ms"),
    )
    return hops.withColumn("event_time", F.timestamp_millis(F.col("event_ms")))
