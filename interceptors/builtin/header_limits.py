"""``header_limits``: refuse records whose headers are too many or too large (produce path).

Limits per record: ``max_count`` headers, ``max_key_bytes`` for any key (UTF-8 bytes) and
``max_total_bytes`` for all keys and values together. A violation fails the partition with
INVALID_RECORD (not MESSAGE_TOO_LARGE, which makes producers split and retry in vain).
"""

from __future__ import annotations

from dataclasses import dataclass

from configuration import InvalidConfig
from interceptors.api import PRODUCE, Interceptor
from interceptors.context import RecordContext
from interceptors.errors import INVALID_RECORD, RejectRecord
from interceptors.headers import Headers


@dataclass
class HeaderLimitsConfig:
    max_count: int | None = None
    max_key_bytes: int | None = None
    max_total_bytes: int | None = None

    def __post_init__(self) -> None:
        limits = {"max_count": self.max_count, "max_key_bytes": self.max_key_bytes,
                  "max_total_bytes": self.max_total_bytes}
        if all(v is None for v in limits.values()):
            raise InvalidConfig("", "set at least one of " + ", ".join(limits))
        for name, v in limits.items():
            if v is not None and v < 0:
                raise InvalidConfig(name, "must be >= 0")


def _reject(message: str) -> RejectRecord:
    return RejectRecord(INVALID_RECORD, message, "header_limit")


class HeaderLimits(Interceptor):
    Config = HeaderLimitsConfig
    concurrent = True
    needs = "read"
    paths = frozenset({PRODUCE})
    default_on_error = "reject"

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        cfg = self.config
        if cfg.max_count is not None and len(headers) > cfg.max_count:
            raise _reject(f"record has {len(headers)} headers (limit {cfg.max_count})")
        max_key = cfg.max_key_bytes
        max_total = cfg.max_total_bytes
        if max_key is None and max_total is None:
            return
        total = 0
        for key, value in headers:
            n = len(key) if key.isascii() else len(key.encode("utf-8", "surrogateescape"))
            if max_key is not None and n > max_key:
                raise _reject(f"header key of {n} bytes (limit {max_key})")
            total += n + (len(value) if value is not None else 0)
        if max_total is not None and total > max_total:
            raise _reject(f"headers take {total} bytes (limit {max_total})")
