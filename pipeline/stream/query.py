"""Starting the stream's query: the held stream over the Kafka sources, written by the
micro-batch function, with the progress listener and the exporter registered for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config import PipelineConfig
from pipeline.kafka_source import read_stream
from pipeline.stream.micro_batch import each_batch
from pipeline.stream.progress import progress_listener, register
from pipeline.stream.sources import held_stream
from pipeline.stream_metrics import exporter_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


def start_stream(spark: SparkSession, config: PipelineConfig) -> StreamingQuery:
    """Start the streaming job; the caller waits on (or stops) the returned query."""
    if not config.stream.checkpoint:
        raise ValueError("pipeline.stream.checkpoint: required for the stream")
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    if not getattr(spark, "_herald_listener", False):
        spark.streams.addListener(progress_listener())
        spark._herald_listener = True  # type: ignore[attr-defined]  # Herald's own mark
    exporter = exporter_for(config)
    metrics = exporter.collector if exporter is not None else None
    known = Path(config.stream.checkpoint) / "metadata"  # a restart keeps its query id
    if known.exists():
        register(str(json.loads(known.read_text().splitlines()[0])["id"]), out, metrics)
    records = read_stream(spark, config)
    writer = (held_stream(spark, config, records).writeStream
              .foreachBatch(each_batch(spark, config, metrics))
              .option("checkpointLocation", config.stream.checkpoint))
    if config.stream.trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.stream.interval_s} seconds")
    query = writer.start()
    register(str(query.id), out, metrics)
    return query

