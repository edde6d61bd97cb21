"""Production traffic shapes in one pinned run: Herald's CPU per MB produced and consumed,
beside the minimal native relay (`bench/relay.c`).

    python bench/bench_production.py [--records 200000] [--rounds 2] [--profiles a,b,...]

Production Kafka is TLS on both sides, often SASL, and compressed producers. Every profile
below runs against the same broker in the same rounds, so their figures compare:

| profile | client to Herald | Herald to broker | producer codec | chain |
|---|---|---|---|---|
| `plain` | plaintext | plaintext | none | none |
| `plain-ta` | plaintext | plaintext | none | trace_context + audit |
| `lz4`, `zstd` | plaintext | plaintext | lz4 / zstd | none |
| `lz4-ta`, `zstd-ta` | plaintext | plaintext | lz4 / zstd | trace_context + audit |
| `tls` | TLS | TLS (client certificate) | none | none |
| `tls-scram` | TLS, SCRAM-SHA-512 passthrough | TLS | none | none |
| `production` | TLS, SCRAM-SHA-512 passthrough | TLS | lz4 | trace_context + audit |
| `production-python` | as `production`, with `performance.native_relay: off` | | | |
| `relay.c` | plaintext, through `bench/relay.c` | plaintext | none | (no proxy logic) |

Per round and profile: Kafka's ProducerPerformance (acks=all, 1 KiB records) at full speed,
then ConsumerPerformance over the same records through the same proxy; the proxy's CPU (user +
system, from /proc) over each run, divided by the MB of record payload. Broker and load tools
run on CPU 0, every proxy on CPU 1 (checked before each run); `--unpinned` leaves everything on
every core. The table shows medians of the rounds and each profile's ratio to `plain`.

At the end, each Herald's count of sessions and frames it handled in Python, by reason, as its
`/metrics` endpoint gives them: a production session the native data plane should carry shows
up there with the reason it did not.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import urllib.request
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_cost import CHAINS, _relay  # noqa: E402
from bench.bench_proxy import (  # noqa: E402
    CpuClock,
    create_topic,
    data_bytes,
    data_dir,
    delete_topics,
    log,
)
from bench.bench_relay import build_relay  # noqa: E402
from bench.bench_tls import perf_consume, perf_produce  # noqa: E402
from bench.pinning import PROXY_CPU, can_pin, pin, pin_self_to_load_cpu, verify_tree  # noqa: E402
from protocol.kafka_versions import KAFKA_VERSION  # noqa: E402
from proxy.devtools.embedded_kafka import ExtraListener, free_port  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402
from tests.support.secure_cluster import USERS, SecureCluster, start_secure_cluster  # noqa: E402

PYTHON_PATH_METRIC = re.compile(r"^herald_python_path_[a-z_]*total\{.*$")
"""The lines of Herald's metric counting what it handled in Python, by reason."""


@dataclass(frozen=True)
class Profile:
    proxy: str  # which proxy process serves it (a key of `_proxies`)
    security: str  # plaintext, tls or scram: what the client speaks
    codec: str  # the producer's compression.type


PROFILES: dict[str, Profile] = {
    "plain": Profile("herald-plain", "plaintext", "none"),
    "plain-ta": Profile("herald-plain-ta", "plaintext", "none"),
    "lz4": Profile("herald-plain", "plaintext", "lz4"),
    "lz4-ta": Profile("herald-plain-ta", "plaintext", "lz4"),
    "zstd": Profile("herald-plain", "plaintext", "zstd"),
    "zstd-ta": Profile("herald-plain-ta", "plaintext", "zstd"),
    "tls": Profile("herald-tls", "tls", "none"),
    "tls-scram": Profile("herald-scram", "scram", "none"),
    "production": Profile("herald-scram-ta", "scram", "lz4"),
    "production-python": Profile("herald-scram-ta-python", "scram", "lz4"),
    "relay.c": Profile("relay.c", "plaintext", "none"),
}


