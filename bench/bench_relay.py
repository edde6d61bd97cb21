"""What any proxy costs on this machine: direct, a minimal native relay, and Herald, same run.

    python bench/bench_relay.py [--records 1000000] [--rounds 5] [--interceptors none]

`bench_proxy.py` compares Herald with the broker alone. This adds a third target: `relay.c`,
a TCP relay that decodes nothing and moves bytes with splice(2), one blocking thread per
direction (compiled with `cc` on first use, Linux only). Whatever the relay loses against
direct is the price of one more process and one more hop on this machine, which no proxy
implementation avoids; the gap between the relay and Herald is what Herald's own work costs.

The broker gets a second listener that advertises the relay's port, so clients that bootstrap
through the relay keep every later connection on it, as clients of Herald do. Per round each
target runs ProducerPerformance at full speed (acks=all) and ConsumerPerformance over what it
wrote; the order flips every round. Printed: each round's ratio against direct and their
median, and the CPU each proxy process spent on the produce runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import (  # noqa: E402
    INTERCEPTOR_SETS,
    CpuClock,
    consume,
    create_topic,
    data_bytes,
    data_dir,
    delete_topics,
    log,
    produce,
)
from proxy.devtools.embedded_kafka import ExtraListener, KafkaCluster, free_port  # noqa: E402
from proxy.devtools.kafka_dist import cache_root  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402

SOURCE = Path(__file__).with_name("relay.c")
TARGETS = ("direct", "relay", "herald")


def build_relay() -> Path:
    """Compile relay.c into the cache folder, again only when the source is newer."""
    binary = Path(cache_root()) / "bench" / "relay"
    if not binary.exists() or binary.stat().st_mtime < SOURCE.stat().st_mtime:
        binary.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-pthread", "-o", str(binary), str(SOURCE)], check=True)
    return binary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--warmup-records", type=int, default=300_000)
    parser.add_argument("--interceptors", choices=sorted(INTERCEPTOR_SETS), default="none",
                        help="interceptor chains configured in Herald")
    parser.add_argument("--data-dir", default=None,
                        help="folder for the broker's log (default: a folder in /dev/shm)")
    args = parser.parse_args(argv)
    if not hasattr(os, "splice"):
        parser.error("the relay needs splice(2): Linux only")

    started = time.monotonic()
    relay = build_relay()
    need = data_bytes(len(TARGETS) * args.warmup_records + args.records, 1024)
    with data_dir(args.data_dir, need) as workdir:
        rates = run(args, workdir, relay)
    print(f"\n{args.records} x 1024 B records, acks=all, {args.partitions} partition(s), "
          f"Herald interceptors={args.interceptors}, {args.rounds} round(s)")
    print("ratio to direct per round, and their median:")
    for metric, label in ((0, "produce records/s"), (1, "consume fetch MB/s")):
        for name in ("relay", "herald"):
            ratios = [t / d for t, d in zip(rates[name][metric], rates["direct"][metric],
                                            strict=True)]
            listed = ", ".join(f"{r:.1%}" for r in ratios)
            print(f"  {label:19} {name:6} {listed}  -> median {statistics.median(ratios):.1%}")
    log(f"finished in {time.monotonic() - started:.0f} s")
    return 0


def run(args: argparse.Namespace, workdir: Path, relay_binary: Path
        ) -> dict[str, tuple[list[float], list[float]]]:
    """Per target: (produce records/s, consume fetch MB/s) of every round."""
    relay_port, inner_port = free_port(), free_port()
    extra = [ExtraListener("RELAYED", inner_port, relay_port)]
    rates: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in TARGETS}
    with KafkaCluster(size=1, workdir=workdir, extra_listeners=extra) as cluster:
        relay = subprocess.Popen([str(relay_binary), str(relay_port), str(inner_port)],
                                 stdout=subprocess.PIPE)
        try:
            assert relay.stdout is not None
            if relay.stdout.readline() != b"relay ready\n":
                raise RuntimeError("the relay did not start")
            config = herald_config(cluster.bootstrap,
                                   interceptors=INTERCEPTOR_SETS[args.interceptors],
                                   logging={"level": "warning"})
            with HeraldProcess(config) as herald:
                assert herald.process is not None
                targets = {"direct": cluster.bootstrap, "relay": f"127.0.0.1:{relay_port}",
                           "herald": herald.bootstrap}
                clocks = {"relay": CpuClock(relay.pid), "herald": CpuClock(herald.process.pid)}
                if args.warmup_records:
                    create_topic(cluster.bootstrap, "relay-warmup", args.partitions)
                    for bootstrap in targets.values():
                        produce(bootstrap, "relay-warmup", args.warmup_records, 1024, -1)
                for n in range(args.rounds):
                    order = TARGETS if n % 2 == 0 else TARGETS[::-1]
                    log(f"round {n + 1}/{args.rounds} ({', '.join(order)})")
                    for name in order:
                        one_round(name, targets[name], cluster.bootstrap, f"relay-{n}-{name}",
                                  args, clocks.get(name), rates[name])
        finally:
            relay.kill()
            relay.wait()
    return rates


def one_round(name: str, bootstrap: str, broker: str, topic: str, args: argparse.Namespace,
              clock: CpuClock | None, into: tuple[list[float], list[float]]) -> None:
    create_topic(broker, topic, args.partitions)
    before = clock.read() if clock else (0.0, 0.0)
    p = produce(bootstrap, topic, args.records, 1024, -1)
    after = clock.read() if clock else (0.0, 0.0)
    c = consume(bootstrap, topic, args.records)
    delete_topics(broker, topic)
    into[0].append(p.records_per_s)
    into[1].append(c.fetch_mb_per_s)
    spent = sum(after) - sum(before)
    cpu = f", proxy CPU {spent:.2f} s" if clock else ""
    log(f"  {name:6} produce {p.records_per_s:10.0f} records/s{cpu}; "
        f"consume {c.fetch_mb_per_s:7.1f} MB/s")


if __name__ == "__main__":
    sys.exit(main())
