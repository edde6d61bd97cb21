"""The batch job over four real services through Herald: the graph is what the services did,
and every table equals what they produced."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC

import pytest

from pipeline.config import PipelineConfig
from pipeline.hops import HOP_COLUMNS
from tests.support.pipeline.scenario import (
    FULL,
    LEGACY_RECORDS,
    PLAN,
    RETRY,
    SLOW,
    STOP_AT_ORDERS,
    STOP_AT_PAYMENTS,
    Played,
    expected_graph,
    expected_lag,
    expected_transit,
    fraud_checked,
    hop_key,
    percentile,
    stats,
)


def _table(spark, config: PipelineConfig, name: str) -> list[dict]:
    return [r.asDict(recursive=True) for r in spark.read.parquet(f"{config.output}/{name}")
            .collect()]


def _expected(played: Played, config: PipelineConfig) -> dict:
    return expected_graph(played.hops, played.truth, config.max_wait_ms,
                          config.terminal_topics)


def test_hops_are_every_record_with_its_headers(spark, played: Played, batch_run) -> None:
    config, summary = batch_run
    got = _table(spark, config, "hops")
    assert {hop_key(h) for h in got} == played.delivered
    columns = [c for c in HOP_COLUMNS if c not in ("event_ms", "event_time")]
    assert sorted(({c: h[c] for c in columns} for h in got), key=hop_key) == \
        sorted(played.hops, key=hop_key)
    # The hop time is Herald's receive time where there is one, else the broker's.
    for h in got:
        assert h["event_ms"] == (h["herald_time_ms"] or h["timestamp_ms"])
    untraced = [h for h in got if h["trace_id"] is None]
    assert len(untraced) == LEGACY_RECORDS and summary["records"]["untraced"] == LEGACY_RECORDS
    assert all(h["client_id"] is None and h["topic"] == played.topics["orders"]
               for h in untraced)
    traced = [h for h in got if h["trace_id"]]
    assert {h["client_id"] for h in traced} == {"svc-a", "svc-b", "svc-c", "svc-f"}
    assert {h["principal"] for h in traced} == {"User:ANONYMOUS"}
    assert len({h["origin"] for h in traced}) == 1 and traced[0]["origin"]
    assert len({h["message_id"] for h in traced}) == len(traced)
    # Herald named what B and C continued; A starts each trace, and F is the service the
    # test's Herald leaves out of the links (conftest.UNLINKED).
    linked = {h["client_id"]: bool(h["parents"]) for h in traced}
    assert linked == {"svc-a": False, "svc-b": True, "svc-c": True, "svc-f": False}


def test_the_graph_is_what_the_services_did(spark, played: Played, batch_run) -> None:
    """Every parent → child pair of records equals what the services continued: none is
    missing and none joins records that no service connected (such as two siblings)."""
    config, summary = batch_run
    links = _table(spark, config, "links")
    got = {(hop_key(lk["parent_key"]), hop_key(lk["key"])): lk for lk in links}
    assert len(got) == len(links) and set(got) == set(played.truth)
    fraud = played.topics["fraud"]
    for (_, child), lk in got.items():
        # Fraud's consumer and producer share this host and the client id svc-f.
        kind = (("inferred", "fetch_host_client_id") if child[0] == fraud
                else ("linked", "header"))
        assert (lk["link"], lk["evidence"]) == kind, lk
    kinds = Counter(child[0] == fraud for _, child in played.truth)
    assert summary["links"] == {"linked": kinds[False], "inferred": kinds[True],
                                "inferred_by_fetch": kinds[True], "inferred_by_time": 0,
                                "by_evidence": {"header": kinds[False], "fetch_host": 0,
                                                "fetch_host_client_id": kinds[True],
                                                "fetch_client_id": 0, "time": 0},
                                "unresolved": 0}
    # Nothing declared lost parents: nothing is incomplete, and the summary says so.
    assert summary["incomplete"]["hops"] == summary["incomplete"]["branches"] == 0
    assert all(e["incomplete"] == 0 for e in summary["edges"])
    assert kinds[True] == sum(1 for i in range(len(PLAN)) if fraud_checked(i)) > 0


def test_flows_and_broken_branches_follow_the_plan(spark, played: Played, batch_run) -> None:
    config, summary = batch_run
    t = played.topics
    want = _expected(played, config)["flows"]
    got = {f["trace_id"]: f for f in _table(spark, config, "flows")}
    assert set(got) == set(want) == set(played.plan_of_trace)
    main = {
        FULL: f"{t['orders']} > {t['payments']} > {t['shipments']}",
        SLOW: f"{t['orders']} > {t['payments']} > {t['shipments']}",
        RETRY: f"{t['orders']} > {t['payments']} > {t['payments']} > {t['shipments']}",
        STOP_AT_PAYMENTS: f"{t['orders']} > {t['payments']}",
    }
    for trace, flow in got.items():
        plan, number = played.plan_of_trace[trace], played.number_of_trace[trace]
        exp = want[trace]
        assert flow["pathways"] == sorted(exp["pathways"])
        assert (flow["stopped"], flow["slow"], flow["branches"]) == (
            exp["stopped"], exp["slow"], exp["branches"])
        assert flow["broken"] == (flow["stopped"] or flow["slow"])
        # The plan, told in pathways: the fraud check is a branch of its own.
        expected = {main[plan]} if plan in main else set()
        if fraud_checked(number):
            expected.add(f"{t['orders']} > {t['fraud']}")
        if not expected:  # dropped at orders and not checked: the order is the only hop
            expected.add(t["orders"])
        assert set(flow["pathways"]) == expected, plan
        assert flow["slow"] == (plan == SLOW)  # the others move on within milliseconds
        assert flow["stopped"] == (plan == STOP_AT_PAYMENTS
                                   or (plan == STOP_AT_ORDERS and not fraud_checked(number)))
    broken = {tr for tr, f in want.items() if f["stopped"] or f["slow"]}
    assert summary["flows"]["total"] == len(PLAN)
    assert summary["flows"]["broken"] == len(broken) > 0
    assert summary["branches"]["total"] == sum(f["branches"] for f in want.values())
    assert {f["trace_id"] for f in summary["broken_branches"]} == broken


def test_edges_and_pathways_have_counts_and_exact_latency_percentiles(
    spark, played: Played, batch_run
) -> None:
    config, summary = batch_run
    t = played.topics
    want = _expected(played, config)
    edges = {(e["from_topic"], e["to_topic"]): e for e in _table(spark, config, "edges")}
    # Fan-out to payments and fraud; the retry loop; no edge between siblings.
    assert set(edges) == set(want["edges"]) == {
        (t["orders"], t["payments"]), (t["payments"], t["shipments"]),
        (t["payments"], t["payments"]), (t["orders"], t["fraud"])}
    for edge, values in want["edges"].items():
        for k, v in stats(values).items():
            assert edges[edge][k] == pytest.approx(v), (edge, k)
        inferred = edge[1] == t["fraud"]
        assert (edges[edge]["link"], edges[edge]["inferred"], edges[edge]["linked"]) == (
            ("inferred", len(values), 0) if inferred else ("linked", 0, len(values)))
    pathways = {p["path"]: p for p in _table(spark, config, "pathways")}
    assert set(pathways) == set(want["pathways"])
    for path, values in want["pathways"].items():
        for k, v in stats(values).items():
            assert pathways[path][k] == pytest.approx(v), (path, k)
        assert pathways[path]["broken"] == want["broken"][path], path
        assert pathways[path]["inferred"] == (len(values) if path.endswith(t["fraud"]) else 0)
    assert [(e["from_topic"], e["to_topic"], e["count"], e["link"]) for e in summary["edges"]
            ] == sorted((a, b, len(v), "inferred" if b == t["fraud"] else "linked")
                        for (a, b), v in want["edges"].items())
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
    assert by_client == {
        "svc-a": len(PLAN), None: LEGACY_RECORDS,
        "svc-b": len(PLAN) - PLAN.count(STOP_AT_ORDERS),
        "svc-c": PLAN.count(FULL) + PLAN.count(SLOW) + 2 * PLAN.count(RETRY),
        "svc-f": sum(1 for i in range(len(PLAN)) if fraud_checked(i))}


def test_transit_and_lag_per_topic_and_group(spark, played: Played, batch_run) -> None:
    """fetch_log observations joined to the hops: transit is fetch time minus Herald's
    receive time; lag is how far the newest record was ahead of the one fetched."""
    config, summary = batch_run
    hop_time = {hop_key(h): h["herald_time_ms"] or h["timestamp_ms"] for h in played.hops}
    want = expected_transit(played.fetches, hop_time)
    t = played.topics
    # Orders are read by two groups, payments by one; Herald learnt each from its requests.
    assert set(want) == {(t["orders"], "svc-b"), (t["orders"], "svc-f"),
                         (t["payments"], "svc-c")}
    assert [w["consumers"] for _, w in sorted(want.items())] == [
        ["svc-b"], ["svc-f"], ["svc-c"]]
    got = {(r["topic"], r["group"]): r for r in _table(spark, config, "transit")}
    assert set(got) == set(want)
    for key, exp in want.items():
        assert exp["count"] > 0 and got[key]["consumers"] == exp["consumers"]
        for k in ("count", "p50_ms", "p90_ms", "p99_ms", "max_ms"):
            assert got[key][k] == pytest.approx(exp[k]), (key, k)
    assert [(r["topic"], r["count"]) for r in summary["transit"]] == sorted(
        (k[0], w["count"]) for k, w in want.items())

    lag = expected_lag(played.fetches, played.hops, config.time_bucket_s * 1000)
    rows = {(r["topic"], r["group"], r["bucket_ms"]): r for r in _table(spark, config, "lag")}
    assert set(rows) == set(lag) and {(k[0], k[1]) for k in lag} == set(want)
    for key, values in lag.items():
        assert rows[key]["fetches"] == len(values)
        assert rows[key]["p50_s"] == pytest.approx(percentile(values, 0.5) / 1000), key
        assert rows[key]["max_s"] == pytest.approx(max(values) / 1000), key
    assert len(summary["lag"]) == len(lag)
