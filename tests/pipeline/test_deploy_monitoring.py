"""The stream's Grafana dashboard and alert rules (deploy/grafana/herald-kafka-flows.json,
deploy/prometheus/): Prometheus's own `promtool` accepts the rules and runs their unit tests,
every dashboard query parses as PromQL, the dashboard is well formed (unique ids, panels on
the 24-column grid without overlaps, data sources from its variables), and both use only
metrics the stream's exporter serves."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from pipeline.config import PipelineConfig, StreamConfig
from pipeline.stream.aggregates import Aggregates
from pipeline.stream_metrics import StreamCollector
from tests.support.pipeline.aggregates import sample_aggregates
from tests.support.pipeline.monitoring import RULES, RULES_TEST, board, expanded, queries, rules
from tests.support.required_parts import PROMTOOL, binary, needs

METRIC = re.compile(r"\b(?:herald_stream|traces_service_graph)_[a-z_]+")
SUFFIXES = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_count", "_sum"]}

promtool = needs(PROMTOOL)


def _queries() -> list[str]:
    return [expr for _, expr in queries(board())]


def _rule_exprs() -> list[str]:
    return [r["expr"] for r in rules()]


def _exported() -> set[str]:
    """Every series name the exporter serves over aggregates with each kind of figure."""
    collector = StreamCollector(PipelineConfig(topics=["orders"], stream=StreamConfig()))
    agg = sample_aggregates()  # with the lost-parents counts (docs/pipeline.md)
    for entry in [*agg["pathways"].values(), *agg["edges"].values()]:
        entry.setdefault("incomplete", 0)
    collector.publish(Aggregates.from_json(agg))
    collector.on_progress({"batch_id": 1, "input_rows": 5, "duration_ms": 10,
                           "state": {"numRowsTotal": 1, "memoryUsedBytes": 1}})
    return {f.name + sfx for f in collector.collect() for sfx in SUFFIXES[f.type]}


@promtool
def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    exe = binary("promtool")
    checked = subprocess.run([exe, "check", "rules", str(RULES)], capture_output=True,
                             text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout
    tested = subprocess.run([exe, "test", "rules", RULES_TEST.name], cwd=RULES_TEST.parent,
                            capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr


@promtool
def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """Each query, macros replaced, as a recording rule that `promtool check rules` parses."""
    recorded = []
    for i, expr in enumerate(_queries()):
        recorded.append({"record": f"dashboard:query_{i}", "expr": expanded(expr)})
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recorded}]}))
    checked = subprocess.run([binary("promtool"), "check", "rules", str(path)],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(recorded)} rules found" in checked.stdout


def test_the_dashboard_is_well_formed() -> None:
    dashboard = board()
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["tempo"]["query"] == "tempo"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                 for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"{p['title']} overlaps another panel"
        taken |= cells
        if p["type"] == "row":
            continue
        uid = p["datasource"]["uid"]
        assert uid.startswith("${") and uid[2:-1] in variables, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"]
            assert "expr" in t or t.get("queryType") == "serviceMap", p["title"]
    types = {p["type"] for p in dashboard["panels"]}
    assert {"nodeGraph", "timeseries", "stat", "table", "row"} <= types
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("wait p99", "lag", "broken", "incomplete", "trace context", "micro-batch"):
        assert topic in titles, topic


def test_dashboard_and_rules_use_only_metrics_the_stream_serves() -> None:
    exported = _exported()
    used = {m for e in _queries() + _rule_exprs() for m in METRIC.findall(e)}
    assert len(used) > 20
    assert used <= exported, used - exported
    # The node graph reads the service-graph series Grafana's Tempo data source queries.
    assert {"traces_service_graph_request_total",
            "traces_service_graph_request_server_seconds_bucket"} <= exported
