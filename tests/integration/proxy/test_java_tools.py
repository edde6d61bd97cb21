"""Apache Kafka's own Java tools, pointed at Herald instead of the broker.

The CLI and perf tools are what operators reach for first, and they use the reference Java
client with its newest protocol versions, so they must work through the proxy unchanged. Every
test checks what the tool printed (topic layout, the exact records and headers, record counts),
not only its exit code: a proxy that drops headers, rewrites the wrong address or loses records
must fail here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.herald_process import HeraldProcess
from tests.support.java_tools import (
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    CONSUMER_PERF,
    PRODUCER_PERF,
    TOPIC_COMMAND,
    command_properties,
    run_tool,
)

# Not among the shared constants: prints each broker as the client was told it, with its APIs.
BROKER_API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand"
PERF_RECORDS = 20_000
PERF_RECORD_SIZE = 1024


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    result = run_tool(
        TOPIC_COMMAND, "--bootstrap-server", bootstrap, "--create", "--topic", topic,
        "--partitions", str(partitions), "--replication-factor", "1",
    )
    assert f"Created topic {topic}." in result.stdout, result.stdout + result.stderr


def describe_topic(bootstrap: str, topic: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Run `--describe` and split its output into the topic line and one dict per partition.

    Each line is tab-separated `Name: value` fields; partition lines start with a tab.
    """
    result = run_tool(
        TOPIC_COMMAND, "--bootstrap-server", bootstrap, "--describe", "--topic", topic
    )
    summary: dict[str, str] = {}
    partitions: list[dict[str, str]] = []
    for line in result.stdout.splitlines():
        if not line.strip():
            continue
        fields = dict(
            (name.strip(), value.strip())
            for name, _, value in (part.partition(":") for part in line.strip().split("\t"))
        )
        if line.startswith("\t"):
            partitions.append(fields)
        else:
            summary = fields
    return summary, partitions


def test_topic_command_create_and_describe(
    herald: HeraldProcess, kafka: KafkaCluster, topic_name: str
) -> None:
    create_topic(herald.bootstrap, topic_name, partitions=3)

    summary, partitions = describe_topic(herald.bootstrap, topic_name)
    assert summary.get("Topic") == topic_name
    assert summary.get("PartitionCount") == "3"
    assert summary.get("ReplicationFactor") == "1"
    assert sorted(p["Partition"] for p in partitions) == ["0", "1", "2"]
    node_ids = {str(n.node_id) for n in kafka.nodes}
    for p in partitions:
        assert p["Topic"] == topic_name
        assert p["Leader"] in node_ids, p
        assert p["Replicas"] == p["Leader"]
        assert p["Isr"] == p["Leader"]

    # The broker itself must agree: same topic id, same leaders.
    direct_summary, direct_partitions = describe_topic(kafka.bootstrap, topic_name)
    assert summary["TopicId"] == direct_summary["TopicId"]
    assert sorted(partitions, key=lambda p: p["Partition"]) == sorted(
        direct_partitions, key=lambda p: p["Partition"]
    )


def test_broker_api_versions_lists_herald_addresses(
    herald: HeraldProcess, kafka: KafkaCluster
) -> None:
    """Every broker must be advertised at Herald's port for it, never at its own address.

    Otherwise clients would bootstrap through Herald and then talk to the brokers directly,
    and every other test here would pass without the proxy in the data path.
    """
    result = run_tool(BROKER_API_VERSIONS, "--bootstrap-server", herald.bootstrap)
    advertised = re.findall(r"^(\S+) \(id: (\d+) ", result.stdout, re.MULTILINE)
    expected = sorted(
        (f"127.0.0.1:{herald.port_base + n.node_id}", str(n.node_id)) for n in kafka.nodes
    )
    assert sorted(advertised) == expected, result.stdout[:2000]
    for node in kafka.nodes:
        assert node.address not in result.stdout
    for api in ("Produce(0)", "Fetch(1)", "Metadata(3)", "ApiVersions(18)"):
        assert api in result.stdout


def header_records(count: int) -> list[tuple[str, str, str]]:
    """(headers, key, value) in the console tools' text form: `h1:v1,h2:v2`, key, value.

    Covers what a header-aware proxy could get wrong: several headers, a repeated key whose
    order matters, an empty value, and values of different lengths.
    """
    records = []
    for i in range(count):
        headers = [f"traceparent:00-{i + 1:032x}-{i + 1:016x}-01", f"seq:{i}"]
        if i % 3 == 0:
            headers += ["dup:first", "dup:second"]
        if i % 4 == 1:
            headers.append("empty:")
        records.append((",".join(headers), f"key-{i}", f"value {i} " + "x" * (i * 7)))
    return records


