"""The continuous stream: hops held per trace in Spark's state store until their flow is
finished, the finished flows analysed by the batch job's own functions, and the aggregates
merged micro-batch by micro-batch (docs/pipeline.md, "Streaming").

Why this shape. A flow spans micro-batches, so per-flow results cannot be appended as records
arrive; recomputing everything after each micro-batch costs O(all hops) per batch. Instead:

1. **Hold** (`applyInPandasWithState`, keyed by `key`, event-time timeout). A hop's key is a
   hash bucket of its trace id, so that one call decides for many traces (`pipeline.flow_hold`,
   which says why). A flow's hops stay in the state store until the event-time watermark (latest
   event time seen minus `stream.watermark_s`) passes its last hop time plus
   `stream.flow_gap_s`; then the flow is *finalised*: its hops are emitted together, and a small
   tombstone remembers the trace for `stream.late_retention_s` so that a hop arriving for it
   afterwards is recognised as *late* (emitted apart, status `late`, counted, never merged into
   the finalised figures). Rows behind the watermark itself are dropped by Spark before they
   reach the state and counted by Spark (`numRowsDroppedByWatermark`). Untraced records take no
   part in any flow and go straight through.
2. **Bound.** A flow that grows past `stream.max_flow_hops`, or whose first hop is older than
   the watermark by `stream.max_flow_age_s`, is finalised at once (status `evicted`, counted).
   So the state holds at most the flows of the last `flow_gap_s + watermark_s` of event time
   (each of at most `max_flow_hops` hops), plus tombstones of a few numbers each.
3. **Observations** (with `fetch_topic`). The fetch topic is a second Kafka source, unioned
   with the hops before the watermark, so one watermark covers both (an observation's event
   time is its fetch time). Each traced observation is held with its trace's hops (kind
   `fetch`) and emitted with the finalised flow: the evidence `links_of` infers from, exactly
   the observations batch would match (same trace, fetched before the child). One arriving
   for a finalised trace is dropped and counted (`late_fetches`); a trace that only ever had
   observations emits nothing. Transit and lag need every record and fetch of a partition in
   time order, across flows: a join of observations to hops would have to keep or read again
   every hop. So each hop also has a twin row keyed by its partition (`\x00topic\x00p`, which
   no hex trace id equals) carrying only its time, each observation of a topic read a row with
   the same key, and that partition's state (`pipeline.fetch_clock`) keeps the record times
   and fetches above the watermark, the running newest record time and, per reader, the
   offsets counted (merged ranges). As the watermark passes, it releases them in time order:
   each reader's first fetch of a record with its transit (`f - h`) and lag. An observation
   without `h` (or any under `time_source: broker`) cannot be measured so: it is counted
   (`no_record_time`) and left to batch.
4. **Analyse** (`foreachBatch`). The hops emitted by a micro-batch are exactly the finalised
   flows; `pipeline.flows.analyze`, the batch job's code, builds their graph, branches and
   flows. So the stream and the batch share one definition of the causal graph. Links,
   branches, flows and hops are written per micro-batch (`<table>/batch_id=N/`, overwritten
   if Spark replays the batch).
5. **Merge.** Counts add exactly; latency percentiles merge as sketches (`pipeline.sketch`,
   relative error <= `stream.accuracy` against the batch job's exact ones). The merged
   aggregates after batch N are one small JSON file (`aggregates/N.json`), built from
   batch N-1's file and batch N's rows, so a replayed batch rebuilds the same file instead of
   adding twice. Edges, pathways, audit, transit, lag, the summary and the report are redrawn
   from it.

6. **Serve.** The merged aggregates of each micro-batch also go to the Prometheus exporter
   (`pipeline.stream_metrics`), which serves them from the driver when scraped.

A micro-batch therefore costs time proportional to the records and observations it brought
and the flows it finalised, plus the small aggregates; never to all hops so far.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import PipelineConfig
from pipeline.fetch_clock import add, new_clock, next_due, release
from pipeline.flow_hold import (
    EVICTED,
    FINAL,
    HOP,
    LATE,
    UNTRACED,
    Bucket,
    HoldRules,
    empty_bucket,
    hold,
)
from pipeline.flows import HISTOGRAM_BOUNDS_MS, MIXED, analyze, histogram_index
from pipeline.graph import INFERRED, LINKED
from pipeline.hops import HOP_COLUMNS, to_hops
from pipeline.report import write_report
from pipeline.sketch import Sketch, bucket_column, sign_column
from pipeline.stream_metrics import StreamCollector, exporter_for
from pipeline.summary import BROKEN_COLUMNS, tally
from protocol.contracts import fetch_log

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.streaming.state import GroupState

# Statuses of what a partition's clock emits: a reader's first fetch of a record (with its
# transit and lag), a later fetch of it (its consumer only), an observation without `h`.
TRANSIT, DUPLICATE, NO_RECORD_TIME = "transit", "duplicate", "no_record_time"
FETCH, CLOCK = "fetch", "clock"  # kinds of the operator's rows, besides `hop`
PARTITION_KEY = "\x00"  # starts every partition clock's key; no trace id (hex) can
HELD_COLUMNS = [c for c in HOP_COLUMNS if c != "event_time"] + [
    "kind", "consumer", "consumer_host", "group", "record_ms"]
EMITTED_SCHEMA = (
    "trace_id string, parent_span string, topic string, partition int, offset long, "
    "timestamp_ms long, timestamp_type string, herald_time_ms long, client_id string, "
    "principal string, origin string, message_id string, size long, parents string, "
    "parents_lost long, lost_reasons string, source_host string, "
    "event_ms long, kind string, consumer string, consumer_host string, `group` string, "
    "record_ms long, "
    "transit_ms long, lag_ms long, status string, watermark_ms long, "
    "bucket int, held_hops long, held_flows long, tombstones long")
EMITTED_TYPES = {c.split()[0].strip("`"): c.split()[1] for c in EMITTED_SCHEMA.split(", ")}
EMITTED_COLUMNS = list(EMITTED_TYPES)
STATE_SCHEMA = "blob binary"  # a bucket (`flow_hold.Bucket`) or a partition's clock, pickled
STATE = "state"  # one row per bucket call: the bucket's size after it

PARENTS_SCHEMA = "array<struct<topic:string,partition:int,offset:long>>"
JSON_COLUMNS = {"parents": PARENTS_SCHEMA, "lost_reasons": "array<string>"}  # arrays held as JSON
TRACE_ID_RE = "^[0-9a-f]{32}$"
KEEP_AGGREGATES = 3  # files of merged aggregates kept (the newest is the one that counts)


def _emit(df: pd.DataFrame, status: str, watermark: int) -> pd.DataFrame:
    out = df[HELD_COLUMNS].copy()
    out["status"] = status
    out["watermark_ms"] = watermark
    return _with_all_columns(out)


def _with_all_columns(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with every column of `EMITTED_SCHEMA`, in its order; a missing one is null (as a
    nullable integer column where the schema wants a number, so Arrow keeps the type)."""
    import pandas as pd

    for name, kind in EMITTED_TYPES.items():
        if name not in df.columns:
            df[name] = (pd.array([None] * len(df), dtype="Int64") if kind in ("long", "int")
                        else None)
    return df[EMITTED_COLUMNS]


