"""The arguments that hand client properties to Kafka's Java tools: every property must reach
the tool, whichever way its parser reads `--command-property` (tests/integration/proxy/
test_java_tools.py shows ProducerPerformance dropping all but the last flag)."""

from __future__ import annotations

from tests.support.java_tools import (
    CONSOLE_CONSUMER,
    CONSUMER_PERF,
    PRODUCER_PERF,
    command_properties,
)

PROPS = {"acks": "all", "compression.type": "lz4", "client.id": "x=y"}


def test_producer_performance_gets_every_property_after_one_flag() -> None:
    assert command_properties(PRODUCER_PERF, PROPS) == [
        "--command-property", "acks=all", "compression.type=lz4", "client.id=x=y"]


def test_the_other_tools_get_one_flag_per_property() -> None:
    for tool in (CONSUMER_PERF, CONSOLE_CONSUMER):
        assert command_properties(tool, PROPS) == [
            "--command-property", "acks=all", "--command-property", "compression.type=lz4",
            "--command-property", "client.id=x=y"]


def test_no_properties_no_flag() -> None:
    assert command_properties(PRODUCER_PERF, {}) == []
