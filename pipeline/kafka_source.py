"""Spark's Kafka source over the configured topics: read once, up to the ending offsets (the
batch job), or as a stream (the stream's query), with the options both share
(`PipelineConfig.source_options`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.config import PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_batch(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    return (spark.read.format("kafka").options(**config.source_options())
            .option("endingOffsets", config.ending_offsets).load())


def read_stream(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    reader = spark.readStream.format("kafka").options(**config.source_options())
    if config.stream.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(config.stream.max_offsets_per_trigger))
    return reader.load()
