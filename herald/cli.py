"""The `herald` command.

`herald run --config FILE` is the production mode: the proxy alone, in front of the cluster the
file names. `herald dev` is the try-it-now mode: a local single-node Apache Kafka broker and
the proxy in front of it. `herald check --config FILE` validates a file as `run` would, and
reports every error, without serving. `herald k8s` and `herald pipeline` are the Kubernetes
injector and the analytics pipeline.

Each subcommand is found in `herald.registry` and its package imported only when it is run,
so `herald run` never loads the pipeline's Spark and `herald pipeline` never the proxy.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

from configuration import ConfigError
from herald.registry import COMMANDS, Command, NotInstalled, resolve
from herald.sections import read_sections, report

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
(`FILE: ok`) or 1, with every error on stderr, one per line, each naming its YAML path;
`run` and `dev` refuse a bad file the same way.
"""


def herald_version() -> str:
    """The installed distribution's version (a source tree that was never installed has
    none: `0+unknown`)."""
    try:
        return version("herald")
    except PackageNotFoundError:
        return "0+unknown"


def _parser() -> argparse.ArgumentParser:
    """The top level: `--help` (every command, none of them imported) and `--version`."""
    parser = argparse.ArgumentParser(
        prog="herald", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"herald {herald_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub.add_parser(command.name, help=command.help, add_help=False)
    return parser


def command_parser(command: Command) -> argparse.ArgumentParser:
    """The parser of one command: its own arguments, added by the package that provides it."""
    parser = argparse.ArgumentParser(
        prog=f"herald {command.name}", description=command.help,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if command.arguments is not None:
        resolve(command.arguments)(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((c for c in COMMANDS if argv[:1] == [c.name]), None)
    if command is None:
        _parser().parse_args(argv)  # --help, --version, or a usage error: each exits
        return 2
    try:
        run = resolve(command.run)
        parser = None if command.arguments is None else command_parser(command)
    except NotInstalled as exc:
        print(f"herald {command.name}: not available here ({exc})", file=sys.stderr)
        return 2
    status: int
    if parser is None:  # the command reads its own arguments
        status = run(argv[1:])
        return status
    args = parser.parse_args(argv[1:])
    if command.section is None:
        status = run(args)
        return status
    try:
        sections = read_sections(args.config)
    except ConfigError as exc:
        return report(exc)
    status = run(args, sections[command.section])
    return status


if __name__ == "__main__":
    sys.exit(main())
