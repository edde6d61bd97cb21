"""The sections of what Herald serves: `listen` (where clients connect, and how they are
served), `admin` (the HTTP endpoint of metrics and health), `shutdown` and `reload`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from configuration import ConfigError, HostPort, Node, parse_host_port
from configuration.env_expand import expanded
from proxy.security.config import (
    PassthroughSaslConfig,
    SecretRef,
    ServerTlsConfig,
    parse_passthrough_sasl,
    parse_secret,
    parse_server_tls,
)

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass(frozen=True)
class ListenConfig:
    bootstrap: HostPort
    advertised_host: str
    broker_port_base: int
    tls: ServerTlsConfig | None = None
    sasl: PassthroughSaslConfig = field(default_factory=PassthroughSaslConfig)
    allow_unauthenticated_clients: bool = False


@dataclass(frozen=True)
class AdminConfig:
    bind: HostPort | None = None
    topic_labels: tuple[str, ...] = ()
    tls: ServerTlsConfig | None = None
    token: SecretRef | None = None  # bearer token required for /metrics


def parse_listen(node: Node, environ: Mapping[str, str] | None = None) -> ListenConfig:
    """The `listen` section: where clients connect, and how they are served."""
    bootstrap = node.attempt(lambda: parse_host_port(node.get("bootstrap", required=True),
                                                     node.key_path("bootstrap")))
    # A piece that failed is None here, its error recorded: a load with errors is refused.
    listen = ListenConfig(
        bootstrap=bootstrap,  # type: ignore[arg-type]  # None only on a refused load
        advertised_host=expanded(node, "advertised_host", "localhost", environ),
        broker_port_base=node.number("broker_port_base", 19100, int, 1),
        tls=node.attempt(parse_server_tls, node),
        sasl=node.attempt(parse_passthrough_sasl, node),  # type: ignore[arg-type]  # as above
        allow_unauthenticated_clients=node.flag("allow_unauthenticated_clients", False),
    )
    if listen.broker_port_base > 65535:
        node.errors.add(f"{node.key_path('broker_port_base')}: must be <= 65535")
    node.done()
    return listen


def parse_admin(node: Node) -> AdminConfig:
    """The `admin` section: the HTTP endpoint of metrics and health."""
    bind = node.get("bind")
    admin = AdminConfig(
        bind=node.attempt(parse_host_port, bind, node.key_path("bind")) if bind else None,
        # None when the list failed, its error recorded: a load with errors is refused.
        topic_labels=node.attempt(_topic_names, node, "topic_labels"),  # type: ignore[arg-type]
        tls=node.attempt(parse_server_tls, node),
        token=node.attempt(parse_secret, node, "token"),
    )
    if admin.tls is not None and admin.tls.client_auth != "none":
        node.errors.add(f"{node.key_path('tls')}.client_ca_file: not used by the admin endpoint")
    node.done()
    return admin


def parse_shutdown(node: Node) -> float:
    """`shutdown.grace_s`: how long open connections may drain on shutdown."""
    grace: float = node.number("grace_s", 10.0, float, 0)
    node.done()
    return grace


def parse_reload(node: Node) -> float:
    """`reload.watch_s`: how often the config file is looked at for a change (0: reload on
    SIGHUP only)."""
    watch_s: float = node.number("watch_s", 0.0, float, 0)
    node.done()
    return watch_s


def _topic_names(node: Node, key: str) -> tuple[str, ...]:
    """A list of Kafka topic names (the metric label allowlist): exact names, no patterns,
    because every entry becomes a label value."""
    value = node.get(key, [])
    path = node.key_path(key)
    if not isinstance(value, list):
        raise ConfigError(f"{path}: expected a list of topic names")
    names = []
    for i, name in enumerate(value):
        if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
            node.errors.add(f"{path}[{i}]: expected a topic name, got {name!r}")
        else:
            names.append(name)
    return tuple(dict.fromkeys(names))
