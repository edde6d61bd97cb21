"""What a proxy costs per megabyte it moves and at low steady rates: Herald beside a native relay.

    python bench/bench_cost.py [--interceptors none|trace_audit|trace_audit_link|audit_trace_link|
                                               drop_headers[,...]]
                               [--rounds 3] [--client-traces]

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

`--compression lz4` (or zstd, gzip, snappy) has the full-speed producer compress its batches:
the proxy then pays for decompressing and, when it stamps, recompressing them.

`--client-traces` is the APM case: an application that traces its own sends, so every record
carries a valid W3C `traceparent` of its own. ProducerPerformance cannot set headers, so the
full-speed produce is then a librdkafka producer in this process (on the load CPU, like the
Java tools), and the timed producer sets one too; every target gets the same load.

`--interceptors trace_audit_link` is `trace_audit` with `trace_context`'s `link`: what recording
causal links costs. Without `--client-traces` the produce figures should equal `trace_audit`'s
(records without trace context are stamped natively as before); the consume figures are those
of the native Fetch scan, which links need to find traced records (without a fetch chain
Herald forwards Fetch responses unread). The records the benchmark produces through Herald get
a trace context there, so the consume also remembers every record. With `--client-traces`,
every produced record is also looked up in the memory by the engine. The timed producers
reuse 1024 trace contexts, and once a consume has fetched records of them (the same host: one
scope) every later produce finds parents, and the engine links them itself (with `audit`
after `trace_context`, as here, its forgery check keeps Herald's own links: the engine knows
which it wrote). `--interceptors audit_trace_link` puts `audit` first, which should cost the
same.

Several chains, comma-separated (`--interceptors trace_audit,trace_audit_link`), are one Herald
each, named `herald/<chain>`, measured in the same rounds beside the relay: what links cost,
produce and consume, without a second run's drift. After the rounds each Herald's link
counters are printed (`link_remembered` and the rest, from its /metrics): a chain with `link`
whose consume remembered nothing did not measure the memory, and the run says so.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402

from bench.bench_proxy import (  # noqa: E402
    CpuClock,
    ProduceResult,
    consume,
    create_topic,
    data_bytes,
    data_dir,
    delete_topics,
    log,
    produce,
    send,
)
from bench.bench_relay import build_relay  # noqa: E402
from bench.pinning import (  # noqa: E402
    PROXY_CPU,
    PinWatch,
    RunQueueWait,
    can_pin,
    pin,
    pin_self_to_load_cpu,
    verify_tree,
)
from proxy.devtools.embedded_kafka import ExtraListener, KafkaCluster, free_port  # noqa: E402
from tests.support import herald_process  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402

CHAINS: dict[str, dict[str, Any]] = {
    "none": {"produce": [], "fetch": []},
    "trace_audit": {"produce": [{"type": "trace_context"}, {"type": "audit"}], "fetch": []},
    "trace_audit_link": {"produce": [{"type": "trace_context", "link": {}}, {"type": "audit"}],
                         "fetch": []},
    "audit_trace_link": {"produce": [{"type": "audit"}, {"type": "trace_context", "link": {}}],
                         "fetch": []},
    "drop_headers": {"produce": [], "fetch": [{"type": "drop_headers",
                                               "headers": ["prefix:internal."]}]},
}
RELAY = "relay"
FLOORS = ("py-epoll", "py-trio")  # bench/relay_floor.py, with --floors


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
    behind: dict[int, list[bool]] = field(default_factory=dict)
    links: dict[str, float] = field(default_factory=dict)  # a Herald's link counters


@dataclass
class Timed:
    """One fixed-rate window: latency percentiles, and whether the load side kept its rate."""

    p50_us: float
    p99_us: float
    sent: int
    max_backlog: int  # most records produced and not yet acknowledged, at any moment
    kept_up: bool


def client_traceparents(n: int = 1024) -> list[bytes]:
    """Valid version-00 traceparents, sampled, as an instrumented application sets them."""
    rng = random.Random(17)
    return [b"00-%032x-%016x-01" % (rng.getrandbits(128) | 1, rng.getrandbits(64) | 1)
            for _ in range(n)]


def produce_traced(bootstrap: str, topic: str, records: int, size: int) -> ProduceResult:
    """Produce `records` at full speed from a librdkafka producer that gives every record a
    traceparent of its own; acks=all and the Java producer's defaults, as ProducerPerformance
    runs: 16 KiB batches, linger.ms 5, at most 5 requests in flight. (librdkafka's own 1 MB
    batches make requests of several MB, which Herald stamps in Python; and with its default
    of a million requests in flight a full-speed producer never lets every request be
    answered, which is when Herald gives a session it took back to the engine.)"""
    errors = 0

    def report(err: Any, _msg: Any) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": False, "queue.buffering.max.messages": 200_000,
                         "batch.size": 16384, "linger.ms": 5,
                         "max.in.flight.requests.per.connection": 5, "on_delivery": report})
    value = b"x" * size
    contexts = client_traceparents()
    started = time.perf_counter()
    for i in range(records):
        send(producer, topic, value, [("traceparent", contexts[i % len(contexts)])], 0.001)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(120) or errors:
        raise RuntimeError(f"traced producer: {errors} failed deliveries, {len(producer)} left")
    seconds = time.perf_counter() - started
    return ProduceResult(records, records / seconds, records * size / 1e6 / seconds,
                         float("nan"), float("nan"), float("nan"))


def timed_produce(bootstrap: str, topic: str, rate: int, seconds: float, linger_ms: float,
                  warmup_s: float = 2.0, traced: bool = False) -> Timed:
    """Produce `rate` records/s for `seconds` after a warm-up; p50 and p99 of produce() to
    delivery report, in microseconds (librdkafka stamps each record when produce() queues it
    and `latency()` reads its microsecond clock when the report is served).

    Records go out in 1 ms ticks and the loop sleeps in poll() between them: poll() takes
    whole milliseconds (a shorter timeout is 0, which made the loop spin and take the load
    CPU from the broker it measures). poll() returns as soon as a report is served, so reports
    are timed as they arrive, not at the next tick. A window where the producer fell behind
    (more than a quarter second of records unacknowledged at some moment) is flagged: its
    latency is queueing in a load generator that could not keep the rate, not the proxy.
    """
    # linger.ms 0 would make every record a request of its own: a load no real client puts
    # on a broker, which on its one core then queues them for seconds.
    latencies: list[float] = []
    errors = 0
    measuring = False

    def report(err: Any, msg: Any) -> None:
        nonlocal errors
        if err is not None:
            errors += 1
        elif measuring:
            latencies.append(msg.latency())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "linger.ms": linger_ms, "enable.idempotence": False,
                         "on_delivery": report})
    value = b"x" * 1024
    contexts = client_traceparents() if traced else None
    tick = 0.001
    started = time.perf_counter()
    measured_from = started + warmup_s
    end = measured_from + seconds
    due = 0.0  # records owed so far, fractional
    sent = max_backlog = 0
    next_tick = started
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if now >= next_tick:
            if not measuring and now >= measured_from:
                measuring = True
                due, sent, started = 0.0, 0, now
            due = (now - started) * rate
            while sent < due:
                if contexts is None:
                    producer.produce(topic, value)
                else:
                    producer.produce(topic, value,
                                     headers=[("traceparent", contexts[sent % len(contexts)])])
                sent += 1
            if measuring:
                max_backlog = max(max_backlog, len(producer))
            next_tick = now + tick
        producer.poll(max(tick, next_tick - time.perf_counter()))
    measuring_sent = sent
    producer.flush(30)
    if errors or not latencies:
        raise RuntimeError(f"timed producer: {errors} failed deliveries, {len(latencies)} timed")
    latencies.sort()
    return Timed(p50_us=latencies[len(latencies) // 2] * 1e6,
                 p99_us=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e6,
                 sent=measuring_sent, max_backlog=max_backlog,
                 kept_up=max_backlog <= rate * 0.25)


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
    parser.add_argument("--attempts", type=int, default=3,
                        help="fixed-rate windows tried per rate and round until the producer "
                             "keeps its rate")
    parser.add_argument("--interceptors", type=_chains, default=["none"],
                        help="Herald's chains, comma-separated: one Herald each, in the same "
                             f"rounds ({', '.join(sorted(CHAINS))})")
    parser.add_argument("--warmup-records", type=int, default=200_000)
    parser.add_argument("--unpinned", action="store_true")
    parser.add_argument("--baseline", metavar="CHECKOUT", default=None,
                        help="also measure Herald run from the sources in this folder (another "
                             "git worktree, say), as the target 'baseline', in the same rounds")
    parser.add_argument("--floors", action="store_true",
                        help="also measure the cheapest Python relays (bench/relay_floor.py: "
                             "on raw epoll, and on trio), which parse nothing: what Herald's "
                             "runtime costs before it does any work")
    parser.add_argument("--native", choices=("off", "auto"), default="auto",
                        help="Herald's performance.native_relay (default auto, Herald's own "
                             "default; the baseline keeps its own default)")
    parser.add_argument("--client-traces", action="store_true",
                        help="every produced record carries its own valid traceparent (an "
                             "application that traces its sends); the full-speed produce is "
                             "then a librdkafka producer in this process")
    parser.add_argument("--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"),
                        default="none",
                        help="the full-speed producer's compression.type (ProducerPerformance; "
                             "CPU per MB is still per MB of uncompressed payload)")
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


def _chains(text: str) -> list[str]:
    chains = [c for c in text.split(",") if c]
    unknown = [c for c in chains if c not in CHAINS]
    if not chains or unknown or len(set(chains)) != len(chains):
        raise argparse.ArgumentTypeError(
            f"one or more of {', '.join(sorted(CHAINS))}, comma-separated, each once")
    return chains


def heralds(args: argparse.Namespace) -> dict[str, str]:
    """Each Herald target's name and its chain: `herald` alone, `herald/<chain>` for several."""
    if len(args.interceptors) == 1:
        return {"herald": args.interceptors[0]}
    return {f"herald/{chain}": chain for chain in args.interceptors}


