"""The Kafka release the test brokers run: HERALD_TEST_KAFKA_VERSION when set; else
HERALD_TEST_KAFKA naming a release line of `KAFKA_TESTED_VERSIONS` (`3.9`, `4.3`) picks that
line's tested release; the pinned one otherwise."""

from __future__ import annotations

import os

from protocol.kafka_versions import KAFKA_TESTED_VERSIONS, KAFKA_VERSION


def kafka_version() -> str:
    explicit = os.environ.get("HERALD_TEST_KAFKA_VERSION")
    if explicit:
        return explicit
    line = os.environ.get("HERALD_TEST_KAFKA", "")
    for version in KAFKA_TESTED_VERSIONS:
        if line and version.startswith(line):
            return version
    return KAFKA_VERSION
