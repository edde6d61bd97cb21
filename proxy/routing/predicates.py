"""Header predicates: the `match.headers` part of a routing rule, compiled to plain functions.

A predicate takes a record's headers (the ordered `(key, value)` list of KIP-82) and answers
True or False. When a key repeats, the predicate reads the *last* value, as Kafka's
`Headers.lastHeader` does, so a header appended later (by an enrichment member, say) wins.

Typed comparisons (`gt`, `ge`, `lt`, `le`, `eq`, `ne`) read the header value as KIP-145 text
(`interceptors.typed`); the kind of comparison follows the configured operand: a YAML number
compares numbers, `true`/`false` compares booleans, a timestamp (YAML's own, or a string in
ISO-8601 form) compares timestamps (header values may also be milliseconds since the epoch,
as Connect writes them). A value of another type never matches, so `amount: {gt: 10}` is
false for `amount: abc` instead of an error on the hot path.
"""

from __future__ import annotations

import datetime as dt
import operator
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from configuration import ConfigError
from interceptors.typed import Type, parse_value

Header = tuple[str, bytes | None]
Predicate = Callable[[list[Header]], bool]

_MISSING = object()
_NUMBER_TYPES = frozenset(
    {Type.INT8, Type.INT16, Type.INT32, Type.INT64, Type.FLOAT64, Type.DECIMAL}
)
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le,
    "eq": operator.eq, "ne": operator.ne,
}
_STRING_OPS = ("equals", "one_of", "prefix", "regex")
_OPERATORS = ("present", "absent", *_STRING_OPS, *_COMPARISONS)


def last_value(headers: list[Header], key: str) -> Any:
    """The last value of `key` (None is a null value), or `_MISSING`."""
    for k, v in reversed(headers):
        if k == key:
            return v
    return _MISSING


def compile_predicate(node: object, path: str) -> Predicate:
    """A predicate from its YAML form; errors name `path` and the bad key below it."""
    if isinstance(node, list):
        return _all([compile_predicate(n, f"{path}[{i}]") for i, n in enumerate(node)], path)
    if not isinstance(node, dict) or not node:
        raise ConfigError(f"{path}: expected a mapping (header: KEY and an operator, "
                          "or all/any/not)")
    combinators = [k for k in ("all", "any", "not") if k in node]
    if combinators:
        if len(node) != 1:
            extra = sorted(set(node) - {combinators[0]}, key=str)[0]
            raise ConfigError(f"{path}.{extra}: {combinators[0]} stands alone in its mapping")
        kind = combinators[0]
        inner = node[kind]
        if kind == "not":
            p = compile_predicate(inner, f"{path}.not")
            return lambda headers: not p(headers)
        if not isinstance(inner, list) or not inner:
            raise ConfigError(f"{path}.{kind}: expected a non-empty list of predicates")
        parts = [compile_predicate(n, f"{path}.{kind}[{i}]") for i, n in enumerate(inner)]
        return _all(parts, path) if kind == "all" else _any(parts)
    return _header_predicate(node, path)


def _all(parts: list[Predicate], path: str) -> Predicate:
    if not parts:
        raise ConfigError(f"{path}: expected at least one predicate")
    if len(parts) == 1:
        return parts[0]
    return lambda headers: all(p(headers) for p in parts)


def _any(parts: list[Predicate]) -> Predicate:
    return lambda headers: any(p(headers) for p in parts)


def _header_predicate(node: dict[str, object], path: str) -> Predicate:
    """`node`: a YAML mapping, whose keys other than the operators' names are refused here."""
    key = node.get("header")
    if not isinstance(key, str) or not key:
        raise ConfigError(f"{path}.header: required (the header key, a non-empty string)")
    for k in node:
        if k != "header" and k not in _OPERATORS:
            raise ConfigError(f"{path}.{k}: unknown key (operators: {', '.join(_OPERATORS)})")
    ops = [k for k in node if k != "header"]
    if len(ops) != 1:
        raise ConfigError(f"{path}: expected exactly one operator beside header, got "
                          f"{len(ops)} ({', '.join(map(str, ops)) or 'none'})")
    op = ops[0]
    operand = node[op]
    where = f"{path}.{op}"
    if op in ("present", "absent"):
        if operand is not True:
            raise ConfigError(f"{where}: expected true")
        if op == "present":
            return lambda headers: last_value(headers, key) is not _MISSING
        return lambda headers: last_value(headers, key) is _MISSING
    if op in _STRING_OPS:
        return _string_predicate(key, op, operand, where)
    return _typed_predicate(key, _COMPARISONS[op], operand, where)


