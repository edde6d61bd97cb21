"""What a new user does from a fresh clone: Herald on the shipped proxy.yaml (as `herald dev`
runs it, here in front of the test session's broker), `scripts/pipeline_demo.py`, then the
`herald pipeline batch` command the demo prints. Every edge of the graph is one of Herald's own
links, none inferred, and the summary and the report say so."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from interceptors.tracing import parse_traceparent
from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all
from tests.support.herald_process import REPO, HeraldProcess, shipped_config


def _records(broker: str, topic: str) -> list:
    """Every record of `topic`, read from the broker itself."""
    probe = Consumer({"bootstrap.servers": broker, "group.id": "demo-probe"})
    try:
        partitions = probe.list_topics(topic, timeout=30).topics[topic].partitions
        count = sum(probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                    for p in partitions)
    finally:
        probe.close()
    return consume_all(broker, topic, count)


def _parents(msg: object) -> list[tuple[str, int, int]]:
    out = []
    for key, value in msg.headers() or []:
        if key == "herald.parent":
            topic, partition, offset = value.decode().rsplit(":", 2)
            out.append((topic, int(partition), int(offset)))
    return out


def _trace(msg: object) -> str | None:
    tp = parse_traceparent(dict(msg.headers() or []).get("traceparent"))
    return tp.trace_id if tp else None


def test_the_demo_on_the_shipped_config_gives_a_graph_of_herald_s_links(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    with HeraldProcess(shipped_config(kafka.bootstrap)) as herald:
        demo = subprocess.run(
            [sys.executable, "scripts/pipeline_demo.py", "--herald", herald.bootstrap,
             "--broker", kafka.bootstrap], cwd=REPO, capture_output=True, text=True,
            timeout=300)
    assert demo.returncode == 0, demo.stderr[-4000:]
    command = demo.stdout.strip().splitlines()[-1]
    program, *args = shlex.split(command)
    assert program == ".venv/bin/herald" and args[:2] == ["pipeline", "batch"], command
    topics = dict(zip(("orders", "payments", "shipments", "fraud"),
                      args[args.index("--topics") + 1].split(","), strict=True))

    # What Herald wrote: each record a service produced names one record of its own trace,
    # the same order number (a fraud check its order, not the payment B made of it).
    records = {t: _records(kafka.bootstrap, name) for t, name in topics.items()}
    by_key = {(m.topic(), m.partition(), m.offset()): m for ms in records.values() for m in ms}
    continued = Counter()
    for role, msgs in records.items():
        for m in msgs:
            parents = _parents(m)
            if role == "orders":  # A starts each trace; the legacy records have none
                assert parents == []
                continue
            assert len(parents) == 1 and parents[0] in by_key, (m.topic(), m.offset(), parents)
            parent = by_key[parents[0]]
            assert _trace(parent) == _trace(m) is not None
            assert parent.value().split()[1] == m.value().split()[1]
            continued[(parents[0][0], m.topic())] += 1
    assert set(continued) == {(topics["orders"], topics["payments"]),
                              (topics["orders"], topics["fraud"]),
                              (topics["payments"], topics["payments"]),  # the retry loop
                              (topics["payments"], topics["shipments"])}

    output = tmp_path / "pipeline-out"
    batch = subprocess.run([sys.executable, "-m", "herald", *args, "--output", str(output)],
                           cwd=REPO, capture_output=True, text=True, timeout=600)
    assert batch.returncode == 0, batch.stderr[-4000:]
    printed = json.loads(batch.stdout.strip().splitlines()[-1])
    summary = json.loads((output / "summary.json").read_text())
    linked = sum(continued.values())
    for links in (printed["links"], summary["links"]):
        assert (links["linked"], links["inferred"], links["unresolved"]) == (linked, 0, 0)
    edges = {(e["from_topic"], e["to_topic"]): e for e in summary["edges"]}
    assert set(edges) == set(continued)
    for edge, n in continued.items():
        assert (edges[edge]["count"], edges[edge]["linked"], edges[edge]["inferred"],
                edges[edge]["link"]) == (n, n, 0, "linked"), edge
    report = (output / "report.html").read_text()
    table = report[report.index("<th>edge</th>"):report.index("<h2>Pathways</h2>")]
    assert table.count("</tr>") == len(edges) + 1  # a row per edge, none marked inferred
    assert "class='tag inferred'" not in report and " inferred</text>" not in report
