"""Kafka's JVMs start from the class archive setup made: the broker maps it, and a tool loads
its classes from it rather than from the jars. Where this JDK writes no archive, the trainer
says why instead of failing setup, and a broker that lost its archive is reported."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from configuration import jvm_archive
from proxy.devtools import kafka_archive
from proxy.devtools.embedded_kafka import KafkaCluster, class_archive
from proxy.devtools.kafka_dist import classpath
from tests.support.java_tools import tool_command
from tests.support.required_parts import class_archive as setup_archive


def _archive() -> Path:
    return setup_archive(class_archive(classpath()))


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


def test_a_training_broker_that_dies_keeps_no_archive_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed JVM may have written part of its archive: nothing is kept, and the reason is
    the exit, not silence. (The archive goes to a cache of the test's own.)"""
    refused = jvm_archive.dumping_refused()
    if refused is not None:  # such a JDK does not start with the dump's flag at all
        pytest.xfail(f"this JDK writes no class archive: {refused}")
    cp = classpath()
    monkeypatch.setenv("HERALD_CACHE_DIR", str(tmp_path / "cache"))
    # The jars stay where setup put them: only the archive's folder moves.
    monkeypatch.setattr("proxy.devtools.embedded_kafka.classpath", lambda version=None: cp)
    cluster = KafkaCluster(size=1, train_archive=True, heap="512m")
    with cluster:
        (node,) = cluster.nodes
        assert node.process is not None
        os.killpg(node.process.pid, 9)
        node.process.wait(30)
    archive = class_archive(cp)
    assert archive.parent == tmp_path / "cache" / jvm_archive.FOLDER
    assert not archive.exists() and list(archive.parent.iterdir()) == []
    assert cluster.archive_failure is not None
    assert cluster.archive_failure.startswith(
        "the JVM exited with -9, so a partial archive was not kept")
    assert cluster.workdir is not None and not cluster.workdir.exists()  # the log read first


def test_a_stopped_cluster_leaves_no_folder_behind() -> None:
    cluster = KafkaCluster(size=1, heap="512m")
    with cluster:
        assert cluster.workdir is not None and cluster.workdir.is_dir()
    assert not cluster.workdir.exists() and cluster.archive_failure is None


def test_a_jdk_that_writes_no_archive_is_reported_and_setup_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    java = tmp_path / "java"  # acts as a JDK without its base archive does
    java.write_text("#!/bin/sh\necho 'Error occurred during initialization of VM'\n"
                    "echo 'DynamicDumpSharedSpaces is unsupported when base CDS archive is "
                    "not loaded'\nexit 1\n")
    java.chmod(0o755)
    monkeypatch.setenv("HERALD_CACHE_DIR", str(tmp_path / "cache"))
    cp = classpath()
    monkeypatch.setattr(kafka_archive, "classpath", lambda version=None: cp)
    refusal = jvm_archive.dumping_refused(str(java))
    monkeypatch.setattr(jvm_archive, "dumping_refused", lambda java="java": refusal)
    with pytest.raises(kafka_archive.ArchiveNotMade, match="base CDS archive is not loaded"):
        kafka_archive.train()
    assert kafka_archive.main([]) == 0
    said = capsys.readouterr().out
    assert "no class archive, its JVMs start without one" in said
    assert "base CDS archive is not loaded" in said
    # ... and the suite's tests of the archive learn why it is missing.
    assert "base CDS archive is not loaded" in (
        jvm_archive.why_not_made(class_archive(cp)) or "")
