"""TLS on both sides against plaintext: produce and consume throughput and Herald's CPU per MB.

One broker with a PLAINTEXT and an SSL listener (client certificates required), and two
Heralds in front of it: one plaintext end to end, one serving TLS to its clients and speaking
TLS (with its own client certificate) to the broker. Kafka's ProducerPerformance (acks=all)
drives each in turn, alternating order every round, and ConsumerPerformance then reads what
it wrote back through the same Herald.

Layout (the default): this script, the broker and the perf tools on CPU 0, each Herald on
CPU 1, so Herald's CPU time is its own and the figure that travels across machines is CPU
milliseconds per MB of client payload. `--unpinned` leaves everything on every core.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import (  # noqa: E402
    CpuClock,
    create_topic,
    delete_topics,
    log,
    parse_consumer_perf,
)
from bench.bench_proxy import parse_producer_perf as parse  # noqa: E402
from bench.pinning import PROXY_CPU, can_pin, pin, pin_self_to_load_cpu, verify  # noqa: E402
from protocol.kafka_versions import KAFKA_VERSION  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402
from tests.support.java_tools import (  # noqa: E402
    CONSUMER_PERF,
    PRODUCER_PERF,
    command_properties,
    run_tool,
)
from tests.support.secure_cluster import start_secure_cluster  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--unpinned", action="store_true",
                        help="leave the broker, the tools and Herald on every core")
    args = parser.parse_args(argv)
    pinned = not args.unpinned and can_pin()
    if pinned:
        pin_self_to_load_cpu()  # the broker and every perf tool inherit it
    secure = start_secure_cluster(KAFKA_VERSION)
    folder = Path(tempfile.mkdtemp(prefix="herald-bench-tls-"))
    try:
        herald_cert = secure.ca.issue("herald", "herald", hosts=("127.0.0.1",))
        upstream_cert = secure.ca.issue("herald-up", "herald-proxy")
        plain = herald_config(secure.plaintext, logging={"level": "warning"})
        tls = herald_config(secure.plaintext, logging={"level": "warning"}, listen={
            "tls": {"cert_file": str(herald_cert.cert), "key_file": str(herald_cert.key)}})
        tls["upstream"] = {"bootstrap": secure.ssl_address, "tls": {
            "ca_file": str(secure.ca.pem), "cert_file": str(upstream_cert.cert),
            "key_file": str(upstream_cert.key)}}
        client_tls = folder / "client-tls.properties"
        client_tls.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\n"
                              f"ssl.truststore.location={secure.ca.pem}\n")
        client_plain = folder / "client-plain.properties"
        client_plain.write_text("acks=all\n")
        with HeraldProcess(plain) as h_plain, HeraldProcess(tls) as h_tls:
            targets = {"plaintext": (h_plain, client_plain), "tls": (h_tls, client_tls)}
            for herald, _ in targets.values():
                assert herald.process is not None
                if pinned:
                    pin(herald.process.pid, {PROXY_CPU})
            results: dict[str, list[tuple[float, ...]]] = {t: [] for t in targets}
            warm = f"bench-tls-warm-{uuid.uuid4().hex[:6]}"
            create_topic(secure.plaintext, warm, args.partitions)
            for herald, props in targets.values():
                perf_produce(herald.bootstrap, warm, args.records // 3, args, props)
            for n in range(args.rounds):
                order = list(targets) if n % 2 == 0 else list(reversed(targets))
                for name in order:
                    herald, props = targets[name]
                    assert herald.process is not None
                    if pinned:
                        verify(herald.process.pid, {PROXY_CPU})
                    topic = f"bench-tls-{name}-{uuid.uuid4().hex[:6]}"
                    create_topic(secure.plaintext, topic, args.partitions)
                    clock = CpuClock(herald.process.pid)
                    start = clock.read()
                    out = perf_produce(herald.bootstrap, topic, args.records, args, props)
                    mid = clock.read()
                    cpu_s = sum(mid) - sum(start)
                    mb = args.records * args.record_size / 1e6
                    read = perf_consume(herald.bootstrap, topic, args.records, props)
                    end = clock.read()
                    read_cpu_s = sum(end) - sum(mid)
                    results[name].append((out.records_per_s, out.mb_per_s, cpu_s * 1000 / mb,
                                          read.fetch_mb_per_s, read_cpu_s * 1000 / mb))
                    log(f"round {n + 1} {name:9}: produce {out.records_per_s:9.0f} rec/s "
                        f"{out.mb_per_s:7.1f} MB/s  Herald CPU {cpu_s:.2f} s = "
                        f"{cpu_s * 1000 / mb:.2f} ms/MB; consume {read.fetch_mb_per_s:7.1f} "
                        f"MB/s  Herald CPU {read_cpu_s * 1000 / mb:.2f} ms/MB "
                        f"(system: {_system_share(start, mid):.0%} / "
                        f"{_system_share(mid, end):.0%})")
                    delete_topics(secure.plaintext, topic)
    finally:
        secure.stop()
    layout = "pinned: broker + tools on CPU 0, Herald on CPU 1" if pinned else "unpinned"
    print(f"\nproduce ({args.records} x {args.record_size} B, acks=all), then consume it, "
          f"{args.rounds} rounds, medians ({layout})")
    print(f"{'Herald':24}{'produce rec/s':>14}{'MB/s':>7}{'CPU ms/MB':>11}"
          f"{'consume MB/s':>14}{'CPU ms/MB':>11}")
    medians = {}
    for name, rows in results.items():
        label = "plaintext both sides" if name == "plaintext" else "TLS both sides"
        med = medians[name] = [statistics.median(col) for col in zip(*rows, strict=True)]
        print(f"{label:24}{med[0]:14.0f}{med[1]:7.1f}{med[2]:11.2f}{med[3]:14.1f}{med[4]:11.2f}")
    plain, tls = medians["plaintext"], medians["tls"]
    print(f"TLS / plaintext, Herald CPU per MB: produce {tls[2] / plain[2]:.2f}x, "
          f"consume {tls[4] / plain[4]:.2f}x")
    return 0


def _system_share(start: tuple[float, float], end: tuple[float, float]) -> float:
    """Of Herald's CPU time between two readings, the kernel's part."""
    total = sum(end) - sum(start)
    return (end[1] - start[1]) / total if total > 0 else 0.0


def perf_produce(bootstrap: str, topic: str, records: int, args: argparse.Namespace,
                 props: Path, codec: str = "none",
                 payload_file: Path | None = None):  # noqa: ANN201
    """ProducerPerformance at full speed, acks=all, `codec` compression, the client settings
    in `props`; every record must be sent. Random records of `args.record_size` bytes, or
    the lines of `payload_file` (one picked at random per record) when given."""
    payload = (["--payload-file", str(payload_file)] if payload_file is not None
               else ["--record-size", str(args.record_size)])
    result = run_tool(
        PRODUCER_PERF, "--bootstrap-server", bootstrap, "--topic", topic,
        "--num-records", str(records), *payload,
        "--throughput", "-1", "--command-config", str(props),
        *command_properties(PRODUCER_PERF, {"acks": "all", "compression.type": codec}),
        timeout=1800,
    )
    parsed = parse(result.stdout)
    if parsed.records != records:
        raise RuntimeError(f"ProducerPerformance sent {parsed.records} of {records} records")
    return parsed


def perf_consume(bootstrap: str, topic: str, records: int, props: Path):  # noqa: ANN201
    """ConsumerPerformance over `records` records with the client settings in `props`."""
    result = run_tool(
        CONSUMER_PERF, "--bootstrap-server", bootstrap, "--topic", topic,
        "--num-records", str(records), "--timeout", "30000", "--command-config", str(props),
        timeout=1800,
    )
    parsed = parse_consumer_perf(result.stdout)
    if parsed.records != records:
        raise RuntimeError(f"ConsumerPerformance read {parsed.records} of {records} records")
    return parsed


if __name__ == "__main__":
    sys.exit(main())
