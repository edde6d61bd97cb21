"""``insert_header``: put a header on every record (after KIP-145's InsertHeader).

The value is exactly one of:

* ``value``: a literal string, written as its UTF-8 bytes;
* ``typed``: any YAML value (number, boolean, list, map, date, null), written in the KIP-145
  text form of `interceptors.typed` (``typed: null`` gives a null header value);
* ``template``: text with placeholders ``{client_id}``, ``{topic}``, ``{partition}``,
  ``{uuid}`` (a random UUIDv4 per record), ``{time_ms}`` (proxy time, ms since the epoch),
  ``{now_iso}`` (the same instant as ISO-8601 UTC) and ``{env:NAME}`` (an environment
  variable, read once when the configuration is loaded). ``{{`` and ``}}`` are literal braces.

``mode``: ``set`` (default) leaves exactly one header with that key, replacing earlier ones in
place, so a producer retrying a record does not collect copies; ``add`` appends like Kafka
Connect does; ``if_absent`` only adds when the record has no such header yet.

Everything but ``{uuid}`` is computed once per batch.
"""

from __future__ import annotations

import datetime as dt
import os
import string
from dataclasses import dataclass
from typing import Any, Literal

from configuration import InvalidConfig
from interceptors.api import ColumnValue, Interceptor, PerRecord, Stamps
from interceptors.context import ProxyInfo, RecordContext
from interceptors.headers import Headers
from interceptors.ids import uuid4
from interceptors.typed import format_value


class _Unset:
    """`typed` not given (``typed: null`` is a real value: a null header)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()

_BATCH_FIELDS = ("client_id", "topic", "partition", "time_ms", "now_iso")
_FIELDS = (*_BATCH_FIELDS, "uuid", "env:NAME")


class Template:
    """A parsed template: literal text and placeholders, checked when the config loads."""

    def __init__(self, text: str) -> None:
        self.parts: list[tuple[str, str | None]] = []  # (literal, placeholder or None)
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise InvalidConfig("template", str(exc)) from None
        for literal, name, spec, conversion in parsed:
            if name is None:
                self.parts.append((literal, None))
                continue
            if name == "env" and spec:
                value = os.environ.get(spec)
                if value is None:
                    raise InvalidConfig("template", f"environment variable {spec} is not set")
                self.parts.append((literal + value, None))
                continue
            if name not in (*_BATCH_FIELDS, "uuid") or spec or conversion:
                placeholder = "{" + name + (f"!{conversion}" if conversion else "") + (
                    f":{spec}" if spec else "") + "}"
                raise InvalidConfig(
                    "template",
                    f"unknown placeholder {placeholder} (known: "
                    + ", ".join("{" + f + "}" for f in _FIELDS) + ")",
                )
            self.parts.append((literal, name))
        self.per_record = any(name == "uuid" for _, name in self.parts)

    def render_batch(self, ctx: RecordContext, now_ms: int) -> list[str | None]:
        """The text with batch-level placeholders filled; None marks a ``{uuid}`` slot."""
        values = {
            "client_id": ctx.client_id or "",
            "topic": ctx.topic,
            "partition": str(ctx.partition),
            "time_ms": str(now_ms),
        }
        out: list[str | None] = []
        for literal, name in self.parts:
            if literal:
                out.append(literal)
            if name == "uuid":
                out.append(None)
            elif name == "now_iso":
                out.append(_iso(now_ms))
            elif name is not None:
                out.append(values[name])
        return out


def _iso(ms: int) -> str:
    moment = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


@dataclass
class InsertHeaderConfig:
    header: str
    value: str | None = None
    typed: Any = UNSET
    template: str | None = None
    mode: Literal["set", "add", "if_absent"] = "set"

    def __post_init__(self) -> None:
        if not self.header:
            raise InvalidConfig("header", "must not be empty")
        given = [k for k, v in (("value", self.value), ("template", self.template))
                 if v is not None]
        if self.typed is not UNSET:
            given.append("typed")
        if len(given) != 1:
            raise InvalidConfig(
                "value" if not given else given[1],
                "give exactly one of value, typed, template"
                + (f" (got {', '.join(given)})" if given else ""),
            )
        if self.typed is not UNSET:
            try:
                format_value(self.typed)
            except (TypeError, ValueError) as exc:
                raise InvalidConfig("typed", str(exc)) from None


class InsertHeader(Interceptor):
    Config = InsertHeaderConfig
    concurrent = True

    def __init__(self, config: InsertHeaderConfig, env: ProxyInfo) -> None:
        super().__init__(config, env)
        self._key = config.header
        self._mode = config.mode
        self._template = Template(config.template) if config.template is not None else None
        self._per_record = self._template is not None and self._template.per_record
        # A literal or typed value is fixed; a template's is made per batch (or per record).
        self._value: bytes | None = None
        if config.value is not None:
            self._value = config.value.encode()
        elif config.typed is not UNSET:
            self._value = format_value(config.typed)
        # Without a header of that key (in any mode: "add" does not even look), the header is
        # appended.
        watched = frozenset() if self._mode == "add" else frozenset((self._key,))
        self.stamps = Stamps((self._key,), watched)
        self._fixed: list[ColumnValue] = [self._value]
        self._uuids: list[ColumnValue] = [PerRecord(lambda ctx: _render_uuid(ctx.memo[self]))]

    def on_batch(self, ctx: RecordContext) -> None:
        # The template with the batch's placeholders filled: the value, or the fragments
        # around the per-record ``{uuid}``.
        if self._template is not None:
            fragments = self._template.render_batch(ctx, self.env.time_ms())
            if self._per_record:
                ctx.memo[self] = fragments
            else:  # no ``{uuid}`` slot: every fragment is text
                ctx.memo[self] = "".join(f for f in fragments if f is not None).encode()

    def columns(self, ctx: RecordContext) -> list[ColumnValue]:
        if self._per_record:
            return self._uuids
        return [ctx.memo[self]] if self._template is not None else self._fixed

    def _batch_value(self, ctx: RecordContext) -> bytes | None:
        return ctx.memo[self] if self._template is not None else self._value

    def on_record(self, ctx: RecordContext, headers: Headers) -> None:
        # Called for records that have a header of the key (modes set and if_absent).
        if self._mode == "set":
            value = _render_uuid(ctx.memo[self]) if self._per_record else self._batch_value(ctx)
            headers.set(self._key, value)


def _render_uuid(fragments: list[str | None]) -> bytes:
    """The value of a template with ``{uuid}``: a fresh id per record."""
    return "".join(uuid4() if f is None else f for f in fragments).encode()
