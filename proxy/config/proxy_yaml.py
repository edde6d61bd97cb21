"""`proxy.yaml`: the sections assembled into one `ProxyConfig`, with errors that name the YAML
path of the bad key.

Each section's types and parser live with the folder that uses them (`upstream/config.py`,
`serving/config.py`, `limits/config.py`, `routing/config.py`, ...); this module only calls
them, checks what spans sections, and checks the `interceptors` section through the
interceptors' own configuration layer. Validation happens once, on load (and on reload); the
running proxy only ever sees a fully valid `ProxyConfig`, so nothing on the hot path checks
configuration.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from configuration import ConfigError, ErrorCollector, Node, read_yaml
from interceptors.chains_from_yaml import build_chains
from proxy.limits.config import LimitsConfig, parse_limits
from proxy.native.config import NATIVE_RELAY_AUTO, parse_performance
from proxy.observability.config import LoggingConfig, parse_instance, parse_logging
from proxy.routing.config import RoutingConfig, parse_clusters, parse_routing
from proxy.security.kafka_clients import proxy_info
from proxy.serving.config import (
    AdminConfig,
    ListenConfig,
    parse_admin,
    parse_listen,
    parse_reload,
    parse_shutdown,
)
from proxy.upstream.config import UpstreamConfig, parse_upstream


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
    grace = top.section("shutdown", parse_shutdown)
    instance_id = top.section("instance", parse_instance, environ)
    native_relay = top.section("performance", parse_performance)
    watch_s = top.section("reload", parse_reload)

    interceptors = top.get("interceptors", {})
    if not isinstance(interceptors, dict):
        errors.add("interceptors: expected a mapping")
    else:
        top.attempt(_check_interceptors, interceptors, instance_id)
    clusters = top.section("clusters", parse_clusters) or {}
    routing = top.section("routing", parse_routing, set(clusters))
    top.get("pipeline")  # the analytics pipeline's section, validated by pipeline/config.py
    top.done()
    errors.check()
    # A section gives None only for errors it recorded, and `check` raised for those.
    assert (upstream is not None and listen is not None and limits is not None
            and admin is not None and logging_cfg is not None and grace is not None
            and watch_s is not None and routing is not None and native_relay is not None)
    named = {name: cluster for name, cluster in clusters.items() if cluster is not None}
    return ProxyConfig(
        upstream=upstream, listen=listen, limits=limits, admin=admin, logging=logging_cfg,
        shutdown_grace_s=grace, interceptors=interceptors, source=source,
        instance_id=instance_id, reload_watch_s=watch_s,
        clusters=named, routing=routing, native_relay=native_relay,
    )


def _check_injection_listens_locally(upstream: UpstreamConfig, listen: ListenConfig) -> None:
    if listen.bootstrap is None or upstream.sasl is None:
        return
    if not listen.allow_unauthenticated_clients and not _is_loopback(listen.bootstrap.host):
        raise ConfigError(
            "listen.bootstrap: with upstream.sasl set, Herald authenticates for "
            "every client, so it listens on a loopback address only; set "
            "listen.allow_unauthenticated_clients: true to accept clients from elsewhere"
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_interceptors(spec: dict[str, Any], instance_id: str | None) -> None:
    """The `interceptors` section as its own layer checks it: every member is built (a
    plugin may refuse its settings only when it starts) with the instance id the proxy
    names itself by, and with the Kafka clients service, which checks the `tls` and `sasl`
    sections a member names as `upstream`'s are. Nothing is started: members start their
    work on first use."""
    build_chains(spec, proxy_info(instance_id))


def load_config(path: str | Path) -> ProxyConfig:
    """Read and validate a YAML config file."""
    path = Path(path)
    return parse_config(read_yaml(path), source=path)
