"""Kafka's JVMs start from the class archive setup made: the broker maps it, and a tool loads
its classes from it rather than from the jars."""

from __future__ import annotations

import subprocess
from pathlib import Path

from proxy.devtools.embedded_kafka import KafkaCluster, class_archive
from proxy.devtools.kafka_dist import classpath
from tests.support.java_tools import tool_command
from tests.support.required_parts import class_archive as archive_part
from tests.support.required_parts import require


def _archive() -> Path:
    archive = class_archive(classpath())
    require(archive_part(archive))
    return archive


def test_the_broker_maps_the_archive(kafka: KafkaCluster) -> None:
    archive = _archive()
    (node,) = kafka.nodes
    assert node.process is not None
    maps = Path(f"/proc/{node.process.pid}/maps").read_text()
    assert str(archive) in maps


def test_a_tool_loads_its_classes_from_the_archive() -> None:
    _archive()
    command = tool_command("org.apache.kafka.tools.TopicCommand", "--version")
    java, rest = command[0], command[1:]
    run = subprocess.run([java, "-Xlog:class+load=info", *rest], capture_output=True,
                         text=True, timeout=60, check=True)
    loaded = [line for line in run.stdout.splitlines() if "source:" in line]
    archived = [line for line in loaded if "shared objects file (top)" in line]
    # The archive ("top", over the JDK's base archive) holds the classes the broker loaded,
    # Kafka's own among them; the tool's own few come from its jar.
    assert any(" org.apache.kafka." in line for line in archived)
    assert len(archived) > len(loaded) // 4
