"""The second cluster the routing tests move records to."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.kafka_version import kafka_version


@pytest.fixture(scope="module")
def kafka_b() -> Iterator[KafkaCluster]:
    """A second, independent cluster: the routing destination."""
    with KafkaCluster(size=1, version=kafka_version()) as cluster:
        yield cluster
