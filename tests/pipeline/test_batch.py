"""The batch job over a real three-service flow through Herald: every table equals what the
services produced."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC

import pytest

from pipeline.config import PipelineConfig
from pipeline.hops import HOP_COLUMNS
from tests.pipeline.scenario import (
    FULL,
    LEGACY_RECORDS,
    PLAN,
    SLOW,
    STOP_AT_ORDERS,
    STOP_AT_PAYMENTS,
    Played,
    expected_flows,
    expected_transit,
    stats,
)


def _table(spark, config: PipelineConfig, name: str) -> list[dict]:
    return [r.asDict(recursive=True) for r in spark.read.parquet(f"{config.output}/{name}")
            .collect()]


def test_hops_are_every_record_with_its_headers(spark, played: Played, batch_run) -> None:
    config, summary = batch_run
    got = _table(spark, config, "hops")
    assert {(h["topic"], h["partition"], h["offset"]) for h in got} == played.delivered
    key = lambda h: (h["topic"], h["partition"], h["offset"])  # noqa: E731
    columns = [c for c in HOP_COLUMNS if c not in ("event_ms", "event_time")]
    assert sorted(({c: h[c] for c in columns} for h in got), key=key) == \
        sorted(played.hops, key=key)
    # The hop time is Herald's receive time where there is one, else the broker's.
    for h in got:
        assert h["event_ms"] == (h["herald_time_ms"] or h["timestamp_ms"])
    untraced = [h for h in got if h["trace_id"] is None]
    assert len(untraced) == LEGACY_RECORDS and summary["records"]["untraced"] == LEGACY_RECORDS
    assert all(h["client_id"] is None and h["topic"] == played.topics["orders"]
               for h in untraced)
    traced = [h for h in got if h["trace_id"]]
    assert {h["client_id"] for h in traced} == {"svc-a", "svc-b", "svc-c"}
    assert {h["principal"] for h in traced} == {"User:ANONYMOUS"}
    assert len({h["origin"] for h in traced}) == 1 and traced[0]["origin"]
    assert len({h["message_id"] for h in traced}) == len(traced)


def test_flows_and_broken_flows_follow_the_plan(spark, played: Played, batch_run) -> None:
    config, summary = batch_run
    t = played.topics
    want = expected_flows(played, config.max_wait_ms, t["shipments"])
    got = {f["trace_id"]: f for f in _table(spark, config, "flows")}
    assert set(got) == set(want) == set(played.plan_of_trace)
    path = {
        FULL: [t["orders"], t["payments"], t["shipments"]],
        SLOW: [t["orders"], t["payments"], t["shipments"]],
        STOP_AT_ORDERS: [t["orders"]],
        STOP_AT_PAYMENTS: [t["orders"], t["payments"]],
    }
    for trace, flow in got.items():
        plan = played.plan_of_trace[trace]
        assert [h["topic"] for h in flow["hops"]] == path[plan]
        assert flow["path"] == " > ".join(path[plan]) == want[trace]["path"]
        assert flow["duration_ms"] == want[trace]["duration_ms"]
        assert [h["wait_ms"] for h in flow["hops"][1:]] == want[trace]["waits"]
        assert (flow["stopped"], flow["slow"]) == (want[trace]["stopped"], want[trace]["slow"])
        assert flow["stopped"] == (plan in (STOP_AT_ORDERS, STOP_AT_PAYMENTS))
        assert flow["slow"] == (plan == SLOW)  # the others move on within milliseconds
        assert flow["broken"] == (flow["stopped"] or flow["slow"])
    broken = sum(1 for f in want.values() if f["stopped"] or f["slow"])
    assert summary["flows"]["total"] == len(PLAN)
    assert summary["flows"]["broken"] == broken == len(PLAN) - PLAN.count(FULL)
    assert {f["trace_id"] for f in summary["broken_flows"]} == {
        tr for tr, f in want.items() if f["stopped"] or f["slow"]}


def test_edges_and_pathways_have_counts_and_exact_latency_percentiles(
    spark, played: Played, batch_run
) -> None:
    config, summary = batch_run
    want = expected_flows(played, config.max_wait_ms, played.topics["shipments"])
    waits: dict[tuple[str, str], list[int]] = defaultdict(list)
    durations: dict[str, list[int]] = defaultdict(list)
    for f in want.values():
        for edge, w in zip(f["edges"], f["waits"], strict=True):
            waits[edge].append(w)
        durations[f["path"]].append(f["duration_ms"])
    edges = {(e["from_topic"], e["to_topic"]): e for e in _table(spark, config, "edges")}
    assert set(edges) == set(waits) and len(edges) == 2
    for edge, values in waits.items():
        exp = stats(values)
        for k, v in exp.items():
            assert edges[edge][k] == pytest.approx(v), (edge, k)
    pathways = {p["path"]: p for p in _table(spark, config, "pathways")}
    assert set(pathways) == set(durations) and len(pathways) == 3
    for path, values in durations.items():
        for k, v in stats(values).items():
            assert pathways[path][k] == pytest.approx(v), (path, k)
    assert [(e["from_topic"], e["to_topic"], e["count"]) for e in summary["edges"]] == sorted(
        (a, b, len(v)) for (a, b), v in waits.items())
    for e in summary["edges"]:
        assert sum(e["histogram"]) == e["count"]


def test_audit_summaries_count_records_and_bytes(spark, played: Played, batch_run) -> None:
    config, summary = batch_run
    want: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for h in played.hops:
        ms = h["herald_time_ms"] or h["timestamp_ms"]
        k = (ms // 3_600_000 * 3_600_000, h["client_id"], h["principal"], h["origin"])
        want[k][0] += 1
        want[k][1] += h["size"]
    # Spark hands back naive datetimes in the session time zone (UTC): compare in UTC.
    got = {}
    for a in _table(spark, config, "audit"):
        hour_ms = int(a["hour"].replace(tzinfo=UTC).timestamp() * 1000)
        got[(hour_ms, a["client_id"], a["principal"], a["origin"])] = [a["records"], a["bytes"]]
    assert got == dict(want)
    by_client = {r["client_id"]: r["records"] for r in summary["audit"]["by_client_id"]}
    assert by_client == {"svc-a": len(PLAN), None: LEGACY_RECORDS,
                         "svc-b": len(PLAN) - PLAN.count(STOP_AT_ORDERS),
                         "svc-c": PLAN.count(FULL) + PLAN.count(SLOW)}


def test_transit_latency_per_topic_and_group(spark, played: Played, batch_run) -> None:
    """fetch_log observations joined to the hops: fetch time minus Herald's receive time."""
    config, summary = batch_run
    hop_time = {(h["topic"], h["partition"], h["offset"]):
                h["herald_time_ms"] or h["timestamp_ms"] for h in played.hops}
    want = expected_transit(played.fetches, hop_time)
    t = played.topics
    # B and C read assigned partitions without committing: Herald saw no group requests.
    assert set(want) == {(t["orders"], None), (t["payments"], None)}
    assert [w["consumers"] for w in want.values()] == [["svc-b"], ["svc-c"]]
    got = {(r["topic"], r["group"]): r for r in _table(spark, config, "transit")}
    assert set(got) == set(want)
    for key, exp in want.items():
        assert exp["count"] > 0 and got[key]["consumers"] == exp["consumers"]
        for k in ("count", "p50_ms", "p90_ms", "p99_ms", "max_ms"):
            assert got[key][k] == pytest.approx(exp[k]), (key, k)
    assert [(r["topic"], r["count"]) for r in summary["transit"]] == sorted(
        (k[0], w["count"]) for k, w in want.items())
