"""The pipeline at scale: the batch analysis over many hops, and the stream over a long run at
a steady rate.

    python bench/bench_pipeline_scale.py batch  --hops 10000000 [--partitions 8]
    python bench/bench_pipeline_scale.py stream --minutes 30 --rate 400 [--interval-s 10]
                                                [--metrics off|on] [--scrape-s 1]
                                                [--state-store hdfs|rocksdb] [--jobs on|off]
    python bench/bench_pipeline_scale.py stream --ramp 1000,2000,5000,10000 --step-minutes 2

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
Per micro-batch (`per_batch`) it also says where the time went: Spark's own phases
(`spark_ms`: offsets, planning, `addBatch` = the `foreachBatch` function, commits), each step
of the function timed on the driver (`steps_ms`, `pipeline.stream.steps`), and the Spark jobs
of each step with their time (`jobs`: step -> [jobs, ms], from Spark's event log, which
`--jobs on`, the default, enables), the classes Spark compiled for it (`compiled`, a few
once its plans are cached); `backlog` is what Kafka held beyond the batch's end
offsets, and `metrics_behind_s_*` how far the finalised flows the metrics show were behind the
records' own time just before the next micro-batch published (its end minus the watermark
minus `flow_gap_s`).
`--ramp R1,R2,...` steps the producer through those rates, `--step-minutes` each, and reports
every step (its micro-batches: time, backlog, how far behind) and the knee: the highest rate
whose micro-batches stayed within the trigger (all but a tenth), with the backlog at most two
triggers' worth of records and the metrics at most 30 s behind.
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


def produce_steadily(bootstrap: str, topics: list[str], rate: list[int], stop: threading.Event,
                     sent: list[int], fetch_topic: str | None = None) -> None:
    """Flows of three linked hops at `rate[0]` records per second (a ramp changes it while
    this runs), in ticks of 100 ms; the topics have one partition, so each parent's offset is
    known before it is written. With `fetch_topic`, every record is also fetched once by one
    consumer group, 2 ms after it was written: the observation `fetch_log` would publish
    (`protocol.contracts.fetch_log`)."""
    from confluent_kafka import Producer

    from protocol.contracts.fetch_log import batch_tail, observation

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, "compression.type": "lz4"})
    next_offset = dict.fromkeys(topics, 0)
    audit = [("herald.client_id", b"bench-app"), ("herald.principal", b"User:ANONYMOUS"),
             ("herald.origin", b"bench-cluster")]
    tick = time.monotonic()
    while not stop.is_set():
        now = int(time.time() * 1000)
        for _ in range(max(1, rate[0] // 10 // 3)):
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


def _event_files(event_log_dir: Path) -> list[Path]:
    """The event log's files in order: Spark 4 writes a folder per application
    (`eventlog_v2_<app>/events_<n>_<app>`, rolled over as it grows), older ones a file."""
    def order(path: Path) -> tuple[str, int]:
        n = path.name.split("_")[1] if path.name.startswith("events_") else "0"
        return (str(path.parent), int(n) if n.isdigit() else 0)

    return sorted((p for p in event_log_dir.rglob("*") if p.is_file()
                   and not p.name.startswith(("appstatus", ".")) and p.suffix != ".crc"),
                  key=order)


def spark_jobs(event_log_dir: Path) -> dict[int, list[dict]]:
    """Spark's jobs per micro-batch, from its event log: each job's step (its description,
    `pipeline.stream.steps`; `stream` for the query's own jobs, such as the offsets it asks
    for), its time (submission to completion, ms) and its stages' names."""
    starts: dict[int, dict] = {}
    by_batch: dict[int, list[dict]] = {}
    for log_file in _event_files(event_log_dir):
        with log_file.open() as f:
            for line in f:
                event = json.loads(line)
                kind = event.get("Event")
                if kind == "SparkListenerJobStart":
                    props = event.get("Properties") or {}
                    batch = props.get("streaming.sql.batchId")
                    if batch is None:
                        continue
                    desc = props.get("spark.job.description") or ""
                    step = desc.split(": ", 1)[1] if desc.startswith("batch ") else "stream"
                    starts[event["Job ID"]] = {
                        "batch": int(batch), "step": step, "start": event["Submission Time"],
                        "stages": [st.get("Stage Name", "") for st in
                                   event.get("Stage Infos") or []]}
                elif kind == "SparkListenerJobEnd" and event["Job ID"] in starts:
                    job = starts.pop(event["Job ID"])
                    job["ms"] = event["Completion Time"] - job.pop("start")
                    by_batch.setdefault(job["batch"], []).append(job)
    return by_batch


