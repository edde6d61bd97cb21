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
from pipeline.summary import BROKEN_COLUMNS, Tallies, tally

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row


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


def status_counts(emitted: DataFrame) -> list[StatusCount]:
    """Per kind and status of the emitted rows: rows, distinct traces and the watermark."""
    from pyspark.sql import functions as F

    return [StatusCount(r["kind"], r["status"], r["n"], r["traces"], r["wm"])
            for r in emitted.groupBy("kind", "status").agg(
                F.count(F.lit(1)).alias("n"), F.max("watermark_ms").alias("wm"),
                F.countDistinct("trace_id").alias("traces")).collect()]


def state_sizes(emitted: DataFrame) -> list[BucketSize]:
    """The `state` rows of a micro-batch: each bucket the hold ran for, with what it keeps."""
    from pyspark.sql import functions as F

    return [BucketSize(r["bucket"], HeldSizes(r["held_hops"], r["held_flows"], r["tombstones"]))
            for r in emitted.where(F.col("status") == STATE).select(
                "bucket", "held_hops", "held_flows", "tombstones").collect()]


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


def _sketch_bucket(r: Row) -> SketchBucket:
    return SketchBucket(r["s"], r["b"], r["n"], r["lo"], r["hi"])


def batch_figures(tables: Tables, statuses: list[StatusCount], sizes: list[BucketSize],
                  config: PipelineConfig) -> BatchFigures:
    """The figures of one micro-batch's finalised flows (`tables`, from `analyze`), with its
    emitted rows (`statuses`) and the sizes of the buckets it touched (`sizes`)."""
    from pyspark.sql import functions as F

    acc = config.stream.accuracy
    partitions = [PartitionRead(r["topic"], r["partition"], r["first"], r["last"],
                                r["records"], r["untraced"], r["bytes"])
                  for r in tables.hops.groupBy("topic", "partition").agg(
                      F.min("offset").alias("first"), F.max("offset").alias("last"),
                      F.count(F.lit(1)).alias("records"),
                      F.sum(F.col("trace_id").isNull().cast("long")).alias("untraced"),
                      F.sum("size").alias("bytes")).collect()]
    audit = [AuditRow(**r.asDict()) for r in tables.audit.select(
        F.unix_millis("hour").alias("hour_ms"), "client_id", "principal", "origin", "records",
        "bytes", "untraced").collect()]
    edges = [EdgeWaits(r["parent_topic"], r["topic"], r["link"], r["t"], r["h"],
                       _sketch_bucket(r), r["total"], r["incomplete"])
             for r in tables.links.groupBy(
                 "parent_topic", "topic", "link", _time_bucket(config),
                 histogram_index("wait_ms").alias("h"), *_values("wait_ms", acc),
             ).agg(*_extremes("wait_ms"), F.sum("wait_ms").alias("total"),
                   F.sum(F.col("incomplete").cast("long")).alias("incomplete")).collect()]
    pathways = [PathDurations(r["path"], r["h"], _sketch_bucket(r), r["total"], r["broken"],
                              r["inferred"], r["incomplete"])
                for r in tables.branches.groupBy(
                    "path", histogram_index("duration_ms").alias("h"),
                    *_values("duration_ms", acc),
                ).agg(*_extremes("duration_ms"),
                      F.sum(F.col("broken").cast("long")).alias("broken"),
                      F.sum((F.col("inferred_edges") > 0).cast("long")).alias("inferred"),
                      F.sum(F.col("incomplete").cast("long")).alias("incomplete"),
                      F.sum("duration_ms").alias("total")).collect()]
    broken = [r.asDict(recursive=True) for r in tables.branches.where("broken").orderBy(
        F.desc("start_ms"), "trace_id", "path", "leaf").limit(config.top).select(
        *BROKEN_COLUMNS, "leaf").collect()]
    return BatchFigures(statuses, sizes, partitions, audit, tally(tables), edges, pathways,
                        broken)


def read_figures(emitted: DataFrame, config: PipelineConfig) -> ReadFigures:
    """The released reads' figures: per (topic, group) the consumers of every read (as
    batch's `transit_of` collects them) and the first reads' transit by value bucket; per
    (topic, group, bucket of the fetch time) their lag by value bucket."""
    from pyspark.sql import functions as F

    acc = config.stream.accuracy
    reads = emitted.where(F.col("status").isin(TRANSIT, DUPLICATE))
    groups = [GroupReads(r["topic"], r["group"], r["consumers"])
              for r in reads.groupBy("topic", "group").agg(
                  F.collect_set("consumer").alias("consumers")).collect()]
    first = emitted.where(F.col("status") == TRANSIT)
    transit = [GroupTransit(r["topic"], r["group"], _sketch_bucket(r))
               for r in first.groupBy("topic", "group", *_values("transit_ms", acc)).agg(
                   *_extremes("transit_ms")).collect()]
    lag = [GroupLag(r["topic"], r["group"], int(r["t"]), _sketch_bucket(r))
           for r in first.groupBy("topic", "group", _time_bucket(config),
                                  *_values("lag_ms", acc)).agg(
               *_extremes("lag_ms")).collect()]
    return ReadFigures(groups, transit, lag)
