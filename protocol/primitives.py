"""Kafka wire primitives: fixed-width integers, varints, strings, bytes, arrays, tagged fields.

Readers take ``(buf, pos)`` and return ``(value, new_pos)``; writers append to a ``bytearray``.
``buf`` may be ``bytes``, ``bytearray`` or a ``memoryview`` of unsigned bytes. Every reader
raises :class:`~protocol.errors.CodecError` (and nothing else) on bad input, and checks a
claimed length or element count against the bytes that remain *before* allocating anything,
so memory use stays proportional to the input.

Representation choices, made for speed on the proxy's hot path:

* ``uuid`` values are 16-byte ``bytes`` (not :class:`uuid.UUID`): they come straight out of a
  ``struct`` unpack, hash and compare cheaply, and serve well as dictionary keys for the
  topic id <-> name map. ``ZERO_UUID`` is the all-zero id Kafka uses for "no id".
* Strings are decoded with ``surrogateescape``, so bytes that are not valid UTF-8 survive a
  decode/encode round trip unchanged instead of failing a connection the broker would accept.
* Unknown tagged fields are kept as ``dict[int, bytes]`` (tag -> raw payload) and written back
  unchanged, interleaved in ascending tag order with the known ones (KIP-482).

The generated message codecs in ``protocol.messages`` inline the fast paths of these readers
and only call in here for the rare slow paths (multi-byte varints, unknown tagged fields).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from struct import Struct
from struct import error as StructError
from typing import Any, TypeVar

from protocol.errors import CodecError

Buffer = bytes | bytearray | memoryview
T = TypeVar("T")

ZERO_UUID = bytes(16)

#: Longest string Kafka accepts in a message field (the Java reader rejects longer ones).
MAX_STRING_LENGTH = 0x7FFF

INT8 = Struct(">b")
INT16 = Struct(">h")
INT32 = Struct(">i")
INT64 = Struct(">q")
UINT16 = Struct(">H")
UINT32 = Struct(">I")
FLOAT64 = Struct(">d")
BOOL = Struct(">?")
UUID = Struct(">16s")

# struct format character and wire size of every fixed-width Kafka type
FIXED_TYPES: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "float64": ("d", 8),
    "bool": ("?", 1),
    "uuid": ("16s", 16),
}

_SMALL_ARRAY = 64
_array_structs: dict[str, tuple[Struct, ...]] = {
    code: tuple(Struct(">" + code * n) for n in range(_SMALL_ARRAY))
    for code in ("b", "h", "i", "q", "H", "I", "d", "?")
}
_array_structs["16s"] = tuple(Struct(">" + "16s" * n) for n in range(_SMALL_ARRAY))

#: Precompiled structs for arrays of 0..63 fixed-width elements, by struct format character.
INT32_ARRAYS = _array_structs["i"]
INT64_ARRAYS = _array_structs["q"]


def array_struct(code: str, count: int) -> Struct:
    """A struct for ``count`` big-endian elements of format ``code`` (cached when small)."""
    if count < _SMALL_ARRAY:
        return _array_structs[code][count]
    return Struct(">" + code * count)


# --------------------------------------------------------------------------- fixed width


def _fixed_reader(s: Struct) -> Callable[[Buffer, int], tuple[Any, int]]:
    unpack_from = s.unpack_from
    size = s.size

    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        try:
            return unpack_from(buf, pos)[0], pos + size
        except StructError:
            raise CodecError(f"truncated: need {size} bytes at offset {pos}") from None

    return read


def _fixed_writer(s: Struct) -> Callable[[bytearray, Any], None]:
    pack = s.pack

    def write(out: bytearray, value: Any) -> None:
        try:
            out += pack(value)
        except StructError as e:
            raise CodecError(f"cannot encode {value!r}: {e}") from None

    return write


read_int8: Callable[[Buffer, int], tuple[int, int]] = _fixed_reader(INT8)
read_int16: Callable[[Buffer, int], tuple[int, int]] = _fixed_reader(INT16)
read_int32: Callable[[Buffer, int], tuple[int, int]] = _fixed_reader(INT32)
read_int64: Callable[[Buffer, int], tuple[int, int]] = _fixed_reader(INT64)
read_uint16: Callable[[Buffer, int], tuple[int, int]] = _fixed_reader(UINT16)
read_uint32: Callable[[Buffer, int], tuple[int, int]] = _fixed_reader(UINT32)
read_float64: Callable[[Buffer, int], tuple[float, int]] = _fixed_reader(FLOAT64)
read_bool: Callable[[Buffer, int], tuple[bool, int]] = _fixed_reader(BOOL)
write_int8 = _fixed_writer(INT8)
write_int16 = _fixed_writer(INT16)
write_int32 = _fixed_writer(INT32)
write_int64 = _fixed_writer(INT64)
write_uint16 = _fixed_writer(UINT16)
write_uint32 = _fixed_writer(UINT32)
write_float64 = _fixed_writer(FLOAT64)
write_bool = _fixed_writer(BOOL)


def read_uuid(buf: Buffer, pos: int) -> tuple[bytes, int]:
    """A 16-byte uuid as ``bytes``."""
    end = pos + 16
    if end > len(buf):
        raise CodecError(f"truncated uuid at offset {pos}")
    return bytes(buf[pos:end]), end


def write_uuid(out: bytearray, value: bytes) -> None:
    if len(value) != 16:
        raise CodecError(f"uuid must be 16 bytes, got {len(value)}")
    out += value


# --------------------------------------------------------------------------- varints


def read_unsigned_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes holding at most 32 bits (Kafka's unsigned varint).

    Values past 32 bits are refused rather than truncated, so that whatever decodes can be
    written back.
    """
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        value = b & 0x7F
        shift = 7
        pos += 1
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                if value > 0xFFFFFFFF:
                    raise CodecError(f"unsigned varint over 32 bits at offset {pos}")
                return value, pos
            shift += 7
            if shift > 28:
                raise CodecError(f"unsigned varint longer than 5 bytes at offset {pos}")
    except IndexError:
        raise CodecError(f"truncated varint at offset {pos}") from None


