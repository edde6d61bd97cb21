"""The shipped dashboard's queries and alert rules, as the tests that check them read them
(deploy/grafana/herald-kafka-flows.json, deploy/prometheus/herald-stream-rules.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
BOARD = REPO / "deploy/grafana/herald-kafka-flows.json"
RULES = REPO / "deploy/prometheus/herald-stream-rules.yaml"
RULES_TEST = REPO / "deploy/prometheus/herald-stream-rules.test.yaml"
# Grafana's macros and variables, replaced by values PromQL accepts.
MACROS = {"$__rate_interval": "1m", "$__range": "1h", "$__interval": "1m", "$job": ".*"}


def board() -> dict:
    return json.loads(BOARD.read_text())


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every Prometheus target of `dashboard`, as Grafana writes it."""
    return [(p["title"], t["expr"]) for p in dashboard["panels"]
            for t in p.get("targets", []) if "expr" in t]


def expanded(expr: str) -> str:
    """`expr` with Grafana's macros and the dashboard's variables replaced."""
    for macro, value in MACROS.items():
        expr = expr.replace(macro, value)
    return expr


def rules() -> list[dict]:
    """Every rule of the shipped rule file (alerts and recordings), as written."""
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]
