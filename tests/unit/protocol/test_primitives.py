"""Wire primitives: known encodings, round trips, and refusal of hostile lengths."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import primitives as p
from protocol.errors import CodecError

SETTINGS = settings(max_examples=200, deadline=None)


def encoded(write, value) -> bytes:
    out = bytearray()
    write(out, value)
    return bytes(out)


# --------------------------------------------------------------------------- varints


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_unsigned_varint_known(value: int, wire: bytes) -> None:
    assert encoded(p.write_unsigned_varint, value) == wire
    assert p.read_unsigned_varint(wire, 0) == (value, len(wire))


@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_unsigned_varint_round_trip(value: int) -> None:
    wire = p.unsigned_varint_bytes(value)
    assert p.read_unsigned_varint(wire, 0) == (value, len(wire))


def test_varint_limits() -> None:
    with pytest.raises(CodecError):
        p.read_unsigned_varint(b"\xff\xff\xff\xff\xff\x01", 0)  # 6 bytes
    with pytest.raises(CodecError):
        p.read_unsigned_varint(b"\x80\x80", 0)  # truncated
    with pytest.raises(CodecError):
        p.read_unsigned_varint(b"\xff\xff\xff\xff\x1f", 0)  # 35 bits
    with pytest.raises(CodecError):
        p.read_unsigned_varint(b"", 0)
    with pytest.raises(CodecError):
        p.unsigned_varint_bytes(-1)
    with pytest.raises(CodecError):
        p.unsigned_varint_bytes(2**32)


# --------------------------------------------------------------------------- fixed width


@pytest.mark.parametrize(
    ("read", "value", "wire"),
    [
        (p.read_int8, -2, b"\xfe"),
        (p.read_int16, -2, b"\xff\xfe"),
        (p.read_int32, 258, b"\x00\x00\x01\x02"),
        (p.read_bool, True, b"\x01"),
    ],
)
def test_fixed_width(read, value, wire: bytes) -> None:
    assert read(wire, 0) == (value, len(wire))
    with pytest.raises(CodecError):
        read(wire[:-1], 0)


def test_zero_uuid() -> None:
    assert p.ZERO_UUID == b"\x00" * 16


# --------------------------------------------------------------------------- strings


def test_strings_known() -> None:
    assert p.read_string(b"\x00\x02ab", 0) == ("ab", 4)
    assert p.read_compact_string(b"\x03ab", 0) == ("ab", 3)
    assert p.read_compact_string(b"\x01", 0) == ("", 1)
    assert p.read_compact_nullable_string(b"\x00", 0) == (None, 1)
    assert p.read_nullable_string(b"\xff\xff", 0) == (None, 2)
    with pytest.raises(CodecError):
        p.read_string(b"\xff\xff", 0)
    with pytest.raises(CodecError):
        p.read_compact_string(b"\x00", 0)
    with pytest.raises(CodecError):
        p.read_string(b"\x00\x05abc", 0)


def test_invalid_utf8_survives() -> None:
    value, _ = p.read_compact_string(b"\x03\xff\xfe", 0)
    assert value.encode("utf-8", "surrogateescape") == b"\xff\xfe"


@SETTINGS
@given(st.none() | st.text(max_size=200))
def test_string_round_trips(value: str | None) -> None:
    data = None if value is None else value.encode("utf-8", "surrogateescape")
    classic = b"\xff\xff" if data is None else len(data).to_bytes(2, "big") + data
    compact = b"\x00" if data is None else p.unsigned_varint_bytes(len(data) + 1) + data
    assert p.read_nullable_string(classic, 0) == (value, len(classic))
    assert p.read_compact_nullable_string(compact, 0) == (value, len(compact))


def test_huge_claimed_lengths() -> None:
    with pytest.raises(CodecError):
        p.read_compact_string(b"\xff\xff\xff\xff\x07" + b"x" * 10, 0)
    with pytest.raises(CodecError):
        p.read_string(b"\x7f\xff" + b"x" * 10, 0)


def test_array_struct_cache() -> None:
    assert p.array_struct("i", 3).format == ">iii"
    assert p.array_struct("i", 3) is p.array_struct("i", 3)
    assert p.array_struct("q", 100).size == 800


# --------------------------------------------------------------------------- tagged fields


def test_tagged_fields_known() -> None:
    assert encoded(p.write_tagged_fields, None) == b"\x00"
    wire = encoded(p.write_tagged_fields, {5: b"xy", 1: b""})
    assert wire == b"\x02\x01\x00\x05\x02xy"  # ascending tags
    assert encoded(p.write_tag_list, [(1, b""), (5, b"xy")]) == wire


def test_merge_tagged_fields() -> None:
    merged = p.merge_tagged_fields([(0, b"a"), (4, b"b")], {2: b"u", 9: b"v"})
    assert [t for t, _ in merged] == [0, 2, 4, 9]
    with pytest.raises(CodecError):
        p.merge_tagged_fields([(0, b"a")], {0: b"dup"})


@SETTINGS
@given(st.binary(max_size=40))
def test_readers_raise_only_codec_error(data: bytes) -> None:
    readers = [
        p.read_unsigned_varint,
        p.read_int32,
        p.read_nullable_string,
        p.read_string,
        p.read_compact_nullable_string,
        p.read_compact_string,
    ]
    for read in readers:
        try:
            read(data, 0)
        except CodecError:
            pass


def test_reader_cursor() -> None:
    wire = b"\x01\x00\x02\x00\x00\x00\x03\x00\x02ab\xff\xff\x01"
    r = p.Reader(wire)
    assert (r.int8(), r.int16(), r.int32()) == (1, 2, 3)
    assert r.string() == "ab"
    assert r.nullable_string() is None
    assert r.bool() is True
    assert r.pos == len(wire)
    with pytest.raises(CodecError):
        r.int8()
    assert p.Reader(b"\x03ab\x00").string(compact=True) == "ab"
    assert p.Reader(b"\x00").nullable_string(compact=True) is None
