"""Typed header values, after KIP-145's SimpleHeaderConverter.

Kafka header values are bytes. Kafka Connect (KIP-145) settled on a text convention that people
also write by hand, and this module reads and writes it:

==========  =================================================  ==========================
type        text form                                          Python value
==========  =================================================  ==========================
BOOLEAN     ``true`` / ``false``                               bool
INT8..64    decimal; parsing picks the smallest type that fits  int
FLOAT64     decimal with fraction or exponent; NaN, Infinity    float
DECIMAL     integers beyond int64                              decimal.Decimal
STRING      the UTF-8 text itself, unquoted                    str
BYTES       base64 (only with an explicit type, see below)      bytes
ARRAY       JSON-like ``[1, "a", true]``, strings quoted        list
MAP         JSON-like ``{"k": 1}``; keys may be any scalar      dict
DATE        ``YYYY-MM-DD``                                     datetime.date
TIME        ``HH:MM:SS.sssZ``                                  datetime.time (UTC)
TIMESTAMP   ``YYYY-MM-DDTHH:MM:SS.sssZ``                       datetime.datetime (UTC)
==========  =================================================  ==========================

Decisions worth knowing:

* `parse_value` infers the type from the text alone, so base64 is never inferred (``"abcd"``
  is a perfectly good string). Pass ``as_type=Type.BYTES`` to decode base64.
* A top-level string that would read back as something else (``"true"``, ``"42"``, ``"[x]"``,
  text with surrounding spaces) is written JSON-quoted, and a quoted top-level text parses as
  a string, so ``parse_value(format_value(s))`` gives `s` back. Plain strings stay unquoted.
* Numbers with leading zeros (``007``) are strings, so zip codes and ids are not mangled.
* Dates and times are written in UTC with millisecond precision (Connect's resolution); when
  parsing, ``Z``, ``UTC`` and ``+hh:mm`` offsets are accepted and converted to UTC, and a
  missing zone means UTC. Inside lists and maps they are written as quoted strings and read
  back as strings (the text carries no schema), as are bytes (base64).
* Text that is not UTF-8 parses as BYTES holding the raw value. A null header value is NULL.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import enum
import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, TypeAlias

__all__ = ["Type", "TypedValue", "format_value", "infer_type", "parse_value"]


class Type(enum.Enum):
    NULL = "null"
    BOOLEAN = "boolean"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT64 = "float64"
    DECIMAL = "decimal"
    STRING = "string"
    BYTES = "bytes"
    ARRAY = "array"
    MAP = "map"
    DATE = "date"
    TIME = "time"
    TIMESTAMP = "timestamp"


_INT_RANGES = (
    (Type.INT8, 1 << 7),
    (Type.INT16, 1 << 15),
    (Type.INT32, 1 << 31),
    (Type.INT64, 1 << 63),
)
_INT_LIMITS = {t: bound for t, bound in _INT_RANGES}
_INT_TYPES = frozenset(_INT_LIMITS)


@dataclass(frozen=True, slots=True)
class TypedValue:
    type: Type
    value: Any


def _int_type(n: int) -> Type:
    for t, bound in _INT_RANGES:
        if -bound <= n < bound:
            return t
    return Type.DECIMAL


def infer_type(value: Any) -> Type:
    """The type `format_value` writes `value` as (and `parse_value` reads it back as)."""
    if isinstance(value, TypedValue):
        return value.type
    if value is None:
        return Type.NULL
    if isinstance(value, bool):
        return Type.BOOLEAN
    if isinstance(value, int):
        return _int_type(value)
    if isinstance(value, float):
        return Type.FLOAT64
    if isinstance(value, Decimal):
        return Type.DECIMAL
    if isinstance(value, str):
        return Type.STRING
    if isinstance(value, bytes | bytearray | memoryview):
        return Type.BYTES
    if isinstance(value, list | tuple):
        return Type.ARRAY
    if isinstance(value, dict):
        return Type.MAP
    if isinstance(value, dt.datetime):
        return Type.TIMESTAMP
    if isinstance(value, dt.date):
        return Type.DATE
    if isinstance(value, dt.time):
        return Type.TIME
    raise TypeError(f"no header type for {type(value).__name__}")


# --- formatting ----------------------------------------------------------------------------


def format_value(value: Any, as_type: Type | None = None) -> bytes | None:
    """The header bytes for `value` (None for a null header value).

    Without `as_type` the type is inferred (see `infer_type`); with it, the value is checked
    against that type and strings are written raw, unquoted.
    """
    if isinstance(value, TypedValue):
        return format_value(value.value, value.type)
    if as_type is None:
        as_type = infer_type(value)
        if as_type is Type.STRING:
            return (_quote(value) if _needs_quotes(value) else value).encode()
    text = _format_as(as_type, value)
    return None if text is None else text.encode()


def _format_as(t: Type, value: Any) -> str | None:
    if t is Type.NULL:
        if value is not None:
            raise ValueError("a NULL value must be None")
        return None
    if t is Type.BOOLEAN:
        if not isinstance(value, bool):
            raise ValueError(f"not a boolean: {value!r}")
        return "true" if value else "false"
    if t in _INT_TYPES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"not an integer: {value!r}")
        bound = _INT_LIMITS[t]
        if not -bound <= value < bound:
            raise ValueError(f"{value} does not fit {t.value}")
        return str(value)
    if t is Type.FLOAT64:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"not a number: {value!r}")
        return _format_float(float(value))
    if t is Type.DECIMAL:
        if isinstance(value, bool) or not isinstance(value, int | Decimal):
            raise ValueError(f"not a decimal: {value!r}")
        return format(Decimal(value), "f")
    if t is Type.STRING:
        if not isinstance(value, str):
            raise ValueError(f"not a string: {value!r}")
        return value
    if t is Type.BYTES:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ValueError(f"not bytes: {value!r}")
        return base64.b64encode(bytes(value)).decode("ascii")
    if t is Type.ARRAY:
        if not isinstance(value, list | tuple):
            raise ValueError(f"not a list: {value!r}")
        return _embed(value)
    if t is Type.MAP:
        if not isinstance(value, dict):
            raise ValueError(f"not a map: {value!r}")
        return _embed(value)
    if t is Type.TIMESTAMP:
        if not isinstance(value, dt.datetime):
            raise ValueError(f"not a datetime: {value!r}")
        return _format_timestamp(value)
    if t is Type.DATE:
        if not isinstance(value, dt.date) or isinstance(value, dt.datetime):
            raise ValueError(f"not a date: {value!r}")
        return _format_date(value)
    if t is Type.TIME:
        if not isinstance(value, dt.time):
            raise ValueError(f"not a time: {value!r}")
        return _format_time(value)
    raise ValueError(f"unknown type {t!r}")  # pragma: no cover - the enum is closed


def _format_float(f: float) -> str:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return repr(f)


def _format_date(d: dt.date) -> str:
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"


def _utc_time(t: dt.time) -> dt.time:
    if t.tzinfo is None or t.utcoffset() == dt.timedelta(0):
        return t
    moment = dt.datetime.combine(dt.date(2000, 1, 1), t).astimezone(dt.UTC)
    return moment.timetz()


def _format_time(t: dt.time) -> str:
    t = _utc_time(t)
    return f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}.{t.microsecond // 1000:03d}Z"


def _format_timestamp(ts: dt.datetime) -> str:
    if ts.tzinfo is not None:
        ts = ts.astimezone(dt.UTC)
    return f"{_format_date(ts)}T{_format_time(ts.timetz().replace(tzinfo=None))}"


def _quote(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _needs_quotes(s: str) -> bool:
    """Would the unquoted text read back as something other than this string?"""
    if not s:
        return False
    c = s[0]
    # Fast path: text starting with a letter that starts no literal reads back as a string
    # unless it carries surrounding whitespace.
    if c.isalpha() and c not in "tfNI" and not s[-1].isspace():
        return False
    return _parse_text(s) != TypedValue(Type.STRING, s)


def _embed(value: Any) -> str:
    """JSON-like text of a value nested in a list or map."""
    if isinstance(value, TypedValue):
        value = value.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _format_float(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return _quote(base64.b64encode(bytes(value)).decode("ascii"))
    if isinstance(value, list | tuple):
        return "[" + ",".join(_embed(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_embed(k)}:{_embed(v)}" for k, v in value.items()) + "}"
    if isinstance(value, dt.datetime):
        return _quote(_format_timestamp(value))
    if isinstance(value, dt.date):
        return _quote(_format_date(value))
    if isinstance(value, dt.time):
        return _quote(_format_time(value))
    raise TypeError(f"no header text for {type(value).__name__}")


# --- parsing -------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_DATE = r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
_TIME = (
    r"([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:[.,]([0-9]{1,9}))?)?"
    r"(Z|UTC|[+-][0-9]{2}(?::?[0-9]{2})?)?"
)
_DATE_RE = re.compile(_DATE)
_TIME_RE = re.compile(_TIME)
_TIMESTAMP_RE = re.compile(_DATE + "[T ]" + _TIME)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MAX_DEPTH = 64


def parse_value(raw: bytes | bytearray | str | None, as_type: Type | None = None) -> TypedValue:
    """Read a header value.

    Without `as_type` the type is inferred from the text and anything unrecognised is a
    STRING; this never fails. With `as_type`, the text must be of that type (ValueError
    otherwise); TIMESTAMP then also accepts milliseconds since the epoch, as Connect does.
    """
    if raw is None:
        if as_type not in (None, Type.NULL):
            raise ValueError(f"null value is not {as_type.value}")
        return TypedValue(Type.NULL, None)
    if isinstance(raw, bytes | bytearray):
        if as_type is Type.BYTES:
            return TypedValue(Type.BYTES, _b64decode(bytes(raw)))
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            if as_type is None:
                return TypedValue(Type.BYTES, bytes(raw))
            raise ValueError("value is not UTF-8 text") from None
    else:
        text = raw
    if as_type is None:
        return _parse_text(text)
    return _parse_as(as_type, text)


def _b64decode(data: bytes) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64: {exc}") from None


def _parse_text(text: str) -> TypedValue:
    t = text.strip()
    if not t:
        return TypedValue(Type.STRING, text)
    c = t[0]
    if c in "[{":
        parsed = _parse_container(t)
        if parsed is not None:
            return TypedValue(Type.ARRAY if c == "[" else Type.MAP, parsed)
        return TypedValue(Type.STRING, text)
    if c == '"':
        try:
            inner, end = _read_quoted(t, 0)
        except ValueError:
            return TypedValue(Type.STRING, text)
        return TypedValue(Type.STRING, inner if end == len(t) else text)
    if t == "true":
        return TypedValue(Type.BOOLEAN, True)
    if t == "false":
        return TypedValue(Type.BOOLEAN, False)
    number = _parse_number(t)
    if number is not None:
        return number
    if c.isdigit():
        when = _parse_temporal(t)
        if when is not None:
            return when
    return TypedValue(Type.STRING, text)


def _parse_number(t: str) -> TypedValue | None:
    special = _SPECIAL_FLOATS.get(t)
    if special is not None:
        return TypedValue(Type.FLOAT64, special)
    m = _NUMBER.fullmatch(t)
    if m is None:
        return None
    if m.group(1) is None and m.group(2) is None:
        n = int(t)
        kind = _int_type(n)
        return TypedValue(kind, Decimal(n) if kind is Type.DECIMAL else n)
    f = float(t)
    if math.isinf(f):
        return TypedValue(Type.DECIMAL, Decimal(t))
    return TypedValue(Type.FLOAT64, f)


def _parse_temporal(t: str) -> TypedValue | None:
    try:
        if _DATE_RE.fullmatch(t):
            return TypedValue(Type.DATE, dt.date.fromisoformat(t))
        m = _TIMESTAMP_RE.fullmatch(t)
        if m:
            return TypedValue(Type.TIMESTAMP, _timestamp_from(m.groups()))
        m = _TIME_RE.fullmatch(t)
        if m:
            return TypedValue(Type.TIME, _time_from(m.groups()))
    except ValueError:  # out-of-range fields: 2017-13-45 is just text
        return None
    return None


def _zone(text: str | None) -> dt.timezone:
    if text is None or text in ("Z", "UTC"):
        return dt.UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    minutes = int(digits[:2]) * 60 + (int(digits[2:4]) if len(digits) > 2 else 0)
    return dt.timezone(sign * dt.timedelta(minutes=minutes))


# The groups of a matched `_TIME_RE` or `_TIMESTAMP_RE`: an optional group that took no part
# in the match is None.
_Groups = tuple[str | None, ...]


def _group_int(group: str | None) -> int:
    """`int` of a group the pattern cannot match without (a date field, the hour, the
    minute): None there is a bug in the pattern, not data."""
    if group is None:
        raise TypeError("a mandatory group of the pattern is missing")
    return int(group)


def _clock(groups: _Groups) -> tuple[int, int, int, int, dt.timezone]:
    hh, mm, ss, frac, zone = groups
    micro = int((frac or "0")[:6].ljust(6, "0"))
    return _group_int(hh), _group_int(mm), int(ss or 0), micro, _zone(zone)


def _time_from(groups: _Groups) -> dt.time:
    h, m, s, us, tz = _clock(groups)
    return _utc_time(dt.time(h, m, s, us, tzinfo=tz)).replace(tzinfo=dt.UTC)


def _timestamp_from(groups: _Groups) -> dt.datetime:
    y, mo, d = (_group_int(g) for g in groups[:3])
    h, m, s, us, tz = _clock(groups[3:])
    return dt.datetime(y, mo, d, h, m, s, us, tzinfo=tz).astimezone(dt.UTC)


def _parse_as(t: Type, text: str) -> TypedValue:
    s = text.strip()
    if t is Type.STRING:
        return TypedValue(t, text)
    if t is Type.BYTES:
        return TypedValue(t, _b64decode(s.encode("ascii", "strict")))
    if t is Type.NULL:
        raise ValueError("a NULL value has no text")
    if t is Type.BOOLEAN:
        if s in ("true", "false"):
            return TypedValue(t, s == "true")
        raise ValueError(f"not a boolean: {text!r}")
    if t in _INT_TYPES:
        n = int(s) if _INTEGER.fullmatch(s) else None
        if n is None or not -_INT_LIMITS[t] <= n < _INT_LIMITS[t]:
            raise ValueError(f"not an {t.value}: {text!r}")
        return TypedValue(t, n)
    if t is Type.FLOAT64:
        special = _SPECIAL_FLOATS.get(s)
        if special is not None:
            return TypedValue(t, special)
        if not _NUMBER.fullmatch(s):
            raise ValueError(f"not a number: {text!r}")
        return TypedValue(t, float(s))
    if t is Type.DECIMAL:
        try:
            return TypedValue(t, Decimal(s))
        except InvalidOperation:
            raise ValueError(f"not a decimal: {text!r}") from None
    if t in (Type.ARRAY, Type.MAP):
        parsed = _parse_container(s) if s[:1] == ("[" if t is Type.ARRAY else "{") else None
        if parsed is None:
            raise ValueError(f"not a {t.value}: {text!r}")
        return TypedValue(t, parsed)
    if t is Type.TIMESTAMP and _INTEGER.fullmatch(s):
        return TypedValue(t, _EPOCH + dt.timedelta(milliseconds=int(s)))
    when = _parse_temporal(s)
    if when is None or when.type is not t:
        raise ValueError(f"not a {t.value}: {text!r}")
    return when


# JSON-like containers: a small recursive-descent reader. Not json.loads, because map keys may
# be any scalar, bare words are read as strings, and NaN/Infinity are numbers.

_BARE_END = re.compile(r"[,:\]\}\s]")

_Scalar: TypeAlias = None | bool | int | float | Decimal | str
_Nested: TypeAlias = _Scalar | list["_Nested"] | dict[_Scalar, "_Nested"]
"""What the reader makes of a container and of what it holds (map keys are scalars)."""


def _parse_container(t: str) -> _Nested:
    """The list or dict `t` spells, or None if `t` is not exactly one container."""
    try:
        value, pos = _read(t, 0, 0)
    except (ValueError, IndexError, RecursionError):
        return None
    if _skip_ws(t, pos) != len(t):
        return None
    return value


def _skip_ws(t: str, pos: int) -> int:
    n = len(t)
    while pos < n and t[pos] in " \t\r\n":
        pos += 1
    return pos


def _read(t: str, pos: int, depth: int) -> tuple[_Nested, int]:
    pos = _skip_ws(t, pos)
    c = t[pos]
    if c == "[":
        return _read_list(t, pos + 1, depth + 1)
    if c == "{":
        return _read_map(t, pos + 1, depth + 1)
    if c == '"':
        return _read_quoted(t, pos)
    m = _BARE_END.search(t, pos)
    end = m.start() if m else len(t)
    if end == pos:
        raise ValueError(f"unexpected {c!r} at {pos}")
    return _bare(t[pos:end]), end


def _bare(word: str) -> _Scalar:
    if word == "null":
        return None
    if word == "true":
        return True
    if word == "false":
        return False
    special = _SPECIAL_FLOATS.get(word)
    if special is not None:
        return special
    m = _NUMBER.fullmatch(word)
    if m is None:
        return word
    if m.group(1) is None and m.group(2) is None:
        return int(word)
    f = float(word)
    return Decimal(word) if math.isinf(f) else f


def _read_quoted(t: str, pos: int) -> tuple[str, int]:
    i = pos + 1
    n = len(t)
    while i < n:
        c = t[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return json.loads(t[pos : i + 1]), i + 1
        i += 1
    raise ValueError("unterminated string")


def _read_list(t: str, pos: int, depth: int) -> tuple[list[_Nested], int]:
    if depth > _MAX_DEPTH:
        raise ValueError("nested too deeply")
    out: list[_Nested] = []
    pos = _skip_ws(t, pos)
    if t[pos] == "]":
        return out, pos + 1
    while True:
        value, pos = _read(t, pos, depth)
        out.append(value)
        pos = _skip_ws(t, pos)
        c = t[pos]
        if c == "]":
            return out, pos + 1
        if c != ",":
            raise ValueError(f"expected ',' or ']' at {pos}")
        pos += 1


def _read_map(t: str, pos: int, depth: int) -> tuple[dict[_Scalar, _Nested], int]:
    if depth > _MAX_DEPTH:
        raise ValueError("nested too deeply")
    out: dict[_Scalar, _Nested] = {}
    pos = _skip_ws(t, pos)
    if t[pos] == "}":
        return out, pos + 1
    while True:
        key, pos = _read(t, pos, depth)
        if isinstance(key, list | dict):
            raise ValueError("map keys must be scalars")
        pos = _skip_ws(t, pos)
        if t[pos] != ":":
            raise ValueError(f"expected ':' at {pos}")
        value, pos = _read(t, pos + 1, depth)
        out[key] = value
        pos = _skip_ws(t, pos)
        c = t[pos]
        if c == "}":
            return out, pos + 1
        if c != ",":
            raise ValueError(f"expected ',' or '}}' at {pos}")
        pos += 1
