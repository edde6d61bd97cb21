"""``drop_headers``: remove headers by name or pattern (either path).

On the fetch path it strips headers before clients see them (internal debugging headers,
headers of another tenant). Patterns use the common syntax of `interceptors.patterns`.
"""

from __future__ import annotations

from dataclasses import dataclass

from interceptors.api import Interceptor
from interceptors.context import ProxyInfo, RecordContext
from interceptors.errors import InvalidConfig
from interceptors.headers import Headers
from interceptors.patterns import matcher


@dataclass
class DropHeadersConfig:
    headers: list[str]

    def __post_init__(self) -> None:
        if not self.headers:
            raise InvalidConfig("headers", "must not be empty")


class DropHeaders(Interceptor):
    Config = DropHeadersConfig
    concurrent = True

    def __init__(self, config: DropHeadersConfig, env: ProxyInfo) -> None:
        super().__init__(config, env)
        match = matcher(config.headers, "headers")
        # Plain names: frozenset.__contains__ runs in C, no Python call per header.
        self._match = match.names.__contains__ if match.exact_only else match

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        if len(headers):
            headers.remove_if(self._match)
