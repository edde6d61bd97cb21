"""The JSON summary: the small aggregates the report is drawn from, collected to the driver.

Everything in it is bounded by the number of topics, edges, pathways, time buckets and the
`top` setting, never by the number of records.

The batch job collects its figures from its tables in Spark (`summarize`), the stream from
its merged aggregates (`pipeline.stream.summary`); both hand them to `summary_from`, so every
part the two share is shaped by one function, and the stream's summary differs from batch's
only by what it adds of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from pipeline.config import PipelineConfig
from pipeline.flows import (
    HISTOGRAM_BOUNDS_MS,
    Tables,
    edge_histograms,
    edge_percentiles_over_time,
)
from pipeline.graph import FETCH_EVIDENCE, HEADER, LOST_REASONS, TIME, evidence_counts
from pipeline.summary_shape import (
    Audit,
    AuditTableRow,
    BrokenBranch,
    Edge,
    EdgeKey,
    EdgeRow,
    FlagCounts,
    FlowCounts,
    Incomplete,
    Lag,
    Links,
    LossCounts,
    Mode,
    OffsetRange,
    OverTime,
    PartitionCounts,
    Pathway,
    Records,
    Summary,
    SummaryConfig,
    TopicRecords,
    Transit,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


BROKEN_COLUMNS = ("trace_id", "path", "last_topic", "start_ms", "duration_ms", "max_wait_ms",
                  "stopped", "slow", "inferred_edges", "incomplete", "lost_reasons")
"""What the summary lists of each broken branch."""

Producer = Literal["client_id", "principal", "origin"]  # the audit columns producers rank by


def _rows(df: DataFrame, order: list[str] | None = None) -> list[dict[str, Any]]:
    if order:
        df = df.orderBy(*order)
    return [row.asDict(recursive=True) for row in df.collect()]


def _rollup(audit: list[AuditTableRow], key: Producer, top: int
            ) -> list[tuple[str | None, int, int]]:
    """The `top` producers by `key`: the value, its records and bytes, most records first."""
    totals: dict[str | None, list[int]] = {}
    for row in audit:
        t = totals.setdefault(row[key], [0, 0])
        t[0] += row["records"]
        t[1] += row["bytes"] or 0
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0] is None, str(kv[0])))
    return [(k, r, b) for k, (r, b) in ranked[:top]]


def audit_of(audit: list[AuditTableRow], top: int) -> Audit:
    """The summary's `audit` from the audit table's rows (their hour as `hour_ms`): the top
    producers by client id, principal and origin, and the records and bytes of each hour."""
    by_hour: dict[int, list[int]] = {}
    for r in audit:
        h = by_hour.setdefault(r["hour_ms"], [0, 0])
        h[0] += r["records"]
        h[1] += r["bytes"] or 0
    return {
        "by_client_id": [{"client_id": k, "records": r, "bytes": b}
                         for k, r, b in _rollup(audit, "client_id", top)],
        "by_principal": [{"principal": k, "records": r, "bytes": b}
                         for k, r, b in _rollup(audit, "principal", top)],
        "by_origin": [{"origin": k, "records": r, "bytes": b}
                      for k, r, b in _rollup(audit, "origin", top)],
        "by_hour": [{"hour_ms": h, "records": r, "bytes": b}
                    for h, (r, b) in sorted(by_hour.items())],
    }


def records_of(partitions: Iterable[PartitionCounts]) -> Records:
    """The summary's `records` from the records, untraced records and bytes read of each
    partition (`topic`): the totals, and per topic."""
    by_topic: dict[str, TopicRecords] = {}
    for o in partitions:
        t = by_topic.setdefault(o["topic"], {"topic": o["topic"], "records": 0, "untraced": 0,
                                             "bytes": 0})
        t["records"] += o["records"]
        t["untraced"] += o["untraced"]
        t["bytes"] += o["bytes"] or 0
    total = sum(t["records"] for t in by_topic.values())
    untraced = sum(t["untraced"] for t in by_topic.values())
    return {"total": total, "traced": total - untraced, "untraced": untraced,
            "by_topic": [by_topic[t] for t in sorted(by_topic)]}


def offsets_of(partitions: Iterable[PartitionCounts]) -> list[OffsetRange]:
    """The summary's `offsets`: each partition's range and records, in partition order (its
    untraced records and bytes are kept per topic only, in `records`)."""
    return sorted(({"topic": o["topic"], "partition": o["partition"], "first": o["first"],
                    "last": o["last"], "records": o["records"]} for o in partitions),
                  key=lambda o: (o["topic"], o["partition"]))


def config_of(config: PipelineConfig) -> SummaryConfig:
    """The settings the summary's figures depend on."""
    return {"topics": config.topics, "terminal_topics": config.terminal_topics,
            "max_wait_ms": config.max_wait_ms, "time_source": config.time_source,
            "time_bucket_s": config.time_bucket_s}


