"""Production traffic shapes in one pinned run: Herald's CPU per MB produced and consumed,
beside the floors a relay that does nothing to the records reaches (`bench/relay.c` for
plaintext, HAProxy for TLS).

    python bench/bench_production.py [--records 200000] [--rounds 5] [--profiles a,b,...]
                                     [--payload random|json|both]

Production Kafka is TLS on both sides, often SASL, and compressed producers. Every profile
below runs against the same broker in the same rounds, so their figures compare:

| profile | client to proxy | proxy to broker | producer codec | chain |
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
| `haproxy-tls` | as `tls-scram`, through HAProxy | TLS | none | (no proxy logic) |
| `haproxy-production` | as `production`, through HAProxy | TLS | lz4 | (no proxy logic) |

HAProxy (bench/haproxy_floor.py) terminates TLS and opens its own to a broker listener that
advertises HAProxy's port, `mode tcp`, one thread; SCRAM runs end to end through it, as
through Herald's `tls-scram`.

Payloads (`--payload`): `random` is ProducerPerformance's own (`--record-size` random letters,
which lz4 hardly shrinks), `json` JSON events from a fixed seed given as `--payload-file`
(bench/payloads.py), which shrink as real records do; `both` (the default) runs every profile
with each. The report prints how much lz4 shrinks each payload.

Per round, payload and profile: Kafka's ProducerPerformance (acks=all) at full speed, then
ConsumerPerformance over the same records through the same proxy; the proxy's CPU (user +
system, from /proc) over each run, divided by the MB of record payload. Broker and load tools
run on CPU 0, every proxy on CPU 1 (checked before each run); `--unpinned` leaves everything on
every core. The table shows medians of the rounds with their spread (min-max); the targets'
ratios are taken per round (both sides measured in the same round) and reported as medians.

Apart from the proxies, the CPU Herald's codec spends decompressing and recompressing the
producer's lz4 batches (bench/codec_cost.py), per MB: the part of `production` a relay never
pays.

At the end, each Herald's count of sessions and frames it handled in Python, by reason, as its
`/metrics` endpoint gives them: a production session the native data plane should carry shows
up there with the reason it did not.
"""

from __future__ import annotations

import argparse
import re
import shutil
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

from bench.bench_cost import CHAINS, relay_process  # noqa: E402
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
from bench.codec_cost import CodecCost, codec_cost  # noqa: E402
from bench.haproxy_floor import haproxy_binary, haproxy_config, run_haproxy  # noqa: E402
from bench.payloads import PAYLOADS, Payload, json_payload, lz4_ratio, random_payload  # noqa: E402
from bench.pinning import PROXY_CPU, can_pin, pin, pin_self_to_load_cpu, verify_tree  # noqa: E402
from protocol.kafka_versions import KAFKA_VERSION  # noqa: E402
from proxy.devtools.embedded_kafka import ExtraListener, free_port  # noqa: E402
from tests.support.certs import Issued  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402
from tests.support.secure_cluster import USERS, SecureCluster, start_secure_cluster  # noqa: E402

PYTHON_PATH_METRIC = re.compile(r"^herald_python_path_[a-z_]*total\{.*$")
"""The lines of Herald's metric counting what it handled in Python, by reason."""


@dataclass(frozen=True)
class Profile:
    proxy: str  # which proxy process serves it (a key of `_proxies`, or a floor's)
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
    "haproxy-tls": Profile("haproxy", "scram", "none"),
    "haproxy-production": Profile("haproxy", "scram", "lz4"),
}


@dataclass(frozen=True)
class Target:
    profile: str
    floor: str
    at_most: float


TARGETS = (
    Target("tls-scram", "haproxy-tls", 1.1),
    Target("production", "haproxy-production", 1.5),
    Target("plain", "relay.c", 1.2),
)
"""Herald's CPU per MB produced over the floor's with the same traffic, in the same round."""


@dataclass
class Figures:
    produce_ms_per_mb: list[float] = field(default_factory=list)
    consume_ms_per_mb: list[float] = field(default_factory=list)
    produce_mb_s: list[float] = field(default_factory=list)