@dataclass
class Figures:
    produce_ms_per_mb: list[float] = field(default_factory=list)
    consume_ms_per_mb: list[float] = field(default_factory=list)
    produce_mb_s: list[float] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--profiles", default=",".join(PROFILES),
                        help=f"comma-separated, of: {', '.join(PROFILES)}")
    parser.add_argument("--unpinned", action="store_true")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    chosen = [p for p in args.profiles.split(",") if p]
    unknown = [p for p in chosen if p not in PROFILES]
    if unknown:
        parser.error(f"unknown profiles: {', '.join(unknown)}")
    pinned = not args.unpinned and can_pin()
    if pinned:
        pin_self_to_load_cpu()  # the broker and every tool inherit CPU 0
    relay_binary = build_relay()
    need = data_bytes(args.rounds * len(chosen) * args.records + args.records, args.record_size)
    with data_dir(args.data_dir, need) as workdir:
        figures, reasons = run(args, chosen, workdir, relay_binary, pinned)
    report(figures, reasons, args, pinned)
    return 0


def run(args: argparse.Namespace, chosen: list[str], workdir: Path, relay_binary: Path,
        pinned: bool) -> tuple[dict[str, Figures], dict[str, list[str]]]:
    relay_port, relay_inner = free_port(), free_port()
    secure = start_secure_cluster(
        KAFKA_VERSION, workdir=workdir,
        extra_listeners=[ExtraListener("RELAYED", relay_inner, relay_port)])
    folder = Path(tempfile.mkdtemp(prefix="herald-bench-production-"))
    try:
        with ExitStack() as stack:
            wanted = {PROFILES[p].proxy for p in chosen}
            targets = _proxies(secure, folder, wanted, stack)
            pids: dict[str, int] = {}
            for name, herald in targets.items():
                assert herald.process is not None
                pids[name] = herald.process.pid
            if "relay.c" in wanted:
                pids["relay.c"] = stack.enter_context(
                    _relay("relay", relay_binary, relay_port, relay_inner))
            bootstraps = {name: h.bootstrap for name, h in targets.items()}
            bootstraps["relay.c"] = f"127.0.0.1:{relay_port}"
            if pinned:
                for pid in pids.values():
                    pin(pid, {PROXY_CPU})
            clients = _client_properties(secure, folder)
            figures = {p: Figures() for p in chosen}
            warm = f"bench-prod-warm-{uuid.uuid4().hex[:6]}"
            create_topic(secure.plaintext, warm, args.partitions)
            for name in chosen:  # JIT, TLS session caches, the engine's buffers
                profile = PROFILES[name]
                perf_produce(bootstraps[profile.proxy], warm, args.records // 4, args,
                         clients[profile.security], profile.codec)
            for n in range(args.rounds):
                order = chosen if n % 2 == 0 else list(reversed(chosen))
                for name in order:
                    profile = PROFILES[name]
                    if pinned:
                        verify_tree(pids.values())  # every proxy stays on its CPU
                    _round(name, profile, n, bootstraps[profile.proxy], pids[profile.proxy],
                           secure, clients[profile.security], args, figures[name])
            reasons = {name: _python_path_counts(herald) for name, herald in targets.items()}
        return figures, reasons
    finally:
        secure.stop()


def _round(name: str, profile: Profile, n: int, bootstrap: str, pid: int,
           secure: SecureCluster, props: Path, args: argparse.Namespace, out: Figures) -> None:
    topic = f"bench-prod-{name.replace('.', '-')}-{uuid.uuid4().hex[:6]}"
    create_topic(secure.plaintext, topic, args.partitions)
    mb = args.records * args.record_size / 1e6
    clock = CpuClock(pid)
    before = sum(clock.read())
    produced = perf_produce(bootstrap, topic, args.records, args, props, profile.codec)
    produce_cpu = sum(clock.read()) - before
    before = sum(clock.read())
    perf_consume(bootstrap, topic, args.records, props)
    consume_cpu = sum(clock.read()) - before
    out.produce_ms_per_mb.append(produce_cpu * 1000 / mb)
    out.consume_ms_per_mb.append(consume_cpu * 1000 / mb)
    out.produce_mb_s.append(produced.mb_per_s)
    log(f"round {n + 1} {name:18} produce {produced.mb_per_s:6.1f} MB/s "
        f"{produce_cpu * 1000 / mb:6.2f} ms/MB, consume {consume_cpu * 1000 / mb:6.2f} ms/MB")
    delete_topics(secure.plaintext, topic)