def _reads_frame(reads: list, topic: str, partition: int, watermark: int) -> pd.DataFrame:
    """A partition clock's released reads (`fetch_clock.Read`) as emitted rows."""
    import pandas as pd

    out = pd.DataFrame({c: [None] * len(reads) for c in EMITTED_COLUMNS})
    out["topic"], out["partition"], out["kind"] = topic, partition, FETCH
    out["offset"] = [r.offset for r in reads]
    out["event_ms"] = [r.fetched_ms for r in reads]
    out["group"] = [r.group for r in reads]
    out["consumer"] = [r.consumer for r in reads]
    out["record_ms"] = [r.record_ms for r in reads]
    out["transit_ms"] = [r.transit_ms for r in reads]
    out["lag_ms"] = [r.lag_ms for r in reads]
    out["status"] = [TRANSIT if r.first else DUPLICATE for r in reads]
    out["watermark_ms"] = watermark
    return _with_all_columns(out)


def tick_partition(key: str, frames: Iterator[pd.DataFrame], state: GroupState,
                   watermark: int) -> Iterator[pd.DataFrame]:
    """One partition's clock (`pipeline.fetch_clock`): queue its record times and
    observations, release what the watermark passed, wake up again at the earliest queued
    time. The state is never removed: it holds the offsets each reader has counted."""
    import pandas as pd

    _, topic, partition = key.split(PARTITION_KEY)
    clock = pickle.loads(state.get[0]) if state.exists else new_clock()
    if not state.hasTimedOut:
        new = pd.concat(list(frames), ignore_index=True)
        obs = new[new["kind"] == FETCH]
        timed = obs[obs["record_ms"].notna()]
        if len(timed) < len(obs):  # counted, and left to batch: see the module
            yield _emit(obs[obs["record_ms"].isna()], NO_RECORD_TIME, watermark)
        add(clock, new.loc[new["kind"] == CLOCK, "event_ms"].astype("int64").tolist(),
            zip(timed["event_ms"].astype("int64").tolist(),
                timed["offset"].astype("int64").tolist(), timed["group"].tolist(),
                timed["consumer"].tolist(), timed["record_ms"].astype("int64").tolist(),
                strict=True))
    reads = release(clock, watermark)
    if reads:
        yield _reads_frame(reads, topic, int(partition), watermark)
    state.update((pickle.dumps(clock, protocol=5),))
    due = next_due(clock)
    if due is not None:
        state.setTimeoutTimestamp(max(due, watermark, 1))


