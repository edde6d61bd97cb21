"""The pipeline at scale: the batch analysis over many hops, and the stream over a long run at
a steady rate.

    python bench/bench_pipeline_scale.py batch  --hops 10000000 [--partitions 8]
    python bench/bench_pipeline_scale.py stream --minutes 30 --rate 400 [--interval-s 10]
                                                [--metrics off|on] [--scrape-s 1]

`batch`: synthetic hops are generated directly as a Spark DataFrame (flows of three hops,
orders → payments → shipments, each hop after the first naming its parent in `parents`, one
flow in a hundred untraced) and written as Parquet, so 10 million hops take no Kafka round
trip; then the batch job's analysis (`pipeline.jobs.write_outputs`: the causal graph,
branches, flows, edges, pathways, audit, summary and report) is timed on `local[*]`. Reading
Kafka is left out here (`bench/bench_pipeline.py` times the whole job from a broker).

`stream`: a local broker; a producer writes flows of three linked hops at `--rate` records per
second with Herald's headers (`herald.time` the write time) for `--minutes`, and for each
record the `fetch_log` observation of one consumer group reading it 2 ms later (the stream
then computes transit and lag too; `--no-fetches` leaves them out), while the stream
(`pipeline.stream`, processing-time trigger every `--interval-s`) runs. From Spark's progress
of every micro-batch it reports records per second, the micro-batch time at the start and the
end of the run (median of the first and last tenth) and its trend over the run (least-squares
slope, ms per hour), and the state at start and end: Spark's memory for it, and what the hold
keeps (hops and flows waiting, tombstones; `batches.jsonl`). `per_batch` rows are
[batch id, input rows, ms, held hops, tombstones, state bytes].
`--metrics on` serves the stream's Prometheus metrics (`pipeline.stream_metrics`) on a free
loopback port and scrapes them every `--scrape-s` (1 s: far more often than a Prometheus
would) for the whole run, reporting the scrapes' time and size; `off` (the default) runs
without the exporter. The two runs' micro-batch times are the metrics' cost.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import create_topic, log  # noqa: E402
from pipeline.config import PipelineConfig, StreamConfig  # noqa: E402

ROLES = ("orders", "payments", "shipments")


def synthetic_hops(spark: object, hops: int, partitions: int) -> object:
    """`hops` hop rows (the columns of `pipeline.hops.HOP_COLUMNS`) in flows of three."""
    from pyspark.sql import functions as F

    flows = (hops + 2) // 3
    t0 = int(time.time() * 1000) - flows
    f = spark.range(flows).withColumnRenamed("id", "flow")  # type: ignore[attr-defined]
    h = f.crossJoin(spark.range(3).withColumnRenamed("id", "hop"))  # type: ignore[attr-defined]
    h = h.where(F.col("flow") * 3 + F.col("hop") < hops)
    topic = F.element_at(F.array(*[F.lit(r) for r in ROLES]), (F.col("hop") + 1).cast("int"))
    parent_topic = F.element_at(F.array(*[F.lit(r) for r in ROLES]), F.col("hop").cast("int"))
    traced = F.col("flow") % 100 != 99
    partition = (F.col("flow") % partitions).cast("int")
    offset = F.floor(F.col("flow") / partitions).cast("long")
    event_ms = F.lit(t0) + F.col("flow") + 3 * F.col("hop")
    parents = F.when(traced & (F.col("hop") > 0), F.array(F.struct(
        parent_topic.alias("topic"), partition.alias("partition"), offset.alias("offset")))
    ).otherwise(F.array().cast("array<struct<topic:string,partition:int,offset:long>>"))
    return h.select(
        F.when(traced, F.md5(F.col("flow").cast("string"))).alias("trace_id"),
        F.when(traced, F.substring(F.md5(F.concat_ws("/", "flow", "hop")), 1, 16))
        .alias("parent_span"),
        topic.alias("topic"), partition.alias("partition"), offset.alias("offset"),
        event_ms.alias("timestamp_ms"), F.lit("create").alias("timestamp_type"),
        event_ms.alias("herald_time_ms"), F.lit("bench-app").alias("client_id"),
        F.lit("User:ANONYMOUS").alias("principal"), F.lit("bench-cluster").alias("origin"),
        F.md5(F.concat_ws("-", "flow", "hop")).alias("message_id"),
        F.lit(480).cast("long").alias("size"), parents.alias("parents"),
        F.lit(0).cast("long").alias("parents_lost"),
        F.array().cast("array<string>").alias("lost_reasons"),
        F.lit("10.0.0.1").alias("source_host"),
        event_ms.alias("event_ms"), F.timestamp_millis(event_ms).alias("event_time"))


def run_batch(args: argparse.Namespace) -> int:
    from pipeline.jobs import write_outputs
    from pipeline.session import SparkSettings, spark_session

    cores = os.cpu_count() or 2
    spark = spark_session(SparkSettings(driver_memory=args.driver_memory,
                                        shuffle_partitions=max(4, cores)))
    try:
        with tempfile.TemporaryDirectory(prefix="pipeline-scale-", dir=args.work_dir) as out:
            started = time.monotonic()
            synthetic_hops(spark, args.hops, args.partitions).write.parquet(f"{out}/hops")
            log(f"{args.hops} synthetic hops written as Parquet in "
                f"{time.monotonic() - started:.0f} s")
            config = PipelineConfig(topics=list(ROLES), terminal_topics=[ROLES[-1]], output=out,
                                    shuffle_partitions=max(4, cores))
            started = time.monotonic()
            summary = write_outputs(spark, f"{out}/hops", config, {"mode": "batch"})
            seconds = time.monotonic() - started
    finally:
        spark.stop()
    assert summary["records"]["total"] == args.hops, summary["records"]
    rate = args.hops / seconds
    print(json.dumps({"bench": "pipeline batch analysis (hops from Parquet)", "hops": args.hops,
                      "cores": cores, "driver_memory": args.driver_memory,
                      "seconds": round(seconds, 1), "records_per_s": round(rate),
                      "flows": summary["flows"], "edges": len(summary["edges"])}))
    return 0


def produce_steadily(bootstrap: str, topics: list[str], rate: int, stop: threading.Event,
                     sent: list[int], fetch_topic: str | None = None) -> None:
    """Flows of three linked hops at `rate` records per second, in ticks of 100 ms; the
    topics have one partition, so each parent's offset is known before it is written. With
    `fetch_topic`, every record is also fetched once by one consumer group, 2 ms after it was
    written: the observation `fetch_log` would publish (`protocol.contracts.fetch_log`)."""
    from confluent_kafka import Producer

    from protocol.contracts.fetch_log import batch_tail, observation

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, "compression.type": "lz4"})
    next_offset = dict.fromkeys(topics, 0)
    audit = [("herald.client_id", b"bench-app"), ("herald.principal", b"User:ANONYMOUS"),
             ("herald.origin", b"bench-cluster")]
    per_tick = max(1, rate // 10 // 3)
    tick = time.monotonic()
    while not stop.is_set():
        now = int(time.time() * 1000)
        for _ in range(per_tick):
            trace = os.urandom(16).hex()
            parent = None
            for hop, topic in enumerate(topics):
                headers = [("traceparent", f"00-{trace}-{os.urandom(8).hex()}-01".encode()),
                           ("herald.time", str(now + hop).encode()), *audit]
                if parent is not None:
                    headers.append(("herald.parent", parent.encode()))
                parent = f"{topic}:0:{next_offset[topic]}"
                producer.produce(topic, b"x" * 100, headers=headers, partition=0)
                if fetch_topic:
                    tail = batch_tail(topic, 0, "bench-consumer", "bench-group", now + hop + 2)
                    seen = observation(trace, next_offset[topic], tail, str(now + hop).encode())
                    producer.produce(fetch_topic, seen.encode(), trace.encode())
                next_offset[topic] += 1
                sent[0] += 1
        producer.poll(0)
        tick += 0.1
        time.sleep(max(0.0, tick - time.monotonic()))
    producer.flush(60)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape_steadily(port: int, every_s: float, stop: threading.Event,
                    scrapes: list[tuple[float, int]]) -> None:
    """GET /metrics every `every_s` until `stop`; note each scrape's time (ms) and size."""
    import urllib.request

    while not stop.wait(every_s):
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                size = len(r.read())
        except OSError as exc:
            log(f"scrape failed: {exc}")
            continue
        scrapes.append(((time.perf_counter() - t) * 1000, size))


