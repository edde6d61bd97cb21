"""The streaming job: records keep arriving while it runs; its tables equal the batch job's
over the same offsets; a restart from the checkpoint neither loses nor double-counts."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from confluent_kafka import Producer

from pipeline.config import StreamConfig
from pipeline.jobs import run_batch, start_stream, write_outputs
from proxy.devtools.embedded_kafka import KafkaCluster
from tests.pipeline.conftest import pipeline_config
from tests.pipeline.scenario import create_topics, play, topic_names
from tests.support.herald_process import HeraldProcess

TABLE_KEYS = {"links": ["key", "parent_key"], "branches": ["trace_id", "root", "leaf"],
              "flows": ["trace_id"], "edges": ["from_topic", "to_topic"],
              "pathways": ["path"], "audit": ["hour", "client_id", "principal", "origin"],
              "transit": ["topic", "group"], "lag": ["topic", "group", "bucket_ms"]}


def _rows(spark, path: str, keys: list[str]) -> list[dict]:
    df = spark.read.parquet(path)
    if "batch_id" in df.columns:
        df = df.drop("batch_id")
    return [r.asDict(recursive=True) for r in df.orderBy(*keys).collect()]


def _streamed_hops(output: Path) -> int:
    if not (output / "summary.json").exists():
        return 0
    return json.loads((output / "summary.json").read_text())["records"]["total"]


def _more_orders(herald: str, broker: str, topic: str, delivered: set) -> None:
    """Records written while the stream is stopped: traced orders and untraced ones."""
    def on_delivery(err, msg) -> None:
        assert err is None, err
        delivered.add((msg.topic(), msg.partition(), msg.offset()))

    for bootstrap, client in ((herald, "late-app"), (broker, "late-legacy")):
        producer = Producer({"bootstrap.servers": bootstrap, "client.id": client})
        for i in range(4):
            producer.produce(topic, f"{client} {i}".encode(), on_delivery=on_delivery)
        assert producer.flush(30) == 0


def test_stream_matches_batch_and_resumes_from_its_checkpoint(
    spark, herald_traced: HeraldProcess, kafka: KafkaCluster, tmp_path: Path
) -> None:
    topics = topic_names()
    create_topics(kafka.bootstrap, topics)
    config = pipeline_config(
        topics, kafka.bootstrap, tmp_path / "stream",
        stream=StreamConfig(checkpoint=str(tmp_path / "checkpoint"), trigger="processing_time",
                            interval_s=1.0, watermark_s=0.0),
    )
    output = Path(config.output)

    def caught_up(query, count: int) -> None:
        deadline = time.monotonic() + 180
        while _streamed_hops(output) < count:
            assert time.monotonic() < deadline, "the stream did not catch up"
            assert query.exception() is None, query.exception()
            time.sleep(1)

    delivered: set = set()
    query = start_stream(spark, config)
    try:
        # The three services run while the stream is reading.
        played = play(herald_traced.bootstrap, kafka.bootstrap, topics, create=False)
        delivered |= played.delivered
        caught_up(query, len(delivered))
        first_batches = {p.name for p in (output / "hops").glob("batch_id=*")}
        # More records arrive at the running query.
        _more_orders(herald_traced.bootstrap, kafka.bootstrap, topics["orders"], delivered)
        caught_up(query, len(delivered))
    finally:
        query.stop()
    running_batches = {p.name for p in (output / "hops").glob("batch_id=*")}
    assert first_batches < running_batches

    # Written while the stream is stopped: the restart must pick them up, once.
    _more_orders(herald_traced.bootstrap, kafka.bootstrap, topics["orders"], delivered)
    available_now = replace(config, stream=replace(config.stream, trigger="available_now"))
    query = start_stream(spark, available_now)
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None

    hops = spark.read.parquet(str(output / "hops"))
    offsets = [(r.topic, r.partition, r.offset) for r in hops.collect()]
    assert len(offsets) == len(set(offsets)) == len(delivered)  # nothing twice
    assert set(offsets) == delivered                             # nothing lost
    # Earlier batches were kept as written; the restart only added batches.
    assert running_batches < {p.name for p in (output / "hops").glob("batch_id=*")}

    batch = replace(config, output=str(tmp_path / "batch"))
    run_batch(spark, batch)
    for name, keys in TABLE_KEYS.items():
        streamed = _rows(spark, str(output / name), keys)
        batched = _rows(spark, str(Path(batch.output) / name), keys)
        assert streamed == batched, name  # exact percentiles of the same values: equal
        assert streamed, name
    summary = json.loads((output / "summary.json").read_text())
    assert summary["mode"] == "stream" and summary["flows"]["open"] == 0
    assert summary["records"]["untraced"] == 3 + 4 + 4  # the legacy orders of every phase

    # With a watermark an hour wide, every unfinished flow is recent, so open, not stopped.
    wide = replace(config, output=str(tmp_path / "wide"),
                   stream=replace(config.stream, watermark_s=3600.0))
    Path(wide.output).mkdir()
    flows = write_outputs(spark, str(output / "hops"), wide, streaming=True)["flows"]
    assert flows["stopped"] == 0 and flows["open"] == summary["flows"]["stopped"] > 0
