"""End-to-end cost of Herald: Kafka's own perf tools against the broker directly and through Herald.

    python bench/bench_proxy.py [--records 1000000] [--record-size 1024] [--rounds 5]
                                [--rate 5000] [--interceptors none|trace_audit]

It starts its own one-broker cluster and one Herald in front of it, then per round runs, for
both targets:

* ProducerPerformance at full speed (acks=all, --throughput -1): maximum produce throughput.
* ProducerPerformance at a fixed rate (--rate): latency. At saturation the latency is the
  producer's own queueing and says nothing about the proxy; at a rate well below the maximum it
  is one round trip plus what the proxy adds.
* ConsumerPerformance reading what the full-speed run wrote: fetch throughput.

Direct and Herald runs alternate, and the order flips every round, so slow drift of the machine
(page cache, JIT of the broker, other load) hits both sides alike. Every run writes a topic of
its own so that neither side reads or appends to the other's data. The table shows each
metric's median over the rounds; the throughput targets are judged on the median of the
per-round Herald/direct ratios, since the two runs of a round are back to back.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.devtools.embedded_kafka import KafkaCluster  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402
from tests.support.java_tools import (  # noqa: E402
    CONSUMER_PERF,
    PRODUCER_PERF,
    TOPIC_COMMAND,
    command_properties,
    run_tool,
)

# Targets the proxy is held to: a plain proxy >= 90% of direct throughput; with trace_context
# and audit stamping every record, >= 80% of direct produce throughput. (The consume ratio of
# an interceptor run compares enriched records with bare ones, so it is shown, not judged.)
MIN_THROUGHPUT_RATIO = {"none": 0.90, "trace_audit": 0.80}
MAX_ADDED_P99_MS = 2.0

INTERCEPTOR_SETS: dict[str, dict[str, Any]] = {
    "none": {"produce": [], "fetch": []},
    "trace_audit": {"produce": [{"type": "trace_context"}, {"type": "audit"}], "fetch": []},
}

_PRODUCE_SUMMARY = re.compile(
    r"(?P<records>\d+) (?:steady state )?records sent, (?P<rps>[\d.]+) records/sec "
    r"\((?P<mbps>[\d.]+) MB/sec\), (?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>[\d.]+) ms 50th, (?P<p95>[\d.]+) ms 95th, (?P<p99>[\d.]+) ms 99th, "
    r"(?P<p999>[\d.]+) ms 99.9th"
)


@dataclass
class ProduceResult:
    records: int
    records_per_s: float
    mb_per_s: float
    avg_ms: float
    p50_ms: float
    p99_ms: float


@dataclass
class ConsumeResult:
    records: int
    records_per_s: float
    mb_per_s: float
    fetch_records_per_s: float
    fetch_mb_per_s: float


def parse_producer_perf(output: str) -> ProduceResult:
    """The last summary line: the steady-state one when warm-up records were asked for.

    Progress lines carry no percentiles, so the regex only matches summaries.
    """
    matches = list(_PRODUCE_SUMMARY.finditer(output))
    if not matches:
        raise RuntimeError(f"no ProducerPerformance summary in:\n{output[-2000:]}")
    m = matches[-1]
    return ProduceResult(
        records=int(m["records"]), records_per_s=float(m["rps"]), mb_per_s=float(m["mbps"]),
        avg_ms=float(m["avg"]), p50_ms=float(m["p50"]), p99_ms=float(m["p99"]),
    )


def perf_stats(output: str, tool: str) -> dict[str, str]:
    """The CSV-like stats of Kafka's consumer perf tools (ConsumerPerformance,
    ShareConsumerPerformance): a `start.time, end.time, ...` header line and one line of
    values, by column name."""
    lines = [line for line in output.splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        if line.startswith("start.time"):
            return dict(zip(line.split(", "), lines[i + 1].split(", "), strict=True))
    raise RuntimeError(f"no {tool} stats in:\n{output[-2000:]}")


def parse_consumer_perf(output: str) -> ConsumeResult:
    """ConsumerPerformance's stats. `MB.sec`/`nMsg.sec` include the consumer group join;
    `fetch.*` exclude it, which is the part that scales with data."""
    stats = perf_stats(output, "ConsumerPerformance")
    return ConsumeResult(
        records=int(stats["data.consumed.in.nMsg"]),
        records_per_s=float(stats["nMsg.sec"]),
        mb_per_s=float(stats["MB.sec"]),
        fetch_records_per_s=float(stats["fetch.nMsg.sec"]),
        fetch_mb_per_s=float(stats["fetch.MB.sec"]),
    )


def create_topic(broker: str, topic: str, partitions: int) -> None:
    """Create up front, against the broker, so no run pays for auto-creation retries."""
    run_tool(
        TOPIC_COMMAND, "--bootstrap-server", broker, "--create", "--topic", topic,
        "--partitions", str(partitions), "--replication-factor", "1",
    )


def delete_topics(broker: str, pattern: str) -> None:
    """Free the broker's data of a finished run (on tmpfs it is memory)."""
    run_tool(TOPIC_COMMAND, "--bootstrap-server", broker, "--delete", "--topic", pattern)


