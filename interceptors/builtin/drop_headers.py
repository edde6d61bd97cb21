"""``drop_headers``: remove headers by name or pattern (either path).

On the fetch path it strips headers before clients see them (internal debugging headers,
headers of another tenant). Patterns use the common syntax of `interceptors.patterns`.

With names and prefixes only, it declares them as what it watches (`Stamps`, appending
nothing): the engine then checks each batch for such keys in one native pass, and a batch
that carries none goes on as the bytes it came in, without its records being read in Python.
Most batches carry none: the headers dropped are the exception a policy guards against.
"""

from __future__ import annotations

from dataclasses import dataclass

from configuration import InvalidConfig
from interceptors.api import ColumnValue, Interceptor, Stamps
from interceptors.context import ProxyInfo, RecordContext
from interceptors.headers import Headers
from interceptors.patterns import matcher

_NO_COLUMNS: tuple[ColumnValue, ...] = ()


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
        if match.plain:
            self.stamps = Stamps((), watches=match.names, watch_prefixes=match.prefixes)

    def columns(self, ctx: RecordContext) -> tuple[ColumnValue, ...]:
        return _NO_COLUMNS  # it appends nothing

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        if len(headers):
            headers.remove_if(self._match)
