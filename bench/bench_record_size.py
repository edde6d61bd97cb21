"""What bigger records cost the broker alone: direct produce throughput at two record sizes.

    python bench/bench_record_size.py [--sizes 1024 1373] [--records 1000000] [--rounds 4]

Stamping members make every record larger (`trace_context` + `audit` add about 350 bytes to
a record, depending on client id, address and cluster id). The broker then receives, checks and
writes that many more bytes, whatever the proxy itself costs. This runs ProducerPerformance
directly against a broker (no Herald) at the bare size and at the enriched size, alternating,
and prints the median records/s of each and their ratio: the share of the direct throughput
that even a proxy costing nothing could reach with those headers on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import (  # noqa: E402
    create_topic,
    data_bytes,
    data_dir,
    delete_topics,
    log,
    produce,
)
from proxy.devtools.embedded_kafka import KafkaCluster  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[1024, 1373],
                        help="bare and enriched bytes per record")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--warmup-records", type=int, default=200_000)
    parser.add_argument("--data-dir", default=None,
                        help="folder for the broker's log (default: a folder in /dev/shm)")
    args = parser.parse_args(argv)

    started = time.monotonic()
    need = data_bytes(args.warmup_records + args.records, max(args.sizes))
    with data_dir(args.data_dir, need) as workdir:
        rates = run(args, workdir)
    bare, enriched = (statistics.median(rates[size]) for size in args.sizes)
    print(f"\ndirect produce, {args.records} records, acks=all, median of {args.rounds} rounds")
    print(f"  {args.sizes[0]:>6} B records: {bare:>10.0f} records/s")
    print(f"  {args.sizes[1]:>6} B records: {enriched:>10.0f} records/s")
    print(f"  ratio: {enriched / bare:.1%}")
    log(f"finished in {time.monotonic() - started:.0f} s")
    return 0


def run(args: argparse.Namespace, workdir: Path) -> dict[int, list[float]]:
    rates: dict[int, list[float]] = {size: [] for size in args.sizes}
    with KafkaCluster(size=1, workdir=workdir) as cluster:
        if args.warmup_records:
            create_topic(cluster.bootstrap, "size-warmup", args.partitions)
            produce(cluster.bootstrap, "size-warmup", args.warmup_records, args.sizes[0], -1)
        for n in range(args.rounds):
            order = args.sizes if n % 2 == 0 else args.sizes[::-1]
            for size in order:
                topic = f"size-{n}-{size}"
                create_topic(cluster.bootstrap, topic, args.partitions)
                result = produce(cluster.bootstrap, topic, args.records, size, -1)
                rates[size].append(result.records_per_s)
                log(f"round {n + 1}/{args.rounds} {size:>6} B: "
                    f"{result.records_per_s:>10.0f} records/s")
                delete_topics(cluster.bootstrap, topic)
    return rates


if __name__ == "__main__":
    sys.exit(main())