def _iso_s(stamp: str) -> float:
    """Spark's ISO time (a batch's start, the watermark) in seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _steps_of(jobs: list[dict]) -> dict[str, list[float]]:
    """Per step of one micro-batch: its Spark jobs and their total time (ms)."""
    steps: dict[str, list[float]] = {}
    for job in jobs:
        s = steps.setdefault(job["step"], [0, 0])
        s[0] += 1
        s[1] += job["ms"]
    return steps


def stream_report(batches: list[dict], held_by_batch: dict[int, dict],
                  jobs: dict[int, list[dict]], gap_s: float, interval_s: float) -> dict:
    """The figures of a run's micro-batches (those that read records): their time, the
    backlog Spark left in Kafka, how far the metrics were behind the records' own time, the
    state, and per batch where its time went."""
    tenth = max(1, len(batches) // 10)

    def median_of(part: list[dict], key: str) -> float | None:
        return statistics.median(p[key] for p in part) if part else None

    def state_of(p: dict | None, key: str) -> int | None:
        return None if p is None else (p["state"] or {}).get(key, 0)

    def held_of(p: dict | None, key: str) -> int | None:
        return None if p is None else held_by_batch.get(p["batch_id"], {}).get(key)

    # The metrics show the flows a micro-batch finalised: those whose last hop is at least
    # `flow_gap_s` behind its watermark. Just before the next micro-batch publishes, they are
    # as far behind the records' own time as that batch's end is from watermark - gap.
    behind = []
    for p, nxt in zip(batches, batches[1:], strict=False):
        if p.get("watermark") and not p["watermark"].startswith("1970"):
            end = _iso_s(nxt["timestamp"]) + nxt["duration_ms"] / 1000
            behind.append(end - (_iso_s(p["watermark"]) - gap_s))
    first, last = (batches[tenth - 1], batches[-1]) if batches else (None, None)
    per_job = {b: _steps_of(j) for b, j in jobs.items()}
    over = [p for p in batches if p["duration_ms"] > interval_s * 1000]
    return {
        "batches": len(batches),
        "batch_ms_median": median_of(batches, "duration_ms"),
        "batch_ms_max": max((p["duration_ms"] for p in batches), default=None),
        "batches_over_trigger": len(over),
        "batch_ms_start": median_of(batches[:tenth], "duration_ms"),
        "batch_ms_end": median_of(batches[-tenth:], "duration_ms"),
        "batch_ms_slope_per_hour": round(_slope_ms_per_hour(
            [(_iso_s(p["timestamp"]), p["duration_ms"]) for p in batches])),
        "backlog_start": first.get("behind") if first else None,
        "backlog_end": last.get("behind") if last else None,
        "metrics_behind_s_median": round(statistics.median(behind), 1) if behind else None,
        "metrics_behind_s_max": round(max(behind), 1) if behind else None,
        "state_rows_start": state_of(first, "numRowsTotal"),
        "state_rows_end": state_of(last, "numRowsTotal"),
        "state_bytes_start": state_of(first, "memoryUsedBytes"),
        "state_bytes_end": state_of(last, "memoryUsedBytes"),
        **{f"{key}_{end}": held_of(p, key) for key in ("held_hops", "held_flows", "tombstones")
           for end, p in (("start", first), ("end", last))},
        "spark_jobs_per_batch_median": statistics.median(
            len(jobs.get(p["batch_id"], [])) for p in batches) if batches and jobs else None,
        "per_batch": [{
            "batch_id": p["batch_id"], "input_rows": p["input_rows"], "ms": p["duration_ms"],
            "backlog": p.get("behind"), "held_hops": held_of(p, "held_hops"),
            "tombstones": held_of(p, "tombstones"),
            "state_bytes": state_of(p, "memoryUsedBytes"),
            "spark_ms": {k: v for k, v in (p.get("durations_ms") or {}).items()
                         if k != "triggerExecution"},
            # per step of foreachBatch: driver ms, then [Spark jobs, their ms]
            "steps_ms": held_by_batch.get(p["batch_id"], {}).get("steps_ms"),
            "compiled": held_by_batch.get(p["batch_id"], {}).get("compiled"),
            "jobs": {k: [n, round(ms)] for k, (n, ms) in
                     per_job.get(p["batch_id"], {}).items()},
        } for p in batches],
    }


def _lines(path: Path) -> list[dict]:
    """A JSON-lines file of the stream (none yet: no micro-batch finished)."""
    try:
        return [json.loads(line) for line in path.read_text().splitlines()]
    except FileNotFoundError:
        return []


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_stream(args: argparse.Namespace) -> int:
    from pipeline.jobs import start_stream
    from pipeline.session import SparkSettings, spark_session
    from proxy.devtools.embedded_kafka import KafkaCluster

    ramp = [int(r) for r in args.ramp.split(",")] if args.ramp else [args.rate]
    step_s = args.step_minutes * 60 if args.ramp else args.minutes * 60
    with tempfile.TemporaryDirectory(prefix="pipeline-stream-", dir=args.work_dir) as work, \
            KafkaCluster(size=1) as cluster:
        tag = os.urandom(3).hex()
        topics = [f"{r}-{tag}" for r in ROLES]
        fetch_topic = f"herald.fetches-{tag}" if args.fetches else ""
        for t in [*topics, *([fetch_topic] if fetch_topic else [])]:
            create_topic(cluster.bootstrap, t, 1)
        events = Path(work) / "events"
        events.mkdir()
        conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
                "spark.eventLog.compress": "false"} if args.jobs == "on" else {}
        if args.state_store == "rocksdb":
            conf["spark.sql.streaming.stateStore.providerClass"] = (
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        spark = spark_session(SparkSettings(driver_memory=args.driver_memory,
                                            shuffle_partitions=args.shuffle_partitions,
                                            conf=conf))
        port = free_port() if args.metrics == "on" else 0
        config = PipelineConfig(
            bootstrap=cluster.bootstrap, topics=topics, terminal_topics=[topics[-1]],
            output=f"{work}/out", shuffle_partitions=args.shuffle_partitions,
            fetch_topic=fetch_topic,
            stream=StreamConfig(checkpoint=f"{work}/ckpt", trigger="processing_time",
                                interval_s=args.interval_s, watermark_s=args.watermark_s,
                                flow_gap_s=args.flow_gap_s,
                                late_retention_s=args.late_retention_s,
                                state_buckets=args.state_buckets,
                                metrics_bind=f"127.0.0.1:{port}" if port else ""))
        stop = threading.Event()
        scrapes: list[tuple[float, int]] = []
        scraper = threading.Thread(target=scrape_steadily,
                                   args=(port, args.scrape_s, stop, scrapes))
        sent = [0]
        rate = [ramp[0]]
        writer = threading.Thread(target=produce_steadily,
                                  args=(cluster.bootstrap, topics, rate, stop, sent,
                                        fetch_topic))
        query = start_stream(spark, config)
        writer.start()
        if port:
            scraper.start()
        steps: list[dict] = []  # per rate: when it started, records sent, load average
        seen = [-1]  # the newest micro-batch logged
        try:
            for r in ramp:
                rate[0] = r
                began, sent_before = time.time(), sent[0]
                load = [loadavg()]
                while time.time() - began < step_s:
                    assert query.exception() is None, query.exception()
                    time.sleep(5)
                    load.append(loadavg())
                    progress = query.lastProgress
                    if progress and progress["batchId"] != seen[0]:
                        seen[0] = progress["batchId"]
                        log(f"batch {seen[0]}: {progress['numInputRows']} rows, "
                            f"{progress['durationMs'].get('triggerExecution')} ms, "
                            f"load {load[-1]}")
                steps.append({"rate": r, "from_s": began, "to_s": time.time(),
                              "sent": sent[0] - sent_before,
                              "load_1m": [min(x[0] for x in load), max(x[0] for x in load)]})
                log(f"rate {r}: {steps[-1]['sent']} records sent, load {load[-1]}")
        finally:
            stop.set()
            writer.join(120)
            if port:
                scraper.join(30)
            query.stop()  # may interrupt a micro-batch: Spark logs the interrupted write
            spark.stop()
        runs = _lines(Path(config.output) / "progress.jsonl")
        held = _lines(Path(config.output) / "batches.jsonl")
        jobs = spark_jobs(events) if args.jobs == "on" else {}
    held_by_batch = {h["batch_id"]: h for h in held}  # a replayed batch: its last line
    batches = [p for p in runs if p["input_rows"]]
    head = {"bench": "pipeline stream", "interval_s": args.interval_s,
            "watermark_s": args.watermark_s, "flow_gap_s": args.flow_gap_s,
            "state_store": args.state_store, "state_buckets": args.state_buckets,
            "driver_memory": args.driver_memory, "fetches": args.fetches,
            "metrics": args.metrics, "scrapes": len(scrapes),
            "scrape_ms_median": round(statistics.median(s[0] for s in scrapes), 2)
            if scrapes else None,
            "scrape_bytes_last": scrapes[-1][1] if scrapes else None,
            "records_sent": sent[0], "records_read": sum(p["input_rows"] for p in batches)}
    gap = args.flow_gap_s
    if not args.ramp:
        print(json.dumps({**head, "minutes": args.minutes, "rate": args.rate,
                          "records_per_s": round(head["records_read"] / (args.minutes * 60)),
                          "load_1m": steps[0]["load_1m"] if steps else None,
                          **stream_report(batches, held_by_batch, jobs, gap,
                                          args.interval_s)}))
        return 0
    # A ramp: each rate's micro-batches are those that started while it was produced (the
    # first of each step still carries the previous rate's tail).
    out = []
    for st in steps:
        mine = [p for p in batches if st["from_s"] <= _iso_s(p["timestamp"]) < st["to_s"]]
        rep = stream_report(mine, held_by_batch, jobs, gap, args.interval_s)
        kept = (bool(mine) and rep["batches_over_trigger"] <= len(mine) // 10
                and (rep["backlog_end"] or 0) <= 2 * st["rate"] * args.interval_s
                and (rep["metrics_behind_s_max"] or 0) <= 30)
        sent_per_s = round(st["sent"] / (st["to_s"] - st["from_s"]))
        out.append({"rate": st["rate"], "sent_per_s": sent_per_s,
                    "load_1m": st["load_1m"], "kept_up": kept,
                    **{k: v for k, v in rep.items() if k != "per_batch"},
                    "per_batch": rep["per_batch"]})
    knee = max((o["rate"] for o in out if o["kept_up"]), default=None)
    print(json.dumps({**head, "ramp": ramp, "step_minutes": args.step_minutes,
                      "knee_records_per_s": knee, "steps": out}))
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
    stream.add_argument("--ramp", default="",
                        help="rates (records/s) to step through, e.g. 1000,2000,5000,10000, "
                             "each for --step-minutes; reports each and the knee")
    stream.add_argument("--step-minutes", type=float, default=2)
    stream.add_argument("--state-buckets", type=int, default=64)
    stream.add_argument("--state-store", choices=("hdfs", "rocksdb"), default="hdfs",
                        help="Spark's state store provider")
    stream.add_argument("--jobs", choices=("off", "on"), default="on",
                        help="Spark's event log, for each micro-batch's jobs and their time")
    stream.add_argument("--no-fetches", dest="fetches", action="store_false",
                        help="no fetch_log observations (by default each record is fetched "
                             "once: transit and lag are computed too)")
    args = parser.parse_args(argv)
    return run_batch(args) if args.mode == "batch" else run_stream(args)


if __name__ == "__main__":
    sys.exit(main())
