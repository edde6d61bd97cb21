"""Hops → the causal graph: which record each record continues, and the root-to-leaf branches.

A trace is not a chain. One record is read by several services (fan-out), a service joins two
inputs (fan-in), a retry sends a record back to a topic it has been through. Ordering a trace's
hops by time and pairing neighbours invents edges between siblings that no record travelled and
misses the real ones, so the graph is built from evidence instead:

* **linked**: the hop's `<prefix>parent` headers name the records it continues, exactly, by
  (topic, partition, offset). Each names one parent; several make a fan-in.
* **inferred**, for a traced hop without a parent header (written straight to the broker, or
  before links existed): one parent, the best guess, marked so that nobody mistakes it for
  evidence. With `fetch_log` observations (`pipeline.fetch_topic`), the latest earlier hop of
  the same trace whose record *the same service* fetched before this hop was produced: a
  service read it, then wrote this. "The same service" is matched as Herald's link memory
  keys a service (`pipeline.inference_scope`, like `trace_context`'s `link.scope`): by default
  the consumer's host (the observation's `s`) equals the host of the hop's `<prefix>source`
  (`evidence` `fetch_host`), which holds where a service's consumer and producer have
  different client ids (Java's and librdkafka's defaults); with `client_id`, host and client
  id both (`fetch_host_client_id`). An observation without a host (written before `fetch_log`
  recorded it), or a hop without a source, is matched by equal client ids alone, as it always
  was (`fetch_client_id`). Otherwise the latest earlier hop of the trace (`evidence` `time`),
  the old time-order rule.
* a hop with no parent is a root. A hop whose every parent header names a record that is not a
  node (not read: another topic, outside the offset range; or without trace context) is a root
  too, counted as `unresolved`: its link is evidence of a parent we cannot see, so nothing is
  guessed in its place.
* a hop that declares *lost* parents (`<prefix>parents_lost`: Herald knew it continued records
  it could not name) is *incomplete*. Its named parents are linked as usual; nothing is
  inferred in place of the lost ones (the header says a parent existed and Herald could not
  tell which: any guess would be a confident wrong answer). So a hop whose only parents are
  lost is a root of its branches, but a `lost_root`: its branches start at a record nobody can
  name. Links into an incomplete hop carry `incomplete`, and every branch through one is
  `incomplete`, with the lost count and reasons it passed.

"Earlier" is the order (event time, whether the hop names no parent, topic, partition, offset),
a total order, so inferred edges never close a cycle; linked edges name records written before
the child, so they cannot either. Event times are milliseconds, and a service that reads a
record straight from the broker can write its own within the same one, so the hop being
guessed for can tie with its real parent. Of tied hops, those with parent headers (or lost
parents) come first: they already say what they continue, so they are the likelier parents of
a tied hop without any, never its children. Topic, partition and offset break the ties that
remain, arbitrarily. (A branch never visits a hop twice all the same, so forged headers
cannot loop it.)

Branches are the root-to-leaf paths of hops, walked depth first (`pipeline.branch_paths`) over
partitions of the graph that hold whole traces, and traces joined by links together. Hops are
records, so a retry loop that revisits a topic still ends: each pass is a new record. A hop
with two parents (fan-in) lies on the branches of both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from protocol.contracts.headers import PARENTS_LOST_REASONS

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no types: Any here
    from pyspark.sql import Column, DataFrame

KEY = ("topic", "partition", "offset")
LINKED, INFERRED = "linked", "inferred"
# `evidence` of a link: a parent header; an observation of the same service's fetch, matched
# by host, by host and client id, or (without a host on either side) by client id; time order.
HEADER, TIME = "header", "time"
FETCH_HOST, FETCH_HOST_CLIENT_ID, FETCH_CLIENT_ID = (
    "fetch_host", "fetch_host_client_id", "fetch_client_id")
FETCH_EVIDENCE = (FETCH_HOST, FETCH_HOST_CLIENT_ID, FETCH_CLIENT_ID)
# Evidence values that counts merged by older versions still hold, by the value now written
# for the same match: `fetch`, from before hosts were matched, paired equal client ids alone.
LEGACY_EVIDENCE = {"fetch": FETCH_CLIENT_ID}
LOST_REASONS = PARENTS_LOST_REASONS


def evidence_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """Counts by `evidence` (and any other key, kept as it is) with a legacy value added to
    the one that replaced it (`LEGACY_EVIDENCE`): a checkpoint or aggregate merged before the
    split keeps counting, instead of silently dropping out of every figure by evidence."""
    out: dict[str, int] = {}
    for key, n in counts.items():
        key = LEGACY_EVIDENCE.get(key, key)
        out[key] = out.get(key, 0) + int(n or 0)
    return out


def _key(prefix: str = "") -> Column:
    from pyspark.sql import functions as F

    return F.struct(*[F.col(prefix + k).alias(k) for k in KEY])


def _order() -> Column:
    """A hop's place in time order (total): event time, then a hop naming its parents before
    one naming none (see the module), then topic, partition, offset."""
    from pyspark.sql import functions as F

    orphan = (F.size("parents") == 0) & (F.col("parents_lost") == 0)
    return F.struct(F.col("event_ms").alias("event_ms"), orphan.alias("orphan"),
                    *[F.col(k).alias(k) for k in KEY])


def nodes_of(hops: DataFrame) -> DataFrame:
    """The graph's nodes: traced hops, with their key and time order."""
    from pyspark.sql import functions as F

    return (hops.where(F.col("trace_id").isNotNull())
            .select("trace_id", *KEY, "event_ms", "client_id", "source_host",
                    F.coalesce("parents", F.array()).alias("parents"),
                    F.coalesce("parents_lost", F.lit(0).cast("long")).alias("parents_lost"),
                    F.coalesce("lost_reasons", F.array().cast("array<string>"))
                    .alias("lost_reasons"))
            .withColumn("key", _key()).withColumn("order", _order()))


