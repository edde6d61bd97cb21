"""Decode, rewrite every broker address, and re-encode a large Metadata response.

This is what the proxy does to every Metadata response it relays (so that clients connect to
Herald rather than to the brokers): 3 brokers and 100 topics x 12 partitions with 3 replicas
each, at the newest version. Prints the median time per operation over many runs.

    python bench/bench_metadata.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from protocol.messages.metadata_response import (
    MAX_VERSION,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)


def build_response(topics: int = 100, partitions: int = 12, brokers: int = 3) -> bytes:
    """The encoded body of a realistic Metadata response at the newest version."""
    msg = MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            MetadataResponseBroker(node_id=i, host=f"broker-{i}.kafka.svc", port=9092, rack=f"r{i}")
            for i in range(brokers)
        ],
        cluster_id="Q8rjzbVtS7aMtZMqQd6k9A",
        controller_id=0,
        topics=[
            MetadataResponseTopic(
                error_code=0,
                name=f"orders.events.{t:03d}",
                topic_id=t.to_bytes(16, "big"),
                is_internal=False,
                partitions=[
                    MetadataResponsePartition(
                        error_code=0,
                        partition_index=p,
                        leader_id=p % brokers,
                        leader_epoch=7,
                        replica_nodes=[(p + k) % brokers for k in range(3)],
                        isr_nodes=[(p + k) % brokers for k in range(3)],
                        offline_replicas=[],
                    )
                    for p in range(partitions)
                ],
                topic_authorized_operations=-2147483648,
            )
            for t in range(topics)
        ],
    )
    return msg.encode(MAX_VERSION)


def rewrite(body: bytes, version: int) -> bytes:
    """One proxy operation: decode, point every broker at the proxy, encode."""
    msg = MetadataResponse.decode(body, version)
    for broker in msg.brokers:
        broker.host = "localhost"
        broker.port = 19100 + broker.node_id
    return msg.encode(version)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    body = build_response()
    for _ in range(20):  # warm up
        rewrite(body, MAX_VERSION)
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        rewrite(body, MAX_VERSION)
        times.append(time.perf_counter() - t0)
    median_ms = statistics.median(times) * 1000
    print(
        f"metadata v{MAX_VERSION} decode+rewrite+encode, 100 topics x 12 partitions, "
        f"{len(body)} bytes: {median_ms:.3f} ms/op (median of {args.runs}, "
        f"min {min(times) * 1000:.3f} ms)"
    )


if __name__ == "__main__":
    main()
