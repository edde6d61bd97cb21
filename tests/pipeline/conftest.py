"""Shared by the pipeline tests: one SparkSession for the whole test session (small driver,
two local cores), Herald with `trace_context` and `audit` in front of the session broker, and
one played three-service flow that several tests read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.config import PipelineConfig
from proxy.embedded_kafka import KafkaCluster
from tests.pipeline.scenario import MAX_WAIT_MS, Played, play, topic_names
from tests.support.herald_process import HeraldProcess, herald_config

TRACE_AUDIT = {"produce": [{"type": "trace_context"}, {"type": "audit"}], "fetch": []}


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pipeline.session import SparkSettings, spark_session

    session = spark_session(SparkSettings(master="local[2]", driver_memory="768m",
                                          shuffle_partitions=2))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def herald_traced(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    with HeraldProcess(herald_config(kafka.bootstrap, interceptors=TRACE_AUDIT)) as proc:
        yield proc


@pytest.fixture(scope="session")
def played(herald_traced: HeraldProcess, kafka: KafkaCluster) -> Played:
    return play(herald_traced.bootstrap, kafka.bootstrap, topic_names())


def pipeline_config(played: Played, bootstrap: str, output: Path, **more: object
                    ) -> PipelineConfig:
    t = played.topics
    return PipelineConfig(bootstrap=bootstrap, topics=[t["orders"], t["payments"],
                                                       t["shipments"]],
                          terminal_topics=[t["shipments"]], max_wait_ms=MAX_WAIT_MS,
                          output=str(output), shuffle_partitions=2, **more)


@pytest.fixture(scope="session")
def batch_run(spark: object, played: Played, kafka: KafkaCluster,
              tmp_path_factory: pytest.TempPathFactory) -> tuple[PipelineConfig, dict]:
    """The batch job over the played topics (read from the broker directly)."""
    from pipeline.jobs import run_batch

    config = pipeline_config(played, kafka.bootstrap, tmp_path_factory.mktemp("batch"))
    return config, run_batch(spark, config)
