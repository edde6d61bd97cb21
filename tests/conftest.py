"""Shared fixtures: real Apache Kafka brokers (KRaft) and Herald in front of them.

Brokers start once per test session. `HERALD_TEST_KAFKA_VERSION` picks the Kafka release
(default: the pinned 4.x); `HERALD_TEST_KAFKA=3.9` is a shorthand for the pinned latest 3.9.x.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest

from pipeline.session import JVM_OPTS_ENV as SPARK_JVM_OPTS_ENV
from proxy.devtools.embedded_kafka import JVM_OPTS_ENV, KafkaCluster
from tests.support import native_parts, parallel, required_parts
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.kafka_version import kafka_version
from tests.support.secure_cluster import SecureCluster, start_secure_cluster

# A parallel worker picks its ports from a slice of its own (tests/support/parallel.py).
parallel.claim_port_share()
# The suite's brokers and Java tools carry a few records each: the client compiler alone and
# one GC thread cost them a third less CPU to start and idle, which the other workers use.
os.environ.setdefault(JVM_OPTS_ENV, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
# Spark's JVMs too (the driver, executors, a standalone cluster's daemons): a micro-batch of a
# few hundred rows is mostly code run once, which the optimising compiler only costs CPU for.
os.environ.setdefault(SPARK_JVM_OPTS_ENV, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaCluster]:
    """One real broker for the whole session."""
    with KafkaCluster(size=1, version=kafka_version()) as cluster:
        yield cluster


@pytest.fixture
def private_cluster() -> Iterator[KafkaCluster]:
    """A broker of the test's own, so that stopping or pausing it disturbs no other test."""
    with KafkaCluster(size=1, version=kafka_version(), heap="512m") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """Three real brokers (node ids 1..3), for tests that need several leaders."""
    with KafkaCluster(size=3, version=kafka_version(), heap="512m") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def secure() -> Iterator[SecureCluster]:
    """A broker with secured listeners (tests/support/secure_cluster.py), per module."""
    cluster = start_secure_cluster(kafka_version())
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def herald(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    """Herald with the default (empty) chains in front of the session broker."""
    with HeraldProcess(herald_config(kafka.bootstrap)) as proc:
        yield proc


@pytest.fixture(scope="session")
def herald_cluster(kafka_cluster: KafkaCluster) -> Iterator[HeraldProcess]:
    """Herald in front of the 3-broker cluster."""
    with HeraldProcess(herald_config(kafka_cluster.nodes[0].address)) as proc:
        yield proc


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test (auto-created or created by the test)."""
    base = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:40]
    return f"t-{base}-{uuid.uuid4().hex[:8]}"


def pytest_configure(config: pytest.Config) -> None:
    """scripts/sanitize.sh runs the native tests with the ASan runtime preloaded into pytest
    (HERALD_SANITIZER_RUNTIME names it): the Herald processes they start get it again
    (tests/support/herald_process.py), the Java brokers and tools do not. An xdist controller
    keeps it for the workers it starts: it starts no broker or tool itself."""
    controller = getattr(config.option, "numprocesses", None) and not os.environ.get(
        "PYTEST_XDIST_WORKER")
    if os.environ.get("HERALD_SANITIZER_RUNTIME") and not controller:
        os.environ.pop("LD_PRELOAD", None)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under `HERALD_TEST_STRICT=1` (CI) a run without every required part (native and of
    the machine: tests/support/required_parts.py) stops before any test: a failed optional
    build or a missing package must not pass as a suite of skips."""
    if native_parts.STRICT and (absent := native_parts.missing() + required_parts.missing()):
        raise pytest.UsageError("HERALD_TEST_STRICT=1 and a required part is missing:\n  "
                                + "\n  ".join(absent))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the heaviest groups of modules first (tests/support/parallel.py)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        parallel.schedule(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Whole modules, and groups of them, to each worker (tests/support/parallel.py)."""
    return parallel.make_scheduler(config, log)
