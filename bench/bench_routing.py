"""What routing costs: produce through Herald with half the records moved to a second cluster,
against the same Herald with no rules.

    python bench/bench_routing.py [--records 200000] [--record-size 1024] [--rounds 3]
                                  [--rate 2000] [--seconds 10] [--unpinned] [--control]

It starts two one-broker clusters (the primary and the destination) and three Heralds in
front of the primary: one with no routing rules, and two with a rule that moves records whose
`region` header is `eu` to the second cluster, one with the routing journal (the default,
`auto`) and one with `journal: off`. Every record carries a `region` header and every other
one is `eu`, so the routed Heralds move 50% of them.

`--control` adds a fourth Herald, a second one with `journal: off`: two identical Heralds
differ by what the machine does to each (placement, caches, the producer's batching), and
that difference is the noise the journal's share must stand out of.

Pinned (the default where the machine has CPUs 0 and 1): this script, the brokers and the
producer on CPU 0, the Heralds on CPU 1, checked thread by thread during every run, so a
Herald's CPU time is its own and the brokers' work never lands on it.

The load is a librdkafka producer in this process (idempotent, acks=all: the Java client's
defaults), since Kafka's ProducerPerformance cannot set headers. Per round and target:

* full speed: `--records` records as fast as they go; records/s and Herald's CPU seconds
  (user + system, from /proc/<pid>/stat) per MB of record values;
* fixed rate: `--rate` records/s for `--seconds`; the p50/p99 from `produce()` to the
  delivery report, i.e. what the producing application waits.

The two targets alternate and swap order every round; the table shows medians over rounds.
The figures depend on the machine: on a shared one, say so beside them.

    python bench/bench_routing.py --filter-only [--rounds 8]

measures Herald's own share without brokers or network, so that it stays comparable on a busy
machine: the routing filter alone plans batches of 500 records (`--record-size` each) and
hands the moved ones to a librdkafka producer with no cluster to reach (they are queued, then
purged). It prints the CPU milliseconds per MB of record values, the best of `--rounds`, for
three layouts: `split` (as in the full-speed run: one partition all moved, the other all
kept), `mixed` (every other record of every batch moved, so the kept ones are re-encoded) and
`none moved` (what a topic with rules costs when none matches); then `mixed` again from an
idempotent producer (sequences rewritten), without and with the routing journal (one line
written per batch, in a temporary folder).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack, nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402

from bench.bench_proxy import CpuClock, create_topic, data_dir, log, median  # noqa: E402
from bench.pinning import (  # noqa: E402
    PROXY_CPU,
    PinWatch,
    can_pin,
    pin,
    pin_self_to_load_cpu,
    verify_tree,
)
from proxy.devtools.embedded_kafka import KafkaCluster  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402

ROUTED, UNJOURNALED = "50% routed", "50% routed, journal off"
CONTROL = "50% routed, journal off again"
RULES = [{"name": "eu", "match": {"headers": {"header": "region", "equals": "eu"}},
          "cluster": "b"}]


def producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                     "acks": "all", "linger.ms": 5, "queue.buffering.max.messages": 200000})


def full_speed(bootstrap: str, topic: str, records: int, size: int) -> float:
    """Records per second for `records` records, from the first produce() to the last ack."""
    p = producer(bootstrap)
    value = b"x" * size
    regions = ([("region", b"eu")], [("region", b"us")])
    failed = []
    report = lambda err, _msg: failed.append(err) if err else None  # noqa: E731
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=i % 2, headers=regions[i % 2],
                          on_delivery=report)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(300):
        raise RuntimeError("records left undelivered")
    seconds = time.perf_counter() - start
    if failed:
        raise RuntimeError(f"{len(failed)} records failed: {failed[0]}")
    return records / seconds


def fixed_rate(bootstrap: str, topic: str, rate: int, seconds: float, size: int
               ) -> tuple[float, float]:
    """(p50, p99) in ms from produce() to the delivery report, at `rate` records/s; the first
    second is warm-up and not counted."""
    p = producer(bootstrap)
    value = b"y" * size
    latencies: list[float] = []
    warm_until = time.perf_counter() + 1.0

    def report_at(sent: float) -> object:
        def report(err: object, _msg: object) -> None:
            if err is None and sent >= warm_until:
                latencies.append(time.perf_counter() - sent)
        return report

    total = int(rate * (seconds + 1.0))
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            p.poll(min(due - now, 0.001))
        region = b"eu" if i % 2 else b"us"
        p.produce(topic, value, partition=i % 2, headers=[("region", region)],
                  on_delivery=report_at(now))
        p.poll(0)
    p.flush(60)
    q = statistics.quantiles(latencies, n=100)
    return q[49] * 1000, q[98] * 1000


def filter_cost(size: int, rounds: int) -> dict[str, float]:
    """CPU seconds per MB of record values of the routing filter alone, best of `rounds`, per
    layout (see the module docstring)."""
    import trio
    from prometheus_client import CollectorRegistry

    from protocol.records import Record, build_batch
    from proxy.config.proxy_yaml import parse_config
    from proxy.routing.destinations import Destination
    from proxy.routing.produce_filter import RoutingFilter
    from proxy.routing.rules import RoutingTable
    from proxy.routing.stats import RoutingStats
    from proxy.upstream.topic_ids import TopicIds

    nowhere = "127.0.0.1:1"  # nothing listens: records stay queued until purged
    config = parse_config({"upstream": {"bootstrap": nowhere},
                           "listen": {"bootstrap": "127.0.0.1:0"},
                           "clusters": {"b": {"bootstrap": nowhere}},
                           "routing": {"rules": RULES}})
    count, repeat = 500, 20
    value = b"x" * size

    def batch(eu: object, producer_id: int = -1, base_sequence: int = -1) -> bytes:
        return build_batch([Record(b"k%d" % i, value, [("region", b"eu" if eu(i) else b"us")])
                            for i in range(count)], producer_id=producer_id,
                           producer_epoch=0 if producer_id >= 0 else -1,
                           base_sequence=base_sequence)

    def idempotent(producer_id: int) -> list[list[tuple[int, bytes]]]:
        """`repeat` rounds of the mixed layout, each batch next in its partition's sequence."""
        return [[(0, batch(lambda i: i % 2, producer_id, r * count)),
                 (1, batch(lambda i: not i % 2, producer_id, r * count))]
                for r in range(repeat)]

    layouts = {
        "split": [(0, batch(lambda i: True)), (1, batch(lambda i: False))],
        "mixed": [(0, batch(lambda i: i % 2)), (1, batch(lambda i: not i % 2))],
        "none moved": [(0, batch(lambda i: False)), (1, batch(lambda i: False))],
    }
    mb = repeat * 2 * count * size / 1e6
    best: dict[str, float] = {}

    async def measure() -> None:
        dest = Destination("b", config.clusters["b"], 30.0)
        dest.settings.update({"queue.buffering.max.messages": 2_000_000,
                              "queue.buffering.max.kbytes": 4_000_000, "log_level": 0})
        dest.start()
        folder = Path(tempfile.mkdtemp(prefix="herald-bench-journal-"))
        filters = {journal: RoutingFilter(
            RoutingTable(config.routing), TopicIds(), {"b": dest},
            RoutingStats(CollectorRegistry()), journal=folder / "j" if journal else None,
            cluster_id=lambda: "bench") for journal in (False, True)}
        routing = filters[False]
        candidates = routing.table.candidates("t", None)

        async def timed(name: str, routing: RoutingFilter,
                        rounds_of: list[list[tuple[int, bytes]]]) -> None:
            routing.remembered.open("bench")
            start = time.process_time()
            for batches in rounds_of:
                for partition, raw in batches:
                    await routing._partition("t", partition, raw, candidates, 1)
            cpu = time.process_time() - start
            best[name] = min(best.get(name, cpu / mb), cpu / mb)
            dest._producer.purge()
            await trio.sleep(0.2)  # the purged records' reports are served meanwhile

        try:
            for n in range(rounds):
                for name, batches in layouts.items():
                    await timed(name, routing, [batches] * repeat)
                for journal, name in ((False, "mixed, idempotent"),
                                      (True, "mixed, idempotent, journal")):
                    await timed(name, filters[journal], idempotent(2 * n + journal))
        finally:
            await dest.close(flush_s=0)
            filters[True].remembered.close()
            shutil.rmtree(folder, ignore_errors=True)

    trio.run(measure)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--filter-only", action="store_true",
                        help="the routing filter alone, no brokers (see above)")
    parser.add_argument("--unpinned", action="store_true",
                        help="leave every process on every CPU")
    parser.add_argument("--control", action="store_true",
                        help="a second Herald with journal: off, to show the noise")
    args = parser.parse_args(argv)
    if args.filter_only:
        for name, cost in filter_cost(args.record_size, args.rounds).items():
            print(f"routing filter, {name}: {cost * 1000:.2f} ms CPU per MB "
                  f"(best of {args.rounds}; load average {os.getloadavg()[0]:.1f})")
        return 0
    pinned = not args.unpinned and can_pin()
    if pinned:
        pin_self_to_load_cpu()
    need = 6 * args.rounds * args.records * (args.record_size + 256) + (512 << 20)
    with data_dir(None, need) as folder:
        a_dir, b_dir = folder / "a", folder / "b"
        a_dir.mkdir()
        b_dir.mkdir()
        with KafkaCluster(size=1, workdir=a_dir) as a, KafkaCluster(size=1, workdir=b_dir) as b:
            clusters = {"b": {"bootstrap": b.bootstrap}}
            common = {"logging": {"level": "warning"}, "clusters": clusters}
            configs = {
                "no rules": herald_config(a.bootstrap, **common),
                ROUTED: herald_config(a.bootstrap, **common, routing={"rules": RULES}),
            }
            for name in (UNJOURNALED, CONTROL) if args.control else (UNJOURNALED,):
                configs[name] = herald_config(a.bootstrap, **common,  # ports of its own
                                              routing={"rules": RULES, "journal": "off"})
            with ExitStack() as stack:
                targets = {name: stack.enter_context(HeraldProcess(config))
                           for name, config in configs.items()}
                pids = [h.process.pid for h in targets.values() if h.process is not None]
                if pinned:
                    for pid in pids:
                        pin(pid, {PROXY_CPU})
                    log(f"pinning checked on {verify_tree(pids)} threads")
                rows = run(args, a.bootstrap, b.bootstrap, targets, pids if pinned else None)
    report(rows, args, pinned)
    return 0