FLAGS = ("broken", "stopped", "slow", "open")
"""The flags counted of flows and of branches."""


def flag_counts(counts: Mapping[str, int]) -> FlagCounts:
    """Flows or branches by flag from a tally's counts. The stream's merged counts lack a
    flag no micro-batch has counted yet: none so far, so 0."""
    return {"total": counts.get("total", 0), "broken": counts.get("broken", 0),
            "stopped": counts.get("stopped", 0), "slow": counts.get("slow", 0),
            "open": counts.get("open", 0)}


def with_complete(flows: FlagCounts) -> FlowCounts:
    """Flow counts with `complete`: neither broken nor still open."""
    return {**flows, "complete": flows["total"] - flows["broken"] - flows["open"]}


@dataclass
class Tallies:
    """The counts the summary takes from a run's tables, in one Spark action per table: the
    batch job's whole run, or one micro-batch's finalised flows, which the stream adds up
    (every figure is a sum over disjoint flows, so the sums equal batch's)."""

    flows: dict[str, int]  # `total` and each of `FLAGS`
    branches: dict[str, int]  # likewise
    evidence: dict[str, int]  # links per `evidence`
    unresolved: int
    incomplete: LossCounts  # what lost parents touched (`incomplete_of` completes it)


def _carrying(reason: str) -> Column:
    """Whether a row's `lost_reasons` hold `reason`. A reason is only declared with a count
    above zero (`pipeline.hops`), so a row carrying one is incomplete."""
    from pyspark.sql import functions as F

    return F.array_contains("lost_reasons", reason)


def _hops_carrying(reason: str) -> Column:
    """How many of a flow's hops carry `reason`."""
    from pyspark.sql import functions as F

    return F.size(F.filter("hops", lambda h: F.array_contains(h["lost_reasons"], reason)))


def _longs(values: dict[str, Any]) -> dict[str, int]:
    return {k: int(v or 0) for k, v in values.items()}


def collect_all(frames: Mapping[str, DataFrame]) -> dict[str, list[dict[str, Any]]]:
    """The rows of several small DataFrames (aggregates) in one Spark action: each row as
    JSON text, all unioned, collected once. Separate actions would each pay a job's
    scheduling, which on small aggregates costs more than the rows; in one action the
    independent aggregates also run side by side. Rows come back as `Row.asDict(recursive=
    True)` gives them (structs as dicts), null fields included; timestamps would come back
    as text, so the frames carry times as milliseconds."""
    import json

    from pyspark.sql import functions as F

    parts = [df.select(F.lit(name).alias("name"), F.to_json(
        F.struct(*df.columns), {"ignoreNullFields": "false"}).alias("row"))
        for name, df in frames.items()]
    if not parts:
        return {}
    union = parts[0]
    for more in parts[1:]:
        union = union.union(more)  # the same two columns each: by position, no resolving
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in frames}
    for r in union.collect():
        rows[r["name"]].append(json.loads(r["row"]))
    return rows


def tally_frames(tables: Tables) -> dict[str, DataFrame]:
    """The aggregates `tally` counts from (`tally_of` reads their rows): one row each for
    flows and branches, one per evidence for links, one for the unresolved hops."""
    from pyspark.sql import functions as F

    def flagged(*more: Column) -> list[Column]:
        return [F.count(F.lit(1)).alias("total"),
                *[F.sum(F.col(f).cast("long")).alias(f) for f in FLAGS],
                F.sum(F.col("incomplete").cast("long")).alias("incomplete"), *more]

    return {
        "tally_flows": tables.flows.agg(*flagged(
            F.sum("incomplete_hops").alias("hops"), F.sum("parents_lost").alias("parents_lost"),
            *[F.sum(_hops_carrying(r)).alias(r) for r in LOST_REASONS])),
        "tally_branches": tables.branches.agg(*flagged(
            F.countDistinct(F.when(F.col("lost_root"), F.col("root"))).alias("roots"),
            *[F.sum(_carrying(r).cast("long")).alias(r) for r in LOST_REASONS])),
        "tally_links": tables.links.groupBy("evidence").agg(
            F.count(F.lit(1)).alias("count"),
            F.sum(F.col("incomplete").cast("long")).alias("incomplete"),
            *[F.sum(_carrying(r).cast("long")).alias(r) for r in LOST_REASONS]),
        "tally_unresolved": tables.unresolved.agg(F.count(F.lit(1)).alias("n")),
    }


