"""The one error type of Herald's configuration, whatever section or member it comes from, and
the collector that lets validation go on past the first error.

Every loader (the proxy's sections, the interceptor members, routing, security, the Kubernetes
injector, the pipeline) raises `ConfigError` with messages that start with the YAML path of
the bad key, so operators and `herald check` see the same text everywhere.

A file with three mistakes should cost one round of fixing, not three: loaders record what is
wrong in an `ErrorCollector` and carry on with the default (or skip the piece that cannot be
read), and the collector raises one `ConfigError` listing every error at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """Invalid configuration: one message per bad key, each starting with its YAML path, e.g.
    ``interceptors.produce[2].header: required``. `str()` is the messages, one per line."""

    def __init__(self, *errors: str) -> None:
        self.errors: tuple[str, ...] = tuple(dict.fromkeys(errors)) or ("invalid configuration",)
        super().__init__(*self.errors)

    def __str__(self) -> str:
        return "\n".join(self.errors)


class InvalidConfig(ValueError):
    """Raised by a config dataclass (`__post_init__`) or an interceptor constructor to reject
    a setting. `field` is the YAML key at fault (empty for the member as a whole); the loader
    turns it into a `ConfigError` carrying the full path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message

    def at(self, path: str) -> ConfigError:
        """This rejection as a `ConfigError` of the mapping found at `path`."""
        return ConfigError(f"{path}.{self.field}: {self.message}" if self.field
                           else f"{path}: {self.message}")


class ErrorCollector:
    """The errors found so far while validating one document.

    `strict` collectors raise at the first error instead (what a caller that parses one small
    piece on its own wants); otherwise `add` records and the loader carries on, `attempt` runs
    an independent piece (a section, a chain member, a routing rule) and records whatever
    `ConfigError` it raises, and `check` raises one `ConfigError` with everything at the end.
    """

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.errors: list[str] = []

    def add(self, message: str) -> None:
        if self.strict:
            raise ConfigError(message)
        self.errors.append(message)

    def attempt(self, parse: Callable[..., T], *args: Any) -> T | None:
        """`parse(*args)`, or None once the errors it raised are recorded (strict: raised)."""
        if self.strict:
            return parse(*args)
        try:
            return parse(*args)
        except ConfigError as exc:
            self.errors.extend(exc.errors)
            return None

    def clean_under(self, path: str) -> bool:
        """Whether no error was recorded for `path` or a key below it: checks that combine
        several keys run only on values that were read correctly, so one mistake is reported
        once rather than again by every check that uses it."""
        if not path:
            return not self.errors
        return not any(e.startswith(path) and e[len(path):len(path) + 1] in (".", "[", ":")
                       for e in self.errors)

    def check(self) -> None:
        """Raise one `ConfigError` with every error recorded, if there is any."""
        if self.errors:
            raise ConfigError(*self.errors)
