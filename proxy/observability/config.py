"""The sections of how Herald shows itself: `logging` (how much it logs, in which line
format) and `instance` (the name it stamps on what it writes, `herald.proxy`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from configuration import Node
from configuration.env_expand import expanded


@dataclass(frozen=True)
class LoggingConfig:
    level: str = "warning"
    format: str = "kv"


def parse_logging(node: Node) -> LoggingConfig:
    """The `logging` section: how much Herald logs, and in which line format."""
    config = LoggingConfig(
        level=node.choice("level", "warning", ("debug", "info", "warning", "error")),
        format=node.choice("format", "kv", ("kv", "json")),
    )
    node.done()
    return config


def parse_instance(node: Node, environ: Mapping[str, str] | None = None) -> str | None:
    """`instance.id`, `${NAME}` expanded from `environ` (None: a random one per process)."""
    instance_id: str | None = expanded(node, "id", None, environ)
    node.done()
    return instance_id
