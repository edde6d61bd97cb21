"""What a proxy costs per megabyte it moves and at low steady rates: Herald beside a native relay.

    python bench/bench_cost.py [--interceptors none|trace_audit|drop_headers] [--rounds 3]

A ratio of throughputs with the broker, the load tools and the proxy sharing two cores
measures the machine. What travels across machines is the proxy's own CPU per MB it moves, and
what it costs a sidecar that carries little traffic. So, by default (the pinned layout), the
broker and every load tool run on CPU 0 and the proxy on CPU 1, every thread checked before
each run; `--unpinned` leaves everything on every core.

Per round, for the minimal native relay (`bench/relay.c`) and for Herald, in the same run:
  * produce at full speed (Kafka's ProducerPerformance, 1 KiB records, acks=all) and consume it
    all (ConsumerPerformance): the proxy's CPU (user + system, from /proc) per MB of payload,
    and the throughput against the same runs made directly against the broker;
  * produce at fixed rates (1,000, 5,000 and 20,000 records/s by default) with a librdkafka
    producer in this process that times every record from produce() to its delivery report,
    in microseconds: the proxy's CPU in millicores over the window, and the latency it adds
    over the direct run at the same rate.
Figures are medians of per-round values.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402

from bench.bench_proxy import (  # noqa: E402
    CpuClock,
    consume,
    create_topic,
    data_bytes,
    data_dir,
    delete_topics,
    log,
    produce,
)
from bench.bench_relay import build_relay  # noqa: E402
from bench.pinning import PROXY_CPU, can_pin, pin, pin_self_to_load_cpu, verify  # noqa: E402
from proxy.embedded_kafka import ExtraListener, KafkaCluster, free_port  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402

CHAINS: dict[str, dict[str, Any]] = {
    "none": {"produce": [], "fetch": []},
    "trace_audit": {"produce": [{"type": "trace_context"}, {"type": "audit"}], "fetch": []},
    "drop_headers": {"produce": [], "fetch": [{"type": "drop_headers",
                                               "headers": ["prefix:internal."]}]},
}
PROXIES = ("relay", "herald")


@dataclass
class Figures:
    """Every round's values of one target."""

    produce_rps: list[float] = field(default_factory=list)
    consume_mbps: list[float] = field(default_factory=list)
    produce_ms_per_mb: list[float] = field(default_factory=list)
    consume_ms_per_mb: list[float] = field(default_factory=list)
    millicores: dict[int, list[float]] = field(default_factory=dict)
    p50_us: dict[int, list[float]] = field(default_factory=dict)
    p99_us: dict[int, list[float]] = field(default_factory=dict)


def timed_produce(bootstrap: str, topic: str, rate: int, seconds: float, linger_ms: float,
                  warmup_s: float = 2.0) -> tuple[float, float]:
    """Produce `rate` records/s for `seconds` after a warm-up; p50 and p99 of produce() to
    delivery report, in microseconds. poll() wakes as soon as a report arrives, so the timing
    is not rounded to the pacing interval."""
    # linger.ms 0 would make every record a request of its own: a load no real client puts
    # on a broker, which on its one core then queues them for seconds.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "linger.ms": linger_ms, "enable.idempotence": False})
    value = b"x" * 1024
    latencies: list[int] = []
    measured_from = time.perf_counter() + warmup_s
    end = measured_from + seconds
    interval = 1.0 / rate
    next_at = time.perf_counter()
    errors = 0

    def report(err: Any, msg: Any, start: int) -> None:
        nonlocal errors
        if err is not None:
            errors += 1
        elif start >= measured_ns:
            latencies.append(time.perf_counter_ns() - start)

    measured_ns = int(measured_from * 1e9)
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        while next_at <= now:
            start = time.perf_counter_ns()
            producer.produce(topic, value,
                             on_delivery=lambda err, msg, s=start: report(err, msg, s))
            next_at += interval
        producer.poll(max(0.0, next_at - time.perf_counter()))
    producer.flush(30)
    if errors or not latencies:
        raise RuntimeError(f"timed producer: {errors} failed deliveries, {len(latencies)} timed")
    latencies.sort()
    return (latencies[len(latencies) // 2] / 1000,
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] / 1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000,
                        help="records per full-speed produce run (and consumed after it)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rates", default="1000,5000,20000",
                        help="fixed produce rates, records/s, comma-separated")
    parser.add_argument("--rate-seconds", type=float, default=10.0)
    parser.add_argument("--linger-ms", type=float, default=5.0,
                        help="the timed producer's linger.ms (librdkafka's default: 5)")
    parser.add_argument("--interceptors", choices=sorted(CHAINS), default="none")
    parser.add_argument("--warmup-records", type=int, default=200_000)
    parser.add_argument("--unpinned", action="store_true")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    args.rate_list = [int(r) for r in args.rates.split(",") if r]
    pinned = not args.unpinned and can_pin()
    if pinned:
        pin_self_to_load_cpu()
    relay_binary = build_relay()
    need = data_bytes(args.rounds * 3 * args.records + 3 * args.warmup_records, 1024)
    with data_dir(args.data_dir, need) as workdir:
        figures = run(args, workdir, relay_binary, pinned)
    report(figures, args, pinned)
    return 0


