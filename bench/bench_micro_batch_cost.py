"""What the stream's micro-batch costs on the driver beyond its data: the analysis of a small
micro-batch (`pipeline.flows.analyze`, its tables cut from their plans, the figures in one
action, as `pipeline.stream.micro_batch` runs them), timed on a Spark session with a setting
on and off, each in a process of its own, interleaved.

    python bench/bench_micro_batch_cost.py [--hops 36] [--rounds 10] [--runs 2]
        [--setting spark.python.sql.dataFrameDebugging.enabled]

Each run: a `local[*]` session with the setting `true` or `false`, `--hops` synthetic hops
(flows of three, `bench_pipeline_scale.synthetic_hops`) written as Parquet, three warm-up
rounds, then `--rounds` timed ones. Reported per round: CPU (the driver's Python and its JVM,
from /proc) and wall time. Small micro-batches are the case: their cost is the plans and the
jobs, not the rows, and it is what a test's or a quiet service's micro-batch pays.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _cpu_s(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def one_run(hops: int, rounds: int, setting: str, value: str) -> dict[str, object]:
    from pyspark import SparkContext

    from bench.bench_pipeline_scale import ROLES, synthetic_hops
    from pipeline.config import PipelineConfig
    from pipeline.flows import analyze
    from pipeline.session import SparkSettings, spark_session
    from pipeline.stream.figures import table_frames
    from pipeline.summary import collect_all

    spark = spark_session(SparkSettings(conf={setting: value}))
    gateway = SparkContext._gateway
    assert gateway is not None and gateway.proc is not None
    pids = [os.getpid(), gateway.proc.pid]
    config = PipelineConfig(topics=list(ROLES), terminal_topics=[ROLES[-1]])
    with tempfile.TemporaryDirectory(prefix="micro-batch-cost-") as work:
        synthetic_hops(spark, hops, 1).write.parquet(f"{work}/hops")  # type: ignore[attr-defined]
        frame = spark.read.parquet(f"{work}/hops")

        def micro_batch() -> None:
            tables = analyze(frame, config, transit=False)
            for name in ("links", "branches", "flows", "unresolved"):
                setattr(tables, name, getattr(tables, name).localCheckpoint())
            collect_all(table_frames(tables, config))
            tables.unpersist()

        for _ in range(3):
            micro_batch()
        cpu, wall = [], []
        for _ in range(rounds):
            c0, t0 = _cpu_s(pids), time.perf_counter()
            micro_batch()
            cpu.append(_cpu_s(pids) - c0)
            wall.append(time.perf_counter() - t0)
    spark.stop()
    return {"value": value, "cpu_ms": round(1000 * statistics.median(cpu)),
            "wall_ms": round(1000 * statistics.median(wall))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hops", type=int, default=36)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=2, help="runs of each value, interleaved")
    parser.add_argument("--setting", default="spark.python.sql.dataFrameDebugging.enabled")
    parser.add_argument("--one", choices=("true", "false"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.hops, args.rounds, args.setting, args.one)))
        return 0
    results: dict[str, list[dict[str, object]]] = {"true": [], "false": []}
    for _ in range(args.runs):
        for value in ("true", "false"):
            out = subprocess.run(
                [sys.executable, __file__, "--one", value, "--hops", str(args.hops),
                 "--rounds", str(args.rounds), "--setting", args.setting],
                capture_output=True, text=True, check=True).stdout
            results[value].append(json.loads(out.strip().splitlines()[-1]))
    print(json.dumps({"bench": "micro-batch cost", "setting": args.setting, "hops": args.hops,
                      "rounds": args.rounds, "load_1m": os.getloadavg()[0],
                      "per_round_median": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