def hold_rules(config: PipelineConfig) -> HoldRules:
    st = config.stream
    return HoldRules(gap_ms=int(st.flow_gap_s * 1000), max_age_ms=int(st.max_flow_age_s * 1000),
                     retention_ms=int(st.late_retention_s * 1000), max_hops=st.max_flow_hops)


def _sizes(bucket: int, kept: Bucket | None, watermark: int) -> pd.DataFrame:
    """A bucket's `state` row: hops and flows it holds, and its tombstones."""
    import pandas as pd

    held = kept.held if kept is not None else None
    hops = held[held["kind"] == HOP] if held is not None else None
    return _with_all_columns(pd.DataFrame({
        "status": [STATE], "watermark_ms": [watermark], "bucket": [bucket],
        "held_hops": [0 if hops is None else len(hops)],
        "held_flows": [0 if hops is None else hops["trace_id"].nunique()],
        "tombstones": [0 if kept is None else len(kept.tomb_ids)]}))


def hold_flows(config: PipelineConfig) -> Any:
    """The per-key function of `applyInPandasWithState` (see the module's steps 1 to 3): a
    bucket of traces, whose hops and observations are held until each flow is final
    (`pipeline.flow_hold.hold`); untraced hops, passed through; or a partition's clock."""
    rules = hold_rules(config)

    def step(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState
             ) -> Iterator[pd.DataFrame]:
        import pandas as pd

        watermark = max(state.getCurrentWatermarkMs(), 0)
        if key[0] is not None and key[0].startswith(PARTITION_KEY):
            yield from tick_partition(key[0], frames, state, watermark)
            return
        new = None if state.hasTimedOut else pd.concat(list(frames), ignore_index=True)
        if key[0] is None:  # untraced: no flow to hold
            if new is not None and len(new):
                yield _emit(new, UNTRACED, watermark)
            return
        bucket = pickle.loads(state.get[0]) if state.exists else empty_bucket(HELD_COLUMNS)
        done = hold(bucket, None if new is None else new[HELD_COLUMNS], watermark, rules)
        for rows, status in done.emitted:
            yield _emit(rows, status, watermark)
        if done.bucket is None:
            state.remove()
        else:
            state.update((pickle.dumps(done.bucket, protocol=5),))
            state.setTimeoutTimestamp(max(done.bucket.timeout(rules), 1))
        yield _sizes(int(key[0]), done.bucket, watermark)

    return step


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
    and such observations are counted, not measured."""
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


# --- merging ---------------------------------------------------------------------------------

def _empty_aggregates() -> dict[str, Any]:
    return {"batch_id": -1, "offsets": {}, "flows": {}, "branches": {}, "links": {},
            "incomplete": {}, "edges": {}, "pathways": {}, "over_time": {},
            "broken_branches": [], "audit": {},
            "transit": {}, "lag": {},
            "stream": {"finalized_flows": 0, "evicted_flows": 0, "evicted_hops": 0,
                       "late_hops": 0, "untraced": 0, "late_fetches": 0,
                       "no_record_time": 0, "watermark_ms": None, "buckets": {}}}


def _add(into: dict[str, Any], key: str, counts: dict[str, Any]) -> None:
    """Add `counts` (numbers, or dicts of them, nested) to `into[key]`."""
    row = into.setdefault(key, {})
    for k, v in counts.items():
        if isinstance(v, dict):
            _add(row, k, v)
        else:
            row[k] = row.get(k, 0) + int(v or 0)


def _sketch_of(entry: dict[str, Any], accuracy: float) -> Sketch:
    return Sketch.from_json(entry["sketch"]) if "sketch" in entry else Sketch(accuracy)


def status_counts(emitted: DataFrame) -> list[dict[str, Any]]:
    """Per kind and status of the emitted rows: rows, distinct traces and the watermark."""
    from pyspark.sql import functions as F

    return [r.asDict() for r in emitted.groupBy("kind", "status").agg(
        F.count(F.lit(1)).alias("n"), F.max("watermark_ms").alias("wm"),
        F.countDistinct("trace_id").alias("traces")).collect()]


def state_sizes(emitted: DataFrame) -> list[dict[str, Any]]:
    """The `state` rows of a micro-batch: each bucket the hold ran for, with what it keeps."""
    from pyspark.sql import functions as F

    return [r.asDict() for r in emitted.where(F.col("status") == STATE).select(
        "bucket", "held_hops", "held_flows", "tombstones").collect()]


def merge_batch(agg: dict[str, Any], tables: Any, statuses: list[dict[str, Any]],
                config: PipelineConfig, sizes: list[dict[str, Any]] = ()) -> None:
    """Add one micro-batch's finalised flows (`tables`, from `analyze`), its emitted rows
    (`statuses`, from `status_counts`) and the sizes of the buckets it touched (`sizes`, from
    `state_sizes`) to the merged aggregates, in place. Every figure is a sum, a min/max or a
    sketch, so all merge exactly; a bucket's size replaces the one it had."""
    from pyspark.sql import functions as F

    acc = config.stream.accuracy
    st = agg["stream"]
    held = st.setdefault("buckets", {})
    for r in sizes:
        counts = [r["held_hops"], r["held_flows"], r["tombstones"]]
        if any(counts):
            held[str(r["bucket"])] = counts
        else:
            held.pop(str(r["bucket"]), None)
    for r in statuses:
        if r["status"] == STATE:
            pass
        elif r["kind"] != HOP:  # observations: only the ones no flow or clock took count
            counter = {LATE: "late_fetches", NO_RECORD_TIME: "no_record_time"}.get(r["status"])
            if counter:
                st[counter] = st.get(counter, 0) + r["n"]
        elif r["status"] == LATE:
            st["late_hops"] += r["n"]
        elif r["status"] == EVICTED:
            st["evicted_hops"] += r["n"]
            st["evicted_flows"] += r["traces"]
        elif r["status"] == FINAL:
            st["finalized_flows"] += r["traces"]
        elif r["status"] == UNTRACED:
            st["untraced"] += r["n"]
        if r["wm"] is not None:
            st["watermark_ms"] = max(st["watermark_ms"] or 0, r["wm"])

    hops = tables.hops
    for r in hops.groupBy("topic", "partition").agg(
            F.min("offset").alias("first"), F.max("offset").alias("last"),
            F.count(F.lit(1)).alias("records"),
            F.sum(F.col("trace_id").isNull().cast("long")).alias("untraced"),
            F.sum("size").alias("bytes")).collect():
        o = agg["offsets"].setdefault(f"{r['topic']}\0{r['partition']}", {
            "topic": r["topic"], "partition": r["partition"], "first": r["first"],
            "last": r["last"], "records": 0, "untraced": 0, "bytes": 0})
        o["first"], o["last"] = min(o["first"], r["first"]), max(o["last"], r["last"])
        for k in ("records", "untraced", "bytes"):
            o[k] += int(r[k] or 0)
    for r in tables.audit.select(F.unix_millis("hour").alias("hour_ms"), "client_id",
                                 "principal", "origin", "records", "bytes", "untraced"
                                 ).collect():
        key = json.dumps([r["hour_ms"], r["client_id"], r["principal"], r["origin"]])
        _add(agg["audit"], key, {"records": r["records"], "bytes": r["bytes"],
                                 "untraced": r["untraced"]})

    tallies = tally(tables)
    _add(agg, "flows", tallies.flows)
    _add(agg, "branches", tallies.branches)
    _add(agg, "links", {**tallies.evidence, "unresolved": tallies.unresolved})
    _add(agg, "incomplete", tallies.incomplete)

    bucket_ms = config.time_bucket_s * 1000
    edge_rows = tables.links.groupBy(
        "parent_topic", "topic", "link",
        (F.floor(F.col("event_ms") / bucket_ms) * bucket_ms).alias("t"),
        histogram_index("wait_ms").alias("h"), sign_column("wait_ms").alias("s"),
        bucket_column("wait_ms", acc).alias("b"),
    ).agg(F.count(F.lit(1)).alias("n"), F.min("wait_ms").alias("lo"),
          F.max("wait_ms").alias("hi"), F.sum("wait_ms").alias("total"),
          F.sum(F.col("incomplete").cast("long")).alias("incomplete")).collect()
    for r in edge_rows:
        key = f"{r['parent_topic']}\0{r['topic']}"
        e = agg["edges"].setdefault(key, {"linked": 0, "inferred": 0})
        e[r["link"]] += r["n"]
        e["incomplete"] = e.get("incomplete", 0) + r["incomplete"]
        _add_histogram(e, r)
        for entry in (e, agg["over_time"].setdefault(f"{key}\0{r['t']}", {})):
            sk = _sketch_of(entry, acc)
            sk.add_bucket(r["s"], r["b"], r["n"], r["lo"], r["hi"])
            entry["sketch"] = sk.to_json()

    for r in tables.branches.groupBy(
            "path", histogram_index("duration_ms").alias("h"),
            sign_column("duration_ms").alias("s"), bucket_column("duration_ms", acc).alias("b")
    ).agg(F.count(F.lit(1)).alias("n"), F.min("duration_ms").alias("lo"),
          F.max("duration_ms").alias("hi"), F.sum(F.col("broken").cast("long")).alias("broken"),
          F.sum((F.col("inferred_edges") > 0).cast("long")).alias("inferred"),
          F.sum(F.col("incomplete").cast("long")).alias("incomplete"),
          F.sum("duration_ms").alias("total")).collect():
        p = agg["pathways"].setdefault(r["path"], {"broken": 0, "inferred": 0})
        for k in ("broken", "inferred", "incomplete"):
            p[k] = p.get(k, 0) + r[k]
        _add_histogram(p, r)
        sk = _sketch_of(p, acc)
        sk.add_bucket(r["s"], r["b"], r["n"], r["lo"], r["hi"])
        p["sketch"] = sk.to_json()

    broken = [r.asDict(recursive=True) for r in tables.branches.where("broken").orderBy(
        F.desc("start_ms"), "trace_id", "path", "leaf").limit(config.top).select(
        *BROKEN_COLUMNS, "leaf").collect()]
    both = agg["broken_branches"] + broken
    both.sort(key=lambda b: (-b["start_ms"], b["trace_id"], b["path"], _leaf_key(b["leaf"])))
    agg["broken_branches"] = both[:config.top]


