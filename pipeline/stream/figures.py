"""What one micro-batch brings to the merge, collected in Spark from its emitted rows and the
finalised flows' tables (`pipeline.flows.analyze`): small typed rows, one per group, so the
merge itself (`pipeline.stream.merge`) is plain Python over a few values per edge, path,
partition and consumer group, never over records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.config import PipelineConfig
from pipeline.flows import Tables, histogram_index
from pipeline.sketch import Sketch, bucket_column, sign_column
from pipeline.stream.aggregates import HeldSizes
from pipeline.stream.rows import DUPLICATE, STATE, TRANSIT
from pipeline.summary import BROKEN_COLUMNS, Tallies, tally_frames, tally_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@dataclass(frozen=True)
class StatusCount:
    """The emitted rows of one kind and status: how many, of how many traces, and the
    newest watermark they were emitted under."""

    kind: str
    status: str
    rows: int
    traces: int
    watermark_ms: int | None


@dataclass(frozen=True)
class BucketSize:
    """A trace bucket the hold ran for, with what it keeps after."""

    bucket: int
    sizes: HeldSizes


@dataclass(frozen=True)
class SketchBucket:
    """Values of one sketch bucket, counted in Spark (`bucket_column`): the sign, the bucket,
    how many, and their exact min and max."""

    sign: int
    bucket: int
    n: int
    lo: float
    hi: float

    def add_to(self, sketch: Sketch) -> None:
        sketch.add_bucket(self.sign, self.bucket, self.n, self.lo, self.hi)


@dataclass(frozen=True)
class PartitionRead:
    """The finalised hops of one partition: their offsets' range, records, untraced, bytes."""

    topic: str
    partition: int
    first: int
    last: int
    records: int
    untraced: int
    bytes: int


@dataclass(frozen=True)
class AuditRow:
    """One row of the batch job's audit table, its hour in ms."""

    hour_ms: int
    client_id: str | None
    principal: str | None
    origin: str | None
    records: int
    bytes: int | None
    untraced: int


@dataclass(frozen=True)
class EdgeWaits:
    """The links of one edge, evidence kind (`link`), time bucket and value bucket: their
    waits, the histogram bucket they fall in, their sum, and those into incomplete hops."""

    from_topic: str
    to_topic: str
    link: str
    bucket_ms: int
    histogram_index: int
    waits: SketchBucket
    total_ms: int | None
    incomplete: int


@dataclass(frozen=True)
class PathDurations:
    """The branches of one path and value bucket: their durations, the histogram bucket they
    fall in, their sum, and how many are broken, inferred, incomplete."""

    path: str
    histogram_index: int
    durations: SketchBucket
    total_ms: int | None
    broken: int
    inferred: int
    incomplete: int


@dataclass(frozen=True)
class GroupReads:
    """The released reads of one topic and consumer group: the consumers of every read."""

    topic: str
    group: str | None
    consumers: list[str]


@dataclass(frozen=True)
class GroupTransit:
    """The first reads of one topic and group in one bucket of transit values."""

    topic: str
    group: str | None
    values: SketchBucket


@dataclass(frozen=True)
class GroupLag:
    """The first reads of one topic and group, fetched in the time bucket starting at
    `bucket_ms`, in one bucket of lag values."""

    topic: str
    group: str | None
    bucket_ms: int
    values: SketchBucket


@dataclass(frozen=True)
class BatchFigures:
    """Everything one micro-batch adds to the merged aggregates, but the reads."""

    statuses: list[StatusCount]
    sizes: list[BucketSize]
    partitions: list[PartitionRead]
    audit: list[AuditRow]
    tallies: Tallies
    edges: list[EdgeWaits]
    pathways: list[PathDurations]
    broken: list[dict[str, Any]]  # the newest broken branches, `BROKEN_COLUMNS` and `leaf`


@dataclass(frozen=True)
class ReadFigures:
    """The partition clocks' released reads of one micro-batch (`pipeline.fetch_clock`)."""

    groups: list[GroupReads]
    transit: list[GroupTransit]
    lag: list[GroupLag]


def emitted_frames(emitted: DataFrame, config: PipelineConfig) -> dict[str, DataFrame]:
    """The aggregates of a micro-batch's emitted rows: per kind and status, rows, distinct
    traces and the watermark; each bucket the hold ran for, with what it keeps; and, with a
    `fetch_topic`, the released reads: per (topic, group) the consumers of every read (as
    batch's `transit_of` collects them) and the first reads' transit by value bucket, per
    (topic, group, bucket of the fetch time) their lag by value bucket."""
    from pyspark.sql import functions as F

    frames = {
        "statuses": emitted.groupBy("kind", "status").agg(
            F.count(F.lit(1)).alias("n"), F.max("watermark_ms").alias("wm"),
            F.countDistinct("trace_id").alias("traces")),
        "sizes": emitted.where(F.col("status") == STATE).select(
            "bucket", "held_hops", "held_flows", "tombstones")}
    if not config.fetch_topic:
        return frames
    acc = config.stream.accuracy
    reads = emitted.where(F.col("status").isin(TRANSIT, DUPLICATE))
    first = emitted.where(F.col("status") == TRANSIT)
    return {**frames,
            "read_groups": reads.groupBy("topic", "group").agg(
                F.collect_set("consumer").alias("consumers")),
            "read_transit": first.groupBy("topic", "group", *_values("transit_ms", acc)).agg(
                *_extremes("transit_ms")),
            "read_lag": first.groupBy("topic", "group", _time_bucket(config),
                                      *_values("lag_ms", acc)).agg(*_extremes("lag_ms"))}


