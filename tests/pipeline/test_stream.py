"""The continuous stream (`pipeline.stream`) over synthetic Herald traffic whose event times the
test chooses: it equals the batch job over the same records (exactly for counts, within the
sketch's bound for percentiles), a restart from the checkpoint (and a micro-batch run twice, as
after a crash before its commit) neither loses nor counts twice, late hops and evicted flows
are counted apart, and many micro-batches keep the state and each batch's work bounded by the
records it brought."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config import PipelineConfig, StreamConfig
from pipeline.hops import to_hops
from pipeline.jobs import read_batch, start_stream, write_outputs
from proxy.devtools.embedded_kafka import KafkaCluster
from tests.pipeline.scenario import topic_names
from tests.pipeline.synthetic import FANOUT, RETRY, SLOW, STOPPED, Hop, Traffic

T0 = 1_780_000_000_000
KINDS = ["", FANOUT, "", STOPPED, RETRY, SLOW]
TABLE_KEYS = {"links": ["key", "parent_key"], "branches": ["trace_id", "root", "leaf"],
              "flows": ["trace_id"], "edges": ["from_topic", "to_topic"],
              "pathways": ["path"], "audit": ["hour", "client_id", "principal", "origin"],
              "transit": ["topic", "group"], "lag": ["topic", "group", "bucket_ms"]}
EXACT = ("count", "max_ms", "linked", "inferred", "link", "broken")
SKETCHED = ("p50_ms", "p90_ms", "p99_ms")


def _rows(spark, path: str, keys: list[str]) -> list[dict]:
    df = spark.read.parquet(path)
    if "batch_id" in df.columns:
        df = df.drop("batch_id")
    return [r.asDict(recursive=True) for r in df.orderBy(*keys).collect()]


def _config(topics: dict[str, str], bootstrap: str, tmp: Path, **stream: object
            ) -> PipelineConfig:
    return PipelineConfig(
        bootstrap=bootstrap, topics=list(topics.values()),
        terminal_topics=[topics["shipments"], topics["fraud"]], max_wait_ms=4000,
        time_bucket_s=1, output=str(tmp / "stream"), shuffle_partitions=2,
        stream=StreamConfig(checkpoint=str(tmp / "checkpoint"), trigger="available_now",
                            **stream))


def _run(spark, config: PipelineConfig) -> None:
    query = start_stream(spark, config)
    query.awaitTermination(600)
    assert not query.isActive and query.exception() is None, query.exception()


def _lines(output: str, name: str) -> list[dict]:
    return [json.loads(line) for line in (Path(output) / name).read_text().splitlines()]


def _progress(output: str) -> list[dict]:
    return _lines(output, "progress.jsonl")


def _batch_without(spark, config: PipelineConfig, skip: set, output: Path) -> dict:
    """The batch job's analysis over the same offsets, less the records the stream sets
    apart by design (late and behind-the-watermark hops)."""
    from pyspark.sql import functions as F

    hops = to_hops(read_batch(spark, config), config)
    key = F.concat_ws(":", "topic", "partition", "offset")
    hops = hops.where(~key.isin([":".join(map(str, k)) for k in skip]))
    hops.write.mode("overwrite").parquet(str(output / "hops"))
    batch = replace(config, output=str(output))
    return write_outputs(spark, str(output / "hops"), batch, {"mode": "batch"})


def assert_stream_equals_batch(spark, out: Path, batch_out: Path, accuracy: float) -> None:
    """Counts and tables exactly equal; sketched percentiles within the relative bound."""
    summary = json.loads((out / "summary.json").read_text())
    batch = json.loads((batch_out / "summary.json").read_text())
    for key in ("records", "offsets", "flows", "branches", "links", "broken_branches"):
        assert summary[key] == batch[key], key
    for name in ("hops", "links", "branches", "flows", "audit"):
        order = TABLE_KEYS.get(name, ["topic", "partition", "offset"])
        assert _rows(spark, str(out / name), order) == \
            _rows(spark, str(batch_out / name), order), name
    for name in ("edges", "pathways"):
        streamed = _rows(spark, str(out / name), TABLE_KEYS[name])
        batched = _rows(spark, str(batch_out / name), TABLE_KEYS[name])
        assert len(streamed) == len(batched) > 2, name
        for s, b in zip(streamed, batched, strict=True):
            assert {k: s[k] for k in TABLE_KEYS[name] + [*EXACT] if k in b} == \
                {k: b[k] for k in TABLE_KEYS[name] + [*EXACT] if k in b}, name
            for k in SKETCHED:
                assert s[k] == pytest.approx(b[k], rel=accuracy, abs=1e-9), (name, k, s, b)
    for e in summary["edges"]:
        assert sum(e["histogram"]) == e["count"]


def test_stream_equals_batch_resumes_from_its_checkpoint_and_counts_late_hops(
    spark, kafka: KafkaCluster, tmp_path: Path
) -> None:
    topics = topic_names()
    config = _config(topics, kafka.bootstrap, tmp_path, watermark_s=0.0, flow_gap_s=15.0,
                     max_flow_hops=5, max_offsets_per_trigger=25)
    traffic = Traffic(topics)
    first = [traffic.flow(T0 + i * 3000, KINDS[i % len(KINDS)]) for i in range(12)]
    for i in range(3):  # written straight to the broker by a legacy client: no trace
        traffic.add(Hop(topics["orders"], T0 + 500 + i, None, client="legacy"))
    written = set(traffic.write(kafka.bootstrap))
    _run(spark, config)
    summary = json.loads((Path(config.output) / "summary.json").read_text())
    # The last flows are younger than the gap: still held, not counted yet.
    assert 0 < summary["flows"]["total"] < len(first)
    assert summary["records"]["untraced"] == 3
    # As if the process died after the last micro-batch's output but before Spark committed
    # it: the restart runs that batch again, which must replace its output, not add to it.
    commits = Path(config.stream.checkpoint) / "commits"
    replayed = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(replayed)).unlink()
    (commits / f".{replayed}.crc").unlink(missing_ok=True)

    # Written while the stream is stopped: more flows; a hop continuing the first flow long
    # after it was finalised (late); a hop older than the watermark (dropped by Spark,
    # counted); and at last an untraced record far ahead, which moves the watermark past
    # every flow.
    end = max(h.event_ms for h in traffic.hops)
    late = traffic.add(Hop(topics["shipments"], end + 1000, traffic.hops[first[0][0]].trace,
                           [first[0][1]]))
    behind = traffic.add(Hop(topics["orders"], T0 - 60_000, "ab" * 16))
    for i in range(12):
        traffic.flow(end + 2000 + i * 700, KINDS[i % len(KINDS)])
    # A flow of six hops, more than max_flow_hops: evicted (analysed at once, counted).
    trace = "cd" * 16
    chain = [traffic.add(Hop(topics["orders"], end + 3000, trace))]
    for n in range(5):
        chain.append(traffic.add(Hop(topics["payments"], end + 3010 + n, trace, [chain[-1]])))
    tick = traffic.add(Hop(topics["orders"], end + 120_000, None, client="clock"))
    written |= set(traffic.write(kafka.bootstrap, create=False))
    _run(spark, config)
    skip = {traffic.keys[late], traffic.keys[behind]}

    out = Path(config.output)
    hops = _rows(spark, str(out / "hops"), ["topic", "partition", "offset"])
    keys = [(h["topic"], h["partition"], h["offset"]) for h in hops]
    assert len(keys) == len(set(keys))         # nothing twice across the restart
    assert set(keys) == written - skip         # nothing lost
    late_rows = _rows(spark, str(out / "late"), ["topic", "partition", "offset"])
    assert [(h["topic"], h["partition"], h["offset"]) for h in late_rows] == [
        traffic.keys[late]]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stream"]["late_hops"] == 1
    assert (summary["stream"]["evicted_flows"], summary["stream"]["evicted_hops"]) == (1, 6)
    dropped = sum((p["state"] or {}).get("numRowsDroppedByWatermark", 0)
                  for p in _progress(config.output))
    assert dropped == 1
    assert [p["batch_id"] for p in _progress(config.output)].count(replayed) == 2
    assert traffic.keys[tick] in set(keys)

    batch = _batch_without(spark, config, skip, tmp_path / "batch")
    assert summary["flows"]["total"] == batch["flows"]["total"] == 25
    assert_stream_equals_batch(spark, out, tmp_path / "batch", config.stream.accuracy)
    inferred = [e for e in summary["edges"] if e["to_topic"] == topics["fraud"]]
    assert inferred and all(e["link"] == "inferred" for e in inferred)


def test_many_micro_batches_keep_state_and_work_per_batch_bounded(
    spark, kafka: KafkaCluster, tmp_path: Path
) -> None:
    """Flows arrive at a steady rate over many micro-batches: the state stays flat instead of
    growing with the batches, each batch touches at most the hold's buckets, and every flow is
    counted once at the end."""
    topics = topic_names()
    config = _config(topics, kafka.bootstrap, tmp_path, watermark_s=0.0, flow_gap_s=1.0,
                     late_retention_s=1.0, max_offsets_per_trigger=36)
    traffic = Traffic(topics)
    flows = 240
    for i in range(flows):
        traffic.flow(T0 + i * 100, wait_ms=10)
    traffic.add(Hop(topics["orders"], T0 + flows * 100 + 60_000, None, client="clock"))
    traffic.write(kafka.bootstrap)
    _run(spark, config)

    progress = [p for p in _progress(config.output) if p["input_rows"]]
    assert len(progress) >= 20
    # Spark's state rows are the hold's buckets: a few dozen keys, however many flows.
    for p in progress:
        touched = p["state"]["numRowsUpdated"] + p["state"]["numRowsRemoved"]
        assert touched <= config.stream.state_buckets, p
    # What the buckets hold: flows waiting and tombstones cover about 2 s of event time (gap
    # plus retention), 20 flows at 100 ms apart, whatever the number of batches so far.
    held = [b for b in _lines(config.output, "batches.jsonl") if sum(b["emitted"].values())]
    steady = [b["held_flows"] + b["tombstones"] for b in held[:-1]]  # the last: the clock
    assert len(steady) >= 20
    half = len(steady) // 2
    assert max(steady[half:]) <= max(steady[:half]) + 5, steady
    assert 0 < max(steady) <= 40, steady
    assert held[-1]["held_flows"] == 0
    summary = json.loads((Path(config.output) / "summary.json").read_text())
    assert summary["flows"]["total"] == flows and summary["flows"]["broken"] == 0
    assert summary["stream"]["finalized_flows"] == flows
    assert summary["records"]["total"] == 3 * flows + 1