def tally_of(rows: Mapping[str, list[dict[str, Any]]]) -> Tallies:
    """`Tallies` from the rows of `tally_frames`."""
    flows = _longs(rows["tally_flows"][0])
    branches = _longs(rows["tally_branches"][0])
    links: dict[str, dict[str, int]] = {}
    for row in rows["tally_links"]:
        values = dict(row)
        evidence = values.pop("evidence")
        links[evidence] = _longs(values)
    incomplete: LossCounts = {
        "hops": flows["hops"], "parents_lost": flows["parents_lost"],
        "roots": branches["roots"], "links": sum(lk["incomplete"] for lk in links.values()),
        "branches": branches["incomplete"], "flows": flows["incomplete"],
        "by_reason": {r: {"hops": flows[r], "links": sum(lk[r] for lk in links.values()),
                          "branches": branches[r]} for r in LOST_REASONS}}
    return Tallies(flows={k: flows[k] for k in ("total", *FLAGS)},
                   branches={k: branches[k] for k in ("total", *FLAGS)},
                   evidence={e: lk["count"] for e, lk in links.items()},
                   unresolved=int(rows["tally_unresolved"][0]["n"]), incomplete=incomplete)


def tally(tables: Tables) -> Tallies:
    """Flows, branches and links counted by flag and evidence, and what lost parents touched:
    incomplete `hops` (traced hops that declare lost parents), `parents_lost` (their sum),
    `roots` (incomplete hops with no parent link: their branches start there, `lost_root`),
    `links` into incomplete hops, incomplete `branches` and `flows`; and `by_reason`, per
    reason, the hops, links and branches that carry it. The loss figures ride on the flag and
    evidence counts (a flow holds its hops with their reasons), and all of it is one Spark
    action (`collect_all`); the stream collects these frames with its other figures."""
    return tally_of(collect_all(tally_frames(tables)))


def link_counts(evidence: Mapping[str, int], unresolved: int) -> Links:
    """The summary's `links` from the number of links per `evidence` (a legacy value counted
    as the one that replaced it, `pipeline.graph.evidence_counts`) and the unresolved hops:
    linked, inferred, inferred by fetch (and by which match, `by_evidence`), by time."""
    evidence = evidence_counts(evidence)
    fetched = sum(evidence.get(e, 0) for e in FETCH_EVIDENCE)
    return {"linked": evidence.get(HEADER, 0),
            "inferred": fetched + evidence.get(TIME, 0),
            "inferred_by_fetch": fetched, "inferred_by_time": evidence.get(TIME, 0),
            "by_evidence": {e: evidence.get(e, 0) for e in (HEADER, *FETCH_EVIDENCE, TIME)},
            "unresolved": unresolved}


def incomplete_of(counts: Mapping[str, Any], edges: list[Edge],
                  pathways: list[Pathway]) -> Incomplete:
    """The summary's `incomplete`: `counts` (`Tallies.incomplete`, or the stream's sum of them,
    which lacks what an aggregate from before a figure was counted never added: 0) with how
    many edges and pathways an incomplete hop or branch touched."""
    by_reason: Mapping[str, Mapping[str, int]] = counts.get("by_reason", {})
    return {
        "hops": counts.get("hops", 0), "parents_lost": counts.get("parents_lost", 0),
        "roots": counts.get("roots", 0), "links": counts.get("links", 0),
        "branches": counts.get("branches", 0), "flows": counts.get("flows", 0),
        "by_reason": {r: {"hops": by_reason.get(r, {}).get("hops", 0),
                          "links": by_reason.get(r, {}).get("links", 0),
                          "branches": by_reason.get(r, {}).get("branches", 0)}
                      for r in LOST_REASONS},
        "edges": sum(1 for e in edges if e["incomplete"]),
        "pathways": sum(1 for p in pathways if p["incomplete"]),
    }


def edges_with_histograms(rows: list[EdgeRow], histograms: Mapping[EdgeKey, list[int] | None]
                          ) -> list[Edge]:
    """The summary's `edges`: each row of the edges table with its histogram (none counted:
    empty)."""
    return [{**e, "histogram": histograms.get((e["from_topic"], e["to_topic"]), [])}
            for e in rows]


@dataclass(frozen=True)
class SummaryFigures:
    """What a job collects for the summary, each figure already final: the batch job's from
    its tables, the stream's from its merged aggregates. The two must give the same summary
    for the same flows, so everything they would otherwise each derive (totals, orders,
    `complete`, the loss counts) is derived once, in `summary_from`, from these."""

    partitions: list[PartitionCounts]
    flows: Mapping[str, int]  # `tally`'s counts, or the stream's sum of them
    branches: Mapping[str, int]
    evidence: Mapping[str, int]
    unresolved: int
    incomplete: Mapping[str, Any]  # `LossCounts`, or the stream's sum of them
    edges: list[EdgeRow]  # in the edges table's order
    histograms: Mapping[EdgeKey, list[int] | None]
    pathways: list[Pathway]  # in the pathways table's order
    over_time: list[OverTime]
    broken_branches: list[BrokenBranch]  # newest first
    transit: list[Transit]  # in the transit table's order
    lag: list[Lag]  # in the lag table's order
    audit: list[AuditTableRow]


