"""Hops → flows, edges, pathways, lag and audit summaries: the analysis, the same for batch and
streaming (the stream feeds the hops of the flows it finalised in each micro-batch through
these functions, `pipeline.stream`).

Definitions (docs/pipeline.md):
* the *causal graph* (`pipeline.graph`): each traced hop's parents, linked by its
  `<prefix>parent` headers or, where it has none, inferred and marked;
* a *branch* is a root-to-leaf path of hops through that graph; a *flow* is every traced hop
  with one trace id, with the branches that start at its roots;
* an *edge* is parent topic → child topic; its latency is the child's event time minus the
  parent's (the hop's *wait*), one value per parent → child pair of hops;
* a *pathway* is a branch's sequence of topics; its latency is the leaf's time minus the
  root's;
* a branch is *broken* when it stops before a terminal topic (`stopped`) or one of its hops
  waited longer than `max_wait_ms` (`slow`); a flow is broken when one of its branches is.
  With no terminal topics configured, nothing is `stopped`;
* in a stream, a branch that has not reached a terminal topic but whose leaf is later than
  the event-time *watermark* (the latest hop time seen minus `stream.watermark_s`) is `open`,
  not stopped: it may still move on. A batch has no watermark: every branch is settled;
* a hop is *incomplete* when it declares parents Herald knew of but could not name
  (`parents_lost`); the links into it, and so the edges they count in (`incomplete`, a count),
  and every branch through it (`incomplete`, a flag; a pathway's `incomplete` counts them) are
  incomplete too: their figures leave out an input nobody can see. Incomplete is not broken:
  it says what the graph cannot know, not what the flow did.

Percentiles are exact (Spark's `percentile`, linear interpolation between ranks), so results
can be checked to the millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.config import PipelineConfig
from pipeline.graph import INFERRED, LINKED, branches_of, links_of, nodes_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

PERCENTILES = (0.5, 0.9, 0.99)
# Upper bounds (ms) of the latency histogram's buckets; the last bucket is open-ended.
HISTOGRAM_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000,
                       60000)
MIXED = "mixed"  # an edge some of whose instances were linked and some inferred


@dataclass
class Tables:
    hops: DataFrame
    nodes: DataFrame      # traced hops: the graph's nodes
    links: DataFrame      # parent → child pairs of hops, linked or inferred, with the wait
    unresolved: DataFrame  # hops whose parent headers name only records not read
    branches: DataFrame   # root-to-leaf paths of hops, with their broken flags
    flows: DataFrame
    edges: DataFrame
    pathways: DataFrame
    audit: DataFrame
    transit: DataFrame | None = None  # with fetch observations only
    lag: DataFrame | None = None      # with fetch observations only

    def unpersist(self) -> None:
        for df in (self.nodes, self.links):
            df.unpersist()


def _first_fetches(fetches: DataFrame) -> DataFrame:
    """Each record's first fetch by each group. A group reads a record once, whichever member
    fetched it (a record fetched again after a rebalance counts once, at its first fetch);
    consumers without a group (`assign()`) each read on their own and share the null group."""
    from pyspark.sql import functions as F

    reader = F.when(F.col("group").isNull(), F.col("consumer"))  # a group-less reader
    return fetches.groupBy("topic", "partition", "offset", "group", reader.alias("solo")).agg(
        F.min("fetched_ms").alias("fetched_ms"), F.collect_set("consumer").alias("consumers"))


def transit_of(hops: DataFrame, fetches: DataFrame) -> DataFrame:
    """Produce-to-consume latency per topic and consumer group: each record's first fetch by
    each group, minus the record's hop time (Herald's receive time). `consumers` lists the
    client ids that fetched for the row."""
    from pyspark.sql import functions as F

    joined = _first_fetches(fetches).join(
        hops.select("topic", "partition", "offset", "event_ms"), ["topic", "partition", "offset"])
    return (joined.withColumn("transit_ms", F.col("fetched_ms") - F.col("event_ms"))
            .groupBy("topic", "group")
            .agg(*_latency_stats("transit_ms"),
                 F.array_sort(F.array_distinct(F.flatten(F.collect_list("consumers"))))
                 .alias("consumers")))


def lag_of(hops: DataFrame, fetches: DataFrame, bucket_s: int) -> DataFrame:
    """Consumer lag in time, per topic, consumer group and time bucket (of the fetch time).

    At each of a group's first fetches of a record, the lag is the event time of the newest
    record of that partition already there (event time at or before the fetch) minus the
    fetched record's: zero for a group that keeps up, however slow delivery is (that is
    transit), and growing while the group falls behind. Per bucket: `fetches`, exact `p50_s`
    and `max_s` (seconds). The newest record is found with one running maximum per partition
    over its records and fetches in time order, so no fetch is compared with every record.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    part = ["topic", "partition"]
    records = hops.select(*part, F.col("event_ms").alias("t"), F.lit(0).alias("kind"),
                          F.lit(None).cast("long").alias("record_ms"),
                          F.lit(None).cast("string").alias("group"))
    reads = (_first_fetches(fetches)
             .join(hops.select(*part, "offset", F.col("event_ms").alias("record_ms")),
                   [*part, "offset"])
             .select(*part, F.col("fetched_ms").alias("t"), F.lit(1).alias("kind"),
                     "record_ms", "group"))
    upto = (Window.partitionBy(*part).orderBy("t", "kind")
            .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    newest = F.max(F.when(F.col("kind") == 0, F.col("t"))).over(upto)
    lags = (records.unionByName(reads).withColumn("newest_ms", newest).where("kind = 1")
            .withColumn("lag_ms", F.greatest(F.lit(0), F.col("newest_ms") - F.col("record_ms"))))
    bucket_ms = bucket_s * 1000
    return lags.groupBy("topic", "group",
                        (F.floor(F.col("t") / bucket_ms) * bucket_ms).alias("bucket_ms")).agg(
        F.count(F.lit(1)).alias("fetches"),
        (F.percentile("lag_ms", 0.5) / 1000).alias("p50_s"),
        (F.max("lag_ms") / 1000).alias("max_s"))


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


def flag_branches(branches: DataFrame, config: PipelineConfig, watermark_ms: int | None = None
                  ) -> DataFrame:
    """`stopped`, `slow`, `open`, `broken` of each branch (see the module's definitions)."""
    from pyspark.sql import functions as F

    terminal = list(config.terminal_topics)
    last = F.element_at("topics", -1)
    unfinished = (~last.isin(terminal)) if terminal else F.lit(False)
    is_open = unfinished & (F.lit(False) if watermark_ms is None
                            else F.col("end_ms") > F.lit(watermark_ms))
    slow = F.coalesce(F.col("max_wait_ms") > config.max_wait_ms, F.lit(False))
    return (branches.withColumn("last_topic", last)
            .withColumn("open", is_open).withColumn("stopped", unfinished & ~is_open)
            .withColumn("slow", slow).withColumn("broken", F.col("stopped") | F.col("slow")))


def flows_of(nodes: DataFrame, links: DataFrame, branches: DataFrame) -> DataFrame:
    """One row per trace id: its hops (each with its parents), its branches' pathways, and
    whether any branch broke. A flow is `open` when no branch broke and one is still open."""
    from pyspark.sql import functions as F

    parents = links.groupBy("key").agg(F.sort_array(F.collect_list(F.struct(
        F.col("parent_key.topic").alias("topic"), F.col("parent_key.partition").alias("partition"),
        F.col("parent_key.offset").alias("offset"), "wait_ms", "link", "evidence"))
    ).alias("parents"))
    hop = F.struct("event_ms", "topic", "partition", "offset", "client_id", "parents",
                   "parents_lost", "lost_reasons")
    per_trace = (nodes.drop("parents").join(parents, "key", "left")
                 .withColumn("parents", F.coalesce("parents", F.array()))
                 .groupBy("trace_id").agg(
        F.sort_array(F.collect_list(F.struct(F.col("order"), hop.alias("hop")))).alias("s"),
        F.min("event_ms").alias("start_ms"), F.max("event_ms").alias("end_ms"),
        F.count(F.lit(1)).alias("hop_count"),
        F.sum(F.size("parents")).alias("edges"),
        F.sum(F.size(F.filter("parents", lambda p: p["link"] == INFERRED)))
        .alias("inferred_edges"),
        F.sum("parents_lost").alias("parents_lost"),
        F.sum((F.col("parents_lost") > 0).cast("long")).alias("incomplete_hops"),
    ).withColumn("hops", F.expr("transform(s, x -> x.hop)")).drop("s"))
    per_branch = branches.groupBy("trace_id").agg(
        F.count(F.lit(1)).alias("branches"),
        F.sum(F.col("broken").cast("long")).alias("broken_branches"),
        F.sum(F.col("incomplete").cast("long")).alias("incomplete_branches"),
        F.array_sort(F.collect_set("path")).alias("pathways"),
        F.max("max_wait_ms").alias("max_wait_ms"),
        F.max("stopped").alias("stopped"), F.max("slow").alias("slow"),
        F.max("open").alias("any_open"))
    flows = per_trace.join(per_branch, "trace_id", "left")

    def flag(c: str) -> Column:
        return F.coalesce(F.col(c), F.lit(False))

    return (flows.withColumn("duration_ms", F.col("end_ms") - F.col("start_ms"))
            .withColumn("branches", F.coalesce("branches", F.lit(0)))
            .withColumn("broken_branches", F.coalesce("broken_branches", F.lit(0)))
            .withColumn("edges", F.coalesce("edges", F.lit(0)))
            .withColumn("inferred_edges", F.coalesce("inferred_edges", F.lit(0)))
            .withColumn("incomplete_branches", F.coalesce("incomplete_branches", F.lit(0)))
            .withColumn("incomplete", F.col("incomplete_hops") > 0)
            .withColumn("stopped", flag("stopped")).withColumn("slow", flag("slow"))
            .withColumn("broken", F.col("stopped") | F.col("slow"))
            .withColumn("open", flag("any_open") & ~F.col("broken")).drop("any_open"))


def _link_kind() -> list[Column]:
    """How many of a group of links were linked and inferred, and `link`: `linked` when all
    were, `inferred` when all were, `mixed` otherwise."""
    from pyspark.sql import functions as F

    linked = F.sum((F.col("link") == LINKED).cast("long"))
    inferred = F.sum((F.col("link") == INFERRED).cast("long"))
    return [linked.alias("linked"), inferred.alias("inferred"),
            F.when(inferred == 0, LINKED).when(linked == 0, INFERRED).otherwise(MIXED)
            .alias("link")]


def edges_of(links: DataFrame) -> DataFrame:
    """Per parent topic → child topic: count and exact wait percentiles of the parent → child
    pairs of hops, how many were linked and inferred, and how many led into an incomplete hop
    (`incomplete`)."""
    from pyspark.sql import functions as F

    return (links.groupBy(F.col("parent_topic").alias("from_topic"),
                          F.col("topic").alias("to_topic"))
            .agg(*_latency_stats("wait_ms"), *_link_kind(),
                 F.sum(F.col("incomplete").cast("long")).alias("incomplete")))


def pathways_of(branches: DataFrame) -> DataFrame:
    """Per pathway (a branch's topics): count and exact percentiles of the branches'
    durations, how many broke, how many rest on at least one inferred edge, and how many
    passed a hop with lost parents (`incomplete`)."""
    from pyspark.sql import functions as F

    return branches.groupBy("path").agg(
        *_latency_stats("duration_ms"),
        F.sum(F.col("broken").cast("long")).alias("broken"),
        F.sum((F.col("inferred_edges") > 0).cast("long")).alias("inferred"),
        F.sum(F.col("incomplete").cast("long")).alias("incomplete"),
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


def analyze(hops: DataFrame, config: PipelineConfig, watermark_ms: int | None = None,
            fetches: DataFrame | None = None, transit: bool = True) -> Tables:
    """Every table from the hops (and the fetch observations, when there are any). The nodes
    and links are cached, since every later table reads them; `Tables.unpersist` frees them.

    `transit=False`: the observations are evidence for inferred parents only, no transit or
    lag tables. The stream passes the observations of the flows it finalised, which are not
    every fetch of their partitions; it measures transit and lag per partition instead
    (`pipeline.fetch_clock`)."""
    nodes = nodes_of(hops).cache()
    links, unresolved = links_of(nodes, fetches, config.inference_scope)
    links = links.cache()
    branches = flag_branches(branches_of(nodes, links), config, watermark_ms)
    tables = Tables(hops=hops, nodes=nodes, links=links, unresolved=unresolved,
                    branches=branches, flows=flows_of(nodes, links, branches),
                    edges=edges_of(links), pathways=pathways_of(branches), audit=audit_of(hops))
    if fetches is not None and transit:
        tables.transit = transit_of(hops, fetches)
        tables.lag = lag_of(hops, fetches, config.time_bucket_s)
    return tables


def histogram_index(col: str) -> Column:
    """The bucket of `HISTOGRAM_BOUNDS_MS` each value of `col` falls in: the first bound at
    or above it (`len(HISTOGRAM_BOUNDS_MS)`: above them all). Exact, so the counts are the
    cumulative `le` buckets of a Prometheus histogram (`pipeline.stream_metrics`)."""
    from pyspark.sql import functions as F

    # One SQL expression, parsed in one call: built from `F.when` it took two calls into the
    # JVM per bound, every micro-batch of the stream.
    cases = " ".join(f"WHEN `{col}` <= {bound} THEN {i}"
                     for i, bound in enumerate(HISTOGRAM_BOUNDS_MS))
    return F.expr(f"CASE {cases} ELSE {len(HISTOGRAM_BOUNDS_MS)} END")


def edge_histograms(links: DataFrame) -> DataFrame:
    """Per edge, how many waits fell in each bucket of `HISTOGRAM_BOUNDS_MS`."""
    from pyspark.sql import functions as F

    return (
        links.groupBy(F.col("parent_topic").alias("from_topic"),
                      F.col("topic").alias("to_topic"), histogram_index("wait_ms").alias("bucket"))
        .agg(F.count(F.lit(1)).alias("count"))
    )


def edge_percentiles_over_time(links: DataFrame, bucket_s: int) -> DataFrame:
    """Per edge and time bucket (of the child hop's event time): count and percentiles."""
    from pyspark.sql import functions as F

    bucket_ms = bucket_s * 1000
    return (
        links.groupBy(F.col("parent_topic").alias("from_topic"),
                      F.col("topic").alias("to_topic"),
                      (F.floor(F.col("event_ms") / bucket_ms) * bucket_ms).alias("bucket_ms"))
        .agg(*_latency_stats("wait_ms"))
    )
