"""Records → hops: one row per Kafka record, its trace context and audit headers as columns.

Everything is a Spark SQL expression (no Python UDF), so the work stays in the JVM and the
same function serves a batch DataFrame and a streaming one.

Trace context rules follow `interceptors.tracing.valid_traceparent` (the check Herald applies
when it stamps): the *first* `traceparent` header is read, as OpenTelemetry does; it must be
lowercase hex fields at the version-00 positions, not version ff, with non-zero ids. A record
without a valid one keeps its row with a null `trace_id`: it is counted, never dropped.

`parents` are the records this one continues, from its `<prefix>parent` headers (see
`PARENT`): the evidence `pipeline.graph` builds the causal graph from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.config import PipelineConfig
from protocol.contracts.headers import (
    AUDIT_CLIENT_ID,
    AUDIT_MSG_ID,
    AUDIT_ORIGIN,
    AUDIT_PRINCIPAL,
    AUDIT_TIME,
    PARENT,
    TRACEPARENT,
    audit_header,
)
from protocol.contracts.headers import PARENT_VALUE_RE as PARENT_RE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

TRACEPARENT_RE = r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$"

HOP_COLUMNS = [
    "trace_id", "parent_span", "topic", "partition", "offset", "timestamp_ms",
    "timestamp_type", "herald_time_ms", "client_id", "principal", "origin", "message_id",
    "size", "parents", "event_ms", "event_time",
]


def _header(name: str) -> Column:
    """The value of the first header called `name` (binary; null when absent)."""
    from pyspark.sql import functions as F

    escaped = name.replace("'", "\\'")
    return F.expr(f"try_element_at(filter(headers, h -> h.key = '{escaped}'), 1).value")


def _parents(name: str) -> Column:
    """Every `name` header parsed as a record key (array of topic, partition, offset; empty
    when there is none). A value that does not parse names no record and is left out, so the
    hop falls back to inference rather than pointing at a record that cannot exist."""
    from pyspark.sql import functions as F

    escaped = name.replace("'", "\\'")
    values = F.expr(f"transform(filter(coalesce(headers, array()), h -> h.key = '{escaped}'"
                    " and h.value is not null), h -> cast(h.value as string))")
    parsed = F.transform(values, lambda v: F.struct(
        F.regexp_extract(v, PARENT_RE, 1).alias("topic"),
        F.regexp_extract(v, PARENT_RE, 2).try_cast("int").alias("partition"),
        F.regexp_extract(v, PARENT_RE, 3).try_cast("long").alias("offset")))
    return F.array_distinct(F.filter(parsed, lambda k: (k["topic"] != "")
                                     & k["partition"].isNotNull() & k["offset"].isNotNull()))


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
        event_ms.alias("event_ms"),
    )
    return hops.withColumn("event_time", F.timestamp_millis(F.col("event_ms")))
