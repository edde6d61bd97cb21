"""The test Kafka Streams application (UppercaseApp.java: each value of `source` upper-cased
into `sink`), run as a JVM of its own with Kafka Streams from Maven Central, for the tests
that put Streams through Herald."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from proxy.devtools.embedded_kafka import jvm_opts
from proxy.devtools.kafka_dist import kafka_libs, streams_libs
from tests.support.processes import stop

APP = Path(__file__).resolve().parent / "UppercaseApp.java"


@contextmanager
def running_app(bootstrap: str, app_id: str, source: str, sink: str, protocol: str,
                guarantee: str = "exactly_once_v2") -> Iterator[list[str]]:
    """The application, `state RUNNING` (its group joined, tasks assigned), until the block
    ends; yields its output lines so far (for a failure's message). `protocol`: the group
    protocol, `classic` or `streams` (KIP-1071)."""
    cp = f"{kafka_libs()}/*:{streams_libs()}/*"
    proc = subprocess.Popen(
        ["java", "-Xmx512m", *jvm_opts(cp), "-cp", cp, str(APP), bootstrap, app_id, source, sink,
         protocol, guarantee], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while "state RUNNING" not in lines:
            assert proc.poll() is None and time.monotonic() < deadline, "\n".join(lines[-40:])
            time.sleep(0.2)
        yield lines
    finally:
        stop(proc, 60)
