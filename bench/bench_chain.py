"""The chain path inside Herald on one core: decode a Produce request (or, for a fetch chain, a
Fetch response), run the interceptor chain over every partition, re-encode. Prints
microseconds per record, records/s and CPU ms per MB of record payload.

Not a test: a yardstick for the per-record cost that decides how close Herald with
interceptors comes to direct Kafka throughput (see bench_proxy.py for that end to end).

    .venv/bin/python bench/bench_chain.py [--chain trace_audit|none|insert|drop_headers]
        [--records 15] [--batches 1]
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
from protocol.api_keys import ApiKey
from protocol.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from protocol.records import Record, build_batch
from proxy.filters.chain import Exchange, SessionContext
from proxy.filters.interception import InterceptorFilter
from proxy.net import wire
from proxy.upstream.topic_ids import TopicIds
from tests.support.raw_client import request_frame

CHAINS = {
    "none": [],
    "insert": [{"type": "insert_header", "header": "app.id", "value": "checkout"}],
    "trace_audit": [{"type": "trace_context"}, {"type": "audit"}],
    # fetch path: drop a header no record carries (what any fetch chain costs per record)
    "drop_headers": [{"type": "drop_headers", "headers": ["prefix:internal."]}],
}
FETCH_CHAINS = {"drop_headers"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chain", choices=sorted(CHAINS), default="trace_audit")
    parser.add_argument("--records", type=int, default=15,
                        help="records per batch (ProducerPerformance: 16 KiB batches of 1 KiB)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--batches", type=int, default=1,
                        help="batches per partition (a Fetch response carries many)")
    parser.add_argument("--value-size", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after the timing, profile one round and print its N costliest "
                             "functions (own time)")
    args = parser.parse_args()

    fetch = args.chain in FETCH_CHAINS
    chains = build_chains({"fetch" if fetch else "produce": CHAINS[args.chain]},
                          ProxyInfo(cluster_id="bench"))
    member = InterceptorFilter(chains, TopicIds())
    ctx = SessionContext("127.0.0.1:40000", "broker-1", "127.0.0.1:9092", client_id="producer-1")
    value = b"x" * args.value_size
    records = b"".join(build_batch([Record(value=value) for _ in range(args.records)],
                                   producer_id=7, producer_epoch=0, base_sequence=0,
                                   base_offset=i * args.records)
                       for i in range(args.batches))
    per_request = args.records * args.partitions * args.batches
    if fetch:
        response = FetchResponse(responses=[FetchableTopicResponse(
            topic="bench", partitions=[PartitionData(partition_index=i, records=records)
                                       for i in range(args.partitions)])])
        version = 12
        payload = (7).to_bytes(4, "big") + b"\0" + response.encode(version)

        async def once() -> float:
            start = time.perf_counter()
            for _ in range(args.requests):
                offset, msg = wire.decode_response(ApiKey.FETCH, version, payload)
                if await member.on_response(ctx, Exchange(), ApiKey.FETCH, version, msg):
                    wire.encode_response(ApiKey.FETCH, version, payload, offset, msg)
            return time.perf_counter() - start
    else:
        request = ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[TopicProduceData(
            name="bench", partition_data=[PartitionProduceData(index=i, records=records)
                                          for i in range(args.partitions)])])
        payload = request_frame(0, 11, 1, request)[4:]

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
    ms_per_mb = us * 1e-3 * 1e6 / args.value_size
    print(f"chain={args.chain} records/batch={args.records} batches={args.batches} "
          f"partitions={args.partitions} value={args.value_size} B")
    print(f"  {us:.2f} us/record  {ms_per_mb:.2f} ms/MB  {1e6 / us:,.0f} records/s on one core "
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
