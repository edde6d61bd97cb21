"""The one error type of Herald's configuration, whatever section or member it comes from.

Every loader (the proxy's sections, the interceptor members, routing, security, the Kubernetes
injector, the pipeline) raises `ConfigError` with a message that starts with the YAML path of
the bad key, so operators and `herald check` see the same text everywhere.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """Invalid configuration. The message starts with the YAML path of the bad key, e.g.
    ``interceptors.produce[2].header: required``."""


class InvalidConfig(ValueError):
    """Raised by a config dataclass (`__post_init__`) or an interceptor constructor to reject
    a setting. `field` is the YAML key at fault (empty for the member as a whole); the loader
    turns it into a `ConfigError` carrying the full path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message
