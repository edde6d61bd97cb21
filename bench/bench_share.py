"""What a share group's consumer costs Herald per megabyte, beside a classic group's, with the
shipped chains.

    python bench/bench_share.py [--records 300000] [--rounds 3] [--native auto|off]

A share group (KIP-932) reads with ShareFetch; Herald's engine scans those responses with the
same plan as Fetch responses (docs/performance.md). This measures whether that holds up: the
records are produced once through a Herald with the interceptors of `proxy.yaml` (so each
carries the trace context and audit headers the shipped produce chain writes), and then, per
round, consumed all through the minimal native relay (`bench/relay.c`) and through that Herald
(its fetch chain the shipped one: the link memory's `trace_context.fetched`), each twice: by
a classic group (Kafka's ConsumerPerformance) and by a share group (ShareConsumerPerformance,
acknowledging implicitly with its next ShareFetch). The figure is the proxy's CPU (user +
system, from /proc) per MB of payload, pinned: the broker and the load tools on CPU 0, the
proxy on CPU 1, every thread checked. Medians of per-round values; each round alternates the
order of the targets.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid
from contextlib import ExitStack
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_cost import relay_process  # noqa: E402
from bench.bench_proxy import (  # noqa: E402
    CpuClock,
    consume,
    create_topic,
    data_bytes,
    data_dir,
    log,
    perf_stats,
    produce,
)
from bench.bench_relay import build_relay  # noqa: E402
from bench.pinning import (  # noqa: E402
    PROXY_CPU,
    PinWatch,
    can_pin,
    pin,
    pin_self_to_load_cpu,
    verify_tree,
)
from proxy.devtools.embedded_kafka import ExtraListener, KafkaCluster, free_port  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402
from tests.support.java_tools import run_tool, share_group_from_start  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARE_PERF = "org.apache.kafka.tools.ShareConsumerPerformance"
SIZE = 1024
MODES = ("classic", "share")


def shipped_chains() -> dict:
    return yaml.safe_load((REPO / "proxy.yaml").read_text())["interceptors"]


def share_consume(bootstrap: str, broker: str, topic: str, records: int) -> None:
    """Every record of `topic` read by a new share group from its start."""
    group = f"share-bench-{uuid.uuid4().hex[:8]}"
    share_group_from_start(broker, group)
    result = run_tool(SHARE_PERF, "--bootstrap-server", bootstrap, "--topic", topic,
                      "--group", group, "--num-records", str(records), "--timeout", "30000",
                      timeout=1800)
    got = int(perf_stats(result.stdout, "ShareConsumerPerformance")["data.consumed.in.nMsg"])
    if got != records:
        raise RuntimeError(f"ShareConsumerPerformance read {got} of {records} records")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--native", choices=("auto", "off"), default="auto")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    pinned = can_pin()
    if pinned:
        pin_self_to_load_cpu()
    relay_binary = build_relay()
    mb = args.records * SIZE / 1e6
    cpu: dict[tuple[str, str], list[float]] = {}
    with data_dir(args.data_dir, data_bytes(args.records, SIZE)) as workdir:
        outer, inner = free_port(), free_port()
        with KafkaCluster(size=1, workdir=workdir,
                          extra_listeners=[ExtraListener("RELAYED0", inner, outer)]) as cluster, \
                ExitStack() as more:
            config = herald_config(cluster.bootstrap, interceptors=shipped_chains(),
                                   logging={"level": "warning"},
                                   admin={"bind": f"127.0.0.1:{free_port()}"},
                                   performance={"native_relay": args.native})
            herald = more.enter_context(HeraldProcess(config))
            assert herald.process is not None
            pids = {"relay": more.enter_context(relay_process("relay", relay_binary, outer, inner)),
                    "herald": herald.process.pid}
            targets = {"relay": f"127.0.0.1:{outer}", "herald": herald.bootstrap}
            if pinned:
                for pid in pids.values():
                    pin(pid, {PROXY_CPU})
                log(f"pinning checked on {verify_tree(pids.values())} threads")
            topic = f"share-bench-{uuid.uuid4().hex[:6]}"
            create_topic(cluster.bootstrap, topic, args.partitions)
            produce(herald.bootstrap, topic, args.records, SIZE, -1)
            # A first read through each, not counted: the JVMs' and Herald's warm-up.
            for name in targets:
                consume(targets[name], topic, args.records)
            runs = [(name, mode) for name in targets for mode in MODES]
            for n in range(args.rounds):
                for name, mode in runs if n % 2 == 0 else runs[::-1]:
                    clock = CpuClock(pids[name])
                    with PinWatch(pids.values()) if pinned else ExitStack():
                        before = sum(clock.read())
                        if mode == "classic":
                            consume(targets[name], topic, args.records)
                        else:
                            share_consume(targets[name], cluster.bootstrap, topic,
                                          args.records)
                        spent = sum(clock.read()) - before
                    cpu.setdefault((name, mode), []).append(spent * 1000 / mb)
                    log(f"  round {n + 1} {name:6} {mode:7} {spent * 1000 / mb:6.2f} ms CPU/MB")
    layout = ("pinned: broker and load tools on CPU 0, proxy on CPU 1" if pinned
              else "NOT pinned (fewer than 2 CPUs): the figures measure the machine")
    print(f"\n{args.records} records of {SIZE} B, {args.rounds} rounds, {layout}; "
          f"Herald with proxy.yaml's chains, native_relay: {args.native}")
    print("| consumer | relay ms CPU/MB | Herald ms CPU/MB | Herald / relay |")
    print("|---|---|---|---|")
    med = {key: statistics.median(values) for key, values in cpu.items()}
    for mode in MODES:
        relay, herald_ms = med[("relay", mode)], med[("herald", mode)]
        print(f"| {mode} | {relay:.2f} | {herald_ms:.2f} | {herald_ms / relay:.2f}x |")
    print(f"share against classic through Herald: "
          f"{med[('herald', 'share')] / med[('herald', 'classic')]:.2f}x "
          f"(rounds {', '.join(f'{v:.2f}' for v in cpu[('herald', 'share')])} against "
          f"{', '.join(f'{v:.2f}' for v in cpu[('herald', 'classic')])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
