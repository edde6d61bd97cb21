"""The merged aggregates as the batch job's tables (same columns, same order, percentiles from
the sketches), redrawn after each micro-batch and written over the previous ones as Parquet:
`edges/`, `pathways/`, `audit/`, and with a `fetch_topic` `transit/` and `lag/`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.flows import MIXED
from pipeline.graph import INFERRED, LINKED
from pipeline.sketch import Sketch
from pipeline.stream.aggregates import Aggregates

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Rows = list[dict[str, Any]]

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


@dataclass(frozen=True)
class AggregateRows:
    """The tables' rows, each a dict of the batch job's columns (`audit` by `hour_ms`)."""

    edges: Rows
    pathways: Rows
    audit: Rows
    transit: Rows
    lag: Rows


def stats(sketch: Sketch) -> dict[str, Any]:
    """A table's latency columns from a sketch: count, percentiles, max."""
    return {"count": sketch.count, "p50_ms": sketch.quantile(0.5),
            "p90_ms": sketch.quantile(0.9), "p99_ms": sketch.quantile(0.99),
            "max_ms": None if sketch.max is None else int(sketch.max)}


def _link_kind(linked: int, inferred: int) -> str:
    return LINKED if inferred == 0 else INFERRED if linked == 0 else MIXED


def _group_order(row: dict[str, Any]) -> tuple:
    """Batch's order: by topic, then group with no group last."""
    return (row["topic"], row["group"] is None, row["group"] or "")


def aggregate_tables(agg: Aggregates) -> AggregateRows:
    """The merged aggregates as the batch job's rows."""
    edges = [{"from_topic": a, "to_topic": b, **stats(e.sketch),  # type: ignore[arg-type]
              "linked": e.linked, "inferred": e.inferred,
              "link": _link_kind(e.linked, e.inferred), "incomplete": e.incomplete or 0}
             for (a, b), e in sorted(agg.edges.items())]
    pathways = [{"path": path, **stats(p.sketch),  # type: ignore[arg-type]
                 "broken": p.broken, "inferred": p.inferred, "incomplete": p.incomplete or 0}
                for path, p in sorted(agg.pathways.items())]
    audit = [{"hour_ms": hour_ms, "client_id": client, "principal": principal,
              "origin": origin, **a.to_json()}
             for (hour_ms, client, principal, origin), a in agg.audit.items()]
    transit = [{"topic": topic, "group": group, **stats(t.sketch), "consumers": t.consumers}
               for (topic, group), t in agg.transit.items() if t.sketch is not None]
    lag = [{"topic": topic, "group": group, "bucket_ms": bucket_ms, "fetches": sk.count,
            "p50_s": sk.quantile(0.5) / 1000, "max_s": sk.max / 1000}  # type: ignore[operator]
           for (topic, group, bucket_ms), sk in agg.lag.items()]
    transit.sort(key=_group_order)
    lag.sort(key=lambda r: (*_group_order(r), r["bucket_ms"]))
    return AggregateRows(edges, pathways, audit, transit, lag)


def write_aggregate_tables(spark: SparkSession, out: Path, rows: AggregateRows,
                           fetches: bool = False) -> None:
    """The merged tables as Parquet, with the batch job's columns; `transit/` and `lag/`
    with `fetches` (a `fetch_topic`), as batch writes them."""
    from pyspark.sql import functions as F

    tables = [("edges", rows.edges, EDGE_SCHEMA), ("pathways", rows.pathways, PATHWAY_SCHEMA)]
    if fetches:
        tables += [("transit", rows.transit, TRANSIT_SCHEMA), ("lag", rows.lag, LAG_SCHEMA)]
    for name, data, schema in tables:
        spark.createDataFrame(data, schema).coalesce(1).write.mode("overwrite").parquet(
            str(out / name))
    audit = spark.createDataFrame(rows.audit, AUDIT_SCHEMA)
    audit.select(F.timestamp_millis("hour_ms").alias("hour"), "client_id", "principal",
                 "origin", "records", "bytes", "untraced").coalesce(1).write.mode(
        "overwrite").parquet(str(out / "audit"))