def summary_from(figures: SummaryFigures, config: PipelineConfig, mode: Mode,
                 watermark_ms: int | None) -> Summary:
    """The summary both jobs write; the stream adds its own keys to it
    (`pipeline.stream.summary`)."""
    edges = edges_with_histograms(figures.edges, figures.histograms)
    return {
        "generated_ms": int(time.time() * 1000),
        "mode": mode,
        "config": config_of(config),
        "records": records_of(figures.partitions),
        "offsets": offsets_of(figures.partitions),
        "flows": with_complete(flag_counts(figures.flows)),
        "branches": flag_counts(figures.branches),
        "links": link_counts(figures.evidence, figures.unresolved),
        "incomplete": incomplete_of(figures.incomplete, edges, figures.pathways),
        "edges": edges,
        "histogram_bounds_ms": list(HISTOGRAM_BOUNDS_MS),
        "pathways": figures.pathways,
        "over_time": sorted(figures.over_time,
                            key=lambda r: (r["from_topic"], r["to_topic"], r["bucket_ms"])),
        "broken_branches": figures.broken_branches,
        "transit": figures.transit,
        "lag": figures.lag,
        "audit": audit_of(figures.audit, config.top),
        "watermark_ms": watermark_ms,
    }


def _mode(extra: Mapping[str, object] | None) -> Mode:
    """The batch job's callers name the run's mode in `extra` (`pipeline.jobs.write_outputs`).
    The summary is typed, so a key it does not hold is refused rather than silently lost."""
    extra = extra or {}
    mode = extra.get("mode", "batch")
    if set(extra) - {"mode"} or mode not in get_args(Mode):
        raise ValueError(f"summary keys {dict(extra)!r}: only `mode`, one of {get_args(Mode)}")
    return cast(Mode, mode)


def summarize(tables: Tables, config: PipelineConfig, watermark_ms: int | None = None,
              extra: Mapping[str, object] | None = None) -> Summary:
    """The batch job's summary; `watermark_ms` is the one its flows were flagged open by
    (None: none), `extra` names its mode (`_mode`)."""
    from pyspark.sql import functions as F

    # One pass over the hops for everything per topic and partition.
    partitions = _rows(tables.hops.groupBy("topic", "partition").agg(
        F.min("offset").alias("first"), F.max("offset").alias("last"),
        F.count(F.lit(1)).alias("records"),
        F.sum(F.col("trace_id").isNull().cast("long")).alias("untraced"),
        F.sum("size").alias("bytes"),
    ))
    tallies = tally(tables)

    hist: dict[EdgeKey, list[int]] = {}
    for row in _rows(edge_histograms(tables.links)):
        counts_of = hist.setdefault((row["from_topic"], row["to_topic"]),
                                    [0] * (len(HISTOGRAM_BOUNDS_MS) + 1))
        counts_of[row["bucket"]] = row["count"]

    broken = _rows(
        tables.branches.where("broken").orderBy(F.desc("start_ms"), "trace_id", "path", "leaf")
        .limit(config.top)
        .select(*BROKEN_COLUMNS)
    )
    audit: list[AuditTableRow] = [
        {"hour_ms": int(r["hour"].replace(tzinfo=UTC).timestamp() * 1000),
         "client_id": r["client_id"], "principal": r["principal"], "origin": r["origin"],
         "records": r["records"], "bytes": r["bytes"], "untraced": r["untraced"]}
        for r in _rows(tables.audit)]
    # Spark's rows are untyped dicts of the tables' columns, which the casts name.
    figures = SummaryFigures(
        partitions=cast(list[PartitionCounts], partitions),
        flows=tallies.flows, branches=tallies.branches, evidence=tallies.evidence,
        unresolved=tallies.unresolved, incomplete=tallies.incomplete,
        edges=cast(list[EdgeRow], _rows(tables.edges, ["from_topic", "to_topic"])),
        histograms=hist,
        pathways=cast(list[Pathway], _rows(tables.pathways, ["path"])),
        over_time=cast(list[OverTime], _rows(
            edge_percentiles_over_time(tables.links, config.time_bucket_s))),
        broken_branches=cast(list[BrokenBranch], broken),
        transit=cast(list[Transit], [] if tables.transit is None else _rows(
            tables.transit.orderBy("topic", F.col("group").asc_nulls_last()))),
        lag=cast(list[Lag], [] if tables.lag is None else _rows(
            tables.lag.orderBy("topic", F.col("group").asc_nulls_last(), "bucket_ms"))),
        audit=audit)
    return summary_from(figures, config, _mode(extra), watermark_ms)
