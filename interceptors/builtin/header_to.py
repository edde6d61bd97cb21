"""``header_to``: copy or move headers into JSON fields of the record (after KIP-145).

``headers`` are header names, ``fields`` dotted paths into the record value (``target: key``
for the key), pairwise. The last header of each name is read as a KIP-145 typed value
(``42`` becomes a number, ``true`` a boolean, ``[..]``/``{..}`` a list or object, anything
else a string; dates stay strings, bytes that are not UTF-8 become base64 strings) and set at
the path, creating objects on the way. ``operation: move`` also removes the headers. The JSON
is written back compactly.

Records whose value is null or not a JSON object, or whose JSON has a non-object where the path
needs an object, are left alone (counted as ``not_json`` / ``field_blocked``).
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from interceptors.api import Interceptor
from interceptors.builtin._json_fields import check_pairs, dump, load_object
from interceptors.context import ProxyInfo, RecordContext
from interceptors.headers import Headers
from interceptors.jsonpath import put
from interceptors.typed import Type, parse_value

_AS_TEXT = {Type.DATE, Type.TIME, Type.TIMESTAMP}


@dataclass
class HeaderToConfig:
    headers: list[str]
    fields: list[str]
    operation: Literal["copy", "move"] = "copy"
    target: Literal["value", "key"] = "value"

    paths: list[tuple[str, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.paths = check_pairs(self.fields, self.headers)


def json_value(raw: bytes | None) -> Any:
    """A header value as a JSON-ready Python value."""
    typed = parse_value(raw)
    if typed.type in _AS_TEXT:
        return raw.decode()  # type: ignore[union-attr]
    if typed.type is Type.BYTES:
        return base64.b64encode(typed.value).decode("ascii")
    return _jsonable(typed.value)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k if isinstance(k, str) else str(k): _jsonable(x) for k, x in v.items()}
    return v


class HeaderTo(Interceptor):
    Config = HeaderToConfig
    concurrent = True
    needs = "key_value"

    def __init__(self, config: HeaderToConfig, env: ProxyInfo) -> None:
        super().__init__(config, env)
        self._pairs = list(zip(config.headers, config.paths, strict=True))
        self._move = config.operation == "move"
        self._to_key = config.target == "key"

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        present = [(name, path) for name, path in self._pairs if name in headers]
        if not present:
            return
        doc = load_object(ctx.key if self._to_key else ctx.value)
        if doc is None:
            self.stats.count("not_json")
            return
        for name, path in present:
            try:
                put(doc, path, json_value(headers.last(name)))
            except ValueError:  # the path runs through a non-object: data, not a bug
                self.stats.count("field_blocked")
                return
        if self._move:
            for name, _ in present:
                headers.remove(name)
        if self._to_key:
            ctx.set_key(dump(doc))
        else:
            ctx.set_value(dump(doc))