def merge_reads(agg: dict[str, Any], emitted: DataFrame, config: PipelineConfig) -> None:
    """Add one micro-batch's released reads (the partition clocks' rows) to the merged
    transit and lag, in place: per (topic, group) the consumers (of every read, as batch's
    `transit_of` collects them) and a sketch of the first reads' transit; per (topic, group,
    bucket of the fetch time) a sketch of their lag. Counts and maxima are the sketches'
    exact ones."""
    from pyspark.sql import functions as F

    acc = config.stream.accuracy
    transit, lag = agg.setdefault("transit", {}), agg.setdefault("lag", {})
    reads = emitted.where(F.col("status").isin(TRANSIT, DUPLICATE))
    for r in reads.groupBy("topic", "group").agg(
            F.collect_set("consumer").alias("consumers")).collect():
        e = transit.setdefault(json.dumps([r["topic"], r["group"]]), {"consumers": []})
        e["consumers"] = sorted(set(e["consumers"]) | set(r["consumers"]))
    first = emitted.where(F.col("status") == TRANSIT)
    for r in first.groupBy("topic", "group", sign_column("transit_ms").alias("s"),
                           bucket_column("transit_ms", acc).alias("b")).agg(
            F.count(F.lit(1)).alias("n"), F.min("transit_ms").alias("lo"),
            F.max("transit_ms").alias("hi")).collect():
        _add_bucket(transit.setdefault(json.dumps([r["topic"], r["group"]]),
                                       {"consumers": []}), r, acc)
    bucket_ms = config.time_bucket_s * 1000
    for r in first.groupBy("topic", "group",
                           (F.floor(F.col("event_ms") / bucket_ms) * bucket_ms).alias("t"),
                           sign_column("lag_ms").alias("s"),
                           bucket_column("lag_ms", acc).alias("b")).agg(
            F.count(F.lit(1)).alias("n"), F.min("lag_ms").alias("lo"),
            F.max("lag_ms").alias("hi")).collect():
        _add_bucket(lag.setdefault(json.dumps([r["topic"], r["group"], int(r["t"])]), {}),
                    r, acc)


