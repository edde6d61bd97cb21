"""The stream submitted unchanged through `herald pipeline stream --master spark://...` to a
standalone cluster (one master, two workers) started from the PySpark distribution equals the
batch job on `local[*]`."""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import replace
from pathlib import Path

from tests.support.herald_process import REPO
from tests.support.pipeline.scenario import topic_names
from tests.support.pipeline.stream_runs import (
    KINDS,
    T0,
    assert_stream_equals_batch,
    batch_without,
    observe,
    stream_config,
)
from tests.support.pipeline.synthetic import Hop, Traffic
from tests.support.spark_standalone import SparkStandalone, pipeline_command


def test_stream_on_the_cluster_equals_the_local_batch(spark, kafka, tmp_path: Path) -> None:
    """`herald pipeline stream --master spark://...`: the stateful stream runs on the two
    workers, reads the consumers' fetch observations as its second source and, once its
    watermark passed every flow, equals the batch job on `local[*]`, transit and lag
    included."""
    topics = topic_names()
    config = replace(stream_config(topics, kafka.bootstrap, tmp_path,
                                   f"fetches-{uuid.uuid4().hex[:8]}", watermark_s=20.0,
                                   flow_gap_s=15.0), output=str(tmp_path / "cluster"))
    traffic = Traffic(topics, fetch_topic=config.fetch_topic)
    for i in range(12):
        observe(traffic, traffic.flow(T0 + i * 700, KINDS[i % len(KINDS)]), i)
    traffic.write(kafka.bootstrap)
    with SparkStandalone(worker_cores=1, worker_memory="1g", workers=2) as cluster:
        cmd = pipeline_command(
            "stream", cluster.master_url, config, config.output,
            "--checkpoint", config.stream.checkpoint, "--trigger", "available_now",
            "--watermark-s", "20", "--flow-gap-s", "15", "--max-offsets-per-trigger", "100")
        # Twice: the records and their observations (at most 100 rows of each source a
        # micro-batch), then, once all of it was read, an untraced record far ahead,
        # which moves the watermark past every flow and fetch.
        result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-4000:] + cluster.logs()
        traffic.add(Hop(topics["orders"], T0 + 120_000, None, client="clock"))
        traffic.write(kafka.bootstrap, create=False)
        result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-4000:] + cluster.logs()
        for n in range(2):
            app_logs = list((cluster.folder / "work" / f"worker-{n}").glob("app-*/*/stderr"))
            assert any("Running task" in p.read_text(errors="replace") for p in app_logs), n
    summary = json.loads((Path(config.output) / "summary.json").read_text())
    assert summary["mode"] == "stream" and summary["flows"]["total"] == 12
    # The fetch path ran on the cluster: every observation measured (none left to batch), and
    # transit and lag (compared with batch's below) come from them.
    assert summary["stream"]["no_record_time"] == 0
    assert summary["transit"] and summary["lag"]
    batch_without(spark, config, set(), tmp_path / "batch")
    assert_stream_equals_batch(spark, Path(config.output), tmp_path / "batch",
                               config.stream.accuracy)
