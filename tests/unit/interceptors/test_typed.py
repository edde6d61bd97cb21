"""Typed header values after KIP-145's SimpleHeaderConverter: examples and round trips."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interceptors.typed import Type, TypedValue, format_value, infer_type, parse_value

UTC = dt.UTC


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"true", TypedValue(Type.BOOLEAN, True)),
        (b"false", TypedValue(Type.BOOLEAN, False)),
        (b"12", TypedValue(Type.INT8, 12)),
        (b"-128", TypedValue(Type.INT8, -128)),
        (b"128", TypedValue(Type.INT16, 128)),
        (b"70000", TypedValue(Type.INT32, 70000)),
        (b"3000000000", TypedValue(Type.INT64, 3000000000)),
        (b"9223372036854775808", TypedValue(Type.DECIMAL, Decimal("9223372036854775808"))),
        (b"1.5", TypedValue(Type.FLOAT64, 1.5)),
        (b"-2e3", TypedValue(Type.FLOAT64, -2000.0)),
        (b"hello world", TypedValue(Type.STRING, "hello world")),
        (b"", TypedValue(Type.STRING, "")),
        (b"007", TypedValue(Type.STRING, "007")),  # leading zeros: an id, not a number
        (b"True", TypedValue(Type.STRING, "True")),
        (b'"42"', TypedValue(Type.STRING, "42")),
        (b"[1, 2, 3]", TypedValue(Type.ARRAY, [1, 2, 3])),
        (b'["a", true, null, 1.5, [], {}]', TypedValue(Type.ARRAY, ["a", True, None, 1.5, [], {}])),
        (b'{ "foo": "value", "bar": "strValue", "baz" : "other" }',
         TypedValue(Type.MAP, {"foo": "value", "bar": "strValue", "baz": "other"})),
        (b'{"foo": true, "bar": "strValue", "baz" : 1234}',
         TypedValue(Type.MAP, {"foo": True, "bar": "strValue", "baz": 1234})),
        (b"{1: 2}", TypedValue(Type.MAP, {1: 2})),
        (b"[1, 2", TypedValue(Type.STRING, "[1, 2")),
        (b"{a}", TypedValue(Type.STRING, "{a}")),
        (b"2017-05-21", TypedValue(Type.DATE, dt.date(2017, 5, 21))),
        (b"2017-13-45", TypedValue(Type.STRING, "2017-13-45")),
        (b"16:31:05.387Z", TypedValue(Type.TIME, dt.time(16, 31, 5, 387000, tzinfo=UTC))),
        (b"2017-05-21T16:31:05.387Z",
         TypedValue(Type.TIMESTAMP, dt.datetime(2017, 5, 21, 16, 31, 5, 387000, tzinfo=UTC))),
        # the KIP's own example spells the zone "UTC"
        (b"2017-05-21T16:31:05.387UTC",
         TypedValue(Type.TIMESTAMP, dt.datetime(2017, 5, 21, 16, 31, 5, 387000, tzinfo=UTC))),
        (b"2017-05-21T18:31:05+02:00",
         TypedValue(Type.TIMESTAMP, dt.datetime(2017, 5, 21, 16, 31, 5, tzinfo=UTC))),
        (b"\xff\xfe", TypedValue(Type.BYTES, b"\xff\xfe")),
        (None, TypedValue(Type.NULL, None)),
    ],
)
def test_parse_infers_the_type(raw, expected):
    assert parse_value(raw) == expected


def test_parse_special_floats():
    assert math.isnan(parse_value(b"NaN").value)
    assert parse_value(b"Infinity") == TypedValue(Type.FLOAT64, math.inf)
    assert parse_value(b"-Infinity") == TypedValue(Type.FLOAT64, -math.inf)


def test_base64_needs_an_explicit_type():
    assert parse_value(b"aGVsbG8=") == TypedValue(Type.STRING, "aGVsbG8=")
    assert parse_value(b"aGVsbG8=", Type.BYTES) == TypedValue(Type.BYTES, b"hello")
    with pytest.raises(ValueError):
        parse_value(b"not base64!", Type.BYTES)


@pytest.mark.parametrize(
    ("raw", "as_type", "value"),
    [
        (b"12", Type.INT64, 12),
        (b"12", Type.STRING, "12"),
        (b"12", Type.FLOAT64, 12.0),
        (b"1.25", Type.DECIMAL, Decimal("1.25")),
        (b"1700000000123", Type.TIMESTAMP,
         dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)),
        (b"2017-05-21", Type.DATE, dt.date(2017, 5, 21)),
        (b"[1]", Type.ARRAY, [1]),
    ],
)
def test_parse_as_type(raw, as_type, value):
    assert parse_value(raw, as_type) == TypedValue(as_type, value)


@pytest.mark.parametrize(
    ("raw", "as_type"),
    [(b"300", Type.INT8), (b"x", Type.INT32), (b"yes", Type.BOOLEAN), (b"[1]", Type.MAP),
     (b"2017-05-21", Type.TIME), (None, Type.STRING)],
)
def test_parse_as_wrong_type_fails(raw, as_type):
    with pytest.raises(ValueError):
        parse_value(raw, as_type)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, b"true"),
        (42, b"42"),
        (1.5, b"1.5"),
        ("plain text", b"plain text"),
        ("true", b'"true"'),  # would read back as a boolean: quoted
        ("42", b'"42"'),
        (" padded", b" padded"),  # reads back as the same string: no quotes
        (" 12", b'" 12"'),
        (b"\x00\x01", b"AAE="),
        ([1, "a", None], b'[1,"a",null]'),
        ({"k": [True]}, b'{"k":[true]}'),
        (dt.date(2017, 5, 21), b"2017-05-21"),
        (dt.time(16, 31, 5, 387000), b"16:31:05.387Z"),
        (dt.datetime(2017, 5, 21, 18, 31, 5, 387000, tzinfo=dt.timezone(dt.timedelta(hours=2))),
         b"2017-05-21T16:31:05.387Z"),
        (None, None),
        (TypedValue(Type.STRING, "42"), b"42"),  # an explicit type writes raw text
        (TypedValue(Type.INT64, 7), b"7"),
    ],
)
def test_format(value, text):
    assert format_value(value) == text


def test_format_checks_explicit_types():
    with pytest.raises(ValueError):
        format_value(300, Type.INT8)
    with pytest.raises(ValueError):
        format_value("x", Type.BOOLEAN)
    with pytest.raises(TypeError):
        format_value(object())


def test_deep_nesting_is_text_not_a_crash():
    deep = b"[" * 10000 + b"]" * 10000
    assert parse_value(deep).type is Type.STRING


# -- round trips --------------------------------------------------------------------------

scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(),
)
json_like = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text()),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=12,
)
millis = st.integers(min_value=0, max_value=999).map(lambda ms: ms * 1000)
timestamps = st.builds(
    lambda d, us: d.replace(microsecond=us, tzinfo=UTC),
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31)),
    millis,
)
times = st.builds(lambda t, us: t.replace(microsecond=us, tzinfo=UTC), st.times(), millis)


@given(st.one_of(scalars, json_like, st.dates(), times, timestamps))
def test_format_then_parse_round_trips(value):
    typed = parse_value(format_value(value))
    assert typed.type is infer_type(value)
    assert typed.value == value


@given(st.binary())
def test_bytes_round_trip_with_their_type(data):
    assert parse_value(format_value(data), Type.BYTES).value == data


@given(st.sampled_from([Type.INT8, Type.INT16, Type.INT32, Type.INT64]), st.integers())
def test_explicit_int_types_round_trip_or_refuse(kind, n):
    try:
        text = format_value(n, kind)
    except ValueError:
        return
    assert parse_value(text, kind) == TypedValue(kind, n)


@given(st.binary(max_size=64))
def test_parse_never_fails_on_arbitrary_bytes(data):
    parse_value(data)