def status_counts(rows: dict[str, list[dict[str, Any]]]) -> list[StatusCount]:
    return [StatusCount(r["kind"], r["status"], r["n"], r["traces"], r["wm"])
            for r in rows["statuses"]]


def state_sizes(rows: dict[str, list[dict[str, Any]]]) -> list[BucketSize]:
    return [BucketSize(r["bucket"], HeldSizes(r["held_hops"], r["held_flows"], r["tombstones"]))
            for r in rows["sizes"]]


def _time_bucket(config: PipelineConfig) -> Column:
    """The start (ms) of an `event_ms`'s bucket of `time_bucket_s`."""
    from pyspark.sql import functions as F

    bucket_ms = config.time_bucket_s * 1000
    return (F.floor(F.col("event_ms") / bucket_ms) * bucket_ms).alias("t")


def _values(column: str, accuracy: float) -> list[Column]:
    """The grouping columns of a sketch bucket of `column`."""
    return [sign_column(column).alias("s"), bucket_column(column, accuracy).alias("b")]


def _extremes(column: str) -> list[Column]:
    """The aggregates of a sketch bucket of `column`: count, min and max."""
    from pyspark.sql import functions as F

    return [F.count(F.lit(1)).alias("n"), F.min(column).alias("lo"),
            F.max(column).alias("hi")]


def _sketch_bucket(r: dict[str, Any]) -> SketchBucket:
    return SketchBucket(r["s"], r["b"], r["n"], r["lo"], r["hi"])


def table_frames(tables: Tables, config: PipelineConfig) -> dict[str, DataFrame]:
    """The aggregates of one micro-batch's finalised flows (`tables`, from `analyze`): per
    partition, per audit key, per edge, evidence, time and value bucket, per path and value
    bucket, the newest broken branches, and the tallies (`pipeline.summary.tally_frames`)."""
    from pyspark.sql import functions as F

    acc = config.stream.accuracy
    return {
        "partitions": tables.hops.groupBy("topic", "partition").agg(
            F.min("offset").alias("first"), F.max("offset").alias("last"),
            F.count(F.lit(1)).alias("records"),
            F.sum(F.col("trace_id").isNull().cast("long")).alias("untraced"),
            F.sum("size").alias("bytes")),
        "audit": tables.audit.select(
            F.unix_millis("hour").alias("hour_ms"), "client_id", "principal", "origin",
            "records", "bytes", "untraced"),
        "edges": tables.links.groupBy(
            "parent_topic", "topic", "link", _time_bucket(config),
            histogram_index("wait_ms").alias("h"), *_values("wait_ms", acc),
        ).agg(*_extremes("wait_ms"), F.sum("wait_ms").alias("total"),
              F.sum(F.col("incomplete").cast("long")).alias("incomplete")),
        "pathways": tables.branches.groupBy(
            "path", histogram_index("duration_ms").alias("h"), *_values("duration_ms", acc),
        ).agg(*_extremes("duration_ms"),
              F.sum(F.col("broken").cast("long")).alias("broken"),
              F.sum((F.col("inferred_edges") > 0).cast("long")).alias("inferred"),
              F.sum(F.col("incomplete").cast("long")).alias("incomplete"),
              F.sum("duration_ms").alias("total")),
        "broken": tables.branches.where("broken").orderBy(
            F.desc("start_ms"), "trace_id", "path", "leaf").limit(config.top).select(
            *BROKEN_COLUMNS, "leaf"),
        **tally_frames(tables)}


def batch_figures(rows: dict[str, list[dict[str, Any]]]) -> BatchFigures:
    """What one micro-batch adds, from the rows of `emitted_frames` and `table_frames`."""
    return BatchFigures(
        status_counts(rows), state_sizes(rows),
        [PartitionRead(r["topic"], r["partition"], r["first"], r["last"], r["records"],
                       r["untraced"], r["bytes"]) for r in rows["partitions"]],
        [AuditRow(**r) for r in rows["audit"]], tally_of(rows),
        [EdgeWaits(r["parent_topic"], r["topic"], r["link"], r["t"], r["h"],
                   _sketch_bucket(r), r["total"], r["incomplete"]) for r in rows["edges"]],
        [PathDurations(r["path"], r["h"], _sketch_bucket(r), r["total"], r["broken"],
                       r["inferred"], r["incomplete"]) for r in rows["pathways"]],
        rows["broken"])


def read_figures(rows: dict[str, list[dict[str, Any]]]) -> ReadFigures:
    """The released reads' figures, from the rows of `emitted_frames` (none without a
    `fetch_topic`)."""
    return ReadFigures(
        [GroupReads(r["topic"], r["group"], r["consumers"])
         for r in rows.get("read_groups", [])],
        [GroupTransit(r["topic"], r["group"], _sketch_bucket(r))
         for r in rows.get("read_transit", [])],
        [GroupLag(r["topic"], r["group"], int(r["t"]), _sketch_bucket(r))
         for r in rows.get("read_lag", [])])
