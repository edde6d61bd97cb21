"""The merged aggregates as the batch job's tables (same columns, same order, percentiles from
the sketches), redrawn after each micro-batch and written over the previous ones as Parquet:
`edges/`, `pathways/`, `audit/`, and with a `fetch_topic` `transit/` and `lag/`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from pipeline.flows import MIXED
from pipeline.graph import INFERRED, LINKED
from pipeline.sketch import Sketch
from pipeline.stream.aggregates import Aggregates

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no types: Any here

Rows = list[dict[str, Any]]

# The batch job's columns and types of each merged table (`audit` with `hour_ms` in place of
# its `hour`, which is written as a UTC timestamp).
LATENCY = [("count", "int64"), ("p50_ms", "float64"), ("p90_ms", "float64"),
           ("p99_ms", "float64"), ("max_ms", "int64")]
EDGE_COLUMNS = [("from_topic", "string"), ("to_topic", "string"), *LATENCY,
                ("linked", "int64"), ("inferred", "int64"), ("link", "string"),
                ("incomplete", "int64")]
PATHWAY_COLUMNS = [("path", "string"), *LATENCY, ("broken", "int64"), ("inferred", "int64"),
                   ("incomplete", "int64")]
AUDIT_COLUMNS = [("hour_ms", "timestamp"), ("client_id", "string"), ("principal", "string"),
                 ("origin", "string"), ("records", "int64"), ("bytes", "int64"),
                 ("untraced", "int64")]
TRANSIT_COLUMNS = [("topic", "string"), ("group", "string"), *LATENCY,
                   ("consumers", "strings")]
LAG_COLUMNS = [("topic", "string"), ("group", "string"), ("bucket_ms", "int64"),
               ("fetches", "int64"), ("p50_s", "float64"), ("max_s", "float64")]


@dataclass(frozen=True)
class AggregateRows:
    """The tables' rows, each a dict of the batch job's columns (`audit` by `hour_ms`)."""

    edges: Rows
    pathways: Rows
    audit: Rows
    transit: Rows
    lag: Rows


class LatencyStats(TypedDict):
    """A table's latency columns (`LATENCY`); a percentile or max of no values is None."""

    count: int
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    max_ms: int | None


def stats(sketch: Sketch) -> LatencyStats:
    """A table's latency columns from a sketch: count, percentiles, max."""
    return {"count": sketch.count, "p50_ms": sketch.quantile(0.5),
            "p90_ms": sketch.quantile(0.9), "p99_ms": sketch.quantile(0.99),
            "max_ms": None if sketch.max is None else int(sketch.max)}


def _merged(sketch: Sketch | None) -> Sketch:
    """An edge's or a pathway's sketch: every merged one has values (`merge._add_to_entry`)."""
    assert sketch is not None, "a merged edge or pathway without a sketch"
    return sketch


def _seconds(ms: float | None) -> float:
    """A lag sketch's figure in seconds: a merged lag sketch holds its fetches' lags."""
    assert ms is not None, "an empty lag sketch"
    return ms / 1000


def _link_kind(linked: int, inferred: int) -> str:
    return LINKED if inferred == 0 else INFERRED if linked == 0 else MIXED


def _group_order(row: dict[str, Any]) -> tuple[str, bool, str]:
    """Batch's order: by topic, then group with no group last."""
    return (row["topic"], row["group"] is None, row["group"] or "")


def aggregate_tables(agg: Aggregates) -> AggregateRows:
    """The merged aggregates as the batch job's rows."""
    edges = [{"from_topic": a, "to_topic": b, **stats(_merged(e.sketch)),
              "linked": e.linked, "inferred": e.inferred,
              "link": _link_kind(e.linked, e.inferred), "incomplete": e.incomplete or 0}
             for (a, b), e in sorted(agg.edges.items())]
    pathways = [{"path": path, **stats(_merged(p.sketch)),
                 "broken": p.broken, "inferred": p.inferred, "incomplete": p.incomplete or 0}
                for path, p in sorted(agg.pathways.items())]
    audit = [{"hour_ms": hour_ms, "client_id": client, "principal": principal,
              "origin": origin, **a.to_json()}
             for (hour_ms, client, principal, origin), a in agg.audit.items()]
    transit = [{"topic": topic, "group": group, **stats(t.sketch), "consumers": t.consumers}
               for (topic, group), t in agg.transit.items() if t.sketch is not None]
    lag = [{"topic": topic, "group": group, "bucket_ms": bucket_ms, "fetches": sk.count,
            "p50_s": _seconds(sk.quantile(0.5)), "max_s": _seconds(sk.max)}
           for (topic, group, bucket_ms), sk in agg.lag.items()]
    transit.sort(key=_group_order)
    lag.sort(key=lambda r: (*_group_order(r), r["bucket_ms"]))
    return AggregateRows(edges, pathways, audit, transit, lag)


def _arrow_type(kind: str) -> pa.DataType:
    import pyarrow as pa

    return {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(),
            "timestamp": pa.timestamp("ms", tz="UTC"), "strings": pa.list_(pa.string())}[kind]


def write_table(folder: Path, rows: Rows, columns: list[tuple[str, str]]) -> None:
    """`rows` as one Parquet file in `folder`, replacing what was there. Written on the
    driver with Arrow, not with Spark: the merged tables are a few hundred rows, and a Spark
    write is a job of its own (its scheduling costs more than the rows) in every
    micro-batch. Spark reads the folder as it reads its own; `hour_ms` becomes `hour`."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]  # untyped, as pyarrow is

    names = ["hour" if n == "hour_ms" else n for n, _ in columns]
    schema = pa.schema([pa.field(name, _arrow_type(kind))
                        for name, (_, kind) in zip(names, columns, strict=True)])
    table = pa.table({name: pa.array([r[n] for r in rows], type=_arrow_type(kind))
                      for name, (n, kind) in zip(names, columns, strict=True)}, schema=schema)
    fresh = folder.with_name(f".{folder.name}.new")
    stale = folder.with_name(f".{folder.name}.old")
    for leftover in (fresh, stale):
        shutil.rmtree(leftover, ignore_errors=True)
    fresh.mkdir(parents=True)
    pq.write_table(table, fresh / "part-00000.parquet")
    (fresh / "_SUCCESS").touch()
    if folder.exists():
        folder.rename(stale)
    fresh.rename(folder)
    shutil.rmtree(stale, ignore_errors=True)


def write_aggregate_tables(out: Path, rows: AggregateRows, fetches: bool = False) -> None:
    """The merged tables as Parquet, with the batch job's columns; `transit/` and `lag/`
    with `fetches` (a `fetch_topic`), as batch writes them."""
    tables = [("edges", rows.edges, EDGE_COLUMNS), ("pathways", rows.pathways, PATHWAY_COLUMNS),
              ("audit", rows.audit, AUDIT_COLUMNS)]
    if fetches:
        tables += [("transit", rows.transit, TRANSIT_COLUMNS), ("lag", rows.lag, LAG_COLUMNS)]
    for name, data, columns in tables:
        write_table(out / name, data, columns)
