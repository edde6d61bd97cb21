"""The building blocks of configuration validation: a YAML mapping that knows its own path.

Every hand-read section of `proxy.yaml` is read through `Node`, so every error starts with the
YAML path of the bad key, and keys nobody read are refused as unknown. A node shares its
`ErrorCollector` with its children: a wrong value is recorded and its default used, so the
rest of the document is still checked; a missing required key or a value nothing sensible can
replace raises `ConfigError`, which ends the piece being read (`attempt`, `section`) and is
recorded there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from configuration.errors import ConfigError, ErrorCollector

T = TypeVar("T")


@dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class Node:
    """A mapping being validated, which knows its own path and which keys were consumed.

    Without `errors`, the first error raises (a strict collector): what a caller that reads
    one small piece on its own expects.
    """

    def __init__(self, data: Any, path: str, errors: ErrorCollector | None = None) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{path or '(top level)'}: expected a mapping")
        self.data = data
        self.path = path
        self.used: set[str] = set()
        self.errors = errors if errors is not None else ErrorCollector(strict=True)

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
        return Node(self.get(key, {}, required), self.key_path(key), self.errors)

    def number(self, key: str, default: float, kind: type = int, minimum: float = 0) -> Any:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or (
            kind is int and not isinstance(value, int)
        ):
            self.errors.add(f"{self.key_path(key)}: expected {kind.__name__}, got {value!r}")
            return default
        if value < minimum:
            self.errors.add(f"{self.key_path(key)}: must be >= {minimum}, got {value!r}")
            return default
        return value

    def choice(self, key: str, default: str, options: tuple[str, ...]) -> str:
        value = self.get(key, default)
        if value not in options:
            self.errors.add(f"{self.key_path(key)}: expected one of {options}, got {value!r}")
            return default
        chosen: str = value
        return chosen

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            self.errors.add(f"{self.key_path(key)}: expected true or false, got {value!r}")
            return default
        return value

    def string(self, key: str, default: Any = None) -> Any:
        """A non-empty string (`default` when the key is absent)."""
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, str) or not value:
            self.errors.add(f"{self.key_path(key)}: expected a non-empty string")
            return default
        return value

    def attempt(self, parse: Callable[..., T], *args: Any) -> T | None:
        """`parse(*args)` as an independent piece: its `ConfigError` is recorded and None
        returned, so what follows is still checked (see `ErrorCollector.attempt`)."""
        return self.errors.attempt(parse, *args)

    def section(self, key: str, parse: Callable[..., T], *args: Any,
                required: bool = False) -> T | None:
        """`parse(child, *args)` for the mapping under `key`, as an independent piece."""
        return self.attempt(lambda: parse(self.child(key, required), *args))

    @property
    def valid(self) -> bool:
        """No error recorded for this mapping or below it so far."""
        return self.errors.clean_under(self.path)

    def done(self) -> None:
        """Every key nobody read is an error."""
        for key in sorted(set(self.data) - self.used, key=str):
            self.errors.add(f"{self.key_path(str(key))}: unknown key")


def parse_host_port(text: Any, path: str) -> HostPort:
    if not isinstance(text, str) or ":" not in text:
        raise ConfigError(f"{path}: expected HOST:PORT, got {text!r}")
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{path}: expected HOST:PORT, got {text!r}")
    return HostPort(host, int(port))
