"""The JSON summary: the small aggregates the report is drawn from, collected to the driver.

Everything in it is bounded by the number of topics, edges, pathways, time buckets and the
`top` setting, never by the number of records.
"""

from __future__ import annotations

import time
from datetime import UTC
from typing import TYPE_CHECKING, Any

from pipeline.config import PipelineConfig
from pipeline.flows import (
    HISTOGRAM_BOUNDS_MS,
    Tables,
    edge_histograms,
    edge_percentiles_over_time,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _rows(df: DataFrame, order: list[str] | None = None) -> list[dict[str, Any]]:
    if order:
        df = df.orderBy(*order)
    return [row.asDict(recursive=True) for row in df.collect()]


def _rollup(audit: list[dict[str, Any]], key: str, top: int) -> list[dict[str, Any]]:
    totals: dict[Any, list[int]] = {}
    for row in audit:
        t = totals.setdefault(row[key], [0, 0])
        t[0] += row["records"]
        t[1] += row["bytes"] or 0
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0] is None, str(kv[0])))
    return [{key: k, "records": r, "bytes": b} for k, (r, b) in ranked[:top]]


def _flag_counts(df: DataFrame) -> dict[str, int]:
    """How many rows, and how many are broken, stopped, slow and open (flows or branches)."""
    from pyspark.sql import functions as F

    flags = ("broken", "stopped", "slow", "open")
    row = df.agg(F.count(F.lit(1)).alias("total"),
                 *[F.sum(F.col(f).cast("long")).alias(f) for f in flags]).first().asDict()
    return {k: int(v or 0) for k, v in row.items()}


def summarize(tables: Tables, config: PipelineConfig) -> dict[str, Any]:
    from pyspark.sql import functions as F

    # One pass over the hops for everything per topic and partition.
    offsets = _rows(tables.hops.groupBy("topic", "partition").agg(
        F.min("offset").alias("first"), F.max("offset").alias("last"),
        F.count(F.lit(1)).alias("records"),
        F.sum(F.col("trace_id").isNull().cast("long")).alias("untraced"),
        F.sum("size").alias("bytes"),
    ), ["topic", "partition"])
    by_topic: dict[str, dict[str, Any]] = {}
    for o in offsets:
        t = by_topic.setdefault(o["topic"], {"topic": o["topic"], "records": 0, "untraced": 0,
                                             "bytes": 0})
        t["records"] += o["records"]
        t["untraced"] += o.pop("untraced")  # kept per topic only
        t["bytes"] += o.pop("bytes") or 0
    total = sum(t["records"] for t in by_topic.values())
    untraced = sum(t["untraced"] for t in by_topic.values())

    flows = tables.flows
    counts = _flag_counts(flows)
    counts["complete"] = counts["total"] - counts["broken"] - counts["open"]
    branches = tables.branches
    branch_counts = _flag_counts(branches)
    evidence = {r["evidence"]: r["count"]
                for r in _rows(tables.links.groupBy("evidence").count())}
    links = {"linked": evidence.get("header", 0),
             "inferred": evidence.get("fetch", 0) + evidence.get("time", 0),
             "inferred_by_fetch": evidence.get("fetch", 0),
             "inferred_by_time": evidence.get("time", 0),
             "unresolved": tables.unresolved.count()}

    edges = _rows(tables.edges, ["from_topic", "to_topic"])
    hist: dict[tuple[str, str], list[int]] = {}
    for row in _rows(edge_histograms(tables.links)):
        counts_of = hist.setdefault((row["from_topic"], row["to_topic"]),
                                    [0] * (len(HISTOGRAM_BOUNDS_MS) + 1))
        counts_of[row["bucket"]] = row["count"]
    for edge in edges:
        edge["histogram"] = hist.get((edge["from_topic"], edge["to_topic"]), [])

    broken = _rows(
        branches.where("broken").orderBy(F.desc("start_ms"), "trace_id", "path", "leaf")
        .limit(config.top)
        .select("trace_id", "path", "last_topic", "start_ms", "duration_ms", "max_wait_ms",
                "stopped", "slow", "inferred_edges")
    )
    audit = [dict(r, hour_ms=int(r["hour"].replace(tzinfo=UTC).timestamp() * 1000))
             for r in _rows(tables.audit)]
    by_hour: dict[int, list[int]] = {}
    for r in audit:
        h = by_hour.setdefault(r["hour_ms"], [0, 0])
        h[0] += r["records"]
        h[1] += r["bytes"] or 0
    return {
        "generated_ms": int(time.time() * 1000),
        "config": {
            "topics": config.topics, "terminal_topics": config.terminal_topics,
            "max_wait_ms": config.max_wait_ms, "time_source": config.time_source,
            "time_bucket_s": config.time_bucket_s,
        },
        "records": {"total": total, "traced": total - untraced, "untraced": untraced,
                    "by_topic": [by_topic[t] for t in sorted(by_topic)]},
        "offsets": offsets,
        "flows": counts,
        "branches": branch_counts,
        "links": links,
        "edges": edges,
        "histogram_bounds_ms": list(HISTOGRAM_BOUNDS_MS),
        "pathways": _rows(tables.pathways, ["path"]),
        "over_time": _rows(edge_percentiles_over_time(tables.links, config.time_bucket_s),
                           ["from_topic", "to_topic", "bucket_ms"]),
        "broken_branches": broken,
        "transit": ([] if tables.transit is None
                    else _rows(tables.transit.orderBy("topic", F.col("group").asc_nulls_last()))),
        "lag": ([] if tables.lag is None
                else _rows(tables.lag.orderBy("topic", F.col("group").asc_nulls_last(),
                                              "bucket_ms"))),
        "audit": {
            "by_client_id": _rollup(audit, "client_id", config.top),
            "by_principal": _rollup(audit, "principal", config.top),
            "by_origin": _rollup(audit, "origin", config.top),
            "by_hour": [{"hour_ms": h, "records": r, "bytes": b}
                        for h, (r, b) in sorted(by_hour.items())],
        },
    }
