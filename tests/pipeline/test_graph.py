"""The causal graph on synthetic hops: linear flows, fan-out, fan-in, retry loops, several
groups reading one topic, and hops without links (inferred, marked).

Every scenario has its own topics, so one analysis run serves them all. What each test expects
is worked out here from the records, in plain Python: the edges each scenario's services
really made (written down as they are put), and every count, wait and percentile computed from
those records' times; never with the Spark code under test.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from pipeline.config import PipelineConfig
from tests.support.pipeline.graph_log import BASE_MS, Key, Log, hops_df, trace
from tests.support.pipeline.scenario import (
    branches,
    expected_graph,
    expected_lag,
    expected_transit,
    hop_key,
    percentile,
    stats,
)

MAX_WAIT_MS = 1000


def build() -> tuple[Log, list[str]]:
    log = Log()
    terminal = []
    # Linear: orders → payments → shipments, one that stops and one that waits too long.
    terminal.append("lin.ship")
    for i in range(6):
        tr = trace()
        o = log.put(tr, "lin.orders", 100 * i, "svc-a")
        p = log.put(tr, "lin.pay", 100 * i + 3 + 7 * i, "svc-b", (o,))
        log.put(tr, "lin.ship", 100 * i + 20 + i * i, "svc-c", (p,))
    tr = trace()
    o = log.put(tr, "lin.orders", 900, "svc-a")
    log.put(tr, "lin.pay", 950, "svc-b", (o,))                  # stops at payments
    tr = trace()
    o = log.put(tr, "lin.orders", 1000, "svc-a")
    p = log.put(tr, "lin.pay", 1000 + MAX_WAIT_MS + 500, "svc-b", (o,))  # slow
    log.put(tr, "lin.ship", 2600, "svc-c", (p,))

    # Fan-out: each order read by payments and fraud; the payment (and its shipment) come
    # before the fraud check, so time order would pair siblings.
    terminal += ["fo.ship", "fo.fraud"]
    for i in range(4):
        tr = trace()
        o = log.put(tr, "fo.orders", 5000 + 100 * i, "svc-a")
        p = log.put(tr, "fo.pay", 5000 + 100 * i + 5 + i, "svc-b", (o,))
        log.put(tr, "fo.ship", 5000 + 100 * i + 10 + 2 * i, "svc-c", (p,))
        log.put(tr, "fo.fraud", 5000 + 100 * i + 40 + 3 * i, "svc-f", (o,))

    # Fan-in: a shipment continues both its payment and its stock reservation.
    terminal.append("fi.ship")
    for i in range(3):
        tr = trace()
        o = log.put(tr, "fi.orders", 8000 + 100 * i, "svc-a")
        s = log.put(tr, "fi.stock", 8000 + 100 * i + 4 + i, "svc-s", (o,))
        p = log.put(tr, "fi.pay", 8000 + 100 * i + 9 + 2 * i, "svc-b", (o,))
        log.put(tr, "fi.ship", 8000 + 100 * i + 30 + i, "svc-c", (s, p))

    # Retry loops: through a retry topic and back, and straight back into the same topic.
    terminal.append("rt.ship")
    for i in range(3):
        tr = trace()
        o = log.put(tr, "rt.orders", 11000 + 100 * i, "svc-a")
        p1 = log.put(tr, "rt.pay", 11000 + 100 * i + 5, "svc-b", (o,))
        r = log.put(tr, "rt.retry", 11000 + 100 * i + 8 + i, "svc-b", (p1,))
        p2 = log.put(tr, "rt.pay", 11000 + 100 * i + 30 + 3 * i, "svc-r", (r,))
        log.put(tr, "rt.ship", 11000 + 100 * i + 40 + 4 * i, "svc-c", (p2,))
    tr = trace()
    o = log.put(tr, "rt.orders", 11500, "svc-a")
    p1 = log.put(tr, "rt.pay", 11510, "svc-b", (o,))
    p2 = log.put(tr, "rt.pay", 11530, "svc-b", (p1,))
    p3 = log.put(tr, "rt.pay", 11560, "svc-b", (p2,))
    log.put(tr, "rt.ship", 11570, "svc-c", (p3,))

    # Missing links: fraud writes none but fetched the order first (inferred from the fetch);
    # audit writes none and nothing was observed (inferred by time); one payment service
    # instance writes no link either (a mixed edge); one record names a record not read.
    terminal += ["ms.pay", "ms.fraud", "ms.audit"]
    for i in range(3):
        tr = trace()
        o = log.put(tr, "ms.orders", 14000 + 100 * i, "svc-a")
        p = log.put(tr, "ms.pay", 14000 + 100 * i + 5, "svc-b", (o,) if i else (),
                    came_from=(o,))
        log.fetch(o, "svc-f", None, 14000 + 100 * i + 20)
        log.put(tr, "ms.fraud", 14000 + 100 * i + 30 + i, "svc-f", (), came_from=(o,))
        if i == 0:
            # Audit read the payment (not through Herald: no observation), wrote no link.
            log.put(tr, "ms.audit", 14000 + 100 * i + 10, "svc-x", (), came_from=(p,))
    tr = trace()  # fraud fetched this order only after writing: the fetch is no evidence
    o = log.put(tr, "ms.orders", 14500, "svc-a")
    p = log.put(tr, "ms.pay", 14505, "svc-b", (o,))
    log.put(tr, "ms.fraud", 14530, "svc-f", (), came_from=(o,))  # time rule: the payment
    log.fetch(o, "svc-f", None, 14540)
    tr = trace()
    log.put(tr, "ms.pay", 14600, "svc-b", (("ms.elsewhere", 0, 7),), came_from=())
    log.put(None, "ms.orders", 14700, None)  # untraced: counted, not in the graph

    # Several groups read one topic: one keeps up, one falls behind; one group also pays.
    terminal.append("mg.pay")
    for i in range(8):
        tr = trace()
        o = log.put(tr, "mg.orders", 20000 + 250 * i, "svc-a", partition=i % 2)
        log.fetch(o, "fast-1", "fast", 20000 + 250 * i + 4 + i)
        log.fetch(o, "slow-1" if i < 5 else "slow-2", "slow", 22500 + 100 * i)  # behind
        if i == 5:
            log.fetch(o, "slow-1", "slow", 23500)  # fetched again after a rebalance
        log.fetch(o, "solo", None, 20000 + 250 * i + 9)
        if i % 2 == 0:
            log.put(tr, "mg.pay", 20000 + 250 * i + 12 + i, "svc-b", (o,))
    return log, terminal


@pytest.fixture(scope="module")
def analysed(spark) -> tuple[Log, dict[str, list[dict]], PipelineConfig]:
    from pipeline.flows import analyze

    log, terminal = build()
    topics = sorted({h["topic"] for h in log.hops})
    config = PipelineConfig(topics=topics, terminal_topics=terminal, max_wait_ms=MAX_WAIT_MS,
                            time_bucket_s=1)
    fetches = spark.createDataFrame(
        [tuple(f[c] for c in ("t", "p", "o", "c", "g", "f")) for f in log.fetches],
        "topic string, partition int, offset long, consumer string, group string, "
        "fetched_ms long")
    tables = analyze(hops_df(spark, log.hops), config, fetches=fetches)
    got = {name: [r.asDict(recursive=True) for r in getattr(tables, name).collect()]
           for name in ("links", "branches", "flows", "edges", "pathways", "transit", "lag",
                        "unresolved")}
    tables.unpersist()
    return log, got, config


def _expected_pairs(log: Log) -> list[tuple[Key, Key]]:
    """(parent, child) pairs by the documented rules: the parent headers that name a record
    read; for a hop without any, the latest earlier hop of its trace that its producer's client
    id fetched before it was written, else the latest earlier hop of its trace."""
    traced = [h for h in log.hops if h["trace_id"]]
    keys = {hop_key(h) for h in traced}

    def order(h: dict[str, Any]) -> tuple:
        orphan = not h["parents"] and not h.get("parents_lost")
        return (h["herald_time_ms"], orphan, h["topic"], h["partition"], h["offset"])

    pairs = []
    for h in traced:
        if h["parents"]:
            pairs += [(hop_key(p), hop_key(h)) for p in h["parents"] if hop_key(p) in keys]
            continue
        earlier = sorted((g for g in traced if g["trace_id"] == h["trace_id"]
                          and order(g) < order(h)), key=order)
        read = [g for g in earlier if any(
            f["c"] == h["client_id"] and (f["t"], f["p"], f["o"]) == hop_key(g)
            and f["f"] <= h["herald_time_ms"] for f in log.fetches)]
        pairs += [(hop_key(g), hop_key(h)) for g in (read or earlier)[-1:]]
    return pairs


def _scenario(prefix: str, rows: list[dict], col: str = "from_topic") -> list[dict]:
    return [r for r in rows if r[col].startswith(prefix)]


def _expected(log: Log, config: PipelineConfig, prefix: str,
              pairs: list[tuple[Key, Key]]) -> dict[str, Any]:
    hops = [h for h in log.hops if h["topic"].startswith(prefix)]
    return expected_graph(hops, [p for p in pairs if p[1][0].startswith(prefix)],
                          config.max_wait_ms, config.terminal_topics)


def _check_edges(log: Log, got: dict[str, list[dict]], config: PipelineConfig, prefix: str,
                 pairs: list[tuple[Key, Key]]) -> dict[tuple[str, str], dict]:
    want = _expected(log, config, prefix, pairs)["edges"]
    edges = {(e["from_topic"], e["to_topic"]): e for e in _scenario(prefix, got["edges"])}
    assert set(edges) == set(want)  # no edge that no record travelled, none missing
    for edge, waits in want.items():
        for k, v in stats(waits).items():
            assert edges[edge][k] == pytest.approx(v), (edge, k)
    return edges


def _check_pathways(log: Log, got: dict[str, list[dict]], config: PipelineConfig,
                    prefix: str, pairs: list[tuple[Key, Key]]) -> dict[str, dict]:
    want = _expected(log, config, prefix, pairs)
    pathways = {p["path"]: p for p in _scenario(prefix, got["pathways"], "path")}
    assert set(pathways) == set(want["pathways"])
    for name, values in want["pathways"].items():
        for k, v in stats(values).items():
            assert pathways[name][k] == pytest.approx(v), (name, k)
        assert pathways[name]["broken"] == want["broken"][name], name
    return pathways


def test_linear_flows(analysed) -> None:
    log, got, config = analysed
    edges = _check_edges(log, got, config, "lin.", log.truth)
    assert {k: e["count"] for k, e in edges.items()} == {
        ("lin.orders", "lin.pay"): 8, ("lin.pay", "lin.ship"): 7}
    assert all(e["link"] == "linked" and e["inferred"] == 0 for e in edges.values())
    pathways = _check_pathways(log, got, config, "lin.", log.truth)
    assert {p: (v["count"], v["broken"]) for p, v in pathways.items()} == {
        "lin.orders > lin.pay > lin.ship": (7, 1), "lin.orders > lin.pay": (1, 1)}
    flows = [f for f in got["flows"] if f["hops"][0]["topic"] == "lin.orders"]
    assert len(flows) == 8
    assert sorted((f["stopped"], f["slow"]) for f in flows) == \
        [(False, False)] * 6 + [(False, True), (True, False)]
    for f in flows:
        assert f["duration_ms"] == f["hops"][-1]["event_ms"] - f["hops"][0]["event_ms"]
        assert f["branches"] == 1 and f["inferred_edges"] == 0


def test_fan_out_has_no_edge_between_siblings(analysed) -> None:
    log, got, config = analysed
    edges = _check_edges(log, got, config, "fo.", log.truth)
    assert {k: e["count"] for k, e in edges.items()} == {
        ("fo.orders", "fo.pay"): 4, ("fo.pay", "fo.ship"): 4, ("fo.orders", "fo.fraud"): 4}
    pathways = _check_pathways(log, got, config, "fo.", log.truth)
    assert {p: v["count"] for p, v in pathways.items()} == {
        "fo.orders > fo.pay > fo.ship": 4, "fo.orders > fo.fraud": 4}
    assert all(v["broken"] == 0 for v in pathways.values())
    flows = [f for f in got["flows"] if f["hops"][0]["topic"] == "fo.orders"]
    assert [(f["branches"], f["broken"]) for f in flows] == [(2, False)] * 4
    for f in flows:
        assert f["pathways"] == ["fo.orders > fo.fraud", "fo.orders > fo.pay > fo.ship"]


def test_fan_in_continues_both_inputs(analysed) -> None:
    log, got, config = analysed
    edges = _check_edges(log, got, config, "fi.", log.truth)
    assert {k: e["count"] for k, e in edges.items()} == {
        ("fi.orders", "fi.stock"): 3, ("fi.orders", "fi.pay"): 3,
        ("fi.stock", "fi.ship"): 3, ("fi.pay", "fi.ship"): 3}
    pathways = _check_pathways(log, got, config, "fi.", log.truth)
    assert {p: v["count"] for p, v in pathways.items()} == {
        "fi.orders > fi.stock > fi.ship": 3, "fi.orders > fi.pay > fi.ship": 3}
    ships = [h for f in got["flows"] for h in f["hops"] if h["topic"] == "fi.ship"]
    assert len(ships) == 3 and all(
        sorted(p["topic"] for p in h["parents"]) == ["fi.pay", "fi.stock"] for h in ships)


def test_retry_loops_revisit_a_topic_and_end(analysed) -> None:
    log, got, config = analysed
    edges = _check_edges(log, got, config, "rt.", log.truth)
    assert {k: e["count"] for k, e in edges.items()} == {
        ("rt.orders", "rt.pay"): 4, ("rt.pay", "rt.retry"): 3, ("rt.retry", "rt.pay"): 3,
        ("rt.pay", "rt.pay"): 2, ("rt.pay", "rt.ship"): 4}
    pathways = _check_pathways(log, got, config, "rt.", log.truth)
    assert {p: v["count"] for p, v in pathways.items()} == {
        "rt.orders > rt.pay > rt.retry > rt.pay > rt.ship": 3,
        "rt.orders > rt.pay > rt.pay > rt.pay > rt.ship": 1}


def test_missing_links_are_inferred_and_marked(analysed) -> None:
    log, got, config = analysed
    # What the inference should pick, by its documented rule, worked out here: the fetch
    # rule finds the orders (a record fraud's client read before writing); the time rule
    # picks the latest earlier hop of the trace.
    pairs = _expected_pairs(log)
    edges = _check_edges(log, got, config, "ms.", pairs)
    assert {k: (e["count"], e["linked"], e["inferred"], e["link"])
            for k, e in edges.items()} == {
        ("ms.orders", "ms.pay"): (4, 3, 1, "mixed"),
        ("ms.orders", "ms.fraud"): (3, 0, 3, "inferred"),
        ("ms.pay", "ms.fraud"): (1, 0, 1, "inferred"),     # the one wrong guess
        ("ms.pay", "ms.audit"): (1, 0, 1, "inferred")}
    links = [lk for lk in got["links"] if lk["topic"].startswith("ms.")]
    evidence = Counter((lk["parent_topic"], lk["topic"], lk["evidence"]) for lk in links)
    assert evidence == {("ms.orders", "ms.pay", "header"): 3,
                        ("ms.orders", "ms.pay", "time"): 1,
                        ("ms.orders", "ms.fraud", "fetch_client_id"): 3,
                        ("ms.pay", "ms.fraud", "time"): 1,
                        ("ms.pay", "ms.audit", "time"): 1}
    # The record naming a parent that was not read is a root, counted as unresolved.
    assert [u["key"] for u in got["unresolved"]] == [
        {"topic": "ms.pay", "partition": 0, "offset": 4}]
    pathways = _check_pathways(log, got, config, "ms.", pairs)
    assert {p: (v["count"], v["inferred"]) for p, v in pathways.items()} == {
        "ms.orders > ms.pay > ms.audit": (1, 1), "ms.orders > ms.fraud": (3, 3),
        "ms.orders > ms.pay": (2, 0), "ms.orders > ms.pay > ms.fraud": (1, 1),
        "ms.pay": (1, 0)}


def test_several_groups_read_one_topic(analysed) -> None:
    log, got, config = analysed
    edges = _check_edges(log, got, config, "mg.", log.truth)
    assert {k: e["count"] for k, e in edges.items()} == {("mg.orders", "mg.pay"): 4}
    # Transit and lag per group, from the observations: each group's first fetch of each
    # record (each consumer's, without a group).
    records = [h for h in log.hops if h["topic"] == "mg.orders"]
    mg_fetches = [f for f in log.fetches if f["t"] == "mg.orders"]
    transit = expected_transit(mg_fetches, {hop_key(h): h["herald_time_ms"] for h in records})
    got_transit = {(t["topic"], t["group"]): t for t in got["transit"]
                   if t["topic"] == "mg.orders"}
    assert set(got_transit) == set(transit) == {("mg.orders", g) for g in ("fast", "slow", None)}
    for key, exp in transit.items():
        assert got_transit[key]["consumers"] == exp["consumers"]
        for k in ("count", "p50_ms", "p90_ms", "p99_ms", "max_ms"):
            assert got_transit[key][k] == pytest.approx(exp[k]), (key, k)
    assert got_transit[("mg.orders", "slow")]["count"] == 8
    assert got_transit[("mg.orders", "slow")]["consumers"] == ["slow-1", "slow-2"]
    lag = expected_lag(mg_fetches, records, config.time_bucket_s * 1000)
    got_lag = {(r["topic"], r["group"], r["bucket_ms"]): r for r in got["lag"]
               if r["topic"] == "mg.orders"}
    assert set(got_lag) == set(lag)
    for key, values in lag.items():
        assert got_lag[key]["fetches"] == len(values)
        assert got_lag[key]["p50_s"] == pytest.approx(percentile(values, 0.5) / 1000), key
        assert got_lag[key]["max_s"] == pytest.approx(max(values) / 1000), key
    assert max(r["max_s"] for (_, g, _), r in got_lag.items() if g == "fast") == 0
    assert max(r["max_s"] for (_, g, _), r in got_lag.items() if g == "slow") > 1


def test_every_hop_is_on_a_branch_and_the_graph_is_the_truth(analysed) -> None:
    log, got, _config = analysed
    made = {(p, c) for p, c in log.truth}
    found = {(hop_key(lk["parent_key"]), hop_key(lk["key"])) for lk in got["links"]}
    # The links equal what the services did, except where a service wrote no link and the
    # evidence could not tell (the one fraud check written before its fetch was observed).
    assert found == set(_expected_pairs(log))
    wrong = found - made
    assert len(wrong) == 1 and all(lk["link"] == "inferred" for lk in got["links"]
                                   if (hop_key(lk["parent_key"]), hop_key(lk["key"])) in wrong)
    traced = {hop_key(h) for h in log.hops if h["trace_id"]}
    roots = {hop_key(b["root"]) for b in got["branches"]}
    assert {c for _, c in found} | roots == traced and not roots & {c for _, c in found}
    assert {hop_key(b["leaf"]) for b in got["branches"]} <= traced
    assert len(got["branches"]) == len(branches(sorted(traced), sorted(found)))


def test_records_without_trace_context_make_no_graph(spark) -> None:
    from pipeline.flows import analyze

    log = Log()
    first = log.put(None, "nt.orders", 0, "legacy")
    log.put(None, "nt.pay", 5, "legacy", (first,))  # a link, but from an untraced record
    tables = analyze(hops_df(spark, log.hops), PipelineConfig(topics=["nt.orders", "nt.pay"]))
    try:
        assert [tables.nodes.count(), tables.links.count(), tables.branches.count(),
                tables.flows.count(), tables.edges.count()] == [0, 0, 0, 0, 0]
        assert tables.audit.first()["untraced"] == 2
    finally:
        tables.unpersist()


def _one_trace(spark, hops: list[tuple], fetches: list[tuple]):
    """Hops (topic, offset, ms, client id, source host, parents, lost count, reasons) of one
    trace, and observations (topic, offset, consumer, consumer host, ms), as the graph reads
    them."""
    from pipeline.graph import nodes_of

    tr = trace()
    rows = [(tr, t, 0, o, BASE_MS + ms, client, host,
             [{"topic": pt, "partition": 0, "offset": po} for pt, po in parents], lost, reasons)
            for t, o, ms, client, host, parents, lost, reasons in hops]
    nodes = nodes_of(spark.createDataFrame(rows, (
        "trace_id string, topic string, partition int, offset long, event_ms long, "
        "client_id string, source_host string, "
        "parents array<struct<topic:string,partition:int,offset:long>>, parents_lost long, "
        "lost_reasons array<string>")))
    obs = spark.createDataFrame(
        [(t, 0, o, c, h, "g", BASE_MS + ms) for t, o, c, h, ms in fetches],
        "topic string, partition int, offset long, consumer string, consumer_host string, "
        "`group` string, fetched_ms long")
    return nodes, obs


def _parents(links) -> dict[str, tuple[str, str]]:
    return {r["topic"]: (r["parent_topic"], r["evidence"]) for r in links.collect()}


def test_inference_matches_the_service_by_host(spark) -> None:
    """A service whose consumer and producer have different client ids (Java's and
    librdkafka's defaults): matched by host by default, so its check continues the order it
    fetched, not the payment time order would pick. With `client_id` both must match, so the
    guess falls back to time; an observation without a host (written before `s`) matches by
    client id, as before."""
    from pipeline.graph import links_of

    hops = [("hs.orders", 0, 0, "svc-a", "10.0.0.1", [], 0, []),
            ("hs.pay", 0, 20, "rdkafka", "10.0.0.2", [("hs.orders", 0)], 0, []),
            ("hs.fraud", 0, 30, "producer-1", "10.0.0.6", [], 0, [])]
    fetched = [("hs.orders", 0, "consumer-1", "10.0.0.6", 5),     # fraud's consumer
               ("hs.orders", 0, "rdkafka", "10.0.0.2", 6),
               ("hs.pay", 0, "consumer-9", "10.0.0.9", 25)]      # another service's
    nodes, obs = _one_trace(spark, hops, fetched)
    assert _parents(links_of(nodes, obs, "host")[0])["hs.fraud"] == ("hs.orders", "fetch_host")
    assert _parents(links_of(nodes, obs, "client_id")[0])["hs.fraud"] == ("hs.pay", "time")
    # Same host, and with `client_id` the same client id too: matched by both.
    same = [("hs.orders", 0, "producer-1", "10.0.0.6", 5)]
    nodes, obs = _one_trace(spark, hops, same)
    assert _parents(links_of(nodes, obs, "client_id")[0])["hs.fraud"] == (
        "hs.orders", "fetch_host_client_id")
    # An old observation (no host) with the producer's client id: matched by client id,
    # whatever the scope; one on another host with the same client id is another service.
    old = [("hs.orders", 0, "producer-1", None, 5)]
    nodes, obs = _one_trace(spark, hops, old)
    for scope in ("host", "client_id"):
        assert _parents(links_of(nodes, obs, scope)[0])["hs.fraud"] == (
            "hs.orders", "fetch_client_id")
    elsewhere = [("hs.orders", 0, "producer-1", "10.0.0.7", 5)]
    nodes, obs = _one_trace(spark, hops, elsewhere)
    assert _parents(links_of(nodes, obs, "host")[0])["hs.fraud"] == ("hs.pay", "time")


def test_a_hop_with_lost_parents_gets_no_guessed_parent(spark) -> None:
    """A hop that names no parent but declares lost ones is a root, a lost one, even where
    its service's fetch of an earlier hop was observed; one that names a parent and lost
    another keeps its link, marked incomplete, and so does every branch through it."""
    from pipeline.graph import branches_of, links_of

    hops = [("lp.orders", 0, 0, "svc-a", "10.0.0.1", [], 0, []),
            ("lp.pay", 0, 20, "svc-b", "10.0.0.2", [], 2, ["evicted"]),
            ("lp.ship", 0, 40, "svc-c", "10.0.0.3", [("lp.pay", 0)], 1, ["expired"])]
    fetched = [("lp.orders", 0, "svc-b", "10.0.0.2", 5), ("lp.pay", 0, "svc-c", "10.0.0.3", 25)]
    nodes, obs = _one_trace(spark, hops, fetched)
    links, unresolved = links_of(nodes, obs, "host")
    got = {r["topic"]: r.asDict() for r in links.collect()}
    assert set(got) == {"lp.ship"} and unresolved.count() == 0
    assert (got["lp.ship"]["evidence"], got["lp.ship"]["incomplete"],
            got["lp.ship"]["lost_reasons"]) == ("header", True, ["expired"])
    branches = sorted((b["path"], b["incomplete"], b["lost_root"], b["parents_lost"],
                       b["lost_reasons"]) for b in branches_of(nodes, links).collect())
    assert branches == [("lp.orders", False, False, 0, []),
                        ("lp.pay > lp.ship", True, True, 3, ["evicted", "expired"])]


def test_a_hop_without_links_continues_a_linked_hop_of_its_millisecond(spark) -> None:
    """A service reading straight from the broker wrote its record in the millisecond of the
    shipment it continues; its topic sorts first, but the shipment names its parents, so it
    is the tied hop that comes first and the guess. Two parentless hops of one millisecond
    stay in topic order."""
    from pipeline.graph import links_of

    hops = [("tm.orders", 0, 0, "svc-a", "10.0.0.1", [], 0, []),
            ("tm.pay", 0, 10, "svc-b", "10.0.0.2", [("tm.orders", 0)], 0, []),
            ("tm.ship", 0, 20, "svc-c", "10.0.0.3", [("tm.pay", 0)], 0, []),
            ("tm.audit", 0, 20, "svc-x", "10.0.0.9", [], 0, []),
            ("tm.backup", 0, 20, "svc-y", "10.0.0.8", [], 0, [])]
    nodes, obs = _one_trace(spark, hops, [])
    got = _parents(links_of(nodes, obs, "host")[0])
    assert got == {"tm.pay": ("tm.orders", "header"), "tm.ship": ("tm.pay", "header"),
                   "tm.audit": ("tm.ship", "time"), "tm.backup": ("tm.audit", "time")}


def test_branches_across_traces_are_walked_whole(spark) -> None:
    """A join hop continues records of two traces, in a third (fan-in across traces); the
    walk's partitions hold whole traces, and traces joined by links together, so each root's
    branch runs on through the join and past it, whatever the partitions."""
    from pipeline.graph import branches_of, links_of, nodes_of

    hops = [("t1", "xt.a", 0, 0, []), ("t2", "xt.b", 1, 5, []),
            ("t3", "xt.join", 2, 9, [("xt.a", 0), ("xt.b", 1)]),
            ("t3", "xt.after", 3, 12, [("xt.join", 2)])]
    hops += [(f"s{i}", "xt.solo", 10 + i, 20 + i, []) for i in range(40)]
    rows = [(tr, t, 0, o, BASE_MS + ms, "svc", None,
             [{"topic": pt, "partition": 0, "offset": po} for pt, po in parents], 0, [])
            for tr, t, o, ms, parents in hops]
    nodes = nodes_of(spark.createDataFrame(rows, (
        "trace_id string, topic string, partition int, offset long, event_ms long, "
        "client_id string, source_host string, "
        "parents array<struct<topic:string,partition:int,offset:long>>, parents_lost long, "
        "lost_reasons array<string>")))
    links, _ = links_of(nodes)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "16")
    try:
        got = sorted((b["trace_id"], b["path"], b["root"]["offset"], b["leaf"]["offset"],
                      b["duration_ms"], b["max_wait_ms"])
                     for b in branches_of(nodes, links).collect())
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    assert got[:2] == [("s0", "xt.solo", 10, 10, 0, None), ("s1", "xt.solo", 11, 11, 0, None)]
    assert got[-3:] == [("s9", "xt.solo", 19, 19, 0, None),
                        ("t1", "xt.a > xt.join > xt.after", 0, 3, 12, 9),
                        ("t2", "xt.b > xt.join > xt.after", 1, 3, 7, 4)]
    assert len(got) == 42
