"""The stream's exporter (`pipeline.stream_metrics`) over merged aggregates of the shape the
stream writes, served over HTTP and read back with prometheus_client's own parser: exact
cumulative buckets, bounded labels folded into `other` exactly, figures an older aggregate
cannot state left out, and a port already taken never stopping the stream."""

from __future__ import annotations

import socket
import urllib.request
from dataclasses import replace

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from pipeline.config import PipelineConfig, StreamConfig
from pipeline.flows import HISTOGRAM_BOUNDS_MS
from pipeline.stream.aggregates import Aggregates
from pipeline.stream_metrics import OTHER, LabelBudget, exporter_for
from proxy.devtools.embedded_kafka import free_port
from tests.support.pipeline.aggregates import sample_aggregates

EDGE = "traces_service_graph_request"


def _config(port: int, top: int) -> PipelineConfig:
    return PipelineConfig(topics=["orders", "payments", "shipments", "fraud"],
                          stream=StreamConfig(checkpoint="x", metrics_top=top,
                                              metrics_bind=f"127.0.0.1:{port}"))


def _scrape(port: int, openmetrics: bool = False) -> dict[str, list]:
    """The samples served, parsed by prometheus_client: the Prometheus text format, or
    OpenMetrics (what Prometheus asks for first), whose parser checks each family's shape."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    parse = text_string_to_metric_families
    if openmetrics:
        request.add_header("Accept", "application/openmetrics-text; version=1.0.0")
        parse = openmetrics_families
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith(
            "application/openmetrics-text" if openmetrics else "text/plain")
        text = resp.read().decode()
    out: dict[str, list] = {}
    for family in parse(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _value(samples: dict, name: str, **labels: str) -> float | None:
    found = [v for got, v in samples.get(name, []) if all(got.get(k) == x
                                                         for k, x in labels.items())]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


@pytest.fixture()
def served():
    port = free_port("127.0.0.1")
    exporter = exporter_for(_config(port, top=3))
    assert exporter is not None and exporter.port == port
    exporter.collector.publish(Aggregates.from_json(sample_aggregates()))
    exporter.collector.on_progress({"batch_id": 7, "input_rows": 40, "duration_ms": 1500,
                                    "state": {"numRowsTotal": 12, "memoryUsedBytes": 4096,
                                              "numRowsDroppedByWatermark": 2}})
    return port, _scrape(port)


def test_edges_are_service_graph_series_with_exact_cumulative_buckets(served) -> None:
    _, m = served
    edge = {"client": "orders", "server": "payments", "connection_type": "messaging_system"}
    assert _value(m, f"{EDGE}_total", **edge) == 4
    buckets = {float(lb["le"]): v for lb, v in m[f"{EDGE}_server_seconds_bucket"]
               if all(lb.get(k) == x for k, x in edge.items())}
    assert sorted(buckets) == [b / 1000 for b in HISTOGRAM_BOUNDS_MS] + [float("inf")]
    assert buckets[0.002] == 0 and buckets[0.005] == 1 and buckets[0.01] == 1
    assert buckets[0.02] == 3 and buckets[0.5] == 3 and buckets[1.0] == 4
    assert buckets[float("inf")] == 4
    assert _value(m, f"{EDGE}_server_seconds_count", **edge) == 4
    assert _value(m, f"{EDGE}_server_seconds_sum", **edge) == pytest.approx(0.743)
    inferred = {"client": "payments", "server": "shipments"}
    assert _value(m, "herald_stream_edge_inferred_total", **inferred) == 1


def test_labels_over_the_budget_are_added_up_under_other(served) -> None:
    _, m = served
    # top 3 edges by hops: orders>payments (4), payments>shipments (3), and one of the
    # two-hop edges (fraud>alerts before legacy>payments by name); the rest are `other`.
    other = {"client": OTHER, "server": OTHER}
    assert _value(m, f"{EDGE}_total", **other) == 1 + 2
    assert len(m[f"{EDGE}_total"]) == 4
    # Folded: the one-hop edge's histogram and the older entry's (no sum): the series keeps
    # its exact buckets, the +Inf one its count; no sum it cannot state, and so no `_count`
    # (OpenMetrics has both or neither).
    assert _value(m, f"{EDGE}_server_seconds_bucket", le="+Inf", **other) == 3
    assert _value(m, f"{EDGE}_server_seconds_sum", **other) is None
    assert _value(m, f"{EDGE}_server_seconds_count", **other) is None
    assert _value(m, f"{EDGE}_server_seconds_count", client="payments",
                  server="shipments") == 3
    alerts = {"client": "fraud", "server": "alerts"}
    assert _value(m, f"{EDGE}_server_seconds_bucket", le="60.0", **alerts) == 1
    assert _value(m, f"{EDGE}_server_seconds_bucket", le="+Inf", **alerts) == 2
    # Incomplete hops: counted where every entry folded in says; the older one does not.
    assert _value(m, "herald_stream_edge_incomplete_total", client="orders",
                  server="payments") == 1
    assert _value(m, "herald_stream_edge_incomplete_total", client="fraud",
                  server="alerts") == 0
    assert _value(m, "herald_stream_edge_incomplete_total", **other) is None


def test_openmetrics_exposition_is_valid_with_a_series_without_sum(served) -> None:
    """Prometheus scrapes OpenMetrics first; its parser rejects a histogram with `_count`
    but no `_sum`, so the folded series without a sum must be served without both."""
    port, plain = served
    m = _scrape(port, openmetrics=True)
    other = {"client": OTHER, "server": OTHER}
    hist = f"{EDGE}_server_seconds"
    assert _value(m, f"{hist}_bucket", le="+Inf", **other) == 3
    assert _value(m, f"{hist}_count", **other) is None
    assert _value(m, f"{hist}_count", client="orders", server="payments") == \
        _value(plain, f"{hist}_count", client="orders", server="payments") == 4
    assert _value(m, "herald_stream_batch_duration_seconds_count") == 1
    assert _value(m, "herald_stream_batch_duration_seconds_sum") == 1.5


def test_legacy_fetch_evidence_counts_as_fetch_client_id(served) -> None:
    _, m = served
    links = {labels["evidence"]: v for labels, v in m["herald_stream_links_total"]}
    assert links == {"header": 6, "fetch_host": 0, "fetch_host_client_id": 0,
                     "fetch_client_id": 3, "time": 1}


def test_pathways_lag_branches_records_and_health(served) -> None:
    _, m = served
    path = {"path": "orders > payments"}
    assert _value(m, "herald_stream_pathway_branches_total", **path) == 2
    assert _value(m, "herald_stream_pathway_branches_broken_total", **path) == 1
    assert _value(m, "herald_stream_pathway_duration_seconds_sum", **path) == \
        pytest.approx(0.055)
    # A histogram short of its sketch's count is not exported; its counts are.
    partial = {"path": "orders > fraud"}
    assert _value(m, "herald_stream_pathway_branches_total", **partial) == 1
    assert _value(m, "herald_stream_pathway_duration_seconds_bucket", le="+Inf",
                  **partial) is None
    # Lag: the newest bucket of each group; readers without a group have an empty label.
    assert _value(m, "herald_stream_consumer_lag_seconds", topic="orders", group="pay") == 2.0
    assert _value(m, "herald_stream_consumer_lag_bucket_timestamp_seconds", topic="orders",
                  group="pay") == 60.0
    assert _value(m, "herald_stream_consumer_lag_seconds", topic="orders", group="") == 0.005
    assert _value(m, "herald_stream_consumer_fetches_total", topic="orders",
                  group="ship") == 10
    assert _value(m, "herald_stream_branches_broken_total") == 2
    assert _value(m, "herald_stream_branch_breaks_total", reason="slow") == 2
    assert _value(m, "herald_stream_branches_incomplete_total") == 1
    assert _value(m, "herald_stream_parents_lost_total") == 3
    assert _value(m, "herald_stream_branch_losses_total", reason="expired") == 1
    assert _value(m, "herald_stream_branch_losses_total", reason="overflow") == 0
    # Figures the aggregates do not carry are left out, not shown as 0.
    assert "herald_stream_pathway_branches_incomplete_total" not in m
    assert "herald_stream_links_unresolved_total" not in m
    assert _value(m, "herald_stream_records_untraced_total", topic="orders") == 3
    assert _value(m, "herald_stream_records_total", topic="fraud") == 1
    assert _value(m, "herald_stream_hops_late_total") == 4
    assert _value(m, "herald_stream_held_hops") == 6
    assert _value(m, "herald_stream_tombstones") == 9
    assert _value(m, "herald_stream_watermark_timestamp_seconds") == 1000
    assert _value(m, "herald_stream_last_batch_id") == 7
    assert _value(m, "herald_stream_batches_total") == 1
    assert _value(m, "herald_stream_input_rows_total") == 40
    assert _value(m, "herald_stream_rows_dropped_by_watermark_total") == 2
    assert _value(m, "herald_stream_batch_duration_seconds_bucket", le="1.0") == 0
    assert _value(m, "herald_stream_batch_duration_seconds_bucket", le="2.0") == 1
    assert _value(m, "herald_stream_state_memory_bytes") == 4096


def test_groups_over_the_budget_fold_into_other_with_merged_lag() -> None:
    port = free_port("127.0.0.1")
    exporter = exporter_for(_config(port, top=1))
    assert exporter is not None
    exporter.collector.publish(Aggregates.from_json(sample_aggregates()))
    m = _scrape(port)
    assert _value(m, "herald_stream_consumer_fetches_total", topic="orders", group="pay") == 30
    assert _value(m, "herald_stream_consumer_fetches_total", topic="orders",
                  group=OTHER) == 11
    # other: the newest buckets of `ship` (100 ms) and of the readers without a group (5 ms)
    assert _value(m, "herald_stream_consumer_lag_seconds", topic="orders",
                  group=OTHER) == 0.1
    # A stream started later in the process on the same bind takes the exporter over.
    again = exporter_for(replace(_config(port, top=1)))
    assert again is exporter
    assert "herald_stream_consumer_lag_seconds" not in _scrape(port)


def test_budget_keeps_what_it_admitted() -> None:
    budget = LabelBudget(2)
    first = budget.admit({"a": 5, "b": 3, "c": 1})
    assert [first(k) for k in "abc"] == ["a", "b", None]
    later = budget.admit({"a": 5, "b": 3, "c": 1, "d": 100})
    assert [later(k) for k in "abcd"] == ["a", "b", None, None]


def test_a_taken_port_leaves_the_stream_without_metrics(caplog) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert exporter_for(_config(port, top=3)) is None
    assert f"127.0.0.1:{port}" in caplog.text and "without metrics" in caplog.text
    off = PipelineConfig(topics=["orders"], stream=StreamConfig(metrics_bind=""))
    assert exporter_for(off) is None


def test_aggregates_without_lost_parents_counts_export_none() -> None:
    """Aggregates written before lost parents were counted: no incomplete series at all
    (an absent figure, not a confident 0)."""
    port = free_port("127.0.0.1")
    exporter = exporter_for(_config(port, top=3))
    assert exporter is not None
    agg = sample_aggregates()
    del agg["incomplete"]
    for entry in agg["edges"].values():
        entry.pop("incomplete", None)
    exporter.collector.publish(Aggregates.from_json(agg))
    m = _scrape(port)
    assert not [name for name in m if "incomplete" in name or "losses" in name
                or "parents_lost" in name]
    assert _value(m, "herald_stream_branch_breaks_total", reason="stopped") == 1
