"""Record-batch throughput on one core: what the proxy's hot path costs per record.

    python bench/bench_records.py [--seconds 1.0]

Scenarios, each over batches of 100 records (key 16 B, two existing headers, values of
100 B and of 1 KiB) starting from the wire bytes, as the proxy receives them. By default a
records field holds one batch, the shape of a Produce partition; `--batches 10` gives a
Fetch-like field of ten.

Large outputs: glibc serves allocations above its (adaptive) mmap threshold with fresh pages
each time, so producing a multi-megabyte field costs page faults that dominate the codec work
on some machines. The proxy process can raise M_MMAP_THRESHOLD / M_TRIM_THRESHOLD (mallopt or
the MALLOC_*_ environment variables) if that shows up in its profile.

* scan      - split the records field and read every record's headers (read-only chain)
* objects   - the same through `RecordBatch.records` (Record objects)
* add2      - add two headers to every record and produce the final wire bytes
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from protocol.compression import CODEC_NAMES, LZ4, NONE, ZSTD  # noqa: E402
from protocol.records import Record, build_batch, join_batches, split_batches  # noqa: E402

RECORDS_PER_BATCH = 100
TRACEPARENT = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def make_records_field(value_size: int, codec: int, batches: int) -> bytes:
    out = []
    for b in range(batches):
        records = []
        for i in range(RECORDS_PER_BATCH):
            # Text-like values so that compression has realistic work to do.
            value = (f"order-{b}-{i}:" + "abcdefghij" * (value_size // 10 + 1))[:value_size]
            records.append(
                Record(
                    f"customer-{i:07d}".encode(),
                    value.encode(),
                    [("traceparent", TRACEPARENT), ("content-type", b"application/json")],
                    timestamp_delta=i * 3,
                )
            )
        out.append(
            build_batch(
                records,
                compression=codec,
                base_offset=b * RECORDS_PER_BATCH,
                base_timestamp=1_700_000_000_000,
                producer_id=4242,
                producer_epoch=0,
                base_sequence=b * RECORDS_PER_BATCH,
            )
        )
    return b"".join(out)


def scan(field: bytes) -> int:
    seen = 0
    for batch in split_batches(field):
        for headers in batch.iter_headers():
            for key, _value in headers:
                if key == "traceparent":
                    seen += 1
    return seen


def objects(field: bytes) -> int:
    seen = 0
    for batch in split_batches(field):
        for record in batch.records:
            for key, _value in record.headers:
                if key == "traceparent":
                    seen += 1
    return seen


def add_two_headers(field: bytes) -> int:
    parts = split_batches(field)
    for batch in parts:
        for record in batch.records:
            headers = record.headers
            headers.append(("app.id", b"checkout"))
            headers.append(("herald.proxy", b"herald-0"))
    out = join_batches(parts)
    return len(out)


def measure(fn, field: bytes, batches: int, seconds: float, rounds: int = 3) -> float:
    """Best of `rounds` timed loops: on a shared machine the best round is the codec's cost."""
    fn(field)  # warm up
    best = 0.0
    for _ in range(rounds):
        n = 0
        start = time.perf_counter()
        deadline = start + seconds / rounds
        while True:
            fn(field)
            n += 1
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, n * batches * RECORDS_PER_BATCH / (now - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="time per scenario")
    parser.add_argument("--batches", type=int, default=1, help="batches per records field")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    print(f"{args.batches} batch(es) of {RECORDS_PER_BATCH} records per field, one core")
    print(f"{'scenario':<10} {'codec':<6} {'value':>6} {'records/s':>12}")
    for codec in (NONE, LZ4, ZSTD):
        for value_size in (100, 1024):
            field = make_records_field(value_size, codec, args.batches)
            for name, fn in (("scan", scan), ("objects", objects), ("add2", add_two_headers)):
                rate = measure(fn, field, args.batches, args.seconds)
                size = f"{value_size}B"
                print(f"{name:<10} {CODEC_NAMES[codec]:<6} {size:>6} {rate:>12,.0f}", flush=True)


if __name__ == "__main__":
    main()
