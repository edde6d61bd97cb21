"""The building blocks of configuration validation: a YAML mapping that knows its own path.

Every section of `proxy.yaml` is read through `Node`, so every error starts with the YAML path
of the bad key, and keys nobody read are refused as unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from interceptors.config.errors import ConfigError


@dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class Node:
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

    def child(self, key: str, required: bool = False) -> Node:
        return Node(self.get(key, {}, required), self.key_path(key))

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