def _slope_ms_per_hour(points: list[tuple[float, float]]) -> float:
    if len(points) < 2:
        return 0.0
    xs, ys = zip(*points, strict=True)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in points) / var * 3600


def run_stream(args: argparse.Namespace) -> int:
    from pipeline.jobs import start_stream
    from pipeline.session import SparkSettings, spark_session
    from proxy.devtools.embedded_kafka import KafkaCluster

    with tempfile.TemporaryDirectory(prefix="pipeline-stream-", dir=args.work_dir) as work, \
            KafkaCluster(size=1) as cluster:
        tag = os.urandom(3).hex()
        topics = [f"{r}-{tag}" for r in ROLES]
        fetch_topic = f"herald.fetches-{tag}" if args.fetches else ""
        for t in [*topics, *([fetch_topic] if fetch_topic else [])]:
            create_topic(cluster.bootstrap, t, 1)
        spark = spark_session(SparkSettings(driver_memory=args.driver_memory,
                                            shuffle_partitions=args.shuffle_partitions))
        port = free_port() if args.metrics == "on" else 0
        config = PipelineConfig(
            bootstrap=cluster.bootstrap, topics=topics, terminal_topics=[topics[-1]],
            output=f"{work}/out", shuffle_partitions=args.shuffle_partitions,
            fetch_topic=fetch_topic,
            stream=StreamConfig(checkpoint=f"{work}/ckpt", trigger="processing_time",
                                interval_s=args.interval_s, watermark_s=args.watermark_s,
                                flow_gap_s=args.flow_gap_s,
                                late_retention_s=args.late_retention_s,
                                metrics_bind=f"127.0.0.1:{port}" if port else ""))
        stop = threading.Event()
        scrapes: list[tuple[float, int]] = []
        scraper = threading.Thread(target=scrape_steadily,
                                   args=(port, args.scrape_s, stop, scrapes))
        sent = [0]
        writer = threading.Thread(target=produce_steadily,
                                  args=(cluster.bootstrap, topics, args.rate, stop, sent,
                                        fetch_topic))
        query = start_stream(spark, config)
        writer.start()
        if port:
            scraper.start()
        started = time.monotonic()
        try:
            while time.monotonic() - started < args.minutes * 60:
                assert query.exception() is None, query.exception()
                time.sleep(5)
        finally:
            stop.set()
            writer.join(120)
            if port:
                scraper.join(30)
            query.stop()  # may interrupt a micro-batch: Spark logs the interrupted write
            spark.stop()
        lines = (Path(config.output) / "progress.jsonl").read_text().splitlines()
        held = [json.loads(line) for line in
                (Path(config.output) / "batches.jsonl").read_text().splitlines()]
    runs = [json.loads(line) for line in lines]
    held_by_batch = {h["batch_id"]: h for h in held}  # a replayed batch: its last line
    batches = [p for p in runs if p["input_rows"]]
    tenth = max(1, len(batches) // 10)

    def median_of(part: list[dict], key: str) -> float:
        return statistics.median(p[key] for p in part)

    def state_of(p: dict, key: str) -> int:
        return (p["state"] or {}).get(key, 0)

    def held_of(p: dict, key: str) -> int | None:
        return held_by_batch.get(p["batch_id"], {}).get(key)

    def started_s(p: dict) -> float:  # Spark's ISO time of the batch's start
        return datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()

    points = [(started_s(p), p["duration_ms"]) for p in batches]
    total_in = sum(p["input_rows"] for p in batches)
    print(json.dumps({
        "bench": "pipeline stream", "minutes": args.minutes, "rate": args.rate,
        "fetches": args.fetches, "metrics": args.metrics,
        "scrapes": len(scrapes),
        "scrape_ms_median": round(statistics.median(s[0] for s in scrapes), 2)
        if scrapes else None,
        "scrape_bytes_last": scrapes[-1][1] if scrapes else None,
        "batch_ms_median": median_of(batches, "duration_ms") if batches else None,
        "records_sent": sent[0], "records_read": total_in, "batches": len(batches),
        "records_per_s": round(total_in / (args.minutes * 60)),
        "batch_ms_start": median_of(batches[:tenth], "duration_ms") if batches else None,
        "batch_ms_end": median_of(batches[-tenth:], "duration_ms") if batches else None,
        "batch_ms_slope_per_hour": round(_slope_ms_per_hour(points)),
        "state_rows_start": state_of(batches[tenth - 1], "numRowsTotal") if batches else None,
        "state_rows_end": state_of(batches[-1], "numRowsTotal") if batches else None,
        "state_bytes_start": state_of(batches[tenth - 1], "memoryUsedBytes") if batches else None,
        "state_bytes_end": state_of(batches[-1], "memoryUsedBytes") if batches else None,
        **{f"{key}_{end}": held_of(p, key) if batches else None
           for key in ("held_hops", "held_flows", "tombstones")
           for end, p in (("start", batches[tenth - 1] if batches else None),
                          ("end", batches[-1] if batches else None))},
        "per_batch": [[p["batch_id"], p["input_rows"], p["duration_ms"],
                       held_of(p, "held_hops"), held_of(p, "tombstones"),
                       state_of(p, "memoryUsedBytes")] for p in batches],
    }))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--work-dir", default=None, help="where Parquet and checkpoints go")
    sub = parser.add_subparsers(dest="mode", required=True)
    batch = sub.add_parser("batch")
    batch.add_argument("--hops", type=int, default=10_000_000)
    batch.add_argument("--partitions", type=int, default=8)
    stream = sub.add_parser("stream")
    stream.add_argument("--minutes", type=float, default=30)
    stream.add_argument("--rate", type=int, default=400, help="records per second")
    stream.add_argument("--interval-s", type=float, default=10)
    stream.add_argument("--watermark-s", type=float, default=5)
    stream.add_argument("--flow-gap-s", type=float, default=10)
    stream.add_argument("--late-retention-s", type=float, default=60)
    stream.add_argument("--shuffle-partitions", type=int, default=4)
    stream.add_argument("--metrics", choices=("off", "on"), default="off",
                        help="serve the stream's Prometheus metrics and scrape them")
    stream.add_argument("--scrape-s", type=float, default=1.0,
                        help="seconds between scrapes with --metrics on")
    stream.add_argument("--no-fetches", dest="fetches", action="store_false",
                        help="no fetch_log observations (by default each record is fetched "
                             "once: transit and lag are computed too)")
    args = parser.parse_args(argv)
    return run_batch(args) if args.mode == "batch" else run_stream(args)


if __name__ == "__main__":
    sys.exit(main())