def run(args: argparse.Namespace, a: str, b: str, targets: dict[str, HeraldProcess],
        pinned_pids: list[int] | None) -> dict[str, dict[str, list[float]]]:
    """`pinned_pids`: the Heralds' processes, checked on their CPU during every run (None:
    unpinned)."""
    rows = {name: {"rate": [], "cpu_per_mb": [], "p50": [], "p99": []} for name in targets}
    mb = args.records * args.record_size / 1e6
    log("warm-up (not measured)")
    for herald in targets.values():
        topic = f"warm-{uuid.uuid4().hex[:6]}"
        create_topic(a, topic, 2)
        create_topic(b, topic, 2)
        full_speed(herald.bootstrap, topic, min(args.records, 50_000), args.record_size)
    for n in range(args.rounds):
        order = list(targets) if n % 2 == 0 else list(reversed(targets))
        log(f"round {n + 1}/{args.rounds} ({' then '.join(order)})")
        for name in order:
            herald = targets[name]
            topic = f"bench-{uuid.uuid4().hex[:6]}"
            create_topic(a, topic, 2)
            create_topic(b, topic, 2)
            clock = CpuClock(herald.process.pid)
            with PinWatch(pinned_pids) if pinned_pids else nullcontext():
                before = sum(clock.read())
                rate = full_speed(herald.bootstrap, topic, args.records, args.record_size)
                cpu = sum(clock.read()) - before
                p50, p99 = fixed_rate(herald.bootstrap, topic, args.rate, args.seconds,
                                      args.record_size)
            rows[name]["rate"].append(rate)
            rows[name]["cpu_per_mb"].append(cpu / mb)
            rows[name]["p50"].append(p50)
            rows[name]["p99"].append(p99)
            log(f"  {name}: {rate:,.0f} records/s, Herald {cpu / mb * 1000:.1f} ms CPU/MB, "
                f"p50 {p50:.2f} ms, p99 {p99:.2f} ms at {args.rate}/s")
    return rows