def _utf8(text: object, where: str) -> bytes:
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ConfigError(f"{where}: expected a string, got {text!r}")
    return str(text).encode()


def _string_predicate(key: str, op: str, operand: object, where: str) -> Predicate:
    """Byte comparisons of the raw header value (no parsing on the hot path)."""
    if op == "equals":
        want = _utf8(operand, where)
        return lambda headers: last_value(headers, key) == want
    if op == "one_of":
        if not isinstance(operand, list) or not operand:
            raise ConfigError(f"{where}: expected a non-empty list of strings")
        wanted = frozenset(_utf8(v, f"{where}[{i}]") for i, v in enumerate(operand))
        return lambda headers: last_value(headers, key) in wanted
    if op == "prefix":
        start = _utf8(operand, where)

        def prefix(headers: list[Header]) -> bool:
            v = last_value(headers, key)
            return isinstance(v, bytes) and v.startswith(start)

        return prefix
    if not isinstance(operand, str):
        raise ConfigError(f"{where}: expected a regular expression")
    try:
        pattern = re.compile(operand.encode())
    except re.error as exc:
        raise ConfigError(f"{where}: invalid regular expression: {exc}") from None

    def regex(headers: list[Header]) -> bool:
        v = last_value(headers, key)
        return isinstance(v, bytes) and pattern.fullmatch(v) is not None

    return regex


def _typed_predicate(
    key: str, compare: Callable[[Any, Any], bool], operand: object, where: str
) -> Predicate:
    read: Callable[[bytes], Any]
    if isinstance(operand, bool):
        if compare not in (operator.eq, operator.ne):
            raise ConfigError(f"{where}: booleans compare with eq or ne only")
        want: object = operand
        read = _read_bool
    elif isinstance(operand, int | float):
        want = Decimal(str(operand))
        read = _read_number
    elif isinstance(operand, dt.datetime | dt.date | str):
        want = _timestamp_operand(operand, where)
        read = _read_timestamp
    else:
        raise ConfigError(f"{where}: expected a number, true/false or a timestamp, "
                          f"got {operand!r}")

    def typed(headers: list[Header]) -> bool:
        v = last_value(headers, key)
        if v is _MISSING or v is None:
            return False
        got = read(v)
        return got is not None and compare(got, want)

    return typed


def _timestamp_operand(operand: dt.datetime | dt.date | str, where: str) -> dt.datetime:
    if isinstance(operand, dt.datetime):
        return operand if operand.tzinfo else operand.replace(tzinfo=dt.UTC)
    if isinstance(operand, dt.date):
        return dt.datetime(operand.year, operand.month, operand.day, tzinfo=dt.UTC)
    try:
        stamp: dt.datetime = parse_value(operand, Type.TIMESTAMP).value
    except ValueError:
        raise ConfigError(f"{where}: expected a number, true/false or a timestamp "
                          f"(YYYY-MM-DDTHH:MM:SSZ), got {operand!r}") from None
    return stamp


def _read_bool(raw: bytes) -> bool | None:
    t = parse_value(raw)
    return t.value if t.type is Type.BOOLEAN else None


def _read_number(raw: bytes) -> Decimal | None:
    t = parse_value(raw)
    if t.type not in _NUMBER_TYPES:
        return None
    try:
        d = Decimal(str(t.value))
    except ArithmeticError:
        return None
    return None if d.is_nan() else d


def _read_timestamp(raw: bytes) -> dt.datetime | None:
    try:
        stamp: dt.datetime = parse_value(raw, Type.TIMESTAMP).value
    except ValueError:
        return None
    return stamp
