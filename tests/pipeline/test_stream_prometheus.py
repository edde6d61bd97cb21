"""The stream's metrics read by a real Prometheus: a stream with a processing-time trigger
runs over synthetic Herald traffic (with its consumers' fetch observations) on the real
broker, Prometheus scrapes its metrics port every second, and PromQL answers what the
stream's own tables say for the same traffic: edge and pathway counts, the exact sum of the
waits, latency quantiles (`histogram_quantile`, within the bucket that holds the stream's
sketch quantile), consumer lag in seconds, broken branches, untraced records and the stream's
health. On the same scrape every query of the shipped dashboard returns data, and of the
shipped alerts exactly those the traffic calls for would fire."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.flows import HISTOGRAM_BOUNDS_MS
from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.pipeline.monitoring import board, empty_panels, rules
from tests.support.pipeline.scenario import topic_names
from tests.support.pipeline.stream_runs import KINDS, T0, lost_parents_of, observe, stream_config
from tests.support.pipeline.synthetic import Hop, Traffic
from tests.support.prometheus import Prometheus, running_prometheus
from tests.support.required_parts import PROMETHEUS, needs

pytestmark = needs(PROMETHEUS)


ACCURACY = 0.01  # the stream's default sketch accuracy


def _bucket(seconds: float) -> int:
    """The index of the `le` bucket a value falls in (the first bound at or above it)."""
    ms = seconds * 1000
    return next((i for i, b in enumerate(HISTOGRAM_BOUNDS_MS) if ms <= b * (1 + 1e-9)),
                len(HISTOGRAM_BOUNDS_MS))


def _edges_of(i: int) -> tuple[float, float]:
    """Bucket `i` as (lower, upper] in seconds."""
    bounds = [0.0, *(b / 1000 for b in HISTOGRAM_BOUNDS_MS), float("inf")]
    return bounds[i], bounds[i + 1]


def _check_quantile(prom: Prometheus, bucket_expr: str, q: float, exact_ms: list[int],
                    sketch_ms: float) -> None:
    """`histogram_quantile` over the exported buckets against the exact values (from the
    stream's own tables) and its sketch quantile. Spark's rank interpolates between the
    values of ranks lo = floor((n-1) q) and lo + 1; Prometheus's rank q n falls on one of
    those two, and it interpolates inside that one's bucket. So its answer is in the bucket
    of x[lo] or of x[lo + 1], and the sketch's (within `ACCURACY` of a value between them) in
    the range those buckets span."""
    got = prom.value(f"histogram_quantile({q}, {bucket_expr})")
    assert got is not None, bucket_expr
    x = sorted(exact_ms)
    lo = int((len(x) - 1) * q)
    hi = min(lo + 1, len(x) - 1)
    low_b, high_b = _bucket(x[lo] / 1000), _bucket(x[hi] / 1000)
    assert _bucket(got) in (low_b, high_b), (bucket_expr, q, got, x[lo], x[hi])
    floor_s, ceil_s = _edges_of(low_b)[0], _edges_of(high_b)[1]
    assert floor_s * (1 - ACCURACY) <= sketch_ms / 1000 <= ceil_s * (1 + ACCURACY), \
        (bucket_expr, q, sketch_ms, floor_s, ceil_s)
    assert floor_s <= got <= ceil_s


def _edge(client: str, server: str) -> str:
    return f'client="{client}",server="{server}",connection_type="messaging_system"'


def _wait_for(what: str, check, timeout_s: float = 480) -> None:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last is True:
                return
        except (OSError, KeyError, json.JSONDecodeError) as exc:
            last = exc
        time.sleep(1)
    raise AssertionError(f"{what}: {last}")


def test_prometheus_scraping_the_stream_sees_what_its_tables_say(
    spark, kafka: KafkaCluster, tmp_path: Path
) -> None:
    topics = topic_names()
    config = stream_config(topics, kafka.bootstrap, tmp_path, f"fetches-{uuid.uuid4().hex[:8]}",
                           watermark_s=20.0, flow_gap_s=15.0)
    port = free_port("127.0.0.1")
    config = replace(config, stream=replace(
        config.stream, trigger="processing_time", interval_s=1.0,
        metrics_bind=f"127.0.0.1:{port}"))
    traffic = Traffic(topics, fetch_topic=config.fetch_topic)
    flows = [traffic.flow(T0 + i * 3000, KINDS[i % len(KINDS)]) for i in range(12)]
    for n, made in enumerate(flows):
        observe(traffic, made, n)
    lossy = lost_parents_of(traffic, T0 + 40_000)  # records declaring lost parents
    for i in range(3):  # no trace context
        traffic.add(Hop(topics["orders"], T0 + 500 + i, None, client="legacy"))
    end = max(h.event_ms for h in traffic.hops)
    # A group reading the first order only at the end: its newest lag is the whole run.
    traffic.fetch(flows[0][0], "svc-late", "late-app", end + 1000 - T0)
    # An untraced record far ahead moves the watermark past every flow and fetch.
    traffic.add(Hop(topics["orders"], end + 120_000, None, client="clock"))
    traffic.write(kafka.bootstrap)

    out = Path(config.output)
    with running_prometheus([f"127.0.0.1:{port}"], tmp_path) as prom:
        from pipeline.jobs import start_stream

        query = start_stream(spark, config)
        try:
            def finalised() -> bool | str:
                summary = json.loads((out / "summary.json").read_text())
                done = (summary["flows"]["total"] == len(flows) + len(lossy)
                        and summary["lag"]
                        and summary["stream"]["held_flows"] == 0)
                return True if done else f"flows {summary['flows']['total']}"

            _wait_for("the stream finalises every flow", finalised)
            summary = json.loads((out / "summary.json").read_text())
            batch_id = summary["last_batch_id"]
            # One scrape that holds the last batch is read throughout (`at_scrape`: a later
            # scrape that failed would empty every answer until the next one). The progress
            # events (batches, their durations) reach the exporter from Spark's listener bus,
            # after the micro-batch that wrote the summary: that scrape must hold them too.
            scraped: list[Prometheus] = []

            def scraped_last_batch() -> bool | str:
                at = prom.at_scrape("herald_stream_last_batch_id")
                if at is None:
                    return "no scrape holds herald_stream_last_batch_id"
                got = (at.value("herald_stream_last_batch_id"),
                       at.value("herald_stream_batches_total"))
                if got[0] == batch_id and (got[1] or 0) >= 2:
                    scraped.append(at)
                    return True
                return f"last batch id, batches: {got}"

            _wait_for("Prometheus scrapes the last batch", scraped_last_batch)
            _assert_matches(scraped[0], summary, spark, out, topics)
            _assert_every_panel_has_data(scraped[0])
            _assert_the_alerts_that_should_fire(scraped[0])
        finally:
            query.stop()


def _assert_matches(prom: Prometheus, summary: dict, spark, out: Path,
                    topics: dict[str, str]) -> None:
    edges = summary["edges"]
    assert len(edges) >= 3
    waits: dict[tuple[str, str], list[int]] = {}
    for r in spark.read.parquet(str(out / "links")).select(
            "parent_topic", "topic", "wait_ms").collect():
        waits.setdefault((r["parent_topic"], r["topic"]), []).append(r["wait_ms"])
    hist = "traces_service_graph_request_server_seconds"
    for e in edges:
        sel = _edge(e["from_topic"], e["to_topic"])
        exact = waits[(e["from_topic"], e["to_topic"])]
        assert prom.value(f"traces_service_graph_request_total{{{sel}}}") == e["count"] \
            == len(exact)
        assert prom.value(f"herald_stream_edge_inferred_total{{{sel}}}") == e["inferred"]
        assert prom.value(f"herald_stream_edge_incomplete_total{{{sel}}}") == e["incomplete"]
        assert prom.value(f"{hist}_count{{{sel}}}") == e["count"]
        assert prom.value(f"{hist}_sum{{{sel}}}") == pytest.approx(sum(exact) / 1000)
        for q, key in ((0.5, "p50_ms"), (0.9, "p90_ms"), (0.99, "p99_ms")):
            _check_quantile(prom, f"{hist}_bucket{{{sel}}}", q, exact, e[key])
    durations: dict[str, list[int]] = {}
    for r in spark.read.parquet(str(out / "branches")).select("path", "duration_ms").collect():
        durations.setdefault(r["path"], []).append(r["duration_ms"])
    for p in summary["pathways"]:
        sel = f'path="{p["path"]}"'
        assert prom.value(f"herald_stream_pathway_branches_total{{{sel}}}") == p["count"] \
            == len(durations[p["path"]])
        assert prom.value(f"herald_stream_pathway_branches_broken_total{{{sel}}}") == \
            p["broken"]
        assert prom.value(f"herald_stream_pathway_branches_incomplete_total{{{sel}}}") == \
            p["incomplete"]
        assert prom.value(f"herald_stream_pathway_duration_seconds_sum{{{sel}}}") == \
            pytest.approx(sum(durations[p["path"]]) / 1000)
        for q, key in ((0.5, "p50_ms"), (0.99, "p99_ms")):
            _check_quantile(prom, f"herald_stream_pathway_duration_seconds_bucket{{{sel}}}",
                            q, durations[p["path"]], p[key])
    # Lag in seconds: per topic and group, the newest bucket of fetch time.
    newest: dict[tuple, dict] = {}
    for r in summary["lag"]:
        k = (r["topic"], r["group"] or "")
        if k not in newest or newest[k]["bucket_ms"] < r["bucket_ms"]:
            newest[k] = r
    assert newest[(topics["orders"], "late-app")]["max_s"] > 30
    lag = {(r["metric"]["topic"], r["metric"].get("group", "")): r["value"]
           for r in prom.query("herald_stream_consumer_lag_seconds")}
    assert lag == {k: r["max_s"] for k, r in newest.items()}
    started = {(r["metric"]["topic"], r["metric"].get("group", "")): r["value"]
               for r in prom.query("herald_stream_consumer_lag_bucket_timestamp_seconds")}
    assert started == {k: r["bucket_ms"] / 1000 for k, r in newest.items()}
    fetches = {(r["metric"]["topic"], r["metric"].get("group", "")): r["value"]
               for r in prom.query("herald_stream_consumer_fetches_total")}
    assert fetches == {(r["topic"], r["group"] or ""): r["count"] for r in summary["transit"]}
    # Branches, records, links.
    branches = summary["branches"]
    assert prom.value("herald_stream_branches_total") == branches["total"]
    assert prom.value("herald_stream_branches_broken_total") == branches["broken"] > 0
    for reason in ("stopped", "slow"):
        assert prom.value(f'herald_stream_branch_breaks_total{{reason="{reason}"}}') == \
            branches[reason] > 0
    # Lost parents: incomplete branches and flows, by reason.
    incomplete = summary["incomplete"]
    assert prom.value("herald_stream_branches_incomplete_total") == incomplete["branches"] > 0
    assert prom.value("herald_stream_flows_incomplete_total") == incomplete["flows"] == 2
    assert prom.value("herald_stream_parents_lost_total") == incomplete["parents_lost"] == 4
    for reason in ("expired", "evicted", "overflow"):
        assert prom.value(f'herald_stream_branch_losses_total{{reason="{reason}"}}') == \
            incomplete["by_reason"][reason]["branches"] > 0
    assert sum(e["incomplete"] for e in edges) > 0
    assert prom.value("sum(herald_stream_records_untraced_total)") == \
        summary["records"]["untraced"] == 4
    assert prom.value("sum(herald_stream_records_total)") == summary["records"]["total"]
    links = summary["links"]
    assert prom.value('herald_stream_links_total{evidence="header"}') == links["linked"]
    assert prom.value('sum(herald_stream_links_total{evidence=~"fetch_.*"})') == \
        links["inferred_by_fetch"] > 0
    by_evidence = {r["metric"]["evidence"]: r["value"]
                   for r in prom.query("herald_stream_links_total")}
    assert by_evidence == links["by_evidence"]
    # The stream's health.
    batches = prom.value("herald_stream_batches_total")
    assert batches is not None and batches >= 2
    assert prom.value("herald_stream_batch_duration_seconds_count") == batches
    assert prom.value("herald_stream_input_rows_total") > summary["records"]["total"]
    assert prom.value("herald_stream_held_flows") == 0
    assert prom.value("herald_stream_flows_total") == summary["flows"]["total"]
    assert prom.value("herald_stream_watermark_timestamp_seconds") == \
        summary["watermark_ms"] / 1000
    assert prom.value("time() - herald_stream_last_progress_timestamp_seconds") < 60


def _assert_every_panel_has_data(prom: Prometheus) -> None:
    """Each Prometheus query of the shipped dashboard answers series (see `_empty_panels`):
    no panel would show "No data" for this traffic for want of a metric or a label. Rates
    need two samples of a series in their window, so the queries are asked again, now, until
    the next scrapes are in (a minute at most)."""
    now = Prometheus(prom.url)
    deadline = time.monotonic() + 60
    while (empty := empty_panels(now, board())) and time.monotonic() < deadline:
        time.sleep(2)
    assert not empty, "\n".join(empty)


def _assert_the_alerts_that_should_fire(prom: Prometheus) -> None:
    """Of the shipped alerts, the expression of the broken-branches one holds (the traffic
    breaks more than 5% of its branches) and no other: the lag stays under five minutes, every
    group fetched within the watermark's last 15 minutes, the stream progresses, reports and
    evicts nothing."""
    firing = {r["alert"] for r in rules() if "alert" in r and Prometheus(prom.url).query(
        r["expr"])}
    assert firing == {"HeraldKafkaBrokenBranchesRising"}, firing