@contextmanager
def data_dir(requested: str | None, need_bytes: int) -> Iterator[Path]:
    """A fresh folder for the broker's log, removed afterwards: by default in memory
    (/dev/shm), not on disk.

    A run writes several GB. On disk, the kernel starts writing dirty pages back partway
    through, and that writeback competes with whichever target runs at the time: a cost of the
    machine, not of the proxy. Kafka does not fsync its writes by default, so the broker's own
    work is the same on either.
    """
    parent = requested
    if parent is None:
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            free = shutil.disk_usage(shm).free
            if free >= need_bytes:
                parent = str(shm)
            else:
                log(f"/dev/shm has {free >> 20} MiB free, {need_bytes >> 20} MiB needed: "
                    "the broker's log goes to disk (expect noisier figures)")
    folder = Path(tempfile.mkdtemp(prefix="herald-bench-", dir=parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def data_bytes(records: int, record_size: int) -> int:
    """A generous bound on the log a benchmark holds at once, for `records` written records
    (topics are deleted after each run, the warm-up topic stays)."""
    return 2 * records * (record_size + 512) + (256 << 20)


def produce(
    bootstrap: str, topic: str, records: int, size: int, rate: int, warmup: int = 0,
    compression: str = "none",
) -> ProduceResult:
    args = [
        "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
        "--record-size", str(size), "--throughput", str(rate),
        *command_properties(PRODUCER_PERF, {"acks": "all", "compression.type": compression}),
    ]
    if warmup:
        args += ["--warmup-records", str(warmup)]
    result = run_tool(PRODUCER_PERF, *args, timeout=1800)
    if "Exception" in result.stderr:
        # Failed sends are left out of the summary; the count check below catches lost records.
        log(f"  ProducerPerformance printed errors:\n{result.stderr[-1500:]}")
    parsed = parse_producer_perf(result.stdout)
    expected = records - warmup
    if parsed.records != expected:
        raise RuntimeError(f"ProducerPerformance sent {parsed.records} of {expected} records")
    return parsed


def send(producer: Any, topic: str, value: bytes, headers: list, wait_s: float,
         partition: int | None = None) -> None:
    """Produce one record with librdkafka (to `partition`, if given), polling while its local
    queue is full."""
    where = {} if partition is None else {"partition": partition}
    while True:
        try:
            producer.produce(topic, value, headers=headers, **where)
            return
        except BufferError:
            producer.poll(wait_s)


def consume(bootstrap: str, topic: str, records: int) -> ConsumeResult:
    result = run_tool(
        CONSUMER_PERF, "--bootstrap-server", bootstrap, "--topic", topic,
        "--num-records", str(records), "--timeout", "30000", timeout=1800,
    )
    parsed = parse_consumer_perf(result.stdout)
    if parsed.records != records:
        raise RuntimeError(f"ConsumerPerformance read {parsed.records} of {records} records")
    return parsed


@dataclass
class Samples:
    """Every run of one target, so the median is taken per metric."""

    max_rate: list[ProduceResult]
    fixed_rate: list[ProduceResult]
    consumed: list[ConsumeResult]


class CpuClock:
    """CPU seconds (user, system) of one process, from /proc: where Herald's time goes.

    On a machine whose cores the broker and the clients already saturate, every CPU second
    the proxy spends comes out of theirs; system time is the kernel's work for the extra
    network hop, user time is Herald's own code.
    """

    def __init__(self, pid: int | None) -> None:
        self.path = Path(f"/proc/{pid}/stat") if pid is not None else None
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def read(self) -> tuple[float, float]:
        if self.path is None or not self.path.exists():
            return (0.0, 0.0)
        # Fields 14 and 15 (1-based) after the command name, which may contain spaces.
        fields = self.path.read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) / self._tick, int(fields[12]) / self._tick


def run_round(
    target: str, bootstrap: str, broker: str, args: argparse.Namespace, samples: Samples,
    cpu: CpuClock | None = None,
) -> None:
    tag = uuid.uuid4().hex[:6]
    max_topic, rate_topic = f"bench-{target}-max-{tag}", f"bench-{target}-rate-{tag}"
    create_topic(broker, max_topic, args.partitions)
    create_topic(broker, rate_topic, args.partitions)

    before = cpu.read() if cpu else None
    r = produce(bootstrap, max_topic, args.records, args.record_size, -1)
    samples.max_rate.append(r)
    log(f"  {target:6} produce max : {r.records_per_s:10.0f} rec/s {r.mb_per_s:7.2f} MB/s "
        f"p50 {r.p50_ms:.0f} ms p99 {r.p99_ms:.0f} ms{cpu_note(cpu, before)}")

    # Warm-up records (JIT, connections, metadata) are left out of the latency figures.
    warmup = args.rate * 2
    rate_records = args.rate * args.rate_seconds + warmup
    r = produce(bootstrap, rate_topic, rate_records, args.record_size, args.rate, warmup)
    samples.fixed_rate.append(r)
    log(f"  {target:6} produce {args.rate}/s: p50 {r.p50_ms:.0f} ms p99 {r.p99_ms:.0f} ms "
        f"avg {r.avg_ms:.2f} ms")

    before = cpu.read() if cpu else None
    c = consume(bootstrap, max_topic, args.records)
    samples.consumed.append(c)
    log(f"  {target:6} consume     : {c.records_per_s:10.0f} rec/s {c.mb_per_s:7.2f} MB/s "
        f"(fetch only {c.fetch_records_per_s:.0f} rec/s {c.fetch_mb_per_s:.2f} MB/s)"
        f"{cpu_note(cpu, before)}")
    delete_topics(broker, f"bench-{target}-.*-{tag}")


def cpu_note(cpu: CpuClock | None, before: tuple[float, float] | None) -> str:
    if cpu is None or before is None:
        return ""
    user, system = (b - a for a, b in zip(before, cpu.read(), strict=True))
    return f"; Herald CPU user {user:.2f} s sys {system:.2f} s"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return statistics.median(values)


def report(direct: Samples, herald: Samples, args: argparse.Namespace) -> bool:
    """Print the table and the target verdicts; return whether every target was met."""

    def med(samples: Samples, kind: str, attr: str) -> float:
        return median([getattr(s, attr) for s in getattr(samples, kind)])

    rows: list[tuple[str, float, float, str]] = []

    def ratio_row(label: str, kind: str, attr: str) -> None:
        d, h = med(direct, kind, attr), med(herald, kind, attr)
        rows.append((label, d, h, f"{h / d:.1%}" if d else "n/a"))

    def added_row(label: str, kind: str, attr: str) -> None:
        d, h = med(direct, kind, attr), med(herald, kind, attr)
        rows.append((label, d, h, f"{h - d:+.1f} ms"))

    ratio_row("produce records/s (max)", "max_rate", "records_per_s")
    ratio_row("produce MB/s (max)", "max_rate", "mb_per_s")
    added_row("produce p50 ms (max)", "max_rate", "p50_ms")
    added_row("produce p99 ms (max)", "max_rate", "p99_ms")
    added_row(f"produce avg ms @{args.rate}/s", "fixed_rate", "avg_ms")
    added_row(f"produce p50 ms @{args.rate}/s", "fixed_rate", "p50_ms")
    added_row(f"produce p99 ms @{args.rate}/s", "fixed_rate", "p99_ms")
    ratio_row("consume records/s", "consumed", "records_per_s")
    ratio_row("consume MB/s", "consumed", "mb_per_s")
    ratio_row("consume fetch records/s", "consumed", "fetch_records_per_s")
    ratio_row("consume fetch MB/s", "consumed", "fetch_mb_per_s")

    print(
        f"\nHerald vs direct: {args.records} x {args.record_size} B records, acks=all, "
        f"{args.partitions} partition(s), interceptors={args.interceptors}, "
        f"median of {args.rounds} round(s)\n"
    )
    print(f"{'metric':32} {'direct':>12} {'herald':>12} {'herald vs direct':>18}")
    print("-" * 77)
    for label, d, h, cmp in rows:
        print(f"{label:32} {d:12.2f} {h:12.2f} {cmp:>18}")

    # The two runs of a round are back to back, so their ratio is not moved by the drift
    # between rounds that the medians above mix in: the targets are judged on these.
    def per_round(kind: str, attr: str) -> list[float]:
        pairs = zip(getattr(herald, kind), getattr(direct, kind), strict=True)
        return [getattr(h, attr) / getattr(d, attr) for h, d in pairs]

    produce_ratios = per_round("max_rate", "records_per_s")
    consume_ratios = per_round("consumed", "fetch_mb_per_s")
    print("\nherald / direct per round, and their median:")
    for label, ratios in (("produce records/s (max)", produce_ratios),
                          ("consume fetch MB/s", consume_ratios)):
        listed = ", ".join(f"{r:.1%}" for r in ratios)
        print(f"  {label:26} {listed}  -> median {median(ratios):.1%}")

    produce_ratio = median(produce_ratios)
    consume_ratio = median(consume_ratios)
    added_p99 = med(herald, "fixed_rate", "p99_ms") - med(direct, "fixed_rate", "p99_ms")
    floor = MIN_THROUGHPUT_RATIO[args.interceptors]
    verdicts = [
        (f"produce throughput >= {floor:.0%} of direct",
         produce_ratio >= floor, f"{produce_ratio:.1%}"),
        (f"added p99 produce latency <= {MAX_ADDED_P99_MS:.0f} ms @{args.rate}/s",
         added_p99 <= MAX_ADDED_P99_MS, f"{added_p99:+.1f} ms"),
    ]
    if args.interceptors == "none":
        verdicts.insert(1, (f"consume throughput >= {floor:.0%} of direct (fetch MB/s)",
                            consume_ratio >= floor, f"{consume_ratio:.1%}"))
    print()
    for label, met, value in verdicts:
        print(f"[{'met' if met else 'NOT MET':7}] {label}: {value}")

    direct_max = med(direct, "max_rate", "records_per_s")
    if args.rate > direct_max / 2:
        print(
            f"\nnote: --rate {args.rate}/s is above half of the direct maximum "
            f"({direct_max:.0f} rec/s); the latency run is close to saturation on this machine "
            "and measures queueing more than the proxy. Lower --rate for a cleaner figure."
        )
    return all(met for _, met, _ in verdicts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records per full-speed produce run and per consume run")
    parser.add_argument("--record-size", type=int, default=1024, help="bytes per record")
    parser.add_argument("--rounds", type=int, default=5, help="direct/Herald pairs to run")
    parser.add_argument("--rate", type=int, default=5000,
                        help="records/s of the fixed-rate latency run")
    parser.add_argument("--rate-seconds", type=int, default=10,
                        help="measured length of the fixed-rate run (plus 2 s of warm-up)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions per topic")
    parser.add_argument("--interceptors", choices=sorted(INTERCEPTOR_SETS), default="none",
                        help="interceptor chains configured in Herald")
    parser.add_argument("--warmup-records", type=int, default=300_000,
                        help="untimed full-speed produce per target before the rounds (JIT)")
    parser.add_argument("--data-dir", default=None,
                        help="folder for the broker's log (default: a folder in /dev/shm)")
    args = parser.parse_args(argv)

    started = time.monotonic()
    rate_records = args.rate * (args.rate_seconds + 2)
    need = data_bytes(2 * args.warmup_records + args.records + rate_records, args.record_size)
    with data_dir(args.data_dir, need) as workdir:
        log(f"starting a 1-broker Kafka cluster (data in {workdir}) ...")
        samples = run(args, workdir)
    ok = report(samples["direct"], samples["herald"], args)
    log(f"\nfinished in {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Samples]:
    with KafkaCluster(size=1, workdir=workdir) as cluster:
        config = herald_config(
            cluster.bootstrap,
            interceptors=INTERCEPTOR_SETS[args.interceptors],
            logging={"level": "warning"},
        )
        with HeraldProcess(config) as herald:
            log(f"broker {cluster.bootstrap}, Herald {herald.bootstrap}")
            targets = {"direct": cluster.bootstrap, "herald": herald.bootstrap}
            samples = {name: Samples([], [], []) for name in targets}
            if args.warmup_records:
                # A fresh broker JVM is far slower in its first seconds; measuring it would
                # penalise whichever target runs first.
                log(f"warm-up: {args.warmup_records} records per target, not measured")
                create_topic(cluster.bootstrap, "bench-warmup", args.partitions)
                for name in targets:
                    produce(targets[name], "bench-warmup", args.warmup_records,
                            args.record_size, -1)
            for n in range(args.rounds):
                order = list(targets) if n % 2 == 0 else list(reversed(targets))
                log(f"round {n + 1}/{args.rounds} ({' then '.join(order)})")
                for name in order:
                    pid = herald.process.pid if herald.process is not None else None
                    cpu = CpuClock(pid) if name == "herald" else None
                    run_round(name, targets[name], cluster.bootstrap, args, samples[name], cpu)
            if herald.process is not None and herald.process.poll() is not None:
                raise RuntimeError(f"Herald exited during the run:\n{herald.logs()[-3000:]}")
    return samples


if __name__ == "__main__":
    sys.exit(main())
