"""What Herald's consume path does per MB, counted rather than timed: syscalls, wake-ups.

    python bench/consume_events.py [--records 30000] [--chains none,drop_headers,trace_audit_link]

One broker, one Herald per chain (bench_cost.py's chains, native relay on), one topic of
1 KiB records that each carry a valid `traceparent` (produced through the linking Herald, so
they also carry audit's headers), consumed through each Herald by Kafka's ConsumerPerformance
while `perf stat` counts, in Herald's process, every syscall (and the ones the relay's loop
makes: epoll_wait, recvfrom, sendto, splice), the context switches, and the task clock.
Counts per MB of payload do not move with the machine's load, which makes them the figure to
compare two versions of the engine on a shared machine; the task clock is printed for the
record only (on a busy machine it is not a result). `none` has no fetch chain: its Fetch
responses are spliced; `drop_headers` is scanned; `trace_audit_link` is scanned and links.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_cost import CHAINS, produce_traced  # noqa: E402
from bench.bench_proxy import consume, create_topic  # noqa: E402
from proxy.devtools.embedded_kafka import KafkaCluster, free_port  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402

EVENTS = ("raw_syscalls:sys_enter", "syscalls:sys_enter_epoll_wait",
          "syscalls:sys_enter_recvfrom", "syscalls:sys_enter_sendto",
          "syscalls:sys_enter_splice", "context-switches", "task-clock")
# (per thread: the whole process, and the relay engine's thread alone)


def profiled(pid: int, bootstrap: str, topic: str, records: int, into: Path) -> None:
    """Consume `records` through the proxy at `bootstrap` while `perf record` samples `pid`
    on the CPU clock (no hardware counter needed), kernel included: where the time goes."""
    perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "20000",
                             "-o", str(into), "-p", str(pid)])
    try:
        consume(bootstrap, topic, records)
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait(60)


def counted(pid: int, bootstrap: str, topic: str, records: int) -> dict[str, float]:
    """Consume `records` through the proxy at `bootstrap` while perf counts in `pid`."""
    with tempfile.NamedTemporaryFile("r", suffix=".perf") as out:
        perf = subprocess.Popen(["perf", "stat", "--per-thread", "-x", ",", "-o", out.name,
                                 "-e", ",".join(EVENTS), "-p", str(pid)])
        try:
            consume(bootstrap, topic, records)
        finally:
            perf.send_signal(signal.SIGINT)
            perf.wait(30)
        # per thread: "<comm>-<tid>,<count>,<unit>,<event>,..."
        threads: dict[str, dict[str, float]] = {}
        for line in out.read().splitlines():
            fields = line.split(",")
            if len(fields) > 3 and fields[3] in EVENTS and fields[1][:1].isdigit():
                threads.setdefault(fields[0], {})[fields[3]] = float(fields[1])
        total = {e: sum(t.get(e, 0.0) for t in threads.values()) for e in EVENTS}
        # the relay's thread: the one making most syscalls (the engine's loop)
        busiest = max(threads.values(), key=lambda t: t.get(EVENTS[0], 0.0), default={})
        total.update({"engine " + e: v for e, v in busiest.items()})
        return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--chains", default="none,drop_headers,trace_audit_link")
    parser.add_argument("--record", metavar="DIR", type=Path,
                        help="also `perf record` each chain's consume into DIR/<chain>.data "
                             "(read with `perf report -i ... --sort sym`)")
    args = parser.parse_args()
    chains = args.chains.split(",")
    mb = args.records * 1024 / 1e6
    with tempfile.TemporaryDirectory() as workdir, \
            KafkaCluster(size=1, workdir=Path(workdir)) as cluster:
        heralds: dict[str, HeraldProcess] = {}
        try:
            for chain in chains:
                config = herald_config(cluster.bootstrap, interceptors=CHAINS[chain],
                                       logging={"level": "warning"},
                                       admin={"bind": f"127.0.0.1:{free_port()}"})
                config["performance"] = {"native_relay": "auto"}
                heralds[chain] = HeraldProcess(config).start()
            topic = f"events-{uuid.uuid4().hex[:6]}"
            create_topic(cluster.bootstrap, topic, 3)
            producer = heralds.get("trace_audit_link") or next(iter(heralds.values()))
            produce_traced(producer.bootstrap, topic, args.records, 1024)
            for herald in heralds.values():  # warm: sessions handed to the engine
                consume(herald.bootstrap, topic, args.records)
            print(f"{args.records:,} x 1 KiB traced records, {mb:.1f} MB; per MB in Herald:")
            names = [e.split(":")[-1].removeprefix("sys_enter_") for e in EVENTS]
            print(f"  {'chain':18}" + "".join(f"{n:>14}" for n in names))
            for _ in range(args.rounds):
                for chain, herald in heralds.items():
                    assert herald.process is not None
                    c = counted(herald.process.pid, herald.bootstrap, topic, args.records)
                    for who, prefix in (("all", ""), ("engine", "engine ")):
                        print(f"  {chain + ' ' + who:18}" + "".join(
                            f"{c.get(prefix + e, float('nan')) / mb:14.1f}" for e in EVENTS),
                            flush=True)
            if args.record:
                args.record.mkdir(parents=True, exist_ok=True)
                for chain, herald in heralds.items():
                    assert herald.process is not None
                    profiled(herald.process.pid, herald.bootstrap, topic, args.records,
                             args.record / f"{chain}.data")
        finally:
            for herald in heralds.values():
                herald.stop()
    print("(task-clock: ms per MB, for the record only on a shared machine)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
