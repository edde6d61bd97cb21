"""A hand-written log of records as services write them (traces, times, producers, parents) and
its hops as the batch job's input frame."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

BASE_MS = 1_700_000_000_000


Key = tuple[str, int, int]


@dataclass
class Log:
    """Records as services write them: each with its trace, time, producer and parents."""

    hops: list[dict[str, Any]] = field(default_factory=list)
    fetches: list[dict[str, Any]] = field(default_factory=list)
    truth: list[tuple[Key, Key]] = field(default_factory=list)  # (parent, child) made
    _next: Counter = field(default_factory=Counter)

    def put(self, trace: str | None, topic: str, ms: int, client: str,
            links: tuple[Key, ...] = (), came_from: tuple[Key, ...] | None = None,
            partition: int = 0) -> Key:
        """Write a record. `links` go into its parent headers; `came_from` is what it really
        continued (the links unless the service writes none)."""
        offset = self._next[(topic, partition)]
        self._next[(topic, partition)] += 1
        key = (topic, partition, offset)
        self.hops.append({"trace_id": trace, "topic": topic, "partition": partition,
                          "offset": offset, "herald_time_ms": BASE_MS + ms,
                          "timestamp_ms": BASE_MS + ms, "client_id": client,
                          "parents": [{"topic": t, "partition": p, "offset": o}
                                      for t, p, o in links]})
        for parent in (links if came_from is None else came_from):
            self.truth.append((parent, key))
        return key

    def fetch(self, key: Key, consumer: str, group: str | None, ms: int) -> None:
        """A fetch_log observation, as Herald publishes it."""
        self.fetches.append({"tr": None, "t": key[0], "p": key[1], "o": key[2],
                             "c": consumer, "g": group, "f": BASE_MS + ms})


def trace() -> str:
    return os.urandom(16).hex()


def hops_df(spark, hops: list[dict[str, Any]]):
    from pyspark.sql import functions as F

    schema = ("trace_id string, topic string, partition int, offset long, event_ms long, "
              "client_id string, parents array<struct<topic:string,partition:int,offset:long>>")
    df = spark.createDataFrame([tuple(h[c] for c in (
        "trace_id", "topic", "partition", "offset", "herald_time_ms", "client_id", "parents"))
        for h in hops], schema)
    return (df.withColumn("parent_span", F.lit(None).cast("string"))
            .withColumn("timestamp_ms", F.col("event_ms"))
            .withColumn("herald_time_ms", F.col("event_ms"))
            .withColumn("principal", F.lit("User:ANONYMOUS"))
            .withColumn("origin", F.lit("c1"))
            .withColumn("size", F.lit(100).cast("long"))
            .withColumn("parents_lost", F.lit(0).cast("long"))
            .withColumn("lost_reasons", F.array().cast("array<string>"))
            .withColumn("source_host", F.lit(None).cast("string"))
            .withColumn("event_time", F.timestamp_millis("event_ms")))
