"""The same job, submitted unchanged through `herald pipeline batch --master spark://...` to a
standalone cluster (one master, two workers) started from the PySpark distribution, gives the
local run's results: hops, the causal graph (links, branches, flows, edges, pathways), audit,
transit and lag (the stream on the cluster: test_cluster_stream.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.herald_process import REPO
from tests.support.pipeline.stream_runs import (
    TABLE_KEYS,
    table_rows,
)
from tests.support.spark_standalone import SparkStandalone, pipeline_command


def test_standalone_cluster_gives_the_local_results(spark, batch_run, tmp_path: Path) -> None:
    config, local = batch_run
    output = tmp_path / "cluster"
    with SparkStandalone(worker_cores=1, worker_memory="1g", workers=2) as cluster:
        cmd = pipeline_command("batch", cluster.master_url, config, str(output))
        result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:] + cluster.logs()
        # The work ran in both workers' executors, not in the driver.
        for n in range(2):
            app_logs = list((cluster.folder / "work" / f"worker-{n}").glob("app-*/*/stderr"))
            assert app_logs, cluster.logs()
            assert any("Running task" in p.read_text(errors="replace") for p in app_logs), n
    printed = json.loads(result.stdout.strip().splitlines()[-1])
    assert printed["records"] == local["records"]["total"]
    for name, keys in {"hops": ["topic", "partition", "offset"], **TABLE_KEYS}.items():
        assert table_rows(spark, str(output / name), keys) == \
            table_rows(spark, str(Path(config.output) / name), keys), name
    summary = json.loads((output / "summary.json").read_text())
    for key in ("records", "flows", "branches", "links", "edges", "pathways", "offsets",
                "broken_branches", "lag", "audit"):
        assert summary[key] == local[key], key
