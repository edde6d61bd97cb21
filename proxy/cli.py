"""The `herald` command.

`herald run --config FILE` is the production mode: the proxy alone, in front of the cluster the
file names. `herald dev` is the try-it-now mode: it starts a local single-node Apache Kafka
broker (KRaft; jars fetched once with Maven and cached) and the proxy in front of it.
`herald check --config FILE` validates a file as `run` would, and reports every error, without
serving (for CI of configuration changes, like `nginx -t`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from interceptors.config import ConfigError, ErrorCollector, HostPort, read_yaml
from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_VERSION
from proxy.config.proxy_yaml import ProxyConfig, load_config, parse_config
from proxy.k8s import command as k8s_command
from proxy.net.config import ListenError
from proxy.observability import logs
from proxy.upstream.config import UpstreamConfig

DESCRIPTION = """Herald: a header-aware Kafka proxy.

Point any Kafka client at Herald's bootstrap address instead of the brokers. Herald forwards
every request, rewrites broker addresses to its own (broker N is reached at
listen.broker_port_base + N) and runs the interceptor chains of the config file.

When clients can connect, Herald prints one line:
  herald ready: bootstrap=HOST:PORT upstream=HOST:PORT
SIGTERM or Ctrl-C stops accepting, lets in-flight requests finish within shutdown.grace_s, and
exits. SIGHUP reloads the interceptor chains and routing rules from the config file (an
invalid file is refused and the running ones stay) and re-reads certificate files that
changed.

Secured clusters: listen.tls, upstream.tls, upstream.sasl (Herald authenticates for its
clients), admin.tls and admin.token; see docs/security.md.

Admin endpoint (admin.bind): /metrics, /healthz, /readyz. Traces: the standard OTEL_*
environment variables (off unless an exporter or OTLP endpoint is set).

`herald check --config FILE` validates the file as `run` does before serving and exits 0
(`FILE: ok`) or 1, with every error on stderr, one per line, each naming its YAML path.
"""


def herald_version() -> str:
    """The installed distribution's version (a source tree that was never installed has
    none: `0+unknown`)."""
    try:
        return version("herald")
    except PackageNotFoundError:
        return "0+unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="herald", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"herald {herald_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run", help="run the proxy in front of the cluster named in the config",
        description="Run the proxy in front of upstream.bootstrap of the config file.",
    )
    run.add_argument("--config", "-c", required=True, type=Path, help="the YAML config file")

    dev = sub.add_parser(
        "dev", help="start a local Kafka broker and the proxy in front of it",
        description=(
            "Start a local single-node KRaft Apache Kafka broker (jars from Maven Central, "
            "cached in .cache/) on a free loopback port, and Herald in front of it, configured "
            "by the config file; its upstream.bootstrap is replaced by the local broker. Each "
            "cluster named under `clusters:` (routing destinations) gets a local broker too."
        ),
    )
    dev.add_argument("--config", "-c", type=Path, default=Path("proxy.yaml"),
                     help="the YAML config file (default: proxy.yaml)")
    dev.add_argument("--kafka-version", default=KAFKA_VERSION,
                     help=f"Kafka release to run (default {KAFKA_VERSION}; "
                          f"{KAFKA_LEGACY_VERSION} is also tested)")
    check = sub.add_parser(
        "check", help="validate a config file as run would, without serving",
        description=(
            "Load and validate the config file as `herald run` does before it serves: every "
            "section, the interceptor chains (plugins loaded), the routing rules, and the "
            "files it names (TLS certificates and keys, secret files) read. Nothing is bound "
            "or connected to. A `pipeline:` section is checked as `herald pipeline` reads it. "
            "Exit status 0 with `FILE: ok` on stdout, or 1 with every error on stderr, one "
            "per line, each naming the YAML path of its key."
        ),
    )
    check.add_argument("--config", "-c", required=True, type=Path, help="the YAML config file")
    k8s_command.add_parser(sub)
    sub.add_parser("pipeline", add_help=False,
                   help="the analytics pipeline on Spark (herald pipeline --help)")
    return parser


def _ready_line(config: ProxyConfig) -> str:
    upstream = ",".join(str(a) for a in config.upstream.bootstrap)
    return f"herald ready: bootstrap={config.advertised_bootstrap} upstream={upstream}"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def _serve(config: ProxyConfig) -> int:
    """Run the proxy; exit status 1 when a configured address cannot be listened on."""
    from proxy.server import run

    logs.configure(config.logging.level, config.logging.format)
    failed: list[BaseException] = []
    try:
        run(config, on_ready=lambda _proxy: print(_ready_line(config), flush=True))
    except* ListenError as group:  # raised from inside the proxy's (nested) task nurseries
        failed.extend(_leaves(group))
    if failed:
        print(f"herald: cannot listen: {failed[0]}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pipeline"]:  # imported only here: Herald itself never loads Spark
        from pipeline.cli import main as pipeline_main

        return pipeline_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "k8s":
        return k8s_command.run(args)
    if args.command == "check":
        return _check(args.config)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        for error in exc.errors:
            print(f"herald: invalid config: {error}", file=sys.stderr)
        return 2
    if args.command == "run":
        return _serve(config)

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


def _check(path: Path) -> int:
    """`herald check`: exit status 0 when `run` would accept the file, else 1 and every error
    (`FILE: YAML.PATH: message`), one per line on stderr."""
    try:
        doc = read_yaml(path)
    except ConfigError as exc:  # unreadable or not YAML: the message names the file
        print(exc, file=sys.stderr)
        return 1
    errors = ErrorCollector()
    errors.attempt(parse_config, doc, path)
    if isinstance(doc, dict) and doc.get("pipeline") is not None:
        # The same file feeds `herald pipeline`; its config module imports no Spark.
        from pipeline.config import parse_pipeline_config

        errors.attempt(parse_pipeline_config, doc["pipeline"])
    for error in errors.errors:
        print(f"{path}: {error}", file=sys.stderr)
    if errors.errors:
        return 1
    print(f"{path}: ok")
    return 0


def _local(config: ProxyConfig, local: dict[str, HostPort]) -> ProxyConfig:
    """The config with every cluster's bootstrap replaced by its local broker (plaintext)."""
    def here(cfg: UpstreamConfig, name: str) -> UpstreamConfig:
        return dataclasses.replace(cfg, bootstrap=[local[name]], tls=None, sasl=None)

    return dataclasses.replace(
        config, upstream=dataclasses.replace(config.upstream, bootstrap=[local["upstream"]]),
        clusters={name: here(c, name) for name, c in config.clusters.items()},
    )

if __name__ == "__main__":
    sys.exit(main())
