"""The continuous stream (`pipeline.stream`) over many micro-batches of synthetic Herald
traffic: the state stays flat instead of growing with the batches, each batch's work is bounded
by the records it brought, and every flow is counted once at the end."""

from __future__ import annotations

import json
from pathlib import Path

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.pipeline.scenario import topic_names
from tests.support.pipeline.stream_runs import (
    T0,
    output_lines,
    progress_lines,
    run_stream,
    stream_config,
)
from tests.support.pipeline.synthetic import Hop, Traffic


def test_many_micro_batches_keep_state_and_work_per_batch_bounded(
    spark, kafka: KafkaCluster, tmp_path: Path
) -> None:
    """Flows arrive at a steady rate over many micro-batches: the state stays flat instead of
    growing with the batches (its rows are the hold's buckets, fewer than the flows it holds
    at once and than the traces a batch brings), and every flow is counted once at the end."""
    topics = topic_names()
    # Fewer buckets than the flows held at once (about 20) and than a batch's traces (36
    # records, 12 flows): state kept per trace would show in the rows Spark counts.
    buckets = 8
    config = stream_config(topics, kafka.bootstrap, tmp_path, watermark_s=0.0, flow_gap_s=1.0,
                           late_retention_s=1.0, max_offsets_per_trigger=36,
                           state_buckets=buckets)
    traffic = Traffic(topics)
    # 8 micro-batches of 12 flows: enough for the later half to show growth a per-trace state
    # would have (held flows doubling from the first half), few enough that a loaded machine,
    # where a micro-batch has taken about 90 s, runs them well within the stream's deadline.
    batches = 8
    flows = batches * 12
    for i in range(flows):
        traffic.flow(T0 + i * 100, wait_ms=10)
    traffic.add(Hop(topics["orders"], T0 + flows * 100 + 60_000, None, client="clock"))
    traffic.write(kafka.bootstrap)
    run_stream(spark, config)

    progress = [p for p in progress_lines(config.output) if p["input_rows"]]
    assert len(progress) >= batches
    # Spark's state rows are the hold's buckets, however many flows: the state never holds
    # more rows than buckets, nor does a batch touch more, while every batch with records
    # touches some.
    for p in progress:
        touched = p["state"]["numRowsUpdated"] + p["state"]["numRowsRemoved"]
        assert 0 < touched <= buckets and p["state"]["numRowsTotal"] <= buckets, p
    # What the buckets hold: flows waiting and tombstones cover about 2 s of event time (gap
    # plus retention), 20 flows at 100 ms apart, whatever the number of batches so far.
    held = [b for b in output_lines(config.output, "batches.jsonl") if sum(b["emitted"].values())]
    steady = [b["held_flows"] + b["tombstones"] for b in held[:-1]]  # the last: the clock
    assert len(steady) >= batches
    half = len(steady) // 2
    assert max(steady[half:]) <= max(steady[:half]) + 5, steady
    assert 0 < max(steady) <= 40, steady
    # ... and they held more flows at once than there are rows: rows are not flows.
    assert max(b["held_flows"] for b in held) > buckets, steady
    assert held[-1]["held_flows"] == 0
    # The plans of a micro-batch are mostly the same every time and their compiled classes
    # are kept: after the first two, a micro-batch compiles a few at most (with Spark's
    # default cache each compiled about 220 again). The first ones may compile fewer where
    # an earlier test in this JVM ran the same plans.
    later = [b["compiled"] for b in output_lines(config.output, "batches.jsonl")][2:]
    assert len(later) >= batches - 2 and sum(later) < 10 * len(later), later
    summary = json.loads((Path(config.output) / "summary.json").read_text())
    assert summary["flows"]["total"] == flows and summary["flows"]["broken"] == 0
    assert summary["stream"]["finalized_flows"] == flows
    assert summary["records"]["total"] == 3 * flows + 1
