"""The Kafka release the test brokers run: HERALD_TEST_KAFKA_VERSION when set, the legacy
release when HERALD_TEST_KAFKA names a 3.9 distribution, the pinned one otherwise."""

from __future__ import annotations

import os

from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_VERSION


def kafka_version() -> str:
    explicit = os.environ.get("HERALD_TEST_KAFKA_VERSION")
    if explicit:
        return explicit
    if os.environ.get("HERALD_TEST_KAFKA", "").startswith("3.9"):
        return KAFKA_LEGACY_VERSION
    return KAFKA_VERSION
