"""Run Kafka's own Java tools (console clients, topic command, perf tools) from the cached jars."""

from __future__ import annotations

import subprocess
from pathlib import Path

from proxy.devtools.embedded_kafka import jvm_opts, write_log_config
from proxy.devtools.kafka_dist import cache_root, classpath

CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"

_ONE_FLAG_MANY_VALUES = {PRODUCER_PERF}
"""Tools whose `--command-property` takes every property after one flag (argparse4j, `nargs
"+"`): given the flag twice, they keep only the last one's values. The others (jopt-simple)
take one property per flag and collect every flag."""


def command_properties(main_class: str, properties: dict[str, str]) -> list[str]:
    """The `--command-property` arguments that hand every one of `properties` to `main_class`.

    ProducerPerformance drops all but the last `--command-property` flag, so a second flag
    silently undoes the first (`acks=all` then `compression.type=lz4` leaves acks at its
    default); the console tools and ConsumerPerformance need one flag per property."""
    pairs = [f"{key}={value}" for key, value in properties.items()]
    if not pairs:
        return []
    if main_class in _ONE_FLAG_MANY_VALUES:
        return ["--command-property", *pairs]
    return [arg for pair in pairs for arg in ("--command-property", pair)]


def run_tool(
    main_class: str,
    *args: str,
    version: str | None = None,
    input: str | None = None,
    timeout: float = 120.0,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run one Kafka tool in a fresh JVM; logging at WARN so stdout is the tool's output."""
    cmd = tool_command(main_class, *args, version=version)
    result = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(
            f"{main_class} exited {result.returncode}\nstdout:\n{result.stdout[-3000:]}\n"
            f"stderr:\n{result.stderr[-3000:]}"
        )
    return result


def tool_command(main_class: str, *args: str, version: str | None = None) -> list[str]:
    """The command line that runs one Kafka tool (for a test that streams its input)."""
    cp = classpath(version) if version else classpath()
    flags = write_log_config(Path(cache_root()) / "tool-logging", level="WARN")
    return ["java", "-Xmx512m", *jvm_opts(cp), *flags, "-cp", cp, main_class, *args]


def share_group_from_start(broker: str, group: str) -> None:
    """A share group (KIP-932) starts at the end of a partition unless told otherwise: this
    one reads from the start (`share.auto.offset.reset`, set on the broker before it joins)."""
    run_tool(CONFIG_COMMAND, "--bootstrap-server", broker, "--alter", "--entity-type",
             "groups", "--entity-name", group, "--add-config", "share.auto.offset.reset=earliest")