def run(args: argparse.Namespace, workdir: Path, relay_binary: Path, pinned: bool
        ) -> dict[str, Figures]:
    relay_port, inner_port = free_port(), free_port()
    extra = [ExtraListener("RELAYED", inner_port, relay_port)]
    figures = {name: Figures() for name in ("direct", *PROXIES)}
    with KafkaCluster(size=1, workdir=workdir, extra_listeners=extra) as cluster:
        relay = subprocess.Popen([str(relay_binary), str(relay_port), str(inner_port)],
                                 stdout=subprocess.PIPE)
        try:
            assert relay.stdout is not None
            if relay.stdout.readline() != b"relay ready\n":
                raise RuntimeError("the relay did not start")
            config = herald_config(cluster.bootstrap, interceptors=CHAINS[args.interceptors],
                                   logging={"level": "warning"})
            with HeraldProcess(config) as herald:
                assert herald.process is not None
                pids = {"relay": relay.pid, "herald": herald.process.pid}
                if pinned:
                    for pid in pids.values():
                        pin(pid, {PROXY_CPU})
                targets = {"direct": cluster.bootstrap, "relay": f"127.0.0.1:{relay_port}",
                           "herald": herald.bootstrap}
                create_topic(cluster.bootstrap, "cost-warmup", args.partitions)
                for bootstrap in targets.values():
                    produce(bootstrap, "cost-warmup", args.warmup_records, 1024, -1)
                names = list(targets)
                for n in range(args.rounds):
                    order = names if n % 2 == 0 else names[::-1]
                    log(f"round {n + 1}/{args.rounds} ({', '.join(order)})")
                    for name in order:
                        pid = pids.get(name)
                        if pinned and pid is not None:
                            verify(pid, {PROXY_CPU})
                        one_round(name, targets[name], cluster.bootstrap, args,
                                  CpuClock(pid) if pid else None, figures[name])
        finally:
            relay.kill()
            relay.wait()
    return figures


def _cpu(clock: CpuClock | None, before: tuple[float, float]) -> float:
    return sum(clock.read()) - sum(before) if clock else 0.0


