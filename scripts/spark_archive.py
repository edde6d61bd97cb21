"""Make the class archive Spark's driver starts from (`pipeline.session.class_archive`), once
per PySpark install: the demo's four services play through Herald (proxy.yaml's chains, with
`fetch_log`) in front of a local broker, and a driver that writes the archive as it exits runs
the batch job and the stream over their records, so the archive holds the classes the
pipeline's jobs load: the Kafka source, the analysis, Parquet, the state store.

    .venv/bin/python scripts/spark_archive.py        # scripts/setup.sh runs it

An archive only saves CPU: where none can be made it says why and exits 0.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from configuration import jvm_archive  # noqa: E402
from pipeline.config import StreamConfig  # noqa: E402
from pipeline.jobs import run_batch, start_stream  # noqa: E402
from pipeline.session import (  # noqa: E402
    SparkSettings,
    class_archive,
    spark_session,
    stop_writing_archive,
)
from proxy.devtools.embedded_kafka import KafkaCluster  # noqa: E402
from tests.support.clients import create_topic  # noqa: E402
from tests.support.herald_process import HeraldProcess, shipped_config  # noqa: E402
from tests.support.pipeline.observations import FETCH_TOPIC  # noqa: E402
from tests.support.pipeline.scenario import pipeline_config, play, topic_names  # noqa: E402


def _run_jobs(bootstrap: str, topics: dict[str, str], out: Path) -> str | None:
    """Run the jobs in a driver that writes the archive; None once it is in place, else why
    not."""
    spark = spark_session(SparkSettings(master="local[2]", driver_memory="768m",
                                        shuffle_partitions=2), write_archive=True)
    try:
        run_batch(spark, pipeline_config(topics, bootstrap, out / "batch"))
        stream = StreamConfig(checkpoint=str(out / "checkpoint"), metrics_bind="")
        query = start_stream(spark, pipeline_config(topics, bootstrap, out / "stream",
                                                    stream=stream))
        if not query.awaitTermination(600):
            query.stop()
            raise RuntimeError("the stream did not finish its records in 10 minutes")
    finally:
        failure = stop_writing_archive(spark)
    return failure


def _train() -> str | None:
    """Make the archive; None once it is in place, else why not."""
    refused = jvm_archive.dumping_refused()
    if refused is not None:
        return refused
    with KafkaCluster(size=1) as kafka, tempfile.TemporaryDirectory() as out:
        create_topic(kafka.bootstrap, FETCH_TOPIC, 1)
        config = shipped_config(kafka.bootstrap)
        config["interceptors"]["fetch"].append(
            {"type": "fetch_log", "bootstrap": kafka.bootstrap, "topic": FETCH_TOPIC})
        topics = topic_names("class-archive")
        with HeraldProcess(config) as herald:
            play(herald.bootstrap, kafka.bootstrap, topics)
        return _run_jobs(kafka.bootstrap, topics, Path(out))


def main() -> int:
    archive = class_archive()
    start = time.monotonic()
    try:
        failure = None if archive.is_file() else _train()
    except Exception as exc:  # noqa: BLE001 - an archive only saves CPU: say why, go on
        failure = f"training failed: {exc!r}"
    if failure is not None:
        jvm_archive.record_not_made(archive, failure)
        print(f"spark-archive: no class archive, Spark's driver starts without one: {failure}")
        return 0
    print(f"spark-archive: {archive} ({archive.stat().st_size // 2**20} MiB, "
          f"{time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
