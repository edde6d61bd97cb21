"""The produce path inside Herald on one core: decode a Produce request, run the interceptor
chain over every partition, re-encode. Prints microseconds per record and records/s.

Not a test: a yardstick for the per-record cost that decides how close Herald with
interceptors comes to direct Kafka throughput (see bench_proxy.py for that end to end).

    .venv/bin/python bench/bench_chain.py [--chain trace_audit|none|insert] [--records 15]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for tests.support

from interceptors import ProxyInfo, build_chains
from protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from protocol.records import Record, build_batch
from proxy import wire
from proxy.filters import Exchange, SessionContext
from proxy.interception import InterceptorFilter
from proxy.topic_ids import TopicIds
from tests.support.raw_client import request_frame

CHAINS = {
    "none": [],
    "insert": [{"type": "insert_header", "header": "app.id", "value": "checkout"}],
    "trace_audit": [{"type": "trace_context"}, {"type": "audit"}],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chain", choices=sorted(CHAINS), default="trace_audit")
    parser.add_argument("--records", type=int, default=15,
                        help="records per batch (ProducerPerformance: 16 KiB batches of 1 KiB)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--value-size", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after the timing, profile one round and print its N costliest "
                             "functions (own time)")
    args = parser.parse_args()

    chains = build_chains({"produce": CHAINS[args.chain]}, ProxyInfo(cluster_id="bench"))
    member = InterceptorFilter(chains, TopicIds())
    ctx = SessionContext("127.0.0.1:40000", "broker-1", "127.0.0.1:9092", client_id="producer-1")
    value = b"x" * args.value_size
    request = ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[TopicProduceData(
        name="bench", partition_data=[
            PartitionProduceData(index=i, records=build_batch(
                [Record(value=value) for _ in range(args.records)], producer_id=7,
                producer_epoch=0, base_sequence=0))
            for i in range(args.partitions)])])
    payload = request_frame(0, 11, 1, request)[4:]
    per_request = args.records * args.partitions

    async def once() -> float:
        start = time.perf_counter()
        for _ in range(args.requests):
            head = wire.parse_request_header(payload)
            offset, msg = wire.decode_request(head, payload)
            if await member.on_request(ctx, Exchange(), 0, 11, msg):
                wire.encode_request(head, payload, offset, msg)
        return time.perf_counter() - start

    results = [trio.run(once) for _ in range(args.rounds)]
    best = min(results)
    us = best / (args.requests * per_request) * 1e6
    print(f"chain={args.chain} records/batch={args.records} partitions={args.partitions} "
          f"value={args.value_size} B")
    print(f"  {us:.2f} us/record  {1e6 / us:,.0f} records/s on one core "
          f"(best of {args.rounds}; median {statistics.median(results) / best:.2f}x best; "
          f"load average {os.getloadavg()[0]:.2f})")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        trio.run(once)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
