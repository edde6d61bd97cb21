"""A stream whose metrics a real Prometheus scrapes, read back through PromQL: the waits for
the stream to finish its flows and for the scrape that holds its last micro-batch, what that
scrape must say of the stream's own tables (edges, pathways, lag, transit, branches, links,
health), and what the shipped dashboard and alerts make of it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline.config import PipelineConfig
from pipeline.flows import HISTOGRAM_BOUNDS_MS
from tests.support.pipeline.monitoring import board, empty_panels, rules
from tests.support.prometheus import Prometheus

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


def wait_for(what: str, check: Callable[[], bool | str], timeout_s: float = 480) -> None:
    """Poll `check` every second until it answers True; anything else it answers (or the
    error reading it) is what the failure reports."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last is True:
                return
        except (OSError, KeyError, json.JSONDecodeError) as exc:
            last = exc
        time.sleep(1)
    raise AssertionError(f"{what}: {last}")


@contextmanager
def scraped_stream(spark, config: PipelineConfig, prom: Prometheus, flows: int
                   ) -> Iterator[tuple[dict, Prometheus]]:
    """The stream started with `config` (its metrics on the port Prometheus scrapes), run
    until it has finalised `flows` flows and holds none, then the stream's summary and one
    scrape that holds its last micro-batch. That one scrape is read throughout (`at_scrape`:
    a later scrape that failed would empty every answer until the next one). The progress
    events (batches, their durations) reach the exporter from Spark's listener bus, after
    the micro-batch that wrote the summary: that scrape must hold them too."""
    from pipeline.jobs import start_stream

    summary_file = Path(config.output) / "summary.json"
    query = start_stream(spark, config)
    try:
        def finalised() -> bool | str:
            summary = json.loads(summary_file.read_text())
            done = (summary["flows"]["total"] == flows and summary["lag"]
                    and summary["stream"]["held_flows"] == 0)
            return True if done else f"flows {summary['flows']['total']} of {flows}"

        wait_for("the stream finalises every flow", finalised)
        summary = json.loads(summary_file.read_text())
        scraped: list[Prometheus] = []

        def scraped_last_batch() -> bool | str:
            at = prom.at_scrape("herald_stream_last_batch_id")
            if at is None:
                return "no scrape holds herald_stream_last_batch_id"
            got = (at.value("herald_stream_last_batch_id"),
                   at.value("herald_stream_batches_total"))
            if got[0] == summary["last_batch_id"] and (got[1] or 0) >= 2:
                scraped.append(at)
                return True
            return f"last batch id, batches: {got}"

        wait_for("Prometheus scrapes the last batch", scraped_last_batch)
        yield summary, scraped[0]
    finally:
        query.stop()


def edge_selector(client: str, server: str) -> str:
    return f'client="{client}",server="{server}",connection_type="messaging_system"'


def newest_lag(summary: dict) -> dict[tuple[str, str], dict]:
    """Per topic and group, the summary's newest lag bucket (what the lag gauges export)."""
    newest: dict[tuple[str, str], dict] = {}
    for r in summary["lag"]:
        k = (r["topic"], r["group"] or "")
        if k not in newest or newest[k]["bucket_ms"] < r["bucket_ms"]:
            newest[k] = r
    return newest


def _by_topic_and_group(prom: Prometheus, metric: str) -> dict[tuple[str, str], float]:
    return {(r["metric"]["topic"], r["metric"].get("group", "")): r["value"]
            for r in prom.query(metric)}


def assert_scrape_says_what_the_tables_say(prom: Prometheus, summary: dict, spark,
                                           out: Path) -> None:
    """Every edge and pathway series against the stream's tables (exact counts and sums of
    the waits and durations, quantiles within the buckets and the sketch's accuracy), lag,
    transit, branches, lost parents, records, links and the stream's health against its
    summary."""
    edges = summary["edges"]
    waits: dict[tuple[str, str], list[int]] = {}
    for r in spark.read.parquet(str(out / "links")).select(
            "parent_topic", "topic", "wait_ms").collect():
        waits.setdefault((r["parent_topic"], r["topic"]), []).append(r["wait_ms"])
    hist = "traces_service_graph_request_server_seconds"
    for e in edges:
        sel = edge_selector(e["from_topic"], e["to_topic"])
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
    newest = newest_lag(summary)
    assert _by_topic_and_group(prom, "herald_stream_consumer_lag_seconds") == \
        {k: r["max_s"] for k, r in newest.items()}
    assert _by_topic_and_group(prom, "herald_stream_consumer_lag_bucket_timestamp_seconds") \
        == {k: r["bucket_ms"] / 1000 for k, r in newest.items()}
    assert _by_topic_and_group(prom, "herald_stream_consumer_fetches_total") == \
        {(r["topic"], r["group"] or ""): r["count"] for r in summary["transit"]}
    # Branches, lost parents, records, links.
    branches = summary["branches"]
    assert prom.value("herald_stream_branches_total") == branches["total"]
    assert prom.value("herald_stream_branches_broken_total") == branches["broken"]
    for reason in ("stopped", "slow"):
        assert prom.value(f'herald_stream_branch_breaks_total{{reason="{reason}"}}') == \
            branches[reason]
    incomplete = summary["incomplete"]
    assert prom.value("herald_stream_branches_incomplete_total") == incomplete["branches"]
    assert prom.value("herald_stream_flows_incomplete_total") == incomplete["flows"]
    assert prom.value("herald_stream_parents_lost_total") == incomplete["parents_lost"]
    for reason in ("expired", "evicted", "overflow"):
        assert prom.value(f'herald_stream_branch_losses_total{{reason="{reason}"}}') == \
            incomplete["by_reason"][reason]["branches"]
    assert prom.value("sum(herald_stream_records_untraced_total)") == \
        summary["records"]["untraced"]
    assert prom.value("sum(herald_stream_records_total)") == summary["records"]["total"]
    links = summary["links"]
    assert prom.value('herald_stream_links_total{evidence="header"}') == links["linked"]
    assert prom.value('sum(herald_stream_links_total{evidence=~"fetch_.*"})') == \
        links["inferred_by_fetch"]
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


def assert_every_panel_has_data(prom: Prometheus) -> None:
    """Each Prometheus query of the shipped dashboard answers series (see `empty_panels`):
    no panel would show "No data" for this traffic for want of a metric or a label. Rates
    need two samples of a series in their window, so the queries are asked again, now, until
    the next scrapes are in (a minute at most)."""
    now = Prometheus(prom.url)
    deadline = time.monotonic() + 60
    while (empty := empty_panels(now, board())) and time.monotonic() < deadline:
        time.sleep(2)
    assert not empty, "\n".join(empty)


def firing_alerts(prom: Prometheus) -> set[str]:
    """The shipped alerts whose expressions hold now (for the traffic scraped so far)."""
    return {r["alert"] for r in rules() if "alert" in r and Prometheus(prom.url).query(
        r["expr"])}