def _fetch_match(scope: str) -> tuple[Column, Column]:
    """(whether an observation shows this hop's service fetching, the `evidence` it gives),
    over an orphan hop joined to observations of its trace (`pipeline.inference_scope`)."""
    from pyspark.sql import functions as F

    by_host = F.col("consumer_host").isNotNull() & F.col("source_host").isNotNull()
    same_host = F.col("consumer_host") == F.col("source_host")
    same_client = F.col("client_id") == F.col("consumer")
    if scope == "host":
        host_match, evidence = same_host, FETCH_HOST
    else:
        host_match, evidence = same_host & same_client, FETCH_HOST_CLIENT_ID
    match = F.when(by_host, host_match).otherwise(same_client)
    return match, F.when(by_host, F.lit(evidence)).otherwise(F.lit(FETCH_CLIENT_ID))


def links_of(nodes: DataFrame, fetches: DataFrame | None = None, scope: str = "host"
             ) -> tuple[DataFrame, DataFrame]:
    """Every parent → child pair of hops, and the hops whose parent headers named only records
    that were not read (`unresolved`). `scope`: how an observation's consumer is matched to a
    hop's producer (`host` | `client_id`, see the module).

    Columns of the links: the child's `trace_id`, `key`, `topic`, `event_ms`, `parents_lost`,
    `lost_reasons`; the parent's `parent_key`, `parent_topic`, `parent_ms`; `wait_ms` (child
    minus parent), `link` (`linked` | `inferred`), `evidence` (`header`, one of
    `FETCH_EVIDENCE`, `time`) and `incomplete` (the child declared lost parents).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    parent = nodes.select(F.col("key").alias("parent_key"), F.col("topic").alias("parent_topic"),
                          F.col("event_ms").alias("parent_ms"),
                          F.col("order").alias("parent_order"),
                          F.col("trace_id").alias("parent_trace"))
    child_cols = ["trace_id", "key", "topic", "event_ms", "parents_lost", "lost_reasons"]

    named = (nodes.where(F.size("parents") > 0)
             .select(*child_cols, F.explode("parents").alias("parent_key")))
    named = named.join(parent, "parent_key", "left")
    linked = (named.where(F.col("parent_ms").isNotNull())
              .select(*child_cols, "parent_key", "parent_topic", "parent_ms",
                      F.lit(LINKED).alias("link"), F.lit(HEADER).alias("evidence")))
    unresolved = (named.groupBy("key").agg(F.max(F.col("parent_ms").isNotNull()).alias("seen"))
                  .where(~F.col("seen")).select("key"))

    # Unlinked hops: the latest earlier hop of the trace, and (with observations) the latest
    # earlier hop that this hop's service fetched before producing it. A hop that declares
    # lost parents is not one: it had parents, which no guess may stand in for.
    by_time = Window.partitionBy("trace_id").orderBy("order")
    timed = nodes.select(*child_cols, "order", "client_id", "source_host",
                         F.lag("key").over(by_time).alias("prev_key"))
    orphans = timed.where(F.col("order.orphan"))  # no parent named, none declared lost
    choice = orphans.select(*child_cols, F.col("prev_key").alias("parent_key"),
                            F.lit(TIME).alias("evidence"))
    if fetches is not None:
        if "consumer_host" not in fetches.columns:  # observations of before `s`
            fetches = fetches.withColumn("consumer_host", F.lit(None).cast("string"))
        fetched = (fetches.groupBy(*KEY, "consumer", "consumer_host")
                   .agg(F.min("fetched_ms").alias("fetched_ms"))
                   .select(_key().alias("parent_key"), "consumer", "consumer_host", "fetched_ms")
                   .join(parent, "parent_key"))
        match, evidence = _fetch_match(scope)
        seen = orphans.join(
            fetched,
            (F.col("trace_id") == F.col("parent_trace"))
            & (F.col("fetched_ms") <= F.col("event_ms"))
            & (F.col("parent_order") < F.col("order")))
        seen = seen.where(match).withColumn("fetch_evidence", evidence)
        # The latest parent; of the observations of one parent, a match by host first.
        latest = Window.partitionBy("key").orderBy(
            F.desc("parent_order"), (F.col("fetch_evidence") == FETCH_CLIENT_ID).cast("int"))
        seen = (seen.withColumn("rank", F.row_number().over(latest)).where("rank = 1")
                .select("key", F.col("parent_key").alias("fetched_key"), "fetch_evidence"))
        choice = (choice.join(seen, "key", "left")
                  .withColumn("evidence", F.coalesce("fetch_evidence", "evidence"))
                  .withColumn("parent_key", F.coalesce("fetched_key", "parent_key"))
                  .drop("fetched_key", "fetch_evidence"))
    inferred = (choice.where(F.col("parent_key").isNotNull())
                .join(parent.drop("parent_order", "parent_trace"), "parent_key")
                .select(*child_cols, "parent_key", "parent_topic", "parent_ms",
                        F.lit(INFERRED).alias("link"), "evidence"))
    links = (linked.unionByName(inferred)
             .withColumn("wait_ms", F.col("event_ms") - F.col("parent_ms"))
             .withColumn("incomplete", F.col("parents_lost") > 0))
    return links, unresolved


# A walk holds its partition of the graph in one Python worker: enough partitions that each
# holds about this many hops at most (and never fewer than the session's shuffle partitions).
WALK_NODES = 200_000


def _walk_schema() -> pa.Schema:
    """The walk's rows, as Arrow types (the executors build them; Spark's follow from them)."""
    import pyarrow as pa

    key = [("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())]
    return pa.schema([
        ("trace_id", pa.string()), *[("root_" + k, t) for k, t in key],
        *[("leaf_" + k, t) for k, t in key], ("start_ms", pa.int64()), ("end_ms", pa.int64()),
        ("topics", pa.list_(pa.string())), ("max_wait_ms", pa.int64()),
        ("inferred_edges", pa.int32()), ("parents_lost", pa.int64()),
        ("lost_reasons", pa.list_(pa.string())), ("lost_root", pa.bool_())])


def _groups(nodes: DataFrame, links: DataFrame) -> tuple[dict[str, str], int]:
    """Which traces a branch can cross between (links from a hop of one trace to a hop of
    another: fan-in across traces), as each trace's group (the traces joined to it, by one
    of them), and how many nodes there are: one Spark action. Traces with no such link are
    their own group and are left out."""
    from pyspark.sql import functions as F

    parent = nodes.select(F.col("key").alias("parent_key"), F.col("trace_id").alias("parent"))
    pairs = (links.select("trace_id", "parent_key").join(parent, "parent_key")
             .where(F.col("trace_id") != F.col("parent"))
             .select("trace_id", "parent", F.lit(None).cast("long").alias("n")).distinct())
    count = nodes.agg(F.lit(None).cast("string").alias("trace_id"),
                      F.lit(None).cast("string").alias("parent"), F.count(F.lit(1)).alias("n"))
    rows = pairs.unionByName(count).collect()
    joined: dict[str, str] = {}  # union-find: each trace's link towards its group's

    def find(t: str) -> str:
        joined.setdefault(t, t)
        while joined[t] != t:
            joined[t] = joined[joined[t]]  # halve the path
            t = joined[t]
        return t

    n = 0
    for r in rows:
        if r["n"] is not None:
            n = r["n"]
            continue
        a, b = find(r["trace_id"]), find(r["parent"])
        if a != b:
            joined[max(a, b)] = min(a, b)
    return {t: find(t) for t in list(joined)}, n


def _walk_partitions(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow`'s function: the rows of one partition of the graph (nodes, and links
    with their `parent_*` set), walked (`pipeline.branch_paths.walk`)."""
    import pyarrow as pa

    from pipeline.branch_paths import Link, Node, walk

    nodes: list[Node] = []
    links: list[Link] = []
    for batch in batches:
        c = batch.to_pydict()
        keys = list(zip(c["topic"], c["partition"], c["offset"], strict=True))
        parents = list(zip(c["parent_topic"], c["parent_partition"], c["parent_offset"],
                           strict=True))
        for i, key in enumerate(keys):
            if c["parent_topic"][i] is None:
                nodes.append(Node(key, c["trace_id"][i], c["topic"][i], c["event_ms"][i],
                                  c["parents_lost"][i], c["lost_reasons"][i] or ()))
            else:
                links.append(Link(parents[i], key, c["topic"][i], c["event_ms"][i],
                                  c["wait_ms"][i], bool(c["inferred"][i]),
                                  c["parents_lost"][i], c["lost_reasons"][i] or ()))
    schema = _walk_schema()
    rows: list[dict[str, object]] = []
    for b in walk(nodes, links):
        rows.append({
            "trace_id": b.trace_id, "root_topic": b.root[0], "root_partition": b.root[1],
            "root_offset": b.root[2], "leaf_topic": b.leaf[0], "leaf_partition": b.leaf[1],
            "leaf_offset": b.leaf[2], "start_ms": b.start_ms, "end_ms": b.end_ms,
            "topics": b.topics, "max_wait_ms": b.max_wait_ms,
            "inferred_edges": b.inferred_edges, "parents_lost": b.parents_lost,
            "lost_reasons": b.lost_reasons, "lost_root": b.lost_root})
        if len(rows) == 10_000:
            yield pa.RecordBatch.from_pylist(rows, schema=schema)
            rows = []
    yield pa.RecordBatch.from_pylist(rows, schema=schema)


