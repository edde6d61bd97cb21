"""The continuous stream (`pipeline.stream`) over synthetic Herald traffic whose event times the
test chooses, with the fetch_log observations of its consumers: it equals the batch job over
the same records and observations (exactly for counts, within the sketch's bound for
percentiles; fetch evidence, transit and lag included), a restart from the checkpoint (and a
micro-batch run twice, as after a crash before its commit) neither loses nor counts twice,
and late hops and evicted flows are counted apart (many micro-batches: test_stream_state.py)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from PIL import Image

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.pipeline.scenario import topic_names
from tests.support.pipeline.screenshot import screenshot
from tests.support.pipeline.stream_runs import (
    KINDS,
    T0,
    TABLE_KEYS,
    assert_stream_equals_batch,
    batch_without,
    lost_parents_of,
    observe,
    progress_lines,
    run_stream,
    stream_config,
    table_rows,
)
from tests.support.pipeline.synthetic import Hop, Traffic

# (exact, sketched) columns of the tables measured from fetch_log observations
LOSSY_BAND = (0xFD, 0xF2, 0xE9)  # the report's background of the line on lost parents


def _fraud_by_host(traffic: Traffic, start_ms: int) -> dict[str, int]:
    """A fraud check written straight to the broker (no link), by a service whose consumer
    and producer have different client ids, as Java's and librdkafka's defaults give, on host
    10.1.0.6. Its consumer fetched the order; another service's consumer, on another host,
    fetched the payment, the hop time order would pick. Matched by host, the order is the
    parent."""
    t = traffic.topics
    trace = os.urandom(16).hex()
    order = traffic.add(Hop(t["orders"], start_ms, trace, client="svc-a",
                            source="10.1.0.1:40001"))
    pay = traffic.add(Hop(t["payments"], start_ms + 20, trace, [order], "rdkafka",
                          source="10.1.0.2:40002"))
    check = traffic.add(Hop(t["fraud"], start_ms + 30, trace, [], "producer-1",
                            source="10.1.0.6:42311"))
    traffic.fetch(order, "consumer-fraud-1", "fraud-app", 5, host="10.1.0.6")
    traffic.fetch(order, "svc-b", "payments-app", 5, host="10.1.0.2")
    traffic.fetch(pay, "consumer-x", "shipping-app", 5, host="10.1.0.9")
    return {"order": order, "pay": pay, "check": check}


def test_stream_equals_batch_resumes_from_its_checkpoint_and_counts_late_hops(
    spark, kafka: KafkaCluster, tmp_path: Path
) -> None:
    topics = topic_names()
    # The watermark covers the disorder between the two sources (records and observations
    # are read at rates of their own, micro-batch by micro-batch).
    config = stream_config(topics, kafka.bootstrap, tmp_path, f"fetches-{uuid.uuid4().hex[:8]}",
                           watermark_s=20.0, flow_gap_s=15.0, max_flow_hops=5,
                           max_offsets_per_trigger=25)
    traffic = Traffic(topics, fetch_topic=config.fetch_topic)
    first = [traffic.flow(T0 + i * 3000, KINDS[i % len(KINDS)]) for i in range(12)]
    for n, made in enumerate(first):
        observe(traffic, made, n)
    for i in range(3):  # written straight to the broker by a legacy client: no trace
        legacy = traffic.add(Hop(topics["orders"], T0 + 500 + i, None, client="legacy"))
        traffic.fetch(legacy, "svc-b", "payments-app")
    # Fetched again, after a rebalance: by another member of the group, and by the auditor.
    traffic.fetch(first[0][0], "svc-b2", "payments-app", 60)
    traffic.fetch(first[0][-1], "svc-audit", None, 10)
    traffic.fetch(first[2][-1], "svc-audit-2", None, 7)  # a second reader without a group
    lost = lost_parents_of(traffic, T0 + 36_000)
    written = set(traffic.write(kafka.bootstrap))
    run_stream(spark, config)
    summary = json.loads((Path(config.output) / "summary.json").read_text())
    # The last flows are younger than the gap: still held, not counted yet.
    assert 0 < summary["flows"]["total"] < len(first)
    assert summary["records"]["untraced"] == 3
    # As if the process died after the last micro-batch's output but before Spark committed
    # it: the restart runs that batch again, which must replace its output, not add to it.
    commits = Path(config.stream.checkpoint) / "commits"
    replayed = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(replayed)).unlink()
    (commits / f".{replayed}.crc").unlink(missing_ok=True)

    # Written while the stream is stopped: more flows; a hop continuing the first flow long
    # after it was finalised (late); a hop older than the watermark (dropped by Spark,
    # counted); and, once all of that was read, an untraced record far ahead, which moves the
    # watermark past every flow and fetch (read with observations still to come, it would
    # leave them behind the watermark).
    end = max(h.event_ms for h in traffic.hops)
    late = traffic.add(Hop(topics["shipments"], end + 1000, traffic.hops[first[0][0]].trace,
                           [first[0][1]]))
    behind = traffic.add(Hop(topics["orders"], T0 - 60_000, "ab" * 16))
    for i in range(12):
        observe(traffic, traffic.flow(end + 2000 + i * 700, KINDS[i % len(KINDS)]), 12 + i)
    # A fraud check written after the payment, unlinked: by time its parent would be the
    # payment, but F fetched the order (and not the payment) before writing it.
    trace = "ef" * 16
    order = traffic.add(Hop(topics["orders"], end + 2500, trace, client="svc-a"))
    paid = traffic.add(Hop(topics["payments"], end + 2520, trace, [order], "svc-b"))
    check = traffic.add(Hop(topics["fraud"], end + 2530, trace, [], "svc-f"))
    observe(traffic, [order, paid, check], 1)
    by_host = _fraud_by_host(traffic, end + 2600)
    # A flow of six hops, more than max_flow_hops: evicted (analysed at once, counted).
    trace = "cd" * 16
    chain = [traffic.add(Hop(topics["orders"], end + 3000, trace))]
    for n in range(5):
        chain.append(traffic.add(Hop(topics["payments"], end + 3010 + n, trace, [chain[-1]])))
    observe(traffic, chain, 0)
    written |= set(traffic.write(kafka.bootstrap, create=False))
    run_stream(spark, config)
    tick = traffic.add(Hop(topics["orders"], end + 120_000, None, client="clock"))
    written |= set(traffic.write(kafka.bootstrap, create=False))
    run_stream(spark, config)
    skip = {traffic.keys[late], traffic.keys[behind]}

    out = Path(config.output)
    hops = table_rows(spark, str(out / "hops"), ["topic", "partition", "offset"])
    keys = [(h["topic"], h["partition"], h["offset"]) for h in hops]
    assert len(keys) == len(set(keys))         # nothing twice across the restart
    assert set(keys) == written - skip         # nothing lost
    late_rows = table_rows(spark, str(out / "late"), ["topic", "partition", "offset"])
    assert [(h["topic"], h["partition"], h["offset"]) for h in late_rows] == [
        traffic.keys[late]]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stream"]["late_hops"] == 1
    assert (summary["stream"]["evicted_flows"], summary["stream"]["evicted_hops"]) == (1, 6)
    dropped = sum((p["state"] or {}).get("numRowsDroppedByWatermark", 0)
                  for p in progress_lines(config.output))
    assert dropped == 2  # the hop behind the watermark and its partition clock's twin
    assert summary["stream"]["no_record_time"] == 0
    assert [p["batch_id"] for p in progress_lines(config.output)].count(replayed) == 2
    assert traffic.keys[tick] in set(keys)

    batch = batch_without(spark, config, skip, tmp_path / "batch")
    assert summary["flows"]["total"] == batch["flows"]["total"] == 30
    assert_stream_equals_batch(spark, out, tmp_path / "batch", config.stream.accuracy)
    inferred = [e for e in summary["edges"] if e["to_topic"] == topics["fraud"]]
    assert inferred and all(e["link"] == "inferred" for e in inferred)
    # Every fraud check was inferred from F's fetch, the late one's from the order, not from
    # the payment the time rule would pick.
    fraud = sum(1 for h in traffic.hops if h.topic == topics["fraud"])
    assert summary["links"]["inferred_by_fetch"] == fraud == 6
    assert summary["links"]["inferred_by_time"] == 0
    # The observations of before `s` (no host) matched by client id, as always; the one
    # service whose consumer and producer differ in client id, by host.
    assert summary["links"]["by_evidence"] == {
        "header": summary["links"]["linked"], "fetch_host": 1, "fetch_host_client_id": 0,
        "fetch_client_id": 5, "time": 0}
    links = table_rows(spark, str(out / "links"), TABLE_KEYS["links"])
    parent_of = {tuple(lk["key"].values()): lk for lk in links}
    assert tuple(parent_of[traffic.keys[check]]["parent_key"].values()) == traffic.keys[order]
    host_link = parent_of[traffic.keys[by_host["check"]]]
    assert tuple(host_link["parent_key"].values()) == traffic.keys[by_host["order"]]
    assert (host_link["link"], host_link["evidence"]) == ("inferred", "fetch_host")
    _assert_lost_parents(spark, out, traffic, lost, summary)
    # A record fetched twice by one reader counts once; each reader without a group apart.
    transit = {(r["topic"], r["group"]): r for r in summary["transit"]}
    assert transit[(topics["orders"], "payments-app")]["consumers"] == ["svc-b", "svc-b2"]
    assert transit[(topics["orders"], "payments-app")]["count"] == \
        sum(1 for h in traffic.hops if h.topic == topics["orders"]) - 2  # not: behind, tick
    assert transit[(topics["shipments"], None)]["consumers"] == ["svc-audit", "svc-audit-2"]
    assert any(r["max_s"] > 0 for r in summary["lag"])


def _assert_lost_parents(spark, out: Path, traffic: Traffic, lost: dict[str, list[int]],
                         summary: dict) -> None:
    """What `lost_parents_of` declared, in the hops, links, branches, edges, pathways, flows,
    the summary and the report (the stream's; batch's equal them, checked before)."""
    from pipeline.report import links_line

    t = traffic.topics
    key = traffic.keys
    hops = {(h["topic"], h["partition"], h["offset"]): h
            for h in table_rows(spark, str(out / "hops"), ["topic", "partition", "offset"])}
    got = {name: [(hops[key[i]]["parents_lost"], hops[key[i]]["lost_reasons"]) for i in made]
           for name, made in lost.items()}
    assert got == {"expired": [(0, []), (0, []), (1, ["expired"])],
                   "root": [(0, []), (3, ["evicted", "overflow"]), (0, [])],
                   "bad": [(0, []), (0, []), (0, [])]}
    links = {tuple(lk["key"].values()): lk
             for lk in table_rows(spark, str(out / "links"), TABLE_KEYS["links"])}
    order, pay, ship = lost["expired"]
    assert links[key[ship]]["incomplete"] and links[key[ship]]["lost_reasons"] == ["expired"]
    assert not links[key[pay]]["incomplete"]
    # The payment that named nothing and lost three: no parent guessed, though its client
    # fetched the order; it is a root, and a lost one.
    order, pay, ship = lost["root"]
    assert key[pay] not in links and not links[key[ship]]["incomplete"]
    branches = [b for b in table_rows(spark, str(out / "branches"), TABLE_KEYS["branches"])
                if b["trace_id"] == traffic.hops[pay].trace]
    assert sorted((b["path"], b["incomplete"], b["lost_root"], b["parents_lost"],
                   b["lost_reasons"]) for b in branches) == [
        (t["orders"], False, False, 0, []),
        (f"{t['payments']} > {t['shipments']}", True, True, 3, ["evicted", "overflow"])]
    flows = {f["trace_id"]: f for f in table_rows(spark, str(out / "flows"), ["trace_id"])}
    assert [(flows[traffic.hops[made[0]].trace]["incomplete"],
             flows[traffic.hops[made[0]].trace]["parents_lost"]) for made in lost.values()] == [
        (True, 1), (True, 3), (False, 0)]
    edges = {(e["from_topic"], e["to_topic"]): e for e in summary["edges"]}
    assert edges[(t["payments"], t["shipments"])]["incomplete"] == 1
    assert sum(e["incomplete"] for e in summary["edges"]) == 1
    pathways = {p["path"]: p["incomplete"] for p in summary["pathways"] if p["incomplete"]}
    assert pathways == {f"{t['orders']} > {t['payments']} > {t['shipments']}": 1,
                        f"{t['payments']} > {t['shipments']}": 1}
    assert summary["incomplete"] == {
        "hops": 2, "parents_lost": 4, "roots": 1, "links": 1, "branches": 2, "flows": 2,
        "edges": 1, "pathways": 2,
        "by_reason": {"expired": {"hops": 1, "links": 1, "branches": 1},
                      "evicted": {"hops": 1, "links": 0, "branches": 1},
                      "overflow": {"hops": 1, "links": 0, "branches": 1}}}
    html = (out / "report.html").read_text()
    line = links_line(summary)
    assert line in html and "hops are incomplete" in line and "4 parents" in line
    assert "expired 1, evicted 1, overflow 1 hops" in line
    assert "1 of these hops start their branches with no parent named" in line
    assert "Incomplete: parents Herald could not name" in html
    assert "1 incomplete (parents lost)</text>" in html  # on the edge in the graph
    # Drawn: the line stands out (its tinted band spans the page under the cards).
    png = out / "report.png"
    screenshot(out / "report.html", png, out / "profile", (1400, 1600),
               keep_as="stream-report.png")
    top = Image.open(png).convert("RGB").crop((0, 0, 1400, 700))
    tinted = sum(1 for p in top.get_flattened_data()
                 if all(abs(a - b) <= 3 for a, b in zip(p, LOSSY_BAND, strict=True)))
    assert tinted > 1000 * 30, tinted