def run(args: argparse.Namespace, workdir: Path, relay_binary: Path, pinned: bool
        ) -> dict[str, Figures]:
    relays = ["relay", *(FLOORS if args.floors else ())]
    ports = {name: (free_port(), free_port()) for name in relays}  # listening, broker's
    extra = [ExtraListener(f"RELAYED{n}", inner, outer)
             for n, (outer, inner) in enumerate(ports.values())]
    figures = {name: Figures() for name in ("direct", *proxies(args))}
    with KafkaCluster(size=1, workdir=workdir, extra_listeners=extra) as cluster, \
            ExitStack() as more:
        pids: dict[str, int] = {}
        targets = {"direct": cluster.bootstrap}
        for name, (outer, inner) in ports.items():
            pids[name] = more.enter_context(relay_process(name, relay_binary, outer, inner))
            targets[name] = f"127.0.0.1:{outer}"
        processes: dict[str, HeraldProcess] = {}
        for name, chain in heralds(args).items():
            # each on ports of its own
            config = herald_config(cluster.bootstrap, interceptors=CHAINS[chain],
                                   logging={"level": "warning"},
                                   admin={"bind": f"127.0.0.1:{free_port()}"})
            config["performance"] = {"native_relay": args.native}
            herald = processes[name] = more.enter_context(HeraldProcess(config))
            assert herald.process is not None
            pids[name] = herald.process.pid
            targets[name] = herald.bootstrap
        # the baseline keeps its defaults, with the first chain
        baseline_config = herald_config(cluster.bootstrap,
                                        interceptors=CHAINS[args.interceptors[0]],
                                        logging={"level": "warning"})
        if args.baseline:
            base = more.enter_context(herald_from(args.baseline, baseline_config))
            assert base.process is not None
            pids["baseline"] = base.process.pid
            targets["baseline"] = base.bootstrap
        if pinned:
            for pid in pids.values():
                pin(pid, {PROXY_CPU})
            log(f"pinning checked on {verify_tree(pids.values())} threads")
        load_pids = [os.getpid(), *(node.process.pid for node in cluster.nodes
                                    if node.process is not None)]
        create_topic(cluster.bootstrap, "cost-warmup", args.partitions)
        for bootstrap in targets.values():
            produce(bootstrap, "cost-warmup", args.warmup_records, 1024, -1,
                    compression=args.compression)
        names = list(targets)
        for n in range(args.rounds):
            order = names if n % 2 == 0 else names[::-1]
            log(f"round {n + 1}/{args.rounds} ({', '.join(order)}); "
                f"load average {_loadavg()}")
            for name in order:
                pid = pids.get(name)
                with PinWatch(pids.values()) if pinned else nullcontext():
                    one_round(name, targets[name], cluster.bootstrap, args,
                              CpuClock(pid) if pid else None, figures[name],
                              load_pids, pid)
        for name, herald in processes.items():
            figures[name].links = _link_counters(herald)
    return figures


