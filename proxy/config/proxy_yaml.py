"""`proxy.yaml`: loading and validation, with errors that name the YAML path of the bad key.

Validation happens once, on load (and on reload); the running proxy only ever sees a fully
valid `ProxyConfig`, so nothing on the hot path checks configuration.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interceptors.config import (
    ConfigError,
    ErrorCollector,
    HostPort,
    Node,
    parse_host_port,
    read_yaml,
)
from proxy.config.env_expand import UnsetVariable, expand_env
from proxy.filters.member_services import build_chains, proxy_info
from proxy.limits.config import LimitsConfig, parse_limits
from proxy.routing.rules import RoutingConfig, parse_clusters, parse_routing
from proxy.security.config import (
    ClientTlsConfig,
    PassthroughSaslConfig,
    SaslClientConfig,
    SecretRef,
    ServerTlsConfig,
    parse_client_tls,
    parse_passthrough_sasl,
    parse_sasl_client,
    parse_secret,
    parse_server_tls,
)

NATIVE_RELAY_OFF = "off"
NATIVE_RELAY_AUTO = "auto"


class ListenError(OSError):
    """A configured address cannot be listened on (busy, not local); the message starts with
    the YAML path of the key that names it."""


@dataclass(frozen=True)
class UpstreamConfig:
    """One Kafka cluster Herald connects to: where it is and how to authenticate to it."""

    bootstrap: list[HostPort]
    connect_timeout_s: float = 10.0
    tls: ClientTlsConfig | None = None
    sasl: SaslClientConfig | None = None  # credential injection; None: clients authenticate


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


@dataclass(frozen=True)
class LoggingConfig:
    level: str = "warning"
    format: str = "kv"


@dataclass(frozen=True)
class ProxyConfig:
    upstream: UpstreamConfig
    listen: ListenConfig
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    shutdown_grace_s: float = 10.0
    interceptors: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None
    instance_id: str | None = None  # None: a random herald-<8 hex> per process
    reload_watch_s: float = 0.0  # 0: reload on SIGHUP only
    clusters: dict[str, UpstreamConfig] = field(default_factory=dict)  # named, for routing
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    native_relay: str = NATIVE_RELAY_AUTO  # performance.native_relay

    @property
    def advertised_bootstrap(self) -> str:
        return f"{self.listen.advertised_host}:{self.listen.bootstrap.port}"


def parse_config(
    data: Any, source: Path | None = None, environ: Mapping[str, str] | None = None
) -> ProxyConfig:
    """Validate a parsed YAML document into a `ProxyConfig`, or raise one `ConfigError` that
    lists every bad key of the document (each section is checked even when one before it
    failed).

    `environ` is what `${NAME}` references are expanded from (default: this process's
    environment); a config checked for another process passes that process's variables.
    """
    errors = ErrorCollector()
    top = Node(data if data is not None else {}, "", errors)

    upstream = top.section("upstream", parse_upstream, required=True)
    listen = top.section("listen", parse_listen, environ, required=True)
    if upstream is not None and listen is not None:
        top.attempt(_check_injection_listens_locally, upstream, listen)
    limits = top.section("limits", parse_limits)
    admin = top.section("admin", parse_admin)
    logging_cfg = top.section("logging", parse_logging)
    grace = top.section("shutdown", lambda n: _only(n, n.number("grace_s", 10.0, float, 0)))
    instance_id = top.section("instance", lambda n: _only(n, _expanded(n, "id", None, environ)))
    native_relay = top.section("performance", parse_performance)
    watch_s = top.section("reload", lambda n: _only(n, n.number("watch_s", 0.0, float, 0)))

    interceptors = top.get("interceptors", {})
    if not isinstance(interceptors, dict):
        errors.add("interceptors: expected a mapping")
    else:  # validation only, with the instance id the proxy builds its own chains with
        top.attempt(build_chains, interceptors, proxy_info(instance_id))
    clusters = top.section("clusters", parse_clusters, parse_upstream) or {}
    routing = top.section("routing", parse_routing, set(clusters))
    top.get("pipeline")  # the analytics pipeline's section, validated by pipeline/config.py
    top.done()
    errors.check()
    return ProxyConfig(
        upstream=upstream, listen=listen, limits=limits, admin=admin, logging=logging_cfg,
        shutdown_grace_s=grace, interceptors=interceptors, source=source,
        instance_id=instance_id, reload_watch_s=watch_s,
        clusters=clusters, routing=routing, native_relay=native_relay,
    )


def _only(node: Node, value: Any) -> Any:
    """`value`, read from `node`, which has no other key."""
    node.done()
    return value


def parse_listen(node: Node, environ: Mapping[str, str] | None = None) -> ListenConfig:
    """The `listen` section: where clients connect, and how they are served."""
    bootstrap = node.attempt(lambda: parse_host_port(node.get("bootstrap", required=True),
                                                     node.key_path("bootstrap")))
    listen = ListenConfig(
        bootstrap=bootstrap,
        advertised_host=_expanded(node, "advertised_host", "localhost", environ),
        broker_port_base=node.number("broker_port_base", 19100, int, 1),
        tls=node.attempt(parse_server_tls, node),
        sasl=node.attempt(parse_passthrough_sasl, node),
        allow_unauthenticated_clients=node.flag("allow_unauthenticated_clients", False),
    )
    if listen.broker_port_base > 65535:
        node.errors.add(f"{node.key_path('broker_port_base')}: must be <= 65535")
    node.done()
    return listen


def _check_injection_listens_locally(upstream: UpstreamConfig, listen: ListenConfig) -> None:
    if listen.bootstrap is None or upstream.sasl is None:
        return
    if not listen.allow_unauthenticated_clients and not _is_loopback(listen.bootstrap.host):
        raise ConfigError(
            "listen.bootstrap: with upstream.sasl set, Herald authenticates for "
            "every client, so it listens on a loopback address only; set "
            "listen.allow_unauthenticated_clients: true to accept clients from elsewhere"
        )


def parse_admin(node: Node) -> AdminConfig:
    """The `admin` section: the HTTP endpoint of metrics and health."""
    bind = node.get("bind")
    admin = AdminConfig(
        bind=node.attempt(parse_host_port, bind, node.key_path("bind")) if bind else None,
        topic_labels=node.attempt(_topic_names, node, "topic_labels"),
        tls=node.attempt(parse_server_tls, node),
        token=node.attempt(parse_secret, node, "token"),
    )
    if admin.tls is not None and admin.tls.client_auth != "none":
        node.errors.add(f"{node.key_path('tls')}.client_ca_file: not used by the admin endpoint")
    node.done()
    return admin


def parse_logging(node: Node) -> LoggingConfig:
    """The `logging` section: how much Herald logs, and in which line format."""
    return _only(node, LoggingConfig(
        level=node.choice("level", "warning", ("debug", "info", "warning", "error")),
        format=node.choice("format", "kv", ("kv", "json")),
    ))


def parse_performance(node: Node) -> str:
    """`performance.native_relay`: `auto`, the default (plaintext sessions move the frames no
    filter reads through the native relay, when it is built) or `off` (every session on the
    Python path: the way back should the engine misbehave somewhere).

    YAML 1.1 reads a bare `off` as false, so false means off too.
    """
    value = node.get("native_relay", NATIVE_RELAY_AUTO)
    if value is False:
        value = NATIVE_RELAY_OFF
    if value not in (NATIVE_RELAY_OFF, NATIVE_RELAY_AUTO):
        node.errors.add(f"{node.key_path('native_relay')}: expected off or auto, got {value!r}")
    return _only(node, value)


_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def parse_upstream(node: Node) -> UpstreamConfig:
    """One cluster's section (`upstream`, or a named cluster of the same shape)."""
    config = UpstreamConfig(
        bootstrap=node.attempt(_bootstrap, node),
        connect_timeout_s=node.number("connect_timeout_s", 10.0, float, 0.1),
        tls=node.attempt(parse_client_tls, node),
        sasl=node.attempt(parse_sasl_client, node),
    )
    return _only(node, config)


def _bootstrap(node: Node) -> list[HostPort]:
    raw = node.get("bootstrap", required=True)
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{node.key_path('bootstrap')}: expected HOST:PORT or a list of them")
    return [parse_host_port(s.strip() if isinstance(s, str) else s, node.key_path("bootstrap"))
            for s in items]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


def _expanded(
    node: Node, key: str, default: str | None, environ: Mapping[str, str] | None
) -> Any:
    """A string in which `${NAME}` is replaced by the environment variable (see env_expand)."""
    text = node.string(key)
    if text is None:
        return default
    try:
        value = expand_env(text, environ)
    except UnsetVariable as exc:
        node.errors.add(f"{node.key_path(key)}: {exc}")
        return default
    if not value:
        node.errors.add(f"{node.key_path(key)}: {text!r} expands to an empty string")
        return default
    return value


def load_config(path: str | Path) -> ProxyConfig:
    """Read and validate a YAML config file."""
    path = Path(path)
    return parse_config(read_yaml(path), source=path)
