"""Shared by the pipeline tests: one SparkSession for the whole test session (small driver,
two local cores), Herald with the shipped chains (proxy.yaml: `trace_context` with `link`,
`audit`) and `fetch_log` in front of the session broker, and one played four-service topology
that several tests read."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.config import PipelineConfig
from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess, shipped_config
from tests.support.pipeline.observations import FETCH_TOPIC
from tests.support.pipeline.scenario import Played, pipeline_config, play_observed, topic_names

UNLINKED = "svc-f"  # the service herald_traced leaves out of the links


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pipeline.session import SparkSettings, spark_session

    session = spark_session(SparkSettings(master="local[2]", driver_memory="768m",
                                          shuffle_partitions=2))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def herald_traced(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    """Herald with proxy.yaml's chains, which stamp trace context and audit headers and link
    each record a service writes to the records it fetched, and publishing what consumers
    fetch (`fetch_log`) to FETCH_TOPIC. One service is left out of the links: `trace_context`
    applies to every client but UNLINKED, so that the pipeline's inference from the fetch log
    is tested on real traffic too (its records name no parent, as those of a service whose
    consumer and producer Herald cannot pair; the demo, on proxy.yaml as shipped, links it)."""
    create_topic(kafka.bootstrap, FETCH_TOPIC, 1)
    config = shipped_config(kafka.bootstrap)
    chains = config["interceptors"]
    (trace,) = [m for m in chains["produce"] if m["type"] == "trace_context"]
    assert "link" in trace and "client_ids" not in trace
    trace["client_ids"] = [f"regex:(?!{UNLINKED}$).*"]
    chains["fetch"] = [*chains["fetch"], {"type": "fetch_log", "bootstrap": kafka.bootstrap,
                                          "topic": FETCH_TOPIC}]
    with HeraldProcess(config) as proc:
        yield proc


@pytest.fixture(scope="session")
def played(herald_traced: HeraldProcess, kafka: KafkaCluster) -> Played:
    return play_observed(herald_traced.bootstrap, kafka.bootstrap, topic_names())


@pytest.fixture(scope="session")
def batch_run(spark: object, played: Played, kafka: KafkaCluster,
              tmp_path_factory: pytest.TempPathFactory) -> tuple[PipelineConfig, dict]:
    """The batch job over the played topics (read from the broker directly)."""
    from pipeline.jobs import run_batch

    config = pipeline_config(played.topics, kafka.bootstrap, tmp_path_factory.mktemp("batch"))
    return config, run_batch(spark, config)