def _read_unsigned_long(buf: Buffer, pos: int, max_bytes: int) -> tuple[int, int]:
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        value = b & 0x7F
        shift = 7
        pos += 1
        limit = 7 * (max_bytes - 1)
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value, pos
            shift += 7
            if shift > limit:
                raise CodecError(f"varint longer than {max_bytes} bytes at offset {pos}")
    except IndexError:
        raise CodecError(f"truncated varint at offset {pos}") from None


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zigzag-encoded signed varint (int32, at most 5 bytes), as used inside records."""
    try:
        b = buf[pos]
    except IndexError:
        raise CodecError(f"truncated varint at offset {pos}") from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _read_unsigned_long(buf, pos, 5)
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zigzag-encoded signed varlong (int64, at most 10 bytes)."""
    try:
        b = buf[pos]
    except IndexError:
        raise CodecError(f"truncated varlong at offset {pos}") from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _read_unsigned_long(buf, pos, 10)
    raw &= 0xFFFFFFFFFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def unsigned_varint_bytes(value: int) -> bytes:
    """The unsigned varint encoding of ``0 <= value < 2**32``."""
    if value < 0x80:
        if value < 0:
            raise CodecError(f"unsigned varint cannot hold {value}")
        return bytes((value,))
    if value > 0xFFFFFFFF:
        raise CodecError(f"unsigned varint cannot hold {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_unsigned_varint(out: bytearray, value: int) -> None:
    if 0 <= value < 0x80:
        out.append(value)
    else:
        out += unsigned_varint_bytes(value)


def _unsigned_long_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_bytes(value: int) -> bytes:
    """The zigzag varint encoding of a signed 32-bit ``value``."""
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise CodecError(f"varint cannot hold {value}")
    return _unsigned_long_bytes(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def varlong_bytes(value: int) -> bytes:
    """The zigzag varlong encoding of a signed 64-bit ``value``."""
    if not -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        raise CodecError(f"varlong cannot hold {value}")
    return _unsigned_long_bytes(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


# --------------------------------------------------------------------------- strings, bytes

_unpack_int16 = INT16.unpack_from
_unpack_int32 = INT32.unpack_from


def _take(buf: Buffer, pos: int, n: int) -> int:
    end = pos + n
    if end > len(buf):
        raise CodecError(f"length {n} at offset {pos} runs past the end ({len(buf)} bytes)")
    return end


def _decode_str(buf: Buffer, pos: int, end: int) -> str:
    return str(buf[pos:end], "utf-8", "surrogateescape")


def _encode_str(value: str) -> bytes:
    try:
        data = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:
        raise CodecError(f"string cannot be encoded as UTF-8: {e}") from None
    if len(data) > MAX_STRING_LENGTH:
        raise CodecError(f"string of {len(data)} bytes exceeds {MAX_STRING_LENGTH}")
    return data


def read_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    """A string with an int16 length; a negative length is null."""
    n, pos = read_int16(buf, pos)
    if n < 0:
        return None, pos
    end = _take(buf, pos, n)
    return _decode_str(buf, pos, end), end


def read_string(buf: Buffer, pos: int) -> tuple[str, int]:
    value, end = read_nullable_string(buf, pos)
    if value is None:
        raise CodecError(f"non-nullable string is null at offset {pos}")
    return value, end


def read_compact_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    """A KIP-482 compact string: unsigned varint length + 1, 0 meaning null."""
    n, pos = read_unsigned_varint(buf, pos)
    n -= 1
    if n < 0:
        return None, pos
    if n > MAX_STRING_LENGTH:
        raise CodecError(f"string length {n} exceeds {MAX_STRING_LENGTH}")
    end = _take(buf, pos, n)
    return _decode_str(buf, pos, end), end


def read_compact_string(buf: Buffer, pos: int) -> tuple[str, int]:
    value, end = read_compact_nullable_string(buf, pos)
    if value is None:
        raise CodecError(f"non-nullable compact string is null at offset {pos}")
    return value, end


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\xff\xff"
        return
    data = _encode_str(value)
    out += INT16.pack(len(data))
    out += data


def write_string(out: bytearray, value: str) -> None:
    if value is None:
        raise CodecError("non-nullable string is None")
    write_nullable_string(out, value)


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
        return
    data = _encode_str(value)
    write_unsigned_varint(out, len(data) + 1)
    out += data


def write_compact_string(out: bytearray, value: str) -> None:
    if value is None:
        raise CodecError("non-nullable compact string is None")
    write_compact_nullable_string(out, value)


def read_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    """Bytes with an int32 length; a negative length is null."""
    n, pos = read_int32(buf, pos)
    if n < 0:
        return None, pos
    end = _take(buf, pos, n)
    return bytes(buf[pos:end]), end


def read_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    value, end = read_nullable_bytes(buf, pos)
    if value is None:
        raise CodecError(f"non-nullable bytes are null at offset {pos}")
    return value, end


def read_compact_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_unsigned_varint(buf, pos)
    n -= 1
    if n < 0:
        return None, pos
    end = _take(buf, pos, n)
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    value, end = read_compact_nullable_bytes(buf, pos)
    if value is None:
        raise CodecError(f"non-nullable compact bytes are null at offset {pos}")
    return value, end


def write_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += b"\xff\xff\xff\xff"
        return
    out += INT32.pack(len(value))
    out += value


def write_bytes(out: bytearray, value: bytes) -> None:
    if value is None:
        raise CodecError("non-nullable bytes are None")
    write_nullable_bytes(out, value)


def write_compact_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out.append(0)
        return
    write_unsigned_varint(out, len(value) + 1)
    out += value


# --------------------------------------------------------------------------- arrays


def check_count(buf: Buffer, pos: int, count: int, min_element_size: int = 1) -> None:
    """Reject ``count`` elements that cannot fit in what remains of ``buf``.

    Called before any list is built, so a hostile length such as 2**31 costs nothing.
    """
    if count * min_element_size > len(buf) - pos:
        raise CodecError(
            f"array of {count} elements at offset {pos} cannot fit in {len(buf) - pos} bytes"
        )


def _read_elements(
    buf: Buffer,
    pos: int,
    count: int,
    read_element: Callable[[Buffer, int], tuple[T, int]],
    min_element_size: int,
) -> tuple[list[T], int]:
    check_count(buf, pos, count, max(1, min_element_size))
    items = []
    for _ in range(count):
        item, pos = read_element(buf, pos)
        items.append(item)
    return items, pos


def read_nullable_array(
    buf: Buffer,
    pos: int,
    read_element: Callable[[Buffer, int], tuple[T, int]],
    min_element_size: int = 1,
) -> tuple[list[T] | None, int]:
    """An array with an int32 count; a negative count is null."""
    count, pos = read_int32(buf, pos)
    if count < 0:
        return None, pos
    return _read_elements(buf, pos, count, read_element, min_element_size)


def read_array(
    buf: Buffer,
    pos: int,
    read_element: Callable[[Buffer, int], tuple[T, int]],
    min_element_size: int = 1,
) -> tuple[list[T], int]:
    items, end = read_nullable_array(buf, pos, read_element, min_element_size)
    if items is None:
        raise CodecError(f"non-nullable array is null at offset {pos}")
    return items, end


def read_compact_nullable_array(
    buf: Buffer,
    pos: int,
    read_element: Callable[[Buffer, int], tuple[T, int]],
    min_element_size: int = 1,
) -> tuple[list[T] | None, int]:
    """A KIP-482 compact array: unsigned varint count + 1, 0 meaning null."""
    count, pos = read_unsigned_varint(buf, pos)
    count -= 1
    if count < 0:
        return None, pos
    return _read_elements(buf, pos, count, read_element, min_element_size)


def read_compact_array(
    buf: Buffer,
    pos: int,
    read_element: Callable[[Buffer, int], tuple[T, int]],
    min_element_size: int = 1,
) -> tuple[list[T], int]:
    items, end = read_compact_nullable_array(buf, pos, read_element, min_element_size)
    if items is None:
        raise CodecError(f"non-nullable compact array is null at offset {pos}")
    return items, end


def write_nullable_array(
    out: bytearray, items: list[T] | None, write_element: Callable[[bytearray, T], None]
) -> None:
    if items is None:
        out += b"\xff\xff\xff\xff"
        return
    out += INT32.pack(len(items))
    for item in items:
        write_element(out, item)


def write_array(
    out: bytearray, items: list[T], write_element: Callable[[bytearray, T], None]
) -> None:
    if items is None:
        raise CodecError("non-nullable array is None")
    write_nullable_array(out, items, write_element)


def write_compact_nullable_array(
    out: bytearray, items: list[T] | None, write_element: Callable[[bytearray, T], None]
) -> None:
    if items is None:
        out.append(0)
        return
    write_unsigned_varint(out, len(items) + 1)
    for item in items:
        write_element(out, item)


# --------------------------------------------------------------------------- tagged fields


def read_tagged_fields(buf: Buffer, pos: int) -> tuple[dict[int, bytes] | None, int]:
    """A raw tagged-field section: count, then (tag, size, data) in ascending tag order.

    Returns ``None`` for an empty section (the common case: no allocation). Tags must be
    strictly ascending, as KIP-482 requires; anything else is rejected rather than guessed at.
    """
    count, pos = read_unsigned_varint(buf, pos)
    if not count:
        return None, pos
    check_count(buf, pos, count, 2)
    fields: dict[int, bytes] = {}
    last = -1
    for _ in range(count):
        tag, pos = read_unsigned_varint(buf, pos)
        size, pos = read_unsigned_varint(buf, pos)
        if tag <= last:
            raise CodecError(f"tagged field {tag} out of order at offset {pos}")
        last = tag
        end = _take(buf, pos, size)
        fields[tag] = bytes(buf[pos:end])
        pos = end
    return fields, pos


def write_tagged_fields(out: bytearray, fields: dict[int, bytes] | None) -> None:
    """Write a raw tagged-field section in ascending tag order."""
    if not fields:
        out.append(0)
        return
    write_unsigned_varint(out, len(fields))
    for tag in sorted(fields):
        data = fields[tag]
        write_unsigned_varint(out, tag)
        write_unsigned_varint(out, len(data))
        out += data


def merge_tagged_fields(
    known: Sequence[tuple[int, bytes | bytearray]],
    unknown: dict[int, bytes],
    reserved: tuple[int, ...] = (),
) -> list[tuple[int, bytes | bytearray]]:
    """Combine encoded known tagged fields with preserved unknown ones, by ascending tag.

    ``reserved`` are the tags of every known tagged field of the version, written or not: a
    preserved tag among them would be read back as that field, so it is refused.
    """
    merged = dict(known)
    for tag, data in unknown.items():
        if tag in merged or tag in reserved:
            raise CodecError(f"unknown tagged field {tag} collides with a known field")
        if not isinstance(tag, int) or tag < 0:
            raise CodecError(f"invalid tag {tag!r}")
        merged[tag] = data
    return sorted(merged.items())


def write_tag_list(out: bytearray, fields: list[tuple[int, bytes | bytearray]]) -> None:
    """Write an already sorted list of (tag, payload) as a tagged-field section."""
    write_unsigned_varint(out, len(fields))
    for tag, data in fields:
        write_unsigned_varint(out, tag)
        write_unsigned_varint(out, len(data))
        out += data


# --------------------------------------------------------------------------- cursor


class Reader:
    """A cursor for hand-written parsing: every read advances ``pos``.

    The generated codecs do not use it (they inline their reads); it serves code that needs a
    few fields out of a frame, such as skipping a response header's tagged fields.
    """

    __slots__ = ("buf", "pos")

    def __init__(self, buf: Buffer, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def _fixed(self, read: Callable[[Buffer, int], tuple[T, int]]) -> T:
        value, self.pos = read(self.buf, self.pos)
        return value

    def int8(self) -> int:
        return self._fixed(read_int8)

    def int16(self) -> int:
        return self._fixed(read_int16)

    def int32(self) -> int:
        return self._fixed(read_int32)

    def int64(self) -> int:
        return self._fixed(read_int64)

    def uint16(self) -> int:
        return self._fixed(read_uint16)

    def uint32(self) -> int:
        return self._fixed(read_uint32)

    def float64(self) -> float:
        return self._fixed(read_float64)

    def bool(self) -> builtins.bool:
        return self._fixed(read_bool)

    def uuid(self) -> builtins.bytes:
        return self._fixed(read_uuid)

    def unsigned_varint(self) -> int:
        return self._fixed(read_unsigned_varint)

    def varint(self) -> int:
        return self._fixed(read_varint)

    def varlong(self) -> int:
        return self._fixed(read_varlong)

    def string(self, compact: builtins.bool = False) -> str:
        return self._fixed(read_compact_string if compact else read_string)

    def nullable_string(self, compact: builtins.bool = False) -> str | None:
        return self._fixed(read_compact_nullable_string if compact else read_nullable_string)

    def bytes(self, compact: builtins.bool = False) -> builtins.bytes:
        return self._fixed(read_compact_bytes if compact else read_bytes)

    def nullable_bytes(self, compact: builtins.bool = False) -> builtins.bytes | None:
        return self._fixed(read_compact_nullable_bytes if compact else read_nullable_bytes)

    def tagged_fields(self) -> dict[int, builtins.bytes] | None:
        return self._fixed(read_tagged_fields)

    def skip_tagged_fields(self) -> None:
        """Step over a tagged-field section (it is still validated)."""
        self.tagged_fields()


#: Precompiled structs for small fixed-width arrays, by struct format character.
ARRAY_STRUCTS: dict[str, tuple[Struct, ...]] = _array_structs
SMALL_ARRAY = _SMALL_ARRAY