def report(rows: dict[str, dict[str, list[float]]], args: argparse.Namespace,
           pinned: bool) -> None:
    layout = "pinned: load on CPU 0, Heralds on CPU 1" if pinned else "unpinned"
    print(f"\n{args.records} x {args.record_size} B records, {args.rounds} rounds, medians; "
          f"latency at {args.rate} records/s; {layout}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'target':<30} {'records/s':>11} {'CPU ms/MB':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for name, r in rows.items():
        print(f"{name:<30} {median(r['rate']):>11,.0f} {median(r['cpu_per_mb']) * 1000:>10.1f} "
              f"{median(r['p50']):>8.2f} {median(r['p99']):>8.2f}")
    base, routed, bare = rows["no rules"], rows[ROUTED], rows[UNJOURNALED]
    print(f"\nrouted / no rules throughput: {median(routed['rate']) / median(base['rate']):.1%}; "
          f"added p99: {median(routed['p99']) - median(base['p99']):+.2f} ms")
    cpu = (median(routed["cpu_per_mb"]) - median(bare["cpu_per_mb"])) * 1000
    print(f"the journal's share: {cpu:+.2f} ms CPU/MB, "
          f"p99 {median(routed['p99']) - median(bare['p99']):+.2f} ms")
    if CONTROL in rows:
        again = rows[CONTROL]
        noise = (median(again["cpu_per_mb"]) - median(bare["cpu_per_mb"])) * 1000
        print(f"two Heralds alike (the noise): {noise:+.2f} ms CPU/MB, "
              f"p99 {median(again['p99']) - median(bare['p99']):+.2f} ms")


if __name__ == "__main__":
    sys.exit(main())
