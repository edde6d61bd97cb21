"""`proxy.yaml`: loading and validation, with errors that name the YAML path of the bad key.

Validation happens once, on load (and on reload); the running proxy only ever sees a fully
valid `ProxyConfig`, so nothing on the hot path checks configuration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from interceptors import ConfigError as InterceptorConfigError
from interceptors import build_chains
from protocol.framing import DEFAULT_MAX_FRAME_BYTES


class ConfigError(ValueError):
    """Invalid configuration; the message starts with the YAML path of the bad key."""


class ListenError(OSError):
    """A configured address cannot be listened on (busy, not local); the message starts with
    the YAML path of the key that names it."""


@dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class UpstreamConfig:
    bootstrap: list[HostPort]
    connect_timeout_s: float = 10.0


@dataclass(frozen=True)
class ListenConfig:
    bootstrap: HostPort
    advertised_host: str
    broker_port_base: int


@dataclass(frozen=True)
class LimitsConfig:
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_in_flight: int = 1000


@dataclass(frozen=True)
class AdminConfig:
    bind: HostPort | None = None
    topic_labels: tuple[str, ...] = ()


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

    @property
    def advertised_bootstrap(self) -> str:
        return f"{self.listen.advertised_host}:{self.listen.bootstrap.port}"


class _Node:
    """A mapping being validated, which knows its own path and which keys were consumed."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{path or '(top level)'}: expected a mapping")
        self.data = data
        self.path = path
        self.used: set[str] = set()

    def key_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, default: Any = None, required: bool = False) -> Any:
        self.used.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                raise ConfigError(f"{self.key_path(key)}: required")
            return default
        return self.data[key]

    def child(self, key: str, required: bool = False) -> _Node:
        return _Node(self.get(key, {}, required), self.key_path(key))

    def number(self, key: str, default: float, kind: type = int, minimum: float = 0) -> Any:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or (
            kind is int and not isinstance(value, int)
        ):
            raise ConfigError(f"{self.key_path(key)}: expected {kind.__name__}, got {value!r}")
        if value < minimum:
            raise ConfigError(f"{self.key_path(key)}: must be >= {minimum}, got {value!r}")
        return value

    def choice(self, key: str, default: str, options: tuple[str, ...]) -> str:
        value = self.get(key, default)
        if value not in options:
            raise ConfigError(f"{self.key_path(key)}: expected one of {options}, got {value!r}")
        return value

    def done(self) -> None:
        extra = sorted(set(self.data) - self.used)
        if extra:
            raise ConfigError(f"{self.key_path(str(extra[0]))}: unknown key")


def parse_host_port(text: Any, path: str) -> HostPort:
    if not isinstance(text, str) or ":" not in text:
        raise ConfigError(f"{path}: expected HOST:PORT, got {text!r}")
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{path}: expected HOST:PORT, got {text!r}")
    return HostPort(host, int(port))


def parse_config(data: Any, source: Path | None = None) -> ProxyConfig:
    """Validate a parsed YAML document into a `ProxyConfig`."""
    top = _Node(data if data is not None else {}, "")

    up = top.child("upstream", required=True)
    raw_bootstrap = up.get("bootstrap", required=True)
    items = raw_bootstrap.split(",") if isinstance(raw_bootstrap, str) else raw_bootstrap
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{up.key_path('bootstrap')}: expected HOST:PORT or a list of them")
    upstream = UpstreamConfig(
        bootstrap=[parse_host_port(s.strip() if isinstance(s, str) else s,
                                   f"{up.key_path('bootstrap')}") for s in items],
        connect_timeout_s=up.number("connect_timeout_s", 10.0, float, 0.1),
    )
    up.done()

    ls = top.child("listen", required=True)
    listen = ListenConfig(
        bootstrap=parse_host_port(ls.get("bootstrap", required=True), ls.key_path("bootstrap")),
        advertised_host=_string(ls, "advertised_host", "localhost"),
        broker_port_base=ls.number("broker_port_base", 19100, int, 1),
    )
    if listen.broker_port_base > 65535:
        raise ConfigError(f"{ls.key_path('broker_port_base')}: must be <= 65535")
    ls.done()

    lim = top.child("limits")
    limits = LimitsConfig(
        max_frame_bytes=lim.number("max_frame_bytes", DEFAULT_MAX_FRAME_BYTES, int, 1024),
        max_in_flight=lim.number("max_in_flight", 1000, int, 1),
    )
    lim.done()

    adm = top.child("admin")
    bind = adm.get("bind")
    admin = AdminConfig(
        bind=parse_host_port(bind, adm.key_path("bind")) if bind else None,
        topic_labels=_topic_names(adm, "topic_labels"),
    )
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

    interceptors = top.get("interceptors", {})
    if not isinstance(interceptors, dict):
        raise ConfigError("interceptors: expected a mapping")
    try:
        build_chains(interceptors)  # validation only; the proxy builds its own chains
    except InterceptorConfigError as exc:
        raise ConfigError(str(exc)) from None
    top.get("pipeline")  # the analytics pipeline's section, validated by pipeline/config.py
    top.done()
    return ProxyConfig(
        upstream=upstream, listen=listen, limits=limits, admin=admin, logging=logging_cfg,
        shutdown_grace_s=grace, interceptors=interceptors, source=source,
    )


_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


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


def load_config(path: str | Path) -> ProxyConfig:
    """Read and validate a YAML config file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return parse_config(data, source=path)
