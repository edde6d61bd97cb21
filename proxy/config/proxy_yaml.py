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

from interceptors import ConfigError as InterceptorConfigError
from interceptors import build_chains
from interceptors.config import ConfigError, HostPort, parse_host_port, read_yaml
from interceptors.config import Node as _Node
from proxy.config.env_expand import UnsetVariable, expand_env
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
    """Validate a parsed YAML document into a `ProxyConfig`.

    `environ` is what `${NAME}` references are expanded from (default: this process's
    environment); a config checked for another process passes that process's variables.
    """
    top = _Node(data if data is not None else {}, "")

    upstream = parse_upstream(top.child("upstream", required=True))

    ls = top.child("listen", required=True)
    listen = ListenConfig(
        bootstrap=parse_host_port(ls.get("bootstrap", required=True), ls.key_path("bootstrap")),
        advertised_host=_expanded(ls, "advertised_host", "localhost", environ),
        broker_port_base=ls.number("broker_port_base", 19100, int, 1),
        tls=parse_server_tls(ls),
        sasl=parse_passthrough_sasl(ls),
        allow_unauthenticated_clients=_flag(ls, "allow_unauthenticated_clients", False),
    )
    if upstream.sasl is not None and not listen.allow_unauthenticated_clients and not (
        _is_loopback(listen.bootstrap.host)
    ):
        raise ConfigError(
            f"{ls.key_path('bootstrap')}: with upstream.sasl set, Herald authenticates for "
            "every client, so it listens on a loopback address only; set "
            "listen.allow_unauthenticated_clients: true to accept clients from elsewhere"
        )
    if listen.broker_port_base > 65535:
        raise ConfigError(f"{ls.key_path('broker_port_base')}: must be <= 65535")
    ls.done()

    limits = parse_limits(top.child("limits"))

    adm = top.child("admin")
    bind = adm.get("bind")
    admin = AdminConfig(
        bind=parse_host_port(bind, adm.key_path("bind")) if bind else None,
        topic_labels=_topic_names(adm, "topic_labels"),
        tls=parse_server_tls(adm),
        token=parse_secret(adm, "token"),
    )
    if admin.tls is not None and admin.tls.client_auth != "none":
        raise ConfigError(f"{adm.key_path('tls')}.client_ca_file: not used by the admin endpoint")
    adm.done()

    lg = top.child("logging")
    logging_cfg = LoggingConfig(
        level=lg.choice("level", "warning", ("debug", "info", "warning", "error")),
        format=lg.choice("format", "kv", ("kv", "json")),
    )
    lg.done()

    sd = top.child("shutdown")
    grace = sd.number("grace_s", 10.0, float, 0)
    sd.done()

    inst = top.child("instance")
    instance_id = _expanded(inst, "id", None, environ)
    inst.done()

    native_relay = parse_performance(top.child("performance"))

    rl = top.child("reload")
    watch_s = rl.number("watch_s", 0.0, float, 0)
    rl.done()

    interceptors = top.get("interceptors", {})
    if not isinstance(interceptors, dict):
        raise ConfigError("interceptors: expected a mapping")
    try:
        build_chains(interceptors)  # validation only; the proxy builds its own chains
    except InterceptorConfigError as exc:
        raise ConfigError(str(exc)) from None
    clusters = parse_clusters(top.child("clusters"), parse_upstream)
    routing = parse_routing(top.child("routing"), set(clusters))
    top.get("pipeline")  # the analytics pipeline's section, validated by pipeline/config.py
    top.done()
    return ProxyConfig(
        upstream=upstream, listen=listen, limits=limits, admin=admin, logging=logging_cfg,
        shutdown_grace_s=grace, interceptors=interceptors, source=source,
        instance_id=instance_id, reload_watch_s=watch_s,
        clusters=clusters, routing=routing, native_relay=native_relay,
    )


def parse_performance(node: _Node) -> str:
    """`performance.native_relay`: `auto`, the default (plaintext sessions move the frames no
    filter reads through the native relay, when it is built) or `off` (every session on the
    Python path: the way back should the engine misbehave somewhere).

    YAML 1.1 reads a bare `off` as false, so false means off too.
    """
    value = node.get("native_relay", NATIVE_RELAY_AUTO)
    if value is False:
        value = NATIVE_RELAY_OFF
    if value not in (NATIVE_RELAY_OFF, NATIVE_RELAY_AUTO):
        raise ConfigError(f"{node.key_path('native_relay')}: expected off or auto, got {value!r}")
    node.done()
    return value


_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def parse_upstream(node: _Node) -> UpstreamConfig:
    """One cluster's section (`upstream`, or a named cluster of the same shape)."""
    raw_bootstrap = node.get("bootstrap", required=True)
    items = raw_bootstrap.split(",") if isinstance(raw_bootstrap, str) else raw_bootstrap
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{node.key_path('bootstrap')}: expected HOST:PORT or a list of them")
    config = UpstreamConfig(
        bootstrap=[parse_host_port(s.strip() if isinstance(s, str) else s,
                                   f"{node.key_path('bootstrap')}") for s in items],
        connect_timeout_s=node.number("connect_timeout_s", 10.0, float, 0.1),
        tls=parse_client_tls(node),
        sasl=parse_sasl_client(node),
    )
    node.done()
    return config


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _flag(node: _Node, key: str, default: bool) -> bool:
    value = node.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{node.key_path(key)}: expected true or false, got {value!r}")
    return value


def _topic_names(node: _Node, key: str) -> tuple[str, ...]:
    """A list of Kafka topic names (the metric label allowlist): exact names, no patterns,
    because every entry becomes a label value."""
    value = node.get(key, [])
    path = node.key_path(key)
    if not isinstance(value, list):
        raise ConfigError(f"{path}: expected a list of topic names")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
            raise ConfigError(f"{path}[{i}]: expected a topic name, got {name!r}")
    return tuple(dict.fromkeys(value))


def _string(node: _Node, key: str, default: str) -> str:
    value = node.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{node.key_path(key)}: expected a non-empty string")
    return value


def _expanded(
    node: _Node, key: str, default: str | None, environ: Mapping[str, str] | None
) -> Any:
    """A string in which `${NAME}` is replaced by the environment variable (see env_expand)."""
    if node.get(key) is None:
        return default
    text = _string(node, key, "")
    try:
        value = expand_env(text, environ)
    except UnsetVariable as exc:
        raise ConfigError(f"{node.key_path(key)}: {exc}") from None
    if not value:
        raise ConfigError(f"{node.key_path(key)}: {text!r} expands to an empty string")
    return value


def load_config(path: str | Path) -> ProxyConfig:
    """Read and validate a YAML config file."""
    path = Path(path)
    try:
        data = read_yaml(path)
    except InterceptorConfigError as exc:
        raise ConfigError(str(exc)) from None
    return parse_config(data, source=path)
