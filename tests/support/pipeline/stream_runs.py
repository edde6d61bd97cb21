"""The streaming job run against its batch twin: configurations, traffic observed as fetches,
the parents a run loses, and the comparison of the stream's tables with the batch's."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config import PipelineConfig, StreamConfig
from pipeline.hops import to_hops
from pipeline.jobs import write_outputs
from pipeline.kafka_source import read_batch
from tests.support.pipeline.synthetic import FANOUT, RETRY, SLOW, STOPPED, Hop, Traffic

T0 = 1_780_000_000_000


KINDS = ["", FANOUT, "", STOPPED, RETRY, SLOW]


TABLE_KEYS = {"links": ["key", "parent_key"], "branches": ["trace_id", "root", "leaf"],
              "flows": ["trace_id"], "edges": ["from_topic", "to_topic"],
              "pathways": ["path"], "audit": ["hour", "client_id", "principal", "origin"],
              "transit": ["topic", "group"], "lag": ["topic", "group", "bucket_ms"]}


EXACT = ("count", "max_ms", "linked", "inferred", "link", "broken", "incomplete")


# The bound |stream - batch| <= accuracy * |batch| is reached exactly (a median between a
# zero and a value of the lowest bucket), where floating point may round either way.
ROUNDING = 1 + 1e-9


SKETCHED = ("p50_ms", "p90_ms", "p99_ms")


MEASURED = {"transit": (("count", "max_ms", "consumers"), SKETCHED),
            "lag": (("fetches", "max_s"), ("p50_s",))}


def run_stream(spark, config: PipelineConfig) -> None:
    """Run the stream to its end (an `available_now` trigger), failing on its error or when
    it has not ended in 25 minutes (a hang: beside the rest of the suite on a slow 2-core
    machine a micro-batch has taken about 90 s, and the longest of these runs 9 of them)."""
    from pipeline.jobs import start_stream

    query = start_stream(spark, config)
    query.awaitTermination(1500)
    assert not query.isActive, "the stream did not end within 25 minutes"
    assert query.exception() is None, query.exception()


def output_lines(output: str, name: str) -> list[dict]:
    """The JSON lines of the stream's file `name` (progress.jsonl, batches.jsonl)."""
    return [json.loads(line) for line in (Path(output) / name).read_text().splitlines()]


def progress_lines(output: str) -> list[dict]:
    return output_lines(output, "progress.jsonl")


def table_rows(spark, path: str, keys: list[str]) -> list[dict]:
    df = spark.read.parquet(path)
    if "batch_id" in df.columns:
        df = df.drop("batch_id")
    return [r.asDict(recursive=True) for r in df.orderBy(*keys).collect()]


def stream_config(topics: dict[str, str], bootstrap: str, tmp: Path, fetch_topic: str = "",
                  **stream: object) -> PipelineConfig:
    return PipelineConfig(
        bootstrap=bootstrap, topics=list(topics.values()),
        terminal_topics=[topics["shipments"], topics["fraud"]], max_wait_ms=4000,
        time_bucket_s=1, output=str(tmp / "stream"), shuffle_partitions=2,
        fetch_topic=fetch_topic,
        stream=StreamConfig(checkpoint=str(tmp / "checkpoint"), trigger="available_now",
                            **stream))


def batch_without(spark, config: PipelineConfig, skip: set, output: Path) -> dict:
    """The batch job's analysis over the same offsets, less the records the stream sets
    apart by design (late and behind-the-watermark hops)."""
    from pyspark.sql import functions as F

    hops = to_hops(read_batch(spark, config), config)
    key = F.concat_ws(":", "topic", "partition", "offset")
    hops = hops.where(~key.isin([":".join(map(str, k)) for k in skip]))
    hops.write.mode("overwrite").parquet(str(output / "hops"))
    batch = replace(config, output=str(output))
    return write_outputs(spark, str(output / "hops"), batch, {"mode": "batch"})


def _assert_within_bound(got: dict, want: dict, keys: tuple, accuracy: float, name: str
                         ) -> None:
    """The sketch's relative bound (docs/pipeline.md, "Percentiles: the bound")."""
    for k in keys:
        assert got[k] == pytest.approx(want[k], rel=accuracy * ROUNDING, abs=1e-12), \
            (name, k, got, want)


