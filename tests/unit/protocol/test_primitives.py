"""Wire primitives: known encodings, round trips, and refusal of hostile lengths."""

from __future__ import annotations

import tracemalloc

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


@pytest.mark.parametrize(
    ("value", "wire"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01")],
)
def test_zigzag_varint_known(value: int, wire: bytes) -> None:
    assert p.varint_bytes(value) == wire
    assert p.read_varint(wire, 0) == (value, len(wire))
    assert p.varlong_bytes(value) == wire
    assert p.read_varlong(wire, 0) == (value, len(wire))


@SETTINGS
@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    wire = p.varint_bytes(value)
    assert p.read_varint(wire + b"tail", 0) == (value, len(wire))


@SETTINGS
@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    wire = p.varlong_bytes(value)
    assert len(wire) <= 10
    assert p.read_varlong(wire, 0) == (value, len(wire))


@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_unsigned_varint_round_trip(value: int) -> None:
    wire = p.unsigned_varint_bytes(value)
    assert p.read_unsigned_varint(wire, 0) == (value, len(wire))


def test_varint_limits() -> None:
    with pytest.raises(CodecError):
        p.read_unsigned_varint(b"\xff\xff\xff\xff\xff\x01", 0)  # 6 bytes
    with pytest.raises(CodecError):
        p.read_varlong(b"\xff" * 10 + b"\x01", 0)  # 11 bytes
    with pytest.raises(CodecError):
        p.read_unsigned_varint(b"\x80\x80", 0)  # truncated
    with pytest.raises(CodecError):
        p.read_unsigned_varint(b"\xff\xff\xff\xff\x1f", 0)  # 35 bits
    with pytest.raises(CodecError):
        p.read_varint(b"", 0)
    with pytest.raises(CodecError):
        p.unsigned_varint_bytes(-1)
    with pytest.raises(CodecError):
        p.unsigned_varint_bytes(2**32)
    with pytest.raises(CodecError):
        p.varint_bytes(2**31)


# --------------------------------------------------------------------------- fixed width


@pytest.mark.parametrize(
    ("read", "write", "value", "wire"),
    [
        (p.read_int8, p.write_int8, -2, b"\xfe"),
        (p.read_int16, p.write_int16, -2, b"\xff\xfe"),
        (p.read_int32, p.write_int32, 258, b"\x00\x00\x01\x02"),
        (p.read_int64, p.write_int64, -1, b"\xff" * 8),
        (p.read_uint16, p.write_uint16, 65535, b"\xff\xff"),
        (p.read_uint32, p.write_uint32, 2**32 - 1, b"\xff" * 4),
        (p.read_float64, p.write_float64, 1.5, b"\x3f\xf8" + b"\x00" * 6),
        (p.read_bool, p.write_bool, True, b"\x01"),
    ],
)
def test_fixed_width(read, write, value, wire: bytes) -> None:
    assert encoded(write, value) == wire
    assert read(wire, 0) == (value, len(wire))
    with pytest.raises(CodecError):
        read(wire[:-1], 0)


def test_fixed_width_range_errors() -> None:
    with pytest.raises(CodecError):
        encoded(p.write_int8, 128)
    with pytest.raises(CodecError):
        encoded(p.write_uint16, -1)


def test_uuid() -> None:
    raw = bytes(range(16))
    assert encoded(p.write_uuid, raw) == raw
    assert p.read_uuid(memoryview(raw), 0) == (raw, 16)
    with pytest.raises(CodecError):
        encoded(p.write_uuid, b"short")
    with pytest.raises(CodecError):
        p.read_uuid(raw[:15], 0)
    assert p.ZERO_UUID == b"\x00" * 16


# --------------------------------------------------------------------------- strings, bytes


def test_strings_known() -> None:
    assert encoded(p.write_string, "ab") == b"\x00\x02ab"
    assert encoded(p.write_nullable_string, None) == b"\xff\xff"
    assert encoded(p.write_compact_string, "ab") == b"\x03ab"
    assert encoded(p.write_compact_nullable_string, None) == b"\x00"
    assert encoded(p.write_compact_string, "") == b"\x01"
    assert p.read_compact_nullable_string(b"\x00", 0) == (None, 1)
    assert p.read_nullable_string(b"\xff\xff", 0) == (None, 2)
    with pytest.raises(CodecError):
        p.read_string(b"\xff\xff", 0)
    with pytest.raises(CodecError):
        p.read_compact_string(b"\x00", 0)
    with pytest.raises(CodecError):
        encoded(p.write_string, "x" * 0x8000)


def test_invalid_utf8_survives() -> None:
    wire = b"\x03\xff\xfe"
    value, _ = p.read_compact_string(wire, 0)
    assert encoded(p.write_compact_string, value) == wire


@SETTINGS
@given(st.none() | st.text(max_size=200))
def test_string_round_trips(value: str | None) -> None:
    for read, write in (
        (p.read_nullable_string, p.write_nullable_string),
        (p.read_compact_nullable_string, p.write_compact_nullable_string),
    ):
        wire = encoded(write, value)
        assert read(wire, 0) == (value, len(wire))


@SETTINGS
@given(st.none() | st.binary(max_size=300))
def test_bytes_round_trips(value: bytes | None) -> None:
    for read, write in (
        (p.read_nullable_bytes, p.write_nullable_bytes),
        (p.read_compact_nullable_bytes, p.write_compact_nullable_bytes),
    ):
        wire = encoded(write, value)
        assert read(wire, 0) == (value, len(wire))


def test_bytes_truncated() -> None:
    with pytest.raises(CodecError):
        p.read_bytes(b"\x00\x00\x00\x05abc", 0)
    with pytest.raises(CodecError):
        p.read_compact_bytes(b"\x06abc", 0)


# --------------------------------------------------------------------------- arrays


@SETTINGS
@given(st.none() | st.lists(st.integers(-(2**31), 2**31 - 1), max_size=200))
def test_array_round_trips(items: list[int] | None) -> None:
    for read, write in (
        (p.read_nullable_array, p.write_nullable_array),
        (p.read_compact_nullable_array, p.write_compact_nullable_array),
    ):
        out = bytearray()
        write(out, items, p.write_int32)
        assert read(bytes(out), 0, p.read_int32, 4) == (items, len(out))


def test_non_nullable_arrays() -> None:
    with pytest.raises(CodecError):
        p.read_array(b"\xff\xff\xff\xff", 0, p.read_int32)
    with pytest.raises(CodecError):
        p.read_compact_array(b"\x00", 0, p.read_int32)
    with pytest.raises(CodecError):
        p.write_array(bytearray(), None, p.write_int32)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "wire",
    [
        b"\x7f\xff\xff\xff" + b"\x00" * 8,  # classic count 2**31 - 1
        b"\xff\xff\xff\xff\x07" + b"\x00" * 8,  # compact count 2**31 - 1
    ],
)
def test_huge_claimed_count_does_not_allocate(wire: bytes) -> None:
    read = p.read_nullable_array if wire[0] == 0x7F else p.read_compact_nullable_array
    tracemalloc.start()
    try:
        with pytest.raises(CodecError):
            read(wire, 0, p.read_int8)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_huge_claimed_lengths() -> None:
    with pytest.raises(CodecError):
        p.read_bytes(b"\x7f\xff\xff\xff" + b"x" * 10, 0)
    with pytest.raises(CodecError):
        p.read_compact_bytes(b"\xff\xff\xff\xff\x07" + b"x" * 10, 0)
    with pytest.raises(CodecError):
        p.read_compact_string(b"\xff\xff\xff\xff\x07" + b"x" * 10, 0)


