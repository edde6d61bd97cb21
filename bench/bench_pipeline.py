"""How fast the pipeline stitches: records per second of the batch job, by record count and
partitions.

    python bench/bench_pipeline.py [--records 1000000 5000000] [--partitions 1 4]

For each (records, partitions) it writes that many records, shaped as Herald stamps them
(`traceparent` and the eight `herald.*` audit headers, 100-byte values), straight to a local
broker: flows of three hops (orders → payments → shipments), one record in a hundred without
trace context; each hop after the first names the one before in `herald.parent` (with
`--no-links`, none does, and every edge is inferred). Then it runs the whole batch job
(`pipeline.jobs.run_batch`: Kafka source, hops, the causal graph, branches, flows, edges,
pathways, audit, Parquet, summary and report) on `local[*]` and prints
records per second of the job alone (the Spark session is started before the clock starts).
The broker's log lives in /dev/shm unless `--data-dir` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402

from bench.bench_proxy import create_topic, data_dir, delete_topics, log, send  # noqa: E402
from pipeline.config import PipelineConfig  # noqa: E402
from proxy.devtools.embedded_kafka import KafkaCluster  # noqa: E402

ROLES = ("orders", "payments", "shipments")
RECORD_BYTES = 100 + 60 + 8 * 40  # value, traceparent, audit headers (approximate)


def write_flows(bootstrap: str, topics: list[str], records: int, partitions: int,
                links: bool = True) -> None:
    """`records` records in flows of len(topics) hops, Herald's headers on each; with
    `links`, each hop after the first names the one before in `herald.parent`.

    The parent's offset is known before it is written: each flow goes to one partition
    (flow number modulo `partitions`) of fresh topics, and the idempotent producer keeps
    each partition's records in order, so offsets count up from 0 per partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.size": 1_000_000, "compression.type": "lz4",
                         "queue.buffering.max.messages": 1_000_000,
                         "enable.idempotence": True})
    next_offset: dict[tuple[str, int], int] = {}
    value = b"x" * 100
    audit = [("herald.client_id", b"bench-app"), ("herald.principal", b"User:ANONYMOUS"),
             ("herald.source", b"127.0.0.1:40000"), ("herald.proxy", b"herald-bench"),
             ("herald.cluster", b"bench-cluster"), ("herald.origin", b"bench-cluster")]
    now = int(time.time() * 1000)
    written = 0
    flow = 0
    while written < records:
        trace = os.urandom(16).hex()
        traced = flow % 100 != 99
        partition = flow % partitions
        parent = None
        for hop, topic in enumerate(topics):
            if written == records:
                break
            headers = [("traceparent", f"00-{trace}-{os.urandom(8).hex()}-01".encode())
                       ] if traced else []
            if links and traced and parent is not None:
                headers.append(("herald.parent", parent.encode()))
            headers += audit + [("herald.time", str(now + flow + 3 * hop).encode()),
                                ("herald.msg_id", uuid.uuid4().bytes.hex().encode())]
            offset = next_offset.get((topic, partition), 0)
            next_offset[(topic, partition)] = offset + 1
            parent = f"{topic}:{partition}:{offset}"
            send(producer, topic, value, headers, 0.05, partition=partition)
            written += 1
        flow += 1
        if flow % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--no-links", action="store_true",
                        help="write no herald.parent headers: every edge is inferred")
    parser.add_argument("--data-dir", default=None,
                        help="folder for the broker's log (default: a folder in /dev/shm)")
    args = parser.parse_args(argv)

    from pipeline.jobs import run_batch
    from pipeline.session import SparkSettings, spark_session

    need = max(args.records) * RECORD_BYTES * len(args.partitions) * 2
    results = []
    with data_dir(args.data_dir, need) as workdir, \
            KafkaCluster(size=1, workdir=workdir) as cluster:
        spark = spark_session(SparkSettings(driver_memory=args.driver_memory,
                                            shuffle_partitions=max(4, os.cpu_count() or 2)))
        try:
            for records in args.records:
                for partitions in args.partitions:
                    tag = uuid.uuid4().hex[:6]
                    topics = [f"{role}-{tag}" for role in ROLES]
                    for t in topics:
                        create_topic(cluster.bootstrap, t, partitions)
                    started = time.monotonic()
                    write_flows(cluster.bootstrap, topics, records, partitions,
                                links=not args.no_links)
                    log(f"{records} records in {partitions} partition(s) per topic written "
                        f"in {time.monotonic() - started:.0f} s")
                    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as out:
                        config = PipelineConfig(
                            bootstrap=cluster.bootstrap, topics=topics,
                            terminal_topics=[topics[-1]], output=out,
                            shuffle_partitions=max(4, os.cpu_count() or 2))
                        started = time.monotonic()
                        summary = run_batch(spark, config)
                        seconds = time.monotonic() - started
                    assert summary["records"]["total"] == records, summary["records"]
                    # Linked flows leave nothing to infer; unlinked ones are inferred by time.
                    assert (summary["links"]["inferred"] == 0) != args.no_links, summary["links"]
                    rate = records / seconds
                    results.append((records, partitions, seconds, rate, summary["flows"]))
                    log(f"stitched {records} records, {partitions} partition(s): "
                        f"{seconds:.1f} s, {rate:,.0f} records/s, flows {summary['flows']}")
                    delete_topics(cluster.bootstrap, f".*-{tag}")
        finally:
            spark.stop()
    print(f"\npipeline batch job on local[*] ({os.cpu_count()} cores), "
          f"driver memory {args.driver_memory}")
    print(f"{'records':>10} {'partitions':>10} {'seconds':>8} {'records/s':>10}")
    for records, partitions, seconds, rate, _ in results:
        print(f"{records:>10} {partitions:>10} {seconds:>8.1f} {rate:>10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