def _add_histogram(entry: dict[str, Any], r: Any) -> None:
    """Add a row's `n` values to `entry`'s fixed-bound histogram (bucket `h`,
    `HISTOGRAM_BOUNDS_MS`) and their exact sum (`total`), which Prometheus histograms need.
    An entry merged before it kept them (aggregates of an older version: a `sketch` but no
    `sum_ms`) never gets a sum, and its histogram stays short of the sketch's count; the
    exporter leaves out what it cannot state exactly."""
    new = "sketch" not in entry
    hist = entry.setdefault("histogram", [0] * (len(HISTOGRAM_BOUNDS_MS) + 1))
    hist[r["h"]] += r["n"]
    if new or "sum_ms" in entry:
        entry["sum_ms"] = entry.get("sum_ms", 0) + int(r["total"] or 0)


def _add_bucket(entry: dict[str, Any], r: Any, accuracy: float) -> None:
    sk = _sketch_of(entry, accuracy)
    sk.add_bucket(r["s"], r["b"], r["n"], r["lo"], r["hi"])
    entry["sketch"] = sk.to_json()


def _leaf_key(leaf: dict[str, Any]) -> tuple:
    return (leaf["topic"], leaf["partition"], leaf["offset"])


def _stats(sketch: Sketch) -> dict[str, Any]:
    return {"count": sketch.count, "p50_ms": sketch.quantile(0.5),
            "p90_ms": sketch.quantile(0.9), "p99_ms": sketch.quantile(0.99),
            "max_ms": None if sketch.max is None else int(sketch.max)}


def _link_kind(linked: int, inferred: int) -> str:
    return LINKED if inferred == 0 else INFERRED if linked == 0 else MIXED


def aggregate_tables(agg: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The merged aggregates as the batch job's edges, pathways and audit rows (same
    columns), percentiles from the sketches."""
    edges = []
    for key, e in sorted(agg["edges"].items()):
        a, b = key.split("\0")
        edges.append({"from_topic": a, "to_topic": b, **_stats(Sketch.from_json(e["sketch"])),
                      "linked": e["linked"], "inferred": e["inferred"],
                      "link": _link_kind(e["linked"], e["inferred"]),
                      "incomplete": e.get("incomplete", 0)})
    pathways = [{"path": path, **_stats(Sketch.from_json(p["sketch"])), "broken": p["broken"],
                 "inferred": p["inferred"], "incomplete": p.get("incomplete", 0)}
                for path, p in sorted(agg["pathways"].items())]
    audit = []
    for key, a in agg["audit"].items():
        hour_ms, client, principal, origin = json.loads(key)
        audit.append({"hour_ms": hour_ms, "client_id": client, "principal": principal,
                      "origin": origin, **a})
    return {"edges": edges, "pathways": pathways, "audit": audit, **fetch_tables(agg)}


def _group_order(row: dict[str, Any]) -> tuple:
    """Batch's order: by topic, then group with no group last."""
    return (row["topic"], row["group"] is None, row["group"] or "")