def test_array_struct_cache() -> None:
    assert p.array_struct("i", 3).format == ">iii"
    assert p.array_struct("i", 3) is p.array_struct("i", 3)
    assert p.array_struct("q", 100).size == 800


# --------------------------------------------------------------------------- tagged fields


def test_tagged_fields_known() -> None:
    assert encoded(p.write_tagged_fields, None) == b"\x00"
    wire = encoded(p.write_tagged_fields, {5: b"xy", 1: b""})
    assert wire == b"\x02\x01\x00\x05\x02xy"  # ascending tags
    assert p.read_tagged_fields(wire, 0) == ({1: b"", 5: b"xy"}, len(wire))
    assert p.read_tagged_fields(b"\x00", 0) == (None, 1)


def test_tagged_fields_rejects_disorder_and_overrun() -> None:
    with pytest.raises(CodecError):
        p.read_tagged_fields(b"\x02\x05\x00\x01\x00", 0)  # descending
    with pytest.raises(CodecError):
        p.read_tagged_fields(b"\x02\x01\x00\x01\x00", 0)  # duplicate
    with pytest.raises(CodecError):
        p.read_tagged_fields(b"\x01\x01\x05ab", 0)  # size past the end
    with pytest.raises(CodecError):
        p.read_tagged_fields(b"\xff\xff\xff\xff\x07", 0)  # count cannot fit


def test_merge_tagged_fields() -> None:
    merged = p.merge_tagged_fields([(0, b"a"), (4, b"b")], {2: b"u", 9: b"v"})
    assert [t for t, _ in merged] == [0, 2, 4, 9]
    with pytest.raises(CodecError):
        p.merge_tagged_fields([(0, b"a")], {0: b"dup"})


@SETTINGS
@given(st.dictionaries(st.integers(0, 2**20), st.binary(max_size=200), max_size=5))
def test_tagged_fields_round_trip(fields: dict[int, bytes]) -> None:
    wire = encoded(p.write_tagged_fields, fields)
    assert p.read_tagged_fields(wire, 0) == (fields or None, len(wire))


@SETTINGS
@given(st.binary(max_size=40))
def test_readers_raise_only_codec_error(data: bytes) -> None:
    readers = [
        p.read_unsigned_varint,
        p.read_varint,
        p.read_varlong,
        p.read_nullable_string,
        p.read_compact_nullable_string,
        p.read_nullable_bytes,
        p.read_compact_nullable_bytes,
        p.read_tagged_fields,
        lambda b, pos: p.read_compact_nullable_array(b, pos, p.read_compact_string),
        lambda b, pos: p.read_nullable_array(b, pos, p.read_int64, 8),
    ]
    for read in readers:
        try:
            read(data, 0)
        except CodecError:
            pass


def test_reader_cursor() -> None:
    wire = b"\x01\x00\x02\x00\x00\x00\x03\x03ab\x01\x05\x01z\x04"
    r = p.Reader(wire)
    assert (r.int8(), r.int16(), r.int32()) == (1, 2, 3)
    assert r.string(compact=True) == "ab"
    r.skip_tagged_fields()
    assert r.varint() == 2
    assert r.remaining() == 0
    with pytest.raises(CodecError):
        r.int8()
