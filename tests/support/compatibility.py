"""The compatibility matrix: which client, on which broker, with which feature, works through
Herald with its headers and its chain's policies applied to every record.

`tests/integration/proxy/test_compatibility.py` runs the cells and records each outcome here
(`record`), in the cache; `python -m tests.support.compatibility` writes
docs/compatibility.md from the last run, with the versions and the date it ran, and names the
cells no run tested.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from configuration.cache import cache_root
from protocol.kafka_versions import KAFKA_TESTED_VERSIONS

RESULTS = "compat/results.json"
DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"

# (client, feature) rows of the matrix, in the order the document lists them.
ROWS: tuple[tuple[str, str], ...] = (
    ("Java 4.4 (console tools)", "produce, classic group"),
    ("Java 4.4 (console tools)", "KIP-848 group"),
    ("Java 4.4 (console tools)", "share group"),
    ("Java 4.4 (console tools)", "TLS, SASL/SCRAM passthrough"),
    ("Java 3.9 (console tools)", "produce, classic group"),
    ("librdkafka (confluent-kafka)", "produce none"),
    ("librdkafka (confluent-kafka)", "produce gzip"),
    ("librdkafka (confluent-kafka)", "produce snappy"),
    ("librdkafka (confluent-kafka)", "produce lz4"),
    ("librdkafka (confluent-kafka)", "produce zstd"),
    ("librdkafka (confluent-kafka)", "KIP-848 group"),
    ("librdkafka (confluent-kafka)", "share group"),
    ("librdkafka (confluent-kafka)", "transactions"),
    ("librdkafka (confluent-kafka)", "TLS, SASL/SCRAM passthrough"),
    ("kafka-python", "produce, classic group"),
    ("kafka-python", "TLS, SASL/SCRAM passthrough"),
    ("aiokafka", "produce, classic group"),
    ("aiokafka", "TLS, SASL/SCRAM passthrough"),
    ("franz-go", "produce, classic group"),
    ("franz-go", "KIP-848 group"),
    ("franz-go", "TLS, SASL/SCRAM passthrough"),
    ("Sarama", "produce, classic group"),
    ("Sarama", "TLS, SASL/SCRAM passthrough"),
    ("kafka-go", "produce, classic group"),
    ("kafka-go", "TLS, SASL/SCRAM passthrough"),
    ("KafkaJS", "produce, classic group"),
    ("KafkaJS", "TLS, SASL/SCRAM passthrough"),
    ("Kafka Streams 4.4", "classic group, exactly once"),
    ("Kafka Streams 4.4", "streams group, exactly once"),
)
NOT_TESTED = (
    "Kafka Streams' own checks (the output continuing each input's trace and linked to it) "
    "are tests/integration/interceptors/test_kafka_streams.py's, on the pinned broker. Herald "
    "passes the streams group APIs undecoded, so their `PartitionsByUserEndpoint` (the "
    "application's own instances) stay as they are.",
    "Mutual TLS and the other SASL mechanisms (PLAIN, SCRAM-SHA-256, OAUTHBEARER, "
    "credentials Herald injects) for every client: tests/integration/proxy/security and "
    "tests/integration/proxy/native test those against the pinned broker with librdkafka, "
    "the Java tools and kafka-python, not in these columns.",
    "KafkaJS's TLS/SASL cell sets `reauthenticationThreshold` to 1 s. With its default (10 s) "
    "and these brokers' 8 s `connections.max.reauth.ms`, KafkaJS 2.2.4 re-authenticates in a "
    "way the broker refuses (`ILLEGAL_SASL_STATE` on its SaslHandshake), straight to the broker "
    "as much as through Herald.",
)


def not_applicable(broker: str, feature: str) -> str | None:
    """Why a feature cannot work on a broker release at all (None: it can)."""
    if broker.startswith("3.") and feature == "share group":
        return "not applicable: share groups need Kafka 4.x"
    if broker.startswith("3.") and feature.startswith("streams group"):
        return "not applicable: the streams group protocol (KIP-1071) needs Kafka 4.x"
    if broker.startswith("3.") and feature == "KIP-848 group":
        return "not applicable: the KIP-848 protocol is off by default in 3.9"
    return None


def _path() -> Path:
    return cache_root() / RESULTS


def _client_versions() -> str:
    import aiokafka
    import confluent_kafka
    import kafka

    from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_VERSION
    from tests.support.foreign_clients import versions
    return (f"Java console tools {KAFKA_VERSION} and {KAFKA_LEGACY_VERSION}, confluent-kafka "
            f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]}), "
            f"kafka-python {kafka.__version__}, aiokafka {aiokafka.__version__}, {versions()}")


def record(broker: str, client: str, feature: str, outcome: str, detail: str = "") -> None:
    """One cell's outcome (`passed` or `failed`)."""
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {"cells": {}}
    data["clients"] = _client_versions()
    data["cells"][f"{broker}|{client}|{feature}"] = {
        "outcome": outcome, "detail": detail[:300], "at": time.strftime("%Y-%m-%d")}
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


def render(data: dict) -> str:
    cells = data.get("cells", {})
    dates = sorted({c["at"] for c in cells.values()})
    lines = [
        "# Compatibility",
        "",
        "Which clients work through Herald, on which Kafka brokers, with which features: each",
        "cell produces records through Herald (with `trace_context` and `audit` on the produce",
        "chain) and consumes them through it (with `drop_headers` on the fetch chain), and",
        "checks that every record arrived once, with Herald's headers and without the header",
        "the chain strips. Generated by `python -m tests.support.compatibility` from the last",
        "run of `tests/integration/proxy/test_compatibility.py`"
        + (f" ({', '.join(dates)})." if dates else " (none recorded)."),
        "",
        f"Clients: {data.get('clients', 'not recorded')}.",
        "",
        "The suite runs the column of the pinned broker on every run; all three columns with",
        "`HERALD_COMPAT_BROKERS=all bash scripts/test.sh tests/integration/proxy/"
        "test_compatibility.py`: on this 2-core machine, otherwise idle, the pinned column "
        "(30 cells) took 3 min 8 s, and the other two 4 min 8 s together when they held 45 "
        "cells (before the four TLS cells of the Go clients and KafkaJS, 8 more).",
        "",
        "| client | feature | " + " | ".join(f"Kafka {v}" for v in KAFKA_TESTED_VERSIONS) + " |",
        "|---|---|" + "---|" * len(KAFKA_TESTED_VERSIONS),
    ]
    counts = {"passed": 0, "failed": 0, "not tested": 0, "not applicable": 0}
    for client, feature in ROWS:
        row = []
        for broker in KAFKA_TESTED_VERSIONS:
            cell = cells.get(f"{broker}|{client}|{feature}")
            outcome = cell["outcome"] if cell else (
                not_applicable(broker, feature) or "not tested")
            kind = outcome.split(":")[0]
            counts[kind] = counts.get(kind, 0) + 1
            row.append(outcome)
        lines.append(f"| {client} | {feature} | " + " | ".join(row) + " |")
    lines += ["", "Cells: " + ", ".join(f"{n} {k}" for k, n in counts.items()) + ".", "",
              "Not in the matrix:", ""]
    lines += [f"- {text}" for text in NOT_TESTED]
    return "\n".join(lines) + "\n"


def main() -> int:
    try:
        data = json.loads(_path().read_text())
    except (OSError, ValueError) as exc:
        print(f"compatibility: no results at {_path()} ({exc}); run the matrix first",
              file=sys.stderr)
        return 1
    DOC.write_text(render(data))
    print(f"compatibility: wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