def _proxies(secure: SecureCluster, folder: Path, wanted: set[str],
             stack: ExitStack) -> dict[str, HeraldProcess]:
    """One Herald per configuration the chosen profiles need."""
    ca = str(secure.ca.pem)
    listen_cert = secure.ca.issue("herald-listen", "herald", hosts=("127.0.0.1",))
    upstream_cert = secure.ca.issue("herald-upstream", "herald-proxy")
    listen_tls = {"cert_file": str(listen_cert.cert), "key_file": str(listen_cert.key)}
    mtls_upstream = {"bootstrap": secure.ssl_address, "tls": {
        "ca_file": ca, "cert_file": str(upstream_cert.cert), "key_file": str(upstream_cert.key)}}
    sasl_upstream = {"bootstrap": secure.sasl_address, "tls": {"ca_file": ca}}

    def config(chain: str, upstream: dict[str, Any] | None, native: str = "auto"
               ) -> dict[str, Any]:
        conf = herald_config(secure.plaintext, logging={"level": "warning"},
                             interceptors=CHAINS[chain],
                             admin={"bind": f"127.0.0.1:{free_port()}"},
                             performance={"native_relay": native})
        if upstream is not None:
            conf["listen"]["tls"] = listen_tls
            conf["upstream"] = upstream
        return conf

    configs = {
        "herald-plain": config("none", None),
        "herald-plain-ta": config("trace_audit", None),
        "herald-tls": config("none", mtls_upstream),
        "herald-scram": config("none", sasl_upstream),
        "herald-scram-ta": config("trace_audit", sasl_upstream),
        "herald-scram-ta-python": config("trace_audit", sasl_upstream, native="off"),
    }
    return {name: stack.enter_context(HeraldProcess(conf))
            for name, conf in configs.items() if name in wanted}


def _client_properties(secure: SecureCluster, folder: Path) -> dict[str, Path]:
    trust = f"ssl.truststore.type=PEM\nssl.truststore.location={secure.ca.pem}\n"
    scram = ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
             "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
             f'required username="alice" password="{USERS["alice"]}";\n')
    texts = {"plaintext": "", "tls": "security.protocol=SSL\n" + trust, "scram": scram + trust}
    paths = {}
    for name, text in texts.items():
        paths[name] = folder / f"{name}.properties"
        paths[name].write_text(text)
    return paths


def _python_path_counts(herald: HeraldProcess) -> list[str]:
    with urllib.request.urlopen(f"{herald.admin_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return [line for line in text.splitlines() if PYTHON_PATH_METRIC.match(line)
            and not line.rstrip().endswith(" 0.0")]


def _ratio(value: float, base: list[float]) -> str:
    """`value` over the median of `base`; "-" where a run too short for the CPU clock's
    ticks measured none."""
    median = statistics.median(base)
    return f"{value / median:.2f}" if median > 0 else "-"


def report(figures: dict[str, Figures], reasons: dict[str, list[str]],
           args: argparse.Namespace, pinned: bool) -> None:
    layout = "pinned: broker + tools on CPU 0, each proxy on CPU 1" if pinned else "unpinned"
    print(f"\n{args.records} x {args.record_size} B, acks=all, {args.rounds} rounds, "
          f"medians ({layout})")
    print(f"{'profile':20}{'produce MB/s':>14}{'produce ms/MB':>15}{'consume ms/MB':>15}"
          f"{'x plain (p/c)':>16}")
    base = figures.get("plain")
    for name, fig in figures.items():
        produce = statistics.median(fig.produce_ms_per_mb)
        consume = statistics.median(fig.consume_ms_per_mb)
        ratio = ""
        if base is not None:
            ratio = (f"{_ratio(produce, base.produce_ms_per_mb)} / "
                     f"{_ratio(consume, base.consume_ms_per_mb)}")
        print(f"{name:20}{statistics.median(fig.produce_mb_s):14.1f}{produce:15.2f}"
              f"{consume:15.2f}{ratio:>16}")
    print("\nhandled in Python, by reason (counters that are not zero):")
    for name, lines in reasons.items():
        print(f"  {name}:" + ("" if lines else " none"))
        for line in lines:
            print(f"    {line}")


if __name__ == "__main__":
    sys.exit(main())