def fetch_tables(agg: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The merged transit and lag as the batch job's rows (same columns and order)."""
    transit = []
    for key, e in agg.get("transit", {}).items():
        if "sketch" in e:
            topic, group = json.loads(key)
            transit.append({"topic": topic, "group": group,
                            **_stats(Sketch.from_json(e["sketch"])),
                            "consumers": e["consumers"]})
    lag = []
    for key, e in agg.get("lag", {}).items():
        topic, group, bucket_ms = json.loads(key)
        sk = Sketch.from_json(e["sketch"])
        lag.append({"topic": topic, "group": group, "bucket_ms": bucket_ms,
                    "fetches": sk.count, "p50_s": sk.quantile(0.5) / 1000,
                    "max_s": sk.max / 1000})
    transit.sort(key=_group_order)
    lag.sort(key=lambda r: (*_group_order(r), r["bucket_ms"]))
    return {"transit": transit, "lag": lag}


EDGE_SCHEMA = ("from_topic string, to_topic string, count long, p50_ms double, p90_ms double, "
               "p99_ms double, max_ms long, linked long, inferred long, link string, "
               "incomplete long")
PATHWAY_SCHEMA = ("path string, count long, p50_ms double, p90_ms double, p99_ms double, "
                  "max_ms long, broken long, inferred long, incomplete long")
AUDIT_SCHEMA = ("hour_ms long, client_id string, principal string, origin string, "
                "records long, bytes long, untraced long")
TRANSIT_SCHEMA = ("topic string, `group` string, count long, p50_ms double, p90_ms double, "
                  "p99_ms double, max_ms long, consumers array<string>")
LAG_SCHEMA = ("topic string, `group` string, bucket_ms long, fetches long, p50_s double, "
              "max_s double")


def summary_of(agg: dict[str, Any], rows: dict[str, list[dict[str, Any]]],
               config: PipelineConfig, progress: dict[str, Any] | None) -> dict[str, Any]:
    """The summary (same keys as the batch job's) from the merged aggregates."""
    import time

    from pipeline.summary import _rollup, incomplete_of, link_counts

    offsets = sorted(({k: v for k, v in o.items() if k not in ("untraced", "bytes")}
                      for o in agg["offsets"].values()),
                     key=lambda o: (o["topic"], o["partition"]))
    by_topic: dict[str, dict[str, Any]] = {}
    for o in agg["offsets"].values():
        t = by_topic.setdefault(o["topic"], {"topic": o["topic"], "records": 0, "untraced": 0,
                                             "bytes": 0})
        for k in ("records", "untraced", "bytes"):
            t[k] += o[k]
    total = sum(t["records"] for t in by_topic.values())
    untraced = sum(t["untraced"] for t in by_topic.values())
    flows = {k: agg["flows"].get(k, 0) for k in ("total", "broken", "stopped", "slow", "open")}
    flows["complete"] = flows["total"] - flows["broken"] - flows["open"]
    branches = {k: agg["branches"].get(k, 0)
                for k in ("total", "broken", "stopped", "slow", "open")}
    ev = agg["links"]
    links = link_counts(ev, ev.get("unresolved", 0))
    incomplete = incomplete_of(agg.get("incomplete", {}), rows["edges"], rows["pathways"])
    edges = []
    for e in rows["edges"]:
        key = f"{e['from_topic']}\0{e['to_topic']}"
        edges.append({**e, "histogram": agg["edges"][key]["histogram"]})
    over_time = []
    for key, entry in sorted(agg["over_time"].items()):
        a, b, t = key.split("\0")
        over_time.append({"from_topic": a, "to_topic": b, "bucket_ms": int(t),
                          **_stats(Sketch.from_json(entry["sketch"]))})
    over_time.sort(key=lambda r: (r["from_topic"], r["to_topic"], r["bucket_ms"]))
    by_hour: dict[int, list[int]] = {}
    for r in rows["audit"]:
        h = by_hour.setdefault(r["hour_ms"], [0, 0])
        h[0] += r["records"]
        h[1] += r["bytes"] or 0
    broken = [{k: v for k, v in b.items() if k != "leaf"} for b in agg["broken_branches"]]
    return {
        "generated_ms": int(time.time() * 1000),
        "mode": "stream",
        "last_batch_id": agg["batch_id"],
        "config": {"topics": config.topics, "terminal_topics": config.terminal_topics,
                   "max_wait_ms": config.max_wait_ms, "time_source": config.time_source,
                   "time_bucket_s": config.time_bucket_s},
        "records": {"total": total, "traced": total - untraced, "untraced": untraced,
                    "by_topic": [by_topic[t] for t in sorted(by_topic)]},
        "offsets": offsets, "flows": flows, "branches": branches, "links": links,
        "incomplete": incomplete,
        "edges": edges, "histogram_bounds_ms": list(HISTOGRAM_BOUNDS_MS),
        "pathways": rows["pathways"], "over_time": over_time, "broken_branches": broken,
        "transit": rows["transit"], "lag": rows["lag"],
        "audit": {
            "by_client_id": _rollup(rows["audit"], "client_id", config.top),
            "by_principal": _rollup(rows["audit"], "principal", config.top),
            "by_origin": _rollup(rows["audit"], "origin", config.top),
            "by_hour": [{"hour_ms": h, "records": r, "bytes": b}
                        for h, (r, b) in sorted(by_hour.items())],
        },
        "watermark_ms": agg["stream"]["watermark_ms"],
        "stream": {**{k: v for k, v in agg["stream"].items() if k != "buckets"},
                   **held_totals(agg), "accuracy": config.stream.accuracy,
                   "state": (progress or {}).get("state")},
    }


def held_totals(agg: dict[str, Any]) -> dict[str, int]:
    """What the state holds, over every bucket: hops and flows waiting, tombstones."""
    buckets = agg["stream"].get("buckets", {}).values()
    return {name: sum(b[i] for b in buckets)
            for i, name in enumerate(("held_hops", "held_flows", "tombstones"))}


def _latest_aggregates(folder: Path, before: int) -> dict[str, Any]:
    """The merged aggregates of the newest batch before `before` (a replayed batch starts
    again from its predecessor's, so it cannot count twice)."""
    ids = sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit()
                 and int(p.stem) < before)
    if not ids:
        return _empty_aggregates()
    return json.loads((folder / f"{ids[-1]}.json").read_text())


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(path)  # atomic: a crash leaves the old file or the new one