Key = tuple[str, str]  # (profile, payload)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=1024,
                        help="bytes per random record, and the JSON events' approximate size")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--profiles", default=",".join(PROFILES),
                        help=f"comma-separated, of: {', '.join(PROFILES)}")
    parser.add_argument("--payload", choices=(*PAYLOADS, "both"), default="both")
    parser.add_argument("--codec-seconds", type=float, default=2.0,
                        help="CPU seconds per payload for the codec measurement (0: skip it)")
    parser.add_argument("--unpinned", action="store_true")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    chosen = [p for p in args.profiles.split(",") if p]
    unknown = [p for p in chosen if p not in PROFILES]
    if unknown:
        parser.error(f"unknown profiles: {', '.join(unknown)}")
    if any(PROFILES[p].proxy == "haproxy" for p in chosen):
        haproxy_binary()  # fail before the broker starts
    pinned = not args.unpinned and can_pin()
    if pinned:
        pin_self_to_load_cpu()  # the broker and every tool inherit CPU 0
    relay_binary = build_relay()
    names = PAYLOADS if args.payload == "both" else (args.payload,)
    folder = Path(tempfile.mkdtemp(prefix="herald-bench-production-"))
    try:
        payloads = [random_payload(args.record_size) if name == "random"
                    else json_payload(folder, args.record_size) for name in names]
        runs = args.rounds * len(chosen) * len(payloads) + len(payloads)
        need = data_bytes(runs * args.records, args.record_size)
        with data_dir(args.data_dir, need) as workdir:
            figures, reasons = run(args, chosen, payloads, workdir, folder, relay_binary,
                                   pinned)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    codec = [codec_cost(p, args.codec_seconds) for p in payloads] if args.codec_seconds else []
    report(figures, reasons, payloads, codec, args, pinned)
    return 0


def run(args: argparse.Namespace, chosen: list[str], payloads: list[Payload], workdir: Path,
        folder: Path, relay_binary: Path, pinned: bool
        ) -> tuple[dict[Key, Figures], dict[str, list[str]]]:
    relay_port, relay_inner = free_port(), free_port()
    haproxy_port, haproxy_inner = free_port(), free_port()
    secure = start_secure_cluster(
        KAFKA_VERSION, workdir=workdir,
        extra_listeners=[ExtraListener("RELAYED", relay_inner, relay_port),
                         ExtraListener("HAPROXIED", haproxy_inner, haproxy_port, "SASL_SSL")])
    try:
        with ExitStack() as stack:
            wanted = {PROFILES[p].proxy for p in chosen}
            listen_cert = secure.ca.issue("herald-listen", "herald", hosts=("127.0.0.1",))
            targets = _proxies(secure, listen_cert, wanted, stack)
            pids: dict[str, int] = {}
            for name, herald in targets.items():
                assert herald.process is not None
                pids[name] = herald.process.pid
            if "relay.c" in wanted:
                pids["relay.c"] = stack.enter_context(
                    relay_process("relay", relay_binary, relay_port, relay_inner))
            if "haproxy" in wanted:
                config = haproxy_config(haproxy_port, listen_cert.combined, haproxy_inner,
                                        secure.ca.pem)
                pids["haproxy"] = stack.enter_context(
                    run_haproxy(config, folder, haproxy_port))
            bootstraps = {name: h.bootstrap for name, h in targets.items()}
            bootstraps["relay.c"] = f"127.0.0.1:{relay_port}"
            bootstraps["haproxy"] = f"127.0.0.1:{haproxy_port}"
            if pinned:
                for pid in pids.values():
                    pin(pid, {PROXY_CPU})
            clients = _client_properties(secure, folder)
            figures = {(p, load.name): Figures() for load in payloads for p in chosen}
            warm = f"bench-prod-warm-{uuid.uuid4().hex[:6]}"
            create_topic(secure.plaintext, warm, args.partitions)
            for name in chosen:  # JIT, TLS session caches, the engine's buffers
                profile = PROFILES[name]
                for load in payloads:
                    perf_produce(bootstraps[profile.proxy], warm, args.records // 4, args,
                                 clients[profile.security], profile.codec, load.file)
            for n in range(args.rounds):
                order = chosen if n % 2 == 0 else list(reversed(chosen))
                for load in payloads:
                    for name in order:
                        profile = PROFILES[name]
                        if pinned:
                            verify_tree(pids.values())  # every proxy stays on its CPU
                        _round(name, profile, load, n, bootstraps[profile.proxy],
                               pids[profile.proxy], secure, clients[profile.security], args,
                               figures[name, load.name])
            reasons = {name: _python_path_counts(herald) for name, herald in targets.items()}
        return figures, reasons
    finally:
        secure.stop()


def _round(name: str, profile: Profile, load: Payload, n: int, bootstrap: str, pid: int,
           secure: SecureCluster, props: Path, args: argparse.Namespace, out: Figures) -> None:
    topic = f"bench-prod-{name.replace('.', '-')}-{uuid.uuid4().hex[:6]}"
    create_topic(secure.plaintext, topic, args.partitions)
    mb = args.records * load.mean_size / 1e6
    clock = CpuClock(pid)
    before = sum(clock.read())
    produced = perf_produce(bootstrap, topic, args.records, args, props, profile.codec,
                            load.file)
    produce_cpu = sum(clock.read()) - before
    before = sum(clock.read())
    perf_consume(bootstrap, topic, args.records, props)
    consume_cpu = sum(clock.read()) - before
    out.produce_ms_per_mb.append(produce_cpu * 1000 / mb)
    out.consume_ms_per_mb.append(consume_cpu * 1000 / mb)
    out.produce_mb_s.append(produced.mb_per_s)
    log(f"round {n + 1} {name:18} {load.name:6} produce {produced.mb_per_s:6.1f} MB/s "
        f"{produce_cpu * 1000 / mb:6.2f} ms/MB, consume {consume_cpu * 1000 / mb:6.2f} ms/MB")
    delete_topics(secure.plaintext, topic)