def assert_stream_equals_batch(spark, out: Path, batch_out: Path, accuracy: float,
                               measured: bool = True) -> None:
    """Counts and tables exactly equal; sketched percentiles within the relative bound.
    `measured`: the run had fetch observations, so transit and lag are compared too."""
    summary = json.loads((out / "summary.json").read_text())
    batch = json.loads((batch_out / "summary.json").read_text())
    for key in ("records", "offsets", "flows", "branches", "links", "incomplete",
                "broken_branches"):
        assert summary[key] == batch[key], key
    for name in ("hops", "links", "branches", "flows", "audit"):
        order = TABLE_KEYS.get(name, ["topic", "partition", "offset"])
        assert table_rows(spark, str(out / name), order) == \
            table_rows(spark, str(batch_out / name), order), name
    for name in ("edges", "pathways"):
        streamed = table_rows(spark, str(out / name), TABLE_KEYS[name])
        batched = table_rows(spark, str(batch_out / name), TABLE_KEYS[name])
        assert len(streamed) == len(batched) > 2, name
        for s, b in zip(streamed, batched, strict=True):
            assert {k: s[k] for k in TABLE_KEYS[name] + [*EXACT] if k in b} == \
                {k: b[k] for k in TABLE_KEYS[name] + [*EXACT] if k in b}, name
            _assert_within_bound(s, b, SKETCHED, accuracy, name)
    # The edges' latency histograms count exact waits into fixed buckets: the stream's are
    # batch's, bucket for bucket, and each holds every wait of its edge.
    histograms = {(e["from_topic"], e["to_topic"]): e["histogram"] for e in summary["edges"]}
    assert histograms == {(e["from_topic"], e["to_topic"]): e["histogram"]
                          for e in batch["edges"]}
    for e in summary["edges"]:
        assert sum(e["histogram"]) == e["count"] > 0, e
    for name, (exact, sketched) in MEASURED.items() if measured else ():
        keys = TABLE_KEYS[name]
        streamed = table_rows(spark, str(out / name), keys)
        batched = table_rows(spark, str(batch_out / name), keys)
        assert len(streamed) == len(batched) > 2, name
        for s, b in zip(streamed, batched, strict=True):
            assert set(s) == set(b), name
            assert {k: s[k] for k in [*keys, *exact]} == {k: b[k] for k in [*keys, *exact]}, name
            _assert_within_bound(s, b, sketched, accuracy, name)
        assert [[r[k] for k in [*keys, *exact]] for r in summary[name]] == \
            [[r[k] for k in [*keys, *exact]] for r in batch[name]], name


def observe(traffic: Traffic, hops: list[int], n: int) -> None:
    """The observations of the services reading a flow's hops: B (group payments-app) reads
    the order, some time later for some flows, so that its lag grows; F (fraud-app) reads it
    too when the flow has a fraud check, before writing it (the evidence its unlinked check is
    inferred from); C (shipping-app) reads the payments; an auditor without a group reads the
    rest. `n` numbers the flow."""
    t = traffic.topics
    fraud_checked = any(traffic.hops[i].topic == t["fraud"] for i in hops)
    for i in hops:
        topic = traffic.hops[i].topic
        if topic == t["orders"]:
            traffic.fetch(i, "svc-b", "payments-app", 5 + (n % 4) * 2000)
            if fraud_checked:
                traffic.fetch(i, "svc-f", "fraud-app", 5)
        elif topic == t["payments"]:
            traffic.fetch(i, "svc-c", "shipping-app", 5)
        else:
            traffic.fetch(i, "svc-audit", None, 5)


def lost_parents_of(traffic: Traffic, start_ms: int) -> dict[str, list[int]]:
    """Three flows whose records carry `herald.parents_lost` as Herald writes it: a shipment
    that names its payment and lost another input (`expired:1`); a payment that names nothing
    and lost three (`evicted:2`, `overflow:1`) although B's fetch of the order was observed,
    which must stay a root, nothing inferred in its place; and a payment whose values do not
    declare a loss (not a reason, not a number, zero), which is complete."""
    t = traffic.topics
    made = {}
    for name, lost in (("expired", ["expired:1"]), ("root", ["evicted:2", "overflow:1"]),
                       ("bad", ["expired:x", "gone:3", "expired:0"])):
        trace = os.urandom(16).hex()
        order = traffic.add(Hop(t["orders"], start_ms, trace, client="svc-a"))
        pay = traffic.add(Hop(t["payments"], start_ms + 20, trace,
                              [] if name == "root" else [order], "svc-b",
                              lost=lost if name != "expired" else []))
        ship = traffic.add(Hop(t["shipments"], start_ms + 40, trace, [pay], "svc-c",
                               lost=lost if name == "expired" else []))
        traffic.fetch(order, "svc-b", "payments-app", 5)
        made[name] = [order, pay, ship]
        start_ms += 1000
    return made