def _progress_path(out: Path) -> Path:
    return out / "progress.jsonl"


def last_progress(out: Path) -> dict[str, Any] | None:
    """The newest line of `progress.jsonl`, read from the end (the file grows by one line per
    micro-batch; a micro-batch must not read all of it)."""
    path = _progress_path(out)
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - 65536))
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    return json.loads(lines[-1]) if lines else None


def progress_record(progress: Any) -> dict[str, Any]:
    """What the stream keeps of Spark's progress of one micro-batch: input rows, the state
    operator's rows and memory, rows dropped behind the watermark, durations."""
    data = json.loads(progress.json) if hasattr(progress, "json") else progress
    ops = data.get("stateOperators") or []
    state = None
    if ops:
        state = {k: sum(int(o.get(k) or 0) for o in ops) for k in (
            "numRowsTotal", "numRowsUpdated", "numRowsRemoved", "memoryUsedBytes",
            "numRowsDroppedByWatermark")}
    return {"batch_id": data.get("batchId"), "input_rows": data.get("numInputRows"),
            "duration_ms": data.get("durationMs", {}).get("triggerExecution"),
            "watermark": (data.get("eventTime") or {}).get("watermark"),
            "timestamp": data.get("timestamp"), "state": state}


def each_batch(spark: SparkSession, config: PipelineConfig,
               metrics: StreamCollector | None = None) -> Any:
    """The `foreachBatch` function: analyse the finalised flows, merge, write (steps 4, 5);
    the merged aggregates go to `metrics` (`pipeline.stream_metrics`) too."""
    from pyspark.sql import functions as F

    out = Path(config.output)
    agg_dir = out / "aggregates"
    agg_dir.mkdir(parents=True, exist_ok=True)

    def run(emitted: DataFrame, batch_id: int) -> None:
        for name, schema in JSON_COLUMNS.items():
            emitted = emitted.withColumn(name, F.from_json(name, schema))
        emitted = emitted.withColumn("event_time", F.timestamp_millis("event_ms")
                                     ).localCheckpoint()
        part = f"batch_id={batch_id}"
        statuses = status_counts(emitted)
        sizes = state_sizes(emitted)
        is_hop = F.col("kind") == HOP
        hops = emitted.where(is_hop & (F.col("status") != LATE)).select(*HOP_COLUMNS)
        hops.write.mode("overwrite").parquet(str(out / "hops" / part))
        if any(r["kind"] == HOP and r["status"] == LATE for r in statuses):
            # a replay brings the same rows
            emitted.where(is_hop & (F.col("status") == LATE)).select(*HOP_COLUMNS).write.mode(
                "overwrite").parquet(str(out / "late" / part))
        hops = spark.read.parquet(str(out / "hops" / part))
        fetches = None
        if config.fetch_topic:  # the finalised flows' observations: evidence, as in batch
            fetches = emitted.where((F.col("kind") == FETCH)
                                    & F.col("status").isin(FINAL, EVICTED)).select(
                "topic", "partition", "offset", "consumer", "consumer_host", "group",
                F.col("event_ms").alias("fetched_ms"))
        tables = analyze(hops, config, fetches=fetches, transit=False)
        tables.branches = tables.branches.cache()
        try:
            for name in ("links", "branches", "flows"):
                getattr(tables, name).write.mode("overwrite").parquet(str(out / name / part))
            agg = _latest_aggregates(agg_dir, batch_id)
            merge_batch(agg, tables, statuses, config, sizes)
            if any(r["status"] in (TRANSIT, DUPLICATE) for r in statuses):
                merge_reads(agg, emitted, config)
        finally:
            tables.branches.unpersist()
            tables.unpersist()
        agg["batch_id"] = batch_id
        _write_json(agg_dir / f"{batch_id}.json", agg)
        done = sorted(int(p.stem) for p in agg_dir.glob("*.json") if p.stem.isdigit())
        for old in done[:-KEEP_AGGREGATES]:
            (agg_dir / f"{old}.json").unlink(missing_ok=True)
        with (out / "batches.jsonl").open("a") as f:  # the hold's side of each micro-batch
            f.write(json.dumps({"batch_id": batch_id, **held_totals(agg), "emitted": {
                f"{r['kind']}:{r['status']}": r["n"] for r in statuses
                if r["status"] != STATE}}) + "\n")
        rows = aggregate_tables(agg)
        write_aggregate_tables(spark, out, rows, bool(config.fetch_topic))
        summary = summary_of(agg, rows, config, last_progress(out))
        (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
        write_report(summary, out / "report.html")
        if metrics is not None:
            metrics.publish(agg)

    return run


def write_aggregate_tables(spark: SparkSession, out: Path,
                           rows: dict[str, list[dict[str, Any]]], fetches: bool = False
                           ) -> None:
    """The merged tables as Parquet, with the batch job's columns; `transit/` and `lag/`
    with `fetches` (a `fetch_topic`), as batch writes them."""
    from pyspark.sql import functions as F

    tables = [("edges", EDGE_SCHEMA), ("pathways", PATHWAY_SCHEMA)]
    if fetches:
        tables += [("transit", TRANSIT_SCHEMA), ("lag", LAG_SCHEMA)]
    for name, schema in tables:
        spark.createDataFrame(rows[name], schema).coalesce(1).write.mode("overwrite").parquet(
            str(out / name))
    audit = spark.createDataFrame(rows["audit"], AUDIT_SCHEMA)
    audit.select(F.timestamp_millis("hour_ms").alias("hour"), "client_id", "principal",
                 "origin", "records", "bytes", "untraced").coalesce(1).write.mode(
        "overwrite").parquet(str(out / "audit"))


# Output folder and metrics of each running query (by query id, which the checkpoint keeps
# across restarts), for the one listener of the session.
_OUTPUTS: dict[str, Path] = {}
_METRICS: dict[str, StreamCollector] = {}


def progress_listener() -> Any:
    """A listener appending each micro-batch's progress (`progress_record`) to its query's
    `<output>/progress.jsonl`: the state size and per-batch work over the run."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            out = _OUTPUTS.get(str(event.progress.id))
            if out is None:
                return
            record = progress_record(event.progress)
            with _progress_path(out).open("a") as f:
                f.write(json.dumps(record) + "\n")
            if str(event.progress.id) in _METRICS:
                _METRICS[str(event.progress.id)].on_progress(record)

        def onQueryIdle(self, event: Any) -> None:
            if str(event.id) in _METRICS:
                _METRICS[str(event.id)].on_idle()

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Listener()


def start_stream(spark: SparkSession, config: PipelineConfig) -> StreamingQuery:
    """Start the streaming job; the caller waits on (or stops) the returned query."""
    from pipeline.jobs import read_stream

    if not config.stream.checkpoint:
        raise ValueError("pipeline.stream.checkpoint: required for the stream")
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    if not getattr(spark, "_herald_listener", False):
        spark.streams.addListener(progress_listener())
        spark._herald_listener = True  # type: ignore[attr-defined]
    exporter = exporter_for(config)
    metrics = exporter.collector if exporter is not None else None
    known = Path(config.stream.checkpoint) / "metadata"  # a restart keeps its query id
    if known.exists():
        _register(str(json.loads(known.read_text().splitlines()[0])["id"]), out, metrics)
    records = read_stream(spark, config)
    writer = (held_stream(spark, config, records).writeStream
              .foreachBatch(each_batch(spark, config, metrics))
              .option("checkpointLocation", config.stream.checkpoint))
    if config.stream.trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.stream.interval_s} seconds")
    query = writer.start()
    _register(str(query.id), out, metrics)
    return query


def _register(query_id: str, out: Path, metrics: StreamCollector | None) -> None:
    _OUTPUTS[query_id] = out
    if metrics is not None:
        _METRICS[query_id] = metrics
    else:
        _METRICS.pop(query_id, None)