def branches_of(nodes: DataFrame, links: DataFrame) -> DataFrame:
    """Every root-to-leaf path of hops: `trace_id` (the root's), `root`, `leaf`, `start_ms`,
    `end_ms`, `duration_ms` (leaf minus root), `topics`, `path` (`a > b > c`), `hop_count`,
    `max_wait_ms` (longest single wait on it, null for a lone root), `inferred_edges`, and what
    lost parents did to it: `parents_lost` (the lost parents its hops declared), `lost_reasons`
    (theirs, sorted), `incomplete` (it passed a hop with lost parents) and `lost_root` (its root
    itself declared lost parents: the branch starts at a record nobody can name).

    One pass: the hops and links are partitioned by trace (traces that links join, together)
    and each partition is walked in Python (`pipeline.branch_paths`), after one small action
    that finds the joined traces (`_groups`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    joined, n = _groups(nodes, links)
    spark = nodes.sparkSession
    least = int(spark.conf.get("spark.sql.shuffle.partitions") or 1)
    partitions = max(least, -(-n // WALK_NODES))
    null = {"parent_topic": F.lit(None).cast("string"),
            "parent_partition": F.lit(None).cast("int"),
            "parent_offset": F.lit(None).cast("long"),
            "wait_ms": F.lit(None).cast("long"), "inferred": F.lit(None).cast("boolean")}
    node_rows = nodes.select(
        "trace_id", "topic", F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"), "event_ms", "parents_lost",
        "lost_reasons", *[v.alias(k) for k, v in null.items()])
    link_rows = links.select(
        "trace_id", "topic", F.col("key.partition").cast("int").alias("partition"),
        F.col("key.offset").cast("long").alias("offset"), "event_ms", "parents_lost",
        "lost_reasons", F.col("parent_key.topic").alias("parent_topic"),
        F.col("parent_key.partition").cast("int").alias("parent_partition"),
        F.col("parent_key.offset").cast("long").alias("parent_offset"),
        F.col("wait_ms").cast("long").alias("wait_ms"),
        (F.col("link") == INFERRED).alias("inferred"))
    rows = node_rows.unionByName(link_rows)
    group = F.col("trace_id")
    if joined:
        groups = spark.createDataFrame(list(joined.items()), "trace_id string, group string")
        rows = rows.join(F.broadcast(groups), "trace_id", "left")
        group = F.coalesce("group", "trace_id")
    walked = rows.repartition(partitions, group).select(
        "trace_id", "topic", "partition", "offset", "event_ms", "parents_lost",
        "lost_reasons", *null).mapInArrow(_walk_partitions, from_arrow_schema(_walk_schema()))
    return walked.select(
        "trace_id", _key("root_").alias("root"), _key("leaf_").alias("leaf"), "start_ms",
        "end_ms", (F.col("end_ms") - F.col("start_ms")).alias("duration_ms"), "topics",
        F.array_join("topics", " > ").alias("path"), F.size("topics").alias("hop_count"),
        "max_wait_ms", "inferred_edges", "parents_lost",
        F.array_sort("lost_reasons").alias("lost_reasons"),
        (F.col("parents_lost") > 0).alias("incomplete"), "lost_root")