LINK_EVENT = re.compile(r'^herald_interceptor_events_total\{.*event="(link_[a-z_]+)".*\} (\S+)$')


def _link_counters(herald: HeraldProcess) -> dict[str, float]:
    """The link events Herald's members counted (remembered, evicted, expired on the fetch
    path; made, parents and missed on the produce path), summed over members."""
    with urllib.request.urlopen(f"{herald.admin_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        hit = LINK_EVENT.match(line)
        if hit:
            counts[hit.group(1)] = counts.get(hit.group(1), 0.0) + float(hit.group(2))
    return counts


@contextmanager
def relay_process(name: str, binary: Path, port: int, broker_port: int) -> Iterator[int]:
    """A relay from `port` to the broker's listener at `broker_port`; yields its pid."""
    if name == "relay":
        command = [str(binary), str(port), str(broker_port)]
    else:
        loop = name.removeprefix("py-")
        command = [sys.executable, str(Path(__file__).with_name("relay_floor.py")),
                   "--loop", loop, str(port), str(broker_port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        if process.stdout.readline() != b"relay ready\n":
            raise RuntimeError(f"{name} did not start")
        yield process.pid
    finally:
        process.kill()
        process.wait()


def proxies(args: argparse.Namespace) -> tuple[str, ...]:
    return (RELAY, *heralds(args), *(FLOORS if args.floors else ()),
            *(("baseline",) if args.baseline else ()))


@contextmanager
def herald_from(tree: str, config: dict[str, Any]) -> Iterator[HeraldProcess]:
    """A Herald run from the sources of another checkout (`python -m herald` in that folder,
    or `python -m proxy` in one from before that package, with this interpreter), to compare
    two versions in the same run."""
    saved = herald_process.REPO
    herald_process.REPO = Path(tree).resolve()
    try:
        process = HeraldProcess(config).start()
    finally:
        herald_process.REPO = saved
    try:
        yield process
    finally:
        process.stop()


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _cpu(clock: CpuClock | None, before: tuple[float, float]) -> float:
    return sum(clock.read()) - sum(before) if clock else 0.0


def one_round(name: str, bootstrap: str, broker: str, args: argparse.Namespace,
              clock: CpuClock | None, into: Figures, load_pids: list[int],
              proxy_pid: int | None) -> None:
    label = name.replace("/", "-")  # a topic name's characters
    topic = f"cost-{label}-{uuid.uuid4().hex[:6]}"
    create_topic(broker, topic, args.partitions)
    mb = args.records * 1024 / 1e6
    before = clock.read() if clock else (0.0, 0.0)
    if args.client_traces:
        p = produce_traced(bootstrap, topic, args.records, 1024)
    else:
        p = produce(bootstrap, topic, args.records, 1024, -1, compression=args.compression)
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
        for attempt in range(1, args.attempts + 1):
            rate_topic = f"cost-{label}-rate-{uuid.uuid4().hex[:6]}"
            create_topic(broker, rate_topic, 1)
            before = clock.read() if clock else (0.0, 0.0)
            load_wait = RunQueueWait(load_pids)
            proxy_wait = RunQueueWait([proxy_pid] if proxy_pid else [])
            started = time.perf_counter()
            t = timed_produce(bootstrap, rate_topic, rate, args.rate_seconds, args.linger_ms,
                              traced=args.client_traces)
            wall = time.perf_counter() - started
            millicores = _cpu(clock, before) / wall * 1000
            waits = (f"CPU wait: load side {load_wait.seconds() / wall * 1000:.0f} ms/s, "
                     f"proxy {proxy_wait.seconds() / wall * 1000:.0f} ms/s")
            delete_topics(broker, rate_topic)
            cpu = f", {millicores:.1f} millicores" if clock else ""
            flag = "" if t.kept_up else f"  FELL BEHIND (backlog {t.max_backlog})"
            log(f"  {name:6} {rate:6}/s: p50 {t.p50_us:8.0f} us  p99 {t.p99_us:8.0f} us{cpu}; "
                f"{waits}{flag}")
            if t.kept_up or attempt == args.attempts:
                break
        into.millicores.setdefault(rate, []).append(millicores)
        into.p50_us.setdefault(rate, []).append(t.p50_us)
        into.p99_us.setdefault(rate, []).append(t.p99_us)
        into.behind.setdefault(rate, []).append(not t.kept_up)


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(figures: dict[str, Figures], args: argparse.Namespace, pinned: bool) -> None:
    direct = figures["direct"]
    layout = ("pinned: broker and load tools on CPU 0, proxy on CPU 1" if pinned
              else "unpinned: everything on every core")
    traces = ("; every record with its own traceparent (librdkafka at full speed)"
              if args.client_traces else "")
    print(f"\n{args.records:,} x 1 KiB records, acks=all, Herald interceptors: "
          f"{','.join(args.interceptors)}{traces}; medians of {args.rounds} rounds; {layout}; "
          f"load average at the end {_loadavg()}\n")
    w = max(8, *(len(n) + 1 for n in proxies(args)))
    print("Proxy CPU per MB of client payload (ms per MB = millicores per MB/s)")
    print(f"  {'':{w}}{'produce':>10}{'consume':>10}")
    for name in proxies(args):
        f = figures[name]
        print(f"  {name:{w}}{_med(f.produce_ms_per_mb):10.2f}{_med(f.consume_ms_per_mb):10.2f}")
    _report_links(figures, args)
    print("\nProxy CPU at a steady produce rate (millicores)")
    print("  " + " " * w + "".join(f"{str(r) + '/s':>12}" for r in args.rate_list))
    for name in proxies(args):
        f = figures[name]
        print(f"  {name:{w}}" + "".join(f"{_med(f.millicores[r]):12.1f}" for r in args.rate_list))
    print("\nThroughput against direct, same rounds (median of per-round ratios)")
    for name in proxies(args):
        f = figures[name]
        prod = _med([a / b for a, b in zip(f.produce_rps, direct.produce_rps, strict=True)])
        cons = _med([a / b for a, b in zip(f.consume_mbps, direct.consume_mbps, strict=True)])
        print(f"  {name:{w}} produce {prod:7.1%}   consume (fetch MB/s) {cons:7.1%}")
    print(f"\nLatency from produce() to delivery report (linger.ms {args.linger_ms:g}), "
          "microseconds: p50 / p99, and the p99 added over direct (median of per-round "
          "differences); * = a round where the producer fell behind even after "
          f"{args.attempts} attempts")
    for name in ("direct", *proxies(args)):
        f = figures[name]
        cells = []
        for r in args.rate_list:
            added = _med([a - b for a, b in zip(f.p99_us[r], direct.p99_us[r], strict=True)])
            extra = f" ({added:+.0f})" if name != "direct" else ""
            star = "*" if any(f.behind[r]) else ""
            cells.append(f"{_med(f.p50_us[r]):.0f} / {_med(f.p99_us[r]):.0f}{extra}{star}")
        print(f"  {name:{w}}" + "".join(f"{c:>30}" for c in cells))
    print("  " + " " * w + "".join(f"{'at ' + str(r) + '/s':>30}" for r in args.rate_list))


def _report_links(figures: dict[str, Figures], args: argparse.Namespace) -> None:
    """Each Herald's link counters and, for a chain run beside the same chain with `link`
    (`trace_audit` and `trace_audit_link`), what links cost as a ratio."""
    names = heralds(args)
    print()
    for name, chain in names.items():
        if any("link" in member for member in CHAINS[chain]["produce"]):
            links = figures[name].links
            counted = ", ".join(f"{k} {v:.0f}" for k, v in sorted(links.items())) or "none"
            unused = "" if links.get("link_remembered", 0) > 0 else (
                "  NOT EXERCISED: the consume remembered no traced record")
            print(f"  {name} link counters: {counted}{unused}")
    for without, chain in names.items():
        with_links = next((n for n, c in names.items() if c == chain + "_link"), None)
        if with_links is None:
            continue
        f, g = figures[without], figures[with_links]
        print(f"  links cost (same rounds, {with_links} over {without}): produce "
              f"{_med(g.produce_ms_per_mb) / _med(f.produce_ms_per_mb):.2f}x, consume "
              f"{_med(g.consume_ms_per_mb) / _med(f.consume_ms_per_mb):.2f}x")


if __name__ == "__main__":
    sys.exit(main())
