"""`herald check --config FILE`: validate a file as `herald run` would, and report every error,
without serving (for CI of configuration changes, like `nginx -t`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from configuration import ConfigError
from herald.sections import read_sections, report

DESCRIPTION = (
    "Load and validate the config file as `herald run` does before it serves: every section, "
    "the interceptor chains (plugins loaded), the routing rules, and the files it names (TLS "
    "certificates and keys, secret files) read. Nothing is bound or connected to. A "
    "`pipeline:` section is checked as `herald pipeline` reads it. Exit status 0 with "
    "`FILE: ok` on stdout, or 1 with every error on stderr, one per line, each naming the "
    "YAML path of its key."
)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.add_argument("--config", "-c", required=True, type=Path, help="the YAML config file")


def check(args: argparse.Namespace) -> int:
    """Exit status 0 when `run` would accept the file, else 1 and every error (`FILE:
    YAML.PATH: message`), one per line on stderr."""
    try:
        read_sections(args.config)
    except ConfigError as exc:
        return report(exc)
    print(f"{args.config}: ok")
    return 0
