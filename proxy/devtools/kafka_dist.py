"""Apache Kafka's jars, resolved from Maven Central with Maven and cached.

Herald never downloads a Kafka tarball: the broker, the CLI tools and the perf tools all run
from the runtime closure of `kafka_2.13` and `kafka-tools`, which Maven copies into one folder.
The Maven POMs carry no SLF4J binding, so one is added (log4j2's for 4.x, reload4j's for 3.9),
otherwise the broker would run without any log output.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from configuration.cache import cache_root
from protocol.kafka_versions import KAFKA_VERSION

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>herald.cache</groupId>
  <artifactId>kafka-libs</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""
_DEP = (
    "    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
    "<version>{v}</version></dependency>"
)


class KafkaDistError(RuntimeError):
    """The Kafka jars could not be resolved (Maven missing, offline, or an unknown version)."""


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """Return a folder holding every runtime jar of Kafka `version`, fetching it once.

    The folder is complete or absent: jars are copied into a temporary folder that is renamed
    into place only after Maven succeeded, so an interrupted download is retried next time.
    """
    return _resolved(version, "libs", f"kafka-clients-{version}.jar", [
        ("org.apache.kafka", "kafka_2.13", version),
        ("org.apache.kafka", "kafka-tools", version),
    ])


def streams_libs(version: str = KAFKA_VERSION) -> Path:
    """A folder holding Kafka Streams `version` and its runtime jars, fetched once like
    `kafka_libs` (a folder of its own: the broker's closure does not include it)."""
    return _resolved(version, "streams", f"kafka-streams-{version}.jar", [
        ("org.apache.kafka", "kafka-streams", version),
    ])


def _resolved(version: str, folder: str, marker: str, deps: list[tuple[str, str, str]]) -> Path:
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise KafkaDistError(f"not a Kafka release version: {version!r}")
    dest = cache_root() / "kafka" / version / folder
    if (dest / marker).exists():
        return dest
    if shutil.which("mvn") is None:
        raise KafkaDistError("Maven (mvn) is needed to fetch the Kafka jars; install it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    # One resolver at a time per folder: a second process (a parallel test worker) waits and
    # then finds the folder complete, instead of replacing it under a running broker.
    with open(dest.parent / f".{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / marker).exists():
            _resolve_into(dest, folder, deps)
    return dest


def _resolve_into(dest: Path, folder: str, deps: list[tuple[str, str, str]]) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"{folder}-", dir=dest.parent))
    try:
        _copy_dependencies(work, deps)
        binding = _slf4j_binding(work)
        if binding is not None:
            _copy_dependencies(work, deps + [binding])
        if dest.exists():
            shutil.rmtree(dest)
        (work / "jars").rename(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def classpath(version: str = KAFKA_VERSION) -> str:
    """A java `-cp` value naming every jar of `version`."""
    return str(kafka_libs(version) / "*")


def _copy_dependencies(work: Path, deps: list[tuple[str, str, str]]) -> None:
    body = "\n".join(_DEP.format(g=g, a=a, v=v) for g, a, v in deps)
    (work / "pom.xml").write_text(_POM.format(deps=body))
    cmd = [
        "mvn", "-B", "-q", "-f", str(work / "pom.xml"),
        "dependency:copy-dependencies", "-DincludeScope=runtime",
        f"-DoutputDirectory={work / 'jars'}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise KafkaDistError(f"mvn could not resolve {deps}:\n{tail}")


def _slf4j_binding(work: Path) -> tuple[str, str, str] | None:
    """Pick the SLF4J binding that matches the logging backend already in the closure."""
    names = [p.name for p in (work / "jars").glob("*.jar")]
    if any(n.startswith("slf4j-reload4j-") for n in names):
        return None
    for name in names:
        m = re.fullmatch(r"log4j-core-(\d[\w.\-]*)\.jar", name)
        if m:
            return ("org.apache.logging.log4j", "log4j-slf4j-impl", m.group(1))
    for name in names:
        m = re.fullmatch(r"slf4j-api-(\d[\w.\-]*)\.jar", name)
        if m:
            return ("org.slf4j", "slf4j-reload4j", m.group(1))
    return None