def _proxies(secure: SecureCluster, listen_cert: Issued, wanted: set[str],
             stack: ExitStack) -> dict[str, HeraldProcess]:
    """One Herald per configuration the chosen profiles need."""
    ca = str(secure.ca.pem)
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


def _spread(values: list[float]) -> str:
    """The median and, over more than one round, the range it came from."""
    median = statistics.median(values)
    if len(values) < 2:
        return f"{median:.2f}"
    return f"{median:.2f} ({min(values):.2f}-{max(values):.2f})"


def round_ratios(herald: list[float], floor: list[float]) -> list[float]:
    """Herald's figure over the floor's, round by round (the two measured in the same round,
    under the same load on the machine); rounds where the floor measured no CPU are left
    out."""
    return [h / f for h, f in zip(herald, floor, strict=True) if f > 0]


def report(figures: dict[Key, Figures], reasons: dict[str, list[str]], payloads: list[Payload],
           codec: list[CodecCost], args: argparse.Namespace, pinned: bool) -> None:
    layout = "pinned: broker + tools on CPU 0, each proxy on CPU 1" if pinned else "unpinned"
    print(f"\n{args.records} records per run, acks=all, {args.rounds} rounds, "
          f"medians (min-max over the rounds) ({layout})")
    print("payloads: " + ", ".join(
        f"{p.name} ({p.mean_size:.0f} B per record, lz4 shrinks it {lz4_ratio(p):.2f}x)"
        for p in payloads))
    print(f"{'profile':20}{'payload':8}{'produce MB/s':>14}{'produce ms/MB':>22}"
          f"{'consume ms/MB':>22}{'x plain (p/c)':>16}")
    for (name, payload), fig in figures.items():
        produce = statistics.median(fig.produce_ms_per_mb)
        consume = statistics.median(fig.consume_ms_per_mb)
        base = figures.get(("plain", payload))
        ratio = ""
        if base is not None:
            ratio = (f"{_ratio(produce, base.produce_ms_per_mb)} / "
                     f"{_ratio(consume, base.consume_ms_per_mb)}")
        print(f"{name:20}{payload:8}{statistics.median(fig.produce_mb_s):14.1f}"
              f"{_spread(fig.produce_ms_per_mb):>22}{_spread(fig.consume_ms_per_mb):>22}"
              f"{ratio:>16}")
    print("\ntargets (produce ms/MB, Herald over the floor, per round; median (min-max)):")
    for target in TARGETS:
        for load in payloads:
            herald = figures.get((target.profile, load.name))
            floor = figures.get((target.floor, load.name))
            label = f"  {target.profile} / {target.floor} [{load.name}] <= {target.at_most}"
            if herald is None or floor is None:
                print(f"{label}: not measured (profile not chosen)")
                continue
            ratios = round_ratios(herald.produce_ms_per_mb, floor.produce_ms_per_mb)
            if not ratios:
                print(f"{label}: no CPU measured on the floor (runs too short)")
                continue
            median = statistics.median(ratios)
            verdict = "met" if median <= target.at_most else "NOT met"
            print(f"{label}: {_spread(ratios)} {verdict}")
    if codec:
        print("\nHerald's codec alone, lz4 batches of 16 KiB as the producer sends them "
              "(decompress + recompress, ms CPU per MB of records):")
        for cost in codec:
            share = ""
            production = figures.get(("production", cost.payload))
            if production is not None and statistics.median(production.produce_ms_per_mb) > 0:
                part = cost.total_ms_per_mb / statistics.median(production.produce_ms_per_mb)
                share = f", {part:.0%} of production's produce ms/MB"
            print(f"  {cost.payload:8} {cost.decompress_ms_per_mb:.2f} + "
                  f"{cost.compress_ms_per_mb:.2f} = {cost.total_ms_per_mb:.2f} "
                  f"({cost.engine} codec{share})")
    print("\nhandled in Python, by reason (counters that are not zero):")
    for name, lines in reasons.items():
        print(f"  {name}:" + ("" if lines else " none"))
        for line in lines:
            print(f"    {line}")


if __name__ == "__main__":
    sys.exit(main())