def test_console_producer_and_consumer_keep_headers(herald: HeraldProcess, topic_name: str) -> None:
    create_topic(herald.bootstrap, topic_name, partitions=3)
    sent = header_records(30)
    lines = "".join(f"{h}\t{k}\t{v}\n" for h, k, v in sent)
    run_tool(
        CONSOLE_PRODUCER, "--bootstrap-server", herald.bootstrap, "--topic", topic_name,
        "--reader-property", "parse.key=true",
        "--reader-property", "parse.headers=true",
        input=lines, timeout=60,
    )

    result = run_tool(
        CONSOLE_CONSUMER, "--bootstrap-server", herald.bootstrap, "--topic", topic_name,
        "--from-beginning", "--max-messages", str(len(sent)), "--timeout-ms", "30000",
        "--formatter-property", "print.headers=true",
        "--formatter-property", "print.key=true",
        timeout=60,
    )
    received = [tuple(line.split("\t", 2)) for line in result.stdout.splitlines() if line]
    assert f"Processed a total of {len(sent)} messages" in result.stderr, result.stderr[-2000:]
    # Partitions interleave arbitrarily, so compare as sorted lists; header order inside a
    # record is part of each tuple and must be exactly as sent.
    assert sorted(received) == sorted(sent)


@pytest.fixture(scope="module")
def perf_topic(herald: HeraldProcess) -> Iterator[tuple[str, str]]:
    """A topic filled by ProducerPerformance through Herald; yields (topic, tool stdout)."""
    topic = f"t-java-perf-{uuid.uuid4().hex[:8]}"
    create_topic(herald.bootstrap, topic, partitions=3)
    result = run_tool(
        PRODUCER_PERF, "--bootstrap-server", herald.bootstrap, "--topic", topic,
        "--num-records", str(PERF_RECORDS), "--record-size", str(PERF_RECORD_SIZE),
        "--throughput", "-1", "--command-property", "acks=all",
        timeout=120,
    )
    assert "Exception" not in result.stderr, result.stderr[-3000:]
    yield topic, result.stdout


def test_producer_performance(perf_topic: tuple[str, str]) -> None:
    _, output = perf_topic
    summary = [line for line in output.splitlines() if "99th" in line]
    assert len(summary) == 1, output
    # Only acknowledged records are counted in the summary, failures are printed as exceptions.
    match = re.match(r"(\d+) records sent, ([\d.]+) records/sec", summary[0])
    assert match, summary[0]
    assert int(match.group(1)) == PERF_RECORDS
    assert float(match.group(2)) > 0


def test_consumer_performance(herald: HeraldProcess, perf_topic: tuple[str, str]) -> None:
    topic, _ = perf_topic
    result = run_tool(
        CONSUMER_PERF, "--bootstrap-server", herald.bootstrap, "--topic", topic,
        "--num-records", str(PERF_RECORDS), "--timeout", "30000",
        timeout=120,
    )
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
    stats = dict(zip(lines[header].split(", "), lines[header + 1].split(", "), strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == PERF_RECORDS, result.stdout + result.stderr
    expected_mb = PERF_RECORDS * PERF_RECORD_SIZE / (1024 * 1024)
    assert float(stats["data.consumed.in.MB"]) == pytest.approx(expected_mb, abs=0.001)
    assert "Exiting before consuming" not in result.stdout + result.stderr


def test_producer_performance_keeps_every_command_property(
    herald: HeraldProcess, topic_name: str, tmp_path: Path
) -> None:
    """ProducerPerformance keeps only the last `--command-property` flag: the harness hands it
    every property after one flag. Seen in the client's own metrics: its client id (a property
    before the last) tags them, and its batches are compressed (lz4 shrinks records of one
    repeated letter to a fraction, 1.0 uncompressed); given one flag each, the client id is
    lost."""
    create_topic(herald.bootstrap, topic_name, partitions=1)
    client = f"perf-props-{uuid.uuid4().hex[:8]}"
    wanted = {"acks": "all", "client.id": client, "compression.type": "lz4"}
    payload = tmp_path / "payload.txt"
    payload.write_text("a" * 1000 + "\n")
    run = ["--bootstrap-server", herald.bootstrap, "--topic", topic_name, "--num-records",
           "2000", "--payload-file", str(payload), "--throughput", "-1", "--print-metrics"]

    kept = run_tool(PRODUCER_PERF, *run, *command_properties(PRODUCER_PERF, wanted)).stdout
    rate = re.search(r"^producer-metrics:compression-rate-avg:\{client-id=([^}]*)\}\s*:\s*"
                     r"([\d.]+)", kept, re.MULTILINE)
    assert rate, kept[-3000:]
    assert rate.group(1) == client
    assert 0 < float(rate.group(2)) < 0.2

    one_each = [arg for key, value in wanted.items()
                for arg in ("--command-property", f"{key}={value}")]
    lost = run_tool(PRODUCER_PERF, *run, *one_each).stdout
    assert "compression-rate-avg:{client-id=perf-producer-client}" in lost, lost[-3000:]
    assert f"client-id={client}" not in lost
