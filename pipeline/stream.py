"""The continuous stream: hops held per trace in Spark's state store until their flow is
finished, the finished flows analysed by the batch job's own functions, and the aggregates
merged micro-batch by micro-batch (docs/pipeline.md, "Streaming").

Why this shape. A flow spans micro-batches, so per-flow results cannot be appended as records
arrive; recomputing everything after each micro-batch costs O(all hops) per batch. Instead:

1. **Hold** (`applyInPandasWithState`, event-time timeout, keyed by a hash bucket of the trace
   id so that one call decides for many traces: `pipeline.flow_hold`). A flow's hops
   stay in the state store until the event-time watermark (latest hop time seen minus
   `stream.watermark_s`) passes its last hop time plus `stream.flow_gap_s`; then the flow is
   *finalised*: its hops are emitted together, and a small tombstone remembers the trace for
   `stream.late_retention_s` so that a hop arriving for it afterwards is recognised as *late*
   (emitted apart, status `late`, counted, never merged into the finalised figures). Hops
   behind the watermark itself are dropped by Spark before they reach the state and counted
   by Spark (`numRowsDroppedByWatermark`). Untraced records take no part in any flow and go
   straight through.
2. **Bound.** A flow that grows past `stream.max_flow_hops`, or whose first hop is older than
   the watermark by `stream.max_flow_age_s`, is finalised at once (status `evicted`, counted).
   So the state holds at most the flows of the last `flow_gap_s + watermark_s` of event time
   (each of at most `max_flow_hops` hops), plus tombstones of a few numbers each.
3. **Analyse** (`foreachBatch`). The hops emitted by a micro-batch are exactly the finalised
   flows; `pipeline.flows.analyze`, the batch job's code, builds their graph, branches and
   flows. So the stream and the batch share one definition of the causal graph. Links,
   branches, flows and hops are written per micro-batch (`<table>/batch_id=N/`, overwritten
   if Spark replays the batch).
4. **Merge.** Counts add exactly; latency percentiles merge as sketches (`pipeline.sketch`,
   relative error <= `stream.accuracy` against the batch job's exact ones). The merged
   aggregates after batch N are one small JSON file (`aggregates/N.json`), built from
   batch N-1's file and batch N's rows, so a replayed batch rebuilds the same file instead of
   adding twice. Edges, pathways, audit, the summary and the report are redrawn from it.

A micro-batch therefore costs time proportional to the records it brought and the flows it
finalised, plus the small aggregates; never to all hops so far.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import PipelineConfig
from pipeline.flow_hold import (
    EVICTED,
    FINAL,
    LATE,
    UNTRACED,
    Bucket,
    HoldRules,
    empty_bucket,
    hold,
)
from pipeline.flows import HISTOGRAM_BOUNDS_MS, MIXED, analyze
from pipeline.graph import INFERRED, LINKED
from pipeline.hops import HOP_COLUMNS, to_hops
from pipeline.report import write_report
from pipeline.sketch import Sketch, bucket_column, sign_column

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.streaming.state import GroupState

HELD_COLUMNS = [c for c in HOP_COLUMNS if c != "event_time"]
EMITTED_SCHEMA = (
    "trace_id string, parent_span string, topic string, partition int, offset long, "
    "timestamp_ms long, timestamp_type string, herald_time_ms long, client_id string, "
    "principal string, origin string, message_id string, size long, parents string, "
    "event_ms long, status string, watermark_ms long, "
    "bucket int, held_hops long, held_flows long, tombstones long")
EMITTED_TYPES = dict(c.split() for c in EMITTED_SCHEMA.split(", "))
STATE_SCHEMA = "bucket binary"
STATE = "state"  # one row per call: the bucket's size after it (held hops, flows, tombstones)
UNTRACED_BUCKET = -1  # untraced records: no flow, straight through
PARENTS_SCHEMA = "array<struct<topic:string,partition:int,offset:long>>"
KEEP_AGGREGATES = 3  # files of merged aggregates kept (the newest is the one that counts)


def hold_rules(config: PipelineConfig) -> HoldRules:
    s = config.stream
    return HoldRules(gap_ms=int(s.flow_gap_s * 1000), max_age_ms=int(s.max_flow_age_s * 1000),
                     retention_ms=int(s.late_retention_s * 1000), max_hops=s.max_flow_hops)


def hold_flows(config: PipelineConfig) -> Any:
    """The per-bucket function of `applyInPandasWithState` (the module's steps 1 and 2; the
    rules are `pipeline.flow_hold.hold`'s)."""
    rules = hold_rules(config)

    def emit(df: pd.DataFrame, status: str, watermark: int) -> pd.DataFrame:
        out = df[HELD_COLUMNS].copy()
        out["status"] = status
        out["watermark_ms"] = watermark
        return _with_all_columns(out)

    def sizes(bucket: int, kept: Bucket | None, watermark: int) -> pd.DataFrame:
        import pandas as pd

        held = 0 if kept is None else len(kept.held)
        flows = 0 if kept is None or not held else kept.held["trace_id"].nunique()
        tombs = 0 if kept is None else len(kept.tomb_ids)
        return _with_all_columns(pd.DataFrame({
            "status": [STATE], "watermark_ms": [watermark], "bucket": [bucket],
            "held_hops": [held], "held_flows": [flows], "tombstones": [tombs]}))

    def step(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState
             ) -> Iterator[pd.DataFrame]:
        import pandas as pd

        watermark = max(state.getCurrentWatermarkMs(), 0)
        new = None if state.hasTimedOut else pd.concat(list(frames), ignore_index=True)
        if key[0] == UNTRACED_BUCKET:
            if new is not None and len(new):
                yield emit(new, UNTRACED, watermark)
            return
        bucket = pickle.loads(state.get[0]) if state.exists else empty_bucket(HELD_COLUMNS)
        done = hold(bucket, None if new is None else new[HELD_COLUMNS], watermark, rules)
        for rows, status in done.emitted:
            yield emit(rows, status, watermark)
        if done.bucket is None:
            state.remove()
        else:
            state.update((pickle.dumps(done.bucket, protocol=5),))
            state.setTimeoutTimestamp(done.bucket.timeout(rules))
        yield sizes(key[0], done.bucket, watermark)

    return step


def _with_all_columns(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with every column of `EMITTED_SCHEMA`, in its order; a missing one is null (as a
    nullable integer column where the schema wants a number, so Arrow keeps the type)."""
    import pandas as pd

    for name, kind in EMITTED_TYPES.items():
        if name not in df.columns:
            df[name] = (pd.array([None] * len(df), dtype="Int64") if kind in ("long", "int")
                        else None)
    return df[list(EMITTED_TYPES)]


def held_stream(spark: SparkSession, config: PipelineConfig, records: DataFrame) -> DataFrame:
    """Kafka rows → hops → the stateful hold, keyed by a hash bucket of the trace id
    (`pipeline.flow_hold` says why); emits hops of finalised flows (and late and untraced
    ones) with their `status`, and one `state` row per bucket it ran for."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    hops = to_hops(records, config).withColumn("parents", F.to_json("parents"))
    bucket = (F.when(F.col("trace_id").isNull(), F.lit(UNTRACED_BUCKET))
              .otherwise(F.pmod(F.xxhash64("trace_id"), F.lit(config.stream.state_buckets)))
              .cast("int"))
    delay = f"{int(config.stream.watermark_s * 1000)} milliseconds"
    return (hops.withColumn("state_key", bucket).withWatermark("event_time", delay)
            .groupBy("state_key")
            .applyInPandasWithState(hold_flows(config), EMITTED_SCHEMA, STATE_SCHEMA,
                                    "append", GroupStateTimeout.EventTimeTimeout))


# --- merging ---------------------------------------------------------------------------------

def _empty_aggregates() -> dict[str, Any]:
    return {"batch_id": -1, "offsets": {}, "flows": {}, "branches": {}, "links": {},
            "edges": {}, "pathways": {}, "over_time": {}, "broken_branches": [], "audit": {},
            "stream": {"finalized_flows": 0, "evicted_flows": 0, "evicted_hops": 0,
                       "late_hops": 0, "untraced": 0, "watermark_ms": None, "buckets": {}}}


def _add(into: dict[str, Any], key: str, counts: dict[str, int]) -> None:
    row = into.setdefault(key, {})
    for k, v in counts.items():
        row[k] = row.get(k, 0) + int(v or 0)


def _sketch_of(entry: dict[str, Any], accuracy: float) -> Sketch:
    return Sketch.from_json(entry["sketch"]) if "sketch" in entry else Sketch(accuracy)


def status_counts(emitted: DataFrame) -> list[dict[str, Any]]:
    """Per status of the emitted rows: rows, distinct traces and the watermark."""
    from pyspark.sql import functions as F

    return [r.asDict() for r in emitted.groupBy("status").agg(
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
        if r["status"] == LATE:
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

    for name, df in (("flows", tables.flows), ("branches", tables.branches)):
        flags = ("broken", "stopped", "slow", "open")
        row = df.agg(F.count(F.lit(1)).alias("total"),
                     *[F.sum(F.col(f).cast("long")).alias(f) for f in flags]).first().asDict()
        _add(agg, name, row)
    for r in tables.links.groupBy("evidence").count().collect():
        _add(agg, "links", {r["evidence"]: r["count"]})
    _add(agg, "links", {"unresolved": tables.unresolved.count()})

    hist = F.lit(len(HISTOGRAM_BOUNDS_MS))
    for i in reversed(range(len(HISTOGRAM_BOUNDS_MS))):
        hist = F.when(F.col("wait_ms") <= HISTOGRAM_BOUNDS_MS[i], F.lit(i)).otherwise(hist)
    bucket_ms = config.time_bucket_s * 1000
    edge_rows = tables.links.groupBy(
        "parent_topic", "topic", "link",
        (F.floor(F.col("event_ms") / bucket_ms) * bucket_ms).alias("t"),
        hist.alias("h"), sign_column("wait_ms").alias("s"),
        bucket_column("wait_ms", acc).alias("b"),
    ).agg(F.count(F.lit(1)).alias("n"), F.min("wait_ms").alias("lo"),
          F.max("wait_ms").alias("hi")).collect()
    for r in edge_rows:
        key = f"{r['parent_topic']}\0{r['topic']}"
        e = agg["edges"].setdefault(key, {"linked": 0, "inferred": 0,
                                          "histogram": [0] * (len(HISTOGRAM_BOUNDS_MS) + 1)})
        e[r["link"]] += r["n"]
        e["histogram"][r["h"]] += r["n"]
        for entry in (e, agg["over_time"].setdefault(f"{key}\0{r['t']}", {})):
            sk = _sketch_of(entry, acc)
            sk.add_bucket(r["s"], r["b"], r["n"], r["lo"], r["hi"])
            entry["sketch"] = sk.to_json()

    for r in tables.branches.groupBy(
            "path", sign_column("duration_ms").alias("s"),
            bucket_column("duration_ms", acc).alias("b")
    ).agg(F.count(F.lit(1)).alias("n"), F.min("duration_ms").alias("lo"),
          F.max("duration_ms").alias("hi"), F.sum(F.col("broken").cast("long")).alias("broken"),
          F.sum((F.col("inferred_edges") > 0).cast("long")).alias("inferred")).collect():
        p = agg["pathways"].setdefault(r["path"], {"broken": 0, "inferred": 0})
        p["broken"] += r["broken"]
        p["inferred"] += r["inferred"]
        sk = _sketch_of(p, acc)
        sk.add_bucket(r["s"], r["b"], r["n"], r["lo"], r["hi"])
        p["sketch"] = sk.to_json()

    broken = [r.asDict(recursive=True) for r in tables.branches.where("broken").orderBy(
        F.desc("start_ms"), "trace_id", "path", "leaf").limit(config.top).select(
        "trace_id", "path", "last_topic", "start_ms", "duration_ms", "max_wait_ms", "stopped",
        "slow", "inferred_edges", "leaf").collect()]
    both = agg["broken_branches"] + broken
    both.sort(key=lambda b: (-b["start_ms"], b["trace_id"], b["path"], _leaf_key(b["leaf"])))
    agg["broken_branches"] = both[:config.top]


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
                      "link": _link_kind(e["linked"], e["inferred"])})
    pathways = [{"path": path, **_stats(Sketch.from_json(p["sketch"])), "broken": p["broken"],
                 "inferred": p["inferred"]} for path, p in sorted(agg["pathways"].items())]
    audit = []
    for key, a in agg["audit"].items():
        hour_ms, client, principal, origin = json.loads(key)
        audit.append({"hour_ms": hour_ms, "client_id": client, "principal": principal,
                      "origin": origin, **a})
    return {"edges": edges, "pathways": pathways, "audit": audit}


EDGE_SCHEMA = ("from_topic string, to_topic string, count long, p50_ms double, p90_ms double, "
               "p99_ms double, max_ms long, linked long, inferred long, link string")
PATHWAY_SCHEMA = ("path string, count long, p50_ms double, p90_ms double, p99_ms double, "
                  "max_ms long, broken long, inferred long")
AUDIT_SCHEMA = ("hour_ms long, client_id string, principal string, origin string, "
                "records long, bytes long, untraced long")


def summary_of(agg: dict[str, Any], rows: dict[str, list[dict[str, Any]]],
               config: PipelineConfig, progress: dict[str, Any] | None) -> dict[str, Any]:
    """The summary (same keys as the batch job's) from the merged aggregates."""
    import time

    from pipeline.summary import _rollup

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
    links = {"linked": ev.get("header", 0), "inferred": ev.get("fetch", 0) + ev.get("time", 0),
             "inferred_by_fetch": ev.get("fetch", 0), "inferred_by_time": ev.get("time", 0),
             "unresolved": ev.get("unresolved", 0)}
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
        "edges": edges, "histogram_bounds_ms": list(HISTOGRAM_BOUNDS_MS),
        "pathways": rows["pathways"], "over_time": over_time, "broken_branches": broken,
        "transit": [], "lag": [],
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


def each_batch(spark: SparkSession, config: PipelineConfig) -> Any:
    """The `foreachBatch` function: analyse the finalised flows, merge, write (steps 3, 4)."""
    from pyspark.sql import functions as F

    out = Path(config.output)
    agg_dir = out / "aggregates"
    agg_dir.mkdir(parents=True, exist_ok=True)

    def run(emitted: DataFrame, batch_id: int) -> None:
        emitted = (emitted.withColumn("parents", F.from_json("parents", PARENTS_SCHEMA))
                   .withColumn("event_time", F.timestamp_millis("event_ms"))).localCheckpoint()
        part = f"batch_id={batch_id}"
        statuses = status_counts(emitted)
        sizes = state_sizes(emitted)
        hops = emitted.where(F.col("status").isin(FINAL, EVICTED, UNTRACED)).select(*HOP_COLUMNS)
        hops.write.mode("overwrite").parquet(str(out / "hops" / part))
        if any(r["status"] == LATE for r in statuses):  # a replay brings the same rows
            emitted.where(F.col("status") == LATE).select(*HOP_COLUMNS).write.mode(
                "overwrite").parquet(str(out / "late" / part))
        hops = spark.read.parquet(str(out / "hops" / part))
        tables = analyze(hops, config)
        tables.branches = tables.branches.cache()
        try:
            for name in ("links", "branches", "flows"):
                getattr(tables, name).write.mode("overwrite").parquet(str(out / name / part))
            agg = _latest_aggregates(agg_dir, batch_id)
            merge_batch(agg, tables, statuses, config, sizes)
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
                r["status"]: r["n"] for r in statuses if r["status"] != STATE}}) + "\n")
        rows = aggregate_tables(agg)
        write_aggregate_tables(spark, out, rows)
        summary = summary_of(agg, rows, config, last_progress(out))
        (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
        write_report(summary, out / "report.html")

    return run


def write_aggregate_tables(spark: SparkSession, out: Path,
                           rows: dict[str, list[dict[str, Any]]]) -> None:
    from pyspark.sql import functions as F

    for name, schema in (("edges", EDGE_SCHEMA), ("pathways", PATHWAY_SCHEMA)):
        spark.createDataFrame(rows[name], schema).coalesce(1).write.mode("overwrite").parquet(
            str(out / name))
    audit = spark.createDataFrame(rows["audit"], AUDIT_SCHEMA)
    audit.select(F.timestamp_millis("hour_ms").alias("hour"), "client_id", "principal",
                 "origin", "records", "bytes", "untraced").coalesce(1).write.mode(
        "overwrite").parquet(str(out / "audit"))


# Output folder of each running query (by query id, which the checkpoint keeps across
# restarts), for the one listener of the session.
_OUTPUTS: dict[str, Path] = {}


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
            with _progress_path(out).open("a") as f:
                f.write(json.dumps(progress_record(event.progress)) + "\n")

        def onQueryIdle(self, event: Any) -> None:
            pass

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
    known = Path(config.stream.checkpoint) / "metadata"  # a restart keeps its query id
    if known.exists():
        _OUTPUTS[str(json.loads(known.read_text().splitlines()[0])["id"])] = out
    records = read_stream(spark, config)
    writer = (held_stream(spark, config, records).writeStream
              .foreachBatch(each_batch(spark, config))
              .option("checkpointLocation", config.stream.checkpoint))
    if config.stream.trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.stream.interval_s} seconds")
    query = writer.start()
    _OUTPUTS[str(query.id)] = out
    return query
