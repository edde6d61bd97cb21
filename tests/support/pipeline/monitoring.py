"""The shipped dashboards' queries and alert rules, as the tests that check them read them
(deploy/grafana/herald-kafka-flows.json, the stream's; deploy/grafana/herald-dashboard.json,
Herald's own; deploy/prometheus/herald-stream-rules.yaml)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from tests.support.prometheus import Prometheus

REPO = Path(__file__).resolve().parents[3]
BOARD = REPO / "deploy/grafana/herald-kafka-flows.json"
HERALD_BOARD = REPO / "deploy/grafana/herald-dashboard.json"
RULES = REPO / "deploy/prometheus/herald-stream-rules.yaml"
RULES_TEST = REPO / "deploy/prometheus/herald-stream-rules.test.yaml"
# Grafana's macros and variables, replaced by values PromQL accepts.
MACROS = {"$__rate_interval": "1m", "$__range": "1h", "$__interval": "1m", "$job": ".*",
          "$instance": ".*"}


def board(path: Path = BOARD) -> dict:
    return json.loads(path.read_text())


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every Prometheus target of `dashboard`, as Grafana writes it."""
    return [(p["title"], t["expr"]) for p in dashboard["panels"]
            for t in p.get("targets", []) if "expr" in t]


def expanded(expr: str) -> str:
    """`expr` with Grafana's macros and the dashboard's variables replaced."""
    for macro, value in MACROS.items():
        expr = expr.replace(macro, value)
    return expr


def empty_panels(prom: Prometheus, dashboard: dict) -> list[str]:
    """The dashboard's queries (macros replaced) that would show "No data": no series at all,
    or only NaN where the query is not a share or quantile of what moved in a rate window
    (0/0 there means nothing moved in that window, which a panel rightly shows as no data).
    Anything cumulative must be a number."""
    empty = []
    for title, expr in queries(dashboard):
        values = [r["value"] for r in prom.query(expanded(expr))]
        windowed = "rate(" in expr and ("histogram_quantile" in expr or " / " in expr)
        if not values or not (windowed or any(math.isfinite(v) for v in values)):
            empty.append(f"{title}: {expr} -> {values}")
    return empty


def rules() -> list[dict]:
    """Every rule of the shipped rule file (alerts and recordings), as written."""
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]
