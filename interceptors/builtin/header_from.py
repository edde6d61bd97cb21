"""``header_from``: copy or move JSON fields of the record into headers (after KIP-145).

``fields`` are dotted paths into the record value (``source: key`` for the key), ``headers``
the header names, pairwise. A field's value is written in the KIP-145 text form (strings as
their plain text, numbers, booleans, ``[..]``/``{..}`` for lists and objects; JSON null gives a
null header value), replacing an existing header of that name. With ``operation: move`` the
fields are removed from the JSON, which is then written back compactly.

Records whose value is null or not a JSON object, and fields that are absent, are left alone
(counted as ``not_json`` / ``field_missing``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from interceptors.api import Interceptor
from interceptors.builtin._json_fields import check_pairs, dump, load_object
from interceptors.context import ProxyInfo, RecordContext
from interceptors.headers import Headers
from interceptors.jsonpath import get, pop
from interceptors.typed import format_value


@dataclass
class HeaderFromConfig:
    fields: list[str]
    headers: list[str]
    operation: Literal["copy", "move"] = "copy"
    source: Literal["value", "key"] = "value"

    paths: list[tuple[str, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.paths = check_pairs(self.fields, self.headers)


def header_bytes(value: Any) -> bytes | None:
    if isinstance(value, str):
        return value.encode()
    return format_value(value)


class HeaderFrom(Interceptor):
    Config = HeaderFromConfig
    concurrent = True
    needs = "key_value"

    def __init__(self, config: HeaderFromConfig, env: ProxyInfo) -> None:
        super().__init__(config, env)
        self._pairs = list(zip(config.paths, config.headers, strict=True))
        self._move = config.operation == "move"
        self._from_key = config.source == "key"

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        doc = load_object(ctx.key if self._from_key else ctx.value)
        if doc is None:
            self.stats.count("not_json")
            return
        take = pop if self._move else get
        moved = False
        for path, name in self._pairs:
            found, value = take(doc, path)
            if not found:
                self.stats.count("field_missing")
                continue
            headers.set(name, header_bytes(value))
            moved = True
        if moved and self._move:
            if self._from_key:
                ctx.set_key(dump(doc))
            else:
                ctx.set_value(dump(doc))
