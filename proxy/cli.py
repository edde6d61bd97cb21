"""The proxy's commands of `herald` (`herald.registry` names them): `run` and `dev`.

`herald run --config FILE` is the production mode: the proxy alone, in front of the cluster the
file names. `herald dev` is the try-it-now mode: it starts a local single-node Apache Kafka
broker (KRaft; jars fetched once with Maven and cached) and the proxy in front of it. Both
are handed the file's proxy sections already read and checked, with every other section of
the file, by the `herald` command.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path

from configuration import HostPort
from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_VERSION
from proxy.config.proxy_yaml import ProxyConfig
from proxy.net.config import ListenError
from proxy.observability import logs
from proxy.upstream.config import UpstreamConfig


def run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Run the proxy in front of upstream.bootstrap of the config file."
    parser.add_argument("--config", "-c", required=True, type=Path, help="the YAML config file")


def dev_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Start a local single-node KRaft Apache Kafka broker (jars from Maven Central, "
        "cached in .cache/) on a free loopback port, and Herald in front of it, configured "
        "by the config file; its upstream.bootstrap is replaced by the local broker. Each "
        "cluster named under `clusters:` (routing destinations) gets a local broker too."
    )
    parser.add_argument("--config", "-c", type=Path, default=Path("proxy.yaml"),
                        help="the YAML config file (default: proxy.yaml)")
    parser.add_argument("--kafka-version", default=KAFKA_VERSION,
                        help=f"Kafka release to run (default {KAFKA_VERSION}; "
                             f"{KAFKA_LEGACY_VERSION} is also tested)")


def _ready_line(config: ProxyConfig) -> str:
    upstream = ",".join(str(a) for a in config.upstream.bootstrap)
    return f"herald ready: bootstrap={config.advertised_bootstrap} upstream={upstream}"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def _serve(config: ProxyConfig) -> int:
    """Run the proxy; exit status 1 when a configured address cannot be listened on."""
    from proxy.server import run as run_proxy

    logs.configure(config.logging.level, config.logging.format)
    failed: list[BaseException] = []
    try:
        run_proxy(config, on_ready=lambda _proxy: print(_ready_line(config), flush=True))
    except* ListenError as group:  # raised from inside the proxy's (nested) task nurseries
        failed.extend(_leaves(group))
    if failed:
        print(f"herald: cannot listen: {failed[0]}", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace, config: ProxyConfig) -> int:
    """`herald run`: serve until stopped."""
    return _serve(config)


def dev(args: argparse.Namespace, config: ProxyConfig) -> int:
    """`herald dev`: a local broker for the upstream and each named cluster, then serve."""
    from proxy.devtools.embedded_kafka import KafkaCluster, KafkaStartError
    from proxy.devtools.kafka_dist import KafkaDistError

    names = ["upstream", *config.clusters]
    print(f"herald dev: starting Apache Kafka {args.kafka_version} "
          f"({len(names)} local cluster{'s' if len(names) > 1 else ''}) ...", file=sys.stderr)
    with contextlib.ExitStack() as stack:
        local: dict[str, HostPort] = {}
        for name in names:
            cluster = KafkaCluster(size=1, version=args.kafka_version)
            try:
                cluster.start()
            except (KafkaStartError, KafkaDistError) as exc:
                print(f"herald dev: could not start Kafka: {exc}", file=sys.stderr)
                return 1
            stack.callback(cluster.stop)
            local[name] = HostPort("127.0.0.1", cluster.nodes[0].port)
            if name != "upstream":
                print(f"herald dev: cluster {name} is at {local[name]}", file=sys.stderr)
        return _serve(_local(config, local))
    return 1  # not reached: the with block returns


def _local(config: ProxyConfig, local: dict[str, HostPort]) -> ProxyConfig:
    """The config with every cluster's bootstrap replaced by its local broker (plaintext)."""
    def here(cfg: UpstreamConfig, name: str) -> UpstreamConfig:
        return dataclasses.replace(cfg, bootstrap=[local[name]], tls=None, sasl=None)

    return dataclasses.replace(
        config, upstream=dataclasses.replace(config.upstream, bootstrap=[local["upstream"]]),
        clusters={name: here(c, name) for name, c in config.clusters.items()},
    )
