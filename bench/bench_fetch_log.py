"""What `fetch_log` costs Herald: CPU per MB fetched and produce-to-consume latency, on vs off.

    python bench/bench_fetch_log.py [--records 300000] [--rounds 3] [--rates 200,1000]

Three Herald processes in front of one broker, the same but for the fetch chain: `off` has
none (Fetch responses pass as bytes), `chain` has one read-only member (`drop_headers` of a
header no record carries: what any fetch chain costs, decoding and walking every record), `on`
has `fetch_log`, publishing to a topic of the same broker (directly, as configured in
production). `on` minus `chain` is fetch_log's own cost. In the pinned layout
(bench/pinning.py) the broker, the load tools and this script run on CPU 0 and the Heralds on
CPU 1, every thread checked before each run; fetch_log's publisher thread lives in Herald, so
its work is in Herald's CPU figures.

Per round, for each Herald (the order alternates between rounds):
  * ConsumerPerformance reads `--records` 1 KiB records that carry a W3C traceparent (written
    once, straight to the broker): Herald's CPU (user + system, from /proc) per MB fetched,
    fetch MB/s, and how many observations fetch_log published for them;
  * at each steady rate, a producer writes straight to the broker while a librdkafka consumer
    reads through Herald: the time from produce() to the consumer's poll() returning the
    record (p50 and p99, microseconds; both ends in this process, one clock) and Herald's CPU
    in millicores over the window.
Figures are medians of per-round values; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402

from bench.bench_proxy import (  # noqa: E402
    CpuClock,
    consume,
    create_topic,
    data_bytes,
    data_dir,
    delete_topics,
    log,
)
from bench.pinning import PROXY_CPU, can_pin, pin, pin_self_to_load_cpu, verify  # noqa: E402
from proxy.devtools.embedded_kafka import KafkaCluster  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402

RECORD = 1024
MODES = ("off", "chain", "on")


@dataclass
class Figures:
    ms_per_mb: list[float] = field(default_factory=list)
    fetch_mbps: list[float] = field(default_factory=list)
    published: list[float] = field(default_factory=list)  # observations per record fetched
    millicores: dict[int, list[float]] = field(default_factory=dict)
    p50_us: dict[int, list[float]] = field(default_factory=dict)
    p99_us: dict[int, list[float]] = field(default_factory=dict)


def _traceparent() -> bytes:
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01".encode()


def write_traced(broker: str, topic: str, records: int) -> None:
    """`records` 1 KiB records with a traceparent each, straight to the broker."""
    producer = Producer({"bootstrap.servers": broker, "linger.ms": 20,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 500_000})
    value = b"x" * RECORD
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, headers=[("traceparent", _traceparent())])
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def end_offset(broker: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": broker, "group.id": "bench-offsets"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def timed_fetch(herald: str, broker: str, topic: str, rate: int, seconds: float,
                warmup_s: float = 2.0) -> tuple[float, float]:
    """Write `rate` records/s straight to the broker; read them through Herald. p50 and p99
    of produce() to poll() returning the record, microseconds, after a warm-up."""
    consumer = Consumer({"bootstrap.servers": herald, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    settle = time.monotonic() + 1.0  # the end offset looked up, the first fetch waiting
    while time.monotonic() < settle:
        consumer.poll(0.1)
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": broker, "linger.ms": 1, "acks": 1})
        pad = b"x" * (RECORD - 8)
        interval, next_at = 1.0 / rate, time.perf_counter()
        while not stop.is_set():
            now = time.perf_counter()
            while next_at <= now:
                producer.produce(topic, struct.pack(">q", time.perf_counter_ns()) + pad,
                                 headers=[("traceparent", _traceparent())])
                next_at += interval
            # at least 1 ms: a thread that spins here keeps the GIL from the consumer
            producer.poll(max(0.001, min(0.01, next_at - time.perf_counter())))
        producer.flush(30)

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    latencies: list[int] = []
    seen, errors = 0, []
    measured_from = time.perf_counter_ns() + int(warmup_s * 1e9)
    end = time.perf_counter() + warmup_s + seconds
    try:
        while time.perf_counter() < end:
            first = consumer.poll(0.1)  # wakes as soon as one record is there
            ready = [] if first is None else [first, *consumer.consume(500, 0)]
            for msg in ready:
                if msg.error():
                    errors.append(str(msg.error()))
                    continue
                seen += 1
                sent = struct.unpack_from(">q", msg.value())[0]
                if sent >= measured_from:
                    latencies.append(time.perf_counter_ns() - sent)
    finally:
        stop.set()
        writer.join(60)
        consumer.close()
    if not latencies:  # a starved machine: say so rather than stop the whole run
        log(f"  no record timed ({seen} arrived, errors {errors[:3]})")
        return float("nan"), float("nan")
    latencies.sort()
    return (latencies[len(latencies) // 2] / 1000,
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] / 1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rates", default="200,1000")
    parser.add_argument("--rate-seconds", type=float, default=10.0)
    parser.add_argument("--unpinned", action="store_true")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",") if r]
    pinned = not args.unpinned and can_pin()
    if pinned:
        pin_self_to_load_cpu()
    load_before = os.getloadavg()
    # The data, plus one observation (~150 bytes) per record fetched with fetch_log on.
    need = data_bytes(args.records * (1 + args.rounds), RECORD)
    with data_dir(args.data_dir, need) as workdir:
        figures = run(args, rates, workdir, pinned)
    report(figures, args, rates, pinned, load_before, os.getloadavg())
    return 0


def run(args: argparse.Namespace, rates: list[int], workdir: Path, pinned: bool
        ) -> dict[str, Figures]:
    figures = {mode: Figures() for mode in MODES}
    with KafkaCluster(size=1, workdir=workdir) as cluster:
        broker = cluster.bootstrap
        observations = "bench-fetches"
        create_topic(broker, observations, 1)
        fetch_log = {"type": "fetch_log", "bootstrap": broker, "topic": observations}
        chains = {"off": {"fetch": []}, "on": {"fetch": [fetch_log]},
                  "chain": {"fetch": [{"type": "drop_headers", "headers": ["bench.absent"]}]}}
        data = f"fetchlog-{uuid.uuid4().hex[:6]}"
        create_topic(broker, data, 3)
        write_traced(broker, data, args.records)
        log(f"{args.records} traced records written")
        heralds = {m: HeraldProcess(herald_config(broker, interceptors=chains[m],
                                                  logging={"level": "warning"}))
                   for m in MODES}
        with heralds["off"] as off, heralds["chain"] as chain, heralds["on"] as on:
            procs = {"off": off, "chain": chain, "on": on}
            pids = {m: p.process.pid for m, p in procs.items() if p.process is not None}
            if pinned:
                for pid in pids.values():
                    pin(pid, {PROXY_CPU})
            for mode in MODES:  # warm-up: connections, metadata, the publisher's producer
                consume(procs[mode].bootstrap, data, args.records)
            for n in range(args.rounds):
                order = MODES if n % 2 == 0 else MODES[::-1]
                log(f"round {n + 1}/{args.rounds} ({', '.join(order)})")
                for mode in order:
                    if pinned:
                        verify(pids[mode], {PROXY_CPU})
                    one_round(mode, procs[mode].bootstrap, broker, data, observations, args,
                              rates, CpuClock(pids[mode]), figures[mode])
    return figures


def one_round(mode: str, herald: str, broker: str, data: str, observations: str,
              args: argparse.Namespace, rates: list[int], clock: CpuClock, into: Figures
              ) -> None:
    mb = args.records * RECORD / 1e6
    published_before = end_offset(broker, observations)
    before = clock.read()
    c = consume(herald, data, args.records)
    cpu = sum(clock.read()) - sum(before)
    time.sleep(1.0)  # the publisher's linger and delivery
    published = end_offset(broker, observations) - published_before
    into.ms_per_mb.append(cpu * 1000 / mb)
    into.fetch_mbps.append(c.fetch_mb_per_s)
    into.published.append(published / args.records)
    log(f"  {mode:5} consume {c.fetch_mb_per_s:6.1f} MB/s, CPU {cpu * 1000 / mb:6.2f} ms/MB, "
        f"{published} observations published")
    for rate in rates:
        topic = f"fetchlog-rate-{uuid.uuid4().hex[:6]}"
        create_topic(broker, topic, 1)
        before = clock.read()
        started = time.perf_counter()
        p50, p99 = timed_fetch(herald, broker, topic, rate, args.rate_seconds)
        millicores = (sum(clock.read()) - sum(before)) / (time.perf_counter() - started) * 1000
        delete_topics(broker, topic)
        into.millicores.setdefault(rate, []).append(millicores)
        into.p50_us.setdefault(rate, []).append(p50)
        into.p99_us.setdefault(rate, []).append(p99)
        log(f"  {mode:5} {rate:6}/s: p50 {p50:8.0f} us  p99 {p99:8.0f} us, "
            f"{millicores:.1f} millicores")


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(figures: dict[str, Figures], args: argparse.Namespace, rates: list[int],
           pinned: bool, load_before: tuple[float, ...], load_after: tuple[float, ...]) -> None:
    layout = ("pinned: broker and load tools on CPU 0, Herald on CPU 1" if pinned
              else "unpinned: everything on every core")
    print(f"\nfetch_log off / a read-only fetch chain / on: {args.records:,} x 1 KiB traced "
          f"records per consume run, medians of {args.rounds} rounds; {layout}")
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f},"
          f" after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}\n")
    print(f"  {'':6}{'CPU ms/MB':>10}{'fetch MB/s':>12}{'published/fetched':>19}")
    for mode in MODES:
        f = figures[mode]
        print(f"  {mode:6}{_med(f.ms_per_mb):10.2f}{_med(f.fetch_mbps):12.1f}"
              f"{_med(f.published):19.3f}")
    print("\nProduce (straight to the broker) to consume (through Herald), microseconds p50 / "
          "p99; Herald millicores")
    for mode in MODES:
        f = figures[mode]
        cells = [f"{r}/s: {_med(f.p50_us[r]):7.0f} / {_med(f.p99_us[r]):7.0f}, "
                 f"{_med(f.millicores[r]):6.1f} mc" for r in rates]
        print(f"  {mode:6}" + "   ".join(cells))


if __name__ == "__main__":
    sys.exit(main())