def one_round(name: str, bootstrap: str, broker: str, args: argparse.Namespace,
              clock: CpuClock | None, into: Figures) -> None:
    topic = f"cost-{name}-{uuid.uuid4().hex[:6]}"
    create_topic(broker, topic, args.partitions)
    mb = args.records * 1024 / 1e6
    before = clock.read() if clock else (0.0, 0.0)
    p = produce(bootstrap, topic, args.records, 1024, -1)
    produce_cpu = _cpu(clock, before)
    before = clock.read() if clock else (0.0, 0.0)
    c = consume(bootstrap, topic, args.records)
    consume_cpu = _cpu(clock, before)
    delete_topics(broker, topic)
    into.produce_rps.append(p.records_per_s)
    into.consume_mbps.append(c.fetch_mb_per_s)
    into.produce_ms_per_mb.append(produce_cpu * 1000 / mb)
    into.consume_ms_per_mb.append(consume_cpu * 1000 / mb)
    line = (f"  {name:6} produce {p.records_per_s:9.0f} rec/s, consume {c.fetch_mb_per_s:6.1f}"
            f" MB/s")
    if clock:
        line += (f"; CPU {produce_cpu * 1000 / mb:.2f} / {consume_cpu * 1000 / mb:.2f} ms/MB")
    log(line)
    for rate in args.rate_list:
        rate_topic = f"cost-{name}-rate-{uuid.uuid4().hex[:6]}"
        create_topic(broker, rate_topic, 1)
        before = clock.read() if clock else (0.0, 0.0)
        started = time.perf_counter()
        p50, p99 = timed_produce(bootstrap, rate_topic, rate, args.rate_seconds, args.linger_ms)
        wall = time.perf_counter() - started
        millicores = _cpu(clock, before) / wall * 1000
        delete_topics(broker, rate_topic)
        into.millicores.setdefault(rate, []).append(millicores)
        into.p50_us.setdefault(rate, []).append(p50)
        into.p99_us.setdefault(rate, []).append(p99)
        cpu = f", {millicores:.1f} millicores" if clock else ""
        log(f"  {name:6} {rate:6}/s: p50 {p50:8.0f} us  p99 {p99:8.0f} us{cpu}")


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(figures: dict[str, Figures], args: argparse.Namespace, pinned: bool) -> None:
    direct = figures["direct"]
    layout = ("pinned: broker and load tools on CPU 0, proxy on CPU 1" if pinned
              else "unpinned: everything on every core")
    print(f"\n{args.records:,} x 1 KiB records, acks=all, Herald interceptors: "
          f"{args.interceptors}; medians of {args.rounds} rounds; {layout}\n")
    print("Proxy CPU per MB of client payload (ms per MB = millicores per MB/s)")
    print(f"  {'':8}{'produce':>10}{'consume':>10}")
    for name in PROXIES:
        f = figures[name]
        print(f"  {name:8}{_med(f.produce_ms_per_mb):10.2f}{_med(f.consume_ms_per_mb):10.2f}")
    print("\nProxy CPU at a steady produce rate (millicores)")
    print("  " + " " * 8 + "".join(f"{str(r) + '/s':>12}" for r in args.rate_list))
    for name in PROXIES:
        f = figures[name]
        print(f"  {name:8}" + "".join(f"{_med(f.millicores[r]):12.1f}" for r in args.rate_list))
    print("\nThroughput against direct, same rounds (median of per-round ratios)")
    for name in PROXIES:
        f = figures[name]
        prod = _med([a / b for a, b in zip(f.produce_rps, direct.produce_rps, strict=True)])
        cons = _med([a / b for a, b in zip(f.consume_mbps, direct.consume_mbps, strict=True)])
        print(f"  {name:8} produce {prod:7.1%}   consume (fetch MB/s) {cons:7.1%}")
    print("\nLatency from produce() to delivery report, microseconds: p50 / p99, and the p99 "
          "added over direct")
    for name in ("direct", *PROXIES):
        f = figures[name]
        cells = []
        for r in args.rate_list:
            added = _med([a - b for a, b in zip(f.p99_us[r], direct.p99_us[r], strict=True)])
            extra = f" ({added:+.0f})" if name != "direct" else ""
            cells.append(f"{_med(f.p50_us[r]):.0f} / {_med(f.p99_us[r]):.0f}{extra}")
        print(f"  {name:8}" + "".join(f"{c:>30}" for c in cells))
    print("  " + " " * 8 + "".join(f"{'at ' + str(r) + '/s':>30}" for r in args.rate_list))


if __name__ == "__main__":
    sys.exit(main())
