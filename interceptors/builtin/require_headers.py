"""``require_headers``: refuse records that lack headers (produce path).

A record without one of the listed headers (or, with ``allow_null: false``, with only null
values for it) makes the whole partition fail with INVALID_RECORD; nothing of it is written,
and Produce v8+ clients learn which record it was. Batches in the old v0/v1 formats, which
cannot carry headers at all, are refused the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from configuration import InvalidConfig
from interceptors.api import PRODUCE, Interceptor
from interceptors.context import RecordContext
from interceptors.errors import INVALID_RECORD, RejectRecord
from interceptors.headers import Headers


@dataclass
class RequireHeadersConfig:
    headers: list[str]
    allow_null: bool = True

    def __post_init__(self) -> None:
        if not self.headers:
            raise InvalidConfig("headers", "must not be empty")


class RequireHeaders(Interceptor):
    Config = RequireHeadersConfig
    concurrent = True
    needs = "read"
    paths = frozenset({PRODUCE})
    default_on_error = "reject"
    enforcing = True

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        if self.config.allow_null:
            present = {k for k, _ in headers}
        else:
            present = {k for k, v in headers if v is not None}
        for name in self.config.headers:
            if name not in present:
                raise RejectRecord(
                    INVALID_RECORD, f"record lacks required header '{name}'", "missing_header"
                )
